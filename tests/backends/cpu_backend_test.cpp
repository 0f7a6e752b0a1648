// Tests of the "cpu" backend, and of every backend this build has ("cpu", and "cuda" when built:
// the Kernel* suites run once per backend, the cuda run through a host adapter, which poisons
// every output on the device before the kernel runs, and skip with a message when no GPU is
// present): every kernel against the reference backend on the same random
// inputs (the result in float32, the reference computed in float64 on the inputs converted
// with to(f64)), on odd shapes; each implementation of the norm kernels (multipass, fused,
// oneDNN) on raw arrays; the oneDNN primitive cache (a steady state creates nothing); NaN/Inf
// propagation; and results that do not depend on the thread count.
// Run: ctest -R 'Cpu|Kernel'   (or: test_backends --gtest_filter='*Kernel*:Cpu*')
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "normlab/cpu_kernel_lab.h"
#include "simd.h"
#include "normlab/backend.h"
#include "normlab/cuda.h"
#include "gpu_skip.h"
#include "normlab/cuda_backend.h"
#include "host_adapter.h"
#include "normlab/rng.h"
#include "normlab/tensor.h"

namespace normlab {
namespace {

Backend& cpu_backend() { return backend("cpu"); }
Backend& ref() { return backend("reference"); }

// ---- the backend under test of the Kernel* suites ------------------------------------------
// Parameter "cpu" or "cuda" (the backends this build has); a device backend runs behind a host
// adapter (host_adapter.h) that poisons every output with NaN on the device before each kernel,
// so that the same host-tensor test bodies check it.
Backend* g_under_test = nullptr;
Backend& under_test() { return g_under_test ? *g_under_test : cpu_backend(); }

std::vector<std::string> built_backends() {
  std::vector<std::string> names = {"cpu", "cuda-sim"};
  if (cuda_built()) names.push_back("cuda");
  return names;
}

class KernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cpu") {
      g_under_test = &cpu_backend();
      return;
    }
    // cuda-sim runs everywhere: a lookup that fails is a failure, never a skip.
    if (GetParam() == "cuda" && !test::gpu_available()) {
      GPU_SKIP() << "the cuda kernels are not tested on this machine";
    }
    adapter_ = make_host_adapter(backend(GetParam()), /*poison_outputs=*/true);
    g_under_test = adapter_.get();
  }
  void TearDown() override { g_under_test = nullptr; }
  std::unique_ptr<Backend> adapter_;
};
using KernelMatmul = KernelTest;
using KernelElementwise = KernelTest;
using KernelNorm = KernelTest;
using KernelSoftmax = KernelTest;
using KernelLoss = KernelTest;
using KernelAttention = KernelTest;
using KernelLayout = KernelTest;

// A float32 tensor of N(mean, scale^2) values from the check stream.
Tensor randn(Rng& rng, const Shape& shape, double scale = 1.0, double mean = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = mean + scale * rng.normal();
  return Tensor::from(v, shape, DType::f32);
}
Tensor f64(const Tensor& t) { return t.to(DType::f64); }
Tensor e32(const Shape& s) { return Tensor::empty(s, DType::f32); }
Tensor e64(const Shape& s) { return Tensor::empty(s, DType::f64); }

// atol + rtol*|ref|, per output. Every use names its reason.
struct Tol {
  double atol, rtol;
};

// Outputs of a few float32 operations on O(1) values: each rounding is ~6e-8 relative, and
// sums over up to 1000 terms in several accumulators add up to ~1e-6 (measured: norms, softmax,
// attention <= 1e-6); float32 GEMMs of K = 64 reach ~1e-5 absolute on O(8) sums (measured
// 1.2e-5, inside 1e-5 + 1e-5*|ref|). A wrong term in a kernel errs by 1e-2 and up.
constexpr Tol kForward{1e-5, 1e-5};
// Gradients: more operations in a chain and a cancellation (g - mean(g) - xhat*mean(g*xhat))
// whose terms are larger than the result, times rstd, which is 316 on a d = 1 row (variance 0):
// measured 1.7e-5 there, <= 7e-6 elsewhere.
constexpr Tol kGradient{5e-5, 5e-5};
// Sums over many rows or a long contraction (dgamma over 512 rows, K = 1000): float32 error
// grows like sqrt(count) * eps * sum|terms|; measured <= 3.2e-5 on O(10..30) results.
constexpr Tol kReduction{2e-4, 5e-5};

// A mismatch report: the first values side by side and the largest difference.
void expect_close(const Tensor& got32, const Tensor& want64, Tol tol, const std::string& what) {
  std::vector<double> got = got32.to_vector(), want = want64.to_vector();
  ASSERT_EQ(got.size(), want.size()) << what << ": sizes differ";
  int bad = 0;
  double max_diff = 0.0;
  std::string report;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(got[i] - want[i]);
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const bool ok =
        both_nan || got[i] == want[i] || diff <= tol.atol + tol.rtol * std::fabs(want[i]);
    if (!both_nan && !(diff <= max_diff)) max_diff = diff;
    if (!ok && ++bad <= 5) {
      char line[160];
      std::snprintf(line, sizeof line, "\n  [%zu] got %.9g reference %.9g diff %.3g", i, got[i],
                    want[i], diff);
      report += line;
    }
  }
  if (bad)
    ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " values outside atol "
                  << tol.atol << " + rtol " << tol.rtol << "*|ref|; max diff " << max_diff
                  << report;
}

std::string fmt_case(const char* f, int64_t a, int64_t b, int64_t c = -1, int64_t d = -1) {
  char buf[200];
  std::snprintf(buf, sizeof buf, f, static_cast<long long>(a), static_cast<long long>(b),
                static_cast<long long>(c), static_cast<long long>(d));
  return buf;
}

// ============================================================================
// matrix products
// ============================================================================

struct MatmulCase {
  int64_t batch, m, n, k;
  bool ta, tb, ab, bb, acc;
  std::string str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "matmul batch=%lld m=%lld n=%lld k=%lld ta=%d tb=%d ab=%d bb=%d acc=%d",
                  static_cast<long long>(batch), static_cast<long long>(m),
                  static_cast<long long>(n), static_cast<long long>(k), ta, tb, ab, bb, acc);
    return buf;
  }
};

void check_matmul(const MatmulCase& c, uint64_t seed) {
  Rng rng(seed, stream::check);
  const int64_t na = (c.ab ? c.batch : 1), nb = (c.bb ? c.batch : 1);
  Tensor a = randn(rng, {na * c.m * c.k}), b = randn(rng, {nb * c.k * c.n});
  Tensor c32 = randn(rng, {c.batch * c.m * c.n});  // the initial C, used when accumulating
  Tensor c64 = f64(c32);
  under_test().matmul(c32, a, b, MatmulSpec{c.batch, c.m, c.n, c.k, c.ta, c.tb, c.ab, c.bb, c.acc});
  ref().matmul(c64, f64(a), f64(b), MatmulSpec{c.batch, c.m, c.n, c.k, c.ta, c.tb, c.ab, c.bb, c.acc});
  // Dot products of K float32 terms ~N(0,1): kForward up to K = 65 (see there); the K = 1000
  // cases get the reduction tolerance (measured 2.4e-5).
  expect_close(c32, c64, c.k > 100 ? kReduction : kForward, c.str());
}

TEST_P(KernelMatmul, AllTransposeBatchBroadcastAccumulateCombos) {
  const int64_t shapes[][4] = {{1, 1, 1, 1},  {1, 7, 5, 3},  {3, 7, 5, 3}, {2, 33, 17, 65},
                               {4, 1, 9, 16}, {2, 16, 1, 8}, {5, 8, 8, 1}};
  uint64_t seed = 1;
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int ab = 0; ab < 2; ++ab)
          for (int bb = 0; bb < 2; ++bb)
            for (int acc = 0; acc < 2; ++acc)
              check_matmul({s[0], s[1], s[2], s[3], ta != 0, tb != 0, ab != 0, bb != 0, acc != 0},
                           seed++);
}

TEST_P(KernelMatmul, LargerAndLongContraction) {
  check_matmul({1, 64, 512, 64, false, true, true, true, false}, 101);
  check_matmul({1, 64, 48, 1000, true, false, true, true, true}, 102);
  check_matmul({8, 31, 29, 37, false, false, true, false, false}, 103);  // folded into one GEMM
  check_matmul({8, 31, 29, 37, true, false, true, false, true}, 104);    // broadcast weights
  check_matmul({6, 31, 29, 37, false, true, false, true, false}, 105);   // broadcast A
}

TEST_P(KernelMatmul, EmptyContractionWritesZeroOrKeeps) {
  Tensor c = Tensor::full({6}, 3.0), a = e32({0}), b = e32({0});
  under_test().matmul(c, a, b, MatmulSpec{1, 2, 3, 0, false, false, true, true, true});
  for (double v : c.to_vector()) EXPECT_EQ(v, 3.0);
  under_test().matmul(c, a, b, MatmulSpec{1, 2, 3, 0, false, false, true, true, false});
  for (double v : c.to_vector()) EXPECT_EQ(v, 0.0);
}

TEST_P(KernelMatmul, LinearForwardWithAndWithoutBias) {
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 3, 5}, {64, 65, 1}, {33, 64, 128}, {512, 64, 64}};
  uint64_t seed = 200;
  for (const auto& s : shapes) {
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      const int64_t m = s[0], k = s[1], n = s[2];
      Rng rng(seed++, stream::check);
      Tensor x = randn(rng, {m, k}), w = randn(rng, {n, k}), bias = randn(rng, {n});
      Tensor y = e32({m, n}), y64 = e64({m, n});
      Tensor no_bias;
      under_test().linear_forward(y, x, w, with_bias ? bias : no_bias, m, k, n);
      ref().linear_forward(y64, f64(x), f64(w), with_bias ? f64(bias) : no_bias, m, k, n);
      expect_close(y, y64, kForward,
                   fmt_case("linear m=%lld k=%lld n=%lld bias=%lld", m, k, n, with_bias));
    }
  }
}

// The epilogues: a residual added to the product, a gate multiplying the input gradient.
TEST_P(KernelMatmul, LinearEpiloguesMatchTheReference) {
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 3, 5}, {64, 65, 1}, {33, 64, 128}, {512, 128, 64}};
  uint64_t seed = 250;
  for (const auto& s : shapes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {m, k}), w = randn(rng, {n, k}), bias = randn(rng, {n}), r = randn(rng, {m, n});
    Tensor dy = randn(rng, {m, n}), gate = randn(rng, {m, k});
    Tensor y = e32({m, n}), y64 = e64({m, n});
    under_test().linear_forward(y, x, w, bias, r, m, k, n);
    ref().linear_forward(y64, f64(x), f64(w), f64(bias), f64(r), m, k, n);
    expect_close(y, y64, kForward, fmt_case("linear + residual m=%lld k=%lld n=%lld", m, k, n));
    for (int gated = 0; gated < 2; ++gated) {
      Tensor dx = e32({m, k}), dx64 = e64({m, k});
      under_test().linear_backward_input(dx, dy, w, gated ? gate : Tensor(), m, k, n);
      ref().linear_backward_input(dx64, f64(dy), f64(w), gated ? f64(gate) : Tensor(), m, k, n);
      expect_close(dx, dx64, kForward,
                   fmt_case("linear dx m=%lld k=%lld n=%lld gated=%lld", m, k, n, gated));
    }
  }
}

TEST_P(KernelMatmul, SumRows) {
  const int64_t shapes[][2] = {{1, 1}, {7, 3}, {7, 65}, {1, 1000}, {512, 64}, {64, 513}};
  uint64_t seed = 300;
  for (const auto& s : shapes) {
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {s[0], s[1]});
    Tensor out = e32({s[1]}), out64 = e64({s[1]});
    under_test().sum_rows(out, x, s[0], s[1]);
    ref().sum_rows(out64, f64(x), s[0], s[1]);
    // Up to 512 rows summed in float32 per column: the reduction tolerance.
    expect_close(out, out64, kReduction, fmt_case("sum_rows %lldx%lld", s[0], s[1]));
  }
}

// ============================================================================
// elementwise
// ============================================================================

const int64_t kElementCounts[] = {1, 3, 17, 65, 1000, 100003};  // the last one is threaded

TEST_P(KernelElementwise, FillCopyAddAccumulateScaleMul) {
  uint64_t seed = 400;
  for (int64_t n : kElementCounts) {
    Rng rng(seed++, stream::check);
    Tensor a = randn(rng, {n}), b = randn(rng, {n});
    Tensor a64 = f64(a), b64 = f64(b);
    const std::string sz = " n=" + std::to_string(n);

    Tensor out = e32({n}), out64 = e64({n});
    under_test().fill(out, 0.3);
    ref().fill(out64, 0.3);
    expect_close(out, out64, {0, 1e-7}, "fill" + sz);  // one rounding of 0.3 to float

    under_test().copy(out, a);
    expect_close(out, a64, {0, 0}, "copy" + sz);  // exact

    under_test().add(out, a, b, 0.7, -1.3);
    ref().add(out64, a64, b64, 0.7, -1.3);
    expect_close(out, out64, kForward, "add" + sz);

    Tensor alias = a.clone();  // out aliasing an input: each element is read before written
    under_test().add(alias, alias, b, 2.0, 1.0);
    ref().add(out64, a64, b64, 2.0, 1.0);
    expect_close(alias, out64, kForward, "add in place" + sz);

    Tensor dst = a.clone(), dst64 = f64(a);
    under_test().accumulate(dst, b);
    ref().accumulate(dst64, b64);
    expect_close(dst, dst64, kForward, "accumulate" + sz);

    under_test().scale(out, a, -0.37);
    ref().scale(out64, a64, -0.37);
    expect_close(out, out64, kForward, "scale" + sz);

    under_test().mul(out, a, b);
    ref().mul(out64, a64, b64);
    expect_close(out, out64, kForward, "mul" + sz);
  }
}

TEST_P(KernelElementwise, GeluForwardBackward) {
  uint64_t seed = 500;
  for (int64_t n : kElementCounts) {
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {n}, 2.0);
    Tensor y = e32({n}), y64 = e64({n}), dydx = e32({n}), dydx64 = e64({n}), y_only = e32({n});
    under_test().gelu_forward(y, &dydx, x);
    ref().gelu_forward(y64, &dydx64, f64(x));
    // Phi comes from A&S 7.1.26 (|error in erf| <= 1.5e-7, so <= 7.5e-8 in Phi) plus float
    // rounding, times |x| up to ~8 here: ~1e-6 at worst; 3e-6 leaves a margin.
    expect_close(y, y64, {3e-6, 1e-5}, "gelu forward n=" + std::to_string(n));
    // The same error in Phi plus exp's 2 ulp in the density term.
    expect_close(dydx, dydx64, {3e-6, 1e-5}, "gelu derivative n=" + std::to_string(n));
    // Without the derivative: the same values, bit for bit (inference and training agree).
    under_test().gelu_forward(y_only, nullptr, x);
    EXPECT_EQ(y_only.to_vector(), y.to_vector()) << "gelu forward with and without dydx, n=" << n;
  }
}

TEST_P(KernelElementwise, SumSquaresInDouble) {
  uint64_t seed = 600;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{65}, int64_t{1000}, int64_t{300007}}) {
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {n});
    // Both sum exactly the same float values in double: only the order of the additions
    // differs, ~1e-16 relative per addition.
    EXPECT_NEAR(under_test().sum_squares(x), ref().sum_squares(f64(x)), 1e-12 * double(n) + 1e-12)
        << "sum_squares n=" << n;
  }
  // 1e8 would be lost in float: (1e4)^2 + 1 + ... must keep the small terms.
  Tensor big = Tensor::from({1e4, 1, 1, 1}, {4}, DType::f32);
  EXPECT_EQ(under_test().sum_squares(big), 1e8 + 3);
}

TEST_P(KernelElementwise, AdamStepBothDecays) {
  uint64_t seed = 700;
  for (int64_t n : {int64_t{1}, int64_t{65}, int64_t{100003}}) {
    for (int decoupled = 0; decoupled < 2; ++decoupled) {
      for (int64_t step : {int64_t{1}, int64_t{10}}) {
        Rng rng(seed++, stream::check);
        Tensor p = randn(rng, {n}), g = randn(rng, {n}), m = randn(rng, {n}, 0.1);
        Tensor v = randn(rng, {n}, 0.01);
        // v is a running mean of squares: non-negative.
        float* vp = v.data<float>();
        for (int64_t i = 0; i < n; ++i) vp[i] = std::fabs(vp[i]);
        Tensor p64 = f64(p), m64 = f64(m), v64 = f64(v);
        AdamParams hp;
        hp.lr = 1e-2;
        hp.weight_decay = 0.1;
        hp.decoupled = decoupled != 0;
        hp.step = step;
        under_test().adam_step(p, g, m, v, hp);
        ref().adam_step(p64, f64(g), m64, v64, hp);
        const std::string what =
            fmt_case("adam n=%lld decoupled=%lld step=%lld", n, decoupled, step);
        // m, v: two float roundings of O(1) values.
        expect_close(m, m64, kForward, what + " m");
        expect_close(v, v64, kForward, what + " v");
        // p moves by lr * O(1): float32 rounding of p itself (~6e-8) dominates.
        expect_close(p, p64, kForward, what + " param");
      }
    }
  }
}

// ============================================================================
// normalization
// ============================================================================

// The last two shapes are too long for the CUDA backward's one-read kernel (its column sums in
// shared memory: 2*d floats for LayerNorm, d for RMSNorm, at most 192 KiB) and for the forward's
// row cache (d floats, at most 96 KiB): the per-row dx kernel, the column reductions of dgamma
// and dbeta, and the uncached forward run only on these (scalar, then float4 units).
const int64_t kNormShapes[][2] = {{1, 1},    {1, 3},    {7, 1},     {7, 3},    {7, 65},   {1, 1000}, {7, 1000},
                                  {64, 512}, {512, 64}, {3, 4096},  {5, 4097}, {37, 256}, {2, 49153}, {3, 49156}};

struct NormInputs {
  Tensor x, gamma, beta, dy;
  NormInputs(int64_t n, int64_t d, uint64_t seed) {
    Rng rng(seed, stream::check);
    // A row mean of 3 against a spread of 2: the variance must be centred, not E[x^2]-mu^2.
    x = randn(rng, {n, d}, 2.0, 3.0);
    gamma = randn(rng, {d}, 0.2, 1.0);
    beta = randn(rng, {d}, 0.2);
    dy = randn(rng, {n, d});
  }
};

std::string norm_case(const char* what, int64_t n, int64_t d) {
  return std::string(what) + " " + std::to_string(n) + "x" + std::to_string(d);
}

TEST_P(KernelNorm, LayerNormForwardBackwardAgainstReference) {
  uint64_t seed = 800;
  for (const auto& s : kNormShapes) {
    const int64_t n = s[0], d = s[1];
    NormInputs in(n, d, seed++);
    Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
    Tensor y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
    under_test().layernorm_forward(y, mean, rstd, in.x, in.gamma, in.beta, n, d, 1e-5);
    ref().layernorm_forward(y64, mean64, rstd64, f64(in.x), f64(in.gamma), f64(in.beta), n, d,
                            1e-5);
    expect_close(y, y64, kForward, norm_case("layernorm y", n, d));
    expect_close(mean, mean64, kForward, norm_case("layernorm mean", n, d));
    // rstd = 1/sqrt(var+eps) of a float32 variance: relative error ~1e-6 at d = 4096.
    expect_close(rstd, rstd64, kForward, norm_case("layernorm rstd", n, d));

    // The backward from the same saved statistics (the reference's, converted), so that only
    // the backward is compared.
    Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d});
    Tensor dx64 = e64({n, d}), dg64 = e64({d}), db64 = e64({d});
    under_test().layernorm_backward(&dx, &dg, &db, in.dy, in.x, in.gamma, mean, rstd, n, d);
    ref().layernorm_backward(&dx64, &dg64, &db64, f64(in.dy), f64(in.x), f64(in.gamma), f64(mean),
                             f64(rstd), n, d);
    expect_close(dx, dx64, kGradient, norm_case("layernorm dx", n, d));
    expect_close(dg, dg64, kReduction, norm_case("layernorm dgamma", n, d));
    expect_close(db, db64, kReduction, norm_case("layernorm dbeta", n, d));

    // Gradient masks: each output alone gives the same values.
    Tensor dx_only = e32({n, d}), dg_only = e32({d}), db_only = e32({d});
    under_test().layernorm_backward(&dx_only, nullptr, nullptr, in.dy, in.x, in.gamma, mean, rstd,
                                     n, d);
    under_test().layernorm_backward(nullptr, &dg_only, nullptr, in.dy, in.x, in.gamma, mean, rstd,
                                     n, d);
    under_test().layernorm_backward(nullptr, nullptr, &db_only, in.dy, in.x, in.gamma, mean, rstd,
                                     n, d);
    expect_close(dx_only, f64(dx), {0, 0}, norm_case("layernorm dx alone", n, d));
    expect_close(dg_only, f64(dg), {0, 0}, norm_case("layernorm dgamma alone", n, d));
    expect_close(db_only, f64(db), {0, 0}, norm_case("layernorm dbeta alone", n, d));
  }
}

TEST_P(KernelNorm, RMSNormForwardBackwardAgainstReference) {
  uint64_t seed = 900;
  for (const auto& s : kNormShapes) {
    const int64_t n = s[0], d = s[1];
    NormInputs in(n, d, seed++);
    Tensor y = e32({n, d}), rstd = e32({n}), y64 = e64({n, d}), rstd64 = e64({n});
    under_test().rmsnorm_forward(y, rstd, in.x, in.gamma, n, d, 1e-6);
    ref().rmsnorm_forward(y64, rstd64, f64(in.x), f64(in.gamma), n, d, 1e-6);
    expect_close(y, y64, kForward, norm_case("rmsnorm y", n, d));
    expect_close(rstd, rstd64, kForward, norm_case("rmsnorm rstd", n, d));

    Tensor dx = e32({n, d}), dg = e32({d}), dx64 = e64({n, d}), dg64 = e64({d});
    under_test().rmsnorm_backward(&dx, &dg, in.dy, in.x, in.gamma, rstd, n, d);
    ref().rmsnorm_backward(&dx64, &dg64, f64(in.dy), f64(in.x), f64(in.gamma), f64(rstd), n, d);
    expect_close(dx, dx64, kGradient, norm_case("rmsnorm dx", n, d));
    expect_close(dg, dg64, kReduction, norm_case("rmsnorm dgamma", n, d));

    Tensor dx_only = e32({n, d}), dg_only = e32({d});
    under_test().rmsnorm_backward(&dx_only, nullptr, in.dy, in.x, in.gamma, rstd, n, d);
    under_test().rmsnorm_backward(nullptr, &dg_only, in.dy, in.x, in.gamma, rstd, n, d);
    expect_close(dx_only, f64(dx), {0, 0}, norm_case("rmsnorm dx alone", n, d));
    expect_close(dg_only, f64(dg), {0, 0}, norm_case("rmsnorm dgamma alone", n, d));
  }
}

TEST_P(KernelNorm, FusedAddNormAgainstReference) {
  uint64_t seed = 1000;
  for (const auto& s : kNormShapes) {
    const int64_t n = s[0], d = s[1];
    NormInputs in(n, d, seed++);
    Rng rng(seed * 7, stream::check);
    Tensor a = randn(rng, {n, d});
    const double alpha = 1.681792830507429;  // DeepNorm's (2L)^(1/4) at L = 4: not exact in float
    Tensor sum = e32({n, d}), y = e32({n, d}), mean = e32({n}), rstd = e32({n});
    Tensor sum64 = e64({n, d}), y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
    under_test().add_layernorm_forward(sum, y, mean, rstd, a, in.x, alpha, in.gamma, in.beta, n, d,
                                        1e-5);
    ref().add_layernorm_forward(sum64, y64, mean64, rstd64, f64(a), f64(in.x), alpha, f64(in.gamma),
                                f64(in.beta), n, d, 1e-5);
    expect_close(sum, sum64, kForward, norm_case("add_layernorm s", n, d));
    expect_close(y, y64, kForward, norm_case("add_layernorm y", n, d));
    expect_close(mean, mean64, kForward, norm_case("add_layernorm mean", n, d));
    expect_close(rstd, rstd64, kForward, norm_case("add_layernorm rstd", n, d));

    Tensor rsum = e32({n, d}), ry = e32({n, d}), rrstd = e32({n});
    Tensor rsum64 = e64({n, d}), ry64 = e64({n, d}), rrstd64 = e64({n});
    under_test().add_rmsnorm_forward(rsum, ry, rrstd, a, in.x, alpha, in.gamma, n, d, 1e-6);
    ref().add_rmsnorm_forward(rsum64, ry64, rrstd64, f64(a), f64(in.x), alpha, f64(in.gamma), n, d,
                              1e-6);
    expect_close(rsum, rsum64, kForward, norm_case("add_rmsnorm s", n, d));
    expect_close(ry, ry64, kForward, norm_case("add_rmsnorm y", n, d));
    expect_close(rrstd, rrstd64, kForward, norm_case("add_rmsnorm rstd", n, d));
  }
}

// Every implementation of the norm kernels, called on raw arrays as a benchmark calls them.
using LnFwd = void (*)(float*, float*, float*, const float*, const float*, const float*, int64_t,
                       int64_t, float);
using LnBwd = void (*)(float*, float*, float*, const float*, const float*, const float*,
                       const float*, const float*, int64_t, int64_t);
using RmsFwd = void (*)(float*, float*, const float*, const float*, int64_t, int64_t, float);
using RmsBwd = void (*)(float*, float*, const float*, const float*, const float*, const float*,
                        int64_t, int64_t);

float* fp(const Tensor& t) { return t.data<float>(); }

TEST(CpuNormKernels, EveryLayerNormImplementationAgainstReference) {
  struct Impl {
    const char* name;
    LnFwd fwd;
    LnBwd bwd;
  };
  const Impl impls[] = {
      {"multipass", cpu::layernorm_forward_multipass, cpu::layernorm_backward_multipass},
      {"fused", cpu::layernorm_forward_fused, cpu::layernorm_backward_fused},
      {"onednn", cpu::layernorm_forward_onednn, cpu::layernorm_backward_onednn}};
  uint64_t seed = 1100;
  for (const auto& s : kNormShapes) {
    const int64_t n = s[0], d = s[1];
    NormInputs in(n, d, seed++);
    Tensor y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
    ref().layernorm_forward(y64, mean64, rstd64, f64(in.x), f64(in.gamma), f64(in.beta), n, d,
                            1e-5);
    Tensor mean_ref = mean64.to(DType::f32), rstd_ref = rstd64.to(DType::f32);
    Tensor dx64 = e64({n, d}), dg64 = e64({d}), db64 = e64({d});
    ref().layernorm_backward(&dx64, &dg64, &db64, f64(in.dy), f64(in.x), f64(in.gamma), mean64,
                             rstd64, n, d);
    for (const Impl& impl : impls) {
      const std::string what = norm_case(impl.name, n, d);
      Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
      impl.fwd(fp(y), fp(mean), fp(rstd), fp(in.x), fp(in.gamma), fp(in.beta), n, d, 1e-5f);
      expect_close(y, y64, kForward, what + " layernorm y");
      expect_close(mean, mean64, kForward, what + " layernorm mean");
      expect_close(rstd, rstd64, kForward, what + " layernorm rstd");
      // The backward from the reference's statistics rounded to float (the reference used
      // them unrounded: a relative 6e-8 on rstd, inside the gradient tolerance).
      Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d});
      impl.bwd(fp(dx), fp(dg), fp(db), fp(in.dy), fp(in.x), fp(in.gamma), fp(mean_ref),
               fp(rstd_ref), n, d);
      expect_close(dx, dx64, kGradient, what + " layernorm dx");
      expect_close(dg, dg64, kReduction, what + " layernorm dgamma");
      expect_close(db, db64, kReduction, what + " layernorm dbeta");
      // Parameter gradients alone (oneDNN then runs with a scratch dx).
      Tensor dg2 = e32({d});
      impl.bwd(nullptr, fp(dg2), nullptr, fp(in.dy), fp(in.x), fp(in.gamma), fp(mean_ref),
               fp(rstd_ref), n, d);
      expect_close(dg2, dg64, kReduction, what + " layernorm dgamma alone");
      // dx alone (oneDNN then runs backward_data, without parameter gradients).
      Tensor dx2 = e32({n, d});
      impl.bwd(fp(dx2), nullptr, nullptr, fp(in.dy), fp(in.x), fp(in.gamma), fp(mean_ref),
               fp(rstd_ref), n, d);
      expect_close(dx2, dx64, kGradient, what + " layernorm dx alone");
    }
  }
}

TEST(CpuNormKernels, EveryRMSNormImplementationAgainstReference) {
  struct Impl {
    const char* name;
    RmsFwd fwd;
    RmsBwd bwd;
  };
  const Impl impls[] = {
      {"multipass", cpu::rmsnorm_forward_multipass, cpu::rmsnorm_backward_multipass},
      {"fused", cpu::rmsnorm_forward_fused, cpu::rmsnorm_backward_fused}};
  uint64_t seed = 1200;
  for (const auto& s : kNormShapes) {
    const int64_t n = s[0], d = s[1];
    NormInputs in(n, d, seed++);
    Tensor y64 = e64({n, d}), rstd64 = e64({n});
    ref().rmsnorm_forward(y64, rstd64, f64(in.x), f64(in.gamma), n, d, 1e-6);
    Tensor rstd_ref = rstd64.to(DType::f32);
    Tensor dx64 = e64({n, d}), dg64 = e64({d});
    ref().rmsnorm_backward(&dx64, &dg64, f64(in.dy), f64(in.x), f64(in.gamma), rstd64, n, d);
    for (const Impl& impl : impls) {
      const std::string what = norm_case(impl.name, n, d);
      Tensor y = e32({n, d}), rstd = e32({n});
      impl.fwd(fp(y), fp(rstd), fp(in.x), fp(in.gamma), n, d, 1e-6f);
      expect_close(y, y64, kForward, what + " rmsnorm y");
      expect_close(rstd, rstd64, kForward, what + " rmsnorm rstd");
      Tensor dx = e32({n, d}), dg = e32({d});
      impl.bwd(fp(dx), fp(dg), fp(in.dy), fp(in.x), fp(in.gamma), fp(rstd_ref), n, d);
      expect_close(dx, dx64, kGradient, what + " rmsnorm dx");
      expect_close(dg, dg64, kReduction, what + " rmsnorm dgamma");
    }
  }
}

// A constant row has variance 0: rstd = 1/sqrt(eps), xhat = 0, y = beta, and the oneDNN
// boundary (var' = 1/rstd^2 with eps 0) must give back the same gradients. Rows with a mean of
// 1000 and a spread of 1 test the mean: summed as is, d values near 1000 round at the scale of
// their sum (a float's step at 1e6 is 0.06).
TEST(CpuNormKernels, ConstantRowsAndLargeMean) {
  for (int64_t d : {int64_t{37}, int64_t{1000}}) {
    const int64_t n = 4;
    Rng rng(1300 + static_cast<uint64_t>(d), stream::check);
    std::vector<double> xv(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n * d; ++i)
      xv[static_cast<size_t>(i)] = i < d ? 2.5 : 1000.0 + rng.normal();
    Tensor x = Tensor::from(xv, {n, d}, DType::f32);
    Tensor gamma = randn(rng, {d}, 0.2, 1.0), beta = randn(rng, {d}, 0.2), dy = randn(rng, {n, d});
    Tensor y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
    ref().layernorm_forward(y64, mean64, rstd64, f64(x), f64(gamma), f64(beta), n, d, 1e-5);
    Tensor dx64 = e64({n, d}), dg64 = e64({d}), db64 = e64({d});
    ref().layernorm_backward(&dx64, &dg64, &db64, f64(dy), f64(x), f64(gamma), mean64, rstd64, n,
                             d);
    const std::string what = " constant and large-mean rows, d=" + std::to_string(d);
    struct Impl {
      const char* name;
      LnFwd fwd;
      Tol y;
    };
    // fused: y from x - c (c the row's shift, x - c exact near the mean), so no rounding of
    // the mean at 1000 reaches it: float rounding of O(1) values, as in MeanFarAboveStd.
    // oneDNN sums the raw values: its mean is off by ~1e-4 and y by up to 1.5e-4 (measured at
    // d = 37): 5e-4.
    const Impl impls[] = {{"fused", cpu::layernorm_forward_fused, {4e-6, 4e-6}},
                          {"onednn", cpu::layernorm_forward_onednn, {5e-4, 1e-5}}};
    for (const Impl& impl : impls) {
      Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
      impl.fwd(fp(y), fp(mean), fp(rstd), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
      expect_close(y, y64, impl.y, std::string(impl.name) + " layernorm y" + what);
      // A few float roundings at 1000 (6e-8 relative each).
      expect_close(mean, mean64, {0, 3e-7}, std::string(impl.name) + " layernorm mean" + what);
      // The variance is centred, so it does not cancel: rstd to a few float roundings.
      expect_close(rstd, rstd64, {0, 1e-4}, std::string(impl.name) + " layernorm rstd" + what);
    }
    Tensor mean_ref = mean64.to(DType::f32), rstd_ref = rstd64.to(DType::f32);
    for (LnBwd bwd : {cpu::layernorm_backward_fused, cpu::layernorm_backward_onednn}) {
      Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d});
      bwd(fp(dx), fp(dg), fp(db), fp(dy), fp(x), fp(gamma), fp(mean_ref), fp(rstd_ref), n, d);
      // From the reference's statistics: xhat = (x - mu)*rstd with mu rounded to float carries
      // ~3e-5 (as above); on the constant row rstd = 316 scales the gradient (rtol).
      expect_close(dx, dx64, {2e-4, 1e-4}, "layernorm dx" + what);
      expect_close(dg, dg64, kReduction, "layernorm dgamma" + what);
      expect_close(db, db64, kReduction, "layernorm dbeta" + what);
    }
  }
}

// Rows whose mean is 1e4 times their standard deviation, the case that breaks E[x^2] - E[x]^2
// in float32 (it would cancel all 24 bits), and rows built to defeat the fused kernels' shift
// (an outlier among the first values, a first vector 5 standard deviations off), where they fall
// back to the centred sum. The fused forwards (plain and add + norm) must stay at float32
// rounding of the float64 reference on the float32 input: no error proportional to the mean.
TEST(CpuNormKernels, MeanFarAboveStd) {
  const double eps = 1e-5;
  for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{65}, int64_t{1000}, int64_t{4097}}) {
    const int64_t n = 6;
    Rng rng(1350 + static_cast<uint64_t>(d), stream::check);
    std::vector<double> xv(static_cast<size_t>(n * d));
    for (int64_t j = 0; j < d; ++j) {
      const double z = rng.normal();
      auto at = [&](int64_t r) -> double& { return xv[static_cast<size_t>(r * d + j)]; };
      at(0) = 1e4 + z;                                  // mean / std = 1e4
      at(1) = -2.5e5 + 25.0 * rng.normal();             // mean / std = -1e4
      at(2) = j == 0 ? 1e4 : rng.normal();              // an outlier first: the shift is far off
      at(3) = 1e4 + (j < 16 ? 5.0 : 0.0) + rng.normal();  // the first vector 5 std above the rest
      at(4) = rng.normal();
      at(5) = 3e4;                                      // constant: variance 0
    }
    Tensor x = Tensor::from(xv, {n, d}, DType::f32);
    Tensor gamma = randn(rng, {d}, 0.2, 1.0), beta = randn(rng, {d}, 0.2);
    const std::string what = " rows with mean 1e4 x std, d=" + std::to_string(d);
    auto check = [&](const Tensor& in, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                     const std::string& name) {
      Tensor y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
      ref().layernorm_forward(y64, mean64, rstd64, f64(in), f64(gamma), f64(beta), n, d, eps);
      // y = ((x - c) - m)*rstd*gamma + beta: x - c exact near the mean, so only roundings at
      // the scale of y: measured <= 2.4e-6 absolute on |y| <= 5, 1.6e-5 on the outlier row's
      // |y| ~ 64 (2.5e-7 relative).
      expect_close(y, y64, {4e-6, 4e-6}, name + " y" + what);
      // The mean as a float: half a float step at its own scale (6e-8 relative) and roundings
      // of the shifted sum at the row's spread (1/rstd): measured <= 5e-8 of |mean| + 1/rstd,
      // 1.9e-7 on the outlier row (its mean corrected at the scale of its shift, 4 std away).
      const std::vector<double> mu = mean.to_vector(), mu64 = mean64.to_vector(), rs64 = rstd64.to_vector();
      for (int64_t r = 0; r < n; ++r) {
        const double scale = std::fabs(mu64[r]) + 1.0 / rs64[r];
        EXPECT_LE(std::fabs(mu[r] - mu64[r]), 4e-7 * scale) << name << " mean of row " << r << what;
      }
      // rstd from the one-sweep variance within ~1.6 bits of cancellation, or from the centred
      // sum: measured <= 2.3e-7 relative.
      expect_close(rstd, rstd64, {0, 1e-6}, name + " rstd" + what);
    };
    Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
    cpu::layernorm_forward_fused(fp(y), fp(mean), fp(rstd), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
    check(x, y, mean, rstd, "fused layernorm");
    // add + norm: s = 0.5*a + x, normalized as stored.
    Tensor a = randn(rng, {n, d}, 0.01), s = e32({n, d});
    cpu::add_layernorm_forward_fused(fp(s), fp(y), fp(mean), fp(rstd), fp(a), fp(x), 0.5f, fp(gamma), fp(beta), n,
                                     d, 1e-5f);
    check(s, y, mean, rstd, "fused add_layernorm");
  }
}

// Every variant of the fused kernels (tiles of any size, the pipeline with any prefetch distance,
// ordinary or streaming stores) writes the same bits: the variant a machine chooses changes the
// speed, never the numbers. On odd row lengths too (row tails, rows shorter than a vector), with
// and without dx in the backward.
TEST(CpuNormVariants, EveryVariantWritesTheSameBits) {
  using cpu::NormVariant;
  std::vector<NormVariant> variants;
  for (bool nt : {false, true}) {
    for (int t : {16, 1024, 2048, 4096}) {
      NormVariant v;
      v.tile_floats = t;
      v.stream = nt;
      variants.push_back(v);
    }
    for (int pf : {0, 1, 2, 4}) {
      NormVariant v;
      v.layout = NormVariant::Layout::pipelined;
      v.prefetch = pf;
      v.stream = nt;
      variants.push_back(v);
    }
  }
  for (int64_t d : {1, 7, 16, 33, 64, 100, 256, 1000, 1040, 4112}) {
    const int64_t n = 37;
    Rng rng(1360 + static_cast<uint64_t>(d), stream::check);
    Tensor x = randn(rng, {n, d}, 2.0, 0.5), a = randn(rng, {n, d}), dy = randn(rng, {n, d});
    Tensor gamma = randn(rng, {d}, 0.2, 1.0), beta = randn(rng, {d}, 0.2);
    // Every output of every fused kernel, written by variant v.
    auto run = [&](const NormVariant& v) {
      std::vector<Tensor> out;
      auto t = [&](const Shape& sh) { return out.emplace_back(e32(sh)); };
      Tensor y = t({n, d}), mean = t({n}), rstd = t({n});
      cpu::layernorm_forward_with(v, fp(y), fp(mean), fp(rstd), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
      Tensor dx = t({n, d}), dg = t({d}), db = t({d}), pg = t({d}), pb = t({d});
      cpu::layernorm_backward_with(v, fp(dx), fp(dg), fp(db), fp(dy), fp(x), fp(gamma), fp(mean), fp(rstd), n, d);
      cpu::layernorm_backward_with(v, nullptr, fp(pg), fp(pb), fp(dy), fp(x), fp(gamma), fp(mean), fp(rstd), n, d);
      Tensor ry = t({n, d}), rr = t({n}), rdx = t({n, d}), rdg = t({d}), rpg = t({d});
      cpu::rmsnorm_forward_with(v, fp(ry), fp(rr), fp(x), fp(gamma), n, d, 1e-5f);
      cpu::rmsnorm_backward_with(v, fp(rdx), fp(rdg), fp(dy), fp(x), fp(gamma), fp(rr), n, d);
      cpu::rmsnorm_backward_with(v, nullptr, fp(rpg), fp(dy), fp(x), fp(gamma), fp(rr), n, d);
      Tensor s = t({n, d}), ay = t({n, d}), am = t({n}), ar = t({n});
      cpu::add_layernorm_forward_with(v, fp(s), fp(ay), fp(am), fp(ar), fp(a), fp(x), 0.7f, fp(gamma), fp(beta), n, d,
                                      1e-5f);
      Tensor s2 = t({n, d}), ry2 = t({n, d}), rr2 = t({n});
      cpu::add_rmsnorm_forward_with(v, fp(s2), fp(ry2), fp(rr2), fp(a), fp(x), 0.7f, fp(gamma), n, d, 1e-5f);
      return out;
    };
    const std::vector<Tensor> first = run(variants[0]);
    // The variants agree with each other, and with the plain loops to float32's rounding (kForward).
    Tensor ry = e32({n, d}), rm = e32({n}), rr = e32({n});
    cpu::layernorm_forward_multipass(fp(ry), fp(rm), fp(rr), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
    const std::vector<double> got = first[0].to_vector(), want = ry.to_vector();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], kForward.atol + kForward.rtol * std::abs(want[i])) << "d=" << d << " i=" << i;
    for (size_t k = 1; k < variants.size(); ++k) {
      const std::vector<Tensor> other = run(variants[k]);
      ASSERT_EQ(first.size(), other.size());
      for (size_t o = 0; o < first.size(); ++o)
        EXPECT_TRUE(first[o].to_vector() == other[o].to_vector())
            << "output " << o << " of " << variants[k].name() << " differs from " << variants[0].name() << ", d=" << d;
    }
  }
}

// Streaming stores only where the output is aligned to the vector width and the rows are whole
// vectors; never for onednn, which stores as it likes.
TEST(CpuNormVariants, StreamsOnlyWhereAligned) {
  cpu::NormVariant v = cpu::parse_norm_variant("pipelined-pf2+nt");
  Tensor out = e32({1024 * 64 + 1});
  EXPECT_TRUE(cpu::variant_streams(v, fp(out), 64));
  EXPECT_FALSE(cpu::variant_streams(v, fp(out) + 1, 64));  // misaligned
  EXPECT_FALSE(cpu::variant_streams(v, fp(out), 65));      // rows not whole vectors
  EXPECT_FALSE(cpu::variant_streams(v, nullptr, 64));
  EXPECT_FALSE(cpu::variant_streams(cpu::parse_norm_variant("pipelined-pf2"), fp(out), 64));
  EXPECT_FALSE(cpu::variant_streams(cpu::parse_norm_variant("onednn"), fp(out), 64));
}

// ============================================================================
// softmax, loss
// ============================================================================

TEST_P(KernelSoftmax, ForwardBackwardAgainstReference) {
  const int64_t shapes[][2] = {{1, 1}, {1, 3}, {7, 1}, {7, 3}, {7, 65}, {7, 1000}, {64, 512}};
  uint64_t seed = 1400;
  for (const auto& s : shapes) {
    const int64_t n = s[0], d = s[1];
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {n, d}, 3.0, 50.0), dy = randn(rng, {n, d});  // large logits: stability
    Tensor y = e32({n, d}), y64 = e64({n, d});
    under_test().softmax_forward(y, x, n, d);
    ref().softmax_forward(y64, f64(x), n, d);
    // exp to 2 ulp of arguments up to |x - max| ~ 20: relative 1e-6 of each probability.
    expect_close(y, y64, kForward, norm_case("softmax y", n, d));
    Tensor dx = e32({n, d}), dx64 = e64({n, d});
    under_test().softmax_backward(dx, dy, y, n, d);
    ref().softmax_backward(dx64, f64(dy), f64(y), n, d);
    expect_close(dx, dx64, kGradient, norm_case("softmax dx", n, d));
  }
}

TEST_P(KernelLoss, CrossEntropyForwardBackward) {
  const int64_t shapes[][2] = {{1, 1}, {1, 3}, {7, 65}, {64, 512}, {512, 64}};
  uint64_t seed = 1500;
  for (const auto& s : shapes) {
    const int64_t n = s[0], v = s[1];
    Rng rng(seed++, stream::check);
    Tensor logits = randn(rng, {n, v}, 4.0, 30.0);
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (auto& t : tg) t = static_cast<int32_t>(rng.below(static_cast<uint32_t>(v)));
    Tensor targets = Tensor::from_ids(tg, {n});
    Tensor loss = e32({1}), probs = e32({n, v}), loss64 = e64({1}), probs64 = e64({n, v});
    under_test().cross_entropy_forward(loss, probs, logits, targets, n, v);
    ref().cross_entropy_forward(loss64, probs64, f64(logits), targets, n, v);
    // loss ~ log(V) + spread: float rounding of the logits' max (30 * 6e-8) dominates.
    expect_close(loss, loss64, {1e-5, 1e-5}, norm_case("cross_entropy loss", n, v));
    expect_close(probs, probs64, kForward, norm_case("cross_entropy probs", n, v));
    Tensor dloss = Tensor::from({0.75}, {1}, DType::f32);
    Tensor dl = e32({n, v}), dl64 = e64({n, v});
    under_test().cross_entropy_backward(dl, dloss, probs, targets, n, v);
    ref().cross_entropy_backward(dl64, f64(dloss), f64(probs), targets, n, v);
    expect_close(dl, dl64, kForward, norm_case("cross_entropy dlogits", n, v));
  }
}

TEST_P(KernelLoss, RejectsTargetsOutsideTheVocabulary) {
  Tensor logits = e32({2, 3}), probs = e32({2, 3}), loss = e32({1});
  Tensor targets = Tensor::from_ids({0, 3}, {2});
  EXPECT_THROW(under_test().cross_entropy_forward(loss, probs, logits, targets, 2, 3), Error);
}

// ============================================================================
// attention, prefix mean
// ============================================================================

TEST_P(KernelAttention, ForwardBackwardAgainstReference) {
  const int64_t cases[][4] = {{1, 1, 1, 1},  {1, 5, 3, 8},  {2, 16, 4, 16}, {2, 5, 1, 3},
                              {3, 1, 4, 16}, {1, 16, 2, 1}, {2, 64, 4, 16}};
  uint64_t seed = 1600;
  for (const auto& c : cases) {
    const int64_t b = c[0], t = c[1], h = c[2], dh = c[3], ch = h * dh;
    const double scale = 1.0 / std::sqrt(double(dh));
    Rng rng(seed++, stream::check);
    Tensor q = randn(rng, {b, t, ch}), k = randn(rng, {b, t, ch}), v = randn(rng, {b, t, ch});
    Tensor dout = randn(rng, {b, t, ch});
    const std::string what = fmt_case("attention B=%lld T=%lld H=%lld Dh=%lld", b, t, h, dh);
    Tensor out = e32({b, t, ch}), probs = e32({b, h, t, t});
    Tensor out64 = e64({b, t, ch}), probs64 = e64({b, h, t, t});
    under_test().attention_forward(out, probs, q, k, v, b, t, h, dh, scale);
    ref().attention_forward(out64, probs64, f64(q), f64(k), f64(v), b, t, h, dh, scale);
    expect_close(out, out64, kForward, what + " out");
    expect_close(probs, probs64, kForward, what + " probs");
    // Backward from the reference's probs, so that only the backward is compared.
    Tensor p_ref = probs64.to(DType::f32);
    Tensor dq = e32({b, t, ch}), dk = e32({b, t, ch}), dv = e32({b, t, ch});
    Tensor dq64 = e64({b, t, ch}), dk64 = e64({b, t, ch}), dv64 = e64({b, t, ch});
    under_test().attention_backward(&dq, &dk, &dv, dout, q, k, v, p_ref, b, t, h, dh, scale);
    ref().attention_backward(&dq64, &dk64, &dv64, f64(dout), f64(q), f64(k), f64(v), probs64, b, t,
                             h, dh, scale);
    expect_close(dq, dq64, kGradient, what + " dq");
    expect_close(dk, dk64, kGradient, what + " dk");
    expect_close(dv, dv64, kGradient, what + " dv");
    // Gradient masks.
    Tensor dq_only = e32({b, t, ch}), dv_only = e32({b, t, ch}), dk_only = e32({b, t, ch});
    under_test().attention_backward(&dq_only, nullptr, nullptr, dout, q, k, v, p_ref, b, t, h, dh,
                                     scale);
    under_test().attention_backward(nullptr, &dk_only, nullptr, dout, q, k, v, p_ref, b, t, h, dh,
                                     scale);
    under_test().attention_backward(nullptr, nullptr, &dv_only, dout, q, k, v, p_ref, b, t, h, dh,
                                     scale);
    expect_close(dq_only, f64(dq), {0, 0}, what + " dq alone");
    expect_close(dk_only, f64(dk), {0, 0}, what + " dk alone");
    expect_close(dv_only, f64(dv), {0, 0}, what + " dv alone");
  }
}

// The statistics of a log step, against the float64 reference: odd sizes, rows longer than a
// block, T = 1, large logits (the max must come out exactly, the entropy near 0), zero rows.
TEST_P(KernelAttention, LogitStatisticsAndRowNorms) {
  const int64_t cases[][4] = {{1, 1, 1, 1}, {1, 5, 3, 8}, {2, 33, 2, 7}, {1, 300, 1, 4}, {2, 16, 4, 16}};
  uint64_t seed = 1650;
  for (const auto& c : cases) {
    const int64_t b = c[0], t = c[1], h = c[2], dh = c[3], ch = h * dh;
    const double scale = 1.0 / std::sqrt(double(dh));
    Rng rng(seed++, stream::check);
    Tensor q = randn(rng, {b, t, ch}, 3.0), k = randn(rng, {b, t, ch}, 3.0);
    const std::string what = fmt_case("attention stats B=%lld T=%lld H=%lld Dh=%lld", b, t, h, dh);
    Tensor mx = e32({b, h, t}), ent = e32({b, h, t}), mx64 = e64({b, h, t}), ent64 = e64({b, h, t});
    under_test().attention_logit_stats(mx, ent, q, k, b, t, h, dh, scale);
    ref().attention_logit_stats(mx64, ent64, f64(q), f64(k), b, t, h, dh, scale);
    expect_close(mx, mx64, {1e-6, 1e-6}, what + " max_logit");
    expect_close(ent, ent64, {1e-6, 1e-6}, what + " entropy");
  }
  const int64_t shapes[][2] = {{1, 1}, {3, 5}, {7, 129}, {64, 1000}, {2, 4097}};
  for (const auto& s : shapes) {
    const int64_t n = s[0], d = s[1];
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {n, d}, 2.0, 1.0);
    if (n > 2) {  // an all-zero row has norm 0, not NaN
      std::vector<double> v = x.to_vector();
      std::fill(v.begin() + d, v.begin() + 2 * d, 0.0);
      x = Tensor::from(v, {n, d}, DType::f32);
    }
    Tensor norms = e32({n}), norms64 = e64({n});
    under_test().row_norms(norms, x, n, d);
    ref().row_norms(norms64, f64(x), n, d);
    expect_close(norms, norms64, {1e-6, 1e-6}, fmt_case("row_norms %lldx%lld", n, d));
  }
}

TEST_P(KernelAttention, PrefixMeanForwardBackward) {
  const int64_t cases[][3] = {{1, 1, 1}, {1, 5, 3}, {2, 7, 65}, {3, 512, 64}, {2, 16, 200}};
  uint64_t seed = 1700;
  for (const auto& c : cases) {
    const int64_t b = c[0], t = c[1], ch = c[2];
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {b, t, ch}), dy = randn(rng, {b, t, ch});
    const std::string what = fmt_case("prefix_mean B=%lld T=%lld C=%lld", b, t, ch);
    Tensor y = e32({b, t, ch}), y64 = e64({b, t, ch});
    under_test().prefix_mean_forward(y, x, b, t, ch);
    ref().prefix_mean_forward(y64, f64(x), b, t, ch);
    // Sums in double, one rounding to float at the end.
    expect_close(y, y64, {1e-6, 1e-6}, what + " y");
    Tensor dx = e32({b, t, ch}), dx64 = e64({b, t, ch});
    under_test().prefix_mean_backward(dx, dy, b, t, ch);
    ref().prefix_mean_backward(dx64, f64(dy), b, t, ch);
    expect_close(dx, dx64, {1e-6, 1e-6}, what + " dx");
  }
}

// ============================================================================
// embedding, transpose
// ============================================================================

TEST_P(KernelLayout, EmbeddingForwardBackwardWithRepeatedIds) {
  const int64_t cases[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 10, 65}, {512, 64, 64}};
  uint64_t seed = 1800;
  for (const auto& c : cases) {
    const int64_t n = c[0], v = c[1], d = c[2];
    Rng rng(seed++, stream::check);
    std::vector<int32_t> idv(static_cast<size_t>(n));
    for (auto& id : idv) id = static_cast<int32_t>(rng.below(static_cast<uint32_t>(v)));
    Tensor ids = Tensor::from_ids(idv, {n});
    Tensor table = randn(rng, {v, d}), dy = randn(rng, {n, d});
    const std::string what = fmt_case("embedding N=%lld V=%lld D=%lld", n, v, d);
    Tensor y = e32({n, d}), y64 = e64({n, d});
    under_test().embedding_forward(y, table, ids, n, v, d);
    ref().embedding_forward(y64, f64(table), ids, n, v, d);
    expect_close(y, y64, {0, 0}, what + " y");                  // a copy: exact
    Tensor dt = Tensor::full({v, d}, 7.0), dt64 = e64({v, d});  // 7: must be overwritten
    under_test().embedding_backward(dt, dy, ids, n, v, d);
    ref().embedding_backward(dt64, f64(dy), ids, n, v, d);
    // Up to n/v ~ 8 rows summed per table row in float.
    expect_close(dt, dt64, kForward, what + " dtable");
  }
  Tensor y = e32({1, 2}), table = e32({3, 2});
  EXPECT_THROW(under_test().embedding_forward(y, table, Tensor::from_ids({3}, {1}), 1, 3, 2),
               Error);
  EXPECT_THROW(under_test().embedding_forward(y, table, Tensor::from_ids({-1}, {1}), 1, 3, 2),
               Error);
}

TEST_P(KernelLayout, TransposeAgainstReference) {
  // (outer, A, mid, Bdim, inner): heads split/merge (B, T, H, Dh) <-> (B, H, T, Dh), a plain
  // matrix transpose, and odd sizes around the 32-wide tiles.
  const int64_t cases[][5] = {{1, 1, 1, 1, 1},   {2, 5, 1, 3, 8}, {1, 33, 1, 65, 1},
                              {2, 16, 1, 4, 16}, {3, 7, 2, 5, 3}, {1, 100, 3, 70, 1}};
  uint64_t seed = 1900;
  for (const auto& c : cases) {
    const int64_t total = c[0] * c[1] * c[2] * c[3] * c[4];
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {total});
    Tensor out = e32({total}), out64 = e64({total});
    under_test().transpose(out, x, c[0], c[1], c[2], c[3], c[4]);
    ref().transpose(out64, f64(x), c[0], c[1], c[2], c[3], c[4]);
    expect_close(out, out64, {0, 0}, "transpose " + shape_str({c[0], c[1], c[2], c[3], c[4]}));
  }
}

// ============================================================================
// the oneDNN primitive cache
// ============================================================================

// Shapes used nowhere else, so that the first call must create a primitive even when all the
// tests share one process.
TEST(CpuPrimitiveCache, SteadyStateCreatesNoPrimitive) {
  Backend& be = cpu_backend();
  Rng rng(2000, stream::check);
  const int64_t m = 37, k = 41, n = 29, b = 3;
  Tensor a = randn(rng, {b * m * k}), w = randn(rng, {b * k * n}), c = e32({b * m * n});
  Tensor w_shared = randn(rng, {k * n});
  Tensor x = randn(rng, {m, k}), wl = randn(rng, {n, k}), bias = randn(rng, {n}), y = e32({m, n});
  const int64_t bt = 2, t = 11, h = 3, dh = 7, ch = h * dh;
  Tensor q = randn(rng, {bt, t, ch}), kk = randn(rng, {bt, t, ch}), v = randn(rng, {bt, t, ch});
  Tensor out = e32({bt, t, ch}), probs = e32({bt, h, t, t});
  Tensor dq = e32({bt, t, ch}), dk = e32({bt, t, ch}), dv = e32({bt, t, ch});
  const int64_t ln = 13, ld = 59;
  Tensor lx = randn(rng, {ln, ld}), lg = randn(rng, {ld}), lb = randn(rng, {ld});
  Tensor ly = e32({ln, ld}), lm = e32({ln}), lr = e32({ln}), ldx = e32({ln, ld}), ldg = e32({ld}),
         ldb = e32({ld});

  auto step = [&] {
    be.matmul(c, a, w, MatmulSpec{b, m, n, k, false, false, true, true, false});
    be.matmul(c, a, w_shared, MatmulSpec{b, m, n, k, true, true, true, false, true});
    be.linear_forward(y, x, wl, bias, m, k, n);
    be.attention_forward(out, probs, q, kk, v, bt, t, h, dh, 0.3);
    be.attention_backward(&dq, &dk, &dv, out, q, kk, v, probs, bt, t, h, dh, 0.3);
    cpu::layernorm_forward_onednn(fp(ly), fp(lm), fp(lr), fp(lx), fp(lg), fp(lb), ln, ld, 1e-5f);
    cpu::layernorm_backward_onednn(fp(ldx), fp(ldg), fp(ldb), fp(ly), fp(lx), fp(lg), fp(lm),
                                   fp(lr), ln, ld);
  };
  const uint64_t before = be.primitives_created();
  step();
  const uint64_t after_first = be.primitives_created();
  // matmul x2, linear, attention forward x2 (QK^T, PV), backward 4 products of which 2 are
  // new (dP = dO V^T, dV = P^T dO; dQ = dS K has PV's descriptors and dK = dS^T Q has dV's, so
  // the cache shares them), layernorm forward and backward: 9 distinct primitives.
  EXPECT_EQ(after_first - before, 9u);
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(be.primitives_created(), after_first) << "a repeated step created primitives";

  // A new shape is a new primitive, once.
  Tensor x2 = randn(rng, {m + 1, k}), y2 = e32({m + 1, n});
  be.linear_forward(y2, x2, wl, bias, m + 1, k, n);
  EXPECT_EQ(be.primitives_created(), after_first + 1);
  be.linear_forward(y2, x2, wl, bias, m + 1, k, n);
  EXPECT_EQ(be.primitives_created(), after_first + 1);
  // accumulate (a sum post-op) is part of the key too.
  be.matmul(c, a, w, MatmulSpec{b, m, n, k, false, false, true, true, true});
  EXPECT_EQ(be.primitives_created(), after_first + 2);
}

// A primitive is made for the thread count it runs at: oneDNN fixes a primitive's parallel
// decomposition when it is created, so one made at 1 thread must not be reused at 2.
TEST(CpuPrimitiveCache, ThreadCountIsPartOfTheKey) {
  Backend& be = cpu_backend();
  Rng rng(2001, stream::check);
  const int64_t m = 43, k = 31, n = 23;  // shapes used nowhere else
  Tensor x = randn(rng, {m, k}), w = randn(rng, {n, k}), bias = randn(rng, {n}), y = e32({m, n});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const uint64_t before = be.primitives_created();
  be.linear_forward(y, x, w, bias, m, k, n);
  EXPECT_EQ(be.primitives_created(), before + 1);
  omp_set_num_threads(2);
  be.linear_forward(y, x, w, bias, m, k, n);
  EXPECT_EQ(be.primitives_created(), before + 2) << "the 1-thread primitive was reused at 2 threads";
  be.linear_forward(y, x, w, bias, m, k, n);
  omp_set_num_threads(1);
  be.linear_forward(y, x, w, bias, m, k, n);
  EXPECT_EQ(be.primitives_created(), before + 2) << "each thread count's primitive is cached";
  omp_set_num_threads(saved);
}

// ============================================================================
// simd.h
// ============================================================================

// The vector layer as this test binary compiles it: the tests are built without the library's
// -march flags, so this is the portable fallback here (an inline namespace per instruction set
// keeps it apart from the library's build, which the kernel tests above cover).
TEST(CpuSimd, TailsReductionsAndNaNRules) {
  namespace sd = cpu::simd;
  const int64_t w = sd::kWidth;
  std::vector<float> src(static_cast<size_t>(w)), dst(static_cast<size_t>(w) + 1);
  for (int64_t i = 0; i < w; ++i) src[static_cast<size_t>(i)] = float(i + 1);
  for (int64_t n = 0; n < w; ++n) {
    std::fill(dst.begin(), dst.end(), -7.0f);
    sd::VF v = sd::load_tail(src.data(), n);
    sd::store(dst.data(), v);
    for (int64_t i = 0; i < w; ++i)
      EXPECT_EQ(dst[static_cast<size_t>(i)], i < n ? float(i + 1) : 0.0f) << "load_tail n=" << n;
    std::fill(dst.begin(), dst.end(), -7.0f);
    sd::store_tail(dst.data(), sd::load(src.data()), n);
    for (int64_t i = 0; i <= w; ++i)
      EXPECT_EQ(dst[static_cast<size_t>(i)], i < n ? float(i + 1) : -7.0f) << "store_tail n=" << n;
    EXPECT_EQ(sd::reduce_add(sd::keep_first(sd::load(src.data()), n)), float(n * (n + 1) / 2));
  }
  EXPECT_EQ(sd::reduce_max(sd::load(src.data())), float(w));
  // row_reduce over every length around the unrolled widths: exact for small integers.
  for (int64_t d = 0; d <= 5 * w + 3; ++d) {
    std::vector<float> x(static_cast<size_t>(d) + 1);
    for (int64_t i = 0; i < d; ++i) x[static_cast<size_t>(i)] = float(i % 7);
    double want = 0;
    for (int64_t i = 0; i < d; ++i) want += x[static_cast<size_t>(i)];
    // Lanes past d load as 0, then +1 would count them: keep_first must drop them.
    float got = sd::row_reduce(
        d, [&](int64_t j, int64_t n) { return sd::load_n(x.data() + j, n) + sd::set1(1.0f); });
    EXPECT_EQ(double(got), want + double(d)) << "row_reduce d=" << d;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float out[64];
  sd::store(out, sd::max(sd::set1(1.0f), sd::set1(nan)));
  EXPECT_TRUE(std::isnan(out[0])) << "max(c, NaN) must be NaN: the data operand goes second";
  sd::store(out, sd::min(sd::set1(1.0f), sd::set1(nan)));
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(CpuSimd, ExpAndErfAccuracy) {
  namespace sd = cpu::simd;
  const int64_t w = sd::kWidth;
  double worst_exp = 0, worst_erf = 0;
  std::vector<float> x(static_cast<size_t>(w)), e(static_cast<size_t>(w)),
      f(static_cast<size_t>(w));
  for (double start = -87.0; start < 88.3; start += 0.01 * double(w)) {
    for (int64_t i = 0; i < w; ++i) x[static_cast<size_t>(i)] = float(start + 0.01 * double(i));
    sd::store(e.data(), sd::exp(sd::load(x.data())));
    sd::store(f.data(), sd::erf(sd::load(x.data())));
    for (int64_t i = 0; i < w; ++i) {
      const double xi = x[static_cast<size_t>(i)];
      if (xi > 88.3) continue;
      worst_exp = std::max(worst_exp, std::fabs(e[static_cast<size_t>(i)] / std::exp(xi) - 1.0));
      worst_erf = std::max(worst_erf, std::fabs(f[static_cast<size_t>(i)] - std::erf(xi)));
    }
  }
  // Cephes' expf: ~2 ulp (1.2e-7 relative); the erf approximation: 3.3e-7 absolute.
  EXPECT_LT(worst_exp, 2.5e-7);
  EXPECT_LT(worst_erf, 4e-7);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {
      std::numeric_limits<float>::quiet_NaN(), inf, -inf, -100.0f, 100.0f, 0.0f};
  for (float v : specials) {
    float out[64];
    sd::store(out, sd::exp(sd::set1(v)));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(out[0])) << "exp(NaN)";
    } else {
      EXPECT_EQ(out[0], v > 88 ? inf : v < -88 ? 0.0f : 1.0f) << "exp(" << v << ")";
    }
    sd::store(out, sd::erf(sd::set1(v)));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(out[0])) << "erf(NaN)";
    }
  }
}

// ============================================================================
// errors, non-finite values, threads
// ============================================================================

TEST(CpuBackend, IdentityAndFloat64Rejected) {
  EXPECT_EQ(cpu_backend().name(), "cpu");
  EXPECT_EQ(cpu_backend().device(), Device::cpu);
  EXPECT_TRUE(cpu_backend().supports(DType::f32));
  EXPECT_FALSE(cpu_backend().supports(DType::f64));
  Tensor x64 = e64({4}), y = e32({4});
  try {
    cpu_backend().gelu_forward(y, nullptr, x64);
    FAIL() << "a float64 input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  Tensor wrong = e32({5});
  EXPECT_THROW(cpu_backend().layernorm_forward(y, wrong, wrong, y, wrong, wrong, 1, 4, 1e-5),
               Error);
}

// Divergence detection looks for NaN/Inf: the vectorized kernels must not hide them.
TEST(CpuBackend, NonFiniteValuesPropagate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t d = 37;
  Tensor x = Tensor::full({2, d}, 0.5);
  x.data<float>()[5] = nan;       // row 0
  x.data<float>()[d + 30] = inf;  // row 1, in the vector tail
  Tensor gamma = Tensor::full({d}, 1.0), beta = Tensor::full({d}, 0.0);
  Tensor y = e32({2, d}), mean = e32({2}), rstd = e32({2});
  auto all_nonfinite_row = [&](const Tensor& t, int64_t row) {
    for (int64_t j = 0; j < d; ++j)
      if (std::isfinite(t.data<float>()[row * d + j])) return false;
    return true;
  };
  cpu_backend().layernorm_forward(y, mean, rstd, x, gamma, beta, 2, d, 1e-5);
  EXPECT_TRUE(all_nonfinite_row(y, 0) && all_nonfinite_row(y, 1)) << "layernorm hid a NaN/Inf";
  cpu_backend().rmsnorm_forward(y, rstd, x, gamma, 2, d, 1e-6);
  EXPECT_TRUE(std::isnan(y.data<float>()[5]) && !std::isfinite(rstd.data<float>()[0]))
      << "rmsnorm hid a NaN";
  cpu_backend().softmax_forward(y, x, 2, d);
  EXPECT_TRUE(all_nonfinite_row(y, 0) && all_nonfinite_row(y, 1)) << "softmax hid a NaN/Inf";
  cpu_backend().gelu_forward(y, nullptr, x);
  EXPECT_TRUE(std::isnan(y.data<float>()[5]));
  EXPECT_EQ(y.data<float>()[d + 30], inf);
  cpu_backend().scale(y, x, 2.0);
  EXPECT_TRUE(std::isnan(y.data<float>()[5]));
  EXPECT_TRUE(std::isnan(cpu_backend().sum_squares(x)));
  Tensor logits = Tensor::full({1, 4}, 1.0), probs = e32({1, 4}), loss = e32({1});
  logits.data<float>()[2] = nan;
  cpu_backend().cross_entropy_forward(loss, probs, logits, Tensor::from_ids({0}, {1}), 1, 4);
  EXPECT_TRUE(std::isnan(loss.item()));
}

// The same inputs give the same bits with 1 and with 2 threads: per-row kernels give each row
// to one thread, and parameter gradients / sums are reduced in fixed blocks. Rows of d < 256
// take the tiled kernels, whose groups of rows (statistics finished kWidth rows at once) start
// where each thread's range does; 250 rows split 125/125 so that the groups shift by a row
// count that is not a multiple of the vector width.
TEST(CpuBackend, ResultsDoNotDependOnThreadCount) {
  for (const auto& shape : {std::pair<int64_t, int64_t>{512, 256}, {250, 65}, {512, 64}}) {
    const int64_t n = shape.first, d = shape.second;  // above the threading threshold
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(d));
    NormInputs in(n, d, 2100);
    auto run = [&](int threads) {
      set_num_threads(threads);
      Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
      Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d}), rdg = e32({d});
      Tensor ry = e32({n, d}), rrstd = e32({n}), rdx = e32({n, d}), s = e32({n, d}), sy = e32({n, d}),
             smean = e32({n}), srstd = e32({n}), rs = e32({n, d}), rsy = e32({n, d}), rsrstd = e32({n});
      cpu_backend().layernorm_forward(y, mean, rstd, in.x, in.gamma, in.beta, n, d, 1e-5);
      cpu_backend().layernorm_backward(&dx, &dg, &db, in.dy, in.x, in.gamma, mean, rstd, n, d);
      cpu_backend().rmsnorm_forward(ry, rrstd, in.x, in.gamma, n, d, 1e-5);
      cpu_backend().rmsnorm_backward(&rdx, &rdg, in.dy, in.x, in.gamma, rrstd, n, d);
      cpu_backend().add_layernorm_forward(s, sy, smean, srstd, in.x, in.dy, 0.5, in.gamma, in.beta, n, d, 1e-5);
      cpu_backend().add_rmsnorm_forward(rs, rsy, rsrstd, in.x, in.dy, 0.5, in.gamma, n, d, 1e-5);
      std::vector<double> all;
      for (const Tensor* t : {&y, &mean, &rstd, &dx, &dg, &db, &ry, &rrstd, &rdx, &rdg, &s, &sy, &smean, &srstd, &rs, &rsy, &rsrstd}) {
        auto v = t->to_vector();
        all.insert(all.end(), v.begin(), v.end());
      }
      all.push_back(cpu_backend().sum_squares(in.x));
      return all;
    };
    const int before = num_threads();
    auto one = run(1), two = run(2);
    set_num_threads(before);
    ASSERT_EQ(one.size(), two.size());
    size_t differ = 0;
    for (size_t i = 0; i < one.size(); ++i) differ += one[i] != two[i];
    EXPECT_EQ(differ, 0u) << "values that changed with the thread count";
  }
}

// Test names take letters, digits and underscores: "cuda-sim" is cuda_sim.
std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}
INSTANTIATE_TEST_SUITE_P(Backends, KernelMatmul, ::testing::ValuesIn(built_backends()), param_name);
INSTANTIATE_TEST_SUITE_P(Backends, KernelElementwise, ::testing::ValuesIn(built_backends()), param_name);
INSTANTIATE_TEST_SUITE_P(Backends, KernelNorm, ::testing::ValuesIn(built_backends()), param_name);
INSTANTIATE_TEST_SUITE_P(Backends, KernelSoftmax, ::testing::ValuesIn(built_backends()), param_name);
INSTANTIATE_TEST_SUITE_P(Backends, KernelLoss, ::testing::ValuesIn(built_backends()), param_name);
INSTANTIATE_TEST_SUITE_P(Backends, KernelAttention, ::testing::ValuesIn(built_backends()), param_name);
INSTANTIATE_TEST_SUITE_P(Backends, KernelLayout, ::testing::ValuesIn(built_backends()), param_name);

}  // namespace
}  // namespace normlab
