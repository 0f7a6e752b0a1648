// Tests of the reference backend (the oracle) against checks that do not share its code:
// hand-computed values, central finite differences in float64, naive loops written another
// way, causality, the Adam formula by hand, and float32 against float64.
// Run: ctest -R Reference   (or: normlab_tests --gtest_filter='Reference*')
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "normlab/layernorm_kernels.h"
#include "normlab/adam_kernels.h"
#include "normlab/attention_kernels.h"
#include "normlab/cross_entropy_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/embedding_kernels.h"
#include "normlab/layout_kernels.h"
#include "normlab/matmul_kernels.h"
#include "normlab/prefix_mean_kernels.h"
#include "normlab/reference_kernels.h"
#include "normlab/backend.h"
#include "normlab/rmsnorm_kernels.h"
#include "normlab/rng.h"
#include "normlab/softmax_kernels.h"
#include "normlab/tensor.h"
#include "test_util.h"

namespace normlab {
namespace {

using Vec = std::vector<double>;
using test::expect_close;
using test::numeric_grad;

Backend& ref() {
  return backend("reference");
}

Vec randn(Rng& rng, int64_t n, double scale = 1.0) {
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = scale * rng.normal();
  return v;
}

Tensor f64(const Vec& v, const Shape& shape) {
  return Tensor::from(v, shape, DType::f64);
}

// The finite-difference loss sum(y * R). Summed in long double: outputs the perturbation does
// not reach round identically in L(x+h) and L(x-h) and cancel, but the rounding of a double sum
// depends on every term, and divided by 2h it would dominate the difference error.
double dot(const Tensor& y, const Vec& r) {
  Vec v = y.to_vector();
  long double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<long double>(v[i]) * r[i];
  return static_cast<double>(s);
}

// Finite differences against analytic gradients. With h = 1e-6 in float64 the truncation
// error is h^2 |f'''| / 6 ~ 1e-12 for these smooth O(1) functions; what remains is rounding in
// the forward of the perturbed rows, ~ 1e-16 * (a row's O(10..100) terms) / (2h) ~ 1e-9
// (measured: at most 4e-9 over all cases below). atol 1e-7 leaves a ~25x margin, while a wrong
// term in a backward (errors of 1e-2 and up) cannot hide. rtol 1e-6 covers large gradients
// (~100 and up, e.g. with rstd = 1/sqrt(eps)), whose rounding error grows with their size.
constexpr double kFdAtol = 1e-7;
constexpr double kFdRtol = 1e-6;

void expect_grad(const Tensor& analytic, const Vec& numeric, const std::string& what) {
  expect_close(analytic.to_vector(), numeric, kFdAtol, kFdRtol, what);
}

// ============================================================================
// hand-computed values
// ============================================================================

// The worksheet: x = [2, -1, 0, 3]: mean 1, centred [1, -2, -1, 2], var 10/4 = 2.5,
// rstd = 1/sqrt(2.50001) = 0.632454, y = centred * rstd. Given to 4 decimals: atol 1e-4.
TEST(ReferenceHand, LayerNormWorksheet) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = Tensor::from({2, -1, 0, 3}, {1, 4}, dt);
    Tensor gamma = Tensor::from({1, 1, 1, 1}, {4}, dt), beta = Tensor::from({0, 0, 0, 0}, {4}, dt);
    Tensor y = Tensor::empty({1, 4}, dt), mean = Tensor::empty({1}, dt),
           rstd = Tensor::empty({1}, dt);
    run_kernel(ref(), LayerNormForward{y, mean, rstd, x, gamma, beta, 1, 4, 1e-5});
    expect_close(y.to_vector(), {0.6325, -1.2649, -0.6325, 1.2649}, 1e-4, 0, "layernorm y");
    expect_close(mean.to_vector(), {1.0}, 1e-7, 0, "layernorm mean");
    expect_close(rstd.to_vector(), {1.0 / std::sqrt(2.50001)}, 1e-7, 0, "layernorm rstd");
  }
}

// With parameters: y = gamma * xhat + beta, xhat = [1, -2, -1, 2] * 0.632454.
TEST(ReferenceHand, LayerNormAffine) {
  Tensor x = f64({2, -1, 0, 3}, {1, 4});
  Tensor gamma = f64({1, 2, 0.5, -1}, {4}), beta = f64({0, 1, 0, 0.5}, {4});
  Tensor y = Tensor::empty({1, 4}, DType::f64), mean = Tensor::empty({1}, DType::f64),
         rstd = Tensor::empty({1}, DType::f64);
  run_kernel(ref(), LayerNormForward{y, mean, rstd, x, gamma, beta, 1, 4, 1e-5});
  expect_close(y.to_vector(), {0.6325, 2 * -1.2649 + 1, 0.5 * -0.6325, -1.2649 + 0.5}, 2e-4, 0,
               "layernorm affine y");
}

// RMSNorm: mean(x^2) = 14/4 = 3.5, r = sqrt(3.50001) = 1.870831, y = x / r (the math contract in backend.h: eps inside
// the square root). Given to 4 decimals: atol 1e-4.
TEST(ReferenceHand, RMSNormWorksheet) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = Tensor::from({2, -1, 0, 3}, {1, 4}, dt);
    Tensor gamma = Tensor::from({1, 1, 1, 1}, {4}, dt);
    Tensor y = Tensor::empty({1, 4}, dt), rstd = Tensor::empty({1}, dt);
    run_kernel(ref(), RmsNormForward{y, rstd, x, gamma, 1, 4, 1e-5});
    expect_close(y.to_vector(), {1.0690, -0.5345, 0.0, 1.6036}, 1e-4, 0, "rmsnorm y");
    expect_close(rstd.to_vector(), {1.0 / std::sqrt(3.50001)}, 1e-7, 0, "rmsnorm rstd");
  }
}

// Fused add + norm: s = alpha*a + b; with a = [1, -1, 0, 1], b = [0, 1, 0, 1], alpha = 2 the
// sum is the worksheet vector, so y is the worksheet answer.
TEST(ReferenceHand, FusedAddNormWorksheet) {
  Tensor a = f64({1, -1, 0, 1}, {1, 4}), b = f64({0, 1, 0, 1}, {1, 4});
  Tensor gamma = f64({1, 1, 1, 1}, {4}), beta = f64({0, 0, 0, 0}, {4});
  Tensor s = Tensor::empty({1, 4}, DType::f64), y = Tensor::empty({1, 4}, DType::f64);
  Tensor mean = Tensor::empty({1}, DType::f64), rstd = Tensor::empty({1}, DType::f64);
  run_kernel(ref(), AddLayerNormForward{s, y, mean, rstd, a, b, 2.0, gamma, beta, 1, 4, 1e-5});
  expect_close(s.to_vector(), {2, -1, 0, 3}, 0, 0, "add_layernorm s");
  expect_close(y.to_vector(), {0.6325, -1.2649, -0.6325, 1.2649}, 1e-4, 0, "add_layernorm y");
  run_kernel(ref(), AddRmsNormForward{s, y, rstd, a, b, 2.0, gamma, 1, 4, 1e-5});
  expect_close(s.to_vector(), {2, -1, 0, 3}, 0, 0, "add_rmsnorm s");
  expect_close(y.to_vector(), {1.0690, -0.5345, 0.0, 1.6036}, 1e-4, 0, "add_rmsnorm y");
}

// softmax([1,2,3]) = e^i / (e + e^2 + e^3); shifting the row by 1000 must give the same numbers
// (a kernel that does not subtract the row max overflows to inf/inf = NaN). Values computed in
// Python to 16 digits; atol 1e-12 for float64, 1e-7 for float32 (its rounding of ~0.67).
TEST(ReferenceHand, SoftmaxStable) {
  Vec want = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
  for (DType dt : {DType::f64, DType::f32}) {
    double atol = dt == DType::f64 ? 1e-12 : 1e-7;
    Tensor x = Tensor::from({1, 2, 3, 1001, 1002, 1003}, {2, 3}, dt);
    Tensor y = Tensor::empty({2, 3}, dt);
    run_kernel(ref(), SoftmaxForward{y, x, 2, 3});
    Vec got = y.to_vector();
    expect_close(Vec(got.begin(), got.begin() + 3), want, atol, 0, "softmax row 0");
    expect_close(Vec(got.begin() + 3, got.end()), want, atol, 0, "softmax row 1 (+1000)");
  }
}

// Row 0: logits [1,2,3], target 2: log(e+e^2+e^3) - 3 = 0.40760596444438013.
// Row 1: logits [1000]*3, target 0: log 3 (overflows without the max subtraction).
// Mean: 0.753109126556245. probs row 1 = 1/3 each.
TEST(ReferenceHand, CrossEntropyStable) {
  for (DType dt : {DType::f64, DType::f32}) {
    double atol = dt == DType::f64 ? 1e-12 : 1e-6;
    Tensor logits = Tensor::from({1, 2, 3, 1000, 1000, 1000}, {2, 3}, dt);
    Tensor targets = Tensor::from_ids({2, 0}, {2});
    Tensor loss = Tensor::empty({1}, dt), probs = Tensor::empty({2, 3}, dt);
    run_kernel(ref(), CrossEntropyForward{loss, probs, logits, targets, 2, 3});
    expect_close(loss.to_vector(), {0.753109126556245}, atol, 0, "cross_entropy loss");
    expect_close(
        probs.to_vector(),
        {0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 1. / 3, 1. / 3, 1. / 3},
        atol, 0, "cross_entropy probs");
    // dlogits = dloss * (probs - onehot) / N with dloss = 2, N = 2.
    Tensor dloss = Tensor::from({2.0}, {1}, dt), dlogits = Tensor::empty({2, 3}, dt);
    run_kernel(ref(), CrossEntropyBackward{dlogits, dloss, probs, targets, 2, 3});
    expect_close(dlogits.to_vector(),
                 {0.09003057317038046, 0.24472847105479767, 0.6652409557748219 - 1, 1. / 3 - 1,
                  1. / 3, 1. / 3},
                 atol, 0, "cross_entropy dlogits");
  }
}

// GELU exact erf form, values from Python's math.erf; the tanh approximation differs from these
// by up to ~1e-3 (e.g. at x = -3), so atol 1e-12 tells the two apart.
TEST(ReferenceHand, GeluErf) {
  Tensor x = f64({-3, -1, 0, 0.5, 1, 2}, {6});
  Tensor y = Tensor::empty({6}, DType::f64);
  run_kernel(ref(), GeluForward{y, nullptr, x});
  expect_close(y.to_vector(),
               {-0.00404969409489031, -0.15865525393145707, 0.0, 0.34573123063700656,
                0.8413447460685429, 1.9544997361036416},
               1e-12, 0, "gelu");
  // GELU'(0) = Phi(0) + 0 = 0.5; GELU'(1) = Phi(1) + phi(1) = 0.8413447460685429 +
  // 0.24197072451914337.
  Tensor x2 = f64({0, 1}, {2}), y2 = Tensor::empty({2}, DType::f64), dydx = Tensor::empty({2}, DType::f64);
  run_kernel(ref(), GeluForward{y2, &dydx, x2});
  expect_close(dydx.to_vector(), {0.5, 0.8413447460685429 + 0.24197072451914337}, 1e-12, 0, "gelu'");
  expect_close(y2.to_vector(), {0.0, 0.8413447460685429}, 1e-12, 0, "gelu with its derivative");
}

// Small integer cases: exact in binary floating point, so compared exactly.
TEST(ReferenceHand, ElementwiseAndReductions) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64({6, 5, 4, 3, 2, 1}, {2, 3});
  Tensor out = Tensor::empty({2, 3}, DType::f64);
  run_kernel(ref(), Add{out, a, b, 2.0, -1.0});
  expect_close(out.to_vector(), {-4, -1, 2, 5, 8, 11}, 0, 0, "add");
  run_kernel(ref(), Mul{out, a, b});
  expect_close(out.to_vector(), {6, 10, 12, 12, 10, 6}, 0, 0, "mul");
  run_kernel(ref(), Scale{out, a, -0.5});
  expect_close(out.to_vector(), {-0.5, -1, -1.5, -2, -2.5, -3}, 0, 0, "scale");
  run_kernel(ref(), Copy{out, a});
  run_kernel(ref(), Accumulate{out, b});
  expect_close(out.to_vector(), {7, 7, 7, 7, 7, 7}, 0, 0, "copy + accumulate");
  run_kernel(ref(), Fill{out, 0.25});
  expect_close(out.to_vector(), Vec(6, 0.25), 0, 0, "fill");
  EXPECT_EQ(sum_squares(ref(), a), 91.0);
  Tensor cols = Tensor::empty({3}, DType::f64);
  run_kernel(ref(), SumRows{cols, a, 2, 3});
  expect_close(cols.to_vector(), {5, 7, 9}, 0, 0, "sum_rows");
  Tensor a32 = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f32);
  EXPECT_EQ(sum_squares(ref(), a32), 91.0);
}

// y[t] = mean of x[0..t]: [1, 2, 3, 4] -> [1, 1.5, 2, 2.5]; dx[s] = sum_{t>=s} dy[t]/(t+1):
// dy = 1 -> [1 + 1/2 + 1/3 + 1/4, 1/2 + 1/3 + 1/4, 1/3 + 1/4, 1/4].
TEST(ReferenceHand, PrefixMean) {
  Tensor x = f64({1, 2, 3, 4}, {1, 4, 1}), y = Tensor::empty({1, 4, 1}, DType::f64);
  run_kernel(ref(), PrefixMeanForward{y, x, 1, 4, 1});
  expect_close(y.to_vector(), {1, 1.5, 2, 2.5}, 1e-15, 0, "prefix_mean");
  Tensor dy = f64({1, 1, 1, 1}, {1, 4, 1}), dx = Tensor::empty({1, 4, 1}, DType::f64);
  run_kernel(ref(), PrefixMeanBackward{dx, dy, 1, 4, 1});
  expect_close(dx.to_vector(), {25. / 12, 13. / 12, 7. / 12, 3. / 12}, 1e-15, 0, "prefix_mean dx");
}

// ids [2, 0, 2]: rows 2, 0, 2 of the table; the backward sums both gradients of id 2, and row 1
// (never used) is written as zero even when the output held garbage.
TEST(ReferenceHand, Embedding) {
  Tensor table = f64({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor ids = Tensor::from_ids({2, 0, 2}, {3});
  Tensor y = Tensor::empty({3, 2}, DType::f64);
  run_kernel(ref(), EmbeddingForward{y, table, ids, 3, 3, 2});
  expect_close(y.to_vector(), {20, 21, 0, 1, 20, 21}, 0, 0, "embedding");
  Tensor dy = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor dtable = Tensor::full({3, 2}, std::nan(""), DType::f64);
  run_kernel(ref(), EmbeddingBackward{dtable, dy, ids, 3, 3, 2});
  expect_close(dtable.to_vector(), {3, 4, 0, 0, 6, 8}, 0, 0, "embedding dtable");
}

// transpose of (1, A, 1, B, 1) is a matrix transpose; of any view, applying it again with a and
// bdim exchanged restores the input (its backward).
TEST(ReferenceHand, Transpose) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}), out = Tensor::empty({3, 2}, DType::f64);
  run_kernel(ref(), Transpose{out, x, 1, 2, 1, 3, 1});
  expect_close(out.to_vector(), {1, 4, 2, 5, 3, 6}, 0, 0, "matrix transpose");

  Rng rng(11, stream::check);
  // (B, T, H, Dh) -> (B, H, T, Dh), the attention head split, with odd sizes.
  int64_t o = 2, a = 3, mid = 1, bd = 5, in = 3;
  Vec xv = randn(rng, o * a * mid * bd * in);
  Tensor x2 = f64(xv, {o, a, bd, in}), t1 = Tensor::empty({o, bd, a, in}, DType::f64),
         back = Tensor::empty({o, a, bd, in}, DType::f64);
  run_kernel(ref(), Transpose{t1, x2, o, a, mid, bd, in});
  // element [o=1, a=2, b=4, i=1] lands at [1, 4, 2, 1]
  EXPECT_EQ(t1.to_vector()[((1 * bd + 4) * a + 2) * in + 1], xv[((1 * a + 2) * bd + 4) * in + 1]);
  run_kernel(ref(), Transpose{back, t1, o, bd, mid, a, in});
  expect_close(back.to_vector(), xv, 0, 0, "transpose round trip");
  // With a middle axis: (2, 3, 4, 2, 1) -> (2, 2, 4, 3, 1) and back.
  Vec xv3 = randn(rng, 2 * 3 * 4 * 2);
  Tensor x3 = f64(xv3, {2, 3, 4, 2}), t3 = Tensor::empty({2, 2, 4, 3}, DType::f64),
         back3 = Tensor::empty({2, 3, 4, 2}, DType::f64);
  run_kernel(ref(), Transpose{t3, x3, 2, 3, 4, 2, 1});
  EXPECT_EQ(t3.to_vector()[((1 * 2 + 1) * 4 + 3) * 3 + 2], xv3[((1 * 3 + 2) * 4 + 3) * 2 + 1]);
  run_kernel(ref(), Transpose{back3, t3, 2, 2, 4, 3, 1});
  expect_close(back3.to_vector(), xv3, 0, 0, "transpose round trip with mid");
}

// ============================================================================
// matrix products against a naive triple loop over materialized op(A), op(B)
// ============================================================================

// The naive side first builds op(A_b) as an explicit M x K matrix (and op(B_b) as K x N), so a
// wrong stride in the kernel's transposed indexing cannot be mirrored here.
Vec naive_matmul(const Vec& a, const Vec& b, const Vec& c0, int64_t batch, int64_t m, int64_t n,
                 int64_t k, bool ta, bool tb, bool ab, bool bb, bool acc) {
  Vec c(static_cast<size_t>(batch * m * n));
  for (int64_t bi = 0; bi < batch; ++bi) {
    std::vector<std::vector<double>> A(m, Vec(k)), B(k, Vec(n));
    int64_t ao = ab ? bi * m * k : 0, bo = bb ? bi * k * n : 0;
    for (int64_t r = 0; r < (ta ? k : m); ++r)
      for (int64_t s = 0; s < (ta ? m : k); ++s) {
        double val = a[ao + r * (ta ? m : k) + s];
        if (ta)
          A[s][r] = val;
        else
          A[r][s] = val;
      }
    for (int64_t r = 0; r < (tb ? n : k); ++r)
      for (int64_t s = 0; s < (tb ? k : n); ++s) {
        double val = b[bo + r * (tb ? k : n) + s];
        if (tb)
          B[s][r] = val;
        else
          B[r][s] = val;
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += A[i][p] * B[p][j];
        size_t idx = static_cast<size_t>((bi * m + i) * n + j);
        c[idx] = (acc ? c0[idx] : 0.0) + sum;
      }
  }
  return c;
}

// Every transpose combination x {both batched, shared A, shared B} x {write, accumulate}, with
// odd sizes. Both sides sum K = 7 products in double in the same order up to reassociation:
// atol 1e-13 is ~100 ulps of the O(10) results.
TEST(ReferenceMatmul, AgainstNaiveAllCombos) {
  Rng rng(1, stream::check);
  const int64_t batch = 3, m = 3, n = 5, k = 7;
  struct Mode {
    bool ab, bb;
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Mode mode : {Mode{true, true}, Mode{false, true}, Mode{true, false}})
        for (bool acc : {false, true}) {
          Vec a = randn(rng, (mode.ab ? batch : 1) * m * k),
              b = randn(rng, (mode.bb ? batch : 1) * k * n);
          Vec c0 = randn(rng, batch * m * n);
          Tensor ta_ = f64(a, {int64_t(a.size())}), tb_ = f64(b, {int64_t(b.size())});
          Tensor c = f64(c0, {batch, m, n});
          run_kernel(ref(), Matmul{c, ta_, tb_, MatmulSpec{batch, m, n, k, ta, tb, mode.ab, mode.bb, acc}});
          std::string what =
              "matmul trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) +
              " a_batched=" + std::to_string(mode.ab) + " b_batched=" + std::to_string(mode.bb) +
              " accumulate=" + std::to_string(acc);
          expect_close(c.to_vector(),
                       naive_matmul(a, b, c0, batch, m, n, k, ta, tb, mode.ab, mode.bb, acc), 1e-13,
                       0, what);
        }
}

// Degenerate sizes: 1 x 1 x 1 and a single batch with K = 1 (an outer product).
TEST(ReferenceMatmul, TinyShapes) {
  Tensor a = f64({3}, {1}), b = f64({-2}, {1}), c = Tensor::empty({1}, DType::f64);
  run_kernel(ref(), Matmul{c, a, b, MatmulSpec{1, 1, 1, 1, false, false, true, true, false}});
  EXPECT_EQ(c.item(), -6.0);
  Tensor col = f64({1, 2}, {2, 1}), row = f64({3, 4, 5}, {1, 3}),
         outer = Tensor::empty({2, 3}, DType::f64);
  run_kernel(ref(), Matmul{outer, col, row, MatmulSpec{1, 2, 3, 1, false, false, true, true, false}});
  expect_close(outer.to_vector(), {3, 4, 5, 6, 8, 10}, 0, 0, "outer product");
}

// linear_forward = x @ w^T + bias, against the naive loop (via matmul with trans_b, which the
// test above checked independently).
TEST(ReferenceMatmul, LinearForward) {
  Rng rng(2, stream::check);
  const int64_t m = 7, k = 5, n = 3;
  Vec x = randn(rng, m * k), w = randn(rng, n * k), bias = randn(rng, n);
  Vec want = naive_matmul(x, w, {}, 1, m, n, k, false, true, true, true, false);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[i * n + j] += bias[j];
  Tensor y = Tensor::empty({m, n}, DType::f64);
  run_kernel(ref(), LinearForward{y, f64(x, {m, k}), f64(w, {n, k}), f64(bias, {n}), Tensor(), m, k, n});
  expect_close(y.to_vector(), want, 1e-13, 0, "linear with bias");
  run_kernel(ref(), LinearForward{y, f64(x, {m, k}), f64(w, {n, k}), Tensor(), Tensor(), m, k, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[i * n + j] -= bias[j];
  expect_close(y.to_vector(), want, 1e-13, 0, "linear without bias");
}

// ============================================================================
// finite differences (float64) against every backward
// ============================================================================

struct Rows {
  int64_t n, d;
};
const Rows kNormShapes[] = {{1, 1}, {7, 1}, {1, 3}, {7, 3}, {1, 65}, {7, 65}};

std::string shape_name(const char* op, Rows s) {
  return std::string(op) + " n=" + std::to_string(s.n) + " d=" + std::to_string(s.d);
}

TEST(ReferenceGradcheck, LayerNorm) {
  Rng rng(3, stream::check);
  for (Rows s : kNormShapes) {
    const int64_t n = s.n, d = s.d;
    // Offset inputs (mean 0.5) so the mean subtraction matters; gamma away from 1.
    Vec xv = randn(rng, n * d);
    for (double& v : xv) v += 0.5;
    Tensor x = f64(xv, {n, d}), gamma = f64(randn(rng, d), {d}), beta = f64(randn(rng, d), {d});
    Vec r = randn(rng, n * d);
    Tensor y = Tensor::empty({n, d}, DType::f64), mean = Tensor::empty({n}, DType::f64),
           rstd = Tensor::empty({n}, DType::f64);
    auto loss = [&] {
      run_kernel(ref(), LayerNormForward{y, mean, rstd, x, gamma, beta, n, d, 1e-5});
      return dot(y, r);
    };
    Vec ndx = numeric_grad(x, loss), ndg = numeric_grad(gamma, loss),
        ndb = numeric_grad(beta, loss);
    loss();  // saved statistics at the unperturbed point
    Tensor dy = f64(r, {n, d}), dx = Tensor::empty({n, d}, DType::f64),
           dg = Tensor::empty({d}, DType::f64), db = Tensor::empty({d}, DType::f64);
    run_kernel(ref(), LayerNormBackward{&dx, &dg, &db, dy, x, gamma, mean, rstd, n, d});
    expect_grad(dx, ndx, shape_name("layernorm dx", s));
    expect_grad(dg, ndg, shape_name("layernorm dgamma", s));
    expect_grad(db, ndb, shape_name("layernorm dbeta", s));
  }
}

TEST(ReferenceGradcheck, RMSNorm) {
  Rng rng(4, stream::check);
  for (Rows s : kNormShapes) {
    const int64_t n = s.n, d = s.d;
    Tensor x = f64(randn(rng, n * d), {n, d}), gamma = f64(randn(rng, d), {d});
    Vec r = randn(rng, n * d);
    Tensor y = Tensor::empty({n, d}, DType::f64), rstd = Tensor::empty({n}, DType::f64);
    auto loss = [&] {
      run_kernel(ref(), RmsNormForward{y, rstd, x, gamma, n, d, 1e-6});
      return dot(y, r);
    };
    Vec ndx = numeric_grad(x, loss), ndg = numeric_grad(gamma, loss);
    loss();
    Tensor dy = f64(r, {n, d}), dx = Tensor::empty({n, d}, DType::f64),
           dg = Tensor::empty({d}, DType::f64);
    run_kernel(ref(), RmsNormBackward{&dx, &dg, dy, x, gamma, rstd, n, d});
    expect_grad(dx, ndx, shape_name("rmsnorm dx", s));
    expect_grad(dg, ndg, shape_name("rmsnorm dgamma", s));
  }
}

// The fused kernels have no backward of their own: the op runs the norm's backward on the saved
// s, then da = alpha * ds, db = ds. Checked here against differences of the fused forward, so a
// fused kernel that normalized something other than the s it writes would show.
TEST(ReferenceGradcheck, FusedAddNorm) {
  Rng rng(5, stream::check);
  const double alpha = 0.7;
  for (Rows s : {Rows{1, 3}, Rows{7, 65}}) {
    const int64_t n = s.n, d = s.d;
    Tensor a = f64(randn(rng, n * d), {n, d}), b = f64(randn(rng, n * d), {n, d});
    Tensor gamma = f64(randn(rng, d), {d}), beta = f64(randn(rng, d), {d});
    Vec r = randn(rng, n * d);
    Tensor sum = Tensor::empty({n, d}, DType::f64), y = Tensor::empty({n, d}, DType::f64);
    Tensor mean = Tensor::empty({n}, DType::f64), rstd = Tensor::empty({n}, DType::f64);
    Tensor dy = f64(r, {n, d}), ds = Tensor::empty({n, d}, DType::f64),
           da = Tensor::empty({n, d}, DType::f64);
    for (bool layernorm : {true, false}) {
      auto loss = [&] {
        if (layernorm)
          run_kernel(ref(), AddLayerNormForward{sum, y, mean, rstd, a, b, alpha, gamma, beta, n, d, 1e-5});
        else
          run_kernel(ref(), AddRmsNormForward{sum, y, rstd, a, b, alpha, gamma, n, d, 1e-6});
        return dot(y, r);
      };
      Vec nda = numeric_grad(a, loss), ndb = numeric_grad(b, loss);
      loss();
      if (layernorm)
        run_kernel(ref(), LayerNormBackward{&ds, nullptr, nullptr, dy, sum, gamma, mean, rstd, n, d});
      else
        run_kernel(ref(), RmsNormBackward{&ds, nullptr, dy, sum, gamma, rstd, n, d});
      run_kernel(ref(), Scale{da, ds, alpha});
      const char* name = layernorm ? "add_layernorm" : "add_rmsnorm";
      expect_grad(da, nda, shape_name(name, s) + " da");
      expect_grad(ds, ndb, shape_name(name, s) + " db");
    }
  }
}

TEST(ReferenceGradcheck, Softmax) {
  Rng rng(6, stream::check);
  for (Rows s : kNormShapes) {
    const int64_t n = s.n, d = s.d;
    Tensor x = f64(randn(rng, n * d, 2.0), {n, d});
    Vec r = randn(rng, n * d);
    Tensor y = Tensor::empty({n, d}, DType::f64);
    auto loss = [&] {
      run_kernel(ref(), SoftmaxForward{y, x, n, d});
      return dot(y, r);
    };
    Vec ndx = numeric_grad(x, loss);
    loss();
    Tensor dx = Tensor::empty({n, d}, DType::f64);
    run_kernel(ref(), SoftmaxBackward{dx, f64(r, {n, d}), y, n, d});
    expect_grad(dx, ndx, shape_name("softmax dx", s));
  }
}

TEST(ReferenceGradcheck, Gelu) {
  Rng rng(7, stream::check);
  const int64_t n = 65;
  Vec xv = randn(rng, n, 2.0);
  xv[0] = 0.0;  // the kink of ReLU; GELU is smooth there
  Tensor x = f64(xv, {n});
  Vec r = randn(rng, n);
  Tensor y = Tensor::empty({n}, DType::f64);
  auto loss = [&] {
    run_kernel(ref(), GeluForward{y, nullptr, x});
    return dot(y, r);
  };
  Vec ndx = numeric_grad(x, loss);
  Tensor dydx = Tensor::empty({n}, DType::f64), dx = Tensor::empty({n}, DType::f64);
  run_kernel(ref(), GeluForward{y, &dydx, x});
  run_kernel(ref(), Mul{dx, f64(r, {n}), dydx});
  expect_grad(dx, ndx, "gelu dx");
}

// tk > 0: attention that sees all tk keys; 0: causal over T.
struct AttnShape {
  int64_t b, t, h, dh, tk = 0;
  AttentionKeys keys() const { return {tk, tk == 0}; }
  int64_t key_count() const { return tk ? tk : t; }
};

std::string attn_name(const char* what, AttnShape s) {
  return std::string(what) + " B=" + std::to_string(s.b) + " T=" + std::to_string(s.t) +
         (s.tk ? " Tk=" + std::to_string(s.tk) : std::string(" causal")) + " H=" + std::to_string(s.h) +
         " Dh=" + std::to_string(s.dh);
}

TEST(ReferenceGradcheck, Attention) {
  Rng rng(8, stream::check);
  for (AttnShape s : {AttnShape{1, 1, 1, 1}, AttnShape{2, 5, 2, 3}, AttnShape{1, 7, 3, 4}, AttnShape{2, 5, 2, 3, 5},
                      AttnShape{1, 4, 2, 3, 7}, AttnShape{2, 6, 1, 2, 1}}) {
    const int64_t c = s.h * s.dh;
    const Shape shp = {s.b, s.t, c}, kshp = {s.b, s.key_count(), c};
    const double scale = 1.0 / std::sqrt(double(s.dh));
    Tensor q = f64(randn(rng, s.b * s.t * c), shp), k = f64(randn(rng, s.b * s.key_count() * c), kshp),
           v = f64(randn(rng, s.b * s.key_count() * c), kshp);
    Vec r = randn(rng, s.b * s.t * c);
    Tensor out = Tensor::empty(shp, DType::f64), stats = Tensor::empty({s.b, s.h, s.t, 2}, DType::f64);
    auto loss = [&] {
      run_kernel(ref(), AttentionForward{out, stats, q, k, v, s.b, s.t, s.h, s.dh, scale, {}, s.keys()});
      return dot(out, r);
    };
    Vec ndq = numeric_grad(q, loss), ndk = numeric_grad(k, loss), ndv = numeric_grad(v, loss);
    loss();
    Tensor dq = Tensor::empty(shp, DType::f64), dk = Tensor::empty(kshp, DType::f64),
           dv = Tensor::empty(kshp, DType::f64);
    run_kernel(ref(), AttentionBackward{&dq, &dk, &dv, f64(r, shp), q, k, v, stats, s.b, s.t, s.h, s.dh, scale,
                                        Precision::fp32, {}, s.keys()});
    expect_grad(dq, ndq, attn_name("attention dq", s));
    expect_grad(dk, ndk, attn_name("attention dk", s));
    expect_grad(dv, ndv, attn_name("attention dv", s));
  }
}

TEST(ReferenceGradcheck, PrefixMean) {
  Rng rng(9, stream::check);
  const int64_t b = 2, t = 7, c = 3;
  Tensor x = f64(randn(rng, b * t * c), {b, t, c});
  Vec r = randn(rng, b * t * c);
  Tensor y = Tensor::empty({b, t, c}, DType::f64);
  auto loss = [&] {
    run_kernel(ref(), PrefixMeanForward{y, x, b, t, c});
    return dot(y, r);
  };
  Vec ndx = numeric_grad(x, loss);
  Tensor dx = Tensor::empty({b, t, c}, DType::f64);
  run_kernel(ref(), PrefixMeanBackward{dx, f64(r, {b, t, c}), b, t, c});
  expect_grad(dx, ndx, "prefix_mean dx");
}

TEST(ReferenceGradcheck, Embedding) {
  Rng rng(10, stream::check);
  const int64_t n = 7, v = 5, d = 3;
  Tensor table = f64(randn(rng, v * d), {v, d});
  Tensor ids = Tensor::from_ids({4, 0, 4, 2, 4, 0, 1}, {n});  // id 3 unused, id 4 three times
  Vec r = randn(rng, n * d);
  Tensor y = Tensor::empty({n, d}, DType::f64);
  auto loss = [&] {
    run_kernel(ref(), EmbeddingForward{y, table, ids, n, v, d});
    return dot(y, r);
  };
  Vec nd = numeric_grad(table, loss);
  Tensor dtable = Tensor::empty({v, d}, DType::f64);
  run_kernel(ref(), EmbeddingBackward{dtable, f64(r, {n, d}), ids, n, v, d});
  expect_grad(dtable, nd, "embedding dtable");
}

TEST(ReferenceGradcheck, CrossEntropy) {
  Rng rng(12, stream::check);
  for (Rows s : {Rows{1, 1}, Rows{1, 3}, Rows{7, 65}}) {
    const int64_t n = s.n, v = s.d;
    Tensor logits = f64(randn(rng, n * v, 3.0), {n, v});
    std::vector<int32_t> tv;
    for (int64_t i = 0; i < n; ++i) tv.push_back(static_cast<int32_t>(rng.below(uint32_t(v))));
    Tensor targets = Tensor::from_ids(tv, {n});
    const double dloss = 1.7;  // an upstream gradient other than 1 checks it is applied
    Tensor loss_t = Tensor::empty({1}, DType::f64), probs = Tensor::empty({n, v}, DType::f64);
    auto loss = [&] {
      run_kernel(ref(), CrossEntropyForward{loss_t, probs, logits, targets, n, v});
      return dloss * loss_t.item();
    };
    Vec nd = numeric_grad(logits, loss);
    loss();
    Tensor dlogits = Tensor::empty({n, v}, DType::f64);
    run_kernel(ref(), CrossEntropyBackward{dlogits, f64({dloss}, {1}), probs, targets, n, v});
    expect_grad(dlogits, nd, shape_name("cross_entropy dlogits", s));
  }
}

// Linear's backward is matmul + sum_rows: dx = dy @ w, dw = dy^T @ x, dbias = sum_rows(dy).
// Checking these against differences of linear_forward checks the transposed matmuls the op uses.
TEST(ReferenceGradcheck, LinearViaMatmul) {
  Rng rng(13, stream::check);
  const int64_t m = 7, k = 3, n = 5;
  Tensor x = f64(randn(rng, m * k), {m, k}), w = f64(randn(rng, n * k), {n, k}),
         bias = f64(randn(rng, n), {n});
  Vec r = randn(rng, m * n);
  Tensor y = Tensor::empty({m, n}, DType::f64);
  auto loss = [&] {
    run_kernel(ref(), LinearForward{y, x, w, bias, Tensor(), m, k, n});
    return dot(y, r);
  };
  Vec ndx = numeric_grad(x, loss), ndw = numeric_grad(w, loss), ndb = numeric_grad(bias, loss);
  Tensor dy = f64(r, {m, n});
  Tensor dx = Tensor::empty({m, k}, DType::f64), dw = Tensor::empty({n, k}, DType::f64),
         db = Tensor::empty({n}, DType::f64);
  run_kernel(ref(), Matmul{dx, dy, w, MatmulSpec{1, m, k, n, false, false, true, true, false}});  // (M x N) @ (N x K)
  run_kernel(ref(), Matmul{dw, dy, x, MatmulSpec{1, n, k, m, true, false, true, true, false}});   // (M x N)^T @ (M x K)
  run_kernel(ref(), SumRows{db, dy, m, n});
  expect_grad(dx, ndx, "linear dx");
  expect_grad(dw, ndw, "linear dw");
  expect_grad(db, ndb, "linear dbias");
}

// ============================================================================
// attention: a direct computation (its output and row statistics), causality
// ============================================================================

// Per (b, h): gather the head into T x Dh and Tk x Dh matrices, form the full T x Tk score
// matrix, mask the future with -inf when causal, softmax each row with std::exp, multiply by V.
// Same math, other loops; both in double: atol 1e-13.
TEST(ReferenceAttention, AgainstDirect) {
  Rng rng(14, stream::check);
  for (const AttnShape shape : {AttnShape{2, 6, 3, 4}, AttnShape{2, 6, 3, 4, 6}, AttnShape{2, 5, 3, 4, 8}}) {
    const int64_t B = shape.b, T = shape.t, Tk = shape.key_count(), H = shape.h, Dh = shape.dh, C = H * Dh;
    const bool causal = shape.tk == 0;
    const double scale = 1.0 / std::sqrt(double(Dh));
    Vec q = randn(rng, B * T * C), k = randn(rng, B * Tk * C), v = randn(rng, B * Tk * C);
    Tensor out = Tensor::empty({B, T, C}, DType::f64), stats = Tensor::full({B, H, T, 2}, 7.0, DType::f64);
    run_kernel(ref(), AttentionForward{out, stats, f64(q, {B, T, C}), f64(k, {B, Tk, C}), f64(v, {B, Tk, C}), B, T, H,
                                       Dh, scale, {}, shape.keys()});
    Vec want_out(B * T * C), want_stats(B * H * T * 2);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        auto head = [&](const Vec& x, int64_t n) {
          std::vector<Vec> m(n, Vec(Dh));
          for (int64_t t = 0; t < n; ++t)
            for (int64_t e = 0; e < Dh; ++e) m[t][e] = x[(b * n + t) * C + h * Dh + e];
          return m;
        };
        auto Q = head(q, T), K = head(k, Tk), V = head(v, Tk);
        for (int64_t t = 0; t < T; ++t) {
          Vec srow(Tk);
          for (int64_t s = 0; s < Tk; ++s) {
            double dotp = 0;
            for (int64_t e = 0; e < Dh; ++e) dotp += Q[t][e] * K[s][e];
            srow[s] = !causal || s <= t ? scale * dotp : -std::numeric_limits<double>::infinity();
          }
          double mx = *std::max_element(srow.begin(), srow.end()), z = 0;
          for (double& x : srow) z += (x = std::exp(x - mx));
          want_stats[((b * H + h) * T + t) * 2] = mx;
          want_stats[((b * H + h) * T + t) * 2 + 1] = z;
          for (int64_t e = 0; e < Dh; ++e) {
            double acc = 0;
            for (int64_t s = 0; s < Tk; ++s) acc += srow[s] / z * V[s][e];
            want_out[(b * T + t) * C + h * Dh + e] = acc;
          }
        }
      }
    expect_close(out.to_vector(), want_out, 1e-13, 0, attn_name("attention out", shape));
    expect_close(stats.to_vector(), want_stats, 1e-13, 0, attn_name("attention stats", shape));
  }
}

// Changing k and v at a position t0 must leave every output at t < t0 bit-identical (the kernel
// may not look at the future) and change the outputs at t >= t0.
TEST(ReferenceAttention, Causal) {
  Rng rng(15, stream::check);
  const int64_t B = 2, T = 7, H = 2, Dh = 3, C = H * Dh, t0 = 4;
  const double scale = 0.5;
  Vec q = randn(rng, B * T * C), k = randn(rng, B * T * C), v = randn(rng, B * T * C);
  auto run = [&](const Vec& kk, const Vec& vv) {
    Tensor out = Tensor::empty({B, T, C}, DType::f64), stats = Tensor::empty({B, H, T, 2}, DType::f64);
    run_kernel(ref(), AttentionForward{out, stats, f64(q, {B, T, C}), f64(kk, {B, T, C}), f64(vv, {B, T, C}), B, T, H,
                                       Dh, scale});
    return out.to_vector();
  };
  Vec base = run(k, v);
  Vec k2 = k, v2 = v;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < C; ++e) {
      k2[(b * T + t0) * C + e] += 3.0;
      v2[(b * T + t0) * C + e] -= 5.0;
    }
  Vec changed = run(k2, v2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < C; ++e) {
        size_t i = static_cast<size_t>((b * T + t) * C + e);
        if (t < t0)
          ASSERT_EQ(base[i], changed[i]) << "output at t=" << t << " saw position " << t0;
        else
          ASSERT_NE(base[i], changed[i]) << "output at t=" << t << " ignored position " << t0;
      }
}

// ============================================================================
// Adam / AdamW by hand
// ============================================================================

// Step 1 from m = v = 0: mhat = g, vhat = g^2, so the Adam step is lr * g / (|g| + eps)
// (= lr * sign(g) up to eps) plus the decay.
TEST(ReferenceAdam, FirstStep) {
  const double lr = 0.01, wd = 0.1, eps = 1e-8;
  Vec p0 = {1.0, -2.0, 0.5}, g = {0.5, 0.25, -4.0};
  for (bool decoupled : {true, false}) {
    Tensor p = f64(p0, {3}), m = f64({0, 0, 0}, {3}), v = f64({0, 0, 0}, {3});
    AdamParams hp;
    hp.lr = lr;
    hp.weight_decay = wd;
    hp.eps = eps;
    hp.decoupled = decoupled;
    hp.step = 1;
    run_kernel(ref(), AdamStep{p, f64(g, {3}), m, v, hp});
    Vec want(3);
    for (int i = 0; i < 3; ++i) {
      double ge = decoupled ? g[i] : g[i] + wd * p0[i];
      want[i] = p0[i] - lr * (ge / (std::fabs(ge) + eps) + (decoupled ? wd * p0[i] : 0.0));
    }
    expect_close(p.to_vector(), want, 1e-15, 0, decoupled ? "adamw step 1" : "adam step 1");
  }
}

// Step 3 with moments already present, numbers worked out by hand (and in Python):
// p = 1, g = 0.5, m = 0.1, v = 0.01, lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1.
// AdamW: m = 0.09 + 0.05 = 0.14; v = 0.00999 + 0.00025 = 0.01024; mhat = 0.14/(1-0.9^3);
//        vhat = 0.01024/(1-0.999^3); p = 1 - 0.01*(mhat/(sqrt(vhat)+eps) + 0.1*1) = 0.99620519...
// Adam (L2): g = 0.5 + 0.1*1 = 0.6; m = 0.15; v = 0.01035; p = 0.99702151...
// The values are O(1) and computed in double: atol 1e-14.
TEST(ReferenceAdam, BiasCorrectionByHand) {
  struct Case {
    bool decoupled;
    double p, m, v;
  };
  for (Case c : {Case{true, 0.9962051905177512, 0.14, 0.01024},
                 Case{false, 0.9970215162509856, 0.15, 0.01035}}) {
    for (DType dt : {DType::f64, DType::f32}) {
      double atol = dt == DType::f64 ? 1e-14 : 1e-7;  // f32: one rounding of an O(1) value
      Tensor p = Tensor::from({1.0}, {1}, dt), m = Tensor::from({0.1}, {1}, dt),
             v = Tensor::from({0.01}, {1}, dt), g = Tensor::from({0.5}, {1}, dt);
      AdamParams hp;
      hp.lr = 0.01;
      hp.weight_decay = 0.1;
      hp.decoupled = c.decoupled;
      hp.step = 3;
      run_kernel(ref(), AdamStep{p, g, m, v, hp});
      std::string what = std::string(c.decoupled ? "adamw" : "adam") + " " + to_string(dt);
      expect_close(p.to_vector(), {c.p}, atol, 0, what + " param");
      expect_close(m.to_vector(), {c.m}, atol, 0, what + " m");
      expect_close(v.to_vector(), {c.v}, atol, 0, what + " v");
    }
  }
}

// ============================================================================
// float32 against float64
// ============================================================================

// Runs `kernel` once with float64 tensors and once with float32 tensors built from the same
// values and compares every output. The kernels compute in double either way, so the float32
// results differ only by the rounding of inputs, saved statistics and outputs (~6e-8 relative)
// times the conditioning of the op (norms with rstd ~ 1..3, sums of up to 65 terms): atol/rtol
// 1e-5 leaves ~10x margin and still catches a float path that accumulates badly or reads the
// wrong buffer.
using Outputs = std::vector<Tensor>;
void expect_f32_matches_f64(const std::string& what, const std::function<Outputs(DType)>& kernel) {
  Outputs o64 = kernel(DType::f64), o32 = kernel(DType::f32);
  ASSERT_EQ(o64.size(), o32.size());
  for (size_t i = 0; i < o64.size(); ++i) {
    ASSERT_EQ(o32[i].dtype(), DType::f32) << what;
    expect_close(o32[i].to_vector(), o64[i].to_vector(), 1e-5, 1e-5,
                 what + " output " + std::to_string(i));
  }
}

TEST(ReferencePrecision, Float32MatchesFloat64) {
  Rng rng(16, stream::check);
  const int64_t n = 7, d = 65;
  Vec x = randn(rng, n * d), x2 = randn(rng, n * d), dyv = randn(rng, n * d);
  Vec gamma = randn(rng, d), beta = randn(rng, d);
  auto E = [](const Shape& s, DType dt) { return Tensor::empty(s, dt); };

  expect_f32_matches_f64("matmul", [&](DType dt) {
    // batch 7 of (13 x 5)^T @ shared (13 x 5), accumulated into existing values
    Tensor c = Tensor::from(Vec(dyv.begin(), dyv.begin() + n * 25), {n, 5, 5}, dt);
    run_kernel(ref(), Matmul{c, Tensor::from(x, {n, 13, 5}, dt), Tensor::from(gamma, {13, 5}, dt),
                             MatmulSpec{n, 5, 5, 13, true, false, true, false, true}});
    return Outputs{c};
  });
  expect_f32_matches_f64("linear", [&](DType dt) {
    Tensor y = E({n, 5}, dt);
    run_kernel(ref(), LinearForward{y, Tensor::from(x, {n, d}, dt),
                                    Tensor::from(Vec(x2.begin(), x2.begin() + 5 * d), {5, d}, dt),
                                    Tensor::from(Vec(beta.begin(), beta.begin() + 5), {5}, dt), Tensor(), n, d, 5});
    return Outputs{y};
  });
  expect_f32_matches_f64("layernorm", [&](DType dt) {
    Tensor xt = Tensor::from(x, {n, d}, dt), g = Tensor::from(gamma, {d}, dt),
           b = Tensor::from(beta, {d}, dt);
    Tensor y = E({n, d}, dt), mean = E({n}, dt), rstd = E({n}, dt), dx = E({n, d}, dt),
           dg = E({d}, dt), db = E({d}, dt);
    run_kernel(ref(), LayerNormForward{y, mean, rstd, xt, g, b, n, d, 1e-5});
    run_kernel(ref(), LayerNormBackward{&dx, &dg, &db, Tensor::from(dyv, {n, d}, dt), xt, g, mean, rstd, n, d});
    return Outputs{y, mean, rstd, dx, dg, db};
  });
  expect_f32_matches_f64("rmsnorm", [&](DType dt) {
    Tensor xt = Tensor::from(x, {n, d}, dt), g = Tensor::from(gamma, {d}, dt);
    Tensor y = E({n, d}, dt), rstd = E({n}, dt), dx = E({n, d}, dt), dg = E({d}, dt);
    run_kernel(ref(), RmsNormForward{y, rstd, xt, g, n, d, 1e-6});
    run_kernel(ref(), RmsNormBackward{&dx, &dg, Tensor::from(dyv, {n, d}, dt), xt, g, rstd, n, d});
    return Outputs{y, rstd, dx, dg};
  });
  expect_f32_matches_f64("add_layernorm / add_rmsnorm", [&](DType dt) {
    Tensor a = Tensor::from(x, {n, d}, dt), b = Tensor::from(x2, {n, d}, dt);
    Tensor g = Tensor::from(gamma, {d}, dt), bt = Tensor::from(beta, {d}, dt);
    Tensor s1 = E({n, d}, dt), y1 = E({n, d}, dt), mean = E({n}, dt), rstd1 = E({n}, dt);
    Tensor s2 = E({n, d}, dt), y2 = E({n, d}, dt), rstd2 = E({n}, dt);
    run_kernel(ref(), AddLayerNormForward{s1, y1, mean, rstd1, a, b, 0.7, g, bt, n, d, 1e-5});
    run_kernel(ref(), AddRmsNormForward{s2, y2, rstd2, a, b, 0.7, g, n, d, 1e-6});
    return Outputs{s1, y1, mean, rstd1, s2, y2, rstd2};
  });
  expect_f32_matches_f64("softmax", [&](DType dt) {
    Tensor y = E({n, d}, dt), dx = E({n, d}, dt);
    run_kernel(ref(), SoftmaxForward{y, Tensor::from(x, {n, d}, dt), n, d});
    run_kernel(ref(), SoftmaxBackward{dx, Tensor::from(dyv, {n, d}, dt), y, n, d});
    return Outputs{y, dx};
  });
  expect_f32_matches_f64("gelu", [&](DType dt) {
    Tensor xt = Tensor::from(x, {n * d}, dt), y = E({n * d}, dt), dydx = E({n * d}, dt);
    run_kernel(ref(), GeluForward{y, &dydx, xt});
    return Outputs{y, dydx};
  });
  expect_f32_matches_f64("attention", [&](DType dt) {
    // (B=1, T=7, H=5, Dh=13): C = 65.
    const int64_t B = 1, T = n, H = 5, Dh = 13;
    const Shape s = {B, T, H * Dh};
    Tensor q = Tensor::from(x, s, dt), k = Tensor::from(x2, s, dt), v = Tensor::from(dyv, s, dt);
    Tensor out = E(s, dt), stats = E({B, H, T, 2}, dt), dq = E(s, dt), dk = E(s, dt), dv = E(s, dt);
    run_kernel(ref(), AttentionForward{out, stats, q, k, v, B, T, H, Dh, 1.0 / std::sqrt(13.0)});
    run_kernel(ref(), AttentionBackward{&dq, &dk, &dv, Tensor::from(x, s, dt), q, k, v, stats, B, T, H, Dh,
                                        1.0 / std::sqrt(13.0)});
    return Outputs{out, stats, dq, dk, dv};
  });
  expect_f32_matches_f64("prefix_mean", [&](DType dt) {
    Tensor y = E({1, n, d}, dt), dx = E({1, n, d}, dt);
    run_kernel(ref(), PrefixMeanForward{y, Tensor::from(x, {1, n, d}, dt), 1, n, d});
    run_kernel(ref(), PrefixMeanBackward{dx, Tensor::from(dyv, {1, n, d}, dt), 1, n, d});
    return Outputs{y, dx};
  });
  expect_f32_matches_f64("embedding", [&](DType dt) {
    Tensor ids = Tensor::from_ids({3, 0, 3, 1, 4, 4, 3}, {n});
    Tensor y = E({n, 13}, dt), dtab = E({5, 13}, dt);
    run_kernel(ref(), EmbeddingForward{y, Tensor::from(Vec(x.begin(), x.begin() + 65), {5, 13}, dt), ids, n, 5, 13});
    run_kernel(ref(), EmbeddingBackward{dtab, Tensor::from(Vec(dyv.begin(), dyv.begin() + n * 13), {n, 13}, dt), ids, n,
                                        5, 13});
    return Outputs{y, dtab};
  });
  expect_f32_matches_f64("cross_entropy", [&](DType dt) {
    Tensor targets = Tensor::from_ids({0, 64, 3, 3, 17, 40, 1}, {n});
    Tensor loss = E({1}, dt), probs = E({n, d}, dt), dl = E({n, d}, dt);
    run_kernel(ref(), CrossEntropyForward{loss, probs, Tensor::from(x, {n, d}, dt), targets, n, d});
    run_kernel(ref(), CrossEntropyBackward{dl, Tensor::from({1.0}, {1}, dt), probs, targets, n, d});
    return Outputs{loss, probs, dl};
  });
  expect_f32_matches_f64("transpose", [&](DType dt) {
    Tensor out = E({n, d}, dt);
    run_kernel(ref(), Transpose{out, Tensor::from(x, {5, 7, 13}, dt), 1, 5, 1, 7, 13});
    return Outputs{out};
  });
  expect_f32_matches_f64("adam", [&](DType dt) {
    Tensor p = Tensor::from(x, {n * d}, dt), m = Tensor::from(x2, {n * d}, dt);
    Vec vv(n * d);
    for (size_t i = 0; i < vv.size(); ++i) vv[i] = dyv[i] * dyv[i];
    Tensor v = Tensor::from(vv, {n * d}, dt);
    AdamParams hp;
    hp.weight_decay = 0.1;
    hp.step = 5;
    run_kernel(ref(), AdamStep{p, Tensor::from(dyv, {n * d}, dt), m, v, hp});
    return Outputs{p, m, v};
  });
}

// The oracle sums in double even for float32. Column / row [1e8, 1, -1e8] (each exact in
// float32): summed in float, 1e8 + 1 rounds back to 1e8 (float spacing there is 8) and the
// result is 0; summed in double it is exactly 1, which float32 then holds exactly.
TEST(ReferencePrecision, Float32SumsInDouble) {
  const DType dt = DType::f32;
  Tensor col = Tensor::from({1e8, 1, -1e8}, {3, 1}, dt), out = Tensor::empty({1}, dt);
  run_kernel(ref(), SumRows{out, col, 3, 1});
  EXPECT_EQ(out.item(), 1.0) << "sum_rows";
  Tensor row = Tensor::from({1e8, 1, -1e8}, {1, 3}, dt), ones = Tensor::from({1, 1, 1}, {3, 1}, dt);
  run_kernel(ref(), Matmul{out, row, ones, MatmulSpec{1, 1, 1, 3, false, false, true, true, false}});
  EXPECT_EQ(out.item(), 1.0) << "matmul";
  run_kernel(ref(), LinearForward{out, row, Tensor::from({1, 1, 1}, {1, 3}, dt), Tensor(), Tensor(), 1, 3, 1});
  EXPECT_EQ(out.item(), 1.0) << "linear_forward";
  // LayerNorm's saved mean of [1e8, 1, -1e8, 0] is 1/4.
  Tensor x = Tensor::from({1e8, 1, -1e8, 0}, {1, 4}, dt), y = Tensor::empty({1, 4}, dt);
  Tensor g = Tensor::from({1, 1, 1, 1}, {4}, dt), b = Tensor::from({0, 0, 0, 0}, {4}, dt);
  Tensor mean = Tensor::empty({1}, dt), rstd = Tensor::empty({1}, dt);
  run_kernel(ref(), LayerNormForward{y, mean, rstd, x, g, b, 1, 4, 1e-5});
  EXPECT_EQ(mean.item(), 0.25) << "layernorm mean";
}

// ============================================================================
// the backend wrapper: identity, argument checks, gradient masks, written outputs
// ============================================================================

TEST(ReferenceBackend, Identity) {
  EXPECT_EQ(ref().name(), "reference");
  EXPECT_EQ(ref().device(), Device::cpu);
  EXPECT_TRUE(ref().supports(DType::f32));
  EXPECT_TRUE(ref().supports(DType::f64));
  EXPECT_FALSE(ref().supports(DType::i32));
}

TEST(ReferenceBackend, RejectsBadArguments) {
  Tensor x64 = Tensor::zeros({2, 3}, DType::f64), y32 = Tensor::empty({2, 3}, DType::f32);
  Tensor g64 = Tensor::zeros({3}, DType::f64), b64 = Tensor::zeros({3}, DType::f64);
  Tensor m = Tensor::empty({2}, DType::f64), r = Tensor::empty({2}, DType::f64);
  EXPECT_THROW(run_kernel(ref(), LayerNormForward{y32, m, r, x64, g64, b64, 2, 3, 1e-5}),
               Error);  // mixed dtypes
  Tensor y64 = Tensor::empty({2, 3}, DType::f64);
  EXPECT_THROW(run_kernel(ref(), LayerNormForward{y64, m, r, x64, g64, b64, 2, 4, 1e-5}),
               Error);  // sizes vs shape
  Tensor ids = Tensor::from_ids({0, 3}, {2}), table = Tensor::zeros({3, 3}, DType::f64);
  EXPECT_THROW(run_kernel(ref(), EmbeddingForward{y64, table, ids, 2, 3, 3}), Error);  // id 3 outside [0, 3)
  Tensor i32 = Tensor::from_ids({1, 2}, {2}), i32b = Tensor::from_ids({1, 2}, {2});
  EXPECT_THROW(run_kernel(ref(), Copy{i32b, i32}), Error);  // int32 is not a compute dtype
}

// nullptr gradient outputs are skipped and the others are unchanged by the mask; outputs are
// written even over NaN garbage (never accumulated).
TEST(ReferenceBackend, GradientMasksAndWrittenOutputs) {
  Rng rng(17, stream::check);
  const int64_t n = 3, d = 5;
  Tensor x = f64(randn(rng, n * d), {n, d}), gamma = f64(randn(rng, d), {d}),
         beta = f64(randn(rng, d), {d});
  Tensor dy = f64(randn(rng, n * d), {n, d});
  Tensor y = Tensor::empty({n, d}, DType::f64), mean = Tensor::empty({n}, DType::f64),
         rstd = Tensor::empty({n}, DType::f64);
  run_kernel(ref(), LayerNormForward{y, mean, rstd, x, gamma, beta, n, d, 1e-5});
  auto nans = [](const Shape& s) { return Tensor::full(s, std::nan(""), DType::f64); };
  Tensor dx = nans({n, d}), dg = nans({d}), db = nans({d});
  run_kernel(ref(), LayerNormBackward{&dx, &dg, &db, dy, x, gamma, mean, rstd, n, d});
  Tensor dg_only = nans({d}), db_only = nans({d}), dx_only = nans({n, d});
  run_kernel(ref(), LayerNormBackward{nullptr, &dg_only, nullptr, dy, x, gamma, mean, rstd, n, d});
  run_kernel(ref(), LayerNormBackward{nullptr, nullptr, &db_only, dy, x, gamma, mean, rstd, n, d});
  run_kernel(ref(), LayerNormBackward{&dx_only, nullptr, nullptr, dy, x, gamma, mean, rstd, n, d});
  expect_close(dg_only.to_vector(), dg.to_vector(), 0, 0, "layernorm dgamma alone");
  expect_close(db_only.to_vector(), db.to_vector(), 0, 0, "layernorm dbeta alone");
  expect_close(dx_only.to_vector(), dx.to_vector(), 0, 0, "layernorm dx alone");
  for (double v : dx.to_vector()) ASSERT_TRUE(std::isfinite(v));

  Tensor rdx = nans({n, d}), rdg = nans({d}), rdx_only = nans({n, d}), rdg_only = nans({d});
  run_kernel(ref(), RmsNormForward{y, rstd, x, gamma, n, d, 1e-6});
  run_kernel(ref(), RmsNormBackward{&rdx, &rdg, dy, x, gamma, rstd, n, d});
  run_kernel(ref(), RmsNormBackward{&rdx_only, nullptr, dy, x, gamma, rstd, n, d});
  run_kernel(ref(), RmsNormBackward{nullptr, &rdg_only, dy, x, gamma, rstd, n, d});
  expect_close(rdx_only.to_vector(), rdx.to_vector(), 0, 0, "rmsnorm dx alone");
  expect_close(rdg_only.to_vector(), rdg.to_vector(), 0, 0, "rmsnorm dgamma alone");

  const int64_t B = 1, T = 4, H = 1, Dh = d;
  Tensor q = f64(randn(rng, T * Dh), {B, T, Dh}), k = f64(randn(rng, T * Dh), {B, T, Dh}),
         v = f64(randn(rng, T * Dh), {B, T, Dh}), dout = f64(randn(rng, T * Dh), {B, T, Dh});
  Tensor out = Tensor::empty({B, T, Dh}, DType::f64), stats = Tensor::empty({B, H, T, 2}, DType::f64);
  run_kernel(ref(), AttentionForward{out, stats, q, k, v, B, T, H, Dh, 0.5});
  Tensor dq = nans({B, T, Dh}), dk = nans({B, T, Dh}), dv = nans({B, T, Dh});
  run_kernel(ref(), AttentionBackward{&dq, &dk, &dv, dout, q, k, v, stats, B, T, H, Dh, 0.5});
  for (int which = 0; which < 3; ++which) {
    Tensor only = nans({B, T, Dh});
    run_kernel(ref(), AttentionBackward{which == 0 ? &only : nullptr, which == 1 ? &only : nullptr,
                                        which == 2 ? &only : nullptr, dout, q, k, v, stats, B, T, H, Dh, 0.5});
    const Tensor& full = which == 0 ? dq : which == 1 ? dk : dv;
    expect_close(only.to_vector(), full.to_vector(), 0, 0,
                 "attention gradient " + std::to_string(which) + " alone");
  }
}

// The kernels are callable on raw arrays (tests and benches use them without tensors).
TEST(ReferenceKernels, RawArrays) {
  float x[4] = {2, -1, 0, 3}, gamma[4] = {1, 1, 1, 1}, beta[4] = {0, 0, 0, 0};
  float y[4], mean[1], rstd[1];
  layernorm_forward_ref(y, mean, rstd, x, gamma, beta, 1, 4, 1e-5);
  EXPECT_NEAR(y[0], 0.6325, 1e-4);
  EXPECT_NEAR(y[3], 1.2649, 1e-4);
}

}  // namespace
}  // namespace normlab
