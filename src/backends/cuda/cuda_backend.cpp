// The "cuda" backend, and its implementations of the products', elementwise, softmax, attention,
// embedding, loss, layout, statistics and optimizer kernels (registered at the end): each checks
// what is its own of a call's tensors (a float storage, ids in range; the sizes and the device are
// the kernel's contract, kernel.h), then calls the kernels (kernels.h) or cuBLAS. Data arrays are
// float32, or bf16 / fp16 encodings where a low-precision scope stores activations natively
// (DType bf16 / f16; statistics, parameters and optimizer state stay float32); the CUDA calls'
// statuses are all checked and a failure names the call and the kernel.
#include "normlab/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <mutex>

#include "flavor.h"
#include "kernels.h"
#include "module.h"
#include "tensor_args.h"
#include "normlab/adam_kernels.h"
#include "normlab/attention_kernels.h"
#include "normlab/cross_entropy_kernels.h"
#include "normlab/dropout_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/embedding_kernels.h"
#include "normlab/layout_kernels.h"
#include "normlab/matmul_kernels.h"
#include "normlab/prefix_mean_kernels.h"
#include "normlab/softmax_kernels.h"
#include "normlab/statistics_kernels.h"
#include "normlab/error.h"

namespace normlab {

namespace cuda {

void cuda_fail(const char* call, const char* kernel, cudaError_t status) {
  const std::string detail = error_detail();
  throw Error(fmt::format("{} {}: {} failed: {}: {}{}", kBackendName, kernel, call, cudaGetErrorName(status),
                          cudaGetErrorString(status), detail.empty() ? "" : " (" + detail + ")"));
}

}  // namespace cuda

namespace {

using cuda::check;

void check_blas(cublasStatus_t status, const char* call, const char* kernel) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("cuda {}: {} failed: {} ({})", kernel, call,
                            cublasGetStatusName(status), cublasGetStatusString(status)));
}

std::atomic<bool> g_tf32{false};

// ---- device memory hooks (core's arena calls these for cuda::kDevice storage) -----------------
void* device_allocate(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc", "arena");
  return p;
}

void device_deallocate(void* p) {
  // Called from destructors: report nothing, never throw (the process may be shutting down).
  (void)cudaFree(p);
}

void device_fill(void* dst, DType dtype, int64_t count, double value) {
  switch (dtype) {
    case DType::f32: cuda::fill_f32(static_cast<float*>(dst), count, static_cast<float>(value)); return;
    case DType::f64: cuda::fill_f64(static_cast<double*>(dst), count, value); return;
    case DType::i32: cuda::fill_i32(static_cast<int32_t*>(dst), count, static_cast<int32_t>(value)); return;
    case DType::bf16:
    case DType::f16:
      cuda::fill_u16(static_cast<uint16_t*>(dst), count, encode_16(dtype, value));
      return;
  }
}

void device_copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy(DeviceToDevice)", "copy");
}

void device_upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(HostToDevice)", "upload");
}

void device_download(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(DeviceToHost)", "download");
}

void install_memory_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    DeviceMemory m;
    m.allocate = device_allocate;
    m.deallocate = device_deallocate;
    m.fill = device_fill;
    m.copy = device_copy;
    m.upload = device_upload;
    m.download = device_download;
    register_device_memory(cuda::kDevice, m);
  });
}

}  // namespace

// Device 0 usable, or a UsageError naming why not.
void cuda::require_device() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    throw UsageError(fmt::format("no CUDA device found ({}: {})", cudaGetErrorName(status),
                                 cudaGetErrorString(status)));
  if (count <= 0) throw UsageError("no CUDA device found");
  // Device 0 is the runtime's default; nothing here creates a context (CUDA 12+ creates one
  // in cudaSetDevice), so that registering the backend costs a CPU-only command nothing.
}

namespace {

using cuda::arr_in;
using cuda::arr_out;
using cuda::expect;
using cuda::expect_f32;
using cuda::expect_same_storage;
using cuda::F32Out;
using cuda::fp;
using cuda::fp_or_null;
using cuda::in_storage;
using cuda::ptr;
using cuda::with_storage;

cudaDataType_t blas_type(DType t) {
  if (t == DType::bf16) return CUDA_R_16BF;
  if (t == DType::f16) return CUDA_R_16F;
  return CUDA_R_32F;
}

int to_int(int64_t v, const char* what, const char* kernel) {
  NL_CHECK(v >= 0 && v <= INT_MAX, "cuda {}: {} = {} does not fit cuBLAS's int", kernel, what, v);
  return static_cast<int>(v);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    cuda::require_device();
    install_memory_hooks();
  }
  // The backend lives in the registry, a static destroyed at exit after the CUDA runtime has
  // torn itself down (its atexit handler is registered later): calling cublasDestroy or cudaFree
  // then is undefined. The handle and buffers are left to the process's end.
  ~CudaBackend() override = default;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return cuda::kBackendName; }
  Device device() const override { return cuda::kDevice; }
  bool supports(DType dtype) const override { return dtype == DType::f32 || is_16bit(dtype); }

  // What the kernels of this file (registered at its end) use of the backend's state.

  // C = op(A) op(B) (+ C when accumulate), row-major, through cuBLAS's column-major GEMM as
  // C^T = op(B)^T op(A)^T. float32 operands: Sgemm. bf16 / fp16 operands (A and B alike): GemmEx
  // with a float32 compute type, C in float32 or the operands' storage, rounded once.
  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const MatmulSpec& s, bool accumulate, const char* kn) {
    if (s.batch <= 0 || s.m <= 0 || s.n <= 0) return;
    if (s.k <= 0) {  // an empty sum: C = 0, or C unchanged
      if (!accumulate) device_fill(c.raw(), c.dtype(), s.batch * s.m * s.n, 0.0);
      return;
    }
    NL_CHECK(a.dtype() == b.dtype(), "cuda {}: the operands are {} and {}; a product takes one storage type", kn,
             to_string(a.dtype()), to_string(b.dtype()));
    NL_CHECK(c.dtype() == DType::f32 || c.dtype() == a.dtype(), "cuda {}: a {} product cannot be written as {}", kn,
             to_string(a.dtype()), to_string(c.dtype()));
    const int m = to_int(s.m, "m", kn), n = to_int(s.n, "n", kn), k = to_int(s.k, "k", kn);
    const int batch = to_int(s.batch, "batch", kn);
    const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = s.trans_b ? k : n;
    const int lda = s.trans_a ? m : k;
    const long long stride_a = s.a_batched ? static_cast<long long>(s.m) * s.k : 0;
    const long long stride_b = s.b_batched ? static_cast<long long>(s.k) * s.n : 0;
    const long long stride_c = static_cast<long long>(s.m) * s.n;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (a.dtype() == DType::f32 && c.dtype() == DType::f32) {
      cublasHandle_t h = blas(kn);
      const float *pa = fp(a), *pb = fp(b);
      float* pc = fp(c);
      if (batch == 1)
        check_blas(cublasSgemm(h, op_b, op_a, n, m, k, &alpha, pb, ldb, pa, lda, &beta, pc, n), "cublasSgemm", kn);
      else
        check_blas(cublasSgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha, pb, ldb, stride_b, pa, lda, stride_a,
                                             &beta, pc, n, stride_c, batch),
                   "cublasSgemmStridedBatched", kn);
    } else {
      cublasHandle_t h = blas16(kn);
      const cudaDataType_t ab = blas_type(a.dtype()), ct = blas_type(c.dtype());
      if (batch == 1)
        check_blas(cublasGemmEx(h, op_b, op_a, n, m, k, &alpha, b.raw(), ab, ldb, a.raw(), ab, lda, &beta, c.raw(), ct,
                                n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx", kn);
      else
        check_blas(cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, &alpha, b.raw(), ab, ldb, stride_b, a.raw(), ab,
                                              lda, stride_a, &beta, c.raw(), ct, n, stride_c, batch,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx", kn);
    }
    cuda::check_launch(kn);
  }

  float* work_floats(int64_t count, const char* kn) {
    return static_cast<float*>(work(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float), kn));
  }
  double* work_doubles(int64_t count, const char* kn) {
    return static_cast<double*>(work(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(double), kn));
  }

  // Token ids or targets: int32 on the device, n of them, each in [0, v) (one synchronizing
  // check kernel, as the reference backend checks every id).
  void expect_ids(const char* kernel, const char* arg, const Tensor& ids, int64_t n, int64_t v) {
    NL_CHECK(ids.dtype() == DType::i32, "cuda {}: {} is {} but ids are int32", kernel, arg,
             to_string(ids.dtype()));
    int32_t* flag = reinterpret_cast<int32_t*>(static_cast<char*>(scalars(kernel)) + 16);
    const int64_t bad = cuda::first_bad_id(ids_ptr(ids), n, v, flag, kernel);
    if (bad >= 0) {
      int32_t value = 0;
      check(cudaMemcpy(&value, ids_ptr(ids) + bad, sizeof value, cudaMemcpyDeviceToHost),
            "cudaMemcpy(DeviceToHost)", kernel);
      NL_CHECK(false, "cuda {}: {}[{}] = {} is outside [0, {})", kernel, arg, bad, value, v);
    }
  }
  void* scalars(const char* kn) {
    if (!scalars_) check(cudaMalloc(&scalars_, 64), "cudaMalloc", kn);
    return scalars_;
  }
  static const int32_t* ids_ptr(const Tensor& ids) { return static_cast<const int32_t*>(ids.raw()); }

 private:
  // The handle for 16-bit products: cuBLAS's default math (tensor cores, float32 accumulation),
  // with no reduction in the output's 16-bit precision (split-K partials summed in float32): the
  // product is rounded once, as the float32 path rounds it.
  cublasHandle_t blas16(const char* kn) {
    if (!blas16_) {
      check_blas(cublasCreate(&blas16_), "cublasCreate", kn);
      check_blas(cublasSetPointerMode(blas16_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode", kn);
      const auto math = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
      check_blas(cublasSetMathMode(blas16_, math), "cublasSetMathMode", kn);
    }
    return blas16_;
  }

  cublasHandle_t blas(const char* kn) {
    if (!blas_) {
      check_blas(cublasCreate(&blas_), "cublasCreate", kn);
      check_blas(cublasSetPointerMode(blas_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode", kn);
    }
    const bool tf32 = g_tf32.load();
    if (!blas_mode_set_ || tf32 != blas_tf32_) {
      check_blas(cublasSetMathMode(blas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
                 "cublasSetMathMode", kn);
      blas_tf32_ = tf32;
      blas_mode_set_ = true;
    }
    return blas_;
  }

  // Workspace: grown, never shrunk; kernels on the one stream use it one call at a time.
  void* work(size_t bytes, const char* kn) {
    if (bytes > work_bytes_) {
      if (work_) check(cudaFree(work_), "cudaFree", kn);
      work_ = nullptr;
      work_bytes_ = 0;
      const size_t want = std::max<size_t>(bytes, 1 << 20);
      check(cudaMalloc(&work_, want), "cudaMalloc(workspace)", kn);
      work_bytes_ = want;
    }
    return work_;
  }
  cublasHandle_t blas_ = nullptr, blas16_ = nullptr;
  bool blas_mode_set_ = false, blas_tf32_ = false;
  void* work_ = nullptr;
  size_t work_bytes_ = 0;
  void* scalars_ = nullptr;  // [0, 8): a double result; [16, 20): the ids flag; [32, 64): format_census's 4 doubles
};

// ---- matrix products -----------------------------------------------------------------------
void matmul(Backend& backend, const Matmul& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "matmul";
  expect(kn, "c", call.c);
  expect(kn, "a", call.a);
  expect(kn, "b", call.b);
  self.gemm(call.c, call.a, call.b, call.s, call.s.accumulate, kn);
}

void linear_forward(Backend& backend, const LinearForward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "linear_forward";
  expect(kn, "y", call.y);
  expect(kn, "x", call.x);
  expect(kn, "w", call.w);
  if (call.bias.defined()) expect(kn, "bias", call.bias);
  if (call.residual.defined()) expect(kn, "residual", call.residual);
  const bool epilogue = call.bias.defined() || call.residual.defined();
  MatmulSpec s = MatmulSpec::of(call.m, call.n, call.k).transposed_b();
  if (call.y.dtype() != DType::f32 && epilogue) {
    // 16-bit storage: the product in float32, then one pass adds bias and residual and rounds
    // once (bias + residual first, then the product, as the float32 path sums them).
    Tensor product = Tensor::empty(call.y.shape(), DType::f32, call.y.device());
    self.gemm(product, call.x, call.w, s, false, kn);
    cuda::linear_epilogue(arr_out(call.y), fp(product), arr_in(call.bias), arr_in(call.residual), call.m, call.n);
    return;
  }
  // y = bias + residual first, then y += x @ w^T (cuBLAS beta = 1): the residual may be y.
  if (call.bias.defined()) expect_f32(kn, "bias", call.bias);
  if (call.residual.defined()) expect_f32(kn, "residual", call.residual);
  if (epilogue) cuda::bias_residual_init(fp(call.y), fp_or_null(call.bias), fp_or_null(call.residual), call.m, call.n);
  self.gemm(call.y, call.x, call.w, s, epilogue, kn);
}

void linear_backward_input(Backend& backend, const LinearBackwardInput& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "linear_backward_input";
  expect(kn, "dx", call.dx);
  expect(kn, "dy", call.dy);
  expect(kn, "w", call.w);
  if (call.gate.defined()) expect(kn, "gate", call.gate);
  if (call.gate.defined() && call.dx.dtype() != DType::f32) {  // the product times the gate, rounded once
    Tensor product = Tensor::empty(call.dx.shape(), DType::f32, call.dx.device());
    self.gemm(product, call.dy, call.w, MatmulSpec::of(call.m, call.k, call.n), false, kn);
    cuda::mul(arr_out(call.dx), arr_in(product), arr_in(call.gate), call.m * call.k);
    return;
  }
  self.gemm(call.dx, call.dy, call.w, MatmulSpec::of(call.m, call.k, call.n), false, kn);
  if (call.gate.defined()) cuda::mul(arr_out(call.dx), arr_in(call.dx), arr_in(call.gate), call.m * call.k);
}

void sum_rows(Backend& backend, const SumRows& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "sum_rows";
  expect(kn, "out", call.out);
  expect(kn, "x", call.x);
  F32Out sums(&call.out);
  float* work = self.work_floats(cuda::column_work(call.rows, call.cols), kn);
  with_storage(call.x.dtype(),
               [&](auto t) { cuda::sum_rows(sums.get(), ptr<const decltype(t)>(call.x), call.rows, call.cols, work); });
  sums.finish();
}

// ---- elementwise -------------------------------------------------------------------------------
void fill(Backend&, const Fill& call) {
  expect("fill", "out", call.out);
  device_fill(call.out.raw(), call.out.dtype(), call.out.numel(), call.value);
}

// Between storage types a conversion (rounded to nearest even when narrower).
void copy(Backend&, const Copy& call) {
  expect("copy", "out", call.out);
  expect("copy", "x", call.x);
  if (call.out.dtype() == call.x.dtype()) device_copy(call.out.raw(), call.x.raw(), call.out.nbytes());
  else cuda::convert(arr_out(call.out), arr_in(call.x), call.out.numel());
}

void add(Backend&, const Add& call) {
  const int64_t n = call.out.numel();
  expect("add", "out", call.out);
  expect("add", "a", call.a);
  expect("add", "b", call.b);
  cuda::add(arr_out(call.out), arr_in(call.a), arr_in(call.b), static_cast<float>(call.alpha),
            static_cast<float>(call.beta), n);
}

void accumulate(Backend&, const Accumulate& call) {
  const int64_t n = call.dst.numel();
  expect("accumulate", "dst", call.dst);
  expect("accumulate", "src", call.src);
  cuda::accumulate(arr_out(call.dst), arr_in(call.src), n);
}

void scale(Backend&, const Scale& call) {
  const int64_t n = call.out.numel();
  expect("scale", "out", call.out);
  expect("scale", "x", call.x);
  cuda::scale(arr_out(call.out), arr_in(call.x), static_cast<float>(call.alpha), n);
}

void dropout(Backend&, const DropoutApply& call) {
  expect("dropout", "y", call.y);
  expect("dropout", "x", call.x);
  cuda::dropout(arr_out(call.y), arr_in(call.x), call.y.numel(), call.mask);
}

void mul(Backend&, const Mul& call) {
  const int64_t n = call.out.numel();
  expect("mul", "out", call.out);
  expect("mul", "a", call.a);
  expect("mul", "b", call.b);
  cuda::mul(arr_out(call.out), arr_in(call.a), arr_in(call.b), n);
}

void gelu_forward(Backend&, const GeluForward& call) {
  const int64_t n = call.y.numel();
  expect("gelu_forward", "y", call.y);
  expect("gelu_forward", "x", call.x);
  expect_f32("gelu_forward", "dydx", call.dydx);
  cuda::gelu_forward(arr_out(call.y), fp(call.dydx), arr_in(call.x), n);
}

void sum_squares(Backend& backend, const SumSquares& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "sum_squares";
  expect(kn, "x", call.x);
  double* work = self.work_doubles(cuda::sum_squares_work(call.x.numel()), kn);
  cuda::sum_squares(static_cast<double*>(self.scalars(kn)), work, arr_in(call.x), call.x.numel());
  check(cudaMemcpy(&call.result, self.scalars(kn), sizeof call.result, cudaMemcpyDeviceToHost),
        "cudaMemcpy(DeviceToHost)", kn);
}

// 16-bit storage is its format's grid already: nothing to round.
void round_to_format(Backend&, const RoundToFormat& call) {
  const int64_t n = call.x.numel();
  expect("round_to_format", "x", call.x);
  if (is_16bit(call.x.dtype())) {
    NL_CHECK(format_of_dtype(call.x.dtype()) == call.format || call.format == Precision::fp32,
             "cuda round_to_format: x is {} storage, asked for {}", to_string(call.x.dtype()), to_string(call.format));
    return;
  }
  if (call.format != Precision::fp32) cuda::round_to_format(fp(call.x), n, call.format == Precision::bf16);
}

void format_census(Backend& backend, const CountFormat& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "format_census";
  const int64_t n = call.x.numel();
  expect(kn, "x", call.x);
  double* work = self.work_doubles(cuda::format_census_work(n), kn);
  double* result = reinterpret_cast<double*>(static_cast<char*>(self.scalars(kn)) + 32);
  cuda::format_census(result, work, arr_in(call.x), n, static_cast<int>(call.format));
  double r[4] = {0, 0, 0, 0};
  check(cudaMemcpy(r, result, sizeof r, cudaMemcpyDeviceToHost), "cudaMemcpy(DeviceToHost)", kn);
  FormatCensus c;
  c.count = n;
  c.nonfinite = static_cast<int64_t>(r[0]);
  c.overflow = static_cast<int64_t>(r[1]);
  c.underflow = static_cast<int64_t>(r[2]);
  c.max_abs = r[3];
  call.result = c;
}

// ---- softmax -----------------------------------------------------------------------------------
void softmax_forward(Backend&, const SoftmaxForward& call) {
  expect("softmax_forward", "y", call.y);
  expect("softmax_forward", "x", call.x);
  cuda::softmax_forward(arr_out(call.y), arr_in(call.x), call.n, call.d);
}

void softmax_backward(Backend&, const SoftmaxBackward& call) {
  expect("softmax_backward", "dx", call.dx);
  expect("softmax_backward", "dy", call.dy);
  expect("softmax_backward", "y", call.y);
  cuda::softmax_backward(arr_out(call.dx), arr_in(call.dy), arr_in(call.y), call.n, call.d);
}

// ---- attention ---------------------------------------------------------------------------------
// The call's sizes, its key length within what the kernels take (a row of scores in shared memory).
cuda::AttnSizes attn_sizes(int64_t b, int64_t t, const AttentionKeys& keys, int64_t h, int64_t dh, const char* kn) {
  const int64_t tk = keys.of(t);
  NL_CHECK(tk <= cuda::attention_max_t(), "cuda {}: Tk = {} keys are more than the {} the kernel takes", kn, tk,
           cuda::attention_max_t());
  return {b, t, tk, h, dh, keys.causal};
}

void attention_forward(Backend&, const AttentionForward& call) {
  const char* kn = "attention_forward";
  expect(kn, "out", call.out);
  expect_f32(kn, "stats", call.stats);
  expect(kn, "q", call.q);
  expect(kn, "k", call.k);
  expect(kn, "v", call.v);
  const cuda::AttnSizes n = attn_sizes(call.b, call.t, call.keys, call.h, call.dh, kn);
  cuda::attention_forward(arr_out(call.out), fp(call.stats), arr_in(call.q), arr_in(call.k), arr_in(call.v), n,
                          static_cast<float>(call.scale), call.dropout);
}

void attention_backward(Backend& backend, const AttentionBackward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "attention_backward";
  expect(kn, "dq", call.dq);
  expect(kn, "dk", call.dk);
  expect(kn, "dv", call.dv);
  expect(kn, "dout", call.dout);
  expect(kn, "q", call.q);
  expect(kn, "k", call.k);
  expect(kn, "v", call.v);
  expect_f32(kn, "stats", call.stats);
  const cuda::AttnSizes n = attn_sizes(call.b, call.t, call.keys, call.h, call.dh, kn);
  if (!call.dq && !call.dk && !call.dv) return;
  // P, and dS beside it when dq or dk is wanted.
  float* work = self.work_floats((call.dq || call.dk ? 2 : 1) * n.b * n.h * n.t * n.tk, kn);
  cuda::attention_backward(arr_out(call.dq), arr_out(call.dk), arr_out(call.dv), arr_in(call.dout), arr_in(call.q),
                           arr_in(call.k), arr_in(call.v), fp(call.stats), n, static_cast<float>(call.scale),
                           static_cast<int>(call.probs_format), call.dropout, work);
}

// ---- prefix mean -------------------------------------------------------------------------------
void prefix_mean_forward(Backend&, const PrefixMeanForward& call) {
  expect("prefix_mean_forward", "y", call.y);
  expect("prefix_mean_forward", "x", call.x);
  cuda::prefix_mean_forward(arr_out(call.y), arr_in(call.x), call.b, call.t, call.c);
}

void prefix_mean_backward(Backend&, const PrefixMeanBackward& call) {
  expect("prefix_mean_backward", "dx", call.dx);
  expect("prefix_mean_backward", "dy", call.dy);
  cuda::prefix_mean_backward(arr_out(call.dx), arr_in(call.dy), call.b, call.t, call.c);
}

// ---- embedding -----------------------------------------------------------------------------------
void embedding_forward(Backend& backend, const EmbeddingForward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "embedding_forward";
  expect(kn, "y", call.y);
  expect(kn, "table", call.table);
  self.expect_ids(kn, "ids", call.ids, call.n, call.v);
  cuda::embedding_forward(arr_out(call.y), arr_in(call.table), self.ids_ptr(call.ids), call.n, call.v, call.d);
}

void embedding_backward(Backend& backend, const EmbeddingBackward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "embedding_backward";
  expect(kn, "dtable", call.dtable);
  expect(kn, "dy", call.dy);
  self.expect_ids(kn, "ids", call.ids, call.n, call.v);
  cuda::embedding_backward(arr_out(call.dtable), arr_in(call.dy), self.ids_ptr(call.ids), call.n, call.v, call.d);
}

// ---- cross-entropy -------------------------------------------------------------------------------
void cross_entropy_forward(Backend& backend, const CrossEntropyForward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "cross_entropy_forward";
  NL_CHECK(call.n > 0, "cuda {}: the mean over N rows needs N > 0 (got {})", kn, call.n);
  expect_f32(kn, "loss", call.loss);
  expect_f32(kn, "probs", call.probs);
  expect(kn, "logits", call.logits);
  self.expect_ids(kn, "targets", call.targets, call.n, call.v);
  cuda::cross_entropy_forward(fp(call.loss), fp(call.probs), arr_in(call.logits), self.ids_ptr(call.targets), call.n,
                              call.v, self.work_doubles(call.n, kn));
}

void cross_entropy_backward(Backend& backend, const CrossEntropyBackward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const char* kn = "cross_entropy_backward";
  NL_CHECK(call.n > 0, "cuda {}: the mean over N rows needs N > 0 (got {})", kn, call.n);
  expect(kn, "dlogits", call.dlogits);
  expect_f32(kn, "dloss", call.dloss);
  expect_f32(kn, "probs", call.probs);
  self.expect_ids(kn, "targets", call.targets, call.n, call.v);
  cuda::cross_entropy_backward(arr_out(call.dlogits), fp(call.dloss), fp(call.probs), self.ids_ptr(call.targets),
                               call.n, call.v);
}

// ---- layout -------------------------------------------------------------------------------------
void transpose(Backend&, const Transpose& call) {
  expect("transpose", "out", call.out);
  expect("transpose", "x", call.x);
  cuda::transpose(arr_out(call.out), arr_in(call.x), call.outer, call.a, call.mid, call.bdim, call.inner);
}

// ---- statistics -------------------------------------------------------------------------------
void row_norms(Backend&, const RowNorms& call) {
  expect_f32("row_norms", "norms", call.norms);
  expect("row_norms", "x", call.x);
  cuda::row_norms(fp(call.norms), arr_in(call.x), call.n, call.d);
}

void attention_logit_stats(Backend&, const AttentionLogitStats& call) {
  const char* kn = "attention_logit_stats";
  expect_f32(kn, "max_logit", call.max_logit);
  expect_f32(kn, "entropy", call.entropy);
  expect(kn, "q", call.q);
  expect(kn, "k", call.k);
  cuda::attention_logit_stats(fp(call.max_logit), fp(call.entropy), arr_in(call.q), arr_in(call.k), call.b, call.t,
                              call.h, call.dh, call.scale);
}

// ---- optimizer ----------------------------------------------------------------------------------
void adam_step(Backend&, const AdamStep& call) {
  const char* kn = "adam_step";
  const int64_t n = call.param.numel();
  NL_CHECK(call.hp.step >= 1, "cuda {}: step is 1-based for the bias correction (got {})", kn, call.hp.step);
  expect_f32(kn, "param", call.param);
  expect_f32(kn, "grad", call.grad);
  expect_f32(kn, "m", call.m);
  expect_f32(kn, "v", call.v);
  // The cpu backend's arithmetic (float32, corrections as reciprocals computed in double).
  const double step = static_cast<double>(call.hp.step);
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(call.hp.beta1, step)));
  const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(call.hp.beta2, step)));
  cuda::adam_step(fp(call.param), fp(call.m), fp(call.v), fp(call.grad), n, static_cast<float>(call.hp.lr),
                  static_cast<float>(call.hp.beta1), static_cast<float>(call.hp.beta2),
                  static_cast<float>(call.hp.eps), inv_bc1, inv_bc2,
                  call.hp.decoupled ? 0.0f : static_cast<float>(call.hp.weight_decay),
                  call.hp.decoupled ? static_cast<float>(call.hp.weight_decay) : 0.0f);
}

NORMLAB_KERNEL(Matmul, cuda::kBackendName, matmul);
NORMLAB_KERNEL(LinearForward, cuda::kBackendName, linear_forward);
NORMLAB_KERNEL(LinearBackwardInput, cuda::kBackendName, linear_backward_input);
NORMLAB_KERNEL(SumRows, cuda::kBackendName, sum_rows);
NORMLAB_KERNEL(Fill, cuda::kBackendName, fill);
NORMLAB_KERNEL(Copy, cuda::kBackendName, copy);
NORMLAB_KERNEL(Add, cuda::kBackendName, add);
NORMLAB_KERNEL(Accumulate, cuda::kBackendName, accumulate);
NORMLAB_KERNEL(Scale, cuda::kBackendName, scale);
NORMLAB_KERNEL(DropoutApply, cuda::kBackendName, dropout);
NORMLAB_KERNEL(Mul, cuda::kBackendName, mul);
NORMLAB_KERNEL(GeluForward, cuda::kBackendName, gelu_forward);
NORMLAB_KERNEL(SumSquares, cuda::kBackendName, sum_squares);
NORMLAB_KERNEL(RoundToFormat, cuda::kBackendName, round_to_format);
NORMLAB_KERNEL(CountFormat, cuda::kBackendName, format_census);
NORMLAB_KERNEL(SoftmaxForward, cuda::kBackendName, softmax_forward);
NORMLAB_KERNEL(SoftmaxBackward, cuda::kBackendName, softmax_backward);
NORMLAB_KERNEL(AttentionForward, cuda::kBackendName, attention_forward);
NORMLAB_KERNEL(AttentionBackward, cuda::kBackendName, attention_backward);
NORMLAB_KERNEL(PrefixMeanForward, cuda::kBackendName, prefix_mean_forward);
NORMLAB_KERNEL(PrefixMeanBackward, cuda::kBackendName, prefix_mean_backward);
NORMLAB_KERNEL(EmbeddingForward, cuda::kBackendName, embedding_forward);
NORMLAB_KERNEL(EmbeddingBackward, cuda::kBackendName, embedding_backward);
NORMLAB_KERNEL(CrossEntropyForward, cuda::kBackendName, cross_entropy_forward);
NORMLAB_KERNEL(CrossEntropyBackward, cuda::kBackendName, cross_entropy_backward);
NORMLAB_KERNEL(Transpose, cuda::kBackendName, transpose);
NORMLAB_KERNEL(RowNorms, cuda::kBackendName, row_norms);
NORMLAB_KERNEL(AttentionLogitStats, cuda::kBackendName, attention_logit_stats);
NORMLAB_KERNEL(AdamStep, cuda::kBackendName, adam_step);

}  // namespace

std::unique_ptr<Backend> cuda::make_backend() { return std::make_unique<CudaBackend>(); }

float* cuda::work_floats(Backend& b, int64_t count, const char* kernel) {
  return static_cast<CudaBackend&>(b).work_floats(count, kernel);
}

void cuda::set_tf32(bool on) { g_tf32.store(on); }
bool cuda::tf32() { return g_tf32.load(); }

}  // namespace normlab
