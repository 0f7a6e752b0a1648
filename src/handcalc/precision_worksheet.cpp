// handcalc in low precision: the norm's chain of ops with each result rounded where the chosen
// norm_compute mode rounds it (handcalc_precision.h has the sequences), every stored value set
// beside the float64 worksheet's value of the same intermediate.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "normlab/error.h"
#include "normlab/handcalc.h"
#include "normlab/handcalc_precision.h"

namespace normlab {

template <>
const EnumNames& enum_names<handcalc::Breakdown>() {
  using handcalc::Breakdown;
  static const EnumNames t{
      "breakdown",
      {{Breakdown::none, "none", {}, "every output finite"},
       {Breakdown::overflow, "overflow", {}, "a finite result rounded to inf"},
       {Breakdown::eps_zero, "eps_zero", {}, "var is 0 and eps vanished: rsqrt(0)"},
       {Breakdown::var_underflow, "var_underflow", {}, "a nonzero variance stored as 0: rsqrt(0)"},
       {Breakdown::nonfinite_input, "nonfinite_input", {}, "x does not fit the format"},
       {Breakdown::inaccurate, "inaccurate", {}, "finite, but off by more than the roundings explain"}}};
  return t;
}

namespace handcalc {

namespace {

// The steps of one worksheet as they are computed: each takes float32 results, stores them in
// the step's format and records them beside their float64 values.
class Chain {
 public:
  explicit Chain(std::vector<PrecisionStep>& steps) : steps_(steps) {}

  // `computed` are float32 results (or, for an input, the float64 values as given): the stored
  // values are their rounding to `in`.
  std::vector<float> add(const char* name, const char* op, Precision in,
                         const std::vector<double>& computed, const std::vector<double>& exact,
                         bool per_element) {
    PrecisionStep step{name, op, in, per_element, {}};
    std::vector<float> stored(computed.size());
    for (std::size_t i = 0; i < computed.size(); ++i) {
      stored[i] = round_to(in, to_float(computed[i]));
      step.values.push_back({stored[i], exact[i], ulp_error(in, stored[i], exact[i]),
                             classify_rounding(in, computed[i], stored[i])});
    }
    steps_.push_back(std::move(step));
    return stored;
  }
  float add_scalar(const char* name, const char* op, Precision in, double computed, double exact) {
    return add(name, op, in, {computed}, {exact}, false)[0];
  }

 private:
  std::vector<PrecisionStep>& steps_;
};

// A float32 reduction's result: the float32 nearest the float64 sum (see the header).
float sum32(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return to_float(s);
}

// The mean over d of values summed with the running sum stored in the format.
double mean_with_accumulator(Precision p, const std::vector<float>& v) {
  float acc = 0;
  for (float x : v) acc = round_to(p, acc + x);
  return round_to(p, acc / static_cast<float>(v.size()));
}

std::vector<double> scaled(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] * b[i];
  return out;
}

// torch.rsqrt of a one-element bf16/fp16 tensor (a row's statistic) takes PyTorch's scalar path,
// which rounds twice: sqrt to the format, then its reciprocal (measured on every fp16 and bf16
// value by scripts/torch_precision_check.py's author; the vector path, on long tensors, rounds
// 1/sqrt once). The float32 value before the last rounding.
float rsqrt_before_rounding(Precision in, float v) { return 1.0f / round_to(in, std::sqrt(v)); }

bool step_is_bad(const PrecisionStep& s) {
  for (const StoredValue& v : s.values)
    if (!std::isfinite(v.stored) || v.event == RoundingEvent::overflow) return true;
  return false;
}

const PrecisionStep* find_step(const std::vector<PrecisionStep>& steps, const std::string& name) {
  for (const PrecisionStep& s : steps)
    if (s.name == name) return &s;
  return nullptr;
}

// The largest |stored - exact| of a step in ulps of its format at the RMS of its exact values:
// normwise, so that an element near zero is not judged by its own tiny ulp (a LayerNorm output
// of 1e-3 beside outputs of 1 carries the absolute error of the others). NaN when any value is.
double normwise_ulps(const PrecisionStep& s, std::size_t* worst_index = nullptr) {
  double sum_sq = 0;
  for (const StoredValue& v : s.values)
    if (std::isfinite(v.exact)) sum_sq += v.exact * v.exact;
  const double rms = std::sqrt(sum_sq / static_cast<double>(s.values.size()));
  const double unit = ulp_at(s.stored_in, rms);
  double worst = 0;
  for (std::size_t i = 0; i < s.values.size(); ++i) {
    const StoredValue& v = s.values[i];
    if (std::isnan(v.stored) || std::isnan(v.exact)) return std::numeric_limits<double>::quiet_NaN();
    const double e = v.stored == v.exact ? 0 : std::fabs(v.stored - v.exact) / unit;
    if (e > worst) {
      worst = e;
      if (worst_index) *worst_index = i;
    }
  }
  return worst;
}

// Every value finite: the output within one rounding per step of float64, or where the error
// first exceeded that budget (usually a cancellation, x - mean, or an input the format cannot
// hold closely enough).
void diagnose_finite(PrecisionNormWorksheet& ws) {
  const char* fmt_name = to_string(ws.precision);
  const double budget = static_cast<double>(ws.steps.size());
  if (ws.max_abs_output_ulps <= budget) {
    ws.diagnosis = fmt::format("every value finite; the output is within {:.3g} {} ulps of float64 (normwise)",
                               ws.max_abs_output_ulps, fmt_name);
    return;
  }
  ws.breakdown = Breakdown::inaccurate;
  for (const PrecisionStep& s : ws.steps) {
    std::size_t i = 0;
    if (!(normwise_ulps(s, &i) > budget)) continue;
    ws.diagnosis = fmt::format(
        "every value finite, but the output is off by up to {:.3g} {} ulps (normwise), more than "
        "its {} roundings explain; first off at {} ({}): stored {}, float64 {:.6g}",
        ws.max_abs_output_ulps, fmt_name, ws.steps.size(), s.per_element ? fmt::format("{}[{}]", s.name, i) : s.name,
        s.op, s.values[i].stored, s.values[i].exact);
    return;
  }
}

// The names of a norm's chain that a zero denominator is traced through: the squares, their
// mean (the variance or mean square) and that plus eps.
struct VarianceSteps {
  const char* squares;
  const char* var;
  const char* var_eps;
};

// A bad step past the input that did not overflow: rsqrt of a zero denominator (the variance
// underflowed, or is 0 and eps did not lift it), or inf operands from an earlier overflow.
// `where` and `v` are its first non-finite value, `outcome` what became of the output.
void diagnose_denominator(PrecisionNormWorksheet& ws, const PrecisionStep& bad, const std::string& where,
                          const StoredValue& v, const std::string& outcome, const VarianceSteps& names) {
  const PrecisionStep* var = find_step(ws.steps, names.var);
  const PrecisionStep* var_eps = find_step(ws.steps, names.var_eps);
  const bool denominator_zero = var_eps && var_eps->values[0].stored == 0;
  // Underflow: the squares or their mean rounded nonzero values to 0. A variance that is 0
  // because the stored inputs came out equal was lost to their rounding instead: that is the
  // zero-variance case, with the cause named in its sentence.
  bool underflowed = var->values[0].event == RoundingEvent::underflow;
  if (const PrecisionStep* sq = find_step(ws.steps, names.squares))
    for (const StoredValue& sv : sq->values) underflowed |= sv.event == RoundingEvent::underflow;
  if (denominator_zero && underflowed) {
    ws.breakdown = Breakdown::var_underflow;
    ws.diagnosis = fmt::format(
        "{} = {:.6g} underflowed to 0 in {} and eps = {:g} did not lift it: rsqrt(0) = inf, "
        "then {} ({}) = {}; {}",
        names.var, var->values[0].exact, to_string(var->stored_in), ws.eps, where, bad.op, v.stored, outcome);
  } else if (denominator_zero) {
    ws.breakdown = Breakdown::eps_zero;
    ws.diagnosis = fmt::format(
        "{} is {} and eps = {:g} {} in {} (smallest subnormal {:g}): {} = 0, rsqrt(0) = "
        "inf, then {} ({}) = {}; {}",
        names.var,
        var->values[0].exact == 0 ? "exactly 0"
                                  : fmt::format("0 as stored (float64: {:.6g}; the stored inputs "
                                                "are equal)",
                                                var->values[0].exact),
        ws.eps, ws.eps_rounds_to_zero ? "rounds to 0" : "is lost", to_string(var_eps->stored_in),
        format_info(var_eps->stored_in).min_subnormal, names.var_eps, where, bad.op, v.stored, outcome);
  } else {
    ws.breakdown = Breakdown::overflow;  // inf operands from an earlier overflow
    ws.diagnosis = fmt::format("{} ({}) = {}; {}", where, bad.op, v.stored, outcome);
  }
}

// The breakdown and its sentence, from the first step that went bad (none: diagnose_finite).
void diagnose(PrecisionNormWorksheet& ws, const VarianceSteps& names) {
  const char* fmt_name = to_string(ws.precision);
  for (const StoredValue& v : ws.steps.back().values)
    if (!std::isfinite(v.stored)) ws.output_finite = false;
  ws.max_abs_output_ulps = normwise_ulps(ws.steps.back());
  for (std::size_t s = 0; s < ws.steps.size(); ++s) {
    if (step_is_bad(ws.steps[s])) {
      ws.first_bad_step = s;
      break;
    }
  }
  if (!ws.first_bad_step) return diagnose_finite(ws);
  const PrecisionStep& bad = ws.steps[*ws.first_bad_step];
  std::size_t i = 0;
  while (i + 1 < bad.values.size() && std::isfinite(bad.values[i].stored) &&
         bad.values[i].event != RoundingEvent::overflow)
    ++i;
  const StoredValue& v = bad.values[i];
  const std::string where = bad.per_element ? fmt::format("{}[{}]", bad.name, i) : bad.name;
  const std::string outcome =
      !ws.output_finite ? "the output is not finite"
                        : fmt::format("the output stays finite but is off by up to {:.3g} ulps (normwise)",
                                      ws.max_abs_output_ulps);
  if (*ws.first_bad_step == 0) {
    ws.breakdown = Breakdown::nonfinite_input;
    ws.diagnosis = fmt::format("{} = {} does not fit {} (max {}); {}", where, v.exact, fmt_name,
                               format_info(ws.precision).max, outcome);
  } else if (v.event == RoundingEvent::overflow) {
    ws.breakdown = Breakdown::overflow;
    ws.diagnosis = fmt::format("{} ({}) overflowed {}: {:.6g} > max {}; {}", where, bad.op, to_string(bad.stored_in),
                               v.exact, format_info(bad.stored_in).max, outcome);
  } else {
    diagnose_denominator(ws, bad, where, v, outcome, names);
  }
}

// RMSNorm's chain as PyTorch's composite runs it, each step stored in `mid` (y in the format),
// beside the float64 worksheet; then its diagnosis.
void rmsnorm_chain(PrecisionNormWorksheet& ws, Chain& chain, const std::vector<float>& xs, const std::vector<float>& g,
                   Precision mid, float eps_added) {
  const Precision p = ws.precision;
  const std::size_t d = xs.size();
  const RMSNormWorksheet ref = rmsnorm_worksheet(ws.x, ws.gamma, ws.eps);
  std::vector<double> v32(d);
  for (std::size_t i = 0; i < d; ++i) v32[i] = xs[i] * xs[i];
  const std::vector<float> sq = chain.add("x^2", "x.pow(2)", mid, v32, ref.x_sq, true);
  const float ms = chain.add_scalar("mean(x^2)", ".mean(-1)", mid, sum32(sq) / static_cast<float>(d), ref.mean_sq);
  const float ve = chain.add_scalar("mean(x^2) + eps", "+ eps", mid, ms + eps_added, ref.mean_sq + ws.eps);
  const float r = chain.add_scalar("r", "torch.rsqrt", mid, rsqrt_before_rounding(mid, ve), ref.inv_r);
  for (std::size_t i = 0; i < d; ++i) v32[i] = xs[i] * r;
  const std::vector<float> xhat = chain.add("xhat", "x * r", mid, v32, ref.xhat, true);
  for (std::size_t i = 0; i < d; ++i) v32[i] = xhat[i] * g[i];
  chain.add("y", "* gamma", p, v32, ref.y, true);
  std::vector<float> sq_fmt(d);
  for (std::size_t i = 0; i < d; ++i) sq_fmt[i] = round_to(p, xs[i] * xs[i]);
  ws.mean_with_format_accumulator = mean_with_accumulator(p, sq_fmt);
  diagnose(ws, {"x^2", "mean(x^2)", "mean(x^2) + eps"});
}

// LayerNorm's chain, as rmsnorm_chain.
void layernorm_chain(PrecisionNormWorksheet& ws, Chain& chain, const std::vector<float>& xs,
                     const std::vector<float>& g, const std::vector<float>& b, Precision mid, float eps_added) {
  const Precision p = ws.precision;
  const std::size_t d = xs.size();
  const LayerNormWorksheet ref = layernorm_worksheet(ws.x, ws.gamma, ws.beta, ws.eps);
  std::vector<double> v32(d);
  const float mu = chain.add_scalar("mean", ".mean(-1)", mid, sum32(xs) / static_cast<float>(d), ref.mean);
  for (std::size_t i = 0; i < d; ++i) v32[i] = xs[i] - mu;
  const std::vector<float> xc = chain.add("x - mean", "x - mean", mid, v32, ref.xc, true);
  for (std::size_t i = 0; i < d; ++i) v32[i] = xc[i] * xc[i];
  const std::vector<float> sq = chain.add("(x - mean)^2", ".pow(2)", mid, v32, ref.xc_sq, true);
  const float var = chain.add_scalar("var", ".mean(-1)", mid, sum32(sq) / static_cast<float>(d), ref.var);
  const float ve = chain.add_scalar("var + eps", "+ eps", mid, var + eps_added, ref.var + ws.eps);
  const float r = chain.add_scalar("rstd", "torch.rsqrt", mid, rsqrt_before_rounding(mid, ve), ref.rstd);
  for (std::size_t i = 0; i < d; ++i) v32[i] = xc[i] * r;
  const std::vector<float> xhat = chain.add("xhat", "* rstd", mid, v32, ref.xhat, true);
  for (std::size_t i = 0; i < d; ++i) v32[i] = xhat[i] * g[i];
  const std::vector<float> yg = chain.add("gamma * xhat", "* gamma", mid, v32, scaled(ref.xhat, ws.gamma), true);
  for (std::size_t i = 0; i < d; ++i) v32[i] = yg[i] + b[i];
  chain.add("y", "+ beta", p, v32, ref.y, true);
  std::vector<float> sq_fmt(d);
  for (std::size_t i = 0; i < d; ++i) {
    const float c = round_to(p, xs[i] - round_to(p, mu));
    sq_fmt[i] = round_to(p, c * c);
  }
  ws.mean_with_format_accumulator = mean_with_accumulator(p, sq_fmt);
  diagnose(ws, {"(x - mean)^2", "var", "var + eps"});
}

}  // namespace

PrecisionNormWorksheet precision_norm_worksheet(NormKind norm, Precision precision,
                                                NormCompute compute, const std::vector<double>& x,
                                                const std::vector<double>& gamma,
                                                const std::vector<double>& beta, double eps) {
  NL_CHECK(norm == NormKind::layernorm || norm == NormKind::rmsnorm,
           "precision_norm_worksheet: norm must be layernorm or rmsnorm");
  NL_CHECK(compute != NormCompute::fused, "precision_norm_worksheet: fused is not a handcalc mode");
  const std::size_t d = x.size();
  PrecisionNormWorksheet ws;
  ws.norm = norm;
  ws.precision = precision;
  ws.compute = compute;
  ws.x = x;
  ws.gamma = gamma;
  if (norm == NormKind::layernorm) ws.beta = beta;
  ws.eps = eps;
  ws.eps_stored = round_to(precision, to_float(eps));
  ws.eps_rounds_to_zero = ws.eps_stored == 0;

  // Where the intermediates live: the format itself, or float32 with only y rounded.
  const Precision p = precision;
  const Precision mid = compute == NormCompute::format ? p : Precision::fp32;
  // eps is a Python scalar: the composite's add converts it to the tensor's dtype first (PyTorch's
  // CPU add), the float32 statistics add it as float32.
  const float eps_added = round_to(mid, to_float(eps));
  Chain chain(ws.steps);
  const std::vector<float> xs = chain.add("x", "input", p, x, x, true);
  // gamma and beta are parameters: stored in the format like every tensor of a low-precision
  // model (ones and zeros are exact in every format).
  std::vector<float> g(d), b(d);
  for (std::size_t i = 0; i < d; ++i) {
    g[i] = round_to(p, to_float(gamma[i]));
    if (norm == NormKind::layernorm) b[i] = round_to(p, to_float(beta[i]));
  }
  if (norm == NormKind::rmsnorm)
    rmsnorm_chain(ws, chain, xs, g, mid, eps_added);
  else
    layernorm_chain(ws, chain, xs, g, b, mid, eps_added);
  return ws;
}

const std::vector<PrecisionCase>& precision_cases() {
  static const std::vector<PrecisionCase> cases = [] {
    std::vector<PrecisionCase> c;
    c.push_back({"worksheet", "the worksheet's row", default_x(), kDefaultEps});
    c.push_back({"square-overflow",
                 "an element above 256: its square (and LayerNorm's centred square) exceeds "
                 "fp16's 65504",
                 {300, -300, 1, 2}, kDefaultEps});
    c.push_back({"all-equal", "an all-equal row with eps 1e-12: var = 0 and eps below fp16's "
                              "smallest subnormal",
                 {0.5, 0.5, 0.5, 0.5}, 1e-12});
    // Magnitudes 0.5e-3 .. 1.5e-3, alternating in sign, from a fixed formula (no RNG).
    std::vector<double> small(4096);
    for (std::size_t i = 0; i < small.size(); ++i)
      small[i] = (i % 2 ? -1e-3 : 1e-3) * (0.5 + static_cast<double>((i * 37) % 101) / 100.0);
    c.push_back({"small-4096", "4096 values of magnitude 1e-3 (for bf16): squares near 1e-6, "
                               "summed 4096 times",
                 small, 1e-6});
    c.push_back({"large-mean", "mean 1000, spread below 1: fp16's spacing at 1000 is 0.5, "
                               "bf16's is 4; RMSNorm's squares (1e6) overflow fp16",
                 {1000.3, 999.4, 1000.9, 999.4}, kDefaultEps});
    return c;
  }();
  return cases;
}

}  // namespace handcalc
}  // namespace normlab
