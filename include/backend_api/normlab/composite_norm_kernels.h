// The norms as PyTorch's composite of tensor ops computes them at a bf16 / fp16 dtype (kernel.h),
// over x of N rows of D. Implementations: src/backends/reference/norms.cpp, cpu/norms.cpp,
// cuda/norms.cu.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// The norm as PyTorch's composite of tensor ops at a bf16 / fp16 dtype (norm_compute format;
// precision.h, composite_norm_row: the definition), row by row: LayerNorm when beta is defined
// (mean written), RMSNorm otherwise (mean undefined). x, gamma, beta hold values of `format`;
// mean and rstd receive the stored statistics the norm's backward reads.
struct CompositeNormForward {
  static constexpr const char* kName = "composite_norm_forward";
  Tensor& y;
  Tensor& mean;
  Tensor& rstd;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  int64_t n, d;
  double eps;
  Precision format;

  void check(const Contract& c) const {
    c.need(y, "y", n * d).need(x, "x", n * d).need(gamma, "gamma", d).need(rstd, "rstd", n);
    if (beta.defined()) c.need(beta, "beta", d).need(mean, "mean", n);
  }
};

// Its backward as autograd runs the composite (precision.h, composite_norm_row_backward: the
// definition): dx written row by row; dgamma = sum over rows of composite_gamma_term and dbeta
// = sum over rows of dy, each the float32 nearest its exact sum (rounded to the format by the
// tape). LayerNorm when mean is defined. Any of dx, dgamma, dbeta may be nullptr; census (may
// be null) counts what each step stored, over every row.
struct CompositeNormBackward {
  static constexpr const char* kName = "composite_norm_backward";
  Tensor* dx;
  Tensor* dgamma;
  Tensor* dbeta;
  const Tensor& dy;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& mean;
  const Tensor& rstd;
  int64_t n, d;
  Precision format;
  CompositeBackwardCensus* census;

  void check(const Contract& c) const {
    c.maybe(dx, "dx", n * d).maybe(dgamma, "dgamma", d).maybe(dbeta, "dbeta", d).need(dy, "dy", n * d);
    c.need(x, "x", n * d).need(gamma, "gamma", d).maybe(mean, "mean", n).need(rstd, "rstd", n);
  }
};

}  // namespace normlab
