// handcalc's low-precision worksheet against values derived by hand (the derivations are in the
// comments: spacing of the format at the value, then the nearest grid point), and each built-in
// case against the breakdown it exists to show.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "normlab/error.h"
#include "normlab/handcalc_precision.h"

using namespace normlab;
namespace hc = normlab::handcalc;

namespace {

const hc::PrecisionStep& step(const hc::PrecisionNormWorksheet& ws, const std::string& name) {
  for (const hc::PrecisionStep& s : ws.steps)
    if (s.name == name) return s;
  throw std::runtime_error("no step " + name);
}

hc::PrecisionWorksheet sheet(hc::PrecisionOptions o) { return hc::precision_worksheet_from_options(o); }

hc::PrecisionNormWorksheet one(const char* norm, const char* precision, const char* compute,
                               const char* case_name) {
  hc::PrecisionOptions o;
  o.norm = norm;
  o.precision = precision;
  if (compute) o.norm_compute = compute;
  if (case_name) o.case_name = case_name;
  hc::PrecisionWorksheet ws = sheet(o);
  EXPECT_EQ(ws.norms.size(), 1u);
  return ws.norms.at(0);
}

}  // namespace

TEST(HandcalcPrecision, WorksheetRowInFp16ByHand) {
  const hc::PrecisionNormWorksheet ln = one("layernorm", "fp16", nullptr, nullptr);
  // mean 1, var 2.5 exactly; var + eps = 2.50001 lies within half of fp16's spacing at 2.5
  // (2^-9) of 2.5, so it is stored as 2.5. torch.rsqrt rounds twice: sqrt(2.5) = 1.5811388,
  // spacing 2^-10 in [1, 2): 1619.09 -> 1619 * 2^-10 = 1.5810546875; 1 / that = 0.6324892,
  // spacing 2^-11 in [0.5, 1): 1295.34 -> 1295 * 2^-11 = 0.63232421875.
  EXPECT_EQ(step(ln, "var").values[0].stored, 2.5);
  EXPECT_EQ(step(ln, "var + eps").values[0].stored, 2.5);
  EXPECT_EQ(step(ln, "rstd").values[0].stored, 1295.0 / 2048.0);
  // xhat = xc * rstd: 1 * 0.63232421875 exact; -2 * it exact (a power of two).
  EXPECT_EQ(step(ln, "y").values[0].stored, 1295.0 / 2048.0);
  EXPECT_EQ(step(ln, "y").values[1].stored, -1295.0 / 1024.0);
  // Its error in ulps: (0.63232421875 - 0.6324555320) / 2^-11 = -0.2689...
  EXPECT_NEAR(step(ln, "y").values[0].ulps, (1295.0 / 2048.0 - 1.0 / std::sqrt(2.50001)) * 2048.0,
              1e-12);
  // eps alone: 1e-5 / 2^-24 = 167.77 -> 168 * 2^-24, an fp16 subnormal.
  EXPECT_EQ(ln.eps_stored, 168.0 * std::ldexp(1.0, -24));
  EXPECT_FALSE(ln.eps_rounds_to_zero);
  EXPECT_EQ(ln.breakdown, hc::Breakdown::none);
  EXPECT_TRUE(ln.output_finite);

  const hc::PrecisionNormWorksheet rms = one("rmsnorm", "fp16", nullptr, nullptr);
  // ms = 3.5; sqrt(3.5) = 1.8708287: 1915.73 -> 1916 * 2^-10 = 1.87109375; 1 / that =
  // 0.5344468: 1094.55 -> 1095 * 2^-11 = 0.53466796875.
  EXPECT_EQ(step(rms, "r").values[0].stored, 1095.0 / 2048.0);
  // y[3] = 3 * 0.53466796875 = 1.60400390625 in float32; fp16 spacing in [1, 2) is 2^-10:
  // 1642.5 -> a tie, to even: 1642 * 2^-10 = 1.603515625.
  EXPECT_EQ(step(rms, "y").values[3].stored, 1642.0 / 1024.0);
  EXPECT_EQ(step(rms, "xhat").values[3].event, RoundingEvent::rounded);
}

TEST(HandcalcPrecision, RsqrtRoundsTwiceAsPyTorchsScalarPath) {
  // x = 0.5078125 four times, eps 1e-12 (too small to move anything): x^2 = 0.25787353515625,
  // fp16 spacing 2^-12 in [0.25, 0.5): 1056.25 -> ms = 1056 * 2^-12 = 0.2578125.
  // Twice (PyTorch's scalar path): sqrt = 0.5077524: 1039.88 -> 1040 * 2^-11 = 0.5078125;
  // 1 / that = 1.9692308: 2016.49 -> 2016 * 2^-10 = 1.96875.
  // Once would give 1 / sqrt(ms) = 1.9694640: 2016.73 -> 2017 * 2^-10 = 1.9697265625.
  hc::PrecisionOptions o;
  o.precision = "fp16";
  o.norm = "rms";
  o.x = "0.5078125,0.5078125,0.5078125,0.5078125";
  o.eps = "1e-12";
  const hc::PrecisionNormWorksheet ws = sheet(o).norms.at(0);
  EXPECT_EQ(step(ws, "mean(x^2)").values[0].stored, 0.2578125);
  EXPECT_EQ(step(ws, "r").values[0].stored, 1.96875);
}

TEST(HandcalcPrecision, AllEqualRowWithTinyEpsIsNaNInFp16OnlyInTheComposite) {
  const hc::PrecisionNormWorksheet f = one("layernorm", "fp16", "format", "all-equal");
  EXPECT_TRUE(f.eps_rounds_to_zero);  // 1e-12 < 2^-25, half the smallest subnormal
  EXPECT_EQ(step(f, "var").values[0].stored, 0.0);
  EXPECT_EQ(step(f, "var + eps").values[0].stored, 0.0);
  // eps is rounded to fp16 (0) before the add, as PyTorch converts the scalar: 0 + 0 is exact.
  EXPECT_EQ(step(f, "var + eps").values[0].event, RoundingEvent::exact);
  EXPECT_TRUE(std::isinf(step(f, "rstd").values[0].stored));
  EXPECT_TRUE(std::isnan(step(f, "y").values[0].stored));  // 0 * inf
  EXPECT_FALSE(f.output_finite);
  EXPECT_EQ(f.breakdown, hc::Breakdown::eps_zero);
  EXPECT_EQ(f.steps[*f.first_bad_step].name, "rstd");
  // float32 statistics keep 1e-12: rstd = 1e6, y = 0 * 1e6 = 0.
  const hc::PrecisionNormWorksheet c = one("layernorm", "fp16", "fp32", "all-equal");
  EXPECT_TRUE(c.output_finite);
  EXPECT_EQ(step(c, "y").values[0].stored, 0.0);
  // bf16 has float32's exponent range: 1e-12 survives.
  const hc::PrecisionNormWorksheet b = one("layernorm", "bf16", "format", "all-equal");
  EXPECT_FALSE(b.eps_rounds_to_zero);
  EXPECT_TRUE(b.output_finite);
}

TEST(HandcalcPrecision, SquaresAbove256OverflowFp16) {
  const hc::PrecisionNormWorksheet f = one("rmsnorm", "fp16", "format", "square-overflow");
  const hc::StoredValue& sq = step(f, "x^2").values[0];  // 300^2 = 90000 > 65504
  EXPECT_TRUE(std::isinf(sq.stored));
  EXPECT_EQ(sq.event, RoundingEvent::overflow);
  EXPECT_EQ(f.breakdown, hc::Breakdown::overflow);
  EXPECT_EQ(f.steps[*f.first_bad_step].name, "x^2");
  // ms = inf, rsqrt(inf) = 0: the output is finite and all zero, far from float64.
  EXPECT_TRUE(f.output_finite);
  for (const hc::StoredValue& v : step(f, "y").values) EXPECT_EQ(v.stored, 0.0);
  EXPECT_GT(f.max_abs_output_ulps, 100);
  // Upcast to float32, nothing overflows; LayerNorm's centred square (299.25^2) too.
  EXPECT_EQ(one("rmsnorm", "fp16", "fp32", "square-overflow").breakdown, hc::Breakdown::none);
  EXPECT_EQ(one("layernorm", "fp16", "format", "square-overflow").breakdown, hc::Breakdown::overflow);
  EXPECT_EQ(one("rmsnorm", "bf16", "format", "square-overflow").breakdown, hc::Breakdown::none);
}

TEST(HandcalcPrecision, LargeMeanLosesTheSpreadWhenStored) {
  // bf16's spacing at 1000 is 4: all four inputs are stored as 1000, so x - mean = 0 and
  // LayerNorm's output is 0 where float64 gives +-0.47..1.41; RMSNorm is unaffected.
  const hc::PrecisionNormWorksheet ln = one("layernorm", "bf16", "fp32", "large-mean");
  for (const hc::StoredValue& v : step(ln, "x").values) EXPECT_EQ(v.stored, 1000.0);
  EXPECT_EQ(ln.breakdown, hc::Breakdown::inaccurate);
  EXPECT_NE(ln.diagnosis.find("x - mean"), std::string::npos) << ln.diagnosis;
  EXPECT_EQ(one("rmsnorm", "bf16", "fp32", "large-mean").breakdown, hc::Breakdown::none);
  // In fp16 RMSNorm's composite squares 1000^2 = 1e6: overflow.
  EXPECT_EQ(one("rmsnorm", "fp16", "format", "large-mean").breakdown, hc::Breakdown::overflow);
}

TEST(HandcalcPrecision, Bf16AccumulatorStallsWhereFloat32DoesNot) {
  const hc::PrecisionNormWorksheet ws = one("rmsnorm", "bf16", "format", "small-4096");
  const hc::StoredValue& ms = step(ws, "mean(x^2)").values[0];
  EXPECT_NEAR(ms.ulps, 0, 1);  // PyTorch's mean sums in float32: about right
  // A bf16 running sum stops growing once its spacing exceeds twice a term (~1e-6): far below.
  EXPECT_LT(ws.mean_with_format_accumulator, 0.5 * ms.exact);
  EXPECT_EQ(ws.breakdown, hc::Breakdown::none);
  EXPECT_EQ(step(ws, "x").values.size(), 4096u);
}

TEST(HandcalcPrecision, Fp32PrecisionIsFloat32Arithmetic) {
  const hc::PrecisionNormWorksheet ws = one("layernorm", "fp32", nullptr, nullptr);
  for (const hc::PrecisionStep& s : ws.steps) EXPECT_EQ(s.stored_in, Precision::fp32);
  EXPECT_EQ(step(ws, "rstd").values[0].stored, static_cast<double>(1.0f / std::sqrt(2.5f + 1e-5f)));
  EXPECT_LE(ws.max_abs_output_ulps, 1.0);
}

TEST(HandcalcPrecision, BadOptionsNameTheProblem) {
  auto message = [](hc::PrecisionOptions o) {
    try {
      hc::precision_worksheet_from_options(o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  hc::PrecisionOptions o;
  EXPECT_NE(message(o).find("--precision"), std::string::npos);
  o.precision = "fp8";
  EXPECT_NE(message(o).find("fp8"), std::string::npos);
  o.precision = "fp32";
  o.norm_compute = "format";
  EXPECT_NE(message(o).find("--norm-compute"), std::string::npos);
  o.precision = "fp16";
  o.norm_compute = "fused";
  EXPECT_NE(message(o).find("fused"), std::string::npos);
  o.norm_compute.reset();
  o.case_name = "nosuch";
  EXPECT_NE(message(o).find("all-equal"), std::string::npos);  // lists the cases
  o.case_name = "all-equal";
  o.x = "1,2";
  EXPECT_NE(message(o).find("--x"), std::string::npos);
  o.x.reset();
  o.gamma = "1,2";  // the case has d = 4
  EXPECT_NE(message(o).find("--gamma"), std::string::npos);
}

TEST(HandcalcPrecision, JsonSpellsNonFiniteValues) {
  hc::PrecisionOptions o;
  o.precision = "fp16";
  o.case_name = "all-equal";
  o.norm = "ln";
  const nlohmann::json j = nlohmann::json::parse(hc::render_json(sheet(o)));
  const nlohmann::json& n = j.at("norms").at(0);
  EXPECT_EQ(n.at("breakdown"), "eps_zero");
  EXPECT_EQ(n.at("first_bad_step"), "rstd");
  for (const nlohmann::json& s : n.at("steps")) {
    if (s.at("name") == "rstd") {
      EXPECT_EQ(s.at("stored"), "inf");
    }
  }
  EXPECT_EQ(n.at("steps").back().at("stored").at(0), "nan");
  EXPECT_EQ(n.at("max_abs_output_ulps"), "nan");
  EXPECT_EQ(j.at("input").at("case"), "all-equal");
}

TEST(HandcalcPrecision, UnderflowAndEqualStoredInputsAreToldApart) {
  hc::PrecisionOptions o;
  o.precision = "fp16";
  o.norm = "ln";
  o.eps = "1e-12";
  // x = 2^-10 and 2^-10 + 2^-20 (adjacent fp16 values): the mean rounds to 2^-10 (a tie), so
  // x - mean = 0 and 2^-20, whose square 2^-40 is far below fp16's smallest subnormal 2^-24: it
  // underflows, and var = 0.
  o.x = "0.0009765625,0.0009775161743164062";
  hc::PrecisionNormWorksheet u = sheet(o).norms.at(0);
  EXPECT_EQ(step(u, "(x - mean)^2").values[1].event, RoundingEvent::underflow);
  EXPECT_EQ(u.breakdown, hc::Breakdown::var_underflow) << u.diagnosis;
  EXPECT_FALSE(u.output_finite);
  // bf16 stores 1000.3 and 999.4 both as 1000: var is 0 from equal stored inputs, not from an
  // underflow, and eps 1e-45 rounds to 0 in bf16.
  o.precision = "bf16";
  o.x = "1000.3,999.4";
  o.eps = "1e-45";
  hc::PrecisionNormWorksheet e = sheet(o).norms.at(0);
  EXPECT_EQ(e.breakdown, hc::Breakdown::eps_zero) << e.diagnosis;
  EXPECT_NE(e.diagnosis.find("the stored inputs are equal"), std::string::npos) << e.diagnosis;
}

TEST(HandcalcPrecision, InputsBeyondFloat32AreInfNotUndefined) {
  // 1e39 > FLT_MAX: stored as inf in every format (an IEEE conversion), named as the input.
  hc::PrecisionOptions o;
  o.precision = "bf16";
  o.norm = "rms";
  o.x = "1e39,1";
  hc::PrecisionNormWorksheet ws = sheet(o).norms.at(0);
  EXPECT_TRUE(std::isinf(step(ws, "x").values[0].stored));
  EXPECT_EQ(step(ws, "x").values[0].event, RoundingEvent::overflow);
  EXPECT_EQ(ws.breakdown, hc::Breakdown::nonfinite_input);
  EXPECT_EQ(to_float(3.5e38), std::numeric_limits<float>::infinity());
  EXPECT_EQ(to_float(-3.5e38), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(to_float(static_cast<double>(std::numeric_limits<float>::max())), std::numeric_limits<float>::max());
}
