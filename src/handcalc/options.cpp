// handcalc input assembly: turns the option strings the user typed (or their absence) into
// validated vectors and scalars with the worksheet's defaults, then computes the worksheet.
// Every rejection is a one-line UsageError naming the option, so the CLI stays free of logic.
#include <utility>

#include "normlab/error.h"
#include "normlab/handcalc.h"

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

}  // namespace normlab::handcalc
