// Causal multi-head attention and the causal prefix mean (the toy model's token mixing) of the
// cpu backend.
//
// Attention: q, k, v, out are (B, T, H*Dh). Each per-head product is ONE batched oneDNN matmul
// over (B, H): the (B, T, H*Dh) layout seen as (B, H, T, Dh) through strides
// (T*C, Dh, C, 1) - no copies, no loop of per-head calls (one call per (b, h) costs ~7x one
// batched call, docs/cpu-costs.md); k^T and P^T are the same with the last two strides swapped.
// The scale is the matmul's output scale; the causal mask and softmax are our own kernel,
// in place in `probs`.
//   S = scale * Q K^T;  P = causal_softmax(S) (saved);  out = P V
//   backward: dV = P^T dO;  dP = dO V^T;  dS = scale * P * (dP - rowsum(dP*P));
//             dQ = dS K;  dK = dS^T Q
#include <algorithm>
#include <cmath>

#include "kernels.h"
#include "normlab/stats_math.h"
#include "parallel.h"

namespace normlab::cpu {

namespace {

MatView view4(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1, int64_t s2,
              int64_t s3) {
  MatView v;
  v.nd = 4;
  const int64_t dims[4] = {d0, d1, d2, d3}, strides[4] = {s0, s1, s2, s3};
  std::copy(dims, dims + 4, v.dims);
  std::copy(strides, strides + 4, v.strides);
  return v;
}

// Views of the attention operands for one call's sizes.
struct AttentionViews {
  MatView heads;    // (B, H, T, Dh) over a (B, T, H*Dh) tensor
  MatView heads_t;  // (B, H, Dh, T): the same tensor, each head transposed
  MatView probs;    // (B, H, T, T) contiguous
  MatView probs_t;  // (B, H, T, T): each matrix transposed
  AttentionViews(int64_t b, int64_t t, int64_t h, int64_t dh) {
    const int64_t c = h * dh;
    heads = view4(b, h, t, dh, t * c, dh, c, 1);
    heads_t = view4(b, h, dh, t, t * c, dh, 1, c);
    probs = view4(b, h, t, t, h * t * t, t * t, t, 1);
    probs_t = view4(b, h, t, t, h * t * t, t * t, 1, t);
  }
};

}  // namespace

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                       int64_t b, int64_t t, int64_t h, int64_t dh, float scale) {
  if (b <= 0 || t <= 0 || h <= 0) return;
  if (dh <= 0) {  // empty heads: scores are 0, so P is uniform over s <= t, and out is empty
    fill(probs, 0.0f, b * h * t * t);
    causal_softmax_inplace(probs, b * h * t, t);
    return;
  }
  const AttentionViews av(b, t, h, dh);
  matmul_strided(probs, q, k, nullptr, av.heads, av.heads_t, av.probs, scale, false);
  causal_softmax_inplace(probs, b * h * t, t);
  matmul_strided(out, probs, v, nullptr, av.probs, av.heads, av.heads, 1.0f, false);
}

void attention_backward(float* dq, float* dk, float* dv, float* dp_scratch, const float* dout,
                        const float* q, const float* k, const float* v, const float* probs,
                        int64_t b, int64_t t, int64_t h, int64_t dh, float scale) {
  if (b <= 0 || t <= 0 || h <= 0 || dh <= 0) return;
  const AttentionViews av(b, t, h, dh);
  if (dv) matmul_strided(dv, probs, dout, nullptr, av.probs_t, av.heads, av.heads, 1.0f, false);
  if (!dq && !dk) return;
  float* ds = dp_scratch;
  matmul_strided(ds, dout, v, nullptr, av.heads, av.heads_t, av.probs, 1.0f, false);
  causal_softmax_backward_inplace(ds, probs, b * h * t, t, scale);
  if (dq) matmul_strided(dq, ds, k, nullptr, av.probs, av.heads, av.heads, 1.0f, false);
  if (dk) matmul_strided(dk, ds, q, nullptr, av.probs_t, av.heads, av.heads, 1.0f, false);
}

// ---- causal prefix mean -------------------------------------------------------------------
// Channels in blocks of kChannels, each a running sum down the T axis held in double (a float
// running sum over T = 512 steps would drift by ~1e-5 relative); work units are (batch,
// channel block), so x is read once and y written once.
namespace {
constexpr int64_t kChannels = 64;
}

// One row per task; the dots and sums in double, in the reference's order.
void row_norms(float* norms, const float* x, int64_t n, int64_t d) {
  parallel_for(n, n * d, [&](int64_t i) {
    double s = 0.0;
    for (int64_t j = 0; j < d; ++j) s += double(x[i * d + j]) * double(x[i * d + j]);
    norms[i] = static_cast<float>(std::sqrt(s));
  });
}

void attention_logit_stats(float* max_logit, float* entropy, const float* q, const float* k, int64_t b, int64_t t,
                           int64_t h, int64_t dh, double scale) {
  const int64_t c = h * dh;
  parallel_for(b * h * t, b * h * t * t * dh, [&](int64_t row) {
    const int64_t ti = row % t, hi = (row / t) % h, bi = row / (t * h);
    double top, ent;
    attention_logit_stats_row(q, k, bi, hi, ti, t, c, dh, scale, top, ent);
    max_logit[row] = static_cast<float>(top);
    entropy[row] = static_cast<float>(ent);
  });
}

// for t: acc += x[b,t,:]; y[b,t,:] = acc / (t+1)
void prefix_mean_forward(float* y, const float* x, int64_t b, int64_t t, int64_t c) {
  const int64_t cblocks = (c + kChannels - 1) / kChannels;
  parallel_for(b * cblocks, b * t * c, [&](int64_t u) {
    const int64_t bi = u / cblocks, c0 = (u % cblocks) * kChannels;
    const int64_t w = std::min(kChannels, c - c0);
    double acc[kChannels] = {0};
    for (int64_t ti = 0; ti < t; ++ti) {
      const float* xr = x + (bi * t + ti) * c + c0;
      float* yr = y + (bi * t + ti) * c + c0;
      const double inv = 1.0 / double(ti + 1);
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        acc[j] += xr[j];
        yr[j] = static_cast<float>(acc[j] * inv);
      }
    }
  });
}

// for t from T-1 down: acc += dy[b,t,:] / (t+1); dx[b,t,:] = acc
void prefix_mean_backward(float* dx, const float* dy, int64_t b, int64_t t, int64_t c) {
  const int64_t cblocks = (c + kChannels - 1) / kChannels;
  parallel_for(b * cblocks, b * t * c, [&](int64_t u) {
    const int64_t bi = u / cblocks, c0 = (u % cblocks) * kChannels;
    const int64_t w = std::min(kChannels, c - c0);
    double acc[kChannels] = {0};
    for (int64_t ti = t - 1; ti >= 0; --ti) {
      const float* dyr = dy + (bi * t + ti) * c + c0;
      float* dxr = dx + (bi * t + ti) * c + c0;
      const double inv = 1.0 / double(ti + 1);
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        acc[j] += double(dyr[j]) * inv;
        dxr[j] = static_cast<float>(acc[j]);
      }
    }
  });
}

}  // namespace normlab::cpu
