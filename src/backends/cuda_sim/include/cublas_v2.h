// cuda-sim's stand-in for cuBLAS: the calls normlab's CUDA backend makes, served by a plain
// reference GEMM over device memory (src/backends/cuda_sim/cublas.cpp) with cuBLAS's
// column-major conventions, argument checks and pointer modes, so that the backend's
// row-major-as-transposed trick is tested too.
#pragma once
#include "cuda_runtime.h"

enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
};
enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasPointerMode_t : int { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 };
enum cublasMath_t : int {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,  // a flag, or-ed with a mode
};

// library_types.h's element types and cublas_api.h's compute types (the values are CUDA's).
enum cudaDataType_t : int { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t : int { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t : int { CUBLAS_GEMM_DEFAULT = -1 };

struct cublasContext;
using cublasHandle_t = cublasContext*;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
const char* cublasGetStatusName(cublasStatus_t status);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                           int n, int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                           const float* beta, float* c, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                         const float* a, int lda, long long stride_a, const float* b, int ldb,
                                         long long stride_b, const float* beta, float* c, int ldc,
                                         long long stride_c, int batch);
// Mixed-precision GEMM: A and B of one type (32F, 16F or 16BF), C 32F or A's type, compute
// 32F: every operand widened to float, the sum as Sgemm's, C rounded once to its type.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* a, cudaDataType_t a_type, int lda, const void* b,
                            cudaDataType_t b_type, int ldb, const void* beta, void* c, cudaDataType_t c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* a,
                                          cudaDataType_t a_type, int lda, long long stride_a, const void* b,
                                          cudaDataType_t b_type, int ldb, long long stride_b, const void* beta,
                                          void* c, cudaDataType_t c_type, int ldc, long long stride_c, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo);
