// The matrix products' kernels (kernel.h): batched products, the linear layer's forward with its
// fused bias and residual, its input gradient with a fused gate, and the bias gradient.
//
// A product's `operands` is the format its two operands' values are on (a bf16 run's casts): a
// backend may then multiply them in that format with float32 accumulation, as PyTorch's autocast
// does. Each product of two bf16 values is exact in float32, so only the order of the sums
// changes, except where the hardware's bf16 dot products treat subnormal values as zero (a bf16
// subnormal operand, a product or sum below float32's smallest normal). fp32 (the default):
// float32 operands, whatever their values.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"
#include "normlab/precision.h"

namespace normlab {

// One batch of matrix products: for each b < batch, C_b (M x N) = op(A_b) @ op(B_b), op(X) = X^T
// when trans_x. A_b is (M x K), or (K x M) stored when trans_a; B_b is (K x N), or (N x K) when
// trans_b. a_batched / b_batched false: the same A (or B) for every b (shared weights).
// accumulate: C += product instead of C = product.
//   MatmulSpec::of(m, n, k).batched(b).transposed_a()
struct MatmulSpec {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool a_batched = true, b_batched = true;
  bool accumulate = false;

  static MatmulSpec of(int64_t m_, int64_t n_, int64_t k_) {
    MatmulSpec s;
    s.m = m_;
    s.n = n_;
    s.k = k_;
    return s;
  }
  MatmulSpec& batched(int64_t b) { batch = b; return *this; }
  MatmulSpec& transposed_a() { trans_a = true; return *this; }
  MatmulSpec& transposed_b() { trans_b = true; return *this; }
  MatmulSpec& shared_b(bool shared = true) { b_batched = !shared; return *this; }
  // The elements of A (of B) the products read: one matrix when shared.
  int64_t a_elements() const { return (a_batched ? batch : 1) * m * k; }
  int64_t b_elements() const { return (b_batched ? batch : 1) * k * n; }
};

// c = the products `s` describes.
struct Matmul {
  static constexpr const char* kName = "matmul";
  Tensor& c;
  const Tensor& a;
  const Tensor& b;
  const MatmulSpec& s;
  Precision operands = Precision::fp32;

  void check(const Contract& contract) const {
    contract.need(c, "c", s.batch * s.m * s.n).need(a, "a", s.a_elements()).need(b, "b", s.b_elements());
  }
};

// y (M x N) = x (M x K) @ w^T (w is N x K, PyTorch's Linear layout) + bias (N) + residual
// (M x N); bias and residual optional (undefined tensor = none). The residual add is fused into
// the product's epilogue: a pre-norm block's "x + proj(...)" costs no pass of its own.
struct LinearForward {
  static constexpr const char* kName = "linear_forward";
  Tensor& y;
  const Tensor& x;
  const Tensor& w;
  const Tensor& bias;
  const Tensor& residual;
  int64_t m;
  int64_t k;
  int64_t n;
  Precision operands = Precision::fp32;

  void check(const Contract& contract) const {
    contract.need(y, "y", m * n).need(x, "x", m * k).need(w, "w", n * k).maybe(bias, "bias", n);
    contract.maybe(residual, "residual", m * n);
  }
};

// The linear layer's input gradient, dx (M x K) = (dy (M x N) @ w (N x K)) * gate (M x K),
// gate optional: the derivative of an elementwise op in front of the layer (GELU's), applied
// in the product's epilogue instead of a separate pass.
struct LinearBackwardInput {
  static constexpr const char* kName = "linear_backward_input";
  Tensor& dx;
  const Tensor& dy;
  const Tensor& w;
  const Tensor& gate;
  int64_t m;
  int64_t k;
  int64_t n;
  Precision operands = Precision::fp32;

  void check(const Contract& contract) const {
    contract.need(dx, "dx", m * k).need(dy, "dy", m * n).need(w, "w", n * k).maybe(gate, "gate", m * k);
  }
};

// dbias (N) = sum over the M rows of dy (M x N).
struct SumRows {
  static constexpr const char* kName = "sum_rows";
  Tensor& out;
  const Tensor& x;
  int64_t rows;
  int64_t cols;

  void check(const Contract& contract) const {
    contract.need(out, "out", cols).need(x, "x", rows * cols);
  }
};

}  // namespace normlab
