// Causal multi-head scaled-dot-product attention (kernel.h). q, k, v, out: (B, T, H*Dh), head h
// uses channels [h*Dh, (h+1)*Dh).
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// probs (B, H, T, T): softmax over s <= t of scale * q_t . k_s, zero for s > t (saved).
// out_t = sum_s probs[t,s] v_s.
struct AttentionForward {
  static constexpr const char* kName = "attention_forward";
  Tensor& out;
  Tensor& probs;
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  int64_t b;
  int64_t t;
  int64_t h;
  int64_t dh;
  double scale;

  void check(const Contract& c) const {
    const int64_t btc = b * t * h * dh;
    c.need(out, "out", btc).need(probs, "probs", b * h * t * t).need(q, "q", btc).need(k, "k", btc);
    c.need(v, "v", btc);
  }
};

// dP = dout v^T; dv = P^T dout; dS = P*(dP - rowsum(dP*P)) * scale; dq = dS k; dk = dS^T q.
struct AttentionBackward {
  static constexpr const char* kName = "attention_backward";
  Tensor* dq;
  Tensor* dk;
  Tensor* dv;
  const Tensor& dout;
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const Tensor& probs;
  int64_t b;
  int64_t t;
  int64_t h;
  int64_t dh;
  double scale;

  void check(const Contract& c) const {
    const int64_t btc = b * t * h * dh;
    c.maybe(dq, "dq", btc).maybe(dk, "dk", btc).maybe(dv, "dv", btc).need(dout, "dout", btc).need(q, "q", btc);
    c.need(k, "k", btc).need(v, "v", btc).need(probs, "probs", b * h * t * t);
  }
};

}  // namespace normlab
