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
#include <string>

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

// ---- streaming stores (streaming.cpp) ------------------------------------------------------------
// The fused kernels (norms forward and backward, add + norm) write their N x D output with
// streaming stores when the call's arrays do not fit in the last-level cache, the output is
// aligned to the vector width (and D a multiple of it), and this CPU copies faster that way:
// measured once per process by the first call that asks (a copy of 2 x LLC both ways), or set
// with NORMLAB_STREAMING_STORES=0|1. The stored values are the same either way.
struct StreamingStores {
  bool enabled = false;
  bool measured = false;  // false: set by the environment, or not available
  double ordinary_gbs = 0, streaming_gbs = 0;
  int64_t llc_bytes = 0;
  std::string why;  // "measured", "NORMLAB_STREAMING_STORES=1", ...
};
const StreamingStores& streaming_stores();
int64_t last_level_cache_size();
// Whether a kernel that touches `arrays` N x D float arrays streams its output `out`.
bool streams_output(const float* out, int64_t n, int64_t d, int64_t arrays);
// Whether the fused kernel of `pass` streams its N x D output `out` (y, dx, or the add + norm's y).
enum class FusedPass { forward, backward, add_forward };
bool fused_streams(FusedPass pass, const float* out, int64_t n, int64_t d);
// Tests and measurements override the choice: always (every output the alignment rule allows,
// whatever its size), never, or automatic (the default, as above). Process-wide.
enum class StreamChoice { automatic, always, never };
void set_stream_choice(StreamChoice choice);

}  // namespace normlab::cpu
