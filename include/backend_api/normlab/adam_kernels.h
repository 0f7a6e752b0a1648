// The optimizer's kernel (kernel.h): one pass over n parameters (all parameters live in one buffer).
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = true;  // AdamW (decoupled decay, applied as p -= lr*wd*p) vs Adam (L2 added to grad)
  int64_t step = 1;       // 1-based step for bias correction
};

// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr * (mhat/(sqrt(vhat)+eps) [+ wd*p])
struct AdamStep {
  static constexpr const char* kName = "adam_step";
  Tensor& param;
  const Tensor& grad;
  Tensor& m;
  Tensor& v;
  const AdamParams& hp;

  void check(const Contract& c) const {
    const int64_t n = param.defined() ? param.numel() : 0;
    c.need(param, "param", n).need(grad, "grad", n).need(m, "m", n).need(v, "v", n);
  }
};

}  // namespace normlab
