// The device half of `bench norms --device cuda | cuda-sim` (CudaNormBench, normlab/cuda_backend.h):
// device buffers rotated call by call, the norm launchers of norms.cu and squash.cu (DyT, Derf)
// and the copy baselines on them, timed with CUDA events. The inputs, the check against the
// reference kernels, the statistics and the report are src/bench's.
#include <memory>
#include <string>

#include "common.cuh"
#include "module.h"
#include "normlab/error.h"

namespace normlab::cuda {

namespace {

__global__ void copy16_kernel(uint4* out, const uint4* x, int64_t n16) {
  NL_GRID_STRIDE(i, n16) out[i] = x[i];
}
__global__ void copy1_kernel(unsigned char* out, const unsigned char* x, int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = x[i];
}

// A device-to-device copy kernel, 16-byte loads and stores where the size and pointers allow:
// the bandwidth limit next to cudaMemcpy.
void copy_kernel(void* out, const void* x, size_t bytes) {
  if (bytes == 0) return;
  if (bytes % 16 == 0 && aligned16(out) && aligned16(x)) {
    const int64_t n16 = static_cast<int64_t>(bytes / 16);
    launch("copy_kernel", copy16_kernel, grid_for(n16), kThreads, 0, static_cast<uint4*>(out),
           static_cast<const uint4*>(x), n16);
  } else {
    const int64_t n = static_cast<int64_t>(bytes);
    launch("copy_kernel", copy1_kernel, grid_for(n), kThreads, 0, static_cast<unsigned char*>(out),
           static_cast<const unsigned char*>(x), n);
  }
}

constexpr const char* kName = "bench norms";
constexpr int kArrays = static_cast<int>(CudaBenchArray::dshift) + 1;

// The parameters and their gradients (listed from gamma on) are one copy, shared by the sets as
// a model's are.
bool per_set(CudaBenchArray a) { return a < CudaBenchArray::gamma; }
bool is_input(CudaBenchArray a) {
  return a == CudaBenchArray::x || a == CudaBenchArray::b || a == CudaBenchArray::ln_mean ||
         a == CudaBenchArray::ln_rstd || a == CudaBenchArray::rms_rstd;
}

class NormBench final : public CudaNormBench {
 public:
  explicit NormBench(const CudaNormBenchShape& shape) : shape_(shape) {
    if (shape.rows <= 0 || shape.d <= 0 || shape.sets < 1)
      throw Error(std::string(kName) + ": empty shape " + std::to_string(shape.rows) + "x" +
                  std::to_string(shape.d) + " or no buffer set");
    try {
      for (int i = 0; i < kArrays; ++i) {
        const auto a = static_cast<CudaBenchArray>(i);
        // Each set's array at a 256-byte boundary: every pointer allows the vector units.
        stride_[i] = (cuda_bench_array_bytes(shape, a) + 255) / 256 * 256;
        const size_t count = per_set(a) ? static_cast<size_t>(shape.sets) : 1;
        check(cudaMalloc(&base_[i], stride_[i] * count), "cudaMalloc", kName);
      }
      const size_t work =
          static_cast<size_t>(std::max(column_work(shape.rows, shape.d), squash_work(shape.rows, shape.d))) *
          sizeof(float);
      check(cudaMalloc(&work_, std::max<size_t>(work, 16)), "cudaMalloc", kName);
      check(cudaEventCreate(&start_), "cudaEventCreate", kName);
      check(cudaEventCreate(&stop_), "cudaEventCreate", kName);
    } catch (...) {
      release();
      throw;
    }
  }
  ~NormBench() override { release(); }
  NormBench(const NormBench&) = delete;
  NormBench& operator=(const NormBench&) = delete;

  void upload(CudaBenchArray a, const void* host) override {
    check(cudaMemcpy(at(a, 0), host, cuda_bench_array_bytes(shape_, a), cudaMemcpyHostToDevice),
          "cudaMemcpy(HostToDevice)", kName);
  }
  void download(CudaBenchArray a, void* host) override {
    check(cudaMemcpy(host, at(a, 0), cuda_bench_array_bytes(shape_, a), cudaMemcpyDeviceToHost),
          "cudaMemcpy(DeviceToHost)", kName);
  }
  // Doubling copies: sets [0, k) into [k, 2k) until every set has set 0's inputs.
  void replicate() override {
    for (int i = 0; i < kArrays; ++i) {
      if (!is_input(static_cast<CudaBenchArray>(i))) continue;
      for (int64_t have = 1; have < shape_.sets; have *= 2) {
        const int64_t copy = std::min(have, shape_.sets - have);
        check(cudaMemcpy(static_cast<char*>(base_[i]) + stride_[i] * have, base_[i], stride_[i] * copy,
                         cudaMemcpyDeviceToDevice),
              "cudaMemcpy(DeviceToDevice)", kName);
      }
    }
  }
  void run(CudaBenchOp op, int64_t set, float eps, float alpha) override {
    if (set < 0 || set >= shape_.sets)
      throw Error(std::string(kName) + ": no buffer set " + std::to_string(set) + " of " + std::to_string(shape_.sets));
    switch (shape_.storage) {
      case Precision::bf16: run_as<__nv_bfloat16>(op, set, eps, alpha); return;
      case Precision::fp16: run_as<__half>(op, set, eps, alpha); return;
      case Precision::fp32: break;
    }
    run_as<float>(op, set, eps, alpha);
  }
  double time(CudaBenchOp op, int64_t set, float eps, float alpha) override {
    check(cudaEventRecord(start_), "cudaEventRecord", kName);
    run(op, set, eps, alpha);
    check(cudaEventRecord(stop_), "cudaEventRecord", kName);
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize", kName);
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime", kName);
    return 1e-3 * static_cast<double>(ms);
  }

 private:
  // Everything allocated so far (from the constructor, or the destructor: never throws).
  void release() {
    for (void* p : base_) (void)cudaFree(p);
    (void)cudaFree(work_);
    if (start_) (void)cudaEventDestroy(start_);
    if (stop_) (void)cudaEventDestroy(stop_);
  }
  void* at(CudaBenchArray a, int64_t set) const {
    const int i = static_cast<int>(a);
    return static_cast<char*>(base_[i]) + (per_set(a) ? stride_[i] * static_cast<size_t>(set) : 0);
  }
  template <class T>
  T* as(CudaBenchArray a, int64_t set) const {
    return static_cast<T*>(at(a, set));
  }

  template <class T>
  void run_as(CudaBenchOp op, int64_t k, float eps, float alpha) {
    using A = CudaBenchArray;
    const int64_t n = shape_.rows, d = shape_.d;
    T* out = as<T>(A::out, k);
    const T* x = as<T>(A::x, k);
    const T* b = as<T>(A::b, k);
    const T* gamma = as<T>(A::gamma, 0);
    const T* beta = as<T>(A::beta, 0);
    float* mean = as<float>(A::mean, k);
    float* rstd = as<float>(A::rstd, k);
    float* dgamma = as<float>(A::dgamma, 0);
    float* dbeta = as<float>(A::dbeta, 0);
    float* work = static_cast<float*>(work_);
    // The squash launchers take each array with its storage, as the backend passes a tensor's.
    const Precision e = shape_.storage;
    const bool derf = op == CudaBenchOp::derf_forward || op == CudaBenchOp::derf_backward;
    const In alpha_in = as<float>(A::alpha, 0), shift_in = derf ? In(as<float>(A::shift, 0)) : In();
    const int f = derf ? 1 : 0;
    switch (op) {
      case CudaBenchOp::layernorm_forward: layernorm_forward<T>(out, mean, rstd, x, gamma, beta, n, d, eps); return;
      case CudaBenchOp::rmsnorm_forward: rmsnorm_forward<T>(out, rstd, x, gamma, n, d, eps); return;
      case CudaBenchOp::add_layernorm_forward:
        add_layernorm_forward<T>(as<T>(A::s, k), out, mean, rstd, x, b, alpha, gamma, beta, n, d, eps);
        return;
      case CudaBenchOp::add_rmsnorm_forward:
        add_rmsnorm_forward<T>(as<T>(A::s, k), out, rstd, x, b, alpha, gamma, n, d, eps);
        return;
      case CudaBenchOp::layernorm_backward:
        layernorm_backward<T>(out, dgamma, dbeta, b, x, gamma, as<float>(A::ln_mean, k), as<float>(A::ln_rstd, k),
                              n, d, work);
        return;
      case CudaBenchOp::rmsnorm_backward:
        rmsnorm_backward<T>(out, dgamma, b, x, gamma, as<float>(A::rms_rstd, k), n, d, work);
        return;
      case CudaBenchOp::dyt_forward:
      case CudaBenchOp::derf_forward:
        squash_forward(Out(out, e), In(x, e), alpha_in, shift_in, In(gamma, e), In(beta, e), n, d, f);
        return;
      case CudaBenchOp::dyt_backward:
      case CudaBenchOp::derf_backward:
        squash_backward(Out(out, e), as<float>(A::dalpha, 0), derf ? as<float>(A::dshift, 0) : nullptr, dgamma, dbeta,
                        In(b, e), In(x, e), alpha_in, shift_in, In(gamma, e), n, d, f, work);
        return;
      case CudaBenchOp::copy_memcpy:
        check(cudaMemcpyAsync(out, x, cuda_bench_array_bytes(shape_, A::x), cudaMemcpyDeviceToDevice),
              "cudaMemcpyAsync", "copy_memcpy");
        return;
      case CudaBenchOp::copy_kernel: copy_kernel(out, x, cuda_bench_array_bytes(shape_, A::x)); return;
    }
  }

  CudaNormBenchShape shape_;
  void* base_[kArrays] = {};
  size_t stride_[kArrays] = {};
  void* work_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace

std::unique_ptr<CudaNormBench> make_norm_bench(const CudaNormBenchShape& shape) {
  require_device();
  return std::make_unique<NormBench>(shape);
}

}  // namespace normlab::cuda
