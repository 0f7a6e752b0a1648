// The CUDA backend's kernels behind plain C++ launchers on raw device pointers (private to
// src/backends/cuda), under the cpu backend's names. One .cu file per op family defines them,
// each launcher below its kernels (common.cuh has the device code they share); the backend
// class (cuda_backend.cpp, the host compiler) checks tensors and calls these. Every launcher
// runs on the default stream, checks the launch (and, with NORMLAB_CUDA_SYNC=1 in the
// environment, waits for the kernel and checks its completion), and reports a failure through
// cuda_fail, which throws normlab::Error naming the CUDA call and the kernel.
//
// Semantics are the reference backend's (include/backend_reference/normlab/reference_kernels.h):
// outputs are WRITTEN unless stated, nullptr gradient outputs are skipped. Nothing uses float
// atomics: every reduction has a fixed order, so results are bit-reproducible run to run.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "normlab/dropout_mask.h"
#include "normlab/precision.h"

namespace normlab::cuda {

// Throws normlab::Error("cuda <kernel>: <call> failed: <error name>: <error string>").
[[noreturn]] void cuda_fail(const char* call, const char* kernel, cudaError_t status);
// Checks `status` of `call` made for `kernel`.
inline void check(cudaError_t status, const char* call, const char* kernel) {
  if (status != cudaSuccess) cuda_fail(call, kernel, status);
}
// After a launch: cudaGetLastError, and with NORMLAB_CUDA_SYNC=1 cudaDeviceSynchronize too
// (launch.cu).
void check_launch(const char* kernel);

// ---- arrays of either storage ----------------------------------------------------------------
// Where training stores activations in bf16 / fp16 (native low-precision storage, DType bf16 /
// f16), an array is float32 or the 16-bit encodings, decided per tensor: In (read) and Out
// (written, and read where a kernel accumulates) carry the pointer and the format it holds
// (Precision: fp32 for float32 storage), and the kernels load every element as float32 and round
// once at the store (common.cuh: ld, st). A plain float pointer converts to either.
struct In {
  const void* p = nullptr;
  Precision e = Precision::fp32;
  In() = default;
  __host__ __device__ In(const float* f) : p(f) {}  // NOLINT(google-explicit-constructor): float32 as before
  __host__ __device__ In(const void* ptr, Precision format) : p(ptr), e(format) {}
  __host__ __device__ explicit operator bool() const { return p != nullptr; }
};
struct Out {
  void* p = nullptr;
  Precision e = Precision::fp32;
  Out() = default;
  __host__ __device__ Out(float* f) : p(f) {}  // NOLINT(google-explicit-constructor)
  __host__ __device__ Out(void* ptr, Precision format) : p(ptr), e(format) {}
  __host__ __device__ explicit operator bool() const { return p != nullptr; }
  __host__ __device__ operator In() const { return In(p, e); }  // NOLINT: an output read back (accumulate)
};

// ---- elementwise.cu: n values, grid-stride ----------------------------------------------------
void fill_f32(float* out, int64_t n, float value);
void fill_u16(uint16_t* out, int64_t n, uint16_t bits);  // a 16-bit encoding, repeated
// out[i] = x[i] converted to out's storage (rounded to nearest even when narrower).
void convert(Out out, In x, int64_t n);
void fill_f64(double* out, int64_t n, double value);
void fill_i32(int32_t* out, int64_t n, int32_t value);
void add(Out out, In a, In b, float alpha, float beta, int64_t n);
void accumulate(Out dst, In src, int64_t n);
// y[i] = x[i] * float(keep scale) where the mask keeps i, else 0 (dropout_mask.h); y may be x.
void dropout(Out y, In x, int64_t n, const DropoutMask& mask);
void scale(Out out, In x, float alpha, int64_t n);
void mul(Out out, In a, In b, int64_t n);
// x[i] stored as bf16 (bf16 = true) or fp16 and read back: the GPU's own conversions
// (__float2bfloat16_rn, __float2half_rn: nearest even, overflow to inf, subnormals kept).
void round_to_format(float* x, int64_t n, bool bf16);
// precision.h's composite_norm_row over n rows (LayerNorm when beta is given; mean then
// written), format 1 bf16 / 2 fp16. Sums in double, reduced across the block: the float32 they
// round to is the exact sum's but where the double sum itself rounded (docs/precision.md).
void composite_norm_forward(Out y, float* mean, float* rstd, In x, In gamma, In beta, int64_t n, int64_t d,
                            double eps, int format);
// precision.h's composite_norm_row_backward over n rows (LayerNorm when mean is given), and
// dgamma / dbeta (nullable) as column sums in double, rows in order. dx.p null: no dx.
void composite_norm_backward(Out dx, float* dgamma, float* dbeta, In dy, In x, In gamma, const float* mean,
                             const float* rstd, int64_t n, int64_t d, int format);
// precision.h's FormatCensus of x in bf16 / fp16 / fp32 (format 0, 1, 2 as Precision's fp32,
// bf16, fp16): result_dev receives {count of non-finite, overflow, underflow, max |finite|} as 4
// doubles; `work` holds >= format_census_work(n) doubles.
int64_t format_census_work(int64_t n);
void format_census(double* result_dev, double* work, In x, int64_t n, int format);
void gelu_forward(Out y, float* dydx, In x, int64_t n);
// sum of x^2 in double; `work` holds >= sum_squares_work(n) doubles.
int64_t sum_squares_work(int64_t n);
void sum_squares(double* result_dev, double* work, In x, int64_t n);
// out (M x N) = bias (broadcast over rows, nullable) + residual (nullable); zeros when both null.
void bias_residual_init(float* out, const float* bias, const float* residual, int64_t m, int64_t n);
// The linear layer's epilogue over a float32 product: out = product + (bias + residual), each
// nullable, rounded once to out's storage (the sum bias_residual_init would have made first).
void linear_epilogue(Out out, const float* product, In bias, In residual, int64_t m, int64_t n);
// The cpu backend's float32 arithmetic: inv_bc1 = 1/(1-b1^step), inv_bc2 = 1/(1-b2^step).
void adam_step(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
               float beta1, float beta2, float eps, float inv_bc1, float inv_bc2, float wd_l2,
               float wd_decoupled);

// ---- columns.cu: column sums over rows, deterministic two-stage reductions --------------------
// Floats of workspace the column reductions (and the one-pass norm backward's per-block partial
// sums) need for (rows, cols): two partial arrays.
int64_t column_work(int64_t rows, int64_t cols);
// out[j] = sum_i x[i, j]; T: float, __nv_bfloat16 or __half (the storage of x).
template <class T>
void sum_rows(float* out, const T* x, int64_t rows, int64_t cols, float* work);

// ---- squash.cu: DyT / Derf (f = 0 tanh, 1 erf) and the channel scale, N rows of D -------------
// SquashForward/Backward, ChannelScaleForward/Backward: x, dy, dx, y of either storage; alpha, shift, gamma, beta,
// lambda read as In; the parameter gradients float32. `work` holds squash_work(n, d) (or
// channel_scale_work(n, d)) floats.
int64_t squash_work(int64_t rows, int64_t cols);
void squash_forward(Out y, In x, In alpha, In shift, In gamma, In beta, int64_t n, int64_t d, int f);
void squash_backward(Out dx, float* dalpha, float* dshift, float* dgamma, float* dbeta, In dy, In x, In alpha, In shift,
                     In gamma, int64_t n, int64_t d, int f, float* work);
int64_t channel_scale_work(int64_t rows, int64_t cols);
void channel_scale_forward(Out y, In x, In lambda, int64_t n, int64_t d, int64_t c);
void channel_scale_backward(Out dx, float* dlambda, In dy, In x, In lambda, int64_t n, int64_t d, int64_t c,
                            float* work);

// ---- norms.cu: LayerNorm / RMSNorm over the last dimension (N rows of D) ----------------------
// T, the storage of the N x D arrays and of gamma/beta: float, __nv_bfloat16 (cuda_bf16.h) or
// __half (cuda_fp16.h; native low-precision training, and `bench norms --precision bf16,fp16`). Statistics (mean, rstd) and dgamma/dbeta are float32 either way,
// and every kernel computes in float32. The add+norm forwards write s = alpha*a + b (as stored)
// and normalize it. The backwards write dx, dgamma, dbeta where non-null; `work` holds
// column_work(n, d) floats.
template <class T>
void layernorm_forward(T* y, float* mean, float* rstd, const T* x, const T* gamma, const T* beta,
                       int64_t n, int64_t d, float eps);
template <class T>
void rmsnorm_forward(T* y, float* rstd, const T* x, const T* gamma, int64_t n, int64_t d, float eps);
template <class T>
void add_layernorm_forward(T* s, T* y, float* mean, float* rstd, const T* a, const T* b, float alpha,
                           const T* gamma, const T* beta, int64_t n, int64_t d, float eps);
template <class T>
void add_rmsnorm_forward(T* s, T* y, float* rstd, const T* a, const T* b, float alpha, const T* gamma,
                         int64_t n, int64_t d, float eps);
template <class T>
void layernorm_backward(T* dx, float* dgamma, float* dbeta, const T* dy, const T* x, const T* gamma,
                        const float* mean, const float* rstd, int64_t n, int64_t d, float* work);
template <class T>
void rmsnorm_backward(T* dx, float* dgamma, const T* dy, const T* x, const T* gamma, const float* rstd,
                      int64_t n, int64_t d, float* work);

// ---- softmax_loss.cu: softmax (N rows of D), cross-entropy ------------------------------------
void softmax_forward(Out y, In x, int64_t n, int64_t d);
void softmax_backward(Out dx, In dy, In y, int64_t n, int64_t d);
// `work` holds n doubles (per-row losses).
void cross_entropy_forward(float* loss, float* probs, In logits, const int32_t* targets, int64_t n, int64_t v,
                           double* work);
void cross_entropy_backward(Out dlogits, const float* dloss, const float* probs, const int32_t* targets, int64_t n,
                            int64_t v);

// ---- attention.cu: attention, prefix mean ------------------------------------------------------
// Largest Tk the attention kernels take (one row of scores in shared memory).
int64_t attention_max_t();
// The sizes of an attention call: B sequences of T queries and Tk keys, H heads of Dh channels;
// causal: query t sees keys s <= t (Tk = T), else all Tk.
struct AttnSizes {
  int64_t b, t, tk, h, dh;
  bool causal;
  __host__ __device__ int64_t seen(int64_t ti) const { return causal ? (ti + 1 < tk ? ti + 1 : tk) : tk; }
};
// stats: b*h*t*2 floats, each query row's softmax max and sum.
void attention_forward(Out out, float* stats, In q, In k, In v, const AttnSizes& n, float scale,
                       const DropoutMask& dropout);
// `work` holds b*h*t*tk floats for P recomputed from the forward's stats (rounded to probs_format,
// Precision's order), and as many again for scale * dS when dq or dk is wanted.
void attention_backward(Out dq, Out dk, Out dv, In dout, In q, In k, In v, const float* stats, const AttnSizes& n,
                        float scale, int probs_format, const DropoutMask& dropout, float* work);
void prefix_mean_forward(Out y, In x, int64_t b, int64_t t, int64_t c);
void prefix_mean_backward(Out dx, In dy, int64_t b, int64_t t, int64_t c);

// ---- layout.cu: transpose, ids, embedding ------------------------------------------------------
void transpose(Out out, In x, int64_t outer, int64_t a, int64_t mid, int64_t bdim, int64_t inner);
// The first index i with ids[i] outside [0, v), or -1. Synchronizes.
int64_t first_bad_id(const int32_t* ids, int64_t n, int64_t v, int32_t* flag_dev,
                     const char* kernel);
void embedding_forward(Out y, In table, const int32_t* ids, int64_t n, int64_t v, int64_t d);
void embedding_backward(Out dtable, In dy, const int32_t* ids, int64_t n, int64_t v, int64_t d);

// ---- stats.cu: statistics of a log step, double arithmetic, one block per row -------------------
void row_norms(float* norms, In x, int64_t n, int64_t d);
void attention_logit_stats(float* max_logit, float* entropy, In q, In k, int64_t b, int64_t t, int64_t h, int64_t dh,
                           double scale);

}  // namespace normlab::cuda
