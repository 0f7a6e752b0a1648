#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and the CUDA toolkit: builds normlab with the CUDA
# sources required (NORMLAB_CUDA=ON) in build-gpu/ and shows what the binary sees. Today the CUDA
# part is a device query; the script grows with the CUDA backend.
#   ./scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
BUILD_DIR=build-gpu ./scripts/build.sh -DNORMLAB_CUDA=ON -DNORMLAB_TESTS=OFF
./build-gpu/normlab --version
./build-gpu/normlab --version | grep -q "device(s)" || { echo "gpu_check: the binary sees no CUDA device" >&2; exit 1; }
./build-gpu/normlab gradcheck -q | tail -2
