#!/usr/bin/env bash
# Times normlab's training step side by side with the same model in PyTorch (eager and
# torch.compile), interleaved, at 1 and 2 threads, and splits normlab's step into matmul time
# (DNNL_VERBOSE=1) and the rest. Needs PyTorch: pip install torch (never needed by the tests).
#   ./scripts/compare_speed.sh                       # rmsnorm, threads 1,2, 5 repeats
#   NORMLAB_BIN=build-main/normlab ./scripts/compare_speed.sh --norms rmsnorm,layernorm --repeats 3 --perf
# Every option of scripts/torch_baseline.py applies (see --help); method: results/train-speed.md.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/torch_baseline.py --compare "$@"
