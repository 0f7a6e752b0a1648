#!/usr/bin/env bash
# Reproduces the tables of results/bench-precision.md: three runs of `bench norms --precision
# fp32,bf16,fp16` (the fused kernels in float32 and over 16-bit storage, with PyTorch's rows in
# the same formats when python3 can import torch), threads pinned, merged (median over the runs,
# range in brackets).
#   scripts/bench_precision.sh [BUILD_DIR] [OUT_DIR]      defaults: build, results/bench-runs
# Run it on an idle machine: the other processes' CPU share is recorded in every JSON's context.
set -euo pipefail
source "$(dirname "$0")/bench_env.sh" "$@"
args=(--precision fp32,bf16,fp16 --impl fused --pass fwd,bwd --shapes 4x128x512,8x256x1024,16x512x2048
      --resident-shapes default --threads 1,all)
for i in 1 2 3; do
  echo "== run $i: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  # exit 1 when a row was rejected (PyTorch's bf16/fp16 LayerNorm backward on the CPU is): the
  # rows and the reasons are in the document
  "$build/normlab" bench norms "${args[@]}" "${torch[@]}" --out "$out/precision-$i.json" -q \
    > "$out/precision-$i.txt" || [ $? -eq 1 ]
done
"$build/normlab" bench merge "$out"/precision-{1,2,3}.json --markdown > "$out/precision-merged.md"
echo "wrote $out/precision-merged.md" >&2
