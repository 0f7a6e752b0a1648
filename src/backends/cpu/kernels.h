// The cpu backend's kernels other than the norms (normlab/cpu_kernels.h), as free functions on raw
// float32 arrays; cpu_backend.cpp checks the tensors and calls these. Conventions as
// backend.h: outputs first, then inputs, then sizes; outputs WRITTEN unless a comment says
// accumulate; a nullptr gradient output is skipped.
#pragma once
#include <cstdint>

#include "normlab/adam_kernels.h"
#include "normlab/backend.h"
#include "normlab/dropout_kernels.h"
#include "normlab/matmul_kernels.h"

namespace normlab::cpu {

// ---- matrix products (onednn_matmul.cpp) ---------------------------------------------------

// A logical matrix (or batch of them) in memory: up to 4 dims, any strides (a transpose is a
// swap of the last two strides). A dim of size 1 in a batch position is broadcast.
struct MatView {
  int nd = 2;
  int64_t dims[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};
};

// An elementwise op with a second array laid out as c (contiguous), applied to the product in
// the primitive's epilogue (a binary post-op) while the output tile is in registers.
struct Epilogue {
  enum class Op { none, add, mul };
  Op op = Op::none;
  const float* src1 = nullptr;
};

// c = scale * (a @ b) [+ bias] [+ c when accumulate] [op src1], one oneDNN matmul primitive
// (cached). a (..., M, K), b (..., K, N), c (..., M, N); bias (N) broadcast over rows, or nullptr.
// bf16_operands: a's and b's values are said to be bf16's; where the CPU has bf16 dot products
// (native_bf16_products) and every value is on bf16's grid they are multiplied as bf16, with
// float32 accumulation; otherwise (a value off the grid included) as float32.
void matmul_strided(float* c, const float* a, const float* b, const float* bias, const MatView& av,
                    const MatView& bv, const MatView& cv, float scale, bool accumulate,
                    Epilogue epilogue = {}, bool bf16_operands = false);

// The Matmul, LinearForward and LinearBackwardInput kernels on raw arrays (matmul_kernels.h);
// bf16_operands as matmul_strided's.
void matmul(float* c, const float* a, const float* b, const MatmulSpec& s, bool bf16_operands = false);
void linear_backward_input(float* dx, const float* dy, const float* w, const float* gate, int64_t m,
                           int64_t k, int64_t n, bool bf16_operands = false);
void linear_forward(float* y, const float* x, const float* w, const float* bias, const float* residual, int64_t m,
                    int64_t k, int64_t n, bool bf16_operands = false);

// ---- elementwise over n values (elementwise_kernels.cpp) -------------------------------------------
void fill(float* out, float value, int64_t n);
void copy(float* out, const float* x, int64_t n);
void add(float* out, const float* a, const float* b, float alpha, float beta, int64_t n);
void accumulate(float* dst, const float* src, int64_t n);
void scale(float* out, const float* x, float alpha, int64_t n);
// y[i] = x[i] * float(keep scale) where the mask keeps i, else 0 (dropout_kernels.h); y may be x.
void dropout(float* y, const float* x, int64_t n, const DropoutMask& mask);
void mul(float* out, const float* a, const float* b, int64_t n);
// x[i] rounded in place to the format's grid (core's round_to, split over the threads).
void round_to_format(float* x, int64_t n, Precision format);
// core's composite_norm_row over n rows, split over the threads (LayerNorm when beta is given).
void composite_norm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t n, int64_t d, double eps, Precision format);
// core's composite_norm_row_backward over n rows (LayerNorm when mean is given) and the column
// sums of dgamma and dbeta (rows in order, in double), split over the threads. dx, dgamma, dbeta
// and census may be nullptr.
void composite_norm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                             const float* gamma, const float* mean, const float* rstd, int64_t n, int64_t d,
                             Precision format, CompositeBackwardCensus* census);
// core's format_census, counted per chunk over the threads and added in order.
FormatCensus format_census(const float* x, int64_t n, Precision format);
// dydx may be nullptr (inference: no derivative wanted).
void gelu_forward(float* y, float* dydx, const float* x, int64_t n);
double sum_squares(const float* x, int64_t n);
void adam_step(float* param, float* m, float* v, const float* grad, int64_t n,
               const AdamParams& hp);

// ---- softmax and loss (softmax_loss.cpp) ---------------------------------------------------
void softmax_forward(float* y, const float* x, int64_t n, int64_t d);
void softmax_backward(float* dx, const float* dy, const float* y, int64_t n, int64_t d);
// Rows row0 .. row0+rows-1 of a causal score matrix, row r at p + r * ldp: query row i = row0 + r
// keeps its entries s <= i (all `width` of them when i >= width: a row0 of width or more is the
// unmasked softmax of attention that sees every key), softmax over them in place, and zeros from
// i + 1 to `width` (the causal mask, as far as the caller reads); stats[2r], [2r+1]: the row's max
// and sum of exps. On the calling thread: attention calls it per tile.
void causal_softmax_rows(float* p, int64_t ldp, int64_t row0, int64_t rows, int64_t width, float* stats);
// The same rows' probabilities from their scores and the stats causal_softmax_rows wrote: the
// same bits, in one pass (exp(s - max) * (1 / sum), its last two steps).
void causal_probs_rows(float* p, int64_t ldp, int64_t row0, int64_t rows, int64_t width, const float* stats);
// dS = scale * P * (dP - rowsum(dP*P)) in place of dP, both `rows` x `width` (row stride width),
// the rows as causal_softmax_rows's from row0 (zero where masked). On the calling thread.
void causal_softmax_backward_rows(float* dp, const float* p, int64_t rows, int64_t width, int64_t row0, float scale);
void cross_entropy_forward(float* loss, float* probs, const float* logits, const int32_t* targets,
                           int64_t n, int64_t v);
void cross_entropy_backward(float* dlogits, float dloss, const float* probs, const int32_t* targets,
                            int64_t n, int64_t v);

// ---- the channel scale (squash_kernels.cpp; DyT and Derf: cpu_kernels.h) --------------------------
// ChannelScaleForward/Backward (channel_scale_kernels.h) on raw arrays (dx and dlambda nullable).
void channel_scale_forward(float* y, const float* x, const float* lambda, int64_t n, int64_t d, int64_t c);
void channel_scale_backward(float* dx, float* dlambda, const float* dy, const float* x, const float* lambda,
                            int64_t n, int64_t d, int64_t c);

// ---- attention and token mixing (attention_kernels.cpp) -------------------------------------------
// The sizes of an attention call: B sequences of T queries and Tk keys, H heads of Dh channels;
// causal: query t sees keys s <= t (Tk = T), else all Tk.
struct AttentionSizes {
  int64_t b, t, tk, h, dh;
  bool causal;
};
void attention_forward(float* out, float* stats, const float* q, const float* k, const float* v,
                       const AttentionSizes& n, float scale, const DropoutMask& dropout);
// P recomputed per tile from the forward's stats and rounded to probs_format (attention_kernels.h).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* stats, const AttentionSizes& n, float scale,
                        Precision probs_format, const DropoutMask& dropout);
void prefix_mean_forward(float* y, const float* x, int64_t b, int64_t t, int64_t c);
// The RowNorms and AttentionLogitStats kernels: the reference's double arithmetic, rows in
// parallel.
void row_norms(float* norms, const float* x, int64_t n, int64_t d);
void attention_logit_stats(float* max_logit, float* entropy, const float* q, const float* k, int64_t b, int64_t t,
                           int64_t h, int64_t dh, double scale);
void prefix_mean_backward(float* dx, const float* dy, int64_t b, int64_t t, int64_t c);

// ---- layout and reductions (layout.cpp) ----------------------------------------------------
void sum_rows(float* out, const float* x, int64_t rows, int64_t cols);
void transpose(float* out, const float* x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
               int64_t inner);
void embedding_forward(float* y, const float* table, const int32_t* ids, int64_t n, int64_t d);
void embedding_backward(float* dtable, const float* dy, const int32_t* ids, int64_t n, int64_t v,
                        int64_t d);

}  // namespace normlab::cpu
