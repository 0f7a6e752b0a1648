// `normlab probe [PRESET]`: signal propagation at initialization, no training. Parses options,
// calls the library (include/train/normlab/probe.h) and prints its results as tables or JSON; every
// number printed here was computed there.
//   normlab probe --help          presets, options, examples
//   normlab probe all --json      every preset as one JSON document
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "cli_common.h"
#include "normlab/parse.h"
#include "normlab/config.h"
#include "normlab/io.h"
#include "normlab/probe.h"
#include "normlab/run.h"

namespace normlab::cli {

namespace {

struct ProbeArgs {
  std::string preset;  // empty: config
  int seeds = 3;
  int64_t batch = 16;
  int threads = 1;
  std::string config_file;
  std::vector<int64_t> depths = {6, 12, 24};
  std::vector<std::string> inits;    // xiong2020: with --inits or --widths, the factor table too
  std::vector<int64_t> widths;
  std::vector<double> gains = {0.5, 1.0, 2.0};
  std::string activation = "linear";
  std::map<std::string, std::string> values;  // --key value, applied over the file
  DeviceOptions dev;
};

// Keys that only matter once training starts: not flags of `probe` (a --config file may still
// hold them; they are read and ignored). `threads` is probe's own --threads (default 1).
const std::set<std::string>& training_only_keys() {
  static const std::set<std::string> keys = {"optimizer", "lr",         "beta1", "beta2",      "adam_eps",
                                             "weight_decay", "warmup_steps", "schedule", "clip", "batch_size",
                                             "steps",     "eval_every", "eval_batches", "threads", "init_from"};
  return keys;
}

// ---- formatting (no arithmetic on the results: only how a number is written) ---------------------

std::string num(double v) {
  if (std::isnan(v)) return "-";
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-2 || a >= 1e4)) return fmt::format("{:.2e}", v);
  if (a < 10) return fmt::format("{:.3f}", v);
  if (a < 100) return fmt::format("{:.2f}", v);
  return fmt::format("{:.1f}", v);
}

std::string pm(const Stat& s) {
  if (s.n <= 1 || std::isnan(s.std)) return num(s.mean);
  return num(s.mean) + " +- " + num(s.std);
}

void rule() { std::printf("\n"); }

std::string model_line(const ConfigProbe& p, const ProbeOptions& opt) {
  const ModelConfig& m = p.config.model;
  return fmt::format("{}: d_model {}, d_hidden {}{}, vocab {}, final norm {}; batch {} x {} tokens of {} data; "
                     "mean over {} seed{} (from seed {})",
                     p.label, m.d_model, m.d_hidden, m.model == ModelKind::gpt ? fmt::format(", heads {}", m.heads) : "",
                     m.vocab, p.final_norm_on ? "on" : "off", opt.batch, m.seq_len, p.config.data.str(), opt.seeds,
                     opt.seeds == 1 ? "" : "s", p.config.seed);
}

void print_final_norm(const ConfigProbe& p) {
  std::printf("final norm (%s): ||x|| before %s, after %s (sqrt(d) = %s); ||dL/dx|| before %s, after %s\n",
              p.final_norm_on ? "on" : "off", pm(p.final_in_norm).c_str(), pm(p.final_out_norm).c_str(),
              num(p.sqrt_d).c_str(), num(p.final_in_grad_norm.mean).c_str(), num(p.final_out_grad_norm.mean).c_str());
}

// ---- presets -------------------------------------------------------------------------------------

void print_plain_stack(const PlainStackResult& r, const ProbeOptions& opt) {
  const PlainStackOptions& o = r.options;
  std::printf("plain-stack: %lld layers x_l = %sW_l x_{l-1}%s (no bias), W_l ~ N(0, (gain/sqrt(d))^2), d = %lld;\n",
              static_cast<long long>(o.layers), o.activation == Activation::gelu ? "gelu(" : "",
              o.activation == Activation::gelu ? ")" : "",
              static_cast<long long>(o.d));
  std::printf("activation: %s. The LayerNorm stack is x_l = LayerNorm(...) of the same (gamma 1, beta 0).\n",
              o.activation == Activation::linear ? "none (linear)" : to_string(o.activation));
  std::printf("x_0 ~ N(0, 1), %lld tokens; mean over tokens of ||x_l|| (sqrt(d) = %s), mean over %d seed%s\n\n",
              static_cast<long long>(r.tokens), num(r.sqrt_d).c_str(), opt.seeds, opt.seeds == 1 ? "" : "s");
  std::printf("%5s", "layer");
  for (const StackProbe& s : r.stacks) std::printf(" %18s", s.label.c_str());
  std::printf("\n");
  for (size_t l = 0; l < r.stacks[0].act_norm.size(); ++l) {
    std::printf("%5zu", l);
    for (const StackProbe& s : r.stacks) std::printf(" %18s", num(s.act_norm[l].mean).c_str());
    std::printf("\n");
  }
  std::printf("\n");
  auto row = [&](const char* name, auto get) {
    std::printf("%-22s", name);
    for (const StackProbe& s : r.stacks) std::printf(" %18s", get(s).c_str());
    std::printf("\n");
  };
  std::printf("%-22s", "");
  for (const StackProbe& s : r.stacks) std::printf(" %18s", s.label.c_str());
  std::printf("\n");
  row("||x_L|| / ||x_0||", [](const StackProbe& s) { return num(s.last_over_input.mean); });
  row("  std over seeds", [](const StackProbe& s) { return num(s.last_over_input.std); });
  row(o.activation == Activation::linear ? "  expected (gain^L; 1)" : "  expected (LN: 1)",
      [](const StackProbe& s) { return num(s.expected_last_over_input); });
  row("||dL/dW_1||", [](const StackProbe& s) { return num(s.weight_grad_norm.front().mean); });
  row("||dL/dW_L||", [](const StackProbe& s) { return num(s.weight_grad_norm.back().mean); });
  row("||dL/dx_0||", [](const StackProbe& s) { return num(s.input_grad_norm.front().mean); });
  std::printf("\nGradients: dL/dx_L = r / N with r ~ N(0, 1) (a random linear read-out, mean over the N tokens).\n");
  std::printf("LayerNorm stacks: largest relative deviation from sqrt(d) over all layers, max |mean ||x_l|| / sqrt(d) - 1| "
              "= %s\n",
              num(r.layernorm_max_rel_dev).c_str());
}

void print_growth_run(const ConfigProbe& p, const ProbeOptions& opt) {
  std::printf("%s\n\n", model_line(p, opt).c_str());
  std::printf("%6s %12s %8s %13s %13s\n", "layer", "||x_l||", "growth", "||dL/dx_l||", "||dL/dP_l||");
  std::printf("%6s %12s %8s %13s %13s\n", "embed", num(p.embed_norm.mean).c_str(), "", num(p.embed_grad_norm.mean).c_str(),
              "");
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerProbe& lp = p.layers[l];
    std::printf("%6zu %12s %8s %13s %13s\n", l + 1, num(lp.act_norm.mean).c_str(), num(lp.growth.mean).c_str(),
                num(lp.stream_grad_norm.mean).c_str(), num(lp.block_grad_norm.mean).c_str());
  }
  print_final_norm(p);
  std::printf("stream growth over %zu layers: ||x_L|| / ||x_0|| = %s\n", p.layers.size(), pm(p.stream_last_over_embed).c_str());
}

void print_preln_growth(const PrelnGrowthResult& r, const ProbeOptions& opt) {
  std::printf("preln-growth: the Pre-LN residual stream x_l = x_{l-1} + F(N(x_{l-1})) grows with depth (growth = "
              "||x_l|| / ||x_{l-1}||, the per-layer rate); the final norm maps it back to ~sqrt(d).\n"
              "||x|| = mean over tokens of the per-token L2 norm; gradient norms are Frobenius norms.\n\n");
  for (size_t i = 0; i < r.runs.size(); ++i) {
    if (i) rule();
    print_growth_run(r.runs[i], opt);
  }
}

void print_xiong(const XiongResult& r, const ProbeOptions& opt) {
  const ConfigProbe& first = r.runs.front().probe;
  std::printf("xiong2020: Xiong et al. 2020, On Layer Normalization in the Transformer Architecture, Fig. 3 / "
              "Theorem 1.\ngpt, layernorm, init xavier, d_model %lld, d_hidden %lld, heads %lld; batch %lld x %lld; "
              "mean over %d seed%s.\n",
              static_cast<long long>(first.config.model.d_model), static_cast<long long>(first.config.model.d_hidden),
              static_cast<long long>(first.config.model.heads), static_cast<long long>(opt.batch),
              static_cast<long long>(first.config.model.seq_len), opt.seeds, opt.seeds == 1 ? "" : "s");
  std::printf("||dL/dW_fc2|| per layer (the second MLP weight, Xiong's W^{2,l}), Frobenius norm:\n\n");
  size_t max_layers = 0;
  for (const XiongRun& x : r.runs) max_layers = std::max(max_layers, x.probe.layers.size());
  std::printf("%5s", "layer");
  for (const XiongRun& x : r.runs)
    std::printf(" %11s", fmt::format("{} L={}", to_string(x.placement), x.layers).c_str());
  std::printf("\n");
  for (size_t l = 0; l < max_layers; ++l) {
    std::printf("%5zu", l + 1);
    for (const XiongRun& x : r.runs)
      std::printf(" %11s", l < x.probe.layers.size() ? num(x.probe.layers[l].fc2_grad_norm.mean).c_str() : "");
    std::printf("\n");
  }
  std::printf("\n%5s %9s %24s %24s %14s\n", "depth", "placement", "fc2 last/first", "block last/first",
              "last ||dL/dW2||");
  for (const XiongRun& x : r.runs) {
    std::printf("%5lld %9s %24s %24s %14s\n", static_cast<long long>(x.layers), to_string(x.placement),
                pm(x.probe.fc2_last_over_first).c_str(), pm(x.probe.block_last_over_first).c_str(),
                num(x.probe.layers.back().fc2_grad_norm.mean).c_str());
  }
  std::printf("\n%s\n", r.verdict.c_str());
}

void print_identity_share(const IdentityShareResult& r, const ProbeOptions& opt) {
  const ConfigProbe& first = r.runs.front();
  std::printf("identity-share: dL/dx_{l-1} = identity term + F term for block l, both exact from autograd.\n"
              "identity term: the gradient through the residual additions (and, for post, the norms) with every "
              "sublayer output held constant;\nF term: the rest. share = ||id|| / (||id|| + ||F||), cos = "
              "cos(id, F). Without the residual (\"x +\" dropped) the identity term is 0.\n"
              "gpt, layernorm, init xavier, d_model %lld, %zu layers; batch %lld x %lld; mean over %d seed%s.\n\n",
              static_cast<long long>(first.config.model.d_model), first.layers.size(), static_cast<long long>(opt.batch),
              static_cast<long long>(first.config.model.seq_len), opt.seeds, opt.seeds == 1 ? "" : "s");
  auto name = [](const ConfigProbe& p) {
    return fmt::format("{}{}", to_string(p.config.model.placement), p.config.model.residual ? "" : " no-residual");
  };
  std::printf("%5s", "");
  for (const ConfigProbe& p : r.runs) std::printf("   %-27s", name(p).c_str());
  std::printf("\n%5s", "layer");
  for (size_t i = 0; i < r.runs.size(); ++i) std::printf(" | %7s %9s %9s", "share", "cos", "||F||");
  std::printf("\n");
  for (size_t l = 0; l < r.runs.front().layers.size(); ++l) {
    std::printf("%5zu", l + 1);
    for (const ConfigProbe& p : r.runs) {
      const LayerProbe& lp = p.layers[l];
      std::printf(" | %7s %9s %9s", num(lp.identity_share.mean).c_str(), num(lp.cosine.mean).c_str(),
                  num(lp.f_norm.mean).c_str());
    }
    std::printf("\n");
  }
  std::printf("\n||dL/dx_0||:");
  for (const ConfigProbe& p : r.runs) std::printf("  %s %s;", name(p).c_str(), num(p.embed_grad_norm.mean).c_str());
  std::printf("\n");
}

void print_config(const ConfigProbe& p, const ProbeOptions& opt) {
  std::printf("%s\n", model_line(p, opt).c_str());
  std::printf("loss at init %s; ||x|| = mean over tokens of ||x_t||; gradient norms are Frobenius norms; share = "
              "||id|| / (||id|| + ||F||) of dL/dx_{l-1}\n\n",
              pm(p.loss).c_str());
  std::printf("%6s %10s %8s %12s %12s %12s %7s %9s\n", "layer", "||x_l||", "growth", "||dL/dx_l||", "||dL/dP_l||",
              "||dL/dW2||", "share", "cos");
  std::printf("%6s %10s %8s %12s\n", "embed", num(p.embed_norm.mean).c_str(), "", num(p.embed_grad_norm.mean).c_str());
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerProbe& lp = p.layers[l];
    std::printf("%6zu %10s %8s %12s %12s %12s %7s %9s\n", l + 1, num(lp.act_norm.mean).c_str(),
                num(lp.growth.mean).c_str(), num(lp.stream_grad_norm.mean).c_str(), num(lp.block_grad_norm.mean).c_str(),
                num(lp.fc2_grad_norm.mean).c_str(), num(lp.identity_share.mean).c_str(), num(lp.cosine.mean).c_str());
  }
  print_final_norm(p);
  std::printf("last/first layer: ||dL/dW2|| %s, ||dL/dP|| %s; ||x_L|| / ||x_0|| = %s\n", pm(p.fc2_last_over_first).c_str(),
              pm(p.block_last_over_first).c_str(), pm(p.stream_last_over_embed).c_str());
}

void print_batchnorm(const BatchNormProbeResult& b, const ProbeOptions& opt) {
  auto pm = [](const Stat& s) { return fmt::format("{:.3g} +- {:.2g}", s.mean, s.std); };
  std::printf("batchnorm: BatchNorm's batch statistics vs LayerNorm's and RMSNorm's per-token ones, on token vectors\n"
              "(toy model embeddings, init torch, d = %lld, %lld tokens per sequence, batches of %lld); a change is the\n"
              "mean |y_a - y_b| over the affected tokens and channels (outputs are unit-scale); mean +- std over %d seeds.\n\n",
              static_cast<long long>(b.d), static_cast<long long>(b.seq_len), static_cast<long long>(b.batch), opt.seeds);
  std::printf("1. padding (lengths uniform in [4, %lld], pad token 0; %s of the positions are pads)\n",
              static_cast<long long>(b.seq_len), pm(b.pad_fraction).c_str());
  std::printf("   BatchNorm per-channel mean, pads counted vs not: |shift| %s; variance ratio %s\n",
              pm(b.pad_mean_shift).c_str(), pm(b.pad_var_ratio).c_str());
  std::printf("   the real tokens' BatchNorm output changes by %s (LayerNorm and RMSNorm see one token at a time: no pad enters)\n\n",
              pm(b.pad_output_change).c_str());
  std::printf("2. one sequence's output when its batch-mates change\n");
  std::printf("   %6s  %24s  %24s  %12s  %12s\n", "batch", "BN: other companions", "BN: vs normalized alone",
              "LayerNorm", "RMSNorm");
  for (const BatchDependence& d : b.dependence)
    std::printf("   %6lld  %24s  %24s  %12.3g  %12.3g\n", static_cast<long long>(d.batch), pm(d.bn_companions).c_str(),
                pm(d.bn_alone).c_str(), d.ln_companions.mean, d.rms_companions.mean);
  std::printf("\n3. train vs inference: BatchNorm with the batch's statistics vs the running ones (momentum 0.1)\n");
  for (const RunningGap& g : b.train_vs_eval)
    std::printf("   after %4lld batches: output gap %s\n", static_cast<long long>(g.batches), pm(g.gap).c_str());
  std::printf("\n4. causal leakage: statistics over whole sequences; one sequence's last token replaced\n");
  std::printf("   change of its earlier positions: BatchNorm %s, LayerNorm %.3g, RMSNorm %.3g\n", pm(b.bn_leak).c_str(),
              b.ln_leak.mean, b.rms_leak.mean);
}

// ---- the command ---------------------------------------------------------------------------------

std::string preset_choices() {
  std::string s;
  for (const std::string& n : probe_presets()) s += n + ", ";
  return s + "all, config";
}

int run_probe(const ProbeArgs& a, const GlobalOptions& g) {
  const std::string preset = a.preset.empty() ? "config" : a.preset;
  const auto& presets = probe_presets();
  const bool known = preset == "all" || preset == "config" ||
                     std::find(presets.begin(), presets.end(), preset) != presets.end();
  NL_USAGE(known, "unknown preset '{}': choose one of {}", preset, preset_choices());
  if (preset != "config") {
    const bool any = !a.values.empty() || !a.config_file.empty();
    NL_USAGE(!any, "config keys and --config apply to `normlab probe config`; preset '{}' fixes its own configs (got {})",
             preset, !a.config_file.empty() ? "--config" : "--" + a.values.begin()->first);
  }
  NL_USAGE(!a.dev.tf32, "--tf32 does not apply to probe (its products compare with the cpu at float32)");
  use_device(a.dev);  // the model probes run there; the plain-stack analyses stay on the cpu
  NL_USAGE(a.seeds >= 1 && a.seeds <= 1000, "--seeds must be 1..1000, got {}", a.seeds);
  NL_USAGE(a.batch >= 1 && a.batch <= (int64_t{1} << 20), "--batch must be 1..{}, got {}", int64_t{1} << 20, a.batch);
  NL_USAGE(a.threads >= 0 && a.threads <= kMaxThreads, "--threads must be 0 (all cores) .. {}, got {}", kMaxThreads,
           a.threads);
  for (int64_t L : a.depths) NL_USAGE(L <= 256, "--depths: each depth must be at most 256, got {}", L);
  NL_USAGE(a.depths.size() <= 16 && a.gains.size() <= 16, "--depths and --gains take at most 16 values each");
  ProbeOptions opt;
  opt.seeds = a.seeds;
  opt.batch = a.batch;
  opt.threads = a.threads;
  ProbeReport report;
  report.preset = preset;
  report.options = opt;
  const bool all = preset == "all";

  XiongFactors factors;
  PlainStackResult plain;
  PrelnGrowthResult growth;
  XiongResult xiong;
  IdentityShareResult identity;
  ConfigProbe config;
  if (preset == "config") {
    TrainConfig cfg = load_train_config(a.config_file, a.values);
    validate_config(cfg);
    check_fits_in_memory(cfg, a.batch, "probe");
    spdlog::debug("probing {} {} {} L={}", to_string(cfg.model.model), to_string(cfg.model.norm), to_string(cfg.model.placement),
                  cfg.model.layers);
    config = probe_config(cfg, opt);
    report.config = &config;
  }
  if (all || preset == "plain-stack") {
    PlainStackOptions so;
    so.gains = a.gains;
    so.activation = parse_kind<Activation>(a.activation);
    plain = probe_plain_stack(so, opt);
    report.plain_stack = &plain;
  }
  if (all || preset == "preln-growth") {
    growth = probe_preln_growth(opt);
    report.preln_growth = &growth;
  }
  if (all || preset == "xiong2020") {
    xiong = probe_xiong(opt, a.depths);
    if (!a.inits.empty() || !a.widths.empty()) {
      std::vector<InitScheme> inits;
      for (const std::string& i : a.inits) inits.push_back(parse_kind<InitScheme>(i));
      if (inits.empty()) inits.push_back(InitScheme::xavier);
      factors = probe_xiong_factors(opt, inits, a.widths.empty() ? std::vector<int64_t>{64} : a.widths, a.depths);
      report.xiong_factors = &factors;
    }
    report.xiong = &xiong;
  }
  if (all || preset == "identity-share") {
    identity = probe_identity_share(opt);
    report.identity_share = &identity;
  }
  BatchNormProbeResult batchnorm;
  if (all || preset == "batchnorm") {
    batchnorm = probe_batchnorm(opt);
    report.batchnorm = &batchnorm;
  }

  if (g.json) {
    std::cout << probe_report_json(report) << "\n";
    return 0;
  }
  bool first = true;
  auto section = [&] {
    if (!first) std::printf("\n%s\n\n", std::string(100, '-').c_str());
    first = false;
  };
  if (report.config) section(), print_config(config, opt);
  if (report.plain_stack) section(), print_plain_stack(plain, opt);
  if (report.preln_growth) section(), print_preln_growth(growth, opt);
  if (report.xiong) section(), print_xiong(xiong, opt);
  if (report.xiong_factors) {
    std::printf("\nxiong2020 factors: fc2 last/first per init scheme, width (d_hidden 2d, d/16 heads) and depth; mean +- std over %d seeds\n\n",
                opt.seeds);
    std::printf("%8s %6s %6s %20s %20s\n", "init", "d", "L", "post last/first", "pre last/first");
    for (const XiongFactorRow& x : factors.rows)
      std::printf("%8s %6lld %6lld %20s %20s\n", to_string(x.init), static_cast<long long>(x.d_model),
                  static_cast<long long>(x.layers), fmt::format("{:.3f} +- {:.3f}", x.post.mean, x.post.std).c_str(),
                  fmt::format("{:.3f} +- {:.3f}", x.pre.mean, x.pre.std).c_str());
    std::printf("\n%s\n", factors.summary.c_str());
  }
  if (report.identity_share) section(), print_identity_share(identity, opt);
  if (report.batchnorm) section(), print_batchnorm(batchnorm, opt);
  return 0;
}

}  // namespace

Runner add_probe(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* sub = app.add_subcommand("probe", "Signal propagation at initialization: per-layer activation and gradient norms");
  sub->add_option("preset", args->preset,
                  "plain-stack, preln-growth, xiong2020, identity-share, batchnorm, all, or config (default: config, probed "
                  "per layer from the config flags)");
  sub->add_option("--seeds", args->seeds, "Seeds to average over (default 3)");
  sub->add_option("--batch", args->batch, "Sequences per probe batch (default 16)");
  sub->add_option("--threads", args->threads, "Threads for the kernels (default 1: probe tensors are small; 0 = all cores)");
  sub->add_option("--config", args->config_file, "config: JSON file of config keys (flags override it)");
  // Lists through the one list parser (an empty entry such as 6,,12 is an error, not a default).
  sub->add_option_function<std::string>(
      "--depths", [args](const std::string& v) { args->depths = parse_integer_list(v, "--depths", 1, 256); },
      "xiong2020: depths to compare (default 6,12,24)");
  sub->add_option_function<std::string>(
      "--inits", [args](const std::string& v) { args->inits = split_list(v, "--inits"); },
      "xiong2020: also a factor table under these init schemes (gpt2, xavier, torch, fairseq)");
  sub->add_option_function<std::string>(
      "--widths", [args](const std::string& v) { args->widths = parse_integer_list(v, "--widths", 1, 65536); },
      "xiong2020: ... and these widths d_model (default 64)");
  sub->add_option_function<std::string>(
      "--gains", [args](const std::string& v) { args->gains = parse_number_list(v, "--gains"); },
      "plain-stack: weight gains, W ~ N(0, (gain/sqrt(d))^2) (default 0.5,1,2)");
  sub->add_option("--activation", args->activation,
                  "plain-stack, between the layers: " + kind_help<Activation>() + "; default linear");
  for (const ConfigKey& k : config_keys()) {
    if (training_only_keys().count(k.name)) continue;
    std::string name = k.name;
    sub->add_option_function<std::string>(
        config_flag_names(name), [args, name](const std::string& v) { args->values[name] = v; },
        fmt::format("config: {} ({})", k.help, k.type));
  }
  add_device_flags(*sub, args->dev);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab probe plain-stack                      20 linear layers at gains 0.5/1/2, without and with LayerNorm
  normlab probe plain-stack --activation gelu --gains 1,1.5,2
  normlab probe preln-growth                     Pre-LN stream growth over 12 layers; the final norm
  normlab probe xiong2020 --depths 6,12,24       Post-LN vs Pre-LN weight gradients at init (Xiong et al. 2020)
  normlab probe xiong2020 --depths 6,12 --inits gpt2,xavier,torch,fairseq --widths 64,256,512   what moves the ratio
  normlab probe identity-share                   the identity term's share of dL/dx, with and without "x +"
  normlab probe all --seeds 5 --json > probe.json
  normlab probe config --model gpt --placement post --layers 12 --init xavier
  normlab probe config --model gpt --init xavier --residual false
  normlab probe --config experiments/toy-pre-rms-L20.json --seeds 5

Norms: ||x|| is the mean over tokens of the per-token L2 norm (a unit-variance token has ~sqrt(d));
gradient norms are Frobenius norms of the gradient of the mean cross-entropy. Every number is the mean
over --seeds seeds (model init and data); --json also carries the standard deviations. The config keys
(--model, --norm, --placement, --layers, --d_model, ...) apply to `probe config` only.)");
  return [args, &g] { return run_probe(*args, g); };
}

}  // namespace normlab::cli
