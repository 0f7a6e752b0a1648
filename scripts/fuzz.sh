#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan, build-fuzz/) and runs
# each for SECONDS (default 30).
#   ./scripts/fuzz.sh                    every target, 30 s each: config, shapes, bench_json, checkpoint,
#                                        sweep_spec, sbatch
#   ./scripts/fuzz.sh 300 config         one target, 5 minutes
# Seeds: the repository's own configs and bench documents (experiments/*.json,
# results/bench-runs/*.json) plus fuzz/regressions/<target>/ (every past finding, replayed first).
# New corpus entries stay in build-fuzz/corpus/<target>. A finding is written to
# build-fuzz/findings/<target>/ and the script exits 1: add it to fuzz/regressions/<target>/ and
# a case to tests/bad_inputs/catalogue_test.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config shapes bench_json checkpoint sweep_spec sbatch)
./scripts/setup.sh
if ! command -v clang++ >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: installing clang, libclang-rt-dev, libomp-dev" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-dev libomp-dev >/dev/null || true
fi
CXX=${FUZZ_CXX:-$(command -v clang++ || command -v clang++-16 || command -v clang++-14 || true)}
if [ -z "$CXX" ]; then
  echo "fuzz.sh: clang++ not found (apt-get install -y clang libclang-rt-14-dev libomp-dev)" >&2
  exit 1
fi
jobs=$(nproc 2>/dev/null || echo 2)
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX" -DNORMLAB_FUZZ=ON \
        -DNORMLAB_TESTS=OFF -DNORMLAB_CUDA=OFF >/dev/null
fi
cmake --build build-fuzz -j "$jobs" --target "${targets[@]/#/fuzz_}" 2>&1 | grep -E 'error|warning:' >&2 || true
status=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  findings=build-fuzz/findings/$t
  mkdir -p "$corpus" "$findings" "fuzz/regressions/$t"
  case $t in
    config) cp -n experiments/*.json "$corpus"/ 2>/dev/null || true ;;
    bench_json) cp -n results/bench-runs/*.json "$corpus"/ 2>/dev/null || true ;;
    sweep_spec) cp -n experiments/sweep-*.json "$corpus"/ 2>/dev/null || true ;;
  esac
  max_len=4096
  [ "$t" = bench_json ] && max_len=65536
  echo "fuzz_$t: ${seconds} s" >&2
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "build-fuzz/fuzz_$t" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 \
      -artifact_prefix="$findings/" -print_final_stats=1 "$corpus" "fuzz/regressions/$t" \
      > "build-fuzz/fuzz_$t.log" 2>&1; then
    echo "fuzz_$t: FINDING (build-fuzz/fuzz_$t.log, $findings/)" >&2
    tail -30 "build-fuzz/fuzz_$t.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "build-fuzz/fuzz_$t.log" | tail -1 >&2 || true
  fi
done
exit $status
