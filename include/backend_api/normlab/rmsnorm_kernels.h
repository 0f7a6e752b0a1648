// RMSNorm's kernels (kernel.h), over x of N rows of D, and its fused residual add. They save rstd =
// 1/sqrt(mean(x^2) + eps), one per row, in the input's dtype. Implementations:
// src/backends/reference/norms.cpp, cpu/norms.cpp, cuda/norms.cu.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// rstd = 1/sqrt(mean(x^2)+eps); y = gamma*x*rstd
struct RmsNormForward {
  static constexpr const char* kName = "rmsnorm_forward";
  Tensor& y;
  Tensor& rstd;
  const Tensor& x;
  const Tensor& gamma;
  int64_t n, d;
  double eps;

  void check(const Contract& c) const {
    c.need(y, "y", n * d).need(rstd, "rstd", n).need(x, "x", n * d).need(gamma, "gamma", d);
  }
};

// g = dy*gamma; dx = rstd*(g - xhat*mean(g*xhat)); dgamma = sum_rows(dy*xhat). dx and dgamma may be
// nullptr.
struct RmsNormBackward {
  static constexpr const char* kName = "rmsnorm_backward";
  Tensor* dx;
  Tensor* dgamma;
  const Tensor& dy;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& rstd;
  int64_t n, d;

  void check(const Contract& c) const {
    c.maybe(dx, "dx", n * d).maybe(dgamma, "dgamma", d).need(dy, "dy", n * d).need(x, "x", n * d);
    c.need(gamma, "gamma", d).need(rstd, "rstd", n);
  }
};

// Fused residual add + RMSNorm, one pass per row: s = alpha*a + b written; y = RMSNorm(s).
struct AddRmsNormForward {
  static constexpr const char* kName = "add_rmsnorm_forward";
  Tensor& s;
  Tensor& y;
  Tensor& rstd;
  const Tensor& a;
  const Tensor& b;
  double alpha;
  const Tensor& gamma;
  int64_t n, d;
  double eps;

  void check(const Contract& c) const {
    c.need(s, "s", n * d).need(y, "y", n * d).need(rstd, "rstd", n).need(a, "a", n * d).need(b, "b", n * d);
    c.need(gamma, "gamma", d);
  }
};

}  // namespace normlab
