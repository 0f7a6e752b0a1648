// The "cuda" backend: normlab's own CUDA kernels (norms, elementwise, softmax, attention, loss,
// embedding, Adam) and cuBLAS for the matrix products, in float32 arithmetic over float32 or
// native bf16 / fp16 storage (docs/precision.md). Built when the CUDA toolkit is
// found (NORMLAB_CUDA=AUTO), as the module libnormlab_cuda.so that these functions load on
// first use (src/backends/cuda_loader); without the toolkit the same loader defines them to
// report no device, and make_cuda_backend() throws.
#pragma once
#include <cstddef>
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

}  // namespace normlab
