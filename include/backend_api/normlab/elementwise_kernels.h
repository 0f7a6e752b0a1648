// The elementwise kernels (kernel.h) over the n = numel values of their tensors, every tensor of a
// call holding the first's number of elements, and the reductions over all of them.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"
#include "normlab/precision.h"

namespace normlab {

struct Fill {
  static constexpr const char* kName = "fill";
  Tensor& out;
  double value;

  void check(const Contract& c) const {
    c.need(out, "out", out.defined() ? out.numel() : 0);
  }
};

struct Copy {
  static constexpr const char* kName = "copy";
  Tensor& out;
  const Tensor& x;

  void check(const Contract& c) const {
    const int64_t n = out.defined() ? out.numel() : 0;
    c.need(out, "out", n).need(x, "x", n);
  }
};

// out = alpha * a + beta * b
struct Add {
  static constexpr const char* kName = "add";
  Tensor& out;
  const Tensor& a;
  const Tensor& b;
  double alpha;
  double beta;

  void check(const Contract& c) const {
    const int64_t n = out.defined() ? out.numel() : 0;
    c.need(out, "out", n).need(a, "a", n).need(b, "b", n);
  }
};

// dst += src (accumulate)
struct Accumulate {
  static constexpr const char* kName = "accumulate";
  Tensor& dst;
  const Tensor& src;

  void check(const Contract& c) const {
    const int64_t n = dst.defined() ? dst.numel() : 0;
    c.need(dst, "dst", n).need(src, "src", n);
  }
};

struct Scale {
  static constexpr const char* kName = "scale";
  Tensor& out;
  const Tensor& x;
  double alpha;

  void check(const Contract& c) const {
    const int64_t n = out.defined() ? out.numel() : 0;
    c.need(out, "out", n).need(x, "x", n);
  }
};

struct Mul {
  static constexpr const char* kName = "mul";
  Tensor& out;
  const Tensor& a;
  const Tensor& b;

  void check(const Contract& c) const {
    const int64_t n = out.defined() ? out.numel() : 0;
    c.need(out, "out", n).need(a, "a", n).need(b, "b", n);
  }
};

// GELU, exact erf form (PyTorch's default): y = x * Phi(x), Phi(x) = 0.5 * (1 + erf(x / sqrt(2))).
// dydx (optional) = Phi(x) + x * phi(x): the backward is then dx = dy * dydx, one multiply,
// because erf and exp are computed once, here, while x is in registers.
struct GeluForward {
  static constexpr const char* kName = "gelu_forward";
  Tensor& y;
  Tensor* dydx;
  const Tensor& x;

  void check(const Contract& c) const {
    const int64_t n = y.defined() ? y.numel() : 0;
    c.need(y, "y", n).need(x, "x", n).maybe(dydx, "dydx", n);
  }
};

// sum of x^2 over all elements, accumulated in double (for norms of activations/gradients)
struct SumSquares {
  static constexpr const char* kName = "sum_squares";
  double& result;
  const Tensor& x;

  void check(const Contract& c) const {
    c.need(x, "x", x.defined() ? x.numel() : 0);
  }
};

// Every value of x rounded in place to a format's grid (precision.h: nearest even, overflow to
// inf, gradual underflow): how bf16/fp16 storage is emulated in float32. fp32 changes nothing.
// A float64 tensor is rounded through float32, as PyTorch converts a double to half.
struct RoundToFormat {
  static constexpr const char* kName = "round_to_format";
  Tensor& x;
  Precision format;

  void check(const Contract& c) const {
    c.need(x, "x", x.defined() ? x.numel() : 0);
  }
};

// x's values as `format` would store them, counted (precision.h, FormatCensus): float32 x.
// Not on a step's path: train's per-layer statistics and its non-finite diagnosis.
struct CountFormat {
  static constexpr const char* kName = "format_census";
  FormatCensus& result;
  const Tensor& x;
  Precision format;

  void check(const Contract& c) const {
    c.need(x, "x", x.defined() ? x.numel() : 0);
  }
};

// The two reductions as values: sum_squares(b, x), format_census(b, x, format).
inline double sum_squares(Backend& b, const Tensor& x) {
  double result = 0.0;
  run_kernel(b, SumSquares{result, x});
  return result;
}

inline FormatCensus format_census(Backend& b, const Tensor& x, Precision format) {
  FormatCensus result;
  run_kernel(b, CountFormat{result, x, format});
  return result;
}

}  // namespace normlab
