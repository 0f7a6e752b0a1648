// The cpu backend's native bf16 products (a bf16 run's matrix products as oneDNN bf16 matmuls,
// float32 accumulation) against the float32 products they replace. Each product of two bf16
// values is exact in float32, so on values far from float32's subnormals (the hardware's bf16 dot
// products flush those) the two differ only in the order of their float32 sums: every output
// stays within the float32 summation bound of the exact (float64) result,
// |c - exact| <= gamma_k * sum_p |a_ip b_pj| with gamma_k = k u / (1 - k u), u = 2^-24 (Higham,
// Accuracy and Stability of Numerical Algorithms, eq. 3.5), here doubled for the bias and the
// epilogue's rounding. Skipped, naming the missing instructions, on a CPU without bf16 dot products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/cpu_backend.h"
#include "normlab/kernel.h"
#include "normlab/matmul_kernels.h"
#include "normlab/ops.h"
#include "normlab/precision.h"
#include "normlab/rng.h"
#include "normlab/tensor.h"

namespace normlab {
namespace {

// n values ~ N(0, 1) rounded to bf16 (what a bf16 run's casts give a product), or left in float32.
Tensor values(int64_t n, uint64_t seed, bool on_bf16_grid) {
  Rng rng(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    const float f = static_cast<float>(rng.normal());
    x = on_bf16_grid ? round_to(Precision::bf16, f) : f;
  }
  return Tensor::from(v, {n}, DType::f32);
}

struct Product {
  int64_t m, k, n;
  bool trans_a, trans_b;
};

// A stored (M x K), or (K x M) when trans_a; B (K x N), or (N x K) when trans_b.
double element(const std::vector<double>& x, int64_t rows, int64_t cols, bool trans, int64_t i, int64_t j) {
  return trans ? x[static_cast<size_t>(j * rows + i)] : x[static_cast<size_t>(i * cols + j)];
}

// The float64 product and, per element, the float32 summation bound of an order of its sums.
struct Exact {
  std::vector<double> value, bound;
};

Exact exact_product(const Product& p, const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  const double u = std::ldexp(1.0, -24), gamma = 2.0 * p.k * u / (1.0 - p.k * u);
  Exact e;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t q = 0; q < p.k; ++q) {
        const double t = element(av, p.m, p.k, p.trans_a, i, q) * element(bv, p.k, p.n, p.trans_b, q, j);
        sum += t;
        magnitude += std::fabs(t);
      }
      e.value.push_back(sum);
      e.bound.push_back(gamma * magnitude);
    }
  return e;
}

// Checks c (the exact product plus `plus`, times `times`, each added or multiplied in float32) against
// its bound; returns the largest difference from the float32 primitive's c32 (0: bit for bit).
double check_within_bound(const Exact& e, const Tensor& c, const Tensor& c32, const std::vector<double>& plus = {},
                          const std::vector<double>& times = {}) {
  const std::vector<double> cv = c.to_vector(), c32v = c32.to_vector();
  const double u = std::ldexp(1.0, -24);
  double largest = 0.0;
  for (size_t i = 0; i < cv.size(); ++i) {
    const double add = plus.empty() ? 0.0 : plus[i], mul = times.empty() ? 1.0 : times[i];
    const double want = (e.value[i] + add) * mul;
    // The epilogue's own roundings: one per addition or multiplication, of at most |want| + bound.
    const double slack = (e.bound[i] + 4 * u * (std::fabs(e.value[i]) + std::fabs(add) + e.bound[i])) * std::fabs(mul);
    EXPECT_LE(std::fabs(cv[i] - want), slack) << "element " << i;
    largest = std::max(largest, std::fabs(cv[i] - c32v[i]));
  }
  return largest;
}

bool skip_without_native_bf16() { return !native_bf16_products(); }

std::string why_skipped() {
  return "oneDNN's ISA here is " + onednn_isa() + ": no bf16 dot products (avx512_core_bf16 or AMX)";
}

const std::vector<Product> kProducts = {{1, 1, 1, false, false},   {37, 67, 29, false, false}, {37, 67, 29, true, false},
                                        {37, 67, 29, false, true}, {64, 256, 96, false, true}, {5, 1000, 7, true, true}};

TEST(Bf16Products, AProductOfBf16ValuesIsWithinTheFloat32SummationBound) {
  if (skip_without_native_bf16()) GTEST_SKIP() << why_skipped();
  Backend& cpu = backend("cpu");
  uint64_t seed = 1;
  for (const Product& p : kProducts) {
    const Tensor a = values(p.m * p.k, seed++, true), b = values(p.k * p.n, seed++, true);
    MatmulSpec s = MatmulSpec::of(p.m, p.n, p.k);
    s.trans_a = p.trans_a;
    s.trans_b = p.trans_b;
    Tensor c = Tensor::empty({p.m * p.n}), c32 = Tensor::empty({p.m * p.n});
    const uint64_t before = cpu.primitives_created();
    run_kernel(cpu, Matmul{c32, a, b, s});
    run_kernel(cpu, Matmul{c, a, b, s, Precision::bf16});
    // Two primitives: the bf16 one is not the float32 one reused.
    EXPECT_EQ(cpu.primitives_created() - before, 2u) << "m=" << p.m << " k=" << p.k << " n=" << p.n;
    check_within_bound(exact_product(p, a, b), c, c32);
  }
}

TEST(Bf16Products, TheLinearLayersEpiloguesAreKept) {
  if (skip_without_native_bf16()) GTEST_SKIP() << why_skipped();
  Backend& cpu = backend("cpu");
  const int64_t m = 23, k = 129, n = 31;
  const Tensor x = values(m * k, 11, true), w = values(n * k, 12, true), bias = values(n, 13, false);
  const Tensor residual = values(m * n, 14, false);
  Tensor y = Tensor::empty({m * n}), y32 = Tensor::empty({m * n});
  run_kernel(cpu, LinearForward{y32, x, w, bias, residual, m, k, n});
  run_kernel(cpu, LinearForward{y, x, w, bias, residual, m, k, n, Precision::bf16});
  std::vector<double> plus = residual.to_vector();
  for (int64_t i = 0; i < m * n; ++i) plus[static_cast<size_t>(i)] += bias.to_vector()[static_cast<size_t>(i % n)];
  check_within_bound(exact_product({m, k, n, false, true}, x, w), y, y32, plus);

  // dx = (dy @ w) * gate
  const Tensor dy = values(m * n, 15, true), gate = values(m * k, 16, false);
  Tensor dx = Tensor::empty({m * k}), dx32 = Tensor::empty({m * k});
  run_kernel(cpu, LinearBackwardInput{dx32, dy, w, gate, m, k, n});
  run_kernel(cpu, LinearBackwardInput{dx, dy, w, gate, m, k, n, Precision::bf16});
  check_within_bound(exact_product({m, n, k, false, false}, dy, w), dx, dx32, {}, gate.to_vector());
}

TEST(Bf16Products, OperandsOffTheBf16GridAreMultipliedInFloat32) {
  if (skip_without_native_bf16()) GTEST_SKIP() << why_skipped();
  Backend& cpu = backend("cpu");
  const Product p{37, 67, 29, false, false};
  const Tensor a = values(p.m * p.k, 21, true), b = values(p.k * p.n, 22, false);
  const MatmulSpec s = MatmulSpec::of(p.m, p.n, p.k);
  Tensor c = Tensor::empty({p.m * p.n}), c32 = Tensor::empty({p.m * p.n});
  run_kernel(cpu, Matmul{c32, a, b, s});
  run_kernel(cpu, Matmul{c, a, b, s, Precision::bf16});
  EXPECT_EQ(check_within_bound(exact_product(p, a, b), c, c32), 0.0) << "a float32 operand was rounded to bf16";
}

// The switch turned off for a scope, back on at its end (an exception included).
struct NativeBf16Off {
  NativeBf16Off() { set_native_bf16_products(false); }
  ~NativeBf16Off() { set_native_bf16_products(true); }
};

TEST(Bf16Products, TurnedOffTheyAreTheFloat32Products) {
  if (skip_without_native_bf16()) GTEST_SKIP() << why_skipped();
  Backend& cpu = backend("cpu");
  const Product p{64, 256, 96, false, true};
  const Tensor a = values(p.m * p.k, 31, true), b = values(p.k * p.n, 32, true);
  MatmulSpec s = MatmulSpec::of(p.m, p.n, p.k).transposed_b();
  Tensor c = Tensor::empty({p.m * p.n}), c32 = Tensor::empty({p.m * p.n});
  run_kernel(cpu, Matmul{c32, a, b, s});
  {
    NativeBf16Off off;
    run_kernel(cpu, Matmul{c, a, b, s, Precision::bf16});
  }
  EXPECT_EQ(check_within_bound(exact_product(p, a, b), c, c32), 0.0);
}

// The linear op in a bf16 run hands its three products (y, dx, dW) to the kernels as bf16 operands:
// with the native products on, each is a bf16 primitive of its own beside the float32 ones the
// same op made with them off (shapes no other test uses, so that every primitive is new).
TEST(Bf16Products, ABf16RunsLinearLayerMultipliesNatively) {
  if (skip_without_native_bf16()) GTEST_SKIP() << why_skipped();
  BackendScope cpu_ops("cpu");
  Backend& cpu = backend("cpu");
  const auto forward_backward = [] {
    StoragePrecisionScope bf16(Precision::bf16);
    Tensor x = Tensor::from(values(41 * 53, 41, false).to_vector(), {41, 53}, DType::f32);
    Tensor w = Tensor::from(values(47 * 53, 42, false).to_vector(), {47, 53}, DType::f32);
    x.requires_grad_(true);
    w.requires_grad_(true);
    const Tensor y = linear(x, w, values(47, 43, false));
    y.backward(Tensor::full(y.shape(), 1.0, DType::f32));
  };
  const uint64_t before = cpu.primitives_created();
  {
    NativeBf16Off off;
    forward_backward();
  }
  const uint64_t emulated = cpu.primitives_created() - before;
  forward_backward();
  EXPECT_EQ(cpu.primitives_created() - before - emulated, 3u) << "the forward, dx and dW products in bf16";
}

}  // namespace
}  // namespace normlab
