// Run directories: validated before anything is created, written under a temporary name,
// renamed when whole.
#include "normlab/run.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "normlab/backend.h"
#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/io.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
// JSON has no NaN/Inf: a diverged loss is written as null.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

std::string eval_to_json_line(const EvalRecord& r) {
  json j{{"step", r.step},           {"lr", r.lr},
         {"train_loss", num(r.train_loss)}, {"val_loss", num(r.val_loss)},
         {"grad_norm", num(r.grad_norm)},   {"final_norm_out", num(r.final_norm_out)}};
  j["stream_norm"] = json::array();
  for (double v : r.stream_norm) j["stream_norm"].push_back(num(v));
  j["block_grad_norm"] = json::array();
  for (double v : r.block_grad_norm) j["block_grad_norm"].push_back(num(v));
  return j.dump();
}

std::string result_to_json(const TrainConfig& cfg, const TrainResult& r,
                           const std::map<std::string, std::string>& versions) {
  json j{{"status", r.status},
         {"steps_done", r.steps_done},
         {"diverged_step", r.diverged_step >= 0 ? json(r.diverged_step) : json(nullptr)},
         {"diverged_reason", r.diverged_reason},
         {"collapsed_step", r.collapsed_step >= 0 ? json(r.collapsed_step) : json(nullptr)},
         {"final_train_loss", num(r.final_train_loss)},
         {"final_val_loss", num(r.final_val_loss)},
         {"best_val_loss", num(r.best_val_loss)},
         {"best_val_step", r.best_val_step},
         {"loss_floor", num(r.loss_floor)},
         {"unigram_loss", num(r.unigram_loss)},
         {"gap_to_floor", num(r.final_val_loss - r.loss_floor)},
         {"parameters", r.parameters},
         {"timing", {{"seconds", r.seconds}, {"seconds_per_step", r.seconds_per_step},
                     {"tokens_per_second", r.tokens_per_second}, {"threads", num_threads()}}},
         {"versions", versions}};
  j["config"] = json::parse(config_to_json(cfg));
  return j.dump(2);
}

void validate_run(const TrainConfig& cfg) {
  cfg.validate();
  if (cfg.data.kind == DataKind::text) make_data_source(cfg);  // the file is read and checked
  if (!cfg.init_from.empty()) {  // the checkpoint is read and matched against the config
    Model model(cfg.model, cfg.seed);
    load_model_state(model, load_safetensors(cfg.init_from), cfg.init_from);
  }
}

std::string run_and_record(const TrainConfig& cfg, const RunOptions& opt, TrainResult* out) {
  validate_run(cfg);
  NL_USAGE(!opt.dir.empty(), "no run directory given (--out DIR)");
  const fs::path dir(opt.dir);
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    NL_USAGE(opt.force, "run directory '{}' exists (use --force to replace it)", opt.dir);
  }
  if (dir.has_parent_path() && !dir.parent_path().empty()) {
    NL_USAGE(fs::is_directory(dir.parent_path(), ec), "the parent directory of '{}' does not exist", opt.dir);
  }

  const fs::path tmp = dir.string() + ".partial." + std::to_string(getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  NL_USAGE(!ec, "cannot create '{}': {}", tmp.string(), ec.message());
  try {
    write_file_atomic((tmp / "config.json").string(), config_to_json(cfg) + "\n");
    std::ofstream metrics(tmp / "metrics.jsonl"), timing(tmp / "timing.jsonl");
    if (opt.on_start) opt.on_start();
    auto on_eval = [&](const EvalRecord& r) {
      metrics << eval_to_json_line(r) << "\n";
      metrics.flush();
      timing << json{{"step", r.step}, {"seconds_per_step", r.seconds_per_step},
                     {"tokens_per_second", r.tokens_per_second}}.dump()
             << "\n";
      timing.flush();
      if (opt.on_eval) opt.on_eval(r);
    };
    TrainHooks hooks;
    hooks.on_eval = on_eval;
    hooks.on_step = opt.on_step;
    hooks.checkpoint_every = opt.save_every;
    const std::map<std::string, std::string> meta{{"format", "pt"}, {"normlab_config", config_to_json(cfg)}};
    hooks.on_checkpoint = [&](int64_t step, Model& model) {
      fs::path file = tmp / "model.safetensors";
      if (opt.save_every > 0 && step % opt.save_every == 0 && step < cfg.steps) {
        fs::create_directories(tmp / "checkpoints");
        file = tmp / "checkpoints" / fmt::format("step-{}.safetensors", step);
      }
      save_safetensors(file.string(), model_state(model), meta);
    };
    TrainResult r = train(cfg, hooks);
    metrics.close();
    timing.close();
    std::string result = result_to_json(cfg, r, opt.versions);
    write_file_atomic((tmp / "result.json").string(), result + "\n");
    if (fs::exists(dir, ec)) fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    NL_CHECK(!ec, "cannot rename {} to {}: {}", tmp.string(), opt.dir, ec.message());
    if (out) *out = r;
    return result;
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace normlab
