// handcalc arithmetic and input handling: the worksheets of LayerNorm, RMSNorm, the residual
// gradient and Pre-/Post-LN placement, computed in float64 with plain loops, plus the parser
// and validators for the user's comma lists. Rendering lives in render_text.cpp / render_json.cpp.
#include "normlab/handcalc.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <system_error>

#include "normlab/error.h"
#include "normlab/parse.h"

namespace normlab::handcalc {

std::vector<double> default_x() { return {2.0, -1.0, 0.0, 3.0}; }

const char* norm_name(std::optional<NormKind> kind) { return kind ? to_string(*kind) : "both"; }

namespace {

// Huge inputs (|x| ~ 1e160) square to inf; the worksheet would then print inf/nan as if it were
// an answer. That is the user's input being out of range, hence a UsageError.
void require_finite(const char* what, double v) {
  NL_USAGE(std::isfinite(v),
           "inputs too large for float64: {} overflows (keep |values| well below 1e150)", what);
}
void require_finite(const char* what, const std::vector<double>& v) {
  for (double e : v) require_finite(what, e);
}

std::vector<double> add(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One token of a comma list. `whole` is the full option value, quoted in messages so the user
// sees where the bad token sits.
double parse_token(const std::string& option, const std::string& token, const std::string& whole,
                   std::size_t position) {
  NL_USAGE(!token.empty(), "{}: value {} of \"{}\" is empty (expected numbers separated by commas, "
           "e.g. 2,-1,0,3)", option, position, shown(whole));
  // from_chars is locale-independent but rejects a leading '+', which people do type.
  const char* first = token.data();
  const char* last = token.data() + token.size();
  if (*first == '+' && token.size() > 1 && *(first + 1) != '-' && *(first + 1) != '+') ++first;
  double v = 0;
  auto [ptr, ec] = std::from_chars(first, last, v);
  NL_USAGE(ec != std::errc::result_out_of_range, "{}: \"{}\" is outside the float64 range (in \"{}\")",
           option, shown(token), shown(whole));
  NL_USAGE(ec == std::errc() && ptr == last, "{}: \"{}\" is not a number (in \"{}\")", option, shown(token),
           shown(whole));
  NL_USAGE(std::isfinite(v), "{}: \"{}\" is not a finite number (in \"{}\"); NaN and Inf are not "
           "allowed", option, shown(token), shown(whole));
  return v;
}

}  // namespace

// ---- small linear algebra ---------------------------------------------------------------

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double e : v) s += e;
  return s / static_cast<double>(v.size());
}

double population_std(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double m = mean(v), s = 0;
  for (double e : v) s += (e - m) * (e - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

double norm2(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e * e;
  return std::sqrt(s);
}

std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x) {
  const std::size_t d = x.size();
  NL_CHECK(w.size() == d * d, "matvec: W has {} values, expected {}x{}", w.size(), d, d);
  std::vector<double> out(d, 0.0);
  for (std::size_t i = 0; i < d; ++i)
    for (std::size_t j = 0; j < d; ++j) out[i] += w[i * d + j] * x[j];
  return out;
}

std::vector<double> matvec_transposed(const std::vector<double>& w, const std::vector<double>& v) {
  const std::size_t d = v.size();
  NL_CHECK(w.size() == d * d, "matvec_transposed: W has {} values, expected {}x{}", w.size(), d, d);
  std::vector<double> out(d, 0.0);
  // (W^T v)_j = sum_i W_ij v_i
  for (std::size_t i = 0; i < d; ++i)
    for (std::size_t j = 0; j < d; ++j) out[j] += w[i * d + j] * v[i];
  return out;
}

double gershgorin_bound(const std::vector<double>& w, std::size_t d) {
  NL_CHECK(w.size() == d * d, "gershgorin_bound: W has {} values, expected {}x{}", w.size(), d, d);
  double bound = 0;
  for (std::size_t i = 0; i < d; ++i) {
    double row = 0;
    for (std::size_t j = 0; j < d; ++j) row += std::fabs(w[i * d + j]);
    bound = std::max(bound, row);
  }
  return bound;
}

std::vector<double> default_w(std::size_t d) {
  std::vector<double> w(d * d, 0.0);
  for (std::size_t i = 0; i < d; ++i) {
    w[i * d + i] = 0.05;
    if (i + 1 < d) w[i * d + i + 1] = -0.02;
  }
  return w;
}

// ---- the worksheets ---------------------------------------------------------------------

LayerNormWorksheet layernorm_worksheet(const std::vector<double>& x,
                                       const std::vector<double>& gamma,
                                       const std::vector<double>& beta, double eps) {
  const std::size_t d = x.size();
  NL_CHECK(d > 0, "layernorm_worksheet: x is empty");
  NL_CHECK(gamma.size() == d && beta.size() == d,
           "layernorm_worksheet: gamma ({}) and beta ({}) must have d = {} values", gamma.size(),
           beta.size(), d);
  NL_CHECK(eps > 0, "layernorm_worksheet: eps must be > 0, got {}", eps);
  LayerNormWorksheet ws;
  ws.x = x;
  ws.gamma = gamma;
  ws.beta = beta;
  ws.eps = eps;
  ws.d = d;
  ws.params = 2 * d;
  // Pass 1: the mean. Pass 2: the variance of the centered values. Two reductions per row is
  // LayerNorm's extra cost over RMSNorm; kept as two passes here because it is the textbook form.
  ws.mean = mean(x);
  require_finite("the mean", ws.mean);
  ws.xc.resize(d);
  ws.xc_sq.resize(d);
  double ss = 0;
  for (std::size_t i = 0; i < d; ++i) {
    ws.xc[i] = x[i] - ws.mean;
    ws.xc_sq[i] = ws.xc[i] * ws.xc[i];
    ss += ws.xc_sq[i];
  }
  ws.var = ss / static_cast<double>(d);
  require_finite("the variance", ws.var);
  ws.std_dev = std::sqrt(ws.var);
  ws.std_eps = std::sqrt(ws.var + eps);  // > 0 because eps > 0: d = 1 and constant x are safe
  ws.rstd = 1.0 / ws.std_eps;
  ws.xhat.resize(d);
  ws.y.resize(d);
  for (std::size_t i = 0; i < d; ++i) {
    ws.xhat[i] = ws.xc[i] * ws.rstd;
    ws.y[i] = gamma[i] * ws.xhat[i] + beta[i];
  }
  require_finite("the output y", ws.y);
  ws.out_mean = mean(ws.y);
  ws.out_std = population_std(ws.y);
  ws.xhat_norm = norm2(ws.xhat);
  require_finite("the output statistics", ws.out_std);
  return ws;
}

RMSNormWorksheet rmsnorm_worksheet(const std::vector<double>& x, const std::vector<double>& gamma,
                                   double eps) {
  const std::size_t d = x.size();
  NL_CHECK(d > 0, "rmsnorm_worksheet: x is empty");
  NL_CHECK(gamma.size() == d, "rmsnorm_worksheet: gamma ({}) must have d = {} values", gamma.size(),
           d);
  NL_CHECK(eps > 0, "rmsnorm_worksheet: eps must be > 0, got {}", eps);
  RMSNormWorksheet ws;
  ws.x = x;
  ws.gamma = gamma;
  ws.eps = eps;
  ws.d = d;
  ws.params = d;
  ws.x_sq.resize(d);
  double ss = 0;
  for (std::size_t i = 0; i < d; ++i) {
    ws.x_sq[i] = x[i] * x[i];
    ss += ws.x_sq[i];
  }
  ws.mean_sq = ss / static_cast<double>(d);
  require_finite("the mean of squares", ws.mean_sq);
  ws.rms = std::sqrt(ws.mean_sq);
  ws.r = std::sqrt(ws.mean_sq + eps);  // > 0 because eps > 0: x = 0 is safe
  ws.inv_r = 1.0 / ws.r;
  ws.xhat.resize(d);
  ws.y.resize(d);
  for (std::size_t i = 0; i < d; ++i) {
    ws.xhat[i] = x[i] * ws.inv_r;
    ws.y[i] = gamma[i] * ws.xhat[i];
  }
  require_finite("the output y", ws.y);
  ws.out_mean = mean(ws.y);
  ws.out_std = population_std(ws.y);
  ws.out_rms = norm2(ws.y) / std::sqrt(static_cast<double>(d));
  ws.xhat_norm = norm2(ws.xhat);
  require_finite("the output statistics", ws.out_std);
  require_finite("the output statistics", ws.out_rms);
  return ws;
}

ResidualWorksheet residual_worksheet(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& dy) {
  const std::size_t d = x.size();
  NL_CHECK(d > 0, "residual_worksheet: x is empty");
  NL_CHECK(w.size() == d * d, "residual_worksheet: W has {} values, expected {}x{}", w.size(), d, d);
  NL_CHECK(dy.size() == d, "residual_worksheet: dy has {} values, expected {}", dy.size(), d);
  ResidualWorksheet ws;
  ws.x = x;
  ws.w = w;
  ws.dy = dy;
  ws.d = d;
  ws.w_bound = gershgorin_bound(w, d);
  ws.fx = matvec(w, x);
  ws.y = add(x, ws.fx);
  require_finite("y = x + W x", ws.y);
  // y = x + W x  =>  dy/dx = I + W  =>  dL/dx = (I + W)^T dL/dy = dL/dy + W^T dL/dy
  ws.grad_identity = dy;
  ws.grad_f = matvec_transposed(w, dy);
  ws.dx = add(ws.grad_identity, ws.grad_f);
  ws.dx_no_residual = ws.grad_f;
  require_finite("dL/dx", ws.dx);
  ws.norm_identity = norm2(ws.grad_identity);
  ws.norm_f = norm2(ws.grad_f);
  ws.norm_dx = norm2(ws.dx);
  ws.norm_no_residual = norm2(ws.dx_no_residual);
  require_finite("the gradient norms", ws.norm_identity + ws.norm_f + ws.norm_dx);
  const double total = ws.norm_identity + ws.norm_f;
  ws.identity_share = total > 0 ? ws.norm_identity / total : 0.5;
  return ws;
}

const std::vector<double>& NormStep::y() const {
  NL_CHECK(layernorm || rmsnorm, "NormStep: no norm was applied");
  return layernorm ? layernorm->y : rmsnorm->y;
}

double NormStep::xhat_norm() const {
  NL_CHECK(layernorm || rmsnorm, "NormStep: no norm was applied");
  return layernorm ? layernorm->xhat_norm : rmsnorm->xhat_norm;
}

namespace {
NormStep apply_norm(NormKind norm, const std::vector<double>& v, const std::vector<double>& gamma,
                    const std::vector<double>& beta, double eps) {
  NormStep step;
  if (norm == NormKind::layernorm) {
    step.layernorm = layernorm_worksheet(v, gamma, beta, eps);
  } else {
    step.rmsnorm = rmsnorm_worksheet(v, gamma, eps);
  }
  return step;
}
}  // namespace

PlacementWorksheet placement_worksheet(NormKind norm, const std::vector<double>& x,
                                       const std::vector<double>& w,
                                       const std::vector<double>& gamma,
                                       const std::vector<double>& beta, double eps) {
  const std::size_t d = x.size();
  NL_CHECK(norm != NormKind::none, "placement_worksheet: choose layernorm or rmsnorm");
  NL_CHECK(d > 0, "placement_worksheet: x is empty");
  NL_CHECK(w.size() == d * d, "placement_worksheet: W has {} values, expected {}x{}", w.size(), d,
           d);
  NL_CHECK(gamma.size() == d && (norm == NormKind::rmsnorm || beta.size() == d),
           "placement_worksheet: gamma ({}) / beta ({}) must have d = {} values", gamma.size(),
           beta.size(), d);
  PlacementWorksheet ws;
  ws.norm = norm;
  ws.x = x;
  ws.w = w;
  ws.gamma = gamma;
  ws.beta = beta;
  ws.eps = eps;
  ws.d = d;
  ws.x_norm = norm2(x);
  require_finite("||x||", ws.x_norm);
  ws.sqrt_d = std::sqrt(static_cast<double>(d));

  // Pre-LN: the sublayer sees a normalized copy; the residual stream x is added back untouched,
  // so nothing bounds ||y|| but ||x|| itself.
  ws.pre_n = apply_norm(norm, x, gamma, beta, eps);
  ws.pre_f = matvec(w, ws.pre_n.y());
  ws.pre_y = add(x, ws.pre_f);
  require_finite("the Pre-LN output", ws.pre_y);
  ws.pre_y_norm = norm2(ws.pre_y);

  // Post-LN: the norm comes last, so the output is normalized whatever x was.
  ws.post_f = matvec(w, x);
  ws.post_s = add(x, ws.post_f);
  require_finite("x + W x", ws.post_s);
  ws.post_n = apply_norm(norm, ws.post_s, gamma, beta, eps);
  ws.post_y = ws.post_n.y();
  ws.post_y_norm = norm2(ws.post_y);
  return ws;
}

// ---- input ------------------------------------------------------------------------------

std::vector<double> parse_vector(const std::string& option, const std::string& text) {
  NL_USAGE(!trim(text).empty(), "{} is empty: expected numbers separated by commas, e.g. {} 2,-1,0,3",
           option, option);
  std::vector<double> out;
  for (const std::string& part : split_at(text, ','))
    out.push_back(parse_token(option, trim(part), text, out.size() + 1));
  return out;
}

double parse_scalar(const std::string& option, const std::string& text) {
  std::string token = trim(text);
  NL_USAGE(!token.empty(), "{} is empty: expected one number", option);
  NL_USAGE(token.find(',') == std::string::npos, "{}: expected one number, got the list \"{}\"",
           option, shown(text));
  return parse_token(option, token, text, 1);
}

int parse_decimals(const std::string& option, const std::string& text) {
  std::string token = trim(text);
  int v = 0;
  auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  NL_USAGE(!token.empty() && ec == std::errc() && ptr == token.data() + token.size(),
           "{}: \"{}\" is not a whole number (expected 0..{})", option, shown(text), kMaxDecimals);
  NL_USAGE(v >= 0 && v <= kMaxDecimals, "{}: {} is out of range (expected 0..{})", option, v,
           kMaxDecimals);
  return v;
}

std::optional<NormKind> parse_norm(const std::string& option, const std::string& text, bool allow_both) {
  const std::string t = trim(text);
  if (allow_both && lower(t) == "both") return std::nullopt;
  // NormKind's own spellings (ln, LayerNorm, rms, ...), as train accepts them; none, DyT and Derf
  // have no worksheet.
  const std::optional<NormKind> kind = try_parse_kind<NormKind>(t);
  if (kind && (*kind == NormKind::layernorm || *kind == NormKind::rmsnorm)) return kind;
  throw UsageError(fmt::format("{}: \"{}\" is not a norm (expected {})", option, shown(text),
                               allow_both ? "layernorm, rmsnorm or both" : "layernorm or rmsnorm"));
}

void validate_eps(const std::string& option, double eps) {
  NL_USAGE(std::isfinite(eps) && eps > 0, "{}: {} is not allowed (eps must be > 0; it keeps "
           "sqrt(var + eps) away from 0)", option, eps);
}

void validate_length(const std::string& option, const std::vector<double>& v, std::size_t d) {
  NL_USAGE(v.size() == d, "{} has {} value{}, but x has d = {} (one per element of x)", option,
           v.size(), v.size() == 1 ? "" : "s", d);
}

void validate_matrix_dim(const std::string& option, std::size_t d) {
  NL_USAGE(d <= kMaxMatrixDim, "{} has {} values; this form builds a d x d matrix W, so d is "
           "limited to {}", option, d, kMaxMatrixDim);
}

void validate_w(const std::string& option, const std::vector<double>& w, std::size_t d) {
  NL_USAGE(w.size() == d * d, "{} has {} value{}, which is not a {}x{} matrix for x of size {} "
           "(d_model); F must map R^{} to R^{} for x + F(x), so {} needs {} values (row-major)",
           option, w.size(), w.size() == 1 ? "" : "s", d, d, d, d, d, option, d * d);
}

}  // namespace normlab::handcalc
