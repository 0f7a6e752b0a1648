// The causal prefix mean (kernel.h), the toy model's mixing: x, y (B, T, C).
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// y[b,t] = (1/(t+1)) * sum_{s<=t} x[b,s]
struct PrefixMeanForward {
  static constexpr const char* kName = "prefix_mean_forward";
  Tensor& y;
  const Tensor& x;
  int64_t b;
  int64_t t;
  int64_t c;

  void check(const Contract& contract) const {
    contract.need(y, "y", b * t * c).need(x, "x", b * t * c);
  }
};

// dx[b,s] = sum_{t>=s} dy[b,t] / (t+1)
struct PrefixMeanBackward {
  static constexpr const char* kName = "prefix_mean_backward";
  Tensor& dx;
  const Tensor& dy;
  int64_t b;
  int64_t t;
  int64_t c;

  void check(const Contract& contract) const {
    contract.need(dx, "dx", b * t * c).need(dy, "dy", b * t * c);
  }
};

}  // namespace normlab
