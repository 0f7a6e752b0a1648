#!/usr/bin/env bash
# RUN BY HAND, NOT BY CI: rebuilds the cuda-sim module once per mutation (about a minute each on
# two cores, some twenty of them).
#
# Proves that the cuda-sim run of the kernel suites catches broken kernels. Each mutation of a
# kernel source in src/backends/cuda (block_reduce in common.cuh, the norm kernels in norms.cu,
# column_partial_kernel in columns.cu) is applied to its file in place (the sources are copied
# aside first and put back after every mutation, and on any exit), the module normlab_cuda_sim and
# the programs test_opcases and test_backends are rebuilt (all: the module and the programs that
# load it must carry the same build id, whose commit is "-dirty" while a mutation is applied), and
# `--gtest_filter='*cuda_sim*'` of the two (the op cases, the CudaDevice tests) must FAIL, on a
# test, with the module loaded:
#   - every single `__syncthreads();` line of block_reduce, of the norm kernels
#     (norm_forward_kernel, norm_backward_dx_kernel, norm_backward_onepass_kernel) and of
#     column_partial_kernel (the norm backward's dgamma/dbeta reduction), deleted, one at a time;
#   - every `for (int64_t u = threadIdx.x; u < units; ...)` loop of the norm kernels, one at a
#     time: the bound shifted (`u <= units`), and the start shifted (`u = threadIdx.x + 1`).
# Prints a table (mutation, line, result: caught / MISSED) and exits 1 when a mutation was missed,
# did not build or could not be tested (the module not loaded), 2 when the unmutated suite does
# not pass (nothing can be concluded then). The build tree is left rebuilt from the original.
#
# Usage: scripts/cuda_sim_mutations.sh [--list] [--only REGEX]
#   --list        print the mutations and exit
#   --only REGEX  run only the mutations whose name matches REGEX (grep -E)
# Environment: BUILD_DIR (default build: a tree configured by scripts/build.sh), JOBS (default 2),
#   FILTER (gtest filter, default '*cuda_sim*'), TEST_TIMEOUT (seconds per program's run, default 900),
#   KEEP_LOGS=1 (keep the build and test logs of every mutation; their folder is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
FILTER=${FILTER:-'*cuda_sim*'}
TEST_TIMEOUT=${TEST_TIMEOUT:-900}
SRC=src/backends/cuda
LIST=0
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --list) LIST=1 ;;
    --only) ONLY=${2:?--only needs a regex}; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cuda_sim_mutations.XXXXXX")
mkdir -p "$WORK/orig"
cp "$SRC"/*.cu "$SRC"/*.cuh "$SRC"/*.h "$WORK/orig/"
restored=1
MUTATED=""
restore() {
  # A plain copy (new mtime): make rebuilds the module from the original.
  [ -n "$MUTATED" ] && cp "$WORK/orig/$(basename "$MUTATED")" "$MUTATED"
  restored=1
}
on_exit() {
  local rc=$?
  if [ "$restored" -eq 0 ]; then
    restore
    echo "interrupted: $MUTATED restored; rebuild before using $BUILD_DIR:" \
         "cmake --build $BUILD_DIR --target normlab_cuda_sim test_opcases test_backends" >&2
  fi
  for f in "$WORK"/orig/*; do
    if ! cmp -s "$f" "$SRC/$(basename "$f")"; then
      echo "ERROR: $SRC/$(basename "$f") differs from its original, kept at $f" >&2
      exit 3
    fi
  done
  if [ "${KEEP_LOGS:-0}" = 1 ]; then
    echo "logs kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- the mutations: one mutated copy of a source per mutation, and a list
# (name <TAB> line <TAB> mutant <TAB> the source it replaces) -----------------------------------
python3 - "$WORK/orig" "$WORK" "$SRC" > "$WORK/mutations.tsv" <<'PY'
import glob, os, re, sys

orig_dir, out_dir, src_dir = sys.argv[1], sys.argv[2], sys.argv[3]
files = {os.path.basename(p): open(p).read().split("\n") for p in sorted(glob.glob(orig_dir + "/*"))}

def code(line):
    return line.split("//", 1)[0]

def body(name, kind):
    """The file of function `name` and the line indices [first, last] of its definition."""
    pat = re.compile(r"^\s*" + kind + r"\s[^(]*\b" + name + r"\s*\(")
    found = [(f, i) for f, ls in files.items() for i, l in enumerate(ls) if pat.search(l)]
    if len(found) != 1:
        sys.exit(f"cuda_sim_mutations: {len(found)} definitions of {name} in {src_dir}")
    f, start = found[0]
    lines = files[f]
    depth, opened = 0, False
    for i in range(start, len(lines)):
        for ch in code(lines[i]):
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
        if opened and depth == 0:
            return f, start, i
    sys.exit(f"cuda_sim_mutations: unbalanced braces in {name}")

norm_kernels = ["norm_forward_kernel", "norm_backward_dx_kernel", "norm_backward_onepass_kernel"]
barrier_funcs = [("block_reduce", "__device__")] + [(k, "__global__") for k in norm_kernels] + \
                [("column_partial_kernel", "__global__")]
mutations = []  # (name, line index, new line)

for func, kind in barrier_funcs:
    f, first, last = body(func, kind)
    k = 0
    for i in range(first, last + 1):
        if code(files[f][i]).strip() == "__syncthreads();":
            k += 1
            mutations.append((f"{func}: delete __syncthreads() #{k}", f, i, ""))

loop = "for (int64_t u = threadIdx.x; u < units; u += blockDim.x)"
for func in norm_kernels:
    f, first, last = body(func, "__global__")
    lines = files[f]
    k = 0
    for i in range(first, last + 1):
        if loop in lines[i]:
            k += 1
            mutations.append((f"{func}: u loop #{k}: u < units -> u <= units", f, i,
                              lines[i].replace("u < units", "u <= units")))
            mutations.append((f"{func}: u loop #{k}: u = threadIdx.x -> threadIdx.x + 1", f, i,
                              lines[i].replace("u = threadIdx.x;", "u = threadIdx.x + 1;")))
    if k == 0:
        sys.exit(f"cuda_sim_mutations: no u loop found in {func}")

for n, (name, f, i, new) in enumerate(mutations):
    lines = files[f]
    assert new != lines[i]
    mutated = lines[:i] + [new] + lines[i + 1:]  # same line count: compiler messages keep their lines
    path = f"{out_dir}/mutant_{n:02d}"
    open(path, "w").write("\n".join(mutated))
    print(f"{name}\t{f}:{i + 1}\t{path}\t{src_dir}/{f}")
PY

if [ -n "$ONLY" ]; then
  grep -E -- "$ONLY" "$WORK/mutations.tsv" > "$WORK/selected.tsv" || true
else
  cp "$WORK/mutations.tsv" "$WORK/selected.tsv"
fi
if [ "$LIST" -eq 1 ]; then
  awk -F'\t' '{printf "line %-5s %s\n", $2, $1}' "$WORK/selected.tsv"
  exit 0
fi
count=$(wc -l < "$WORK/selected.tsv")
[ "$count" -gt 0 ] || { echo "no mutation selected" >&2; exit 2; }
[ -f "$BUILD_DIR/Makefile" ] || { echo "$BUILD_DIR is not a configured build tree (run scripts/build.sh)" >&2; exit 2; }
BIN=$(cd "$BUILD_DIR" && pwd)

build_targets() {  # $1: log file
  cmake --build "$BUILD_DIR" --target normlab_cuda_sim test_opcases test_backends -j "$JOBS" > "$1" 2>&1
}
# A run in which the module was refused (another build's id) fails every test without testing
# anything.
module_refused() { grep -q "cuda-sim is not available" "$1"; }
run_suite() {  # $1: log file; the first failing program's exit status (both run)
  local rc=0 status program
  for program in test_opcases test_backends; do
    status=0
    (cd "$BIN" && timeout "$TEST_TIMEOUT" "./$program" --gtest_filter="$FILTER") >> "$1" 2>&1 || status=$?
    [ "$rc" -ne 0 ] || rc=$status
  done
  return "$rc"
}

# ---- the unmutated suite must pass -----------------------------------------------------------
echo "baseline: building normlab_cuda_sim, test_opcases and test_backends in $BUILD_DIR ..." >&2
if ! build_targets "$WORK/baseline_build.log"; then
  tail -30 "$WORK/baseline_build.log" >&2
  echo "the unmutated tree does not build" >&2
  exit 2
fi
if ! run_suite "$WORK/baseline_test.log"; then
  tail -30 "$WORK/baseline_test.log" >&2
  echo "the unmutated suite fails: no mutation result would mean anything" >&2
  exit 2
fi
baseline_tests=$(grep -oE '^\[==========\] [0-9]+ tests' "$WORK/baseline_test.log" | grep -oE '[0-9]+' |
                 awk '{ n += $1 } END { print NR ? n : "?" }')
echo "baseline: $baseline_tests tests pass (filter $FILTER)" >&2

# ---- each mutation ---------------------------------------------------------------------------------
results=()
missed=0
n=0
while IFS=$'\t' read -r name line file target; do
  n=$((n + 1))
  echo "[$n/$count] $name ($line) ..." >&2
  restored=0
  MUTATED=$target
  cp "$file" "$target"
  if ! build_targets "$WORK/build_$n.log"; then
    result="BUILD FAILED"
    evidence=$(grep -m1 -E 'error' "$WORK/build_$n.log" | cut -c1-100 || true)
    missed=$((missed + 1))
  else
    set +e
    run_suite "$WORK/test_$n.log"
    rc=$?
    set -e
    if [ "$rc" -eq 0 ]; then
      result="MISSED"
      evidence="all $baseline_tests tests pass"
      missed=$((missed + 1))
    elif module_refused "$WORK/test_$n.log"; then
      result="NOT TESTED"
      evidence=$(grep -m1 -o "cuda-sim is not available[^\"]*" "$WORK/test_$n.log" | cut -c1-100)
      missed=$((missed + 1))
    elif [ "$rc" -eq 124 ]; then
      result="caught"
      evidence="the suite timed out after ${TEST_TIMEOUT}s"
    else
      result="caught"
      # One "[  FAILED  ] Suite.Test/param, where GetParam() = ... (N ms)" line per failed test.
      failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$WORK/test_$n.log" || true)
      first=$(grep -m1 -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$WORK/test_$n.log" |
              sed -E 's/^\[  FAILED  \] //; s/, where GetParam.*//; s/ \([0-9]+ ms\)$//' || true)
      if [ "$failed" -gt 0 ]; then
        evidence="$failed failed, first $first"
      else
        evidence="exit status $rc: $(tail -1 "$WORK/test_$n.log" | cut -c1-80)"
      fi
    fi
  fi
  restore
  echo "    -> $result ($evidence)" >&2
  results+=("$name"$'\t'"$line"$'\t'"$result"$'\t'"$evidence")
done < "$WORK/selected.tsv"

# Leave the build tree as the original source: rebuilt from it, and the suite passing again.
echo "rebuilding from the original sources ..." >&2
if ! build_targets "$WORK/final_build.log"; then
  tail -20 "$WORK/final_build.log" >&2
  echo "the final rebuild failed" >&2
  missed=$((missed + 1))
elif ! run_suite "$WORK/final_test.log"; then
  tail -20 "$WORK/final_test.log" >&2
  echo "the restored suite fails" >&2
  missed=$((missed + 1))
fi

printf '\n%-62s %-16s  %-12s %s\n' "mutation (src/backends/cuda)" "file:line" "result" "evidence"
printf '%s\n' "$(printf -- '-%.0s' $(seq 1 140))"
for r in "${results[@]}"; do
  IFS=$'\t' read -r name line result evidence <<< "$r"
  printf '%-62s %-16s  %-12s %s\n' "$name" "$line" "$result" "$evidence"
done
echo
if [ "$missed" -gt 0 ]; then
  echo "$missed of $count mutations MISSED (or did not build)"
  exit 1
fi
echo "all $count mutations caught"
