// `normlab convert`: a trained LayerNorm run to an RMSNorm model (naive or exact), with the
// validation loss before and after (and after --calibrate steps of fine-tuning).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/convert.h"
#include "normlab/io.h"
#include "normlab/run.h"

namespace normlab::cli {

namespace {

struct ConvertArgs {
  std::string run_dir, to = "rmsnorm", method, out;  // method: exact for rmsnorm; layernorm has one mapping
  int64_t calibrate = 0;
};

int run_convert(const ConvertArgs& a, const GlobalOptions& g) {
  namespace fs = std::filesystem;
  NL_USAGE(a.to == "rmsnorm" || a.to == "layernorm", "--to '{}' is not one of rmsnorm, layernorm", shown(a.to));
  const bool to_ln = a.to == "layernorm";
  NL_USAGE(!to_ln || a.method.empty(), "--to layernorm has one mapping (each gain kept, beta = 0); drop --method");
  const std::string method_name = to_ln ? "gain" : a.method.empty() ? "exact" : a.method;
  NL_USAGE(to_ln || method_name == "naive" || method_name == "exact", "--method '{}' is not one of naive, exact",
           shown(a.method));
  NL_USAGE(!a.out.empty(), "no output directory given (--out DIR)");
  std::error_code ec;
  NL_USAGE(!fs::exists(a.out, ec) && !fs::is_symlink(a.out, ec), "'{}' exists: convert writes a new directory", a.out);
  const ConvertMethod method = method_name == "exact" ? ConvertMethod::exact : ConvertMethod::naive;
  TrainConfig cfg = load_train_config((fs::path(a.run_dir) / "config.json").string(), {});
  const std::string model_file = (fs::path(a.run_dir) / "model.safetensors").string();
  Model source(cfg.model, cfg.seed);
  load_model_state(source, load_safetensors(model_file), model_file);
  if (to_ln) {
    NL_USAGE(cfg.model.norm == NormKind::rmsnorm, "cannot convert {} to layernorm: its norm is {}, not rmsnorm",
             a.run_dir, to_string(cfg.model.norm));
  } else {
    const std::string refusal = conversion_refusal(cfg.model, method);
    NL_USAGE(refusal.empty(), "cannot convert {} {}: {}", a.run_dir, method_name, refusal);
  }
  const double before = validation_loss(cfg, source);
  const bool centred = stream_centred(source);
  Conversion conv = to_ln ? convert_rmsnorm_to_layernorm(source) : convert_layernorm_to_rmsnorm(source, method);

  TrainConfig out_cfg = cfg;
  out_cfg.model = conv.config;
  out_cfg.init_from.clear();
  Model converted(out_cfg.model, out_cfg.seed);
  load_model_state(converted, SafetensorsFile{{}, conv.state}, "the conversion");
  const double after = validation_loss(out_cfg, converted);

  fs::create_directories(a.out, ec);
  NL_USAGE(!ec, "cannot create '{}': {}", a.out, ec.message());
  const std::string out_model = (fs::path(a.out) / "model.safetensors").string();
  save_safetensors(out_model, conv.state, {{"format", "pt"}, {"normlab_config", config_to_json(out_cfg)}});
  write_file_atomic((fs::path(a.out) / "config.json").string(), config_to_json(out_cfg) + "\n");

  nlohmann::json report{{"source", a.run_dir},          {"to", a.to},
                        {"method", method_name},        {"val_loss_before", before},
                        {"val_loss_converted", after},  {"out", a.out}};
  // RMSNorm -> LayerNorm (beta 0) is exact exactly when the stream's writers are centred.
  if (to_ln) report["stream_centred"] = centred;
  if (a.calibrate > 0) {
    TrainConfig tune = out_cfg;
    tune.init_from = out_model;
    tune.steps = a.calibrate;
    tune.eval_every = a.calibrate;
    TrainResult r = train(tune);
    report["calibrate_steps"] = a.calibrate;
    report["val_loss_calibrated"] = r.final_val_loss;
  }
  write_file_atomic((fs::path(a.out) / "convert.json").string(), report.dump(2) + "\n");
  if (g.json) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::printf("%s -> %s (%s, %s): validation loss %.4f before, %.4f converted", a.run_dir.c_str(), a.out.c_str(),
                a.to.c_str(), method_name.c_str(), before, after);
    if (to_ln)
      std::printf(" (the stream's writers are %scentred: the mapping is %sexact)", centred ? "" : "not ",
                  centred ? "" : "not ");
    if (a.calibrate > 0)
      std::printf(", %.4f after %lld calibration steps", report["val_loss_calibrated"].get<double>(),
                  static_cast<long long>(a.calibrate));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

Runner add_convert(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand("convert", "Convert a trained LayerNorm run to RMSNorm (naive or exact), or back");
  sub->add_option("run_dir", args->run_dir, "A run directory (config.json + model.safetensors)")->required();
  sub->add_option("--to", args->to, "Target norm: rmsnorm (from layernorm) or layernorm (from rmsnorm)");
  sub->add_option("--method", args->method,
                  "--to rmsnorm: naive (keep gamma, drop beta) or exact (function-preserving, Pre-LN; the default)");
  sub->add_option("--out", args->out, "New directory: config.json, model.safetensors, convert.json")->required();
  sub->add_option("--calibrate", args->calibrate, "Then fine-tune this many steps and report the loss")
      ->check(CLI::NonNegativeNumber);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab convert runs/ln --to rmsnorm --method exact --out runs/ln-as-rms
  normlab convert runs/ln --to rmsnorm --method naive --calibrate 100 --out runs/ln-naive-100
  normlab convert runs/ln-as-rms --to layernorm --out runs/ln-round-trip

exact folds each LayerNorm's beta into the bias of the linear that reads it (the head gets a bias)
and centres every writer of the residual stream, so that every LayerNorm sees zero-mean input and
equals an RMSNorm: the logits are preserved (Pre-LN with the final norm only; other placements are
refused with the reason). naive keeps gamma and drops beta, as community scripts do. --to layernorm
keeps each gain and sets beta = 0: exact when the stream's writers are centred (a model `exact`
produced), not otherwise; convert.json says which.)");
  return [args, &g] { return run_convert(*args, g); };
}

}  // namespace normlab::cli
