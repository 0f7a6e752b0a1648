// Causal multi-head attention and the causal prefix mean (the toy model's token mixing) of the
// cpu backend.
//
// Attention: q, k, v, out are (B, T, H*Dh), head h of a row its Dh columns from h*Dh. One task per
// (batch, head) tile, tiles split over the threads: the tile's operands are packed into small
// buffers (K and V transposed or padded to whole vectors), and its products are register-blocked
// loops of FMAs (8 rows by one vector) over the causal part only: the scores of s > t are never
// computed (half the work of a full T x T product). The probabilities are never written out: the
// forward computes each block of 8 query rows' scores, softmax and output in one pass through a
// buffer of 8 x T floats and keeps each row's softmax max and sum; the backward recomputes the
// tile's scores and, from those two numbers, its P in one pass of exps (the same arithmetic, so
// the same bits) into a buffer of its thread. A thread holds at most two T x T buffers; nothing
// of size B x H x T x T is allocated. A batched oneDNN matmul over (B, H) computed the full T x T at a
// third of the FMA peak on 64 x 64 x 32 heads.
//   S = scale * Q K^T (s <= t);  P = causal_softmax(S);  D = P (with dropout: P * mask / (1 - rate));
//   out = D V
//   backward: P recomputed (rounded to the stored format), D from it (rounded again, as the unfused
//             form stores dropout's output);  dV = D^T dO;  dP = dO V^T (* mask / (1 - rate));
//             dS = scale * P * (dP - rowsum(dP*P));  dQ = dS K;  dK = dS^T Q
#include <algorithm>
#include <cmath>

#include <vector>

#include "kernels.h"
#include "normlab/stats_math.h"
#include "parallel.h"
#include "simd.h"

namespace normlab::cpu {

namespace {

using simd::VF;
constexpr int64_t kW = simd::kWidth;
constexpr int64_t kRows = 8;  // rows of a register block: 8 accumulators hide the FMA latency

int64_t padded(int64_t n) { return (n + kW - 1) / kW * kW; }

// dst (n x ldd, contiguous) = src's n rows of m floats (row stride lds), zero-padded to ldd.
void pack_rows(float* dst, const float* src, int64_t n, int64_t m, int64_t lds, int64_t ldd) {
  for (int64_t i = 0; i < n; ++i) {
    std::copy(src + i * lds, src + i * lds + m, dst + i * ldd);
    std::fill(dst + i * ldd + m, dst + (i + 1) * ldd, 0.0f);
  }
}

// dst (m x ldd) = the transpose of src's n rows of m floats (row stride lds), columns n.. zero.
void pack_transposed(float* dst, const float* src, int64_t n, int64_t m, int64_t lds, int64_t ldd) {
  for (int64_t d = 0; d < m; ++d) {
    for (int64_t j = 0; j < n; ++j) dst[d * ldd + j] = src[j * lds + d];
    std::fill(dst + d * ldd + n, dst + (d + 1) * ldd, 0.0f);
  }
}

// R rows of S = scale * A Bt over columns [0, jend): A's R rows of m floats (stride lda), Bt
// (m x ldb) the second operand transposed and padded; S's R rows of stride lds.
template <int R>
void score_rows(float* s, int64_t lds, const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t m,
                int64_t jend, float scale) {
  for (int64_t j0 = 0; j0 < jend; j0 += kW) {
    VF acc[R];
    for (int r = 0; r < R; ++r) acc[r] = simd::zero();
    for (int64_t d = 0; d < m; ++d) {
      const VF bv = simd::load(bt + d * ldb + j0);
      for (int r = 0; r < R; ++r) acc[r] = simd::fmadd(simd::set1(a[r * lda + d]), bv, acc[r]);
    }
    const int64_t n = std::min(kW, jend - j0);
    for (int r = 0; r < R; ++r) simd::store_tail(s + r * lds + j0, acc[r] * simd::set1(scale), n);
  }
}

// The (batch, head) tiles of an attention call: where each head's operands start, and which keys
// each query row sees.
struct Tiles {
  int64_t t, tk, h, dh, c, tkp, dhp;  // c = H*Dh: the row stride of q, k, v; tkp, dhp: padded to vectors
  bool causal;
  explicit Tiles(const AttentionSizes& n)
      : t(n.t), tk(n.tk), h(n.h), dh(n.dh), c(n.h * n.dh), tkp(padded(n.tk)), dhp(padded(n.dh)), causal(n.causal) {}
  int64_t query_head(int64_t tile) const { return (tile / h) * t * c + (tile % h) * dh; }  // offset in q, out
  int64_t key_head(int64_t tile) const { return (tile / h) * tk * c + (tile % h) * dh; }   // offset in k, v
  // The keys rows [i0, i0 + rows) see between them: the last row's.
  int64_t seen(int64_t i0, int64_t rows) const { return causal ? std::min(i0 + rows, tk) : tk; }
  // The first query row that sees key j (P is zero above it).
  int64_t first_row(int64_t j) const { return causal ? j : 0; }
  // row0 for the softmax rows (kernels.h): the query row itself when causal, past every key when not.
  int64_t softmax_row0(int64_t i0) const { return causal ? i0 : tk; }
  uint64_t first_mask_index(int64_t tile) const { return static_cast<uint64_t>(tile * t * tk); }
};

// S[i][j] = scale * sum_d A[i][d] Bt[d][j] over the keys each block of rows sees (a causal block's
// last columns reach past its first rows' diagonal, which the softmax then ignores). S is t x tk.
void visible_scores(float* s, const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t m, const Tiles& tl,
                    float scale) {
  int64_t i0 = 0;
  for (; i0 + kRows <= tl.t; i0 += kRows)
    score_rows<kRows>(s + i0 * tl.tk, tl.tk, a + i0 * lda, lda, bt, ldb, m, tl.seen(i0, kRows), scale);
  for (; i0 < tl.t; ++i0) score_rows<1>(s + i0 * tl.tk, tl.tk, a + i0 * lda, lda, bt, ldb, m, tl.seen(i0, 1), scale);
}

// R rows of O = P B over j < jend (P's entries past what a row sees are zero): P's R rows of
// stride ldp, B (tk x ldb) padded rows; O's R rows of m floats, stride ldo.
template <int R>
void lower_rows(float* o, int64_t ldo, const float* p, int64_t ldp, const float* b, int64_t ldb, int64_t m,
                int64_t jend) {
  for (int64_t c0 = 0; c0 < m; c0 += kW) {
    VF acc[R];
    for (int r = 0; r < R; ++r) acc[r] = simd::zero();
    for (int64_t j = 0; j < jend; ++j) {
      const VF bv = simd::load(b + j * ldb + c0);
      for (int r = 0; r < R; ++r) acc[r] = simd::fmadd(simd::set1(p[r * ldp + j]), bv, acc[r]);
    }
    const int64_t n = std::min(kW, m - c0);
    for (int r = 0; r < R; ++r) simd::store_tail(o + r * ldo + c0, acc[r], n);
  }
}

// O[i] = sum_{j seen} P[i][j] B[j]: the product with P (t x tk, lower-triangular when causal).
void seen_product(float* o, int64_t ldo, const float* p, const float* b, int64_t ldb, int64_t m, const Tiles& tl) {
  int64_t i0 = 0;
  for (; i0 + kRows <= tl.t; i0 += kRows)
    lower_rows<kRows>(o + i0 * ldo, ldo, p + i0 * tl.tk, tl.tk, b, ldb, m, tl.seen(i0, kRows));
  for (; i0 < tl.t; ++i0) lower_rows<1>(o + i0 * ldo, ldo, p + i0 * tl.tk, tl.tk, b, ldb, m, tl.seen(i0, 1));
}

// Rows j0.. of G = P^T B over the query rows i from i0 (P's entries above them are zero): P t x
// ldp, B's rows padded (stride ldb).
template <int R>
void upper_rows(float* g, int64_t ldg, const float* p, int64_t ldp, int64_t i0, int64_t t, const float* b,
                int64_t ldb, int64_t m, int64_t j0) {
  for (int64_t c0 = 0; c0 < m; c0 += kW) {
    VF acc[R];
    for (int r = 0; r < R; ++r) acc[r] = simd::zero();
    for (int64_t i = i0; i < t; ++i) {
      const VF bv = simd::load(b + i * ldb + c0);
      for (int r = 0; r < R; ++r) acc[r] = simd::fmadd(simd::set1(p[i * ldp + j0 + r]), bv, acc[r]);
    }
    const int64_t n = std::min(kW, m - c0);
    for (int r = 0; r < R; ++r) simd::store_tail(g + (j0 + r) * ldg + c0, acc[r], n);
  }
}

// G[j] = sum_i P[i][j] B[i] for the tk keys j: the product with the transpose of P (t x tk).
void transposed_product(float* g, int64_t ldg, const float* p, const float* b, int64_t ldb, int64_t m,
                        const Tiles& tl) {
  int64_t j0 = 0;
  for (; j0 + kRows <= tl.tk; j0 += kRows) upper_rows<kRows>(g, ldg, p, tl.tk, tl.first_row(j0), tl.t, b, ldb, m, j0);
  for (; j0 < tl.tk; ++j0) upper_rows<1>(g, ldg, p, tl.tk, tl.first_row(j0), tl.t, b, ldb, m, j0);
}

// Rows [i0, i0 + rows) of one tile's P (row stride ld) times the probabilities' dropout mask and
// its keep scale (attention_kernels.h), over the keys each row sees (P is 0 past them): the
// tile's entry (i, j) is the mask's index first + i*tk + j.
void drop_rows(float* p, int64_t ld, int64_t i0, int64_t rows, const Tiles& tl, uint64_t first,
               const DropoutMask& mask) {
  const float keep = static_cast<float>(mask.keep_scale());
  for (int64_t r = 0; r < rows; ++r) {
    float* row = p + r * ld;
    const uint64_t at = first + static_cast<uint64_t>((i0 + r) * tl.tk);
    const int64_t seen = tl.seen(i0 + r, 1);
    for (int64_t j = 0; j < seen; ++j) row[j] = mask.keeps(at + static_cast<uint64_t>(j)) ? row[j] * keep : 0.0f;
  }
}

// The backward's mask, hashed once for its two uses: f (t x tk) = keep scale where the mask keeps
// a seen (i, j), else 0.
void mask_factors(float* f, const Tiles& tl, uint64_t first, const DropoutMask& mask) {
  std::fill(f, f + tl.t * tl.tk, 0.0f);
  const float keep = static_cast<float>(mask.keep_scale());
  for (int64_t i = 0; i < tl.t; ++i) {
    const uint64_t at = first + static_cast<uint64_t>(i * tl.tk);
    const int64_t seen = tl.seen(i, 1);
    for (int64_t j = 0; j < seen; ++j) f[i * tl.tk + j] = mask.keeps(at + static_cast<uint64_t>(j)) ? keep : 0.0f;
  }
}

// dst = a * b elementwise over n floats.
void multiply(float* dst, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] * b[i];
}

// One thread's buffers, grown as needed and kept between calls: the packed operands and, in the
// backward, the tile's recomputed P, its dS and, with dropout, the mask's factors and P after it.
struct TileBuffers {
  std::vector<float> transposed, rows, probs, ds, factors, dropped;
  float* transposed_of(int64_t floats) { return grown(transposed, floats); }
  float* rows_of(int64_t floats) { return grown(rows, floats); }
  float* probs_of(int64_t floats) { return grown(probs, floats); }
  float* ds_of(int64_t floats) { return grown(ds, floats); }
  float* factors_of(int64_t floats) { return grown(factors, floats); }
  float* dropped_of(int64_t floats) { return grown(dropped, floats); }
  static float* grown(std::vector<float>& v, int64_t floats) {
    if (static_cast<int64_t>(v.size()) < floats) v.resize(static_cast<size_t>(floats));
    return v.data();
  }
};
TileBuffers& tile_buffers() {
  thread_local TileBuffers buffers;
  return buffers;
}

// A head's n rows of dh floats as the products read them: in place (row stride c) when dh is
// whole vectors, else copied into the thread's row buffer, each row padded to whole vectors.
struct HeadRows {
  const float* p;
  int64_t ld;
};
HeadRows head_rows(const float* src, int64_t n, TileBuffers& buf, const Tiles& tl) {
  if (tl.dh == tl.dhp) return {src, tl.c};
  float* rows = buf.rows_of(n * tl.dhp);
  pack_rows(rows, src, n, tl.dh, tl.c, tl.dhp);
  return {rows, tl.dhp};
}

// R query rows from i0 of one tile: their scores, softmax (and dropout) and output through `s`
// (R x tkp), their max and sum to stats (the tile's, 2 a row). `first`: the tile's first mask index.
template <int R>
void forward_rows(float* out, float* stats, float* s, const float* q, const float* kt, HeadRows v,
                  const Tiles& tl, int64_t i0, float scale, const DropoutMask& dropout, uint64_t first) {
  const int64_t jend = tl.seen(i0, R);
  score_rows<R>(s, tl.tkp, q + i0 * tl.c, tl.c, kt, tl.tkp, tl.dh, jend, scale);
  causal_softmax_rows(s, tl.tkp, tl.softmax_row0(i0), R, jend, stats + 2 * i0);
  if (dropout.on()) drop_rows(s, tl.tkp, i0, R, tl, first, dropout);
  lower_rows<R>(out + i0 * tl.c, tl.c, s, tl.tkp, v.p, v.ld, tl.dh, jend);
}

// The tile's P (t x tk, zero where unseen) as the forward computed it, rounded to the stored
// format: the scores' blocks are the forward's own, and exp(s - max) * (1 / sum) its softmax's
// last steps with its max and sum.
void recompute_probs(float* p, const float* q, const float* k, const float* stats, float* kt, const Tiles& tl,
                     float scale, Precision format) {
  pack_transposed(kt, k, tl.tk, tl.dh, tl.c, tl.tkp);
  visible_scores(p, q, tl.c, kt, tl.tkp, tl.dh, tl, scale);
  causal_probs_rows(p, tl.tk, tl.softmax_row0(0), tl.t, tl.tk, stats);
  if (format != Precision::fp32) round_to(format, p, tl.t * tl.tk);
}

// The tile's D (P after the forward's dropout, rounded as the format stores it), in the thread's
// buffer; P itself without dropout.
const float* dropped_probs(const float* p, const float* factors, TileBuffers& buf, const Tiles& tl, Precision format) {
  if (!factors) return p;
  float* dropped = buf.dropped_of(tl.t * tl.tk);
  multiply(dropped, p, factors, tl.t * tl.tk);
  if (format != Precision::fp32) round_to(format, dropped, tl.t * tl.tk);
  return dropped;
}

// Attention with no head channels: every score is 0, so each row's max is 0 and its sum the
// number of keys it sees; the output has no channels to write.
void empty_head_stats(float* stats, const AttentionSizes& n) {
  const Tiles tl(n);
  for (int64_t row = 0; row < n.b * n.h * n.t; ++row) {
    stats[2 * row] = 0.0f;
    stats[2 * row + 1] = static_cast<float>(tl.seen(row % n.t, 1));
  }
}

}  // namespace

void attention_forward(float* out, float* stats, const float* q, const float* k, const float* v,
                       const AttentionSizes& n, float scale, const DropoutMask& dropout) {
  if (n.b <= 0 || n.t <= 0 || n.h <= 0) return;
  if (n.dh <= 0 || n.tk <= 0) {
    if (n.tk > 0) empty_head_stats(stats, n);
    return;
  }
  const Tiles tl(n);
  parallel_for(n.b * n.h, n.b * n.h * n.t * n.tk * n.dh, [&](int64_t tile) {
    TileBuffers& buf = tile_buffers();
    const int64_t qa = tl.query_head(tile), ka = tl.key_head(tile);
    float* kt = buf.transposed_of(n.dh * tl.tkp);
    const HeadRows vp = head_rows(v + ka, n.tk, buf, tl);
    float* s = buf.probs_of(kRows * tl.tkp);
    pack_transposed(kt, k + ka, n.tk, n.dh, tl.c, tl.tkp);
    int64_t i0 = 0;
    float* st = stats + tile * n.t * 2;
    const uint64_t first = tl.first_mask_index(tile);
    for (; i0 + kRows <= n.t; i0 += kRows)
      forward_rows<kRows>(out + qa, st, s, q + qa, kt, vp, tl, i0, scale, dropout, first);
    for (; i0 < n.t; ++i0) forward_rows<1>(out + qa, st, s, q + qa, kt, vp, tl, i0, scale, dropout, first);
  });
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* stats, const AttentionSizes& n, float scale,
                        Precision probs_format, const DropoutMask& dropout) {
  if (n.b <= 0 || n.t <= 0 || n.tk <= 0 || n.h <= 0 || n.dh <= 0 || (!dq && !dk && !dv)) return;
  const Tiles tl(n);
  const int64_t entries = n.t * n.tk;
  parallel_for(n.b * n.h, 4 * n.b * n.h * entries * n.dh, [&](int64_t tile) {
    TileBuffers& buf = tile_buffers();
    const int64_t qa = tl.query_head(tile), ka = tl.key_head(tile);
    float* p = buf.probs_of(entries);
    float* transposed = buf.transposed_of(n.dh * tl.tkp);
    recompute_probs(p, q + qa, k + ka, stats + tile * n.t * 2, transposed, tl, scale, probs_format);
    float* factors = nullptr;
    if (dropout.on()) {
      factors = buf.factors_of(entries);
      mask_factors(factors, tl, tl.first_mask_index(tile), dropout);
    }
    if (dv) {
      const float* d = dropped_probs(p, factors, buf, tl, probs_format);
      const HeadRows g = head_rows(dout + qa, n.t, buf, tl);
      transposed_product(dv + ka, tl.c, d, g.p, g.ld, n.dh, tl);
    }
    if (!dq && !dk) return;
    float* ds = buf.ds_of(entries);
    pack_transposed(transposed, v + ka, n.tk, n.dh, tl.c, tl.tkp);
    visible_scores(ds, dout + qa, tl.c, transposed, tl.tkp, n.dh, tl, 1.0f);          // dD
    if (factors) multiply(ds, ds, factors, entries);                                  // dP
    causal_softmax_backward_rows(ds, p, n.t, n.tk, tl.softmax_row0(0), scale);        // dS
    if (dq) {
      const HeadRows kr = head_rows(k + ka, n.tk, buf, tl);
      seen_product(dq + qa, tl.c, ds, kr.p, kr.ld, n.dh, tl);
    }
    if (dk) {
      const HeadRows qr = head_rows(q + qa, n.t, buf, tl);
      transposed_product(dk + ka, tl.c, ds, qr.p, qr.ld, n.dh, tl);
    }
  });
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
