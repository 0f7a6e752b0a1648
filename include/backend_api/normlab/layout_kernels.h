// Layout kernels (kernel.h).
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// x viewed as (outer, A, mid, Bdim, inner) -> out (outer, Bdim, mid, A, inner): swaps two axes.
struct Transpose {
  static constexpr const char* kName = "transpose";
  Tensor& out;
  const Tensor& x;
  int64_t outer;
  int64_t a;
  int64_t mid;
  int64_t bdim;
  int64_t inner;

  void check(const Contract& c) const {
    const int64_t n = outer * a * mid * bdim * inner;
    c.need(out, "out", n).need(x, "x", n);
  }
};

}  // namespace normlab
