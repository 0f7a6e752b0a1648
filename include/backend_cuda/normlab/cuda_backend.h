// The "cuda" backend: normlab's own CUDA kernels (norms, elementwise, softmax, attention, loss,
// embedding, Adam) and cuBLAS for the matrix products, in float32 arithmetic over float32 or
// native bf16 / fp16 storage (docs/precision.md). Built when the CUDA toolkit is
// found (NORMLAB_CUDA=AUTO), as the module libnormlab_cuda.so that these functions load on
// first use (src/backends/cuda_loader); without it, src/backends/cuda_stub provides these
// functions and make_cuda_backend() throws.
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

// ---- bench: normlab's norm kernels on device buffers, timed with CUDA events -----------------
// The device half of `bench norms --device cuda | cuda-sim`; src/bench has the rest (the
// inputs, the check against the reference kernels, the statistics, byte counts and report).
// One object per shape and storage type: `sets` sets of the per-row arrays in device memory,
// rotated call by call, and one copy of the parameters, shared by all sets as a model's are.
struct CudaNormBenchShape {
  int64_t rows = 0, d = 0;
  int64_t sets = 1;
  // The N x D arrays and gamma/beta stored in this format (bf16, fp16: 2 bytes; statistics,
  // dgamma, dbeta float32 always).
  Precision storage = Precision::fp32;
};
// The arrays of a set. N x D, as stored: x, b (dy of a backward, the second addend of an
// add+norm), out (y or dx), s (the add's sum). N float32: mean, rstd (written by a forward);
// ln_mean, ln_rstd, rms_rstd (the saved statistics a backward reads). Shared by the sets: gamma,
// beta (as stored), dgamma, dbeta (float32); DyT's and Derf's scalars alpha, shift (read) and
// dalpha, dshift (written), one float32 each, on the device as training keeps them.
enum class CudaBenchArray {
  x, b, out, s, mean, rstd, ln_mean, ln_rstd, rms_rstd, gamma, beta, dgamma, dbeta, alpha, shift, dalpha, dshift
};
// Bytes of one set's `a`.
inline size_t cuda_bench_array_bytes(const CudaNormBenchShape& s, CudaBenchArray a) {
  const size_t stored = s.storage == Precision::fp32 ? 4 : 2, n = static_cast<size_t>(s.rows), d = static_cast<size_t>(s.d);
  switch (a) {
    case CudaBenchArray::x: case CudaBenchArray::b: case CudaBenchArray::out: case CudaBenchArray::s:
      return n * d * stored;
    case CudaBenchArray::gamma: case CudaBenchArray::beta: return d * stored;
    case CudaBenchArray::dgamma: case CudaBenchArray::dbeta: return d * 4;
    case CudaBenchArray::alpha: case CudaBenchArray::shift: case CudaBenchArray::dalpha:
    case CudaBenchArray::dshift: return 4;
    case CudaBenchArray::mean: case CudaBenchArray::rstd: case CudaBenchArray::ln_mean:
    case CudaBenchArray::ln_rstd: case CudaBenchArray::rms_rstd: break;
  }
  return n * 4;
}
// What a call runs: a norm launcher of the "cuda" backend on a set (forwards x -> out, mean,
// rstd; add+norm forwards alpha*x + b -> s, out, ...; backwards b (dy), x and the saved
// statistics -> out (dx), dgamma, dbeta), or a copy of x into out: cudaMemcpyAsync, or normlab's
// copy kernel (16-byte loads and stores), the bandwidth limits the norms are held to. DyT and
// Derf run the backend's squash launchers with the device's alpha (Derf: and shift; DyT has none,
// as in training): forwards x -> out; backwards b (dy), x -> out (dx), dalpha (Derf: dshift),
// dgamma, dbeta. The call's own alpha is the add's only.
enum class CudaBenchOp {
  layernorm_forward, rmsnorm_forward, add_layernorm_forward, add_rmsnorm_forward,
  layernorm_backward, rmsnorm_backward, copy_memcpy, copy_kernel,
  dyt_forward, derf_forward, dyt_backward, derf_backward
};
class CudaNormBench {
 public:
  virtual ~CudaNormBench() = default;
  // Set 0's `array` from / to host memory, as stored (float32, or the 16-bit encodings): its
  // cuda_bench_array_bytes. Synchronous.
  virtual void upload(CudaBenchArray array, const void* host) = 0;
  virtual void download(CudaBenchArray array, void* host) = 0;
  // Set 0's inputs (x, b and the saved statistics) copied into every other set.
  virtual void replicate() = 0;
  // One call of `op` on set k (eps: the norm's; alpha: the add's), asynchronous.
  virtual void run(CudaBenchOp op, int64_t set, float eps, float alpha) = 0;
  // The same call between two CUDA events, waited for: its device time in seconds.
  virtual double time(CudaBenchOp op, int64_t set, float eps, float alpha) = 0;
};
// On `device` (Device::cuda: GPU 0, loading the CUDA module; Device::cuda_sim: cuda-sim's
// module). UsageError "no CUDA device found ..." (or "cuda-sim is not available ...") when it
// cannot run there.
std::unique_ptr<CudaNormBench> make_cuda_norm_bench(Device device, const CudaNormBenchShape& shape);

}  // namespace normlab
