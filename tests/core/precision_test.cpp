// The rounding into bf16 and fp16 (precision.h) against an independent reference: float64
// arithmetic that scales to the format's grid and rounds with nearbyint (ties to even), on every
// value of both formats, every midpoint between neighbours and the float32 values on either side
// of each (the only places where a rounding can go wrong), plus random bit patterns. fp16 is also
// checked against the compiler's _Float16 conversion, a second implementation.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "normlab/error.h"
#include "normlab/precision.h"
#include "normlab/rng.h"
#include "test_util.h"

using namespace normlab;

namespace {

// The format's value nearest to x (ties to even), as IEEE 754 defines it: round as if the
// exponent range were unbounded below min_normal's spacing and above, then overflow to infinity
// when the rounded magnitude exceeds max.
double reference_round(Precision p, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const FormatInfo& f = format_info(p);
  const double a = std::fabs(x);
  const int e = std::max(std::ilogb(a), std::ilogb(f.min_normal));
  const double step = std::ldexp(1.0, e - f.fraction_bits);
  const double r = std::nearbyint(a / step) * step;  // a / step is exact: a power-of-two scale
  return std::copysign(r > f.max ? std::numeric_limits<double>::infinity() : r, x);
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Every finite value of the format, its neighbours' midpoints, and the float32 values adjacent
// to both: the boundary cases of rounding into it.
std::vector<float> boundary_cases(Precision p) {
  std::vector<float> out;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float v = from_bits(p, static_cast<uint16_t>(b));
    if (!std::isfinite(v)) continue;
    const uint16_t next_bits = static_cast<uint16_t>(b + 1);
    const float next = from_bits(p, next_bits);
    // Away from zero within the same sign: b + 1 is the next larger magnitude.
    const bool same_sign = (next_bits & 0x8000u) == (b & 0x8000u);
    out.push_back(v);
    out.push_back(std::nextafter(v, std::numeric_limits<float>::infinity()));
    out.push_back(std::nextafter(v, -std::numeric_limits<float>::infinity()));
    if (same_sign && std::isfinite(next)) {
      const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
      EXPECT_EQ(static_cast<double>(mid), (static_cast<double>(v) + next) / 2)
          << "midpoint not exact in float32";
      out.push_back(mid);
      out.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
      out.push_back(std::nextafter(mid, -std::numeric_limits<float>::infinity()));
    }
  }
  // Past the largest finite value: the overflow tie (max + half its ulp: 65520 in fp16, the
  // pattern 0x7f7f8000 in bf16), its float32 neighbours, and beyond.
  const float max = static_cast<float>(format_info(p).max);
  const float tie = static_cast<float>(format_info(p).max + ulp_at(p, format_info(p).max) / 2);
  EXPECT_EQ(static_cast<double>(tie), format_info(p).max + ulp_at(p, format_info(p).max) / 2);
  for (float v : {max, tie, std::nextafter(tie, 0.0f), std::nextafter(tie, std::numeric_limits<float>::infinity()),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()}) {
    out.push_back(v);
    out.push_back(-v);
  }
  return out;
}

}  // namespace

TEST(Precision, NamesRoundTrip) {
  EXPECT_EQ(test::names_round_trip_errors<Precision>(), "");
  EXPECT_EQ(test::names_round_trip_errors<RoundingEvent>(), "");
  EXPECT_EQ(test::names_round_trip_errors<NormCompute>(), "");
  EXPECT_EQ(parse_kind<Precision>("bfloat16"), Precision::bf16);
  EXPECT_EQ(parse_kind<Precision>("half"), Precision::fp16);
  EXPECT_THROW(parse_kind<Precision>("fp8"), UsageError);
}

TEST(Precision, FormatInfoIsWhatTheEncodingsHold) {
  EXPECT_EQ(from_bits(Precision::fp16, 0x7bff), 65504.0f);
  EXPECT_EQ(format_info(Precision::fp16).max, 65504.0);
  EXPECT_EQ(from_bits(Precision::fp16, 0x0001), format_info(Precision::fp16).min_subnormal);
  EXPECT_EQ(from_bits(Precision::fp16, 0x0400), format_info(Precision::fp16).min_normal);
  EXPECT_EQ(from_bits(Precision::fp16, 0x3c01) - 1.0f, format_info(Precision::fp16).epsilon);
  EXPECT_EQ(from_bits(Precision::bf16, 0x7f7f), format_info(Precision::bf16).max);
  EXPECT_EQ(from_bits(Precision::bf16, 0x0001), format_info(Precision::bf16).min_subnormal);
  EXPECT_EQ(from_bits(Precision::bf16, 0x0080), format_info(Precision::bf16).min_normal);
  EXPECT_EQ(from_bits(Precision::bf16, 0x3f81) - 1.0f, format_info(Precision::bf16).epsilon);
  EXPECT_EQ(format_info(Precision::fp32).max, static_cast<double>(std::numeric_limits<float>::max()));
}

TEST(Precision, EveryEncodingRoundTrips) {
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      const float v = from_bits(p, static_cast<uint16_t>(b));
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(round_to(p, v)));
        continue;
      }
      ASSERT_EQ(to_bits(p, v), b) << to_string(p) << " bits " << b;
      ASSERT_TRUE(same_value(round_to(p, v), v));
    }
  }
}

TEST(Precision, RoundingMatchesTheReferenceAtEveryBoundary) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    const std::vector<float> cases = boundary_cases(p);
    int failures = 0;
    for (float x : cases) {
      const double want = reference_round(p, x), got = round_to(p, x);
      if (!same_value(got, want) && ++failures <= 10)
        ADD_FAILURE() << to_string(p) << ": round(" << x << ") = " << got << ", want " << want;
    }
    EXPECT_EQ(failures, 0) << "of " << cases.size() << " boundary cases";
  }
}

TEST(Precision, RoundingMatchesTheReferenceOnRandomBits) {
  std::mt19937 gen(12345);
  std::vector<float> xs(200000);
  for (float& x : xs) x = float_of(static_cast<uint32_t>(gen()));
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    std::vector<float> in_place = xs;
    round_to(p, in_place.data(), static_cast<int64_t>(in_place.size()));
    int failures = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = reference_round(p, xs[i]);
      if ((!same_value(round_to(p, xs[i]), want) || !same_value(in_place[i], want)) && ++failures <= 10)
        ADD_FAILURE() << to_string(p) << ": round(" << xs[i] << ") = " << round_to(p, xs[i]);
    }
    EXPECT_EQ(failures, 0);
  }
}

TEST(Precision, Fp16MatchesTheCompilersFloat16) {
  std::vector<float> cases = boundary_cases(Precision::fp16);
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) cases.push_back(float_of(static_cast<uint32_t>(gen())));
  int failures = 0;
  for (float x : cases) {
    volatile float in = x;  // keep the conversion at run time
    const float want = static_cast<float>(static_cast<_Float16>(in));
    if (!same_value(round_to(Precision::fp16, x), want) && ++failures <= 10)
      ADD_FAILURE() << "round(" << x << ") = " << round_to(Precision::fp16, x) << ", _Float16 " << want;
  }
  EXPECT_EQ(failures, 0);
}

TEST(Precision, HandPickedCases) {
  const Precision h = Precision::fp16, b = Precision::bf16;
  // Overflow: 65519 and the float below 65520 round to 65504; 65520 is the tie and goes to inf.
  EXPECT_EQ(round_to(h, 65519.0f), 65504.0f);
  EXPECT_EQ(round_to(h, std::nextafter(65520.0f, 0.0f)), 65504.0f);
  // bf16's tie above its max (0x7f7f8000) carries into the exponent: infinity; one below: max.
  float bf16_tie;
  const uint32_t tie_bits = 0x7f7f8000u;
  std::memcpy(&bf16_tie, &tie_bits, sizeof bf16_tie);
  EXPECT_TRUE(std::isinf(round_to(b, bf16_tie)));
  EXPECT_EQ(round_to(b, std::nextafter(bf16_tie, 0.0f)), format_info(b).max);
  EXPECT_TRUE(std::isinf(round_to(h, 65520.0f)));
  EXPECT_TRUE(std::isinf(round_to(h, 257.0f * 257.0f)));  // a square above 256^2
  // Gradual underflow: 1e-5 is an fp16 subnormal (168 * 2^-24), 1e-8 and 1e-12 become 0.
  EXPECT_EQ(round_to(h, 1e-5f), 168.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(round_to(h, 1e-8f), 0.0f);
  EXPECT_EQ(round_to(h, std::ldexp(1.0f, -25)), 0.0f);  // the tie with 2^-24 goes to even (0)
  EXPECT_EQ(round_to(h, std::nextafter(std::ldexp(1.0f, -25), 1.0f)), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::signbit(round_to(h, -1e-9f)));  // underflow keeps the sign
  // bf16 keeps float32's range but 8 significant bits: 1 + 2^-8 is a tie (to 1), 1e-12 survives.
  EXPECT_EQ(round_to(b, 1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(round_to(b, 1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_GT(round_to(b, 1e-12f), 0.0f);
  EXPECT_TRUE(std::isinf(round_to(b, std::numeric_limits<float>::max())));
  // fp32 is the identity.
  EXPECT_EQ(round_to(Precision::fp32, 0.1f), 0.1f);
}

TEST(Precision, UlpsAndRoundingEvents) {
  const Precision h = Precision::fp16;
  EXPECT_EQ(ulp_at(h, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(ulp_at(h, 1000.0), 0.5);
  EXPECT_EQ(ulp_at(h, 1e-6), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_error(h, 1000.5, 1000.25), 0.5);
  EXPECT_TRUE(std::isinf(ulp_error(h, std::numeric_limits<double>::infinity(), 70000.0)));
  EXPECT_TRUE(std::isnan(ulp_error(h, std::nan(""), 1.0)));
  EXPECT_EQ(classify_rounding(h, 1.0, 1.0), RoundingEvent::exact);
  EXPECT_EQ(classify_rounding(h, 0.1, round_to(h, 0.1f)), RoundingEvent::rounded);
  EXPECT_EQ(classify_rounding(h, 1e-5, round_to(h, 1e-5f)), RoundingEvent::subnormal);
  EXPECT_EQ(classify_rounding(h, 1e-12, round_to(h, 1e-12f)), RoundingEvent::underflow);
  EXPECT_EQ(classify_rounding(h, 66049.0, round_to(h, 66049.0f)), RoundingEvent::overflow);
}

TEST(FormatCensus, CountsWhatStoringDoes) {
  const float inf = std::numeric_limits<float>::infinity();
  // fp16: 65504 is the largest value, 65520 the tie that rounds to inf; 1e-8 is below half the
  // smallest subnormal (2^-24 = 5.96e-8) and rounds to zero; 4e-8 rounds up to 2^-24.
  const std::vector<float> v{65504.0f, 65520.0f, -7e4f, 1e-8f, -1e-8f, 4e-8f, 0.0f, -0.0f, inf, std::nanf(""), 2.0f};
  const FormatCensus h = format_census(Precision::fp16, v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(h.count, 11);
  EXPECT_EQ(h.nonfinite, 2);
  EXPECT_EQ(h.overflow, 2);
  EXPECT_EQ(h.underflow, 2);
  EXPECT_EQ(h.max_abs, 7e4f);
  // bf16 holds all of them (its range is float32's); fp32 changes nothing.
  const FormatCensus b = format_census(Precision::bf16, v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(b.overflow, 0);
  EXPECT_EQ(b.underflow, 0);
  const FormatCensus f = format_census(Precision::fp32, v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(f.overflow + f.underflow, 0);
  EXPECT_EQ(f.nonfinite, 2);
  FormatCensus sum = h;
  sum.add(b);
  EXPECT_EQ(sum.count, 22);
  EXPECT_EQ(sum.overflow, 2);
  EXPECT_EQ(sum.max_abs, 7e4f);
}

TEST(CompositeNormRow, HandDerivedCases) {
  const float one[4] = {1, 1, 1, 1}, zero[4] = {0, 0, 0, 0};
  float y[4];
  // fp16 RMSNorm of [300, -300, 1, 2]: 300^2 = 90000 > 65504 is stored as inf, so mean(x^2) and
  // var + eps are inf and rsqrt(inf) = 0: the row's output is silently 0, not NaN.
  const float big[4] = {300, -300, 1, 2};
  CompositeRowStats st = composite_norm_row(false, Precision::fp16, big, one, nullptr, y, 4, 1e-6);
  EXPECT_EQ(st.rstd, 0.0f);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  // bf16 holds 90000 (as 90112): r = rsqrt(45056.5 -> 45056) = 0.004711 -> bf16 0.004700.
  st = composite_norm_row(false, Precision::bf16, big, one, nullptr, y, 4, 1e-6);
  EXPECT_EQ(st.rstd, round_to(Precision::bf16, 1.0f / std::sqrt(round_to(Precision::bf16, (90112.0f * 2 + 1 + 4) / 4))));
  EXPECT_GT(y[0], 1.0f);
  // fp16 LayerNorm of a row of equal values, eps 1e-12: eps is 0 in fp16 (below half of 2^-24),
  // var + eps = 0, rsqrt(0) = inf, and (x - mean) * inf = 0 * inf = NaN.
  const float flat[4] = {5, 5, 5, 5};
  st = composite_norm_row(true, Precision::fp16, flat, one, zero, y, 4, 1e-12);
  EXPECT_EQ(st.mean, 5.0f);
  EXPECT_TRUE(std::isinf(st.rstd));
  for (float v : y) EXPECT_TRUE(std::isnan(v));
  // The same row with eps 1e-5: 1e-5 is the fp16 subnormal 168 * 2^-24 = 1.00136e-5; rsqrt of it
  // is 316.0 (fp16), and y = 0 * 316 * gamma + beta = beta.
  st = composite_norm_row(true, Precision::fp16, flat, one, zero, y, 4, 1e-5);
  EXPECT_EQ(st.rstd, round_to(Precision::fp16, 1.0f / std::sqrt(168.0f * std::ldexp(1.0f, -24))));
  for (float v : y) EXPECT_EQ(v, 0.0f);
  // The worksheet row x = [2, -1, 0, 3] in fp16, LayerNorm: mean 1, centred [1, -2, -1, 2],
  // squares [1, 4, 1, 4], var 2.5, + 1e-5 = 2.50001 -> fp16 2.5, rsqrt -> 0.63245 -> fp16 0.63232.
  const float ws[4] = {2, -1, 0, 3};
  st = composite_norm_row(true, Precision::fp16, ws, one, zero, y, 4, 1e-5);
  EXPECT_EQ(st.mean, 1.0f);
  EXPECT_EQ(st.rstd, round_to(Precision::fp16, 0.6324555f));
  EXPECT_EQ(y[0], st.rstd);
  EXPECT_EQ(y[1], round_to(Precision::fp16, -2 * st.rstd));
}

TEST(CompositeNormRow, EpsIsRoundedToTheFormatBeforeItIsAdded) {
  // x = 1047 * 2^-15 in fp16: x^2 = 1070.56 * 2^-20 is stored as 1071 * 2^-20, and so is the mean
  // of four of them. fp16 holds eps 1e-5 as 168 * 2^-24 = 10.5 * 2^-20, so var + eps is the tie
  // 1081.5 * 2^-20, stored as 1082 * 2^-20 (even); eps added as float32 (10.49 * 2^-20) would
  // give 1081 * 2^-20, and rsqrt tells the two apart.
  const float a = std::ldexp(1047.0f, -15);
  const float x[4] = {a, a, a, a}, one[4] = {1, 1, 1, 1};
  float y[4];
  const CompositeRowStats st = composite_norm_row(false, Precision::fp16, x, one, nullptr, y, 4, 1e-5);
  const float eps_rounded = round_to(Precision::fp16, 1.0f / std::sqrt(std::ldexp(1082.0f, -20)));
  const float eps_float32 = round_to(Precision::fp16, 1.0f / std::sqrt(std::ldexp(1081.0f, -20)));
  ASSERT_NE(eps_rounded, eps_float32);
  EXPECT_EQ(st.rstd, eps_rounded);
}

// A row at gpt2 init's scale (std 0.02: r near 50) through the composite's backward: in fp16
// r.pow(3) (about 1.25e5) overflows in torch.rsqrt's backward, so every dx is inf or NaN and the
// census names that step first; bf16 holds r^3 and the same row's dx is finite.
TEST(CompositeNormRowBackward, Fp16RsqrtBackwardOverflowsAtGpt2InitScale) {
  const float x16[4] = {0.02f, -0.01f, 0.03f, -0.025f}, dy16[4] = {0.5f, -0.25f, 1, 0.75f};
  const float one[4] = {1, 1, 1, 1}, zero[4] = {0, 0, 0, 0};
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    float x[4], dy[4], y[4], dx[4];
    for (int j = 0; j < 4; ++j) {
      x[j] = round_to(p, x16[j]);
      dy[j] = round_to(p, dy16[j]);
    }
    for (bool ln : {true, false}) {
      const CompositeRowStats st = composite_norm_row(ln, p, x, one, zero, y, 4, 1e-5);
      ASSERT_GT(st.rstd, 40.0f);
      CompositeBackwardCensus census;
      composite_norm_row_backward(ln, p, dy, x, one, st.mean, st.rstd, dx, 4, &census);
      const FormatCensus& gamma = census.steps[static_cast<int>(CompositeBackwardStep::mul_gamma)];
      const FormatCensus& mul = census.steps[static_cast<int>(CompositeBackwardStep::mul_rstd)];
      const FormatCensus& rsqrt = census.steps[static_cast<int>(CompositeBackwardStep::rsqrt)];
      EXPECT_EQ(gamma.overflow + gamma.nonfinite + mul.overflow + mul.nonfinite, 0);
      if (p == Precision::fp16) {
        EXPECT_GT(rsqrt.overflow, 0) << ln;
        EXPECT_GE(rsqrt.max_abs, 65520.0);  // r^3, rounded to inf
        for (float v : dx) EXPECT_FALSE(std::isfinite(v)) << ln;
      } else {
        EXPECT_EQ(rsqrt.overflow, 0);
        for (float v : dx) EXPECT_TRUE(std::isfinite(v)) << ln;
      }
    }
  }
}

// Where nothing overflows, the composite's backward is the norm's derivative to within the
// format's roundings: the worksheet row in fp16 against the norm's analytic derivative, written
// out below in float64.
TEST(CompositeNormRowBackward, MatchesTheAnalyticBackwardWithinTheFormat) {
  const float x[4] = {2, -1, 0, 3}, gamma[4] = {1, 0.5f, 2, 1}, dy[4] = {0.5f, -1, 0.25f, 1}, zero[4] = {0, 0, 0, 0};
  float y[4], dx[4];
  for (bool ln : {true, false}) {
    const CompositeRowStats st = composite_norm_row(ln, Precision::fp16, x, gamma, zero, y, 4, 1e-5);
    composite_norm_row_backward(ln, Precision::fp16, dy, x, gamma, st.mean, st.rstd, dx, 4, nullptr);
    double mu = 0, ms = 0;
    for (float v : x) mu += ln ? v / 4.0 : 0.0;
    for (float v : x) ms += (v - mu) * (v - mu) / 4.0;
    const double r = 1 / std::sqrt(ms + 1e-5);
    double mg = 0, mgx = 0;
    for (int j = 0; j < 4; ++j) {
      mg += dy[j] * gamma[j] / 4.0;
      mgx += dy[j] * gamma[j] * (x[j] - mu) * r / 4.0;
    }
    for (int j = 0; j < 4; ++j) {
      const double want = r * (dy[j] * gamma[j] - (ln ? mg : 0.0) - (x[j] - mu) * r * mgx);
      EXPECT_NEAR(dx[j], want, 8 * format_info(Precision::fp16).epsilon) << ln << " " << j;
    }
  }
}

TEST(RoundToArray, Fp16BranchFreeRoundingEqualsTheEncodingsRoundTrip) {
  // round_to (scalar and the backends' array loop) is a branch-free formulation of fp16's
  // rounding: checked against to_bits / from_bits (tested above) on every upper half-word with the low bits that decide a rounding
  // (the fp16 tie 0x1000 and its neighbours, 0, all ones) and random ones. (All 2^32 patterns
  // agreed when it was written: 29 s, too long for the suite.)
  Rng rng(53, stream::check);
  std::vector<float> v;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    for (uint32_t lo : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu, 0x2000u, 0x3000u, 0xffffu,
                        static_cast<uint32_t>(rng.next_u64() & 0xffffu)}) {
      const uint32_t u = (hi << 16) | lo;
      float x;
      std::memcpy(&x, &u, sizeof x);
      v.push_back(x);
    }
  }
  std::vector<float> w = v;
  round_to(Precision::fp16, w.data(), static_cast<int64_t>(w.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const float s = from_bits(Precision::fp16, to_bits(Precision::fp16, v[i]));  // the encoding's round trip
    uint32_t a, b;
    std::memcpy(&a, &s, sizeof a);
    std::memcpy(&b, &w[i], sizeof b);
    if (a != b && ++differ <= 5) ADD_FAILURE() << std::hex << "round(" << v[i] << ") bits " << a << " vs " << b;
  }
  EXPECT_EQ(differ, 0);
}
