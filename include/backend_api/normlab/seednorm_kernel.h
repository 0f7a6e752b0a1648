// SeeDNorm's kernels (Cai et al. 2025), declared with their contract (kernel.h): RMSNorm whose gain
// depends on the row, c = gamma + alpha * tanh(x . beta) (gamma, alpha, beta: D values each), over
// x of N rows of D. Implementations: src/backends/{reference,cpu}/seednorm.cpp, cuda/seednorm.cu.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// rstd = 1/sqrt(mean(x^2) + eps) and t = tanh(x . beta), one per row each (saved); y = c * x * rstd.
struct SeedNormForward {
  static constexpr const char* kName = "seednorm_forward";
  Tensor& y;
  Tensor& rstd;
  Tensor& t;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& alpha;
  const Tensor& beta;
  int64_t n, d;
  double eps;

  void check(const Contract& c) const {
    c.need(y, "y", n * d).need(rstd, "rstd", n).need(t, "t", n).need(x, "x", n * d);
    c.need(gamma, "gamma", d).need(alpha, "alpha", d).need(beta, "beta", d);
  }
};

// g = dy, xhat = x*rstd, u = (1 - t^2) * sum(g*alpha*xhat): dx = rstd*(c*g - xhat*mean(c*g*xhat)) +
// u*beta; dgamma = sum_rows(g*xhat); dalpha = sum_rows(t*g*xhat); dbeta = sum_rows(u*x). Any of dx,
// dgamma, dalpha, dbeta may be nullptr; each is WRITTEN.
struct SeedNormBackward {
  static constexpr const char* kName = "seednorm_backward";
  Tensor* dx;
  Tensor* dgamma;
  Tensor* dalpha;
  Tensor* dbeta;
  const Tensor& dy;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& alpha;
  const Tensor& beta;
  const Tensor& rstd;
  const Tensor& t;
  int64_t n, d;

  void check(const Contract& c) const {
    c.maybe(dx, "dx", n * d).maybe(dgamma, "dgamma", d).maybe(dalpha, "dalpha", d).maybe(dbeta, "dbeta", d);
    c.need(dy, "dy", n * d).need(x, "x", n * d).need(gamma, "gamma", d).need(alpha, "alpha", d);
    c.need(beta, "beta", d).need(rstd, "rstd", n).need(t, "t", n);
  }
};

}  // namespace normlab
