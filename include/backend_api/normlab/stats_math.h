// The arithmetic of the AttentionLogitStats kernel for one row, in double: the one definition the
// host backends (reference, cpu) share; the CUDA kernel does the same sums in a block.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace normlab {

// One (b, h, t) row of causal logits l_s = scale * q_t . k_s (s <= t, dots in double) of q, k
// laid out (B, T, C = H*Dh): its max, and the entropy of softmax(l) = log Z - sum_s e_s (l_s -
// max) / Z with e_s = exp(l_s - max).
template <class T>
void attention_logit_stats_row(const T* q, const T* k, int64_t bi, int64_t hi, int64_t ti, int64_t t, int64_t c,
                               int64_t dh, double scale, double& max_logit, double& entropy) {
  const T* qt = q + (bi * t + ti) * c + hi * dh;
  auto logit = [&](int64_t si) {
    const T* ks = k + (bi * t + si) * c + hi * dh;
    double dot = 0.0;
    for (int64_t j = 0; j < dh; ++j) dot += double(qt[j]) * double(ks[j]);
    return scale * dot;
  };
  double top = -INFINITY;
  for (int64_t si = 0; si <= ti; ++si) top = std::max(top, logit(si));
  double z = 0.0, weighted = 0.0;
  for (int64_t si = 0; si <= ti; ++si) {
    const double l = logit(si), e = std::exp(l - top);
    z += e;
    weighted += e * (l - top);
  }
  max_logit = top;
  entropy = std::log(z) - weighted / z;
}

}  // namespace normlab
