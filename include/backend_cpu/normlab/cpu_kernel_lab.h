// The cpu backend's normalization kernels as free functions on raw float arrays, so that a
// benchmark can time each implementation of the same math side by side:
//   *_multipass  plain loops, one sweep over the whole tensor per step (mean, variance, output):
//                the naive baseline, reading x from memory several times;
//   *_fused      normlab's vectorized kernels, one read of the inputs and one write of each
//                output per row (the row stays in L1/L2 between the sweeps over it);
//   *_onednn     oneDNN 2.6's layer_normalization primitive, its variance converted to rstd.
// The Backend's layernorm_forward / layernorm_backward use layernorm_forward / _backward below,
// which pick the fastest of these (measured; see norm_kernels.cpp).
//
// Sizes: N rows (B*T), D the normalized size (C). Math (backend.h is the contract):
//   LayerNorm  mu = mean(x); rstd = 1/sqrt(mean((x-mu)^2) + eps); y = gamma*(x-mu)*rstd + beta
//   RMSNorm    rstd = 1/sqrt(mean(x^2) + eps); y = gamma*x*rstd
//   backward   g = dy*gamma, xhat the normalized input:
//              LayerNorm dx = rstd*(g - mean(g) - xhat*mean(g*xhat)); RMSNorm without mean(g);
//              dgamma = sum_rows(dy*xhat); dbeta = sum_rows(dy).
// Outputs and gradients are WRITTEN (=). A gradient pointer may be nullptr: its work is skipped.
// Parameter gradients are reduced over rows in fixed blocks of rows, then the blocks in order:
// the result does not depend on the number of threads.
#pragma once
#include <cstdint>

namespace normlab::cpu {

// ---- LayerNorm ---------------------------------------------------------------------------
void layernorm_forward_multipass(float* y, float* mean, float* rstd, const float* x,
                                 const float* gamma, const float* beta, int64_t n, int64_t d,
                                 float eps);
void layernorm_forward_fused(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                             const float* beta, int64_t n, int64_t d, float eps);
void layernorm_forward_onednn(float* y, float* mean, float* rstd, const float* x,
                              const float* gamma, const float* beta, int64_t n, int64_t d,
                              float eps);

void layernorm_backward_multipass(float* dx, float* dgamma, float* dbeta, const float* dy,
                                  const float* x, const float* gamma, const float* mean,
                                  const float* rstd, int64_t n, int64_t d);
void layernorm_backward_fused(float* dx, float* dgamma, float* dbeta, const float* dy,
                              const float* x, const float* gamma, const float* mean,
                              const float* rstd, int64_t n, int64_t d);
void layernorm_backward_onednn(float* dx, float* dgamma, float* dbeta, const float* dy,
                               const float* x, const float* gamma, const float* mean,
                               const float* rstd, int64_t n, int64_t d);

// The implementations the cpu Backend uses.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int64_t n, int64_t d, float eps);
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t n,
                        int64_t d);

// ---- RMSNorm (oneDNN 2.6 has none: no RMS flag before v3) ----------------------------------
void rmsnorm_forward_multipass(float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                               int64_t d, float eps);
void rmsnorm_forward_fused(float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                           int64_t d, float eps);
void rmsnorm_backward_multipass(float* dx, float* dgamma, const float* dy, const float* x,
                                const float* gamma, const float* rstd, int64_t n, int64_t d);
void rmsnorm_backward_fused(float* dx, float* dgamma, const float* dy, const float* x,
                            const float* gamma, const float* rstd, int64_t n, int64_t d);

// The implementations the cpu Backend uses.
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int64_t n, int64_t d,
                     float eps);
void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t n, int64_t d);

// ---- fused residual add + norm ---------------------------------------------------------------
// s = alpha*a + b (written: the residual stream), then the norm of s as stored. One pass per
// row: a and b are read once, s and y written once.
void add_layernorm_forward_fused(float* s, float* y, float* mean, float* rstd, const float* a,
                                 const float* b, float alpha, const float* gamma, const float* beta,
                                 int64_t n, int64_t d, float eps);
void add_rmsnorm_forward_fused(float* s, float* y, float* rstd, const float* a, const float* b,
                               float alpha, const float* gamma, int64_t n, int64_t d, float eps);

}  // namespace normlab::cpu
