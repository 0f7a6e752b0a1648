// handcalc: the worksheet arithmetic of LayerNorm, RMSNorm, the residual gradient and
// Pre-LN vs Post-LN on one small vector, in float64, with every intermediate kept so that a
// person can check it by hand and a program can check it from JSON.
//
// Layout: plain result structs (every intermediate), pure functions that fill them, the parser
// and validators for user input (they throw UsageError naming the option), and renderers
// (aligned text, JSON). The CLI (src/cli/handcalc_command.cpp) only wires options to these.
//
// Size letter: d, the length of x (d_model). W is d x d, row-major: W[i*d + j] = W_ij.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "normlab/kinds.h"

namespace normlab::handcalc {

// ---- the worksheet defaults (the worksheet's example) ------------------------------------
std::vector<double> default_x();  // [2, -1, 0, 3]
inline constexpr double kDefaultEps = 1e-5;
inline constexpr int kDefaultDecimals = 4;
inline constexpr int kMaxDecimals = 17;  // float64 carries 17 significant digits at most
// residual and placement hold a d x d W (d^2 doubles, printed in full): a long --x must not
// turn into gigabytes. 1024 is far beyond anything checked by hand.
inline constexpr std::size_t kMaxMatrixDim = 1024;

using normlab::NormKind;  // layernorm or rmsnorm here (kinds.h); an empty optional means both
const char* norm_name(std::optional<NormKind> kind);  // "layernorm" | "rmsnorm" | "both"

// ---- LayerNorm: y = gamma * (x - mu) / sqrt(var + eps) + beta -------------------------
struct LayerNormWorksheet {
  std::vector<double> x, gamma, beta;
  double eps = 0;
  std::size_t d = 0;
  double mean = 0;               // mu = (1/d) sum x_i
  std::vector<double> xc;        // x_i - mu
  std::vector<double> xc_sq;     // (x_i - mu)^2
  double var = 0;                // (1/d) sum (x_i - mu)^2  (biased, as PyTorch's LayerNorm)
  double std_dev = 0;            // sqrt(var), without eps: the worksheet's std
  double std_eps = 0;            // sqrt(var + eps): what x - mu is divided by
  double rstd = 0;               // 1 / sqrt(var + eps)
  std::vector<double> xhat;      // (x_i - mu) * rstd
  std::vector<double> y;         // gamma_i * xhat_i + beta_i
  double out_mean = 0;           // (1/d) sum y_i
  double out_std = 0;            // sqrt((1/d) sum (y_i - out_mean)^2), population std
  double xhat_norm = 0;          // ||xhat||_2 = sqrt(d * var / (var + eps)) <= sqrt(d)
  int reductions = 2;            // passes over the row: mean, then variance
  std::size_t params = 0;        // 2d: gamma and beta
};

// ---- RMSNorm: y = gamma * x / sqrt(mean(x^2) + eps) ------------------------------------
struct RMSNormWorksheet {
  std::vector<double> x, gamma;
  double eps = 0;
  std::size_t d = 0;
  std::vector<double> x_sq;      // x_i^2
  double mean_sq = 0;            // ms = (1/d) sum x_i^2
  double rms = 0;                // sqrt(ms), without eps: the worksheet's RMS
  double r = 0;                  // sqrt(ms + eps): what x is divided by
  double inv_r = 0;              // 1 / r
  std::vector<double> xhat;      // x_i / r
  std::vector<double> y;         // gamma_i * xhat_i  (RMSNorm has no beta)
  double out_mean = 0;           // (1/d) sum y_i
  double out_std = 0;            // population std of y
  double out_rms = 0;            // sqrt((1/d) sum y_i^2)
  double xhat_norm = 0;          // ||xhat||_2 = sqrt(d * ms / (ms + eps)) <= sqrt(d)
  int reductions = 1;            // one pass: the mean of squares
  std::size_t params = 0;        // d: gamma only
};

LayerNormWorksheet layernorm_worksheet(const std::vector<double>& x,
                                       const std::vector<double>& gamma,
                                       const std::vector<double>& beta, double eps);
RMSNormWorksheet rmsnorm_worksheet(const std::vector<double>& x, const std::vector<double>& gamma,
                                   double eps);

// The norm worksheet: one or both norms of the same x.
struct NormWorksheet {
  std::optional<NormKind> norm;  // empty: both
  bool gamma_default = true, beta_default = true;  // ones / zeros because the user gave none
  std::optional<LayerNormWorksheet> layernorm;
  std::optional<RMSNormWorksheet> rmsnorm;
};

// ---- residual: y = x + F(x), F(x) = W x -----------------------------------------------
// The backward of y = x + W x is dL/dx = dL/dy + W^T dL/dy: an identity term and an F term.
//
// identity share = ||identity term|| / (||identity term|| + ||F term||), in [0, 1]; 1 means the
// gradient is all highway, 0.5 an even split. When both norms are 0 (dy = 0) it is defined as
// 0.5: neither term contributes, so neither dominates.
struct ResidualWorksheet {
  std::vector<double> x, w, dy;
  std::size_t d = 0;
  bool w_default = true, dy_default = true;
  double w_bound = 0;              // max_i sum_j |W_ij| (Gershgorin): bounds every |eigenvalue|
  std::vector<double> fx;          // F(x) = W x
  std::vector<double> y;           // x + W x
  std::vector<double> grad_identity;  // dL/dy, passed through unchanged by the skip path
  std::vector<double> grad_f;         // W^T dL/dy, through F
  std::vector<double> dx;             // dL/dx = identity term + F term
  std::vector<double> dx_no_residual; // dL/dx of y = F(x) alone: W^T dL/dy
  double norm_identity = 0, norm_f = 0, norm_dx = 0, norm_no_residual = 0;
  double identity_share = 0;
};

ResidualWorksheet residual_worksheet(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& dy);

// ---- placement: Pre-LN y = x + F(N(x)) vs Post-LN y = N(x + F(x)) ----------------------
// One norm application inside a placement: exactly one of the two is set.
struct NormStep {
  std::optional<LayerNormWorksheet> layernorm;
  std::optional<RMSNormWorksheet> rmsnorm;
  const std::vector<double>& y() const;
  double xhat_norm() const;
};

struct PlacementWorksheet {
  NormKind norm = NormKind::layernorm;  // layernorm or rmsnorm, never both
  std::vector<double> x, w, gamma, beta;
  double eps = 0;
  std::size_t d = 0;
  bool w_default = true, gamma_default = true, beta_default = true;
  double x_norm = 0;   // ||x||_2
  double sqrt_d = 0;   // the norm of a normalized vector with gamma = 1, beta = 0 (up to eps)
  // Pre-LN: n = N(x); f = W n; y = x + f
  NormStep pre_n;
  std::vector<double> pre_f, pre_y;
  double pre_y_norm = 0;
  // Post-LN: f = W x; s = x + f; y = N(s)
  std::vector<double> post_f, post_s;
  NormStep post_n;
  std::vector<double> post_y;
  double post_y_norm = 0;
};

// gamma and beta have length d; beta is ignored for RMSNorm (validation rejects it earlier).
PlacementWorksheet placement_worksheet(NormKind norm, const std::vector<double>& x,
                                       const std::vector<double>& w,
                                       const std::vector<double>& gamma,
                                       const std::vector<double>& beta, double eps);

// The default F for any d: W = 0.05 I - 0.02 S, S the superdiagonal shift (W_i,i+1 = -0.02).
// Upper triangular, so every eigenvalue is 0.05; each row's sum of |W_ij| is at most 0.07 < 0.1.
// Not symmetric (for d >= 2), so W x and W^T dy can be told apart by hand.
std::vector<double> default_w(std::size_t d);

// ---- small linear algebra (float64, plain loops) ---------------------------------------
double norm2(const std::vector<double>& v);
double mean(const std::vector<double>& v);
double population_std(const std::vector<double>& v);
// W x and W^T v for a row-major d x d W.
std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x);
std::vector<double> matvec_transposed(const std::vector<double>& w, const std::vector<double>& v);
double gershgorin_bound(const std::vector<double>& w, std::size_t d);

// ---- input: parsing and validation (throw UsageError naming the option and value) ------
// "1.5,-2,3" -> {1.5, -2, 3}. Rejects an empty list, empty tokens ("1,,3"), non-numbers
// ("abc"), and non-finite values ("nan", "inf", "1e999").
std::vector<double> parse_vector(const std::string& option, const std::string& text);
double parse_scalar(const std::string& option, const std::string& text);
int parse_decimals(const std::string& option, const std::string& text);  // 0..kMaxDecimals
// layernorm or rmsnorm (any case), or "both" (an empty optional) where allow_both.
std::optional<NormKind> parse_norm(const std::string& option, const std::string& text, bool allow_both);
void validate_eps(const std::string& option, double eps);  // finite and > 0
// A per-element vector (gamma, beta, dy) must have length d.
void validate_length(const std::string& option, const std::vector<double>& v, std::size_t d);
// x of a form with a d x d W: 1 <= d <= kMaxMatrixDim.
void validate_matrix_dim(const std::string& option, std::size_t d);
// W must hold d*d values; the message names both shapes (the "d != d_model" mistake).
void validate_w(const std::string& option, const std::vector<double>& w, std::size_t d);

// ---- from the command line's option strings to a worksheet ------------------------------
// Each field is the text the user gave, or nullopt for "not given" (then the worksheet default
// applies: x = [2, -1, 0, 3], eps = 1e-5, gamma = ones(d), beta = zeros(d), W = default_w(d),
// dy = ones(d)). Errors are UsageErrors naming the option (--x, --eps, ...) and the bad value.
struct NormOptions {
  std::optional<std::string> x, eps, gamma, beta, norm;
};
struct ResidualOptions {
  std::optional<std::string> x, w, dy;
};
struct PlacementOptions {
  std::optional<std::string> x, w, eps, gamma, beta, norm;
};
NormWorksheet norm_worksheet_from_options(const NormOptions& o);
ResidualWorksheet residual_worksheet_from_options(const ResidualOptions& o);
PlacementWorksheet placement_worksheet_from_options(const PlacementOptions& o);
// --decimals; nullopt gives kDefaultDecimals.
int decimals_from_option(const std::optional<std::string>& text);

// ---- output ----------------------------------------------------------------------------
// Fixed-point with `decimals` digits; never prints "-0.0000".
std::string format_number(double v, int decimals);
std::string format_vector(const std::vector<double>& v, int decimals);

std::string render_text(const NormWorksheet& ws, int decimals);
std::string render_text(const ResidualWorksheet& ws, int decimals);
std::string render_text(const PlacementWorksheet& ws, int decimals);
// One JSON document (no trailing newline); values are unrounded float64. Keys: docs/handcalc.md.
std::string render_json(const NormWorksheet& ws, int decimals);
std::string render_json(const ResidualWorksheet& ws, int decimals);
std::string render_json(const PlacementWorksheet& ws, int decimals);

}  // namespace normlab::handcalc
