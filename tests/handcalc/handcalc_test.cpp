// Unit tests of the handcalc library (include/handcalc/normlab/handcalc.h): the worksheet's example
// values, the same quantities recomputed by other routes (Welford statistics, finite
// differences, explicit transposes, power iteration), d = 1, and the input parser/validators.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/error.h"
#include "normlab/handcalc.h"

namespace hc = normlab::handcalc;
using normlab::UsageError;

namespace {

hc::NormOptions norm_x(const std::string& x) {
  hc::NormOptions o;
  o.x = x;
  return o;
}

// Deterministic test vectors without the project's RNG: a 64-bit LCG mapped to [-scale, scale].
std::vector<double> lcg_vector(std::size_t d, uint64_t seed, double scale = 3.0) {
  std::vector<double> v(d);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& e : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    e = scale * (static_cast<double>(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return v;
}

// Welford's one-pass mean and population variance: a different route from the worksheet's two passes.
void welford(const std::vector<double>& v, double& mean, double& var) {
  double m = 0, m2 = 0;
  std::size_t n = 0;
  for (double x : v) {
    ++n;
    double delta = x - m;
    m += delta / static_cast<double>(n);
    m2 += delta * (x - m);
  }
  mean = m;
  var = m2 / static_cast<double>(n);
}

// Expects a UsageError whose message contains every string in `parts`.
template <typename F>
void expect_usage_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected a UsageError containing '" << parts.front() << "'";
  } catch (const UsageError& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line only: " << msg;
  }
}

const std::vector<double> kX = {2, -1, 0, 3};
const std::vector<double> kOnes(4, 1.0), kZeros(4, 0.0);

}  // namespace

// ---- the worksheet's example ------------------------------------------------------------

TEST(HandcalcLayerNorm, WorksheetValues) {
  auto ws = hc::layernorm_worksheet(kX, kOnes, kZeros, 1e-5);
  EXPECT_DOUBLE_EQ(ws.mean, 1.0);
  EXPECT_DOUBLE_EQ(ws.var, 2.5);
  EXPECT_DOUBLE_EQ(ws.std_dev, std::sqrt(2.5));
  EXPECT_DOUBLE_EQ(ws.std_eps, std::sqrt(2.5 + 1e-5));
  EXPECT_EQ(ws.xc, (std::vector<double>{1, -2, -1, 2}));
  EXPECT_EQ(ws.xc_sq, (std::vector<double>{1, 4, 1, 4}));
  const std::vector<double> expected = {0.6325, -1.2649, -0.6325, 1.2649};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(ws.xhat[i], expected[i], 5e-5) << "i=" << i;
    EXPECT_NEAR(ws.y[i], expected[i], 5e-5) << "i=" << i;
  }
  EXPECT_EQ(hc::format_vector(ws.y, 4), "[0.6325, -1.2649, -0.6325, 1.2649]");
  EXPECT_EQ(hc::format_number(ws.mean, 4), "1.0000");
  EXPECT_EQ(hc::format_number(ws.var, 4), "2.5000");
  EXPECT_EQ(hc::format_number(ws.out_mean, 4), "0.0000");
  EXPECT_EQ(ws.reductions, 2);
  EXPECT_EQ(ws.params, 8u);
}

TEST(HandcalcRMSNorm, WorksheetValues) {
  auto ws = hc::rmsnorm_worksheet(kX, kOnes, 1e-5);
  EXPECT_DOUBLE_EQ(ws.mean_sq, 3.5);
  EXPECT_DOUBLE_EQ(ws.rms, std::sqrt(3.5));
  EXPECT_EQ(hc::format_number(ws.rms, 4), "1.8708");
  EXPECT_DOUBLE_EQ(ws.r, std::sqrt(3.5 + 1e-5));
  EXPECT_GT(ws.r, ws.rms);  // eps is inside the root
  EXPECT_EQ(hc::format_vector(ws.y, 4), "[1.0690, -0.5345, 0.0000, 1.6036]");
  EXPECT_NE(hc::format_number(ws.out_mean, 4), "0.0000");  // RMSNorm keeps the mean
  EXPECT_EQ(ws.reductions, 1);
  EXPECT_EQ(ws.params, 4u);
}

TEST(HandcalcNorm, DefaultOptionsGiveTheWorksheet) {
  auto ws = hc::norm_worksheet_from_options({});
  ASSERT_TRUE(ws.layernorm && ws.rmsnorm);
  EXPECT_EQ(ws.layernorm->x, kX);
  EXPECT_DOUBLE_EQ(ws.layernorm->eps, 1e-5);
  EXPECT_EQ(ws.layernorm->gamma, kOnes);
  EXPECT_EQ(ws.layernorm->beta, kZeros);
  EXPECT_TRUE(ws.gamma_default && ws.beta_default);
  std::string text = hc::render_text(ws, 4);
  EXPECT_NE(text.find("[0.6325, -1.2649, -0.6325, 1.2649]"), std::string::npos) << text;
  EXPECT_NE(text.find("[1.0690, -0.5345, 0.0000, 1.6036]"), std::string::npos) << text;
  EXPECT_EQ(text.find("-0.0000"), std::string::npos) << text;
}

// ---- independent checks -----------------------------------------------------------------

TEST(HandcalcLayerNorm, MatchesWelfordAndNormalizes) {
  for (std::size_t d : {2u, 3u, 7u, 16u, 65u}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      auto x = lcg_vector(d, seed * 31 + d);
      const double eps = 1e-5;
      auto ws = hc::layernorm_worksheet(x, std::vector<double>(d, 1.0),
                                        std::vector<double>(d, 0.0), eps);
      double m, v;
      welford(x, m, v);
      EXPECT_NEAR(ws.mean, m, 1e-12);
      EXPECT_NEAR(ws.var, v, 1e-12 * (1 + v));
      double ym, yv;
      welford(ws.y, ym, yv);
      EXPECT_NEAR(ym, 0.0, 1e-12) << "d=" << d;
      // var(xhat) = var / (var + eps) exactly; ~1 because var >> eps here.
      EXPECT_NEAR(yv, v / (v + eps), 1e-12) << "d=" << d;
      EXPECT_NEAR(yv, 1.0, 1e-4) << "d=" << d;
      EXPECT_NEAR(ws.out_std, std::sqrt(yv), 1e-12);
      EXPECT_NEAR(ws.xhat_norm, std::sqrt(d * v / (v + eps)), 1e-10);
    }
  }
}

TEST(HandcalcLayerNorm, GammaBetaAffine) {
  auto x = lcg_vector(5, 7);
  std::vector<double> gamma = {1, 2, -0.5, 0, 3}, beta = {0.1, -1, 0, 2, 0.5};
  auto ws = hc::layernorm_worksheet(x, gamma, beta, 1e-3);
  double m, v;
  welford(x, m, v);
  for (std::size_t i = 0; i < 5; ++i) {
    double xhat = (x[i] - m) / std::sqrt(v + 1e-3);
    EXPECT_NEAR(ws.xhat[i], xhat, 1e-12);
    EXPECT_NEAR(ws.y[i], gamma[i] * xhat + beta[i], 1e-12);
  }
}

TEST(HandcalcRMSNorm, UnitRmsWithSmallEps) {
  for (std::size_t d : {1u, 2u, 5u, 64u}) {
    auto x = lcg_vector(d, 100 + d);
    auto ws = hc::rmsnorm_worksheet(x, std::vector<double>(d, 1.0), 1e-12);
    double ss = 0;
    for (double e : ws.y) ss += e * e;
    EXPECT_NEAR(std::sqrt(ss / static_cast<double>(d)), 1.0, 1e-9) << "d=" << d;
    EXPECT_NEAR(ws.out_rms, 1.0, 1e-9);
    // Direction is kept: y is a positive multiple of x.
    for (std::size_t i = 0; i < d; ++i) EXPECT_NEAR(ws.y[i] * ws.r, x[i], 1e-12);
  }
}

TEST(HandcalcRMSNorm, GammaScales) {
  std::vector<double> x = {1, -2, 2}, gamma = {2, 0.5, -1};
  auto ws = hc::rmsnorm_worksheet(x, gamma, 1e-6);
  const double r = std::sqrt((1.0 + 4 + 4) / 3 + 1e-6);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(ws.y[i], gamma[i] * x[i] / r, 1e-14);
}

TEST(HandcalcNorm, DimensionOne) {
  auto ln = hc::layernorm_worksheet({5.0}, {1.0}, {0.25}, 1e-5);
  EXPECT_DOUBLE_EQ(ln.mean, 5.0);
  EXPECT_DOUBLE_EQ(ln.var, 0.0);
  EXPECT_DOUBLE_EQ(ln.xhat[0], 0.0);
  EXPECT_DOUBLE_EQ(ln.y[0], 0.25);  // y = beta
  EXPECT_DOUBLE_EQ(ln.std_eps, std::sqrt(1e-5));
  EXPECT_DOUBLE_EQ(ln.out_std, 0.0);
  EXPECT_TRUE(std::isfinite(ln.rstd));

  auto rms = hc::rmsnorm_worksheet({3.0}, {1.0}, 1e-5);
  EXPECT_NEAR(rms.y[0], 3.0 / std::sqrt(9 + 1e-5), 1e-15);
  EXPECT_DOUBLE_EQ(rms.out_std, 0.0);
  auto zero = hc::rmsnorm_worksheet({0.0}, {1.0}, 1e-5);
  EXPECT_DOUBLE_EQ(zero.y[0], 0.0);
  EXPECT_TRUE(std::isfinite(zero.inv_r));

  auto res = hc::residual_worksheet({2.0}, {0.5}, {1.0});
  EXPECT_DOUBLE_EQ(res.dx[0], 1.5);
  auto place = hc::placement_worksheet(hc::NormKind::layernorm, {4.0}, hc::default_w(1), {1.0},
                                       {0.0}, 1e-5);
  EXPECT_DOUBLE_EQ(place.post_y_norm, 0.0);  // LayerNorm of one value is beta
  EXPECT_DOUBLE_EQ(place.pre_y[0], 4.0);     // x + W * 0

  // Every text form renders without nan/inf.
  for (const std::string& text :
       {hc::render_text(hc::norm_worksheet_from_options(norm_x("7")), 4),
        hc::render_text(res, 4), hc::render_text(place, 4)}) {
    EXPECT_EQ(text.find("nan"), std::string::npos) << text;
    EXPECT_EQ(text.find("inf"), std::string::npos) << text;
  }
}

TEST(HandcalcNorm, ConstantVectorLayerNormIsBeta) {
  auto ws = hc::layernorm_worksheet({2, 2, 2}, {1, 1, 1}, {0, 0, 0}, 1e-5);
  for (double y : ws.y) EXPECT_DOUBLE_EQ(y, 0.0);
}

// ---- residual ---------------------------------------------------------------------------

TEST(HandcalcResidual, GradientIsDyPlusWTransposeDy) {
  const std::size_t d = 4;
  auto x = lcg_vector(d, 5);
  auto w = lcg_vector(d * d, 6, 0.5);
  auto dy = lcg_vector(d, 7);
  auto ws = hc::residual_worksheet(x, w, dy);
  // By hand: build W^T explicitly, then multiply by rows.
  std::vector<double> wt(d * d);
  for (std::size_t i = 0; i < d; ++i)
    for (std::size_t j = 0; j < d; ++j) wt[j * d + i] = w[i * d + j];
  for (std::size_t i = 0; i < d; ++i) {
    double f = 0, fx = 0;
    for (std::size_t k = 0; k < d; ++k) {
      f += wt[i * d + k] * dy[k];
      fx += w[i * d + k] * x[k];
    }
    EXPECT_NEAR(ws.grad_f[i], f, 1e-14);
    EXPECT_NEAR(ws.dx[i], dy[i] + f, 1e-14);
    EXPECT_DOUBLE_EQ(ws.grad_identity[i], dy[i]);
    EXPECT_NEAR(ws.y[i], x[i] + fx, 1e-14);
  }
  EXPECT_EQ(ws.dx_no_residual, ws.grad_f);
  EXPECT_NEAR(ws.identity_share, ws.norm_identity / (ws.norm_identity + ws.norm_f), 1e-15);
}

TEST(HandcalcResidual, GradientMatchesFiniteDifferences) {
  // L(x) = sum_i dy_i * y_i(x); central differences of L give dL/dx without any transpose.
  const std::size_t d = 3;
  auto x = lcg_vector(d, 11);
  auto w = lcg_vector(d * d, 12, 0.3);
  auto dy = lcg_vector(d, 13);
  auto loss = [&](const std::vector<double>& v) {
    auto r = hc::residual_worksheet(v, w, dy);
    double l = 0;
    for (std::size_t i = 0; i < d; ++i) l += dy[i] * r.y[i];
    return l;
  };
  auto ws = hc::residual_worksheet(x, w, dy);
  const double h = 1e-6;
  for (std::size_t j = 0; j < d; ++j) {
    auto xp = x, xm = x;
    xp[j] += h;
    xm[j] -= h;
    EXPECT_NEAR(ws.dx[j], (loss(xp) - loss(xm)) / (2 * h), 1e-8) << "j=" << j;
  }
}

TEST(HandcalcResidual, DefaultsAndShareEdgeCases) {
  auto ws = hc::residual_worksheet_from_options({});
  EXPECT_EQ(ws.d, 4u);
  EXPECT_EQ(ws.dy, kOnes);
  EXPECT_EQ(ws.w, hc::default_w(4));
  EXPECT_TRUE(ws.w_default && ws.dy_default);
  EXPECT_GT(ws.identity_share, 0.9);  // a small W leaves the gradient mostly highway
  EXPECT_LE(ws.identity_share, 1.0);

  auto zero_dy = hc::residual_worksheet(kX, hc::default_w(4), kZeros);
  EXPECT_DOUBLE_EQ(zero_dy.identity_share, 0.5);  // documented convention when both terms are 0
  auto zero_w = hc::residual_worksheet(kX, std::vector<double>(16, 0.0), kOnes);
  EXPECT_DOUBLE_EQ(zero_w.identity_share, 1.0);
}

TEST(HandcalcResidual, DefaultWEigenvaluesBelowOneTenth) {
  for (std::size_t d = 1; d <= 64; d = d < 8 ? d + 1 : d * 2) {
    auto w = hc::default_w(d);
    ASSERT_EQ(w.size(), d * d);
    // Gershgorin: every eigenvalue lies in a disc |z - W_ii| <= sum_{j != i} |W_ij|, so
    // |lambda| <= max_i sum_j |W_ij|.
    EXPECT_LT(hc::gershgorin_bound(w, d), 0.1) << "d=" << d;
    // Spectral norm (>= every |eigenvalue|) by power iteration on W^T W.
    std::vector<double> v(d, 1.0);
    double sigma2 = 0;
    for (int it = 0; it < 500; ++it) {
      auto u = hc::matvec_transposed(w, hc::matvec(w, v));
      sigma2 = hc::norm2(u) / hc::norm2(v);
      double n = hc::norm2(u);
      for (std::size_t i = 0; i < d; ++i) v[i] = u[i] / n;
    }
    EXPECT_LT(std::sqrt(sigma2), 0.1) << "d=" << d;
    // Upper triangular: the eigenvalues are the diagonal.
    for (std::size_t i = 0; i < d; ++i) {
      EXPECT_LT(std::fabs(w[i * d + i]), 0.1);
      for (std::size_t j = 0; j < i; ++j) EXPECT_EQ(w[i * d + j], 0.0);
    }
    if (d >= 2) {
      EXPECT_NE(w[0 * d + 1], w[1 * d + 0]) << "W should not be symmetric";
    }
  }
}

// ---- placement --------------------------------------------------------------------------

TEST(HandcalcPlacement, PostNormIsSqrtDPreNormIsNot) {
  for (auto norm : {hc::NormKind::layernorm, hc::NormKind::rmsnorm}) {
    for (std::size_t d : {2u, 4u, 9u}) {
      for (double scale : {1.0, 100.0}) {
        auto x = lcg_vector(d, 40 + d, scale);
        auto w = hc::default_w(d);
        auto ws = hc::placement_worksheet(norm, x, w, std::vector<double>(d, 1.0),
                                          std::vector<double>(d, 0.0), 1e-5);
        EXPECT_NEAR(ws.post_y_norm, std::sqrt(static_cast<double>(d)), 1e-3) << "d=" << d;
        EXPECT_DOUBLE_EQ(ws.sqrt_d, std::sqrt(static_cast<double>(d)));
        // Pre-LN by hand: y = x + W N(x), N recomputed here.
        std::vector<double> n(d);
        double m = 0, s2 = 0;
        for (double e : x) m += e;
        m /= static_cast<double>(d);
        if (norm == hc::NormKind::rmsnorm) m = 0;  // RMSNorm does not center
        for (double e : x) s2 += (e - m) * (e - m);
        const double denom = std::sqrt(s2 / static_cast<double>(d) + 1e-5);
        for (std::size_t i = 0; i < d; ++i) n[i] = (x[i] - m) / denom;
        for (std::size_t i = 0; i < d; ++i) {
          double f = 0;
          for (std::size_t j = 0; j < d; ++j) f += w[i * d + j] * n[j];
          EXPECT_NEAR(ws.pre_y[i], x[i] + f, 1e-10);
        }
        if (scale == 100.0) {
          EXPECT_GT(ws.pre_y_norm, 10 * ws.sqrt_d);  // grows with ||x||
        }
      }
    }
  }
}

TEST(HandcalcPlacement, PostIsNormOfResidualSum) {
  auto ws = hc::placement_worksheet_from_options({});
  EXPECT_EQ(ws.norm, hc::NormKind::layernorm);
  auto direct = hc::layernorm_worksheet(ws.post_s, kOnes, kZeros, 1e-5);
  EXPECT_EQ(ws.post_y, direct.y);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(ws.post_s[i], kX[i] + ws.post_f[i]);
}

// ---- parsing and validation -------------------------------------------------------------

TEST(HandcalcParse, Vectors) {
  EXPECT_EQ(hc::parse_vector("--x", "1.5,-2,3"), (std::vector<double>{1.5, -2, 3}));
  EXPECT_EQ(hc::parse_vector("--x", " 1, 2 ,+3,1e2"), (std::vector<double>{1, 2, 3, 100}));
  EXPECT_EQ(hc::parse_vector("--x", "-.5"), (std::vector<double>{-0.5}));
  expect_usage_error([] { hc::parse_vector("--x", ""); }, {"--x", "empty"});
  expect_usage_error([] { hc::parse_vector("--x", "  "); }, {"--x", "empty"});
  expect_usage_error([] { hc::parse_vector("--x", "1,,3"); }, {"--x", "1,,3", "empty"});
  expect_usage_error([] { hc::parse_vector("--x", "1,"); }, {"--x", "empty"});
  expect_usage_error([] { hc::parse_vector("--gamma", "1,abc,3"); }, {"--gamma", "abc"});
  expect_usage_error([] { hc::parse_vector("--x", "1 2"); }, {"--x", "1 2"});
  expect_usage_error([] { hc::parse_vector("--x", "0x10"); }, {"--x", "0x10"});
  expect_usage_error([] { hc::parse_vector("--x", "+-1"); }, {"--x", "+-1"});
  expect_usage_error([] { hc::parse_vector("--x", "1,nan"); }, {"--x", "nan", "finite"});
  expect_usage_error([] { hc::parse_vector("--x", "inf"); }, {"--x", "inf"});
  expect_usage_error([] { hc::parse_vector("--dy", "-Infinity"); }, {"--dy", "-Infinity"});
  expect_usage_error([] { hc::parse_vector("--w", "1e999"); }, {"--w", "1e999"});
}

TEST(HandcalcParse, ScalarsDecimalsNorm) {
  EXPECT_DOUBLE_EQ(hc::parse_scalar("--eps", "1e-3"), 1e-3);
  expect_usage_error([] { hc::parse_scalar("--eps", "1,2"); }, {"--eps", "1,2"});
  expect_usage_error([] { hc::parse_scalar("--eps", "nan"); }, {"--eps", "nan"});
  expect_usage_error([] { hc::validate_eps("--eps", 0.0); }, {"--eps", "0"});
  expect_usage_error([] { hc::validate_eps("--eps", -1e-5); }, {"--eps", "-1e-05"});
  EXPECT_EQ(hc::parse_decimals("--decimals", "0"), 0);
  EXPECT_EQ(hc::parse_decimals("--decimals", "17"), 17);
  expect_usage_error([] { hc::parse_decimals("--decimals", "18"); }, {"--decimals", "18"});
  expect_usage_error([] { hc::parse_decimals("--decimals", "-1"); }, {"--decimals", "-1"});
  expect_usage_error([] { hc::parse_decimals("--decimals", "4.5"); }, {"--decimals", "4.5"});
  expect_usage_error([] { hc::parse_decimals("--decimals", ""); }, {"--decimals"});
  EXPECT_EQ(hc::parse_norm("--norm", "RMSNorm", true), hc::NormKind::rmsnorm);
  // NormKind's own spellings, as train accepts them (handcalc once knew only the full names).
  EXPECT_EQ(hc::parse_norm("--norm", "ln", false), hc::NormKind::layernorm);
  EXPECT_EQ(hc::parse_norm("--norm", " LN ", true), hc::NormKind::layernorm);
  EXPECT_EQ(hc::parse_norm("--norm", "rms", true), hc::NormKind::rmsnorm);
  EXPECT_EQ(hc::parse_norm("--norm", "BOTH", true), std::nullopt);
  expect_usage_error([] { hc::parse_norm("--norm", "none", true); }, {"--norm", "none"});
  EXPECT_FALSE(hc::parse_norm("--norm", "both", true).has_value());
  expect_usage_error([] { hc::parse_norm("--norm", "both", false); }, {"--norm", "both"});
  expect_usage_error([] { hc::parse_norm("--norm", "batchnorm", true); }, {"--norm", "batchnorm"});
}

TEST(HandcalcParse, ShapesNameTheOption) {
  expect_usage_error([] { hc::validate_w("--w", std::vector<double>(12, 0.0), 4); },
                     {"--w has 12 values", "4x4", "x of size 4 (d_model)", "R^4 to R^4", "16"});
  expect_usage_error([] { hc::validate_length("--gamma", {1, 2}, 4); }, {"--gamma", "2 values", "d = 4"});
  expect_usage_error(
      [] { hc::norm_worksheet_from_options({std::nullopt, std::nullopt, std::nullopt,
                                            std::string("0,0,0,0"), std::string("rmsnorm")}); },
      {"--beta", "rmsnorm"});
  expect_usage_error(
      [] { hc::placement_worksheet_from_options({std::nullopt, std::nullopt, std::nullopt,
                                                 std::nullopt, std::string("1,2"), std::nullopt}); },
      {"--beta"});
  expect_usage_error(
      [] { hc::residual_worksheet_from_options({std::string("1,2"), std::nullopt,
                                                std::string("1,2,3")}); },
      {"--dy", "3 values", "d = 2"});
  expect_usage_error(
      [] { hc::residual_worksheet_from_options({std::string("1,2"), std::string("1,2,3"),
                                                std::nullopt}); },
      {"--w has 3 values", "2x2"});
}

TEST(HandcalcParse, MatrixFormsLimitD) {
  std::string big = "1";
  for (std::size_t i = 1; i <= hc::kMaxMatrixDim; ++i) big += ",1";
  hc::ResidualOptions o;
  o.x = big;
  expect_usage_error([&] { hc::residual_worksheet_from_options(o); }, {"--x", "1025 values", "1024"});
  hc::PlacementOptions p;
  p.x = big;
  expect_usage_error([&] { hc::placement_worksheet_from_options(p); }, {"--x", "1024"});
  EXPECT_EQ(hc::norm_worksheet_from_options(norm_x(big)).layernorm->d, hc::kMaxMatrixDim + 1);
}

TEST(HandcalcParse, OverflowIsAUsageError) {
  expect_usage_error([] { hc::norm_worksheet_from_options(norm_x("1e200,-1e200")); },
                     {"too large"});
}

TEST(HandcalcFormat, NoNegativeZero) {
  EXPECT_EQ(hc::format_number(-1e-17, 4), "0.0000");
  EXPECT_EQ(hc::format_number(-0.0, 2), "0.00");
  EXPECT_EQ(hc::format_number(-0.00004, 4), "0.0000");
  EXPECT_EQ(hc::format_number(-0.00005001, 4), "-0.0001");
  EXPECT_EQ(hc::format_number(-2.5, 0), "-2");  // round half to even, as printf
  EXPECT_EQ(hc::format_number(1.25, 1), "1.2");
}
