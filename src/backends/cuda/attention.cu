// Causal self-attention (one block per query row; T <= attention_max_t()) and the prefix mean
// of the toy model's token mixing: the cpu backend's attention_kernels.cpp. The forward writes no
// probabilities; the backward recomputes them into the call's work (B x H x T x T floats, with
// dS beside them: a transient of the backward, not an activation the model keeps).
#include "common.cuh"

namespace normlab::cuda {

namespace {

constexpr int kAttnThreads = 128;
// One row of T floats in shared memory, with the static scratch within the default 48 KiB.
constexpr int64_t kAttnMaxT = 12000;

// The score S[t,s] = scale * q_t . k_s of query row `row` ((b, h, t) flattened) and key s: one
// definition for the forward and the backward's recomputation, so that both get the same bits.
__device__ inline float score(In q, In k, int64_t row, int64_t s, int64_t t, int64_t h, int64_t dh, float scale) {
  const int64_t ti = row % t, bh = row / t, hi = bh % h, bi = bh / h;
  const int64_t c = h * dh;
  const int64_t qt = (bi * t + ti) * c + hi * dh, ks = (bi * t + s) * c + hi * dh;
  float dot = 0.0f;
  for (int64_t e = 0; e < dh; ++e) dot += ld(q, qt + e) * ld(k, ks + e);
  // Rounded on its own: the recomputation subtracts the row max right after, which nvcc would
  // otherwise fuse into one FMA with this product, where the forward rounds the score first.
  return __fmul_rn(scale, dot);
}

// P's row t of head (b, h) in shared memory p[0..t]: the scores over s <= t, their softmax
// exp(S - max) / sum; returns {max, sum}.
__device__ float2 row_probs(float* p, float* scratch, In q, In k, int64_t row, int64_t t, int64_t h, int64_t dh,
                            float scale) {
  const int64_t ti = row % t;
  float mx = -INFINITY;
  for (int64_t s = threadIdx.x; s <= ti; s += blockDim.x) {
    p[s] = score(q, k, row, s, t, h, dh, scale);
    mx = fmaxf(mx, p[s]);
  }
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s <= ti; s += blockDim.x) {
    p[s] = expf(p[s] - mx);
    sum += p[s];
  }
  sum = block_sum(sum, scratch);
  for (int64_t s = threadIdx.x; s <= ti; s += blockDim.x) p[s] = p[s] / sum;
  __syncthreads();  // every p[s] normalized before any thread reads them all
  return make_float2(mx, sum);
}

// x times the probabilities' dropout at mask index `index` (attention_kernels.h): x itself when the
// mask is off.
__device__ inline float dropped(float x, const DropoutMask& dropout, float keep, int64_t index) {
  if (!dropout.on()) return x;
  return dropout.keeps(static_cast<uint64_t>(index)) ? x * keep : 0.0f;
}

// One block per (b, h, t): P's row in shared memory (then D's, with dropout), then
// out_t = sum_s D[t,s] v_s with threads over the head's channels. P is not written out; the row's
// max and sum are (stats).
__global__ void attention_forward_kernel(Out out, float* stats, In q, In k, In v, int64_t t, int64_t h, int64_t dh,
                                         float scale, DropoutMask dropout, float keep) {
  NL_DYNAMIC_SHARED(float, p);
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float2 ms = row_probs(p, scratch, q, k, row, t, h, dh, scale);
  if (dropout.on()) {
    for (int64_t s = threadIdx.x; s <= row % t; s += blockDim.x) p[s] = dropped(p[s], dropout, keep, row * t + s);
    __syncthreads();  // every D[t,s] in place before any thread reads them all
  }
  if (threadIdx.x == 0) {
    stats[2 * row] = ms.x;
    stats[2 * row + 1] = ms.y;
  }
  const int64_t ti = row % t, bh = row / t, hi = bh % h, bi = bh / h;
  const int64_t c = h * dh;
  const int64_t ot = (bi * t + ti) * c + hi * dh;
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s <= ti; ++s) acc += p[s] * ld(v, (bi * t + s) * c + hi * dh + e);
    st(out, ot + e, acc);
  }
}

}  // namespace

int64_t attention_max_t() { return kAttnMaxT; }

void attention_forward(Out out, float* stats, In q, In k, In v, int64_t b, int64_t t, int64_t h, int64_t dh,
                       float scale, const DropoutMask& dropout) {
  const int64_t rows = b * h * t;
  if (rows <= 0) return;
  if (!rows_fit(rows) || t > kAttnMaxT)
    check(cudaErrorInvalidConfiguration, "grid of one block per query row", "attention_forward");
  const size_t bytes = static_cast<size_t>(t) * sizeof(float);
  launch("attention_forward", attention_forward_kernel, static_cast<unsigned>(rows), kAttnThreads, bytes, out, stats, q, k, v, t, h, dh, scale, dropout,
         static_cast<float>(dropout.keep_scale()));
}

namespace {

// The backward's P, (B, H, T, T) in the call's work: each entry from its score and its row's
// stats as row_probs computes it, rounded to `format` (Precision's order), zero above the
// diagonal. One thread per entry: no reductions left to do.
__global__ void attention_probs_kernel(float* probs, const float* stats, In q, In k, int64_t b, int64_t t, int64_t h,
                                       int64_t dh, float scale, int format) {
  NL_GRID_STRIDE(idx, b * h * t * t) {
    const int64_t row = idx / t, s = idx % t;
    float p = 0.0f;
    if (s <= row % t) p = stored_as(expf(score(q, k, row, s, t, h, dh, scale) - stats[2 * row]) / stats[2 * row + 1], format);
    probs[idx] = p;
  }
}

// The backward's P made D in place, once dS no longer needs P: each entry times the mask's keep
// scale or 0 (its index is its place in the (B, H, T, T) work), rounded to `format` again as the
// unfused form stores dropout's output.
__global__ void attention_drop_probs_kernel(float* probs, int64_t n, DropoutMask dropout, float keep, int format) {
  NL_GRID_STRIDE(idx, n) probs[idx] = stored_as(dropped(probs[idx], dropout, keep, idx), format);
}

// scale * dS for one (b, h, t) row: dD[t,s] = dout_t . v_s; dP = dD (* mask / (1 - rate) with
// dropout); dS = P (dP - sum_s dP P).
__global__ void attention_ds_kernel(float* ds, In dout, In v, const float* probs, int64_t t, int64_t h, int64_t dh,
                                    float scale, DropoutMask dropout, float keep) {
  NL_DYNAMIC_SHARED(float, dp);
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t ti = row % t, bh = row / t, hi = bh % h, bi = bh / h;
  const int64_t c = h * dh;
  const int64_t dot_ = (bi * t + ti) * c + hi * dh;
  const float* prow = probs + row * t;
  float rowdot = 0.0f;
  for (int64_t s = threadIdx.x; s <= ti; s += blockDim.x) {
    const int64_t vs = (bi * t + s) * c + hi * dh;
    float acc = 0.0f;
    for (int64_t e = 0; e < dh; ++e) acc += ld(dout, dot_ + e) * ld(v, vs + e);
    acc = dropped(acc, dropout, keep, row * t + s);
    dp[s] = acc;  // read back only by this thread
    rowdot += acc * prow[s];
  }
  rowdot = block_sum(rowdot, scratch);
  float* dsr = ds + row * t;
  for (int64_t s = threadIdx.x; s < t; s += blockDim.x) dsr[s] = s <= ti ? scale * prow[s] * (dp[s] - rowdot) : 0.0f;
}

// dq[b,t,h,e] = sum_{s<=t} dS[t,s] k[s,e]
__global__ void attention_dq_kernel(Out dq, const float* ds, In k, int64_t b, int64_t t, int64_t h, int64_t dh) {
  const int64_t c = h * dh;
  NL_GRID_STRIDE(idx, b * t * c) {
    const int64_t e = idx % dh, hi = (idx / dh) % h, ti = (idx / c) % t, bi = idx / (c * t);
    const float* dsr = ds + ((bi * h + hi) * t + ti) * t;
    float acc = 0.0f;
    for (int64_t s = 0; s <= ti; ++s) acc += dsr[s] * ld(k, (bi * t + s) * c + hi * dh + e);
    st(dq, idx, acc);
  }
}

// dk[b,s,h,e] = sum_{t>=s} dS[t,s] q[t,e];  dv[b,s,h,e] = sum_{t>=s} D[t,s] dout[t,e]
__global__ void attention_dkv_kernel(Out out, In m, In src, int64_t b, int64_t t, int64_t h, int64_t dh) {
  const int64_t c = h * dh;
  NL_GRID_STRIDE(idx, b * t * c) {
    const int64_t e = idx % dh, hi = (idx / dh) % h, si = (idx / c) % t, bi = idx / (c * t);
    const int64_t mb = (bi * h + hi) * t * t;
    float acc = 0.0f;
    for (int64_t ti = si; ti < t; ++ti) acc += ld(m, mb + ti * t + si) * ld(src, (bi * t + ti) * c + hi * dh + e);
    st(out, idx, acc);
  }
}

}  // namespace

void attention_backward(Out dq, Out dk, Out dv, In dout, In q, In k, In v, const float* stats, int64_t b, int64_t t,
                        int64_t h, int64_t dh, float scale, int probs_format, const DropoutMask& dropout,
                        float* work) {
  const int64_t rows = b * h * t, total = b * t * h * dh;
  if (rows <= 0 || (!dq && !dk && !dv)) return;
  if (!rows_fit(rows) || t > kAttnMaxT)
    check(cudaErrorInvalidConfiguration, "grid of one block per query row", "attention_backward");
  const size_t bytes = static_cast<size_t>(t) * sizeof(float);
  float* probs = work;
  float* ds = work + rows * t;
  const float keep = static_cast<float>(dropout.keep_scale());
  launch("attention_backward", attention_probs_kernel, grid_for(rows * t), kThreads, 0, probs, stats, q, k, b, t, h, dh, scale, probs_format);
  if (dq || dk) {
    launch("attention_backward", attention_ds_kernel, static_cast<unsigned>(rows), kAttnThreads, bytes, ds, dout, v, probs, t, h, dh, scale,
           dropout, keep);
    if (dq && total > 0) launch("attention_backward", attention_dq_kernel, grid_for(total), kThreads, 0, dq, ds, k, b, t, h, dh);
    if (dk && total > 0) launch("attention_backward", attention_dkv_kernel, grid_for(total), kThreads, 0, dk, In(ds), q, b, t, h, dh);
  }
  if (!dv || total <= 0) return;
  if (dropout.on())
    launch("attention_backward", attention_drop_probs_kernel, grid_for(rows * t), kThreads, 0, probs, rows * t, dropout, keep,
           probs_format);
  launch("attention_backward", attention_dkv_kernel, grid_for(total), kThreads, 0, dv, In(probs), dout, b, t, h, dh);
}

namespace {

__global__ void prefix_mean_forward_kernel(Out y, In x, int64_t b, int64_t t, int64_t c) {
  NL_GRID_STRIDE(idx, b * c) {
    const int64_t bi = idx / c, ci = idx % c;
    double acc = 0.0;
    for (int64_t ti = 0; ti < t; ++ti) {
      acc += ld(x, (bi * t + ti) * c + ci);
      st(y, (bi * t + ti) * c + ci, static_cast<float>(acc / static_cast<double>(ti + 1)));
    }
  }
}

}  // namespace

void prefix_mean_forward(Out y, In x, int64_t b, int64_t t, int64_t c) {
  if (b * c <= 0 || t <= 0) return;
  launch("prefix_mean_forward", prefix_mean_forward_kernel, grid_for(b * c), kThreads, 0, y, x, b, t, c);
}

namespace {

__global__ void prefix_mean_backward_kernel(Out dx, In dy, int64_t b, int64_t t, int64_t c) {
  NL_GRID_STRIDE(idx, b * c) {
    const int64_t bi = idx / c, ci = idx % c;
    double acc = 0.0;
    for (int64_t si = t - 1; si >= 0; --si) {
      acc += ld(dy, (bi * t + si) * c + ci) / static_cast<double>(si + 1);
      st(dx, (bi * t + si) * c + ci, static_cast<float>(acc));
    }
  }
}

}  // namespace

void prefix_mean_backward(Out dx, In dy, int64_t b, int64_t t, int64_t c) {
  if (b * c <= 0 || t <= 0) return;
  launch("prefix_mean_backward", prefix_mean_backward_kernel, grid_for(b * c), kThreads, 0, dx, dy, b, t, c);
}

}  // namespace normlab::cuda
