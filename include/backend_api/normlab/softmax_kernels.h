// Softmax over the last dimension (kernel.h): x is (N x D).
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

struct SoftmaxForward {
  static constexpr const char* kName = "softmax_forward";
  Tensor& y;
  const Tensor& x;
  int64_t n;
  int64_t d;

  void check(const Contract& c) const {
    c.need(y, "y", n * d).need(x, "x", n * d);
  }
};

// dx = y * (dy - sum(dy*y))
struct SoftmaxBackward {
  static constexpr const char* kName = "softmax_backward";
  Tensor& dx;
  const Tensor& dy;
  const Tensor& y;
  int64_t n;
  int64_t d;

  void check(const Contract& c) const {
    c.need(dx, "dx", n * d).need(dy, "dy", n * d).need(y, "y", n * d);
  }
};

}  // namespace normlab
