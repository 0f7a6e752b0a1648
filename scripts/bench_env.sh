# Sourced by the bench scripts (bench_cpu.sh, bench_precision.sh) with their arguments: the
# repository root as working directory, `build` (BUILD_DIR, default build) and `out` (OUT_DIR,
# default results/bench-runs, created), OpenMP threads pinned to cores, and `torch` holding
# --with-torch when python3 can import torch (PyTorch's rows beside normlab's).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
out=${2:-results/bench-runs}
mkdir -p "$out"
export OMP_PROC_BIND=close OMP_PLACES=cores
torch=()
if python3 -c "import torch" 2>/dev/null; then torch=(--with-torch); fi
