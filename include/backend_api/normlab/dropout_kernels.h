// Dropout (kernel.h): the kernel that applies a call's mask (dropout_mask.h).
#pragma once
#include <cstdint>

#include "normlab/dropout_mask.h"
#include "normlab/kernel.h"

namespace normlab {

// y[i] = x[i] * keep_scale if mask.keeps(i), else 0: the forward on x, and the backward on dy with
// the forward's mask (the same function). y may be x.
struct DropoutApply {
  static constexpr const char* kName = "dropout";
  Tensor& y;
  const Tensor& x;
  DropoutMask mask;

  void check(const Contract& c) const {
    const int64_t n = y.defined() ? y.numel() : 0;
    c.need(y, "y", n).need(x, "x", n);
  }
};

}  // namespace normlab
