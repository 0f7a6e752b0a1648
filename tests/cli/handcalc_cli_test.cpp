// End-to-end tests of `normlab handcalc [residual|placement]`: the built binary is run as a
// child process; text output must carry the worksheet numbers, --json must parse back to the
// same values, and every bad input must give exit code 2, one stderr line naming the option,
// and nothing on stdout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

using nlohmann::json;
using normlab::test::CliResult;
using normlab::test::describe;
using normlab::test::run_cli;
using normlab::test::split_lines;

namespace {

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// The line of `text` that contains `label`, or "" when there is none.
std::string line_with(const std::string& text, const std::string& label) {
  for (const auto& l : split_lines(text))
    if (contains(l, label)) return l;
  return "";
}

// The line whose text, after its indentation, starts with `prefix`; "" when there is none.
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (const auto& l : split_lines(text)) {
    auto b = l.find_first_not_of(' ');
    if (b != std::string::npos && l.compare(b, prefix.size(), prefix) == 0) return l;
  }
  return "";
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

CliResult ok(const std::vector<std::string>& args) {
  CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
  return r;
}

json ok_json(std::vector<std::string> args) {
  args.push_back("--json");
  CliResult r = ok(args);
  json j;
  // parse() throws on anything but exactly one document (plus whitespace).
  EXPECT_NO_THROW(j = json::parse(r.out)) << describe(r);
  return j;
}

void expect_near_vec(const json& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_TRUE(got.is_array()) << what;
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i].get<double>(), want[i], tol) << what << "[" << i << "]";
}

}  // namespace

// ---- the norm worksheet -------------------------------------------------------------------

TEST(CliHandcalc, DefaultWorksheetText) {
  CliResult r = ok({"handcalc"});
  const std::string& o = r.out;
  EXPECT_TRUE(contains(line_with(o, "mu = (1/d) sum x_i"), "1.0000")) << o;
  EXPECT_TRUE(contains(line_with(o, "var = (1/d) sum (x_i - mu)^2"), "2.5000")) << o;
  EXPECT_TRUE(contains(line_with(o, "sigma = sqrt(var)"), "1.5811")) << o;
  EXPECT_TRUE(contains(line_with(o, "y = gamma * xhat + beta"),
                       "[0.6325, -1.2649, -0.6325, 1.2649]")) << o;
  EXPECT_TRUE(contains(line_with(o, "ms = (1/d) sum x_i^2"), "3.5000")) << o;
  EXPECT_TRUE(contains(line_with(o, "rms = sqrt(ms)"), "1.8708")) << o;
  EXPECT_TRUE(contains(line_with(o, "r = sqrt(ms + eps)"), "1.8708")) << o;
  EXPECT_TRUE(contains(o, "[1.0690, -0.5345, 0.0000, 1.6036]")) << o;
  EXPECT_TRUE(contains(line_with(o, "reductions per row"), "2 (mean, then variance)")) << o;
  EXPECT_TRUE(contains(line_with(o, "reductions per row"), "1 (mean of squares)")) << o;
  EXPECT_TRUE(contains(line_with(o, "parameters"), "2d = 8")) << o;
  EXPECT_TRUE(contains(line_with(o, "parameters"), "d = 4")) << o;
  EXPECT_TRUE(contains(line_with(o, "output mean"), "0.0000")) << o;
  EXPECT_TRUE(contains(o, "0.5345")) << o;  // RMSNorm's output mean
  EXPECT_FALSE(contains(o, "-0.0000")) << o;
}

TEST(CliHandcalc, NormOptionAndDecimals) {
  CliResult r = ok({"handcalc", "--norm", "rmsnorm", "--x", "1.5,-2,0.5", "--decimals", "6"});
  EXPECT_FALSE(contains(r.out, "LayerNorm   y")) << r.out;
  const double ms = (1.5 * 1.5 + 4 + 0.25) / 3;
  EXPECT_TRUE(contains(line_with(r.out, "ms = (1/d) sum x_i^2"), fixed(ms, 6))) << r.out;
  EXPECT_TRUE(contains(r.out, fixed(1.5 / std::sqrt(ms + 1e-5), 6))) << r.out;

  CliResult ln = ok({"handcalc", "--norm", "layernorm", "--decimals", "0"});
  EXPECT_FALSE(contains(ln.out, "RMSNorm   y")) << ln.out;
  EXPECT_TRUE(contains(ln.out, "[1, -1, -1, 1]")) << ln.out;
}

// handcalc names a norm as train does (`handcalc --norm ln` once failed where train took it): each
// spelling gives the same worksheet as the canonical name.
TEST(CliHandcalc, NormTakesTrainsSpellings) {
  const std::string ln = ok({"handcalc", "--norm", "layernorm"}).out;
  EXPECT_EQ(ok({"handcalc", "--norm", "ln"}).out, ln);
  EXPECT_EQ(ok({"handcalc", "--norm", "LayerNorm"}).out, ln);
  EXPECT_EQ(ok({"handcalc", "placement", "--norm", "ln"}).out,
            ok({"handcalc", "placement", "--norm", "layernorm"}).out);
  EXPECT_EQ(ok({"handcalc", "--norm", "RMS"}).out, ok({"handcalc", "--norm", "rmsnorm"}).out);
}

TEST(CliHandcalc, JsonWorksheet) {
  json j = ok_json({"handcalc"});
  EXPECT_EQ(j["command"], "handcalc");
  EXPECT_EQ(j["form"], "norm");
  EXPECT_EQ(j["decimals"], 4);
  EXPECT_EQ(j["input"]["d"], 4);
  expect_near_vec(j["input"]["x"], {2, -1, 0, 3}, 0, "x");
  EXPECT_DOUBLE_EQ(j["input"]["eps"].get<double>(), 1e-5);
  const json& ln = j["layernorm"];
  EXPECT_DOUBLE_EQ(ln["mean"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(ln["var"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(ln["std"].get<double>(), std::sqrt(2.5));
  EXPECT_DOUBLE_EQ(ln["std_eps"].get<double>(), std::sqrt(2.5 + 1e-5));
  expect_near_vec(ln["xc"], {1, -2, -1, 2}, 0, "xc");
  expect_near_vec(ln["y"], {0.6325, -1.2649, -0.6325, 1.2649}, 5e-5, "layernorm.y");
  EXPECT_NEAR(ln["out_mean"].get<double>(), 0.0, 1e-15);
  EXPECT_EQ(ln["reductions"], 2);
  EXPECT_EQ(ln["params"], 8);
  const json& rms = j["rmsnorm"];
  EXPECT_DOUBLE_EQ(rms["mean_sq"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(rms["rms"].get<double>(), std::sqrt(3.5));
  EXPECT_DOUBLE_EQ(rms["r"].get<double>(), std::sqrt(3.5 + 1e-5));
  expect_near_vec(rms["y"], {1.0690, -0.5345, 0.0, 1.6036}, 5e-5, "rmsnorm.y");
  EXPECT_GT(rms["out_mean"].get<double>(), 0.5);
  EXPECT_EQ(rms["reductions"], 1);
  EXPECT_EQ(rms["params"], 4);

  json only = ok_json({"handcalc", "--norm", "rmsnorm"});
  EXPECT_FALSE(only.contains("layernorm"));
  EXPECT_FALSE(only["input"].contains("beta"));
  EXPECT_TRUE(only.contains("rmsnorm"));
}

TEST(CliHandcalc, JsonFlagBeforeAndAfterForms) {
  // --json is accepted on `handcalc` itself and on each form, before or after the form name.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"handcalc", "--json", "residual"}, {"handcalc", "residual", "--json"},
           {"handcalc", "placement", "--json", "-q"}, {"handcalc", "--x", "1,2", "residual", "--json"}}) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    json parsed;
    EXPECT_NO_THROW(parsed = json::parse(r.out)) << describe(r);
  }
}

// ---- residual -------------------------------------------------------------------------------

TEST(CliHandcalc, ResidualText) {
  CliResult r = ok({"handcalc", "residual"});
  EXPECT_TRUE(contains(r.out, "dL/dx = dL/dy + W^T dL/dy")) << r.out;
  EXPECT_TRUE(contains(r.out, "identity share")) << r.out;
  EXPECT_TRUE(contains(r.out, "||dL/dy|| / (||dL/dy|| + ||W^T dL/dy||)")) << r.out;
  EXPECT_TRUE(contains(r.out, "no residual")) << r.out;
  // Default dy = ones, default W: W^T 1 = column sums = [0.05, 0.03, 0.03, 0.03].
  EXPECT_TRUE(contains(line_starting(r.out, "F term "), "[0.0500, 0.0300, 0.0300, 0.0300]")) << r.out;
  EXPECT_TRUE(contains(line_starting(r.out, "gradient "), "[1.0500, 1.0300, 1.0300, 1.0300]")) << r.out;
}

TEST(CliHandcalc, ResidualJsonMatchesHandLoops) {
  json j = ok_json({"handcalc", "residual", "--x", "1,2,-1", "--w", "0.5,0,0.25,-1,0.1,0,0,2,0.3",
                    "--dy", "1,-1,0.5"});
  EXPECT_EQ(j["form"], "residual");
  const auto w = j["input"]["w"].get<std::vector<double>>();
  const auto dy = j["input"]["dy"].get<std::vector<double>>();
  const auto x = j["input"]["x"].get<std::vector<double>>();
  ASSERT_EQ(w.size(), 9u);
  EXPECT_FALSE(j["input"]["w_default"].get<bool>());
  std::vector<double> f(3, 0), dx(3), fx(3, 0);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k) {
      f[i] += w[k * 3 + i] * dy[k];
      fx[i] += w[i * 3 + k] * x[k];
    }
  for (int i = 0; i < 3; ++i) dx[i] = dy[i] + f[i];
  const json& b = j["backward"];
  expect_near_vec(b["identity"], dy, 0, "identity");
  expect_near_vec(b["f_term"], f, 1e-14, "f_term");
  expect_near_vec(b["dx"], dx, 1e-14, "dx");
  expect_near_vec(b["no_residual"], f, 1e-14, "no_residual");
  expect_near_vec(j["forward"]["fx"], fx, 1e-14, "fx");
  const double ni = std::sqrt(1 + 1 + 0.25);
  double nf = 0;
  for (double e : f) nf += e * e;
  nf = std::sqrt(nf);
  EXPECT_NEAR(b["norm_identity"].get<double>(), ni, 1e-14);
  EXPECT_NEAR(b["norm_f_term"].get<double>(), nf, 1e-14);
  EXPECT_NEAR(b["identity_share"].get<double>(), ni / (ni + nf), 1e-14);
  EXPECT_NEAR(j["w_bound"].get<double>(), 2.3, 1e-14);  // row 3: 0 + 2 + 0.3
}

TEST(CliHandcalc, ResidualZeroGradientShareDefined) {
  json j = ok_json({"handcalc", "residual", "--dy", "0,0,0,0"});
  EXPECT_DOUBLE_EQ(j["backward"]["identity_share"].get<double>(), 0.5);
  CliResult r = ok({"handcalc", "residual", "--dy", "0,0,0,0"});
  EXPECT_TRUE(contains(r.out, "defined as 0.5")) << r.out;
}

// ---- placement ------------------------------------------------------------------------------

TEST(CliHandcalc, PlacementText) {
  CliResult r = ok({"handcalc", "placement"});
  EXPECT_TRUE(contains(r.out, "Pre-LN   y = x + F(N(x))")) << r.out;
  EXPECT_TRUE(contains(r.out, "Post-LN   y = N(x + F(x))")) << r.out;
  EXPECT_TRUE(contains(r.out, "sqrt(d)")) << r.out;
  CliResult rms = ok({"handcalc", "placement", "--norm", "rmsnorm", "--x", "20,-10,0,30"});
  EXPECT_TRUE(contains(rms.out, "N = RMSNorm")) << rms.out;
}

TEST(CliHandcalc, PlacementJsonNorms) {
  for (const char* norm : {"layernorm", "rmsnorm"}) {
    json j = ok_json({"handcalc", "placement", "--norm", norm, "--x", "20,-10,0,30,5"});
    EXPECT_EQ(j["form"], "placement");
    EXPECT_EQ(j["input"]["norm"], norm);
    EXPECT_DOUBLE_EQ(j["sqrt_d"].get<double>(), std::sqrt(5.0));
    EXPECT_NEAR(j["post"]["y_norm"].get<double>(), std::sqrt(5.0), 1e-6) << norm;
    EXPECT_GT(j["pre"]["y_norm"].get<double>(), 10 * std::sqrt(5.0)) << norm;
    EXPECT_EQ(j["pre"]["n"]["norm"], norm);
    const auto x = j["input"]["x"].get<std::vector<double>>();
    const auto f = j["post"]["f"].get<std::vector<double>>();
    const auto s = j["post"]["s"].get<std::vector<double>>();
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_DOUBLE_EQ(s[i], x[i] + f[i]);
  }
}

// ---- d = 1 and help ---------------------------------------------------------------------------

TEST(CliHandcalc, DimensionOneEverywhere) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"handcalc", "--x", "5"}, {"handcalc", "residual", "--x", "5"},
           {"handcalc", "placement", "--x", "5"}, {"handcalc", "placement", "--x", "5", "--norm", "rmsnorm"},
           {"handcalc", "--x", "0", "--norm", "rmsnorm"}}) {
    CliResult r = ok(args);
    EXPECT_FALSE(contains(r.out, "nan")) << describe(r);
    EXPECT_FALSE(contains(r.out, "inf")) << describe(r);
  }
  json j = ok_json({"handcalc", "--x", "5", "--beta", "0.25"});
  EXPECT_DOUBLE_EQ(j["layernorm"]["y"][0].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["layernorm"]["out_std"].get<double>(), 0.0);
}

TEST(CliHandcalc, PrecisionWorksheetTextAndJson) {
  // The all-equal case in fp16: LayerNorm's composite breaks (eps 1e-12 rounds to 0), RMSNorm's
  // does not; the text names the cause and the JSON carries the same verdicts.
  CliResult r = ok({"handcalc", "--precision", "fp16", "--case", "all-equal"});
  EXPECT_TRUE(contains(r.out, "BROKEN: var is exactly 0 and eps = 1e-12 rounds to 0")) << r.out;
  EXPECT_TRUE(contains(r.out, "cause: eps_zero")) << r.out;
  EXPECT_TRUE(contains(line_starting(r.out, "rstd "), "inf")) << r.out;
  const json j = ok_json({"handcalc", "--precision", "fp16", "--case", "all-equal"});
  ASSERT_EQ(j.at("norms").size(), 2u);
  EXPECT_EQ(j.at("form"), "precision");
  EXPECT_EQ(j.at("norms").at(0).at("breakdown"), "eps_zero");
  EXPECT_EQ(j.at("norms").at(1).at("breakdown"), "none");
  // --norm-compute fp32 keeps eps in float32: no breakdown.
  const json f = ok_json({"handcalc", "--precision", "fp16", "--norm-compute", "fp32", "--case",
                          "all-equal", "--norm", "ln"});
  EXPECT_EQ(f.at("norms").at(0).at("breakdown"), "none");
  EXPECT_EQ(f.at("norms").at(0).at("steps").back().at("stored").at(0), 0.0);
}

TEST(CliHandcalc, HelpHasExamples) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"handcalc", "--help"}, {"handcalc", "residual", "--help"}, {"handcalc", "placement", "--help"}}) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "Examples:")) << describe(r);
    EXPECT_TRUE(contains(r.out, "normlab handcalc")) << describe(r);
  }
  CliResult r = run_cli({"handcalc", "residual", "--help"});
  EXPECT_TRUE(contains(r.out, "identity share = ||dL/dy|| / (||dL/dy|| + ||W^T dL/dy||)")) << r.out;
}

// ---- bad input --------------------------------------------------------------------------------

struct BadCase {
  std::vector<std::string> args;
  std::string option;  // must appear in the message
  std::string value;   // must appear too ("" = not checked)
};

TEST(CliHandcalc, BadInputIsOneLineExitTwoEmptyStdout) {
  const std::vector<BadCase> cases = {
      {{"handcalc", "--x", ""}, "--x", ""},
      {{"handcalc", "--x", "1,abc,3"}, "--x", "abc"},
      {{"handcalc", "--x", "1,,3"}, "--x", "1,,3"},
      {{"handcalc", "--x", "nan"}, "--x", "nan"},
      {{"handcalc", "--x", "1,inf"}, "--x", "inf"},
      {{"handcalc", "--x", "1,-inf,2"}, "--x", "-inf"},
      {{"handcalc", "--x", "1e999"}, "--x", "1e999"},
      {{"handcalc", "--eps", "0"}, "--eps", "0"},
      {{"handcalc", "--eps=-1e-5"}, "--eps", "-1e-05"},
      {{"handcalc", "--eps", "small"}, "--eps", "small"},
      {{"handcalc", "--eps", "nan"}, "--eps", "nan"},
      {{"handcalc", "--gamma", "1,2"}, "--gamma", "2 values"},
      {{"handcalc", "--beta", "0,0,0,0,0"}, "--beta", "5 values"},
      {{"handcalc", "--gamma", "1,x,1,1"}, "--gamma", "x"},
      {{"handcalc", "--norm", "rmsnorm", "--beta", "0,0,0,0"}, "--beta", "rmsnorm"},
      {{"handcalc", "--norm", "batchnorm"}, "--norm", "batchnorm"},
      {{"handcalc", "--decimals", "18"}, "--decimals", "18"},
      {{"handcalc", "--decimals", "-1"}, "--decimals", "-1"},
      {{"handcalc", "--decimals", "four"}, "--decimals", "four"},
      {{"handcalc", "residual", "--w", "1,2,3,4,5,6,7,8,9,10,11,12"}, "--w", "12 values"},
      {{"handcalc", "residual", "--dy", "1,2"}, "--dy", "2 values"},
      {{"handcalc", "residual", "--dy", "1,nan,1,1"}, "--dy", "nan"},
      {{"handcalc", "residual", "--x", "1,2", "--w", "1"}, "--w", "2x2"},
      {{"handcalc", "residual", "--eps", "1e-3"}, "--eps", "residual"},
      {{"handcalc", "residual", "--decimals", "99"}, "--decimals", "99"},
      {{"handcalc", "--x", "1,2", "residual", "--x", "3,4"}, "--x", "twice"},
      {{"handcalc", "placement", "--norm", "both"}, "--norm", "both"},
      {{"handcalc", "placement", "--norm", "rmsnorm", "--beta", "1,1,1,1"}, "--beta", "rmsnorm"},
      {{"handcalc", "placement", "--w", "1,2,3"}, "--w", "3 values"},
      {{"handcalc", "placement", "--gamma", "1"}, "--gamma", "1 value"},
      {{"handcalc", "placement", "--eps", "-1"}, "--eps", "-1"},
      {{"handcalc", "placement", "--x", "1e200,-1e200"}, "too large", ""},
  };
  for (const auto& c : cases) {
    for (bool json_flag : {false, true}) {
      auto args = c.args;
      if (json_flag) args.push_back("--json");
      CliResult r = run_cli(args);
      EXPECT_EQ(r.exit_code, 2) << describe(r);
      EXPECT_EQ(r.out, "") << describe(r);
      auto lines = split_lines(r.err);
      ASSERT_EQ(lines.size(), 1u) << describe(r);
      EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << describe(r);
      EXPECT_TRUE(contains(lines[0], c.option)) << describe(r);
      if (!c.value.empty()) {
        EXPECT_TRUE(contains(lines[0], c.value)) << describe(r);
      }
    }
  }
}

TEST(CliHandcalc, UnknownOptionIsACli11Error) {
  CliResult r = run_cli({"handcalc", "--bogus", "1"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
}
