// handcalc's low-precision worksheet as text (a table of steps: stored value, float64 value,
// error in ulps, what the rounding did) and as JSON. Stored values print exactly (the shortest
// decimal that reads back as the same double, and every bf16/fp16/float32 value is a double).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "normlab/handcalc.h"
#include "normlab/handcalc_precision.h"

namespace normlab::handcalc {

namespace {

// Per-element steps longer than this show their first kHead and last element, then one line
// that summarises the rest.
constexpr std::size_t kShownElements = 8;
constexpr std::size_t kHead = 4;

std::string exact_text(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }
std::string ulps_text(double u) {
  if (std::isnan(u)) return "nan";
  if (std::isinf(u)) return u > 0 ? "+inf" : "-inf";
  if (u == 0) return "0";
  return fmt::format("{:+.3g}", u);
}

const char* sequence(NormKind norm, NormCompute compute) {
  if (compute == NormCompute::fp32)
    return norm == NormKind::rmsnorm
               ? "x upcast; x^2, mean, + eps, rsqrt, x * r, * gamma in float32; y rounded once"
               : "x upcast; mean, x - mean, ^2, var, + eps, rsqrt, * rstd, * gamma, + beta in "
                 "float32; y rounded once";
  return norm == NormKind::rmsnorm
             ? "x.pow(2) -> .mean(-1) -> + eps -> torch.rsqrt -> x * r -> * gamma"
             : ".mean(-1) -> x - mean -> .pow(2) -> .mean(-1) -> + eps -> torch.rsqrt -> * rstd "
               "-> * gamma -> + beta";
}

void add_value_row(std::vector<std::vector<std::string>>& rows, const PrecisionStep& s,
                   std::size_t i) {
  const StoredValue& v = s.values[i];
  rows.push_back({s.per_element ? fmt::format("{}[{}]", s.name, i) : s.name, s.op,
                  to_string(s.stored_in), exact_text(v.stored), fmt::format("{:.10g}", v.exact),
                  ulps_text(v.ulps), to_string(v.event)});
}

// The elements a long step does not show, summarised: the worst error and the rounding events.
void add_summary_row(std::vector<std::vector<std::string>>& rows, const PrecisionStep& s,
                     std::size_t from, std::size_t to) {
  double worst = 0;
  std::size_t counts[5] = {0, 0, 0, 0, 0};
  for (std::size_t i = from; i < to; ++i) {
    const double e = std::fabs(s.values[i].ulps);
    worst = std::isnan(e) || std::isnan(worst) ? std::nan("") : std::max(worst, e);
    ++counts[static_cast<int>(s.values[i].event)];
  }
  std::string events;
  for (RoundingEvent e : kind_values<RoundingEvent>()) {
    const std::size_t n = counts[static_cast<int>(e)];
    if (n) events += fmt::format("{}{} {}", events.empty() ? "" : ", ", n, to_string(e));
  }
  rows.push_back({fmt::format("{}[{}..{}]", s.name, from, to - 1), fmt::format("({} more)", to - from),
                  "", "", "max |error|", ulps_text(worst).substr(ulps_text(worst)[0] == '+'),
                  events});
}

std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  // Columns 3..5 are numbers: right-aligned.
  std::string out;
  for (const auto& r : rows) {
    std::string line = "  ";
    for (std::size_t c = 0; c < r.size(); ++c) {
      const bool right = c >= 3 && c <= 5;
      const std::string pad(width[c] - r[c].size(), ' ');
      line += right ? pad + r[c] : (c + 1 == r.size() ? r[c] : r[c] + pad);
      if (c + 1 < r.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string norm_text(const PrecisionNormWorksheet& ws) {
  const char* name = ws.norm == NormKind::layernorm ? "LayerNorm" : "RMSNorm";
  const char* p = to_string(ws.precision);
  std::string out = fmt::format("{} in {}, norm_compute {}: {}\n", name, p, to_string(ws.compute),
                                sequence(ws.norm, ws.compute));
  out += fmt::format(
      "  every op computes in float32 from stored operands; a result in {} is rounded to it "
      "(nearest even, overflow to inf, gradual underflow)\n",
      ws.compute == NormCompute::format ? p : "the last row's format");
  out += fmt::format("  d = {}, eps = {:g}: {} stores eps as {}{}; {}\n\n", ws.x.size(), ws.eps, p,
                     exact_text(ws.eps_stored),
                     ws.eps_rounds_to_zero ? " (it rounds to 0)"
                     : std::fabs(ws.eps_stored) < format_info(ws.precision).min_normal
                         ? " (a subnormal)"
                         : "",
                     ws.compute == NormCompute::format ? "+ eps adds that (a Python scalar takes the tensor's dtype)"
                                                       : "the float32 statistics add eps as float32");
  std::vector<std::vector<std::string>> rows{
      {"step", "op", "in", "stored", "float64", "error (ulps)", "rounding"}};
  for (const PrecisionStep& s : ws.steps) {
    const std::size_t n = s.values.size();
    if (n <= kShownElements) {
      for (std::size_t i = 0; i < n; ++i) add_value_row(rows, s, i);
      continue;
    }
    for (std::size_t i = 0; i < kHead; ++i) add_value_row(rows, s, i);
    add_summary_row(rows, s, kHead, n - 1);
    add_value_row(rows, s, n - 1);
  }
  out += table(rows) + "\n";
  out += fmt::format("  {}: {}\n",
                     !ws.output_finite                      ? "BROKEN"
                     : ws.breakdown != Breakdown::none ? "WRONG"
                                                            : "result",
                     ws.diagnosis);
  if (ws.breakdown != Breakdown::none) out += fmt::format("  cause: {}\n", to_string(ws.breakdown));
  const PrecisionStep* mean_step = nullptr;
  for (const PrecisionStep& s : ws.steps)
    if (s.name == (ws.norm == NormKind::rmsnorm ? "mean(x^2)" : "var")) mean_step = &s;
  out += fmt::format(
      "  {} with the running sum kept in {} instead of float32: {} (summed in float32, then "
      "stored: {}; float64: {:.10g})\n",
      ws.norm == NormKind::rmsnorm ? "mean(x^2)" : "var", p,
      exact_text(ws.mean_with_format_accumulator), exact_text(mean_step->values[0].stored),
      mean_step->values[0].exact);
  return out;
}

nlohmann::json number(double v) {
  // JSON has no inf or NaN: they are the strings "inf", "-inf", "nan" (docs/handcalc.md).
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::json norm_json(const PrecisionNormWorksheet& ws) {
  using nlohmann::json;
  json steps = json::array();
  for (const PrecisionStep& s : ws.steps) {
    json stored = json::array(), exact = json::array(), ulps = json::array(),
         events = json::array();
    for (const StoredValue& v : s.values) {
      stored.push_back(number(v.stored));
      exact.push_back(number(v.exact));
      ulps.push_back(number(v.ulps));
      events.push_back(to_string(v.event));
    }
    json step{{"name", s.name},       {"op", s.op},      {"stored_in", to_string(s.stored_in)},
              {"per_element", s.per_element}};
    if (s.per_element) {
      step["stored"] = std::move(stored);
      step["exact"] = std::move(exact);
      step["ulps"] = std::move(ulps);
      step["events"] = std::move(events);
    } else {
      step["stored"] = stored[0];
      step["exact"] = exact[0];
      step["ulps"] = ulps[0];
      step["events"] = events[0];
    }
    steps.push_back(std::move(step));
  }
  json j{{"norm", to_string(ws.norm)},
         {"precision", to_string(ws.precision)},
         {"norm_compute", to_string(ws.compute)},
         {"eps", ws.eps},
         {"eps_stored", number(ws.eps_stored)},
         {"eps_rounds_to_zero", ws.eps_rounds_to_zero},
         {"steps", std::move(steps)},
         {"output_finite", ws.output_finite},
         {"breakdown", to_string(ws.breakdown)},
         {"first_bad_step", ws.first_bad_step ? json(ws.steps[*ws.first_bad_step].name) : json()},
         {"diagnosis", ws.diagnosis},
         {"max_abs_output_ulps", number(ws.max_abs_output_ulps)},
         {"mean_with_format_accumulator", number(ws.mean_with_format_accumulator)}};
  return j;
}

}  // namespace

std::string render_text(const PrecisionWorksheet& ws) {
  std::string out;
  for (const PrecisionCase& c : precision_cases())
    if (c.name == ws.case_name) out += fmt::format("case {}: {}\n", c.name, c.what);
  if (ws.norms.front().x.size() <= kShownElements)
    out += fmt::format("x = [{}]\n", fmt::join(ws.norms.front().x, ", "));
  for (const PrecisionNormWorksheet& n : ws.norms) out += "\n" + norm_text(n);
  return out;
}

std::string render_json(const PrecisionWorksheet& ws) {
  using nlohmann::json;
  const PrecisionNormWorksheet& first = ws.norms.front();
  json input{{"case", ws.case_name},
             {"x", first.x},
             {"d", first.x.size()},
             {"eps", first.eps},
             {"precision", to_string(first.precision)},
             {"norm_compute", to_string(first.compute)},
             {"gamma", first.gamma},
             {"gamma_default", ws.gamma_default}};
  json norms = json::array();
  for (const PrecisionNormWorksheet& n : ws.norms) {
    if (n.norm == NormKind::layernorm) {
      input["beta"] = n.beta;
      input["beta_default"] = ws.beta_default;
    }
    norms.push_back(norm_json(n));
  }
  json j{{"command", "handcalc"}, {"form", "precision"}, {"input", std::move(input)},
         {"norms", std::move(norms)}};
  return j.dump();
}

}  // namespace normlab::handcalc
