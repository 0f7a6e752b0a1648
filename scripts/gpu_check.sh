#!/usr/bin/env bash
# The GPU check, one unattended run on a machine with an NVIDIA GPU (written for an
# H200: sm_90, CUDA 13.0, PyTorch installed); about 3-5 minutes:
#   1. builds normlab with the CUDA backend required (NORMLAB_CUDA=ON) for sm_90 + PTX, in build-gpu/
#   2. runs the GPU tests: every op case against the reference for "cuda" (OpCases*/cuda, on
#      device-resident tensors, outputs poisoned with NaN before each kernel) and the Cuda* tests, with
#      NORMLAB_CUDA_SYNC=1 so that a faulting kernel is named and NORMLAB_REQUIRE_CUDA=1 so that
#      a test that would skip for want of a GPU fails instead
#   3. gradcheck --device cuda: float32 GPU gradients against the float64 reference
#   4. bench norms --device cuda, f32 and bf16, default shapes + 16384x8192: every case checked
#      against the reference kernels, then the backend's kernels timed through the Backend
#      interface (batches of calls on the rotated device buffers, to the last one's completion)
#      against its copy (cudaMemcpy) and its elementwise kernel as a copy; DyT and Derf (f32) beside RMSNorm,
#      "DyT speed vs RMS" in bench-cuda.txt's summary
#   5. PyTorch's LayerNorm / RMSNorm on the same shapes, dtypes and rotation, in the same
#      document: scripts/torch_bench.py --device cuda, run by step 4's --with-torch (its rows
#      checked against float64 and timed the same way; missing when torch is not importable
#      or has no CUDA)
#   6. 200 steps of the toy model on cpu and on cuda, same seed: loss curves compared (1e-3 relative)
#   7. a summary table, last; also written to results/bench-gpu.md
# Exit status: 0 when every check passed, 1 otherwise (the summary says which).
#   ./scripts/gpu_check.sh            (OUT=dir to keep the raw files elsewhere; default build-gpu/gpu-check)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-$BUILD/gpu-check}
REPORT=${REPORT:-results/bench-gpu.md}
SHAPES=${SHAPES:-4x128x512,8x256x1024,16x512x2048,32x1024x4096,1x16384x8192}
export STEPS=${STEPS:-200}
start=$(date +%s)
status=0
declare -A result

step() { echo; echo "== $* ($(( $(date +%s) - start )) s)"; }
fail() { status=1; echo "gpu_check: $*" >&2; }

step "machine"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
command -v nvcc >/dev/null && nvcc --version | tail -2

step "1. build (sm_90 + PTX) in $BUILD"
./scripts/setup.sh || echo "gpu_check: setup.sh could not install what is missing; building with what is there" >&2
jobs=$(nproc 2>/dev/null || echo 8)
mkdir -p "$BUILD"
if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNORMLAB_CUDA=ON -DNORMLAB_TESTS=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=90-real;90-virtual" >"$BUILD/gpu-configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$jobs" --target normlab test_backends test_opcases >"$BUILD/gpu-build.log" 2>&1; then
  result[build]=ok
  grep -E "warning" "$BUILD/gpu-build.log" | head -20 || true
else
  result[build]=FAILED
  tail -40 "$BUILD/gpu-configure.log" "$BUILD/gpu-build.log" >&2
  echo "gpu_check: the build failed; nothing else can run" >&2
  exit 1
fi
mkdir -p "$OUT"
NL="$ROOT/$BUILD/normlab"
"$NL" --version
# --version does not load the CUDA module (docs/cuda.md); a command that asks for the device does,
# and names it.
if dev=$("$NL" bench norms --device cuda --shapes 1x8x64 --pass fwd --repeats 1 --min-time 0 --footprint-mib 1 2>&1 |
         grep -m1 -E '^(device:|error:)'); then echo "$dev"; fi
if [[ ${dev:-} == *"device(s)"* ]]; then result[device]=ok; else result[device]="no device"; fail "the binary sees no CUDA device"; fi

step "2. GPU tests (OpCases*/cuda, Cuda*)"
gpu_tests() {  # both programs run; either failing fails the step
  local rc=0
  NORMLAB_CUDA_SYNC=1 NORMLAB_REQUIRE_CUDA=1 timeout 240 "$BUILD/test_opcases" --gtest_filter='*OpCases*/cuda' \
    --gtest_brief=1 || rc=1
  NORMLAB_CUDA_SYNC=1 NORMLAB_REQUIRE_CUDA=1 timeout 240 "$BUILD/test_backends" --gtest_filter='Cuda*' \
    --gtest_brief=1 || rc=1
  return $rc
}
if gpu_tests >"$OUT/gpu-tests.txt" 2>&1; then
  result[tests]="ok ($(grep -c '^\[       OK \]' "$OUT/gpu-tests.txt" || true) passed)"
else
  result[tests]="FAILED"
  fail "GPU tests failed (see $OUT/gpu-tests.txt)"
fi
tail -25 "$OUT/gpu-tests.txt"
grep -q "SKIPPED" "$OUT/gpu-tests.txt" && { result[tests]="${result[tests]}, some SKIPPED"; grep -A2 SKIPPED "$OUT/gpu-tests.txt" | head -5; }

step "3. gradcheck --device cuda"
if timeout 120 "$NL" gradcheck --device cuda >"$OUT/gradcheck.txt" 2>&1; then
  result[gradcheck]=ok
else
  result[gradcheck]=FAILED
  fail "gradcheck --device cuda failed (see $OUT/gradcheck.txt)"
fi
tail -3 "$OUT/gradcheck.txt"

step "4-5. bench norms --device cuda ($SHAPES; f32, bf16), PyTorch's rows beside them"
PY=${PYTHON:-python3}
if timeout 900 "$NL" bench norms --device cuda --dtypes f32,bf16 --shapes "$SHAPES" --repeats 20 \
     --with-torch --python "$PY" --out "$OUT/bench-cuda.json" >"$OUT/bench-cuda.txt" 2>&1; then
  result[bench]=ok
else
  result[bench]=FAILED
  fail "bench norms --device cuda failed (see $OUT/bench-cuda.txt)"
fi
cat "$OUT/bench-cuda.txt"

step "6. $STEPS toy steps, cpu vs cuda, same seed"
train_ok=1
for dev in cpu cuda; do
  rm -rf "$OUT/train-$dev"
  if ! timeout 240 "$NL" train --model toy --steps "$STEPS" --eval_every 10 --seed 0 --device "$dev" \
        --out "$OUT/train-$dev" -q >"$OUT/train-$dev.txt" 2>&1; then
    train_ok=0
    fail "train --device $dev failed (see $OUT/train-$dev.txt)"
    tail -5 "$OUT/train-$dev.txt"
  fi
done
if [ $train_ok = 1 ]; then result[train]=ran; else result[train]=FAILED; fi

step "7. summary"
"$PY" - "$OUT" "$REPORT" "$train_ok" "${result[build]}" "${result[device]}" "${result[tests]}" \
     "${result[gradcheck]}" "${result[bench]}" "$(( $(date +%s) - start ))" <<'EOF'
import json, os, sys, datetime, subprocess
out, report, train_ok = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
build, device, tests, gradcheck, bench, seconds = sys.argv[4:10]
def load(p):
    try: return json.load(open(p))
    except Exception: return None
doc = load(os.path.join(out, "bench-cuda.json")) or {}
ctx = doc.get("context", {})
rows = [r for r in doc.get("benchmarks", []) if r.get("device") == "cuda"]
lines, ok = [], True
# loss curves
curve_line = "not run"
if train_ok:
    def losses(dev):
        rows = [json.loads(l) for l in open(os.path.join(out, f"train-{dev}", "metrics.jsonl"))]
        return [(r["step"], r["train_loss"], r["val_loss"]) for r in rows]
    try:
        a, b = losses("cpu"), losses("cuda")
        worst = 0.0
        for (s1, t1, v1), (s2, t2, v2) in zip(a, b):
            assert s1 == s2
            for x, y in ((t1, t2), (v1, v2)):
                worst = max(worst, abs(x - y) / max(abs(x), 1e-12))
        agree = len(a) == len(b) and worst <= 1e-3
        ok = ok and agree
        curve_line = f"{'ok' if agree else 'DIFFER'}: {len(a)} evals, max relative difference {worst:.2e} (target 1e-3); final val loss cpu {a[-1][2]:.5f} cuda {b[-1][2]:.5f}"
    except Exception as e:
        ok = False
        curve_line = f"FAILED to compare: {e}"
else:
    ok = False
ok = ok and build == "ok" and device == "ok" and tests.startswith("ok") and gradcheck == "ok" and bench == "ok"
# bench norms' document (docs/bench.md): one row per (norm, impl, pass, shape, dtype).
def key(r):
    return (r["norm"], r["impl"], r["pass"], "x".join(str(v) for v in r["shape"]), r.get("dtype", "f32"))
at = {key(r): r for r in rows}
def us(r):
    m = (r or {}).get("aggregates", {}).get("median")
    return f"{m:.1f}" if r and r.get("status") == "ok" and m is not None else "-"
def counter(r, name, spec, unit=""):
    v = (r or {}).get("counters", {}).get(name)
    return format(v, spec) + unit if r and r.get("status") == "ok" and v is not None else "-"
torch_ver = ctx.get("library_versions", {}).get("PyTorch")
torch_note = f"PyTorch {torch_ver} (scripts/torch_bench.py --device cuda)" if torch_ver else "PyTorch: not run (see bench-cuda.txt)"
rejected = [r["name"] for r in doc.get("benchmarks", []) if r.get("status") != "ok"]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = ["# GPU check (scripts/gpu_check.sh)", "",
      f"Run {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}, commit {commit}, {seconds} s.",
      f"Device: {ctx.get('device', '?')}; {torch_note}.", "",
      "Times are medians per call (us) over samples of a batch of calls, each call on the next of the rotated device "
      "buffer sets, timed to the last one's completion; % copy is of the backend's elementwise kernel as a copy on the "
      "same buffers (copy GB/s; cudaMemcpy beside it); every row "
      "was checked against the float64 reference first (bf16: with bf16's rounding).", "",
      "| norm | dtype | shape | copy GB/s | cudaMemcpy GB/s | fwd us | fwd GB/s | fwd % copy | bwd us | bwd GB/s | bwd % copy | addfwd us | torch fwd us | torch bwd us | vs torch fwd | vs torch bwd |",
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
seen = []
for r in rows:
    k = (r["norm"], "x".join(str(v) for v in r["shape"]), r.get("dtype", "f32"))
    if r["norm"] == "copy" or k in seen:
        continue
    seen.append(k)
    norm, shape, dt = k
    f, b, a = at.get((norm, "fused", "fwd", shape, dt)), at.get((norm, "fused", "bwd", shape, dt)), at.get((norm, "fused", "addfwd", shape, dt))
    tf, tb = at.get((norm, "torch", "fwd", shape, dt)), at.get((norm, "torch", "bwd", shape, dt))
    cl = next((x for x in rows if x["norm"] == "copy" and x["impl"] == "loop" and key(x)[3] == shape), None)
    cm = next((x for x in rows if x["norm"] == "copy" and x["impl"] == "memcpy" and key(x)[3] == shape), None)
    md.append(f"| {norm} | {dt} | {shape} | {counter(cl, 'gb_per_s', '.0f')} | {counter(cm, 'gb_per_s', '.0f')} | "
              f"{us(f)} | {counter(f, 'gb_per_s', '.0f')} | {counter(f, 'pct_of_copy_loop', '.0f')} | "
              f"{us(b)} | {counter(b, 'gb_per_s', '.0f')} | {counter(b, 'pct_of_copy_loop', '.0f')} | {us(a)} | "
              f"{us(tf)} | {us(tb)} | {counter(f, 'vs_torch', '.2f', 'x')} | {counter(b, 'vs_torch', '.2f', 'x')} |")
if rejected:
    md += ["", "Rejected (failed the check, not timed): " + ", ".join(rejected)]
md += ["", "Targets (issue 15): forward >= 90% of copy at the large shapes, backward >= 75%; at least as fast as "
       "PyTorch (the 'vs torch' columns are torch time / normlab time: > 1 is faster than torch).", "",
       "| check | result |", "|---|---|",
       f"| build (sm_90 + PTX) | {build} |", f"| device | {device} |", f"| GPU tests | {tests} |",
       f"| gradcheck --device cuda | {gradcheck} |", f"| bench norms --device cuda | {bench} |",
       f"| toy loss curves cpu vs cuda ({os.environ.get('STEPS', '200')} steps, same seed) | {curve_line} |",
       f"| overall | {'PASS' if ok else 'FAIL'} |"]
text = "\n".join(md) + "\n"
os.makedirs(os.path.dirname(report) or ".", exist_ok=True)
open(report, "w").write(text)
print(text)
print(f"written to {report}")
sys.exit(0 if ok else 1)
EOF
[ $? = 0 ] || status=1
exit $status
