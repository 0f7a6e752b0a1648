// Kernels only `bench norms` runs (and the tests use as cross-checks), kept apart from the
// production backend's header (normlab/cpu_kernels.h), as llm.c keeps its kernel variants under
// dev/: the naive baselines, and the norms over 16-bit storage. Same sizes and math as
// cpu_kernels.h; outputs and gradients WRITTEN, a gradient pointer may be nullptr.
//   *_multipass  plain loops, one sweep over the whole tensor per step (mean, variance, output):
//                the naive baseline, reading x from memory several times (norm_baselines.cpp).
#pragma once
#include <cstdint>

#include "normlab/precision.h"

namespace normlab::cpu {

// ---- the naive baselines (norm_baselines.cpp) ---------------------------------------------------
void layernorm_forward_multipass(float* y, float* mean, float* rstd, const float* x,
                                 const float* gamma, const float* beta, int64_t n, int64_t d,
                                 float eps);
void layernorm_backward_multipass(float* dx, float* dgamma, float* dbeta, const float* dy,
                                  const float* x, const float* gamma, const float* mean,
                                  const float* rstd, int64_t n, int64_t d);
void rmsnorm_forward_multipass(float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                               int64_t d, float eps);
void rmsnorm_backward_multipass(float* dx, float* dgamma, const float* dy, const float* x,
                                const float* gamma, const float* rstd, int64_t n, int64_t d);
// DyT as plain loops (the naive baseline): scalar libm tanh, one sweep per step.
void dyt_forward_multipass(float* y, const float* x, float alpha, const float* gamma, const float* beta, int64_t n,
                           int64_t d);
void dyt_backward_multipass(float* dx, float* dalpha, float* dgamma, float* dbeta, const float* dy, const float* x,
                            float alpha, const float* gamma, int64_t n, int64_t d);

// ---- 16-bit storage (norm16_kernels.cpp): norm_compute fused in bf16 / fp16 -----------------
// x, dy, y, dx, gamma and beta hold the 2-byte encodings of `p` (bf16 or fp16, precision.h's
// to_bits); mean, rstd and the parameter gradients are float32, and so is all arithmetic: each
// row decoded exactly, the same math as above in float32, the output rounded once to p (nearest
// even, overflow to inf, gradual underflow). Half the bytes of the float32 kernels; parameter
// gradients summed in fixed blocks of rows, independent of the thread count.
void layernorm_forward_16(Precision p, uint16_t* y, float* mean, float* rstd, const uint16_t* x,
                          const uint16_t* gamma, const uint16_t* beta, int64_t n, int64_t d, float eps);
void rmsnorm_forward_16(Precision p, uint16_t* y, float* rstd, const uint16_t* x, const uint16_t* gamma, int64_t n,
                        int64_t d, float eps);
void layernorm_backward_16(Precision p, uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* dy,
                           const uint16_t* x, const uint16_t* gamma, const float* mean, const float* rstd, int64_t n,
                           int64_t d);
void rmsnorm_backward_16(Precision p, uint16_t* dx, float* dgamma, const uint16_t* dy, const uint16_t* x,
                         const uint16_t* gamma, const float* rstd, int64_t n, int64_t d);
// n values between float32 and the encodings of p: decoding is exact, encoding rounds as above.
void decode_16(Precision p, float* out, const uint16_t* in, int64_t n);
void encode_16(Precision p, uint16_t* out, const float* in, int64_t n);

}  // namespace normlab::cpu
