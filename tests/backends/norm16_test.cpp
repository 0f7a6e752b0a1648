// The cpu norm kernels over 16-bit storage (norm16_kernels.cpp, `bench norms --precision`):
// their conversions against core's one definition of the rounding (every encoding decoded, the
// boundary cases of both formats encoded), and the norms against the float64 reference on random
// shapes, odd sizes included: within one ulp of the format of the exact result (rounding once
// gives half an ulp; float32 arithmetic before it may tip a near-tie) plus float32's error.
// Run: ctest -R CpuNorm16
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/reference_kernels.h"
#include "normlab/rng.h"

namespace normlab {
namespace {

const Precision kFormats[] = {Precision::bf16, Precision::fp16};

TEST(CpuNorm16, DecodesEveryEncodingAsCoreDoes) {
  for (Precision p : kFormats) {
    SCOPED_TRACE(to_string(p));
    std::vector<uint16_t> bits(65536);
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
    std::vector<float> got(bits.size());
    cpu::decode_16(p, got.data(), bits.data(), static_cast<int64_t>(bits.size()));
    int bad = 0;
    for (size_t i = 0; i < bits.size(); ++i) {
      const float want = from_bits(p, bits[i]);
      const bool same = std::isnan(want) ? std::isnan(got[i]) : std::memcmp(&want, &got[i], 4) == 0;
      if (!same && ++bad <= 3) ADD_FAILURE() << "bits " << i << ": got " << got[i] << " want " << want;
    }
    EXPECT_EQ(bad, 0);
  }
}

// Ties at both formats' last bit, the largest finite values and the first that overflow, the
// subnormals and the values that round into or out of them, signed zeros, infinities, NaN; in
// runs of odd length so that the vector loops and their scalar tails both see them.
std::vector<float> boundary_values(Precision p) {
  const FormatInfo& f = format_info(p);
  const float max = static_cast<float>(f.max), minsub = static_cast<float>(f.min_subnormal),
              minnorm = static_cast<float>(f.min_normal);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), max, -max,
                          std::nextafter(max, inf), max * 1.0009765625f, max * 1.001f, minsub, minsub * 0.5f,
                          minsub * 0.49f, minsub * 0.51f, minsub * 1.5f, minsub * 2.5f, minnorm,
                          std::nextafter(minnorm, 0.0f), minnorm * 0.75f, 1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 512,
                          1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 4096, 3.14159265f, -2.71828f, 1e-3f,
                          65504.0f, 65519.99f, 65520.0f, 3.3895e38f, 1e-40f};
  Rng rng(7);
  for (int i = 0; i < 1000; ++i) {
    const double e = rng.uniform(-30, 20);
    v.push_back(static_cast<float>((rng.uniform() < 0.5 ? -1 : 1) * std::ldexp(rng.uniform(1, 2), static_cast<int>(e))));
  }
  return v;
}

TEST(CpuNorm16, EncodesAsCoreRounds) {
  for (Precision p : kFormats) {
    SCOPED_TRACE(to_string(p));
    const std::vector<float> v = boundary_values(p);
    for (size_t n : {v.size(), size_t{7}, size_t{17}}) {
      std::vector<uint16_t> got(n);
      cpu::encode_16(p, got.data(), v.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = to_bits(p, v[i]);
        if (std::isnan(v[i]))
          EXPECT_TRUE(std::isnan(from_bits(p, got[i]))) << "NaN at " << i;
        else
          EXPECT_EQ(got[i], want) << "value " << v[i] << " at " << i;
      }
    }
  }
}

struct Case16 {
  int64_t n, d;
};

const Case16 kCases[] = {{1, 1}, {3, 7}, {5, 8}, {2, 17}, {7, 33}, {4, 129}, {33, 64}, {9, 1001}, {40, 256}, {97, 515}};  // the last one large enough for threads

// Inputs of a random shape as p holds them: x with a row offset (LayerNorm's mean matters), dy,
// gamma near 1, beta.
struct Inputs16 {
  std::vector<uint16_t> x, dy, gamma, beta;
  std::vector<double> xd, dyd, gd, bd;  // the same values, exact
  Inputs16(Precision p, const Case16& c, uint64_t seed) {
    Rng rng(seed);
    auto fill = [&](std::vector<uint16_t>& bits, std::vector<double>& exact, int64_t count, double lo, double hi,
                    bool row_offset) {
      bits.resize(static_cast<size_t>(count));
      exact.resize(bits.size());
      double off = 0;
      for (int64_t i = 0; i < count; ++i) {
        if (row_offset && i % c.d == 0) off = rng.uniform(-3, 3);
        bits[static_cast<size_t>(i)] = to_bits(p, static_cast<float>(off + rng.uniform(lo, hi)));
        exact[static_cast<size_t>(i)] = from_bits(p, bits[static_cast<size_t>(i)]);
      }
    };
    fill(x, xd, c.n * c.d, -2, 2, true);
    fill(dy, dyd, c.n * c.d, -1, 1, false);
    fill(gamma, gd, c.d, 0.5, 1.5, false);
    fill(beta, bd, c.d, -0.5, 0.5, false);
  }
};

// |got - want| within one ulp of p at want, plus float32's error at the row's scale.
void expect_close_16(Precision p, const std::vector<uint16_t>& got, const std::vector<double>& want, double atol,
                     const char* what) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = from_bits(p, got[i]), tol = ulp_at(p, want[i]) + atol + 1e-5 * std::fabs(want[i]);
    if (!(std::fabs(g - want[i]) <= tol) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: got " << g << " want " << want[i] << " (tol " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

void expect_close(const float* got, const std::vector<double>& want, double atol, double rtol, const char* what) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

TEST(CpuNorm16, ForwardMatchesTheReference) {
  for (Precision p : kFormats) {
    for (const Case16& c : kCases) {
      SCOPED_TRACE(::testing::Message() << to_string(p) << " " << c.n << "x" << c.d);
      const Inputs16 in(p, c, 100 + static_cast<uint64_t>(c.n * c.d));
      const size_t nd = static_cast<size_t>(c.n * c.d), n = static_cast<size_t>(c.n);
      std::vector<double> y(nd), mean(n), rstd(n);
      std::vector<uint16_t> got(nd);
      std::vector<float> gmean(n), grstd(n);
      layernorm_forward_ref<double>(y.data(), mean.data(), rstd.data(), in.xd.data(), in.gd.data(), in.bd.data(), c.n,
                                    c.d, 1e-5);
      cpu::layernorm_forward_16(p, got.data(), gmean.data(), grstd.data(), in.x.data(), in.gamma.data(),
                                in.beta.data(), c.n, c.d, 1e-5f);
      expect_close_16(p, got, y, 1e-5, "layernorm y");
      expect_close(gmean.data(), mean, 1e-5, 1e-5, "layernorm mean");
      expect_close(grstd.data(), rstd, 0, 1e-4, "layernorm rstd");
      rmsnorm_forward_ref<double>(y.data(), rstd.data(), in.xd.data(), in.gd.data(), c.n, c.d, 1e-6);
      cpu::rmsnorm_forward_16(p, got.data(), grstd.data(), in.x.data(), in.gamma.data(), c.n, c.d, 1e-6f);
      expect_close_16(p, got, y, 1e-5, "rmsnorm y");
      expect_close(grstd.data(), rstd, 0, 1e-5, "rmsnorm rstd");
    }
  }
}

TEST(CpuNorm16, BackwardMatchesTheReference) {
  for (Precision p : kFormats) {
    for (const Case16& c : kCases) {
      SCOPED_TRACE(::testing::Message() << to_string(p) << " " << c.n << "x" << c.d);
      const Inputs16 in(p, c, 900 + static_cast<uint64_t>(c.n * c.d));
      const size_t nd = static_cast<size_t>(c.n * c.d), n = static_cast<size_t>(c.n), d = static_cast<size_t>(c.d);
      // The saved statistics as the forward keeps them (float32), read by both sides.
      std::vector<double> y(nd), mean(n), rstd(n), dx(nd), dg(d), db(d);
      layernorm_forward_ref<double>(y.data(), mean.data(), rstd.data(), in.xd.data(), in.gd.data(), in.bd.data(), c.n,
                                    c.d, 1e-5);
      std::vector<float> fmean(mean.begin(), mean.end()), frstd(rstd.begin(), rstd.end());
      for (size_t i = 0; i < n; ++i) mean[i] = fmean[i], rstd[i] = frstd[i];
      std::vector<uint16_t> got(nd);
      std::vector<float> gdg(d), gdb(d);
      layernorm_backward_ref<double>(dx.data(), dg.data(), db.data(), in.dyd.data(), in.xd.data(), in.gd.data(),
                                     mean.data(), rstd.data(), c.n, c.d);
      cpu::layernorm_backward_16(p, got.data(), gdg.data(), gdb.data(), in.dy.data(), in.x.data(), in.gamma.data(),
                                 fmean.data(), frstd.data(), c.n, c.d);
      expect_close_16(p, got, dx, 1e-4, "layernorm dx");
      expect_close(gdg.data(), dg, 1e-4, 1e-4, "layernorm dgamma");
      expect_close(gdb.data(), db, 1e-4, 1e-4, "layernorm dbeta");
      rmsnorm_forward_ref<double>(y.data(), rstd.data(), in.xd.data(), in.gd.data(), c.n, c.d, 1e-6);
      for (size_t i = 0; i < n; ++i) frstd[i] = static_cast<float>(rstd[i]), rstd[i] = frstd[i];
      rmsnorm_backward_ref<double>(dx.data(), dg.data(), in.dyd.data(), in.xd.data(), in.gd.data(), rstd.data(), c.n,
                                   c.d);
      cpu::rmsnorm_backward_16(p, got.data(), gdg.data(), in.dy.data(), in.x.data(), in.gamma.data(), frstd.data(),
                               c.n, c.d);
      expect_close_16(p, got, dx, 1e-4, "rmsnorm dx");
      expect_close(gdg.data(), dg, 1e-4, 1e-4, "rmsnorm dgamma");
    }
  }
}

// A row whose first values (the shift of the one-sweep sums) lie far from its mean: the variance
// is summed again, centred, instead of losing its bits to cancellation.
TEST(CpuNorm16, LayerNormRowFarFromItsShift) {
  const int64_t d = 64;
  for (Precision p : kFormats) {
    SCOPED_TRACE(to_string(p));
    std::vector<uint16_t> x(d), g(d, to_bits(p, 1.0f)), b(d, to_bits(p, 0.0f)), y(d);
    std::vector<double> xd(d), gd(d, 1.0), bd(d, 0.0), want(d);
    for (int64_t j = 0; j < d; ++j) {
      const float v = j < 8 ? 0.0f : 100.0f + 0.5f * static_cast<float>(j % 5);
      x[static_cast<size_t>(j)] = to_bits(p, v);
      xd[static_cast<size_t>(j)] = from_bits(p, x[static_cast<size_t>(j)]);
    }
    double mean = 0, rstd = 0;
    layernorm_forward_ref<double>(want.data(), &mean, &rstd, xd.data(), gd.data(), bd.data(), 1, d, 1e-5);
    float gmean = 0, grstd = 0;
    cpu::layernorm_forward_16(p, y.data(), &gmean, &grstd, x.data(), g.data(), b.data(), 1, d, 1e-5f);
    expect_close_16(p, y, want, 1e-5, "y");
    EXPECT_NEAR(grstd, rstd, 1e-5 * rstd);
  }
}

// Overflow is the format's, not float32's: a row whose output exceeds fp16's range stores inf
// (gamma 6e4 times xhat 3/sqrt(3.5)), while bf16 holds it; a NaN row stays NaN.
TEST(CpuNorm16, OverflowsAsTheFormatDoes) {
  const int64_t d = 4;
  const float x[] = {2, -1, 0, 3};
  for (Precision p : kFormats) {
    std::vector<uint16_t> xb(d), g(d), y(d);
    for (int64_t j = 0; j < d; ++j) xb[static_cast<size_t>(j)] = to_bits(p, x[j]), g[static_cast<size_t>(j)] = to_bits(p, 6e4f);
    float rstd = 0;
    cpu::rmsnorm_forward_16(p, y.data(), &rstd, xb.data(), g.data(), 1, d, 1e-6f);
    const float y3 = from_bits(p, y[3]);
    if (p == Precision::fp16)
      EXPECT_TRUE(std::isinf(y3)) << y3;
    else
      {
      const float want = from_bits(p, g[3]) * 3 / std::sqrt(3.5f);
      EXPECT_NEAR(y3, want, want / 128);
    }
    xb[1] = to_bits(p, std::numeric_limits<float>::quiet_NaN());
    cpu::rmsnorm_forward_16(p, y.data(), &rstd, xb.data(), g.data(), 1, d, 1e-6f);
    for (uint16_t b : y) EXPECT_TRUE(std::isnan(from_bits(p, b)));
  }
}

}  // namespace
}  // namespace normlab
