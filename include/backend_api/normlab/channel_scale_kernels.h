// The channel scale's kernels (kernel.h): x is (N x D), lambda (C) with C = D (a vector) or 1 (a
// scalar): ReZero's and SkipInit's scalar, LayerScale's diag(lambda). Implementations:
// src/backends/reference/channel_scale.cpp, src/backends/cpu/squash_kernels.cpp,
// src/backends/cuda/squash.cu.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// y = x * lambda.
struct ChannelScaleForward {
  static constexpr const char* kName = "channel_scale_forward";
  Tensor& y;
  const Tensor& x;
  const Tensor& lambda;
  int64_t n, d, c;

  void check(const Contract& k) const {
    k.holds(c == d || c == 1, "lambda has {} values, expected {} (one per column) or 1", c, d);
    k.need(y, "y", n * d).need(x, "x", n * d).need(lambda, "lambda", c);
  }
};

// dx = dy * lambda; dlambda = sum over rows of dy*x (C = D), or over every element (C = 1),
// deterministic as the squash's backward. Either may be nullptr.
struct ChannelScaleBackward {
  static constexpr const char* kName = "channel_scale_backward";
  Tensor* dx;
  Tensor* dlambda;
  const Tensor& dy;
  const Tensor& x;
  const Tensor& lambda;
  int64_t n, d, c;

  void check(const Contract& k) const {
    k.holds(c == d || c == 1, "lambda has {} values, expected {} (one per column) or 1", c, d);
    k.maybe(dx, "dx", n * d).maybe(dlambda, "dlambda", c).need(dy, "dy", n * d).need(x, "x", n * d);
    k.need(lambda, "lambda", c);
  }
};

}  // namespace normlab
