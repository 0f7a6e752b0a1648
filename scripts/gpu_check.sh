#!/usr/bin/env bash
# The GPU check (issue 15), one unattended run on a machine with an NVIDIA GPU (written for an
# H200: sm_90, CUDA 13.0, PyTorch installed); about 3-5 minutes:
#   1. builds normlab with the CUDA backend required (NORMLAB_CUDA=ON) for sm_90 + PTX, in build-gpu/
#   2. runs the GPU tests: every Kernel* cross-backend test against the reference for "cuda"
#      (outputs poisoned with NaN before each kernel) and the Cuda* tests, with
#      NORMLAB_CUDA_SYNC=1 so that a faulting kernel is named
#   3. gradcheck --device cuda: float32 GPU gradients against the float64 reference
#   4. bench norms --device cuda, f32 and bf16, default shapes + 16384x8192, with the device copy
#      bandwidth measured in the same run
#   5. torch.nn.functional.layer_norm / rms_norm on the same shapes (skipped when torch is not
#      importable or has no CUDA)
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
   cmake --build "$BUILD" -j "$jobs" --target normlab test_backends >"$BUILD/gpu-build.log" 2>&1; then
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
if dev=$("$NL" bench norms --device cuda --shapes 1x8x64 --repeats 1 2>&1 | grep -m1 -E '^(device:|error:)'); then echo "$dev"; fi
if [[ ${dev:-} == *"device(s)"* ]]; then result[device]=ok; else result[device]="no device"; fail "the binary sees no CUDA device"; fi

step "2. GPU tests (Kernel*/cuda, Cuda*)"
if NORMLAB_CUDA_SYNC=1 timeout 240 "$BUILD/test_backends" --gtest_filter='*Kernel*/cuda:Cuda*' \
     --gtest_brief=1 >"$OUT/gpu-tests.txt" 2>&1; then
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

step "4. bench norms --device cuda ($SHAPES; f32, bf16)"
if timeout 240 "$NL" bench norms --device cuda --dtypes f32,bf16 --shapes "$SHAPES" --repeats 20 \
     --out "$OUT/bench-cuda.json" >"$OUT/bench-cuda.txt" 2>&1; then
  result[bench]=ok
else
  result[bench]=FAILED
  fail "bench norms --device cuda failed (see $OUT/bench-cuda.txt)"
fi
cat "$OUT/bench-cuda.txt"

step "5. PyTorch's layer_norm / rms_norm on the same shapes"
PY=${PYTHON:-python3}
timeout 180 "$PY" - "$SHAPES" "$OUT/torch-cuda.json" <<'EOF' 2>&1 | tee "$OUT/torch-cuda.txt"
import json, sys
shapes, out = sys.argv[1].split(","), sys.argv[2]
try:
    import torch
    import torch.nn.functional as F
    assert torch.cuda.is_available(), "torch sees no CUDA device"
except Exception as e:  # no torch, or no CUDA build of it
    print(f"torch: skipped ({e})")
    json.dump({"skipped": str(e)}, open(out, "w"))
    sys.exit(0)
rows = []
def timed(fn, reps=20, warm=3):
    for _ in range(warm): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
for s in shapes:
    B, T, D = (int(v) for v in s.split("x"))
    for dt in (torch.float32, torch.bfloat16):
        for norm in ("layernorm", "rmsnorm"):
            if norm == "rmsnorm" and not hasattr(F, "rms_norm"):
                continue
            x = torch.randn(B * T, D, device="cuda", dtype=dt).mul_(2).add_(0.5).requires_grad_(True)
            w = torch.randn(D, device="cuda", dtype=dt).mul_(0.5).add_(1).requires_grad_(True)
            bias = torch.randn(D, device="cuda", dtype=dt).mul_(0.5).requires_grad_(True)
            dy = torch.randn_like(x)
            f = (lambda: F.layer_norm(x, (D,), w, bias, 1e-5)) if norm == "layernorm" else (lambda: F.rms_norm(x, (D,), w, 1e-5))
            with torch.no_grad():
                fwd = timed(f)
            y = f()
            params = (x, w, bias) if norm == "layernorm" else (x, w)
            bwd = timed(lambda: torch.autograd.grad(y, params, dy, retain_graph=True))
            es = x.element_size()
            n = B * T * D
            rows.append({"norm": norm, "dtype": "bf16" if dt == torch.bfloat16 else "f32", "shape": s,
                         "fwd_ms": fwd, "bwd_ms": bwd, "fwd_gbs": 2 * n * es / fwd / 1e6, "bwd_gbs": 3 * n * es / bwd / 1e6})
            r = rows[-1]
            print(f"torch {norm:9s} {r['dtype']:4s} {s:14s} fwd {1e3*fwd:9.1f} us {r['fwd_gbs']:7.1f} GB/s   bwd {1e3*bwd:9.1f} us {r['bwd_gbs']:7.1f} GB/s")
            del x, w, bias, dy, y
            torch.cuda.empty_cache()
json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rows": rows}, open(out, "w"), indent=1)
EOF

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
cuda = load(os.path.join(out, "bench-cuda.json")) or {}
torch = load(os.path.join(out, "torch-cuda.json")) or {}
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
tmap = {(r["norm"], r["dtype"], r["shape"]): r for r in torch.get("rows", [])}
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = ["# GPU check (scripts/gpu_check.sh)", "",
      f"Run {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}, commit {commit}, {seconds} s.",
      f"Device: {cuda.get('device', '?')}; PyTorch: {torch.get('torch', torch.get('skipped', 'not run'))}.", "",
      f"Copy bandwidth (device to device, read + write): cudaMemcpy {cuda.get('copy_memcpy_gbs', float('nan')):.1f} GB/s, "
      f"copy kernel {cuda.get('copy_kernel_gbs', float('nan')):.1f} GB/s; % columns are of the larger.", "",
      "| norm | dtype | shape | fwd us | fwd GB/s | fwd % copy | bwd us | bwd GB/s | bwd % copy | torch fwd us | torch bwd us | vs torch fwd | vs torch bwd |",
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in cuda.get("rows", []):
    t = tmap.get((r["norm"], r["dtype"], r["shape"]))
    tf = f"{1e3*t['fwd_ms']:.1f}" if t else "-"
    tb = f"{1e3*t['bwd_ms']:.1f}" if t else "-"
    sf = f"{t['fwd_ms']/r['fwd_ms']:.2f}x" if t else "-"
    sb = f"{t['bwd_ms']/r['bwd_ms']:.2f}x" if t else "-"
    md.append(f"| {r['norm']} | {r['dtype']} | {r['shape']} | {1e3*r['fwd_ms']:.1f} | {r['fwd_gbs']:.0f} | {r['fwd_pct_copy']:.0f} | "
              f"{1e3*r['bwd_ms']:.1f} | {r['bwd_gbs']:.0f} | {r['bwd_pct_copy']:.0f} | {tf} | {tb} | {sf} | {sb} |")
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
