// The elementwise normalizers' kernels (kernel.h): DyT (Zhu et al. 2025) and Derf, over x of N rows
// of D; alpha and shift are one element each. Implementations: src/backends/reference/squash.cpp,
// src/backends/cpu/squash_kernels.cpp, src/backends/cuda/squash.cu.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// The bounded function of an elementwise normalizer: tanh (DyT), erf (Derf).
enum class Squash { tanh, erf };

// y = gamma * f(alpha*x + shift) + beta, f = tanh or erf; shift undefined is 0 (DyT has none), beta
// undefined is 0. Every arithmetic in float32 (double on the reference backend).
struct SquashForward {
  static constexpr const char* kName = "squash_forward";
  Tensor& y;
  const Tensor& x;
  const Tensor& alpha;
  const Tensor& shift;
  const Tensor& gamma;
  const Tensor& beta;
  int64_t n, d;
  Squash f;

  void check(const Contract& c) const {
    c.need(y, "y", n * d).need(x, "x", n * d).need(alpha, "alpha", 1).maybe(shift, "shift", 1);
    c.need(gamma, "gamma", d).maybe(beta, "beta", d);
  }
};

// u = alpha*x + shift, h = dy*gamma*f'(u): dx = alpha*h; dalpha = sum over every element of x*h;
// dshift = sum of h; dgamma = sum_rows(dy*f(u)); dbeta = sum_rows(dy). Each may be nullptr. The
// full sums are deterministic: the same order of additions for the same shape, run after run.
struct SquashBackward {
  static constexpr const char* kName = "squash_backward";
  Tensor* dx;
  Tensor* dalpha;
  Tensor* dshift;
  Tensor* dgamma;
  Tensor* dbeta;
  const Tensor& dy;
  const Tensor& x;
  const Tensor& alpha;
  const Tensor& shift;
  const Tensor& gamma;
  int64_t n, d;
  Squash f;

  void check(const Contract& c) const {
    c.maybe(dx, "dx", n * d).maybe(dalpha, "dalpha", 1).maybe(dshift, "dshift", 1).maybe(dgamma, "dgamma", d);
    c.maybe(dbeta, "dbeta", d).need(dy, "dy", n * d).need(x, "x", n * d).need(alpha, "alpha", 1);
    c.maybe(shift, "shift", 1).need(gamma, "gamma", d);
  }
};

}  // namespace normlab
