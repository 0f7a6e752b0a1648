// handcalc input assembly: turns the option strings the user typed (or their absence) into
// validated vectors and scalars with the worksheet's defaults, then computes the worksheet.
// Every rejection is a one-line UsageError naming the option, so the CLI stays free of logic.
#include <utility>

#include "normlab/error.h"
#include "normlab/handcalc.h"
#include "normlab/handcalc_precision.h"

namespace normlab::handcalc {

namespace {

std::vector<double> x_or_default(const std::optional<std::string>& text) {
  return text ? parse_vector("--x", *text) : default_x();
}

double eps_or_default(const std::optional<std::string>& text) {
  if (!text) return kDefaultEps;
  double eps = parse_scalar("--eps", *text);
  validate_eps("--eps", eps);
  return eps;
}

// A per-element vector of length d, or `fill` repeated d times when not given.
std::vector<double> per_element(const char* option, const std::optional<std::string>& text,
                                std::size_t d, double fill) {
  if (!text) return std::vector<double>(d, fill);
  std::vector<double> v = parse_vector(option, *text);
  validate_length(option, v, d);
  return v;
}

std::vector<double> w_or_default(const std::optional<std::string>& text, std::size_t d) {
  if (!text) return default_w(d);
  std::vector<double> w = parse_vector("--w", *text);
  validate_w("--w", w, d);
  return w;
}

void reject_beta_for_rmsnorm(const std::optional<std::string>& beta) {
  NL_USAGE(!beta, "--beta {} was given with --norm rmsnorm, but RMSNorm has no beta (it only "
           "scales: y = gamma * x / r); drop --beta or use --norm layernorm",
           *beta);
}

}  // namespace

int decimals_from_option(const std::optional<std::string>& text) {
  return text ? parse_decimals("--decimals", *text) : kDefaultDecimals;
}

NormWorksheet norm_worksheet_from_options(const NormOptions& o) {
  const std::vector<double> x = x_or_default(o.x);
  const std::size_t d = x.size();
  NormWorksheet ws;
  if (o.norm) ws.norm = parse_norm("--norm", *o.norm, /*allow_both=*/true);
  if (ws.norm == NormKind::rmsnorm) reject_beta_for_rmsnorm(o.beta);
  const double eps = eps_or_default(o.eps);
  const std::vector<double> gamma = per_element("--gamma", o.gamma, d, 1.0);
  const std::vector<double> beta = per_element("--beta", o.beta, d, 0.0);
  ws.gamma_default = !o.gamma;
  ws.beta_default = !o.beta;
  if (ws.norm != NormKind::rmsnorm) ws.layernorm = layernorm_worksheet(x, gamma, beta, eps);
  if (ws.norm != NormKind::layernorm) ws.rmsnorm = rmsnorm_worksheet(x, gamma, eps);
  return ws;
}

ResidualWorksheet residual_worksheet_from_options(const ResidualOptions& o) {
  const std::vector<double> x = x_or_default(o.x);
  const std::size_t d = x.size();
  validate_matrix_dim("--x", d);
  const std::vector<double> w = w_or_default(o.w, d);
  const std::vector<double> dy = per_element("--dy", o.dy, d, 1.0);
  ResidualWorksheet ws = residual_worksheet(x, w, dy);
  ws.w_default = !o.w;
  ws.dy_default = !o.dy;
  return ws;
}

PlacementWorksheet placement_worksheet_from_options(const PlacementOptions& o) {
  const std::vector<double> x = x_or_default(o.x);
  const std::size_t d = x.size();
  validate_matrix_dim("--x", d);
  const NormKind norm =
      o.norm ? *parse_norm("--norm", *o.norm, /*allow_both=*/false) : NormKind::layernorm;
  if (norm == NormKind::rmsnorm) reject_beta_for_rmsnorm(o.beta);
  const double eps = eps_or_default(o.eps);
  const std::vector<double> w = w_or_default(o.w, d);
  const std::vector<double> gamma = per_element("--gamma", o.gamma, d, 1.0);
  const std::vector<double> beta = per_element("--beta", o.beta, d, 0.0);
  PlacementWorksheet ws = placement_worksheet(norm, x, w, gamma, beta, eps);
  ws.w_default = !o.w;
  ws.gamma_default = !o.gamma;
  ws.beta_default = !o.beta;
  return ws;
}

PrecisionWorksheet precision_worksheet_from_options(const PrecisionOptions& o) {
  NL_USAGE(o.precision, "handcalc's low-precision worksheet needs --precision");
  const Precision precision = parse_kind<Precision>(*o.precision);
  NormCompute compute = NormCompute::format;
  if (o.norm_compute) {
    compute = parse_kind<NormCompute>(*o.norm_compute);
    NL_USAGE(precision != Precision::fp32,
             "--norm-compute {} needs --precision bf16 or fp16: in fp32 every mode is the same "
             "float32 arithmetic",
             *o.norm_compute);
    NL_USAGE(compute != NormCompute::fused,
             "--norm-compute fused is a training mode (normlab's kernels); handcalc shows format "
             "and fp32");
  }
  PrecisionWorksheet ws;
  std::vector<double> x;
  double eps = kDefaultEps;
  if (o.case_name) {
    NL_USAGE(!o.x, "--case {} and --x both give the row; use one", shown(*o.case_name));
    const PrecisionCase* found = nullptr;
    std::string names;
    for (const PrecisionCase& c : precision_cases()) {
      if (c.name == *o.case_name) found = &c;
      names += (names.empty() ? "" : ", ") + c.name;
    }
    NL_USAGE(found, "--case '{}' is not one of {}", shown(*o.case_name), names);
    ws.case_name = found->name;
    x = found->x;
    eps = found->eps;
  } else {
    ws.case_name = o.x ? "custom" : "worksheet";
    x = x_or_default(o.x);
  }
  if (o.eps) eps = eps_or_default(o.eps);
  const std::size_t d = x.size();
  std::optional<NormKind> norm;
  if (o.norm) norm = parse_norm("--norm", *o.norm, /*allow_both=*/true);
  if (norm == NormKind::rmsnorm) reject_beta_for_rmsnorm(o.beta);
  const std::vector<double> gamma = per_element("--gamma", o.gamma, d, 1.0);
  const std::vector<double> beta = per_element("--beta", o.beta, d, 0.0);
  ws.gamma_default = !o.gamma;
  ws.beta_default = !o.beta;
  for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm})
    if (!norm || *norm == k)
      ws.norms.push_back(precision_norm_worksheet(k, precision, compute, x, gamma, beta, eps));
  return ws;
}

}  // namespace normlab::handcalc
