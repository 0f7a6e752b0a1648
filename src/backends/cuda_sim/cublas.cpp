// cuda-sim's cuBLAS (include/cublas_v2.h): Sgemm and SgemmStridedBatched as a plain reference
// GEMM, column-major as cuBLAS is, with its argument checks (INVALID_VALUE), its pointer modes
// (alpha and beta read from the host or from device memory) and beta = 0 meaning C is not
// read. Every operand range is checked against the device allocations first: a product that
// would read or write outside them is EXECUTION_FAILED with the reason in
// cudasim::last_error_detail(). Sums run over k in ascending order in float with fmaf. The math
// mode is recorded and ignored: TF32 is not emulated.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_set>

#include "cuda_sim_control.h"
#include "include/cublas_v2.h"
#include "include/cuda_bf16.h"
#include "include/cuda_fp16.h"

struct cublasContext {
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace cudasim {
void note_blas_error(std::string detail);  // runtime.cpp
}

namespace {

struct Gemm {
  cublasOperation_t ta, tb;
  int m, n, k;
  float alpha, beta;
  const void *a, *b;
  void* c;
  int lda, ldb, ldc;
  long long sa, sb, sc;
  int batch;
  cudaDataType_t type_ab = CUDA_R_32F, type_c = CUDA_R_32F;
};

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
float load(const void* p, cudaDataType_t t, long long i) {
  if (t == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (t == CUDA_R_16F) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
void store(void* p, cudaDataType_t t, long long i, float v) {
  if (t == CUDA_R_16BF) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else if (t == CUDA_R_16F) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<float*>(p)[i] = v;
}

// Elements a column-major (rows x cols) operand with leading dimension ld spans.
long long extent(long long rows, long long cols, long long ld) { return cols == 0 || rows == 0 ? 0 : ld * (cols - 1) + rows; }

void run(void* arg) {
  const Gemm& g = *static_cast<const Gemm*>(arg);
  // A(i, p) of op(A) (m x k); B(p, j) of op(B) (k x n).
  const long long a_i = g.ta == CUBLAS_OP_N ? 1 : g.lda, a_p = g.ta == CUBLAS_OP_N ? g.lda : 1;
  const long long b_p = g.tb == CUBLAS_OP_N ? 1 : g.ldb, b_j = g.tb == CUBLAS_OP_N ? g.ldb : 1;
  for (int bi = 0; bi < g.batch; ++bi) {
    const long long a0 = bi * g.sa, b0 = bi * g.sb, c0 = bi * g.sc;
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        float acc = 0.0f;
        for (int p = 0; p < g.k; ++p)
          acc = std::fmaf(load(g.a, g.type_ab, a0 + i * a_i + p * a_p), load(g.b, g.type_ab, b0 + p * b_p + j * b_j),
                          acc);
        const long long at = c0 + i + static_cast<long long>(j) * g.ldc;
        store(g.c, g.type_c, at,
              g.beta == 0.0f ? g.alpha * acc : g.alpha * acc + g.beta * load(g.c, g.type_c, at));
      }
  }
}

void read_scalar(void* arg) {
  auto* p = static_cast<std::pair<const float*, float*>*>(arg);
  *p->second = *p->first;
}

cublasStatus_t gemm(cublasHandle_t h, Gemm g, const float* alpha, const float* beta, const char* name) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int a_rows = g.ta == CUBLAS_OP_N ? g.m : g.k, b_rows = g.tb == CUBLAS_OP_N ? g.k : g.n;
  if ((g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T) || (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T) || g.m < 0 ||
      g.n < 0 || g.k < 0 || g.batch < 0 || g.lda < std::max(1, a_rows) || g.ldb < std::max(1, b_rows) ||
      g.ldc < std::max(1, g.m) || alpha == nullptr || beta == nullptr) {
    cudasim::note_blas_error(std::string(name) + ": an argument is out of range (the dimensions, a leading dimension or a null scalar)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
    if (!cudasim::device_range(alpha, sizeof(float)) || !cudasim::device_range(beta, sizeof(float))) {
      cudasim::note_blas_error(std::string(name) + ": pointer mode DEVICE but alpha or beta is not device memory");
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    std::pair<const float*, float*> ra{alpha, &g.alpha}, rb{beta, &g.beta};
    cudasim::with_device_access(read_scalar, &ra);
    cudasim::with_device_access(read_scalar, &rb);
  } else {
    if (cudasim::is_device_pointer(alpha) || cudasim::is_device_pointer(beta)) {
      cudasim::note_blas_error(std::string(name) + ": pointer mode HOST but alpha or beta is device memory");
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    g.alpha = *alpha;
    g.beta = *beta;
  }
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  const int a_cols = g.ta == CUBLAS_OP_N ? g.k : g.m, b_cols = g.tb == CUBLAS_OP_N ? g.n : g.k;
  auto fits = [&](const void* p, cudaDataType_t type, long long rows, long long cols, long long ld, long long stride,
                  const char* which) {
    const long long span = stride < 0 ? -1 : stride * (g.batch - 1) + extent(rows, cols, ld);
    if (span == 0 || (span > 0 && cudasim::device_range(p, static_cast<size_t>(span) * type_bytes(type)))) return true;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%p", p);
    cudasim::note_blas_error(std::string(name) + ": " + which + " (" + buf + ", " + std::to_string(span) +
                             " elements) is not inside one device allocation");
    return false;
  };
  if ((g.k > 0 && (!fits(g.a, g.type_ab, a_rows, a_cols, g.lda, g.sa, "A") ||
                   !fits(g.b, g.type_ab, b_rows, b_cols, g.ldb, g.sb, "B"))) ||
      !fits(g.c, g.type_c, g.m, g.n, g.ldc, g.sc, "C"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  cudasim::with_device_access(run, &g);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

namespace {
// Every live handle, reachable until cublasDestroy: a program may leave its handle to the
// process's end (normlab's CUDA backend does: cuBLAS must not be called at exit), which
// LeakSanitizer would otherwise report as a leak.
struct Handles {
  std::mutex mu;
  std::unordered_set<cublasContext*> live;
};
Handles& handles() {
  static auto* h = new Handles();
  return *h;
}
}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext();
  std::lock_guard<std::mutex> lock(handles().mu);
  handles().live.insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  {
    std::lock_guard<std::mutex> lock(handles().mu);
    handles().live.erase(handle);
  }
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
  }
  return "unknown status";
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                           const float* beta, float* c, int ldc) {
  Gemm g{transa, transb, m, n, k, 0.0f, 0.0f, a, b, c, lda, ldb, ldc, 0, 0, 0, 1, CUDA_R_32F, CUDA_R_32F};
  return gemm(handle, g, alpha, beta, "cublasSgemm");
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* a, int lda,
                                         long long stride_a, const float* b, int ldb, long long stride_b,
                                         const float* beta, float* c, int ldc, long long stride_c, int batch) {
  Gemm g{transa, transb, m, n, k, 0.0f, 0.0f, a, b, c, lda, ldb, ldc, stride_a, stride_b, stride_c, batch, CUDA_R_32F, CUDA_R_32F};
  return gemm(handle, g, alpha, beta, "cublasSgemmStridedBatched");
}

namespace {

// The type combinations cuBLAS documents for a 32F compute type: A and B alike, C 32F or A's.
bool supported(cudaDataType_t a, cudaDataType_t b, cudaDataType_t c, cublasComputeType_t compute) {
  auto known = [](cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; };
  if (!known(a) || a != b || !known(c) || (c != CUDA_R_32F && c != a)) return false;
  if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) return a == CUDA_R_32F && c == CUDA_R_32F;
  return compute == CUBLAS_COMPUTE_32F;
}

cublasStatus_t gemm_ex(cublasHandle_t handle, Gemm g, const void* alpha, const void* beta, cudaDataType_t a_type,
                       cudaDataType_t b_type, cudaDataType_t c_type, cublasComputeType_t compute, const char* name) {
  if (handle != nullptr && !supported(a_type, b_type, c_type, compute)) {
    cudasim::note_blas_error(std::string(name) + ": an unsupported combination of types (A, B, C, compute)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  g.type_ab = a_type;
  g.type_c = c_type;
  return gemm(handle, g, static_cast<const float*>(alpha), static_cast<const float*>(beta), name);
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* a, cudaDataType_t a_type, int lda, const void* b,
                            cudaDataType_t b_type, int ldb, const void* beta, void* c, cudaDataType_t c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  Gemm g{transa, transb, m, n, k, 0.0f, 0.0f, a, b, c, lda, ldb, ldc, 0, 0, 0, 1, CUDA_R_32F, CUDA_R_32F};
  return gemm_ex(handle, g, alpha, beta, a_type, b_type, c_type, compute, "cublasGemmEx");
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* a,
                                          cudaDataType_t a_type, int lda, long long stride_a, const void* b,
                                          cudaDataType_t b_type, int ldb, long long stride_b, const void* beta,
                                          void* c, cudaDataType_t c_type, int ldc, long long stride_c, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  Gemm g{transa, transb, m, n, k, 0.0f, 0.0f, a, b, c, lda, ldb, ldc, stride_a, stride_b, stride_c, batch, CUDA_R_32F, CUDA_R_32F};
  return gemm_ex(handle, g, alpha, beta, a_type, b_type, c_type, compute, "cublasGemmStridedBatchedEx");
}
