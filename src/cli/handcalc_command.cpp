// `normlab handcalc [residual|placement]`: the worksheet arithmetic of LayerNorm/RMSNorm, the
// residual gradient and Pre-/Post-LN, printed step by step. This file only wires option strings
// to the library (include/handcalc/normlab/handcalc.h), which parses, validates, computes and renders.
//   normlab handcalc --help
//   normlab handcalc residual --help
//   normlab handcalc placement --help
#include <spdlog/spdlog.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli_common.h"
#include "normlab/error.h"
#include "normlab/handcalc.h"
#include "normlab/handcalc_precision.h"

namespace normlab::cli {

namespace {

namespace hc = normlab::handcalc;

// The string options of one (sub)command, by long name ("--x"). Values stay strings so that
// the library's parser, not CLI11, reports bad input (its messages name the option and value).
struct OptionSet {
  std::map<std::string, std::string> value;
  std::map<std::string, CLI::Option*> option;

  void add(CLI::App& app, const std::string& name, const std::string& type,
           const std::string& help) {
    option[name] = app.add_option(name, value[name], help)->type_name(type);
  }
  bool has(const std::string& name) const { return option.count(name) > 0; }
  bool given(const std::string& name) const {
    auto it = option.find(name);
    return it != option.end() && it->second->count() > 0;
  }
};

// The parent `handcalc` also accepts options before the sub-subcommand name
// (`handcalc --x 1,2 residual`), and the sub-subcommands fall through to it, so an option the
// sub-subcommand lacks lands in the parent. Merge the two here: a parent value counts for the
// sub-subcommand if it has that option, is an error if it does not, and may not be given twice.
std::optional<std::string> merged(const OptionSet& parent, const OptionSet& sub,
                                  const std::string& name, const std::string& sub_name) {
  const bool in_parent = parent.given(name), in_sub = sub.given(name);
  NL_USAGE(!(in_parent && in_sub), "{} was given twice (before and after `{}`)", name, sub_name);
  if (in_sub) return sub.value.at(name);
  if (in_parent) return parent.value.at(name);
  return std::nullopt;
}

void reject_foreign(const OptionSet& parent, const OptionSet& sub, const std::string& sub_name) {
  for (const auto& [name, opt] : parent.option) {
    NL_USAGE(opt->count() == 0 || sub.has(name), "{} does not apply to `handcalc {}`{}", name,
             sub_name,
             name == "--beta" || name == "--gamma" || name == "--eps" || name == "--norm"
                 ? " (it has no norm; see `handcalc placement`)"
                 : "");
  }
}

std::optional<std::string> own(const OptionSet& set, const std::string& name) {
  if (!set.given(name)) return std::nullopt;
  return set.value.at(name);
}

void print(const std::string& text, bool json) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (json) std::fputc('\n', stdout);
  std::fflush(stdout);
}

const char* kVectorHelp =
    "LIST: numbers separated by commas, e.g. --x -1.5,2,0 (no spaces, or quote the list).\n";

// ---- the forms' flags

// The worksheet's own flags (also the defaults the forms' flags fall through to).
std::shared_ptr<OptionSet> add_norm_flags(CLI::App* norm_cmd) {
  auto norm_opts = std::make_shared<OptionSet>();
  norm_opts->add(*norm_cmd, "--x", "LIST", "Input vector, comma list (default 2,-1,0,3)");
  norm_opts->add(*norm_cmd, "--eps", "NUM", "Epsilon inside the square root, > 0 (default 1e-5)");
  norm_opts->add(*norm_cmd, "--gamma", "LIST", "Scale, comma list of length d (default ones)");
  norm_opts->add(*norm_cmd, "--beta", "LIST", "Shift, comma list of length d (default zeros); LayerNorm only");
  norm_opts->add(*norm_cmd, "--norm", "NAME", "layernorm (ln) | rmsnorm (rms) | both, in any case (default both)");
  norm_opts->add(*norm_cmd, "--decimals", "INT", "Digits after the point in text output, 0..17 (default 4)");
  norm_opts->add(*norm_cmd, "--precision", "NAME",
                 "fp32 | bf16 | fp16: every intermediate as the format stores it, beside float64 "
                 "(docs/precision.md)");
  norm_opts->add(*norm_cmd, "--norm-compute", "MODE",
                 "With --precision bf16|fp16: format (PyTorch's composite ops, each rounded; "
                 "default) | fp32 (float32 inside, y rounded once)");
  norm_opts->add(*norm_cmd, "--case", "NAME",
                 "With --precision, a built-in row instead of --x: worksheet | square-overflow | "
                 "all-equal | small-4096 | large-mean");
  norm_cmd->footer(std::string(
      "Without a form, prints the LayerNorm and RMSNorm worksheet: mean, variance (biased), std,\n"
      "every xhat and y; the mean of squares, RMS = sqrt(ms) and r = sqrt(ms + eps) (what RMSNorm\n"
      "divides by); and a comparison (reductions per row, parameters, output mean and std).\n"
      "\n"
      "Forms:\n"
      "  normlab handcalc              LayerNorm / RMSNorm worksheet (x = 2,-1,0,3, eps = 1e-5)\n"
      "  normlab handcalc residual     gradient through y = x + W x: identity term vs F term\n"
      "  normlab handcalc placement    Pre-LN y = x + F(N(x)) vs Post-LN y = N(x + F(x))\n"
      "\n"
      "Examples:\n"
      "  normlab handcalc\n"
      "  normlab handcalc --x 1.5,-2,0.5 --norm rmsnorm --decimals 6\n"
      "  normlab handcalc --x 2,-1,0,3 --gamma 1,2,1,0.5 --beta 0,0,1,0 --norm layernorm\n"
      "  normlab handcalc --json          (every intermediate; keys in docs/handcalc.md)\n"
      "  normlab handcalc --precision fp16 --case all-equal --norm layernorm\n"
      "  normlab handcalc --precision bf16 --norm-compute fp32 --x 1000.3,999.4,1000.9,999.4\n"
      "\n") + kVectorHelp);
  return norm_opts;
}

CLI::App* add_residual(CLI::App* norm_cmd, GlobalOptions& g, std::shared_ptr<OptionSet>& res_opts) {
  auto* res_cmd = norm_cmd->add_subcommand(
      "residual", "dL/dx through y = x + F(x), F(x) = W x: the identity term vs the F term");
  res_cmd->fallthrough();
  add_global_flags(*res_cmd, g);
  res_opts = std::make_shared<OptionSet>();
  res_opts->add(*res_cmd, "--x", "LIST", "Input vector, comma list (default 2,-1,0,3)");
  res_opts->add(*res_cmd, "--w", "LIST",
                "W of F(x) = W x: d*d values, row-major (default 0.05 on the diagonal, -0.02 "
                "above it)");
  res_opts->add(*res_cmd, "--dy", "LIST", "Upstream gradient dL/dy, comma list of length d (default ones)");
  res_opts->add(*res_cmd, "--decimals", "INT", "Digits after the point in text output, 0..17 (default 4)");
  res_cmd->footer(std::string(
      "Prints y = x + W x, then dL/dx = dL/dy + W^T dL/dy with the identity term (dL/dy) and the\n"
      "F term (W^T dL/dy) separately, their norms, and\n"
      "  identity share = ||dL/dy|| / (||dL/dy|| + ||W^T dL/dy||)   (in [0, 1]; 0.5 if both are 0)\n"
      "and, for contrast, the gradient without the residual: W^T dL/dy.\n"
      "The default W has every eigenvalue of modulus < 0.1 (max row sum of |W_ij| = 0.07).\n"
      "\n"
      "Examples:\n"
      "  normlab handcalc residual\n"
      "  normlab handcalc residual --x 1,2 --w 0.5,0,0.25,-1 --dy 1,-1\n"
      "  normlab handcalc residual --json\n"
      "\n") + kVectorHelp);
  return res_cmd;
}

CLI::App* add_placement(CLI::App* norm_cmd, GlobalOptions& g, std::shared_ptr<OptionSet>& place_opts) {
  auto* place_cmd = norm_cmd->add_subcommand(
      "placement", "One vector through a Pre-LN step x + F(N(x)) and a Post-LN step N(x + F(x))");
  place_cmd->fallthrough();
  add_global_flags(*place_cmd, g);
  place_opts = std::make_shared<OptionSet>();
  place_opts->add(*place_cmd, "--x", "LIST", "Input vector, comma list (default 2,-1,0,3)");
  place_opts->add(*place_cmd, "--w", "LIST",
                  "W of F(x) = W x: d*d values, row-major (default 0.05 on the diagonal, -0.02 "
                  "above it)");
  place_opts->add(*place_cmd, "--norm", "NAME", "N: layernorm (ln) | rmsnorm (rms), in any case (default layernorm)");
  place_opts->add(*place_cmd, "--eps", "NUM", "Epsilon of N, > 0 (default 1e-5)");
  place_opts->add(*place_cmd, "--gamma", "LIST", "Scale of N, comma list of length d (default ones)");
  place_opts->add(*place_cmd, "--beta", "LIST", "Shift of N, comma list of length d (default zeros); layernorm only");
  place_opts->add(*place_cmd, "--decimals", "INT", "Digits after the point in text output, 0..17 (default 4)");
  place_cmd->footer(std::string(
      "Prints every intermediate of both steps with the same F(x) = W x and the same N, and the\n"
      "output norm of each: Post-LN's is sqrt(d) up to eps (gamma = 1, beta = 0) whatever x is;\n"
      "Pre-LN's follows ||x||, since x is added back unnormalized.\n"
      "\n"
      "Examples:\n"
      "  normlab handcalc placement\n"
      "  normlab handcalc placement --x 20,-10,0,30 --norm rmsnorm\n"
      "  normlab handcalc placement --x 1,2 --w 0.5,0,0.25,-1 --json\n"
      "\n") + kVectorHelp);
  return place_cmd;
}

// ---- the forms, each computed and rendered to text (or JSON)

std::string residual_text(const OptionSet& norm_opts, const OptionSet& res_opts, bool json) {
  reject_foreign(norm_opts, res_opts, "residual");
  auto m = [&](const char* n) { return merged(norm_opts, res_opts, n, "residual"); };
  hc::ResidualOptions o{m("--x"), m("--w"), m("--dy")};
  const int decimals = hc::decimals_from_option(m("--decimals"));
  const auto ws = hc::residual_worksheet_from_options(o);
  spdlog::debug("handcalc residual: d = {}, identity share = {}", ws.d, ws.identity_share);
  return json ? hc::render_json(ws, decimals) : hc::render_text(ws, decimals);
}

std::string placement_text(const OptionSet& norm_opts, const OptionSet& place_opts, bool json) {
  reject_foreign(norm_opts, place_opts, "placement");
  auto m = [&](const char* n) { return merged(norm_opts, place_opts, n, "placement"); };
  hc::PlacementOptions o{m("--x"), m("--w"), m("--eps"), m("--gamma"), m("--beta"),
                         m("--norm")};
  const int decimals = hc::decimals_from_option(m("--decimals"));
  const auto ws = hc::placement_worksheet_from_options(o);
  spdlog::debug("handcalc placement: d = {}, norm = {}", ws.d, hc::norm_name(ws.norm));
  return json ? hc::render_json(ws, decimals) : hc::render_text(ws, decimals);
}

std::string precision_text(const OptionSet& s, bool json) {
  NL_USAGE(!s.given("--decimals"),
           "--decimals does not apply with --precision: stored values print exactly");
  hc::PrecisionOptions o{own(s, "--x"),         own(s, "--eps"),          own(s, "--gamma"),
                         own(s, "--beta"),      own(s, "--norm"),         own(s, "--precision"),
                         own(s, "--norm-compute"), own(s, "--case")};
  const auto ws = hc::precision_worksheet_from_options(o);
  spdlog::debug("handcalc precision: case {}", ws.case_name);
  return json ? hc::render_json(ws) : hc::render_text(ws);
}

std::string norm_text(const OptionSet& s, bool json) {
  hc::NormOptions o{own(s, "--x"), own(s, "--eps"), own(s, "--gamma"), own(s, "--beta"),
                    own(s, "--norm")};
  const int decimals = hc::decimals_from_option(own(s, "--decimals"));
  const auto ws = hc::norm_worksheet_from_options(o);
  spdlog::debug("handcalc: norm = {}", hc::norm_name(ws.norm));
  return json ? hc::render_json(ws, decimals) : hc::render_text(ws, decimals);
}

}  // namespace

Runner add_handcalc(CLI::App& app, GlobalOptions& g) {
  auto* norm_cmd = app.add_subcommand(
      "handcalc", "Step-by-step LayerNorm / RMSNorm / residual / Pre-vs-Post-LN arithmetic on a "
                  "small vector, in float64 (or as bf16 / fp16 store it: --precision)");
  norm_cmd->require_subcommand(0, 1);
  add_global_flags(*norm_cmd, g);
  std::shared_ptr<OptionSet> norm_opts = add_norm_flags(norm_cmd), res_opts, place_opts;
  CLI::App* res_cmd = add_residual(norm_cmd, g, res_opts);
  CLI::App* place_cmd = add_placement(norm_cmd, g, place_opts);
  return [&g, res_cmd, place_cmd, norm_opts, res_opts, place_opts]() -> int {
    const bool json = g.json;
    const std::string out = res_cmd->parsed()     ? residual_text(*norm_opts, *res_opts, json)
                            : place_cmd->parsed() ? placement_text(*norm_opts, *place_opts, json)
                            : norm_opts->given("--precision") || norm_opts->given("--norm-compute") || norm_opts->given("--case")
                                ? precision_text(*norm_opts, json)
                                : norm_text(*norm_opts, json);
    // Everything is computed and rendered before the first byte is written: a bad option
    // leaves stdout empty.
    print(out, json);
    return 0;
  };
}

}  // namespace normlab::cli
