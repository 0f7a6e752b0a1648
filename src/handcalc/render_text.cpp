// handcalc text output: the worksheets as aligned, labelled lines a student can check by hand,
// each intermediate next to the formula that produced it. Only formats; all numbers come from
// the worksheet structs (handcalc.cpp).
#include <fmt/core.h>

#include <algorithm>
#include <string>
#include <vector>

#include "normlab/handcalc.h"

namespace normlab::handcalc {

std::string format_number(double v, int decimals) {
  std::string s = fmt::format("{:.{}f}", v, decimals);
  // A tiny negative value (a mean of -1e-17 from rounding) would print as "-0.0000", which
  // reads as a sign the arithmetic does not have.
  if (!s.empty() && s[0] == '-' && s.find_first_not_of("0.", 1) == std::string::npos) s.erase(0, 1);
  return s;
}

std::string format_vector(const std::vector<double>& v, int decimals) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += format_number(v[i], decimals);
  }
  return out + "]";
}

namespace {

// Rows of cells rendered in columns; `right[c]` right-aligns column c (numbers), else left.
// Trailing empty cells are dropped so that lines carry no trailing spaces.
class Grid {
 public:
  explicit Grid(std::vector<bool> right = {}, std::string indent = "  ")
      : right_(std::move(right)), indent_(std::move(indent)) {}
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string str() const {
    std::vector<std::size_t> width;
    for (const auto& r : rows_) {
      if (width.size() < r.size()) width.resize(r.size(), 0);
      for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    }
    std::string out;
    for (const auto& r : rows_) {
      std::size_t used = r.size();
      while (used > 0 && r[used - 1].empty()) --used;
      std::string line = indent_;
      for (std::size_t c = 0; c < used; ++c) {
        bool last = c + 1 == used;
        bool right = c < right_.size() && right_[c];
        std::string pad(width[c] - r[c].size(), ' ');
        if (right) {
          line += pad + r[c];
        } else {
          line += r[c];
          if (!last) line += pad;
        }
        if (!last) line += "  ";
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<bool> right_;
  std::string indent_;
  std::vector<std::vector<std::string>> rows_;
};

// A labelled line: "label   symbol = formula   = value   note".
class Sheet {
 public:
  void line(const std::string& label, const std::string& formula, const std::string& value,
            const std::string& note = "") {
    // The note follows its value instead of getting a column: next to a long vector, an aligned
    // note column would push every note far to the right.
    grid_.row({label, formula, "= " + value + (note.empty() ? "" : "  " + note)});
  }
  std::string str() const { return grid_.str(); }

 private:
  Grid grid_;
};

std::string num(double v, int decimals) { return format_number(v, decimals); }
std::string vec(const std::vector<double>& v, int decimals) { return format_vector(v, decimals); }

bool all_equal(const std::vector<double>& v, double value) {
  return std::all_of(v.begin(), v.end(), [&](double e) { return e == value; });
}

// eps is tiny (1e-5) and would print as 0.0000 at 4 decimals; the shortest exact form is clearer.
std::string eps_text(double eps) { return fmt::format("{}", eps); }

std::string header(const std::string& title, int decimals) {
  return fmt::format("{}\n(float64 throughout; shown to {} decimals; --json gives unrounded "
                     "values)\n",
                     title, decimals);
}

std::string matrix_text(const std::vector<double>& w, std::size_t d, int decimals,
                        const std::string& indent) {
  // One width for every entry, so the columns of W line up for reading W^T by eye.
  std::vector<std::string> cells;
  std::size_t width = 0;
  for (double v : w) {
    cells.push_back(num(v, decimals));
    width = std::max(width, cells.back().size());
  }
  std::string out;
  for (std::size_t i = 0; i < d; ++i) {
    out += indent + "[";
    for (std::size_t j = 0; j < d; ++j) {
      const std::string& c = cells[i * d + j];
      out += (j ? ", " : "") + std::string(width - c.size(), ' ') + c;
    }
    out += "]\n";
  }
  return out;
}

void input_gamma_beta(Sheet& s, const std::vector<double>& gamma, bool gamma_default,
                      const std::vector<double>* beta, bool beta_default, bool beta_ln_only,
                      int decimals) {
  s.line("scale", "gamma", vec(gamma, decimals), gamma_default ? "(default: ones)" : "");
  if (beta != nullptr) {
    std::string note;
    if (beta_default) note = "default: zeros";
    if (beta_ln_only) note += (note.empty() ? "" : "; ") + std::string("LayerNorm only: RMSNorm has no beta");
    s.line("shift", "beta", vec(*beta, decimals), note.empty() ? "" : "(" + note + ")");
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------

void layernorm_stats(Sheet& s, const LayerNormWorksheet& ws, int decimals,
                     const std::string& xname) {
  s.line("mean", "mu = (1/d) sum " + xname + "_i", num(ws.mean, decimals));
  s.line("variance", "var = (1/d) sum (" + xname + "_i - mu)^2", num(ws.var, decimals),
         "(biased: divides by d, not d-1)");
  s.line("std", "sigma = sqrt(var)", num(ws.std_dev, decimals));
  s.line("std with eps", "s = sqrt(var + eps)", num(ws.std_eps, decimals),
         "(what " + xname + " - mu is divided by)");
  s.line("inverse", "rstd = 1 / s", num(ws.rstd, decimals));
}

std::string layernorm_table(const LayerNormWorksheet& ws, int decimals, const std::string& xname) {
  Grid g({true, true, true, true, true, true});
  g.row({"i", xname + "_i", xname + "_i - mu", "(" + xname + "_i - mu)^2", "xhat_i = (" + xname + "_i - mu) / s",
         "y_i = gamma_i * xhat_i + beta_i"});
  for (std::size_t i = 0; i < ws.d; ++i) {
    g.row({std::to_string(i + 1), num(ws.x[i], decimals), num(ws.xc[i], decimals),
           num(ws.xc_sq[i], decimals), num(ws.xhat[i], decimals), num(ws.y[i], decimals)});
  }
  return g.str();
}

std::string layernorm_section(const LayerNormWorksheet& ws, int decimals) {
  std::string out = "LayerNorm   y = gamma * (x - mu) / sqrt(var + eps) + beta\n";
  Sheet stats;
  layernorm_stats(stats, ws, decimals, "x");
  out += stats.str();
  out += "\n" + layernorm_table(ws, decimals, "x") + "\n";
  Sheet s;
  s.line("centered", "x - mu", vec(ws.xc, decimals));
  s.line("normalized", "xhat = (x - mu) / s", vec(ws.xhat, decimals));
  s.line("output", "y = gamma * xhat + beta", vec(ws.y, decimals));
  s.line("output mean", "(1/d) sum y_i", num(ws.out_mean, decimals));
  s.line("output std", "sqrt((1/d) sum (y_i - mean(y))^2)", num(ws.out_std, decimals));
  out += s.str();
  if (ws.d == 1) {
    out += "  (d = 1: x - mu = 0, so xhat = 0 and y = beta; eps keeps s = sqrt(eps) > 0)\n";
  }
  return out;
}

// ---- RMSNorm ------------------------------------------------------------------------------

void rmsnorm_stats(Sheet& s, const RMSNormWorksheet& ws, int decimals, const std::string& xname) {
  s.line("mean of squares", "ms = (1/d) sum " + xname + "_i^2", num(ws.mean_sq, decimals));
  s.line("RMS", "rms = sqrt(ms)", num(ws.rms, decimals), "(the worksheet's RMS, without eps)");
  s.line("RMS with eps", "r = sqrt(ms + eps)", num(ws.r, decimals),
         "(what " + xname + " is divided by: eps keeps r > 0)");
  s.line("inverse", "1 / r", num(ws.inv_r, decimals));
}

std::string rmsnorm_table(const RMSNormWorksheet& ws, int decimals, const std::string& xname) {
  Grid g({true, true, true, true, true});
  g.row({"i", xname + "_i", xname + "_i^2", "xhat_i = " + xname + "_i / r", "y_i = gamma_i * xhat_i"});
  for (std::size_t i = 0; i < ws.d; ++i) {
    g.row({std::to_string(i + 1), num(ws.x[i], decimals), num(ws.x_sq[i], decimals),
           num(ws.xhat[i], decimals), num(ws.y[i], decimals)});
  }
  return g.str();
}

std::string rmsnorm_section(const RMSNormWorksheet& ws, int decimals) {
  std::string out = "RMSNorm   y = gamma * x / sqrt(mean(x^2) + eps)   (no mean subtracted, no beta)\n";
  Sheet stats;
  rmsnorm_stats(stats, ws, decimals, "x");
  out += stats.str();
  out += "\n" + rmsnorm_table(ws, decimals, "x") + "\n";
  Sheet s;
  s.line("normalized", "xhat = x / r", vec(ws.xhat, decimals));
  s.line("output", "y = gamma * xhat", vec(ws.y, decimals));
  s.line("output mean", "(1/d) sum y_i", num(ws.out_mean, decimals));
  s.line("output std", "sqrt((1/d) sum (y_i - mean(y))^2)", num(ws.out_std, decimals));
  s.line("output RMS", "sqrt((1/d) sum y_i^2)", num(ws.out_rms, decimals));
  out += s.str();
  return out;
}

std::string comparison_section(const NormWorksheet& ws, int decimals) {
  const auto& ln = *ws.layernorm;
  const auto& rms = *ws.rmsnorm;
  std::string out = "comparison\n";
  Grid g;
  g.row({"", "", "LayerNorm", "RMSNorm"});
  g.row({"reductions per row", "", fmt::format("{} (mean, then variance)", ln.reductions),
         fmt::format("{} (mean of squares)", rms.reductions)});
  g.row({"parameters", "", fmt::format("2d = {} (gamma, beta)", ln.params),
         fmt::format("d = {} (gamma)", rms.params)});
  g.row({"output mean", "(1/d) sum y_i", num(ln.out_mean, decimals), num(rms.out_mean, decimals)});
  g.row({"output std", "sqrt((1/d) sum (y_i - mean(y))^2)", num(ln.out_std, decimals),
         num(rms.out_std, decimals)});
  out += g.str();
  if (ws.gamma_default && ws.beta_default) {
    out += "  With gamma = 1 and beta = 0, LayerNorm's output has mean 0 and std 1 (up to eps);\n"
           "  RMSNorm does not subtract the mean, so its output keeps a mean (here " +
           num(rms.out_mean, decimals) + ")\n  and has RMS 1 (up to eps) instead.\n";
  } else {
    out += "  These statistics include your gamma/beta: y = gamma * xhat (+ beta), so they are\n"
           "  no longer the normalized 0 / 1.\n";
  }
  return out;
}

// ---- residual -----------------------------------------------------------------------------

std::string w_description(bool is_default, std::size_t d) {
  if (is_default) {
    return fmt::format("W ({}x{}, default: 0.05 on the diagonal, -0.02 just above it)", d, d);
  }
  return fmt::format("W ({}x{}, from --w, row-major)", d, d);
}

}  // namespace

std::string render_text(const NormWorksheet& ws, int decimals) {
  const auto& any_x = ws.layernorm ? ws.layernorm->x : ws.rmsnorm->x;
  const double eps = ws.layernorm ? ws.layernorm->eps : ws.rmsnorm->eps;
  const auto& gamma = ws.layernorm ? ws.layernorm->gamma : ws.rmsnorm->gamma;
  std::string title = !ws.norm ? "normlab handcalc: LayerNorm and RMSNorm of one vector, by hand"
                      : ws.norm == NormKind::layernorm ? "normlab handcalc: LayerNorm of one vector, by hand"
                                                       : "normlab handcalc: RMSNorm of one vector, by hand";
  std::string out = header(title, decimals) + "\ninput\n";
  Sheet s;
  s.line("vector", "x", vec(any_x, decimals), fmt::format("(d = {})", any_x.size()));
  s.line("epsilon", "eps", eps_text(eps));
  input_gamma_beta(s, gamma, ws.gamma_default, ws.layernorm ? &ws.layernorm->beta : nullptr,
                   ws.beta_default, !ws.norm, decimals);
  out += s.str();
  if (ws.layernorm) out += "\n" + layernorm_section(*ws.layernorm, decimals);
  if (ws.rmsnorm) out += "\n" + rmsnorm_section(*ws.rmsnorm, decimals);
  if (ws.layernorm && ws.rmsnorm) out += "\n" + comparison_section(ws, decimals);
  return out;
}

std::string render_text(const ResidualWorksheet& ws, int decimals) {
  const std::size_t d = ws.d;
  std::string out = header("normlab handcalc residual: the gradient through y = x + F(x), F(x) = W x",
                           decimals);
  out += "\ninput\n";
  Sheet s;
  s.line("vector", "x", vec(ws.x, decimals), fmt::format("(d = {})", d));
  s.line("upstream gradient", "dL/dy", vec(ws.dy, decimals), ws.dy_default ? "(default: ones)" : "");
  out += s.str();
  out += "  " + w_description(ws.w_default, d) + "\n";
  out += matrix_text(ws.w, d, decimals, "    ");
  out += fmt::format("  max_i sum_j |W_ij| = {}{}\n", num(ws.w_bound, decimals),
                     ws.w_bound < 1 ? "  (Gershgorin: every eigenvalue of W has modulus <= this)"
                                    : "  (Gershgorin bound on |eigenvalues|)");

  out += "\nforward   y = x + F(x)\n";
  Grid fwd({true, true, true, true});
  fwd.row({"i", "x_i", "F_i = sum_j W_ij x_j", "y_i = x_i + F_i"});
  for (std::size_t i = 0; i < d; ++i) {
    fwd.row({std::to_string(i + 1), num(ws.x[i], decimals), num(ws.fx[i], decimals),
             num(ws.y[i], decimals)});
  }
  out += fwd.str();

  out += "\nbackward   dL/dx = dL/dy + W^T dL/dy   (because dy/dx = I + W)\n";
  Grid bwd({true, true, true, true});
  bwd.row({"i", "identity: dL/dy_i", "F term: sum_k W_ki dL/dy_k", "dL/dx_i"});
  for (std::size_t i = 0; i < d; ++i) {
    bwd.row({std::to_string(i + 1), num(ws.grad_identity[i], decimals), num(ws.grad_f[i], decimals),
             num(ws.dx[i], decimals)});
  }
  out += bwd.str() + "\n";
  Sheet b;
  b.line("identity term", "dL/dy", vec(ws.grad_identity, decimals),
         "||.|| = " + num(ws.norm_identity, decimals));
  b.line("F term", "W^T dL/dy", vec(ws.grad_f, decimals), "||.|| = " + num(ws.norm_f, decimals));
  b.line("gradient", "dL/dx = dL/dy + W^T dL/dy", vec(ws.dx, decimals),
         "||.|| = " + num(ws.norm_dx, decimals));
  b.line("identity share", "||dL/dy|| / (||dL/dy|| + ||W^T dL/dy||)",
         num(ws.identity_share, decimals),
         ws.norm_identity + ws.norm_f > 0 ? "(1 = all highway, 0.5 = even split)"
                                          : "(both terms are 0: defined as 0.5)");
  b.line("no residual", "y = F(x): dL/dx = W^T dL/dy", vec(ws.dx_no_residual, decimals),
         "||.|| = " + num(ws.norm_no_residual, decimals));
  out += b.str();
  out += fmt::format("  Without the skip connection dL/dx is only W^T dL/dy (norm {}); with it, dL/dy\n"
                     "  reaches x unchanged, whatever W does.\n",
                     num(ws.norm_no_residual, decimals));
  return out;
}

std::string render_text(const PlacementWorksheet& ws, int decimals) {
  const std::size_t d = ws.d;
  const bool ln = ws.norm == NormKind::layernorm;
  const std::string nname = ln ? "LayerNorm" : "RMSNorm";
  std::string out = header("normlab handcalc placement: Pre-LN vs Post-LN on one vector, N = " + nname +
                               ", F(x) = W x",
                           decimals);
  out += "\ninput\n";
  Sheet s;
  s.line("vector", "x", vec(ws.x, decimals), fmt::format("(d = {})", d));
  s.line("epsilon", "eps", eps_text(ws.eps));
  input_gamma_beta(s, ws.gamma, ws.gamma_default, ln ? &ws.beta : nullptr, ws.beta_default, false,
                   decimals);
  s.line("input norm", "||x||", num(ws.x_norm, decimals));
  s.line("reference", "sqrt(d)", num(ws.sqrt_d, decimals),
         "(the norm of a normalized vector with gamma = 1, beta = 0)");
  out += s.str();
  out += "  " + w_description(ws.w_default, d) + "\n";
  out += matrix_text(ws.w, d, decimals, "    ");

  auto norm_detail = [&](Sheet& sheet, const NormStep& step, const std::string& in) {
    if (step.layernorm) {
      layernorm_stats(sheet, *step.layernorm, decimals, in);
    } else {
      rmsnorm_stats(sheet, *step.rmsnorm, decimals, in);
    }
  };
  auto xhat_of = [](const NormStep& step) -> const std::vector<double>& {
    return step.layernorm ? step.layernorm->xhat : step.rmsnorm->xhat;
  };
  const std::string y_formula = ln ? "gamma * xhat + beta" : "gamma * xhat";

  // Pre-LN: the norm's statistics are of x itself.
  out += "\nPre-LN   y = x + F(N(x))   (the sublayer sees N(x); x itself is added back)\n";
  Sheet pre;
  norm_detail(pre, ws.pre_n, "x");
  pre.line("normalized", "xhat = " + std::string(ln ? "(x - mu) / s" : "x / r"),
           vec(xhat_of(ws.pre_n), decimals));
  pre.line("norm output", "n = N(x) = " + y_formula, vec(ws.pre_n.y(), decimals));
  pre.line("sublayer", "f = F(n) = W n", vec(ws.pre_f, decimals));
  pre.line("output", "y = x + f", vec(ws.pre_y, decimals));
  pre.line("output norm", "||y||", num(ws.pre_y_norm, decimals));
  out += pre.str();
  out += fmt::format("  Pre-LN: y carries x unnormalized, so ||y|| follows ||x|| = {}; sqrt(d) = {} "
                     "does not bound it.\n",
                     num(ws.x_norm, decimals), num(ws.sqrt_d, decimals));

  // Post-LN: the norm's statistics are of the residual sum v = x + F(x).
  out += "\nPost-LN   y = N(x + F(x))   (the norm comes last)\n";
  Sheet post;
  post.line("sublayer", "f = F(x) = W x", vec(ws.post_f, decimals));
  post.line("residual sum", "v = x + f", vec(ws.post_s, decimals));
  norm_detail(post, ws.post_n, "v");
  post.line("normalized", "xhat = " + std::string(ln ? "(v - mu) / s" : "v / r"),
            vec(xhat_of(ws.post_n), decimals));
  post.line("xhat norm", "||xhat||", num(ws.post_n.xhat_norm(), decimals));
  post.line("output", "y = N(v) = " + y_formula, vec(ws.post_y, decimals));
  post.line("output norm", "||y||", num(ws.post_y_norm, decimals));
  out += post.str();
  const bool plain = all_equal(ws.gamma, 1.0) && (!ln || all_equal(ws.beta, 0.0));
  // ||xhat|| = sqrt(d * var / (var + eps)): sqrt(d) up to eps unless var is comparable to eps
  // (d = 1 or a constant v under LayerNorm has var = 0, hence xhat = 0).
  const bool near_sqrt_d = ws.post_n.xhat_norm() >= ws.sqrt_d * (1 - 1e-3);
  const std::string stat = ln ? "var" : "ms";
  if (!plain) {
    out += "  Post-LN: ||xhat|| <= sqrt(d); your gamma/beta then rescale and shift it.\n";
  } else if (ln && d == 1) {
    out += "  Post-LN: d = 1, so v - mu = 0 and LayerNorm outputs beta: ||y|| = 0, not sqrt(d).\n";
  } else if (near_sqrt_d) {
    out += fmt::format("  Post-LN: ||y|| = ||xhat|| = sqrt(d * {0} / ({0} + eps)) = sqrt(d) = {1} "
                       "up to eps, whatever x is.\n",
                       stat, num(ws.sqrt_d, decimals));
  } else {
    out += fmt::format("  Post-LN: ||y|| = ||xhat|| = sqrt(d * {0} / ({0} + eps)), below sqrt(d) = "
                       "{1} because {0} is not large against eps.\n",
                       stat, num(ws.sqrt_d, decimals));
  }
  return out;
}

}  // namespace normlab::handcalc
