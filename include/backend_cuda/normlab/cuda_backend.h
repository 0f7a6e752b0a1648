// The "cuda" backend: normlab's own CUDA kernels (norms, elementwise, softmax, attention, loss,
// embedding, Adam) and cuBLAS for the matrix products, float32. Built when the CUDA toolkit is
// found (NORMLAB_CUDA=AUTO), as the module libnormlab_cuda.so that these functions load on
// first use (src/backends/cuda_loader); without it, src/backends/cuda_stub provides these
// functions and make_cuda_backend() throws.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "normlab/backend.h"

namespace normlab {

// Whether this binary has the CUDA backend compiled in (not whether a GPU is present).
bool cuda_built();
// The backend for device 0. Registers the device memory hooks (cudaMalloc'd arena blocks,
// fills, device copies, host <-> device transfers) first. Throws UsageError("no CUDA device
// found: <reason>") when no device is usable.
std::unique_ptr<Backend> make_cuda_backend();
// cuda-sim (docs/cuda.md): the same kernel sources compiled for the host and run with real
// block, barrier, warp and device-memory semantics, as the backend "cuda-sim" on
// Device::cuda_sim tensors. Slow; for correctness only. Its module (libnormlab_cuda_sim.so, or
// NORMLAB_CUDA_SIM_MODULE) is loaded on first use; UsageError when it cannot be.
std::unique_ptr<Backend> make_cuda_sim_backend();
// Every cudaMemcpy between host and device cuda-sim has made in this process (the transfer
// budget of a device-resident step is tested with it). Loads the module.
struct CudaTransfers {
  uint64_t uploads = 0, downloads = 0, upload_bytes = 0, download_bytes = 0;
};
CudaTransfers cuda_sim_transfers();

// Let cuBLAS use TF32 tensor cores for float32 products (off by default, so that results
// compare with the CPU at float32 precision).
void cuda_set_tf32(bool on);
bool cuda_tf32();

// ---- bench: norm kernels timed on the device with CUDA events ---------------------------------
struct CudaNormCase {
  bool rms = false;     // RMSNorm instead of LayerNorm
  bool bf16 = false;    // bf16 inputs and outputs (statistics in float32)
  int64_t rows = 0, d = 0;
  int repeats = 20, warmup = 3;
};
struct CudaNormTiming {
  double fwd_ms = NAN, bwd_ms = NAN;        // median per call
  double fwd_min_ms = NAN, bwd_min_ms = NAN;
  double fwd_bytes = 0, bwd_bytes = 0;      // bytes a call must move (read + write)
  double fwd_max_err = NAN, bwd_max_err = NAN;  // max |gpu - double reference| / (1 + |ref|), first rows
};
CudaNormTiming cuda_time_norm(const CudaNormCase& c);
// Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second, median):
// cudaMemcpy and normlab's 16-byte copy kernel, on a buffer of `bytes`.
struct CudaCopyBandwidth {
  double memcpy_gbs = NAN, kernel_gbs = NAN;
};
CudaCopyBandwidth cuda_copy_bandwidth(size_t bytes, int repeats = 20);

}  // namespace normlab
