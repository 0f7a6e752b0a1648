// Causal multi-head scaled-dot-product attention (kernel.h). q, k, v, out: (B, T, H*Dh), head h
// uses channels [h*Dh, (h+1)*Dh).
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

// S[t,s] = scale * q_t . k_s; P[t,s] = exp(S[t,s] - max_t) / sum_t for s <= t, zero for s > t,
// with max_t = max_{s<=t} S[t,s] and sum_t = sum_{s<=t} exp(S[t,s] - max_t), written to
// stats[(b, h, t)] as {max_t, sum_t}; out_t = sum_s D[t,s] v_s, where D = P without dropout and,
// with it, D[t,s] = P[t,s] * keep_scale where dropout.keeps(((b*H + h)*T + t)*T + s), else 0 (the
// probabilities' dropout; the stats are P's).
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

  void check(const Contract& c) const {
    const int64_t btc = b * t * h * dh;
    c.need(out, "out", btc).need(stats, "stats", b * h * t * 2).need(q, "q", btc).need(k, "k", btc);
    c.need(v, "v", btc);
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

  void check(const Contract& c) const {
    const int64_t btc = b * t * h * dh;
    c.maybe(dq, "dq", btc).maybe(dk, "dk", btc).maybe(dv, "dv", btc).need(dout, "dout", btc).need(q, "q", btc);
    c.need(k, "k", btc).need(v, "v", btc).need(stats, "stats", b * h * t * 2);
  }
};

}  // namespace normlab
