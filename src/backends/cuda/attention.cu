// Attention, causal or seeing every key (one block per query row; Tk <= attention_max_t()), and the
// prefix mean of the toy model's token mixing: the cpu backend's attention_kernels.cpp. The
// forward writes no probabilities; the backward recomputes them into the call's work (B x H x T x
// Tk floats, with dS beside them: a transient of the backward, not an activation the model keeps).
#include "common.cuh"

namespace normlab::cuda {

namespace {

constexpr int kAttnThreads = 128;
// One row of Tk floats in shared memory, with the static scratch within the default 48 KiB.
constexpr int64_t kAttnMaxT = 12000;

// The score S[t,s] = scale * q_t . k_s of query row `row` ((b, h, t) flattened) and key s: one
// definition for the forward and the backward's recomputation, so that both get the same bits.
__device__ inline float score(In q, In k, int64_t row, int64_t s, const AttnSizes& n, float scale) {
  const int64_t ti = row % n.t, bh = row / n.t, hi = bh % n.h, bi = bh / n.h;
  const int64_t c = n.h * n.dh;
  const int64_t qt = (bi * n.t + ti) * c + hi * n.dh, ks = (bi * n.tk + s) * c + hi * n.dh;
  float dot = 0.0f;
  for (int64_t e = 0; e < n.dh; ++e) dot += ld(q, qt + e) * ld(k, ks + e);
  // Rounded on its own: the recomputation subtracts the row max right after, which nvcc would
  // otherwise fuse into one FMA with this product, where the forward rounds the score first.
  return __fmul_rn(scale, dot);
}

// P's row t of head (b, h) in shared memory p[0..seen): the scores over the keys the row sees,
// their softmax exp(S - max) / sum; returns {max, sum}.
__device__ float2 row_probs(float* p, float* scratch, In q, In k, int64_t row, const AttnSizes& n, float scale) {
  const int64_t seen = n.seen(row % n.t);
  float mx = -INFINITY;
  for (int64_t s = threadIdx.x; s < seen; s += blockDim.x) {
    p[s] = score(q, k, row, s, n, scale);
    mx = fmaxf(mx, p[s]);
  }
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s < seen; s += blockDim.x) {
    p[s] = expf(p[s] - mx);
    sum += p[s];
  }
  sum = block_sum(sum, scratch);
  for (int64_t s = threadIdx.x; s < seen; s += blockDim.x) p[s] = p[s] / sum;
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
__global__ void attention_forward_kernel(Out out, float* stats, In q, In k, In v, AttnSizes n, float scale,
                                         DropoutMask dropout, float keep) {
  NL_DYNAMIC_SHARED(float, p);
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t ti = row % n.t, bh = row / n.t, hi = bh % n.h, bi = bh / n.h, seen = n.seen(ti);
  const float2 ms = row_probs(p, scratch, q, k, row, n, scale);
  if (dropout.on()) {
    for (int64_t s = threadIdx.x; s < seen; s += blockDim.x) p[s] = dropped(p[s], dropout, keep, row * n.tk + s);
    __syncthreads();  // every D[t,s] in place before any thread reads them all
  }
  if (threadIdx.x == 0) {
    stats[2 * row] = ms.x;
    stats[2 * row + 1] = ms.y;
  }
  const int64_t c = n.h * n.dh;
  const int64_t ot = (bi * n.t + ti) * c + hi * n.dh;
  for (int64_t e = threadIdx.x; e < n.dh; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s < seen; ++s) acc += p[s] * ld(v, (bi * n.tk + s) * c + hi * n.dh + e);
    st(out, ot + e, acc);
  }
}

}  // namespace

int64_t attention_max_t() { return kAttnMaxT; }

void attention_forward(Out out, float* stats, In q, In k, In v, const AttnSizes& n, float scale,
                       const DropoutMask& dropout) {
  const int64_t rows = n.b * n.h * n.t;
  if (rows <= 0) return;
  if (!rows_fit(rows) || n.tk > kAttnMaxT)
    check(cudaErrorInvalidConfiguration, "grid of one block per query row", "attention_forward");
  const size_t bytes = static_cast<size_t>(n.tk) * sizeof(float);
  launch("attention_forward", attention_forward_kernel, static_cast<unsigned>(rows), kAttnThreads, bytes, out, stats, q,
         k, v, n, scale, dropout, static_cast<float>(dropout.keep_scale()));
}

namespace {

// The backward's P, (B, H, T, Tk) in the call's work: each entry from its score and its row's
// stats as row_probs computes it, rounded to `format` (Precision's order), zero where unseen.
// One thread per entry: no reductions left to do.
__global__ void attention_probs_kernel(float* probs, const float* stats, In q, In k, AttnSizes n, float scale,
                                       int format) {
  NL_GRID_STRIDE(idx, n.b * n.h * n.t * n.tk) {
    const int64_t row = idx / n.tk, s = idx % n.tk;
    float p = 0.0f;
    if (s < n.seen(row % n.t))
      p = stored_as(expf(score(q, k, row, s, n, scale) - stats[2 * row]) / stats[2 * row + 1], format);
    probs[idx] = p;
  }
}

// The backward's P made D in place, once dS no longer needs P: each entry times the mask's keep
// scale or 0 (its index is its place in the (B, H, T, Tk) work), rounded to `format` again as the
// unfused form stores dropout's output.
__global__ void attention_drop_probs_kernel(float* probs, int64_t count, DropoutMask dropout, float keep, int format) {
  NL_GRID_STRIDE(idx, count) probs[idx] = stored_as(dropped(probs[idx], dropout, keep, idx), format);
}

// scale * dS for one (b, h, t) row: dD[t,s] = dout_t . v_s; dP = dD (* mask / (1 - rate) with
// dropout); dS = P (dP - sum_s dP P).
__global__ void attention_ds_kernel(float* ds, In dout, In v, const float* probs, AttnSizes n, float scale,
                                    DropoutMask dropout, float keep) {
  NL_DYNAMIC_SHARED(float, dp);
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t ti = row % n.t, bh = row / n.t, hi = bh % n.h, bi = bh / n.h, seen = n.seen(ti);
  const int64_t c = n.h * n.dh;
  const int64_t dot_ = (bi * n.t + ti) * c + hi * n.dh;
  const float* prow = probs + row * n.tk;
  float rowdot = 0.0f;
  for (int64_t s = threadIdx.x; s < seen; s += blockDim.x) {
    const int64_t vs = (bi * n.tk + s) * c + hi * n.dh;
    float acc = 0.0f;
    for (int64_t e = 0; e < n.dh; ++e) acc += ld(dout, dot_ + e) * ld(v, vs + e);
    acc = dropped(acc, dropout, keep, row * n.tk + s);
    dp[s] = acc;  // read back only by this thread
    rowdot += acc * prow[s];
  }
  rowdot = block_sum(rowdot, scratch);
  float* dsr = ds + row * n.tk;
  for (int64_t s = threadIdx.x; s < n.tk; s += blockDim.x) dsr[s] = s < seen ? scale * prow[s] * (dp[s] - rowdot) : 0.0f;
}

// dq[b,t,h,e] = sum_{s seen} dS[t,s] k[s,e]
__global__ void attention_dq_kernel(Out dq, const float* ds, In k, AttnSizes n) {
  const int64_t c = n.h * n.dh;
  NL_GRID_STRIDE(idx, n.b * n.t * c) {
    const int64_t e = idx % n.dh, hi = (idx / n.dh) % n.h, ti = (idx / c) % n.t, bi = idx / (c * n.t);
    const float* dsr = ds + ((bi * n.h + hi) * n.t + ti) * n.tk;
    const int64_t seen = n.seen(ti);
    float acc = 0.0f;
    for (int64_t s = 0; s < seen; ++s) acc += dsr[s] * ld(k, (bi * n.tk + s) * c + hi * n.dh + e);
    st(dq, idx, acc);
  }
}

// dk[b,s,h,e] = sum_t dS[t,s] q[t,e];  dv[b,s,h,e] = sum_t D[t,s] dout[t,e], over the query rows
// that see key s (t >= s when causal).
__global__ void attention_dkv_kernel(Out out, In m, In src, AttnSizes n) {
  const int64_t c = n.h * n.dh;
  NL_GRID_STRIDE(idx, n.b * n.tk * c) {
    const int64_t e = idx % n.dh, hi = (idx / n.dh) % n.h, si = (idx / c) % n.tk, bi = idx / (c * n.tk);
    const int64_t mb = (bi * n.h + hi) * n.t * n.tk;
    float acc = 0.0f;
    for (int64_t ti = n.causal ? si : 0; ti < n.t; ++ti)
      acc += ld(m, mb + ti * n.tk + si) * ld(src, (bi * n.t + ti) * c + hi * n.dh + e);
    st(out, idx, acc);
  }
}

}  // namespace

void attention_backward(Out dq, Out dk, Out dv, In dout, In q, In k, In v, const float* stats, const AttnSizes& n,
                        float scale, int probs_format, const DropoutMask& dropout, float* work) {
  const int64_t rows = n.b * n.h * n.t, queries = n.b * n.t * n.h * n.dh, keys = n.b * n.tk * n.h * n.dh;
  if (rows <= 0 || n.tk <= 0 || (!dq && !dk && !dv)) return;
  if (!rows_fit(rows) || n.tk > kAttnMaxT)
    check(cudaErrorInvalidConfiguration, "grid of one block per query row", "attention_backward");
  const size_t bytes = static_cast<size_t>(n.tk) * sizeof(float);
  float* probs = work;
  float* ds = work + rows * n.tk;
  const float keep = static_cast<float>(dropout.keep_scale());
  launch("attention_backward", attention_probs_kernel, grid_for(rows * n.tk), kThreads, 0, probs, stats, q, k, n, scale,
         probs_format);
  if (dq || dk) {
    launch("attention_backward", attention_ds_kernel, static_cast<unsigned>(rows), kAttnThreads, bytes, ds, dout, v,
           probs, n, scale, dropout, keep);
    if (dq && queries > 0) launch("attention_backward", attention_dq_kernel, grid_for(queries), kThreads, 0, dq, ds, k, n);
    if (dk && keys > 0) launch("attention_backward", attention_dkv_kernel, grid_for(keys), kThreads, 0, dk, In(ds), q, n);
  }
  if (!dv || keys <= 0) return;
  if (dropout.on())
    launch("attention_backward", attention_drop_probs_kernel, grid_for(rows * n.tk), kThreads, 0, probs, rows * n.tk,
           dropout, keep, probs_format);
  launch("attention_backward", attention_dkv_kernel, grid_for(keys), kThreads, 0, dv, In(probs), dout, n);
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
