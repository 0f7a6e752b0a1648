// cuda-sim's cuBLAS: Sgemm and SgemmStridedBatched against a plain column-major loop, for every
// transpose combination, odd sizes, padded leading dimensions, alpha and beta, beta = 0 not
// reading C (NaN in C must not leak), alpha/beta in device memory, and the argument checks; GemmEx
// and GemmStridedBatchedEx over bf16 operands.
#include <cmath>
#include <random>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sim_test.h"

namespace {

using simtest::DeviceArray;

struct Handle {
  cublasHandle_t h = nullptr;
  Handle() { EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS); }
  ~Handle() { cublasDestroy(h); }
  operator cublasHandle_t() const { return h; }
};

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// C(i, j) = alpha * sum_p op(A)(i, p) op(B)(p, j) + beta * C(i, j), column-major, in double;
// with beta == 0, C is not read.
void reference_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                    int ldb, float beta, float* c, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p + static_cast<size_t>(i) * lda] : a[i + static_cast<size_t>(p) * lda];
        const double bv = tb ? b[j + static_cast<size_t>(p) * ldb] : b[p + static_cast<size_t>(j) * ldb];
        acc += av * bv;
      }
      float& out = c[i + static_cast<size_t>(j) * ldc];
      out = static_cast<float>(beta == 0.0f ? alpha * acc : alpha * acc + beta * static_cast<double>(out));
    }
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!same_nan && !(std::fabs(got[i] - want[i]) <= 1e-5f + 1e-5f * std::fabs(want[i])) && ++bad <= 5)
      ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << " want " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

struct GemmCase {
  bool ta, tb;
  int m, n, k;
  float alpha, beta;
};

std::string case_name(const GemmCase& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " m=" + std::to_string(c.m) + " n=" +
         std::to_string(c.n) + " k=" + std::to_string(c.k) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta);
}

// One (batched) product on device memory; padded leading dimensions (rows + 3) so that a
// mixed-up leading dimension shows; the padding of C must be left alone.
void check_gemm(const GemmCase& c, int batch, bool strided, bool c_nan, unsigned seed) {
  SCOPED_TRACE(case_name(c) + " batch=" + std::to_string(batch) + (c_nan ? " C=NaN" : ""));
  const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const int lda = a_rows + 3, ldb = b_rows + 3, ldc = c.m + 3;
  const long long sa = static_cast<long long>(lda) * a_cols + 5, sb = static_cast<long long>(ldb) * b_cols + 7,
                  sc = static_cast<long long>(ldc) * c.n + 2;
  std::vector<float> a = random_floats(static_cast<size_t>(sa) * batch, seed);
  std::vector<float> b = random_floats(static_cast<size_t>(sb) * batch, seed + 1);
  std::vector<float> cm = random_floats(static_cast<size_t>(sc) * batch, seed + 2);
  if (c_nan)
    for (size_t i = 0; i < cm.size(); ++i)
      if (i % static_cast<size_t>(sc) < static_cast<size_t>(ldc) * c.n && (i % static_cast<size_t>(sc)) % ldc < static_cast<size_t>(c.m))
        cm[i] = NAN;  // the m x n part of every C
  DeviceArray<float> da(a), db(b), dc(cm);
  Handle h;
  cublasStatus_t st;
  if (strided) {
    st = cublasSgemmStridedBatched(h, c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, c.tb ? CUBLAS_OP_T : CUBLAS_OP_N, c.m, c.n, c.k,
                                   &c.alpha, da.p, lda, sa, db.p, ldb, sb, &c.beta, dc.p, ldc, sc, batch);
  } else {
    st = cublasSgemm(h, c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, c.tb ? CUBLAS_OP_T : CUBLAS_OP_N, c.m, c.n, c.k, &c.alpha,
                     da.p, lda, db.p, ldb, &c.beta, dc.p, ldc);
  }
  ASSERT_EQ(st, CUBLAS_STATUS_SUCCESS) << cublasGetStatusName(st) << ": " << cudasim::last_error_detail();
  std::vector<float> want = cm;
  for (int i = 0; i < batch; ++i)
    reference_gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data() + i * sa, lda, b.data() + i * sb, ldb, c.beta,
                   want.data() + i * sc, ldc);
  const std::vector<float> got = dc.download();
  expect_near_all(got, want, "C");
  if (c_nan && c.beta == 0.0f) {
    for (int i = 0; i < batch; ++i)
      for (int j = 0; j < c.n; ++j)
        for (int r = 0; r < c.m; ++r) {
          ASSERT_FALSE(std::isnan(got[i * sc + j * ldc + r])) << "NaN of C leaked with beta = 0";
        }
  }
}

const GemmCase kCases[] = {
    {false, false, 5, 7, 3, 1.0f, 0.0f},   {false, true, 5, 7, 3, 1.0f, 0.0f},   {true, false, 5, 7, 3, 1.0f, 0.0f},
    {true, true, 5, 7, 3, 1.0f, 0.0f},     {false, false, 13, 1, 9, 0.5f, 2.0f}, {false, true, 1, 11, 17, -1.5f, 0.25f},
    {true, false, 9, 13, 1, 2.0f, -1.0f},  {true, true, 17, 9, 33, 0.75f, 1.0f}, {true, false, 3, 5, 0, 1.0f, 0.5f},
};

TEST(CudaSimCublas, SgemmMatchesAPlainLoopForEveryTransposeCombination) {
  unsigned seed = 1;
  for (const GemmCase& c : kCases) check_gemm(c, 1, false, false, seed += 10);
}

TEST(CudaSimCublas, SgemmStridedBatchedMatchesAPlainLoopForEveryTransposeCombination) {
  unsigned seed = 500;
  for (const GemmCase& c : kCases) check_gemm(c, 3, true, false, seed += 10);
}

TEST(CudaSimCublas, BetaZeroDoesNotReadC) {
  unsigned seed = 900;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm({ta, tb, 7, 5, 3, 1.25f, 0.0f}, 1, false, true, seed += 10);
      check_gemm({ta, tb, 7, 5, 3, 1.25f, 0.0f}, 2, true, true, seed += 10);
    }
  // The control: with beta != 0 the NaN of C does come through.
  DeviceArray<float> a(std::vector<float>(4, 1.0f)), b(std::vector<float>(4, 1.0f)), c(4);  // c: NaN (new memory)
  Handle h;
  const float alpha = 1.0f, beta = 1.0f;
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, a.p, 2, b.p, 2, &beta, c.p, 2),
            CUBLAS_STATUS_SUCCESS);
  for (float v : c.download()) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaSimCublas, AlphaAndBetaFromDeviceMemory) {
  Handle h;
  ASSERT_EQ(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 2, k = 4;
  const std::vector<float> a = random_floats(m * k, 7), b = random_floats(k * n, 8), c0 = random_floats(m * n, 9);
  DeviceArray<float> da(a), db(b), dc(c0), scalars(std::vector<float>{-2.0f, 0.5f});
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, scalars.p, da.p, m, db.p, k, scalars.p + 1, dc.p, m),
            CUBLAS_STATUS_SUCCESS)
      << cudasim::last_error_detail();
  std::vector<float> want = c0;
  reference_gemm(false, false, m, n, k, -2.0f, a.data(), m, b.data(), k, 0.5f, want.data(), m);
  expect_near_all(dc.download(), want, "device alpha/beta");
  // Strided batched in the same mode, beta = 0 from the device.
  DeviceArray<float> zero(std::vector<float>{0.0f});
  ASSERT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, scalars.p, da.p, m, 0, db.p, k, 0,
                                      zero.p, dc.p, m, 0, 1),
            CUBLAS_STATUS_SUCCESS);
  want = c0;
  reference_gemm(false, false, m, n, k, -2.0f, a.data(), m, b.data(), k, 0.0f, want.data(), m);
  expect_near_all(dc.download(), want, "device alpha, beta = 0");
  // Host scalars in device mode, device scalars in host mode: refused.
  const float host_alpha = 1.0f, host_beta = 0.0f;
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &host_alpha, da.p, m, db.p, k, &host_beta, dc.p, m),
            CUBLAS_STATUS_EXECUTION_FAILED);
  ASSERT_EQ(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, scalars.p, da.p, m, db.p, k, scalars.p + 1, dc.p, m),
            CUBLAS_STATUS_EXECUTION_FAILED);
}

TEST(CudaSimCublas, InvalidArgumentsAreInvalidValue) {
  Handle h;
  const int m = 4, n = 3, k = 5;
  DeviceArray<float> a(64), b(64), c(64);
  const float alpha = 1.0f, beta = 0.0f;
  auto sgemm = [&](cublasOperation_t ta, cublasOperation_t tb, int mm, int nn, int kk, int lda, int ldb, int ldc) {
    return cublasSgemm(h, ta, tb, mm, nn, kk, &alpha, a.p, lda, b.p, ldb, &beta, c.p, ldc);
  };
  ASSERT_EQ(sgemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m, k, m), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(sgemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m - 1, k, m), CUBLAS_STATUS_INVALID_VALUE) << "lda < m";
  EXPECT_EQ(sgemm(CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, k - 1, k, m), CUBLAS_STATUS_INVALID_VALUE) << "lda < k with A^T";
  EXPECT_EQ(sgemm(CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, k, k, m), CUBLAS_STATUS_SUCCESS) << "lda = k with A^T";
  EXPECT_EQ(sgemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m, k - 1, m), CUBLAS_STATUS_INVALID_VALUE) << "ldb < k";
  EXPECT_EQ(sgemm(CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, m, n - 1, m), CUBLAS_STATUS_INVALID_VALUE) << "ldb < n with B^T";
  EXPECT_EQ(sgemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m, k, m - 1), CUBLAS_STATUS_INVALID_VALUE) << "ldc < m";
  EXPECT_EQ(sgemm(CUBLAS_OP_N, CUBLAS_OP_N, 0, n, k, 0, k, 0), CUBLAS_STATUS_INVALID_VALUE) << "ld 0 (must be >= 1)";
  EXPECT_EQ(sgemm(CUBLAS_OP_N, CUBLAS_OP_N, -1, n, k, m, k, m), CUBLAS_STATUS_INVALID_VALUE) << "m < 0";
  EXPECT_EQ(sgemm(CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, m, k, m), CUBLAS_STATUS_INVALID_VALUE) << "OP_C";
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, nullptr, a.p, m, b.p, k, &beta, c.p, m),
            CUBLAS_STATUS_INVALID_VALUE)
      << "null alpha";
  EXPECT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.p, m - 1, 0, b.p, k, 0, &beta,
                                      c.p, m, 0, 2),
            CUBLAS_STATUS_INVALID_VALUE)
      << "batched, lda < m";
  EXPECT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.p, m, 0, b.p, k, 0, &beta, c.p,
                                      m, 0, -1),
            CUBLAS_STATUS_INVALID_VALUE)
      << "batch < 0";
  EXPECT_EQ(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.p, m, b.p, k, &beta, c.p, m),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(CudaSimCublas, OperandsOutsideTheirAllocationsAreExecutionFailed) {
  Handle h;
  DeviceArray<float> a(20), b(20), c(20);
  const float alpha = 1.0f, beta = 0.0f;
  // A (N, 5 x 4, lda 5) spans 20 floats: fits; from a.p + 1 it does not.
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 4, &alpha, a.p, 5, b.p, 4, &beta, c.p, 5),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 4, &alpha, a.p + 1, 5, b.p, 4, &beta, c.p, 5),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_NE(cudasim::last_error_detail().find("A ("), std::string::npos) << cudasim::last_error_detail();
  // Batched: the second C (stride 20) lies beyond c.
  EXPECT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 4, &alpha, a.p, 5, 0, b.p, 4, 0, &beta, c.p, 5,
                                      20, 2),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_NE(cudasim::last_error_detail().find("C ("), std::string::npos) << cudasim::last_error_detail();
  // Host memory as an operand.
  std::vector<float> host(20, 1.0f);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 4, &alpha, host.data(), 5, b.p, 4, &beta, c.p, 5),
            CUBLAS_STATUS_EXECUTION_FAILED);
}

TEST(CudaSimCublas, AHandleLeftToTheProcessEndIsNotALeak) {
  // normlab's CUDA backend never destroys its handle (cuBLAS must not be called at exit): under
  // the sanitizers, LeakSanitizer must not report it when this test's process ends.
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  h = nullptr;  // the only pointer this program had
}

}  // namespace

namespace {

// v rounded to bf16 and its encoding (the simulator's own conversion).
std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out;
  for (float x : v) out.push_back(__float2bfloat16_rn(x));
  return out;
}
std::vector<float> from_bf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out;
  for (__nv_bfloat16 x : v) out.push_back(__bfloat162float(x));
  return out;
}

}  // namespace

// GemmEx and GemmStridedBatchedEx over bf16 operands: the Sgemm of the operands' float values,
// bit for bit, written as float32 or rounded once to bf16; beta reads a bf16 C; the type
// combinations cuBLAS does not offer are INVALID_VALUE.
TEST(CudaSimCublas, GemmExIsSgemmOfTheWidenedOperands) {
  Handle h;
  const int m = 5, n = 3, k = 7, batch = 2;
  const std::vector<__nv_bfloat16> a16 = to_bf16(random_floats(batch * m * k, 21)),
                                   b16 = to_bf16(random_floats(batch * k * n, 22)),
                                   c16 = to_bf16(random_floats(batch * m * n, 23));
  DeviceArray<float> a32(from_bf16(a16)), b32(from_bf16(b16)), c32(from_bf16(c16)), out32(batch * m * n);
  DeviceArray<__nv_bfloat16> a(a16), b(b16), c(c16);
  const float alpha = 1.0f, beta = 1.0f, zero = 0.0f;
  // Sgemm with beta 1 on float32 copies; GemmEx into float32 (beta 0, then compared without C)
  // and into bf16 with beta 1.
  ASSERT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a32, k, m * k, b32, k, k * n,
                                      &beta, c32, m, m * n, batch),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, k, m * k, b,
                                       CUDA_R_16BF, k, k * n, &beta, c, CUDA_R_16BF, m, m * n, batch,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> want = c32.download();
  const std::vector<__nv_bfloat16> got = c.download();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(__bfloat162float(got[i]), __bfloat162float(__float2bfloat16_rn(want[i]))) << i;
  // One product, float32 out, beta 0: Sgemm's values exactly.
  DeviceArray<float> s32(m * n);
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a32, k, b32, k, &zero, s32, m),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, k, b, CUDA_R_16BF, k, &zero,
                         out32, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> s = s32.download(), e = out32.download();
  for (int i = 0; i < m * n; ++i) EXPECT_EQ(e[static_cast<size_t>(i)], s[static_cast<size_t>(i)]) << i;
  // A and B of different types, a 16-bit C of another type, TF32 compute on 16-bit operands.
  DeviceArray<__half> c_half(m * n);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, k, b32, CUDA_R_32F, k, &zero,
                         out32, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, k, b, CUDA_R_16BF, k, &zero,
                         c_half, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, k, b, CUDA_R_16BF, k, &zero,
                         out32, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
}
