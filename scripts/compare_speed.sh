#!/usr/bin/env bash
# Times normlab's training step side by side with the same model in PyTorch (eager and
# torch.compile), interleaved, at 1 and 2 threads, and splits normlab's step into matmul time
# (DNNL_VERBOSE=1) and the rest. Needs PyTorch: pip install torch (never needed by the tests).
# The toy model (prefix-mean mixer) by default; --model gpt times the attention model, PyTorch's
# attention being F.scaled_dot_product_attention(is_causal=True). normlab runs with the same
# --model/--heads/--qk_norm/--layers/--d_model/--d_hidden/--vocab/--seq_len/--batch_size.
#   ./scripts/compare_speed.sh                       # toy, rmsnorm, threads 1,2, 5 repeats
#   NORMLAB_BIN=build-main/normlab ./scripts/compare_speed.sh --norms rmsnorm,layernorm --repeats 3 --perf
#   # gpt, default config (20 layers, d_model 64, d_hidden 128, 4 heads, vocab 64, seq_len 16, batch 32):
#   ./scripts/compare_speed.sh --model gpt --norms rmsnorm,layernorm --repeats 3 --out_json /tmp/speed-gpt.json
#   # gpt where the products dominate (about 70 GFLOP per step, 50x the toy's, so fewer steps per run):
#   ./scripts/compare_speed.sh --model gpt --layers 6 --d_model 256 --d_hidden 1024 --heads 4 --seq_len 256 \
#       --batch_size 8 --norms rmsnorm,layernorm --repeats 3 --normlab_steps 40 --steps 30 --warmup 5 \
#       --gemm_steps 30 --out_json /tmp/speed-gpt-large.json
#   python3 scripts/torch_baseline.py --model gpt --check_init   # same parameters and loss at init as normlab
# Every option of scripts/torch_baseline.py applies (see --help); method: results/train-speed.md.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/torch_baseline.py --compare "$@"
