// The "cuda" backend, and its implementations of the products', elementwise, softmax, attention,
// embedding, loss, layout, statistics and optimizer kernels (registered at the end): each checks
// what is its own of a call's tensors (a float storage, ids in range; the sizes and the device are
// the kernel's contract, kernel.h), then calls the kernels (kernels.h) or cuBLAS. Data arrays are float32, or bf16 / fp16 encodings where a
// low-precision scope stores activations natively (DType bf16 / f16; statistics, parameters and
// optimizer state stay float32); the CUDA calls' statuses are all checked and a failure names
// the call and the kernel.
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
  Tensor& c = call.c;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const MatmulSpec& s = call.s;
  const char* kn = "matmul";
  expect(kn, "c", c);
  expect(kn, "a", a);
  expect(kn, "b", b);
  self.gemm(c, a, b, s, s.accumulate, kn);
}

void linear_forward(Backend& backend, const LinearForward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const Tensor& w = call.w;
  const Tensor& bias = call.bias;
  const Tensor& residual = call.residual;
  const int64_t m = call.m;
  const int64_t k = call.k;
  const int64_t n = call.n;
  const char* kn = "linear_forward";
  expect(kn, "y", y);
  expect(kn, "x", x);
  expect(kn, "w", w);
  if (bias.defined()) expect(kn, "bias", bias);
  if (residual.defined()) expect(kn, "residual", residual);
  const bool epilogue = bias.defined() || residual.defined();
  MatmulSpec s = MatmulSpec::of(m, n, k).transposed_b();
  if (y.dtype() != DType::f32 && epilogue) {
    // 16-bit storage: the product in float32, then one pass adds bias and residual and rounds
    // once (bias + residual first, then the product, as the float32 path sums them).
    Tensor product = Tensor::empty(y.shape(), DType::f32, y.device());
    self.gemm(product, x, w, s, false, kn);
    cuda::linear_epilogue(arr_out(y), fp(product), arr_in(bias), arr_in(residual), m, n);
    return;
  }
  // y = bias + residual first, then y += x @ w^T (cuBLAS beta = 1): the residual may be y.
  if (bias.defined()) expect_f32(kn, "bias", bias);
  if (residual.defined()) expect_f32(kn, "residual", residual);
  if (epilogue) cuda::bias_residual_init(fp(y), fp_or_null(bias), fp_or_null(residual), m, n);
  self.gemm(y, x, w, s, epilogue, kn);
}

void linear_backward_input(Backend& backend, const LinearBackwardInput& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const Tensor& w = call.w;
  const Tensor& gate = call.gate;
  const int64_t m = call.m;
  const int64_t k = call.k;
  const int64_t n = call.n;
  const char* kn = "linear_backward_input";
  expect(kn, "dx", dx);
  expect(kn, "dy", dy);
  expect(kn, "w", w);
  if (gate.defined()) expect(kn, "gate", gate);
  if (gate.defined() && dx.dtype() != DType::f32) {  // the product times the gate, rounded once
    Tensor product = Tensor::empty(dx.shape(), DType::f32, dx.device());
    self.gemm(product, dy, w, MatmulSpec::of(m, k, n), false, kn);
    cuda::mul(arr_out(dx), arr_in(product), arr_in(gate), m * k);
    return;
  }
  self.gemm(dx, dy, w, MatmulSpec::of(m, k, n), false, kn);
  if (gate.defined()) cuda::mul(arr_out(dx), arr_in(dx), arr_in(gate), m * k);
}

void sum_rows(Backend& backend, const SumRows& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const int64_t rows = call.rows;
  const int64_t cols = call.cols;
  const char* kn = "sum_rows";
  expect(kn, "out", out);
  expect(kn, "x", x);
  F32Out sums(&out);
  float* work = self.work_floats(cuda::column_work(rows, cols), kn);
  with_storage(x.dtype(), [&](auto t) { cuda::sum_rows(sums.get(), ptr<const decltype(t)>(x), rows, cols, work); });
  sums.finish();
}

// ---- elementwise -------------------------------------------------------------------------------
void fill(Backend&, const Fill& call) {
  Tensor& out = call.out;
  const double value = call.value;
  expect("fill", "out", out);
  device_fill(out.raw(), out.dtype(), out.numel(), value);
}

// Between storage types a conversion (rounded to nearest even when narrower).
void copy(Backend&, const Copy& call) {
  Tensor& y = call.out;
  const Tensor& x = call.x;
  expect("copy", "out", y);
  expect("copy", "x", x);
  if (y.dtype() == x.dtype()) device_copy(y.raw(), x.raw(), y.nbytes());
  else cuda::convert(arr_out(y), arr_in(x), y.numel());
}

void add(Backend&, const Add& call) {
  Tensor& y = call.out;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const double alpha = call.alpha;
  const double beta = call.beta;
  const int64_t n = y.numel();
  expect("add", "out", y);
  expect("add", "a", a);
  expect("add", "b", b);
  cuda::add(arr_out(y), arr_in(a), arr_in(b), static_cast<float>(alpha), static_cast<float>(beta), n);
}

void accumulate(Backend&, const Accumulate& call) {
  Tensor& dst = call.dst;
  const Tensor& src = call.src;
  const int64_t n = dst.numel();
  expect("accumulate", "dst", dst);
  expect("accumulate", "src", src);
  cuda::accumulate(arr_out(dst), arr_in(src), n);
}

void scale(Backend&, const Scale& call) {
  Tensor& y = call.out;
  const Tensor& x = call.x;
  const double alpha = call.alpha;
  const int64_t n = y.numel();
  expect("scale", "out", y);
  expect("scale", "x", x);
  cuda::scale(arr_out(y), arr_in(x), static_cast<float>(alpha), n);
}

void mul(Backend&, const Mul& call) {
  Tensor& y = call.out;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const int64_t n = y.numel();
  expect("mul", "out", y);
  expect("mul", "a", a);
  expect("mul", "b", b);
  cuda::mul(arr_out(y), arr_in(a), arr_in(b), n);
}

void gelu_forward(Backend&, const GeluForward& call) {
  Tensor& y = call.y;
  Tensor* dydx = call.dydx;
  const Tensor& x = call.x;
  const int64_t n = y.numel();
  expect("gelu_forward", "y", y);
  expect("gelu_forward", "x", x);
  expect_f32("gelu_forward", "dydx", dydx);
  cuda::gelu_forward(arr_out(y), fp(dydx), arr_in(x), n);
}

void sum_squares(Backend& backend, const SumSquares& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const Tensor& x = call.x;
  const char* kn = "sum_squares";
  expect(kn, "x", x);
  double* work = self.work_doubles(cuda::sum_squares_work(x.numel()), kn);
  cuda::sum_squares(static_cast<double*>(self.scalars(kn)), work, arr_in(x), x.numel());
  check(cudaMemcpy(&call.result, self.scalars(kn), sizeof call.result, cudaMemcpyDeviceToHost),
        "cudaMemcpy(DeviceToHost)", kn);
}

// 16-bit storage is its format's grid already: nothing to round.
void round_to_format(Backend&, const RoundToFormat& call) {
  Tensor& x = call.x;
  const Precision format = call.format;
  const int64_t n = x.numel();
  expect("round_to_format", "x", x);
  if (is_16bit(x.dtype())) {
    NL_CHECK(format_of_dtype(x.dtype()) == format || format == Precision::fp32,
             "cuda round_to_format: x is {} storage, asked for {}", to_string(x.dtype()), to_string(format));
    return;
  }
  if (format != Precision::fp32) cuda::round_to_format(fp(x), n, format == Precision::bf16);
}

void format_census(Backend& backend, const CountFormat& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  const Tensor& x = call.x;
  const Precision format = call.format;
  const char* kn = "format_census";
  const int64_t n = x.numel();
  expect(kn, "x", x);
  double* work = self.work_doubles(cuda::format_census_work(n), kn);
  double* result = reinterpret_cast<double*>(static_cast<char*>(self.scalars(kn)) + 32);
  cuda::format_census(result, work, arr_in(x), n, static_cast<int>(format));
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
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const int64_t n = call.n;
  const int64_t d = call.d;
  expect("softmax_forward", "y", y);
  expect("softmax_forward", "x", x);
  cuda::softmax_forward(arr_out(y), arr_in(x), n, d);
}

void softmax_backward(Backend&, const SoftmaxBackward& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const Tensor& y = call.y;
  const int64_t n = call.n;
  const int64_t d = call.d;
  expect("softmax_backward", "dx", dx);
  expect("softmax_backward", "dy", dy);
  expect("softmax_backward", "y", y);
  cuda::softmax_backward(arr_out(dx), arr_in(dy), arr_in(y), n, d);
}

// ---- attention ---------------------------------------------------------------------------------
void attention_forward(Backend&, const AttentionForward& call) {
  Tensor& out = call.out;
  Tensor& probs = call.probs;
  const Tensor& q = call.q;
  const Tensor& k = call.k;
  const Tensor& v = call.v;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t h = call.h;
  const int64_t dh = call.dh;
  const double scale = call.scale;
  const char* kn = "attention_forward";
  expect(kn, "out", out);
  expect(kn, "probs", probs);
  expect(kn, "q", q);
  expect(kn, "k", k);
  expect(kn, "v", v);
  NL_CHECK(t <= cuda::attention_max_t(), "cuda {}: T = {} is longer than the {} the kernel takes",
           kn, t, cuda::attention_max_t());
  cuda::attention_forward(arr_out(out), arr_out(probs), arr_in(q), arr_in(k), arr_in(v), b, t, h, dh,
                          static_cast<float>(scale));
}

void attention_backward(Backend& backend, const AttentionBackward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor* dq = call.dq;
  Tensor* dk = call.dk;
  Tensor* dv = call.dv;
  const Tensor& dout = call.dout;
  const Tensor& q = call.q;
  const Tensor& k = call.k;
  const Tensor& v = call.v;
  const Tensor& probs = call.probs;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t h = call.h;
  const int64_t dh = call.dh;
  const double scale = call.scale;
  const char* kn = "attention_backward";
  expect(kn, "dq", dq);
  expect(kn, "dk", dk);
  expect(kn, "dv", dv);
  expect(kn, "dout", dout);
  expect(kn, "q", q);
  expect(kn, "k", k);
  expect(kn, "v", v);
  expect(kn, "probs", probs);
  NL_CHECK(t <= cuda::attention_max_t(), "cuda {}: T = {} is longer than the {} the kernel takes",
           kn, t, cuda::attention_max_t());
  float* work = (dq || dk) ? self.work_floats(b * h * t * t, kn) : nullptr;
  cuda::attention_backward(arr_out(dq), arr_out(dk), arr_out(dv), arr_in(dout), arr_in(q), arr_in(k), arr_in(v),
                           arr_in(probs), b, t, h, dh, static_cast<float>(scale), work);
}

// ---- prefix mean -------------------------------------------------------------------------------
void prefix_mean_forward(Backend&, const PrefixMeanForward& call) {
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t c = call.c;
  expect("prefix_mean_forward", "y", y);
  expect("prefix_mean_forward", "x", x);
  cuda::prefix_mean_forward(arr_out(y), arr_in(x), b, t, c);
}

void prefix_mean_backward(Backend&, const PrefixMeanBackward& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t c = call.c;
  expect("prefix_mean_backward", "dx", dx);
  expect("prefix_mean_backward", "dy", dy);
  cuda::prefix_mean_backward(arr_out(dx), arr_in(dy), b, t, c);
}

// ---- embedding -----------------------------------------------------------------------------------
void embedding_forward(Backend& backend, const EmbeddingForward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor& y = call.y;
  const Tensor& table = call.table;
  const Tensor& ids = call.ids;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int64_t d = call.d;
  const char* kn = "embedding_forward";
  expect(kn, "y", y);
  expect(kn, "table", table);
  self.expect_ids(kn, "ids", ids, n, v);
  cuda::embedding_forward(arr_out(y), arr_in(table), self.ids_ptr(ids), n, v, d);
}

void embedding_backward(Backend& backend, const EmbeddingBackward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor& dtable = call.dtable;
  const Tensor& dy = call.dy;
  const Tensor& ids = call.ids;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int64_t d = call.d;
  const char* kn = "embedding_backward";
  expect(kn, "dtable", dtable);
  expect(kn, "dy", dy);
  self.expect_ids(kn, "ids", ids, n, v);
  cuda::embedding_backward(arr_out(dtable), arr_in(dy), self.ids_ptr(ids), n, v, d);
}

// ---- cross-entropy -------------------------------------------------------------------------------
void cross_entropy_forward(Backend& backend, const CrossEntropyForward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor& loss = call.loss;
  Tensor& probs = call.probs;
  const Tensor& logits = call.logits;
  const Tensor& targets = call.targets;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const char* kn = "cross_entropy_forward";
  NL_CHECK(n > 0, "cuda {}: the mean over N rows needs N > 0 (got {})", kn, n);
  expect_f32(kn, "loss", loss);
  expect_f32(kn, "probs", probs);
  expect(kn, "logits", logits);
  self.expect_ids(kn, "targets", targets, n, v);
  cuda::cross_entropy_forward(fp(loss), fp(probs), arr_in(logits), self.ids_ptr(targets), n, v,
                              self.work_doubles(n, kn));
}

void cross_entropy_backward(Backend& backend, const CrossEntropyBackward& call) {
  CudaBackend& self = static_cast<CudaBackend&>(backend);
  Tensor& dlogits = call.dlogits;
  const Tensor& dloss = call.dloss;
  const Tensor& probs = call.probs;
  const Tensor& targets = call.targets;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const char* kn = "cross_entropy_backward";
  NL_CHECK(n > 0, "cuda {}: the mean over N rows needs N > 0 (got {})", kn, n);
  expect(kn, "dlogits", dlogits);
  expect_f32(kn, "dloss", dloss);
  expect_f32(kn, "probs", probs);
  self.expect_ids(kn, "targets", targets, n, v);
  cuda::cross_entropy_backward(arr_out(dlogits), fp(dloss), fp(probs), self.ids_ptr(targets), n, v);
}

// ---- layout -------------------------------------------------------------------------------------
void transpose(Backend&, const Transpose& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const int64_t outer = call.outer;
  const int64_t a = call.a;
  const int64_t mid = call.mid;
  const int64_t bdim = call.bdim;
  const int64_t inner = call.inner;
  expect("transpose", "out", out);
  expect("transpose", "x", x);
  cuda::transpose(arr_out(out), arr_in(x), outer, a, mid, bdim, inner);
}

// ---- statistics -------------------------------------------------------------------------------
void row_norms(Backend&, const RowNorms& call) {
  Tensor& norms = call.norms;
  const Tensor& x = call.x;
  const int64_t n = call.n;
  const int64_t d = call.d;
  expect_f32("row_norms", "norms", norms);
  expect("row_norms", "x", x);
  cuda::row_norms(fp(norms), arr_in(x), n, d);
}

void attention_logit_stats(Backend&, const AttentionLogitStats& call) {
  Tensor& max_logit = call.max_logit;
  Tensor& entropy = call.entropy;
  const Tensor& q = call.q;
  const Tensor& k = call.k;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t h = call.h;
  const int64_t dh = call.dh;
  const double scale = call.scale;
  const char* kn = "attention_logit_stats";
  expect_f32(kn, "max_logit", max_logit);
  expect_f32(kn, "entropy", entropy);
  expect(kn, "q", q);
  expect(kn, "k", k);
  cuda::attention_logit_stats(fp(max_logit), fp(entropy), arr_in(q), arr_in(k), b, t, h, dh, scale);
}

// ---- optimizer ----------------------------------------------------------------------------------
void adam_step(Backend&, const AdamStep& call) {
  Tensor& param = call.param;
  const Tensor& grad = call.grad;
  Tensor& m = call.m;
  Tensor& v = call.v;
  const AdamParams& hp = call.hp;
  const char* kn = "adam_step";
  const int64_t n = param.numel();
  NL_CHECK(hp.step >= 1, "cuda {}: step is 1-based for the bias correction (got {})", kn, hp.step);
  expect_f32(kn, "param", param);
  expect_f32(kn, "grad", grad);
  expect_f32(kn, "m", m);
  expect_f32(kn, "v", v);
  // The cpu backend's arithmetic (float32, corrections as reciprocals computed in double).
  const double step = static_cast<double>(hp.step);
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(hp.beta1, step)));
  const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(hp.beta2, step)));
  cuda::adam_step(fp(param), fp(m), fp(v), fp(grad), n, static_cast<float>(hp.lr),
                  static_cast<float>(hp.beta1), static_cast<float>(hp.beta2),
                  static_cast<float>(hp.eps), inv_bc1, inv_bc2,
                  hp.decoupled ? 0.0f : static_cast<float>(hp.weight_decay),
                  hp.decoupled ? static_cast<float>(hp.weight_decay) : 0.0f);
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
