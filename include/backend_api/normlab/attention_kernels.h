// Multi-head scaled-dot-product attention (kernel.h). q, out: (B, T, H*Dh); k, v: (B, Tk, H*Dh);
// head h uses channels [h*Dh, (h+1)*Dh). Causal self-attention (a decoder's; Tk = T, query t sees
// the keys s <= t) or attention that sees every key (an encoder's self-attention with Tk = T; a
// decoder's cross-attention to the encoder's Tk outputs).
//
// The probabilities are never written out: the forward keeps each block of query rows' scores
// where it computes them and saves two numbers per query row, its softmax's max and sum; the
// backward recomputes P from q, k and those, as FlashAttention does on GPUs (which saves their
// log-sum-exp). An attention layer saves its inputs and 2 x B x H x T floats, nothing of size
// B x H x T x T.
#pragma once
#include <cstdint>

#include "normlab/dropout_kernels.h"
#include "normlab/kernel.h"
#include "normlab/precision.h"

namespace normlab {

// Which keys the query rows see: the layer's key length and mask.
struct AttentionKeys {
  int64_t tk = 0;       // keys per sequence; 0: T (self-attention)
  bool causal = true;   // query t sees keys s <= t only (needs Tk = T)
  int64_t of(int64_t t) const { return tk > 0 ? tk : t; }
};

// A causal mask pairs query t with key t: it needs as many keys as queries.
inline void check_keys(const Contract& c, const AttentionKeys& keys, int64_t t) {
  c.holds(keys.tk >= 0, "Tk = {} keys", keys.tk);
  c.holds(!keys.causal || keys.of(t) == t, "a causal mask needs Tk = T, got Tk = {} and T = {}", keys.of(t), t);
}

// With seen(t) the keys query t sees (s <= t when causal, every s < Tk otherwise):
// S[t,s] = scale * q_t . k_s; P[t,s] = exp(S[t,s] - max_t) / sum_t for s seen, zero for the
// others, with max_t = max_{s seen} S[t,s] and sum_t = sum_{s seen} exp(S[t,s] - max_t), written
// to stats[(b, h, t)] as {max_t, sum_t}; out_t = sum_s D[t,s] v_s, where D = P without dropout
// and, with it, D[t,s] = P[t,s] * keep_scale where dropout.keeps(((b*H + h)*T + t)*Tk + s), else
// 0 (the probabilities' dropout; the stats are P's).
struct AttentionForward {
  static constexpr const char* kName = "attention_forward";
  Tensor& out;
  Tensor& stats;  // (B, H, T, 2), float32 (float64 with float64 inputs)
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  int64_t b;
  int64_t t;
  int64_t h;
  int64_t dh;
  double scale;
  DropoutMask dropout{};
  AttentionKeys keys{};

  void check(const Contract& c) const {
    const int64_t btc = b * t * h * dh, bkc = b * keys.of(t) * h * dh;
    c.need(out, "out", btc).need(stats, "stats", b * h * t * 2).need(q, "q", btc).need(k, "k", bkc);
    c.need(v, "v", bkc);
    check_keys(c, keys, t);
  }
};

// P recomputed from q, k and the forward's stats (each backend as its forward computes it, so the
// same bits where the stats are its own; the reference recomputes P from q and k alone), then
// rounded to `probs_format`:
// the format the unfused form (softmax, then a product) would store P in for its backward, which
// a bf16 / fp16 run's gradients therefore see; fp32 changes nothing. Then
//   dD = dout v^T; dv = D^T dout; dP = dD * (D / P: the forward's mask times keep_scale);
//   dS = P*(dP - rowsum(dP*P)) * scale; dq = dS k; dk = dS^T q,
// with D as the forward's (= P without dropout), from the rounded P, and `dropout` the forward's.
struct AttentionBackward {
  static constexpr const char* kName = "attention_backward";
  Tensor* dq;
  Tensor* dk;
  Tensor* dv;
  const Tensor& dout;
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const Tensor& stats;
  int64_t b;
  int64_t t;
  int64_t h;
  int64_t dh;
  double scale;
  Precision probs_format = Precision::fp32;
  DropoutMask dropout{};
  AttentionKeys keys{};

  void check(const Contract& c) const {
    const int64_t btc = b * t * h * dh, bkc = b * keys.of(t) * h * dh;
    c.maybe(dq, "dq", btc).maybe(dk, "dk", bkc).maybe(dv, "dv", bkc).need(dout, "dout", btc).need(q, "q", btc);
    c.need(k, "k", bkc).need(v, "v", bkc).need(stats, "stats", b * h * t * 2);
    check_keys(c, keys, t);
  }
};

}  // namespace normlab
