// Statistics of a log step (kernel.h), recorded, never differentiated. Reduced where the tensors
// live, so that a device-resident run downloads per-row results only. Sums and dot products in double.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// norms[i] = sqrt(sum_j x[i, j]^2) over N rows of D (the residual stream's token norms).
struct RowNorms {
  static constexpr const char* kName = "row_norms";
  Tensor& norms;
  const Tensor& x;
  int64_t n;
  int64_t d;

  void check(const Contract& c) const {
    c.need(norms, "norms", n).need(x, "x", n * d);
  }
};

// Per (b, h, t) row (max_logit and entropy are (B, H, T)) of the causal attention logits
// l_s = scale * q_t . k_s, s <= t (q, k: (B, T, H*Dh)): max_logit = max_s l_s; entropy =
// -sum_s p_s log p_s of p = softmax(l), as log Z - sum_s e_s (l_s - max) / Z, e_s = exp(l_s - max).
struct AttentionLogitStats {
  static constexpr const char* kName = "attention_logit_stats";
  Tensor& max_logit;
  Tensor& entropy;
  const Tensor& q;
  const Tensor& k;
  int64_t b;
  int64_t t;
  int64_t h;
  int64_t dh;
  double scale;

  void check(const Contract& c) const {
    c.need(max_logit, "max_logit", b * h * t).need(entropy, "entropy", b * h * t).need(q, "q", b * t * h * dh);
    c.need(k, "k", b * t * h * dh);
  }
};

}  // namespace normlab
