// LayerNorm's kernels (kernel.h), over x of N rows of D, and its fused residual add. They save rstd =
// 1/sqrt(var + eps), one per row, in the input's dtype (backends that use oneDNN convert its variance
// at the boundary). Implementations: src/backends/reference/norms.cpp, cpu/norms.cpp, cuda/norms.cu.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// mu = mean(x); var = mean((x-mu)^2); rstd = 1/sqrt(var+eps); y = gamma*(x-mu)*rstd + beta
struct LayerNormForward {
  static constexpr const char* kName = "layernorm_forward";
  Tensor& y;
  Tensor& mean;
  Tensor& rstd;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  int64_t n, d;
  double eps;

  void check(const Contract& c) const {
    c.need(y, "y", n * d).need(mean, "mean", n).need(rstd, "rstd", n).need(x, "x", n * d).need(gamma, "gamma", d);
    c.need(beta, "beta", d);
  }
};

// g = dy*gamma; dx = rstd*(g - mean(g) - xhat*mean(g*xhat)); dgamma = sum_rows(dy*xhat);
// dbeta = sum_rows(dy). Any of dx, dgamma, dbeta may be nullptr.
struct LayerNormBackward {
  static constexpr const char* kName = "layernorm_backward";
  Tensor* dx;
  Tensor* dgamma;
  Tensor* dbeta;
  const Tensor& dy;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& mean;
  const Tensor& rstd;
  int64_t n, d;

  void check(const Contract& c) const {
    c.maybe(dx, "dx", n * d).maybe(dgamma, "dgamma", d).maybe(dbeta, "dbeta", d).need(dy, "dy", n * d);
    c.need(x, "x", n * d).need(gamma, "gamma", d).need(mean, "mean", n).need(rstd, "rstd", n);
  }
};

// Fused residual add + LayerNorm, one pass per row: s = alpha*a + b; y = LayerNorm(s). Writes s as
// well: the residual stream is needed by the next block and by the backward.
struct AddLayerNormForward {
  static constexpr const char* kName = "add_layernorm_forward";
  Tensor& s;
  Tensor& y;
  Tensor& mean;
  Tensor& rstd;
  const Tensor& a;
  const Tensor& b;
  double alpha;
  const Tensor& gamma;
  const Tensor& beta;
  int64_t n, d;
  double eps;

  void check(const Contract& c) const {
    c.need(s, "s", n * d).need(y, "y", n * d).need(mean, "mean", n).need(rstd, "rstd", n).need(a, "a", n * d);
    c.need(b, "b", n * d).need(gamma, "gamma", d).need(beta, "beta", d);
  }
};

}  // namespace normlab
