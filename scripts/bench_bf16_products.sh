#!/usr/bin/env bash
# Times a bf16 run's training step with the CPU's native bf16 products against the same run with
# them emulated (ONEDNN_MAX_CPU_ISA below avx512_core_bf16: float32 products of bf16 values) and
# against the float32 run, interleaved, at 1 and 2 threads, on gpt-large (6 layers, d_model 256,
# d_hidden 1024, 4 heads, seq_len 256, batch 8; results/train-speed.md) by default. Prints one line
# per run: config, threads, median seconds per step over the timed intervals, final loss.
#   ./scripts/bench_bf16_products.sh [--rounds 3] [--steps 24] [--threads 1,2] [-- extra train flags]
# Needs a CPU whose oneDNN ISA has bf16 dot products for the native rows (normlab --version says).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NORMLAB_BIN:-build/normlab}
rounds=3 steps=24 threads=1,2
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
model=(--model gpt --layers 6 --d_model 256 --d_hidden 1024 --heads 4 --seq_len 256 --batch_size 8 --norm rmsnorm)
[ $# -gt 0 ] && model=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" --version | grep -i "bf16 products"
for round in $(seq "$rounds"); do
  for t in ${threads//,/ }; do
    for config in fp32 bf16-native bf16-emulated; do
      precision=${config%%-*}
      env=()
      [ "$config" = bf16-emulated ] && env=(ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI)
      out="$work/$config-$t-$round"
      env "${env[@]}" "$bin" train "${model[@]}" --precision "$precision" --threads "$t" --steps "$steps" \
        --eval_every $((steps / 4)) --out "$out" -q > /dev/null
      python3 - "$out" "$config" "$t" <<'PY'
import json, statistics, sys
out, config, threads = sys.argv[1:]
times = [json.loads(l)["seconds_per_step"] for l in open(f"{out}/timing.jsonl") if l.strip()]
result = json.load(open(f"{out}/result.json"))
timed = times[1:] if len(times) > 1 else times  # the first interval holds the warm-up
loss = result["final_val_loss"]
print(f"{config:14s} threads {threads}  {statistics.median(timed) * 1e3:9.1f} ms/step  "
      f"products {result.get('versions', {}).get('bf16_products', '?')}  final val loss {loss:.6f}")
PY
    done
  done
done
