#!/usr/bin/env bash
# Reproduces results/bench-cpu.md: three runs of `bench norms` (with PyTorch's rows when python3
# can import torch) and of `bench step`, threads pinned, then each set merged into one table
# (median over the runs, range in brackets).
#   scripts/bench_cpu.sh [BUILD_DIR] [OUT_DIR]      defaults: build, results/bench-runs
# (BUILD_DIR holds the normlab binary; copy it elsewhere first if you rebuild while this runs.)
# Run it on an idle machine: the load average is recorded in every JSON's context.
set -euo pipefail
source "$(dirname "$0")/bench_env.sh" "$@"
for i in 1 2 3; do
  echo "== run $i: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$build/normlab" bench norms "${torch[@]}" --out "$out/norms-$i.json" -q > "$out/norms-$i.txt"
  "$build/normlab" bench step --out "$out/step-$i.json" -q > "$out/step-$i.txt"
done
"$build/normlab" bench merge "$out"/norms-{1,2,3}.json --markdown > "$out/norms-merged.md"
"$build/normlab" bench merge "$out"/norms-{1,2,3}.json --out "$out/norms-merged.json" -q > /dev/null
"$build/normlab" bench merge "$out"/step-{1,2,3}.json --markdown > "$out/step-merged.md"
echo "wrote $out/norms-merged.md and $out/step-merged.md" >&2
