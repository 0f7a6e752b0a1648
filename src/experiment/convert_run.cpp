// `normlab convert`'s workflow: check, load, convert, evaluate, calibrate, write (convert_run.h).
#include "normlab/convert_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/io.h"
#include "normlab/run.h"
#include "normlab/system.h"

namespace normlab {

namespace fs = std::filesystem;

namespace {

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Where the conversion goes: a name that does not exist yet, in a directory that does (as train,
// convert creates no missing parents: a typo in a parent's name is an error, not a new tree).
void check_destination(const std::string& out_flag) {
  NL_USAGE(!out_flag.empty(), "no output directory given (--out DIR)");
  const std::string out = without_trailing_slashes(out_flag);
  const std::string name = fs::path(out).filename().string();
  NL_USAGE(out != "/" && name != "." && name != "..", "--out '{}' must name a directory to create",
           shown(out_flag, 200));
  struct stat st {};
  NL_USAGE(::lstat(out.c_str(), &st) != 0, "'{}' exists: convert writes a new directory", shown(out_flag, 200));
  const std::string parent = fs::path(out).has_parent_path() ? fs::path(out).parent_path().string() : ".";
  struct stat pst {};
  NL_USAGE(::stat(parent.c_str(), &pst) == 0 && S_ISDIR(pst.st_mode),
           "--out '{}': the parent directory '{}' does not exist (convert does not create it)", shown(out_flag, 200),
           shown(parent, 200));
  NL_USAGE(::access(parent.c_str(), W_OK | X_OK) == 0, "--out '{}': the parent directory '{}' is not writable",
           shown(out_flag, 200), shown(parent, 200));
}

// A model with a NaN or an infinity in its weights (a run that diverged as it saved, a damaged
// file) has no function to preserve: refused by name, before anything is written.
void check_weights_finite(Model& model, const std::string& source) {
  for (auto& [name, t] : model_state(model)) {
    const std::vector<double> v = t.to_vector();
    const auto bad = std::find_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
    NL_USAGE(bad == v.end(), "cannot convert {}: its weights are not finite ({} = {} at index {}): a diverged model has no "
             "function to keep", shown(source, 200), shown(name, 80), *bad, bad - v.begin());
  }
}

// What a request asks for, its flags checked against each other.
struct ConvertPlan {
  bool regain = false;  // --gain: gemma <-> plain gains
  bool to_ln = false;   // --to layernorm
  ConvertMethod method = ConvertMethod::exact;
  std::string method_name;  // as the report names it
};

ConvertPlan plan_conversion(const ConvertRequest& req) {
  ConvertPlan p;
  p.regain = !req.gain.empty();
  NL_USAGE(!p.regain || req.gain == "gemma" || req.gain == "plain", "--gain '{}' is not one of gemma, plain",
           shown(req.gain));
  NL_USAGE(p.regain || req.to == NormKind::rmsnorm || req.to == NormKind::layernorm,
           "--to '{}' is not one of rmsnorm, layernorm", to_string(req.to));
  NL_USAGE(!p.regain || req.method.empty(), "--gain has one mapping (w = gamma - 1, or back); drop --method");
  p.to_ln = !p.regain && req.to == NormKind::layernorm;
  NL_USAGE(!p.to_ln || req.method.empty(), "--to layernorm has one mapping (each gain kept, beta = 0); drop --method");
  p.method = req.method.empty() || p.to_ln || p.regain ? ConvertMethod::exact : parse_kind<ConvertMethod>(req.method);
  p.method_name = p.regain ? req.gain + "-gain" : p.to_ln ? "gain" : to_string(p.method);
  NL_USAGE(req.calibrate >= 0 && req.calibrate <= (int64_t{1} << 40),
           "--calibrate must be a non-negative integer of at most 2^40 (as train's steps), got {}", req.calibrate);
  return p;
}

// The source model's norm is one this conversion maps from.
void check_convertible(const ConvertRequest& req, const ConvertPlan& p, const TrainConfig& cfg) {
  if (p.regain) {
    const bool to_offset = req.gain == "gemma";
    NL_USAGE(cfg.model.norm == NormKind::rmsnorm || cfg.model.norm == NormKind::layernorm,
             "cannot convert {} to {} gains: its norm is {} (gemma_norm is for rmsnorm and layernorm)",
             shown(req.source, 200), req.gain, to_string(cfg.model.norm));
    NL_USAGE(cfg.model.gain_offset() != to_offset, "cannot convert {} to {} gains: they are {} already",
             shown(req.source, 200), req.gain, req.gain);
  } else if (p.to_ln) {
    NL_USAGE(cfg.model.norm == NormKind::rmsnorm, "cannot convert {} to layernorm: its norm is {}, not rmsnorm",
             shown(req.source, 200), to_string(cfg.model.norm));
  } else {
    const std::string refusal = conversion_refusal(cfg.model, p.method);
    NL_USAGE(refusal.empty(), "cannot convert {} {}: {}", shown(req.source, 200), p.method_name, refusal);
  }
}

// The calibration run's config: the converted model trained `steps` steps, evaluated at the end.
TrainConfig calibration_config(TrainConfig cfg, int64_t steps) {
  cfg.steps = steps;
  cfg.eval_every = steps;
  return cfg;
}

void throw_if_interrupted(const ConvertRequest& req) {
  if (req.interrupt && *req.interrupt) throw Interrupted("", static_cast<int>(*req.interrupt));
}

// Converts `source` (of config `cfg`) into the partial directory `tmp`: the model, its config,
// the losses before and after in convert.json, and the calibration run when asked for.
void convert_into(const std::string& tmp, const ConvertRequest& req, const ConvertPlan& p, const TrainConfig& cfg,
                  Model& source, ConvertReport& report) {
  report.val_loss_before = validation_loss(cfg, source);
  report.stream_centred = stream_centred(source);
  Conversion conv = p.regain  ? convert_gain_parametrization(source, req.gain == "gemma")
                    : p.to_ln ? convert_rmsnorm_to_layernorm(source)
                              : convert_layernorm_to_rmsnorm(source, p.method);
  TrainConfig out_cfg = cfg;
  out_cfg.model = conv.config;
  out_cfg.init_from.clear();
  Model converted(out_cfg.model, out_cfg.seed);
  load_model_state(converted, SafetensorsFile{{}, conv.state}, "the conversion");
  report.val_loss_converted = validation_loss(out_cfg, converted);
  throw_if_interrupted(req);

  const std::string tmp_model = tmp + "/model.safetensors";
  save_safetensors(tmp_model, conv.state, {{"format", "pt"}, {"normlab_config", config_to_json(out_cfg)}});
  write_file_atomic(tmp + "/config.json", config_to_json(out_cfg) + "\n");
  nlohmann::json j{{"source", req.source},
                   {"to", p.regain ? req.gain + " gains" : std::string(to_string(req.to))},
                   {"method", report.method},
                   {"val_loss_before", report.val_loss_before},
                   {"val_loss_converted", report.val_loss_converted},
                   {"out", req.out}};
  if (p.to_ln) j["stream_centred"] = report.stream_centred;
  if (req.calibrate > 0) {
    TrainConfig tune = calibration_config(out_cfg, req.calibrate);
    tune.init_from = tmp_model;
    TrainHooks hooks;
    hooks.on_step = [&](int64_t, double) { throw_if_interrupted(req); };
    TrainResult r = train(tune, hooks);
    throw_if_interrupted(req);
    report.val_loss_calibrated = r.final_val_loss;
    j["calibrate_steps"] = req.calibrate;
    j["val_loss_calibrated"] = r.final_val_loss;
  }
  report.json = j.dump(2);
  write_file_atomic(tmp + "/convert.json", report.json + "\n");
  throw_if_interrupted(req);
}

// The whole conversion renamed into place, never over something that appeared meanwhile.
void publish(const std::string& tmp, const std::string& out, const std::string& out_flag) {
  if (rename_noreplace(tmp, out)) return;
  const int e = errno;
  throw UsageError(e == EEXIST || e == ENOTEMPTY
                       ? fmt::format("'{}' appeared while converting (another convert into the same --out?)",
                                     shown(out_flag, 200))
                       : fmt::format("cannot rename {} to '{}': {}", shown(tmp, 200), shown(out_flag, 200),
                                     std::strerror(e)));
}

}  // namespace

ConvertReport convert_run(const ConvertRequest& req) {
  const ConvertPlan p = plan_conversion(req);
  ConvertReport report;
  report.method = p.method_name;
  check_destination(req.out);
  const std::string out = without_trailing_slashes(req.out);

  const TrainConfig cfg = load_train_config((fs::path(req.source) / "config.json").string(), {});
  NL_USAGE(cfg.model.model != ModelKind::encdec,
           "'{}' is an encoder-decoder run: convert maps the norms of decoder-only models (model toy or gpt)",
           shown(req.source, 200));
  check_fits_in_memory(cfg, cfg.batch_size, "convert");
  const std::string model_file = (fs::path(req.source) / "model.safetensors").string();
  Model source(cfg.model, cfg.seed);
  load_model_state(source, load_safetensors(model_file), model_file);
  check_weights_finite(source, req.source);
  check_convertible(req, p, cfg);
  // The calibration run's config is checked now, not after the conversion.
  if (req.calibrate > 0) validate_config(calibration_config(cfg, req.calibrate));
  if (req.on_notice)
    for (const std::string& stale : stale_partials(out))
      req.on_notice(fmt::format("{} is left from an interrupted convert or run (its process is gone); it is not a "
                                "finished conversion: look at it or remove it (rm -r '{}')",
                                stale, stale));
  throw_if_interrupted(req);
  const std::string tmp = partial_path(out);
  NL_USAGE(::mkdir(tmp.c_str(), 0755) == 0, "cannot create '{}': {}", shown(tmp, 200), std::strerror(errno));
  try {
    convert_into(tmp, req, p, cfg, source, report);
    publish(tmp, out, req.out);
  } catch (const Interrupted& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw Interrupted(fmt::format("interrupted by {}; the unfinished conversion {} was removed", signal_name(e.signal),
                                  shown(tmp, 200)),
                      e.signal);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // only what this call created: the partial directory it made
    throw;
  }
  return report;
}

}  // namespace normlab
