// `normlab probe [PRESET]`: signal propagation at initialization, no training. Parses options,
// calls the library (include/train/normlab/probe.h) and prints its report, text or JSON, as the
// library renders it.
//   normlab probe --help          presets, options, examples
//   normlab probe all --json      every preset as one JSON document
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "cli_common.h"
#include "output.h"
#include "normlab/parse.h"
#include "normlab/config.h"
#include "normlab/plots.h"
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
  std::string plot;  // an SVG of the per-layer probes (stream, gradient, identity share) as bars
  bool plot_given = false;  // --plot was on the command line (with an empty name it names no file)
  bool seeds_given = false, depths_given = false;
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

// ---- the command ---------------------------------------------------------------------------------

// The flags as a ProbeRequest, each checked (a preset other than config takes no config keys).
ProbeRequest probe_request(const ProbeArgs& a) {
  ProbeRequest req;
  req.preset = a.preset.empty() ? "config" : a.preset;
  std::map<std::string, std::string> values = a.values;
  // xiong2020 --model encdec: the encoder-decoder at the paper's setting (10 seeds, N = 6..14 by
  // default, as its figure); --model gpt is the decoder-only preset itself.
  if (req.preset == "xiong2020" && values.count("model")) {
    const std::string model = values["model"];
    NL_USAGE(model == "encdec" || model == "gpt", "xiong2020 --model '{}': the preset probes gpt (decoder-only) or "
                                                  "encdec (the paper's encoder-decoder)", shown(model));
    req.encdec = model == "encdec";
    values.erase("model");
  }
  if (req.preset != "config") {
    const bool any = !values.empty() || !a.config_file.empty();
    NL_USAGE(!any, "config keys and --config apply to `normlab probe config`; preset '{}' fixes its own configs (got {})",
             req.preset, !a.config_file.empty() ? "--config" : "--" + values.begin()->first);
  }
  NL_USAGE(a.seeds >= 1 && a.seeds <= 1000, "--seeds must be 1..1000, got {}", a.seeds);
  NL_USAGE(a.batch >= 1 && a.batch <= (int64_t{1} << 20), "--batch must be 1..{}, got {}", int64_t{1} << 20, a.batch);
  NL_USAGE(a.threads >= 0 && a.threads <= kMaxThreads, "--threads must be 0 (all cores) .. {}, got {}", kMaxThreads,
           a.threads);
  for (int64_t L : a.depths) NL_USAGE(L <= 256, "--depths: each depth must be at most 256, got {}", L);
  NL_USAGE(a.depths.size() <= 16 && a.gains.size() <= 16, "--depths and --gains take at most 16 values each");
  req.options.seeds = req.encdec && !a.seeds_given ? 10 : a.seeds;
  req.options.batch = a.batch;
  req.options.threads = a.threads;
  req.depths = req.encdec && !a.depths_given ? std::vector<int64_t>{6, 8, 10, 12, 14} : a.depths;
  for (const std::string& i : a.inits) req.inits.push_back(parse_kind<InitScheme>(i));
  req.widths = a.widths;
  req.gains = a.gains;
  req.activation = parse_kind<Activation>(a.activation);
  return req;
}

int run_probe(const ProbeArgs& a, const GlobalOptions& g) {
  const std::string preset = a.preset.empty() ? "config" : a.preset;
  check_probe_preset(preset);
  ProbeRequest req = probe_request(a);
  NL_USAGE(!a.dev.tf32, "--tf32 does not apply to probe (its products compare with the cpu at float32)");
  use_device(a.dev);  // the model probes run there; the plain-stack analyses stay on the cpu
  NL_USAGE(a.plot.empty() || preset == "config" || preset == "xiong2020" || preset == "identity-share" || preset == "all",
           "--plot draws the per-layer probes of config, xiong2020 and identity-share; preset '{}' has none", preset);
  NL_USAGE(!a.plot_given || !a.plot.empty(), "--plot needs a file name");
  NL_USAGE(!req.encdec || (a.plot.empty() && a.inits.empty() && a.widths.empty()),
           "xiong2020 --model encdec takes --depths, --seeds, --batch and --threads; --plot, --inits and --widths are "
           "the decoder-only preset's");
  if (!a.plot.empty()) check_plot_file(a.plot, "--plot");
  if (preset == "config") {
    req.config = load_train_config(a.config_file, a.values);
    check_probeable(req.config);
    validate_config(req.config);
    check_fits_in_memory(req.config, a.batch, "probe");
    spdlog::debug("probing {} {} {} L={}", to_string(req.config.model.model), to_string(req.config.model.norm),
                  to_string(req.config.model.placement), req.config.model.layers);
  }
  ProbeResults results;
  run_probe_preset(req, results);
  if (!a.plot.empty()) {
    std::vector<ProbeBarSeries> series;
    for (const ConfigProbe* p : per_layer_probes(results.report)) series.push_back(probe_bar_series(*p));
    write_plot_file(a.plot, plot_probe_bars_svg(series), "--plot");
  }
  std::cout << (g.json ? probe_report_json(results.report) + "\n" : probe_report_text(results.report));
  return 0;
}

}  // namespace

Runner add_probe(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* sub = app.add_subcommand("probe", "Signal propagation at initialization: per-layer activation and gradient norms");
  sub->add_option("preset", args->preset,
                  "plain-stack, preln-growth, xiong2020, identity-share, batchnorm, all, or config (default: config, probed "
                  "per layer from the config flags)");
  CLI::Option* seeds = sub->add_option("--seeds", args->seeds, "Seeds to average over (default 3; xiong2020 --model encdec: 10)");
  sub->add_option("--batch", args->batch, "Sequences per probe batch (default 16)");
  sub->add_option("--threads", args->threads, "Threads for the kernels (default 1: probe tensors are small; 0 = all cores)");
  sub->add_option("--config", args->config_file, "config: JSON file of config keys (flags override it)");
  // Lists through the one list parser (an empty entry such as 6,,12 is an error, not a default).
  sub->add_option_function<std::string>(
      "--depths",
      [args](const std::string& v) {
        args->depths = parse_integer_list(v, "--depths", 1, 256);
        args->depths_given = true;
      },
      "xiong2020: depths to compare (default 6,12,24; --model encdec: layers per stack, default 6,8,10,12,14)");
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
  CLI::Option* plot = sub->add_option("--plot", args->plot,
                  "Also draw the per-layer probes (stream norm, block gradient norm, identity share) as bars into this "
                  "SVG file (config, xiong2020, identity-share; replaced only if normlab drew it)");
  add_device_flags(*sub, args->dev);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab probe plain-stack                      20 linear layers at gains 0.5/1/2, without and with LayerNorm
  normlab probe plain-stack --activation gelu --gains 1,1.5,2
  normlab probe preln-growth                     Pre-LN stream growth over 12 layers; the final norm
  normlab probe xiong2020 --depths 6,12,24       Post-LN vs Pre-LN weight gradients at init (Xiong et al. 2020)
  normlab probe xiong2020 --depths 6,12 --inits gpt2,xavier,torch,fairseq --widths 64,256,512   what moves the ratio
  normlab probe xiong2020 --model encdec         the same at the paper's setting: the encoder-decoder, 10 seeds
  normlab probe identity-share                   the identity term's share of dL/dx, with and without "x +"
  normlab probe all --seeds 5 --json > probe.json
  normlab probe config --model gpt --placement post --layers 12 --init xavier
  normlab probe config --model gpt --init xavier --residual false
  normlab probe --config experiments/toy-pre-rms-L20.json --seeds 5

Norms: ||x|| is the mean over tokens of the per-token L2 norm (a unit-variance token has ~sqrt(d));
gradient norms are Frobenius norms of the gradient of the mean cross-entropy. Every number is the mean
over --seeds seeds (model init and data); --json also carries the standard deviations. The config keys
(--model, --norm, --placement, --layers, --d_model, ...) apply to `probe config` only.)");
  return [args, &g, plot, seeds] {
    args->plot_given = plot->count() > 0;
    args->seeds_given = seeds->count() > 0;
    return run_probe(*args, g);
  };
}

}  // namespace normlab::cli
