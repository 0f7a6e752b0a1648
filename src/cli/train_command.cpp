// `normlab train`: one configuration, a loss table on stdout, a run directory on disk.
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <ctime>
#include <iostream>
#include <filesystem>
#include <map>
#include <memory>
#include <spdlog/spdlog.h>

#include "cli_common.h"
#include "normlab/cuda.h"
#include "output.h"
#include "normlab/about.h"
#include "normlab/config.h"
#include "normlab/encdec.h"
#include "normlab/io.h"
#include "normlab/run.h"
#include "normlab/tensorboard.h"

namespace normlab::cli {

namespace {

struct TrainArgs {
  std::string config_file, out;
  bool out_given = false;  // --out "" is an error, not the default directory
  bool force = false;
  int64_t save_every = 0;
  bool save_every_given = false;
  std::string resume;  // a stopped run to continue
  bool resume_given = false;  // --resume '' is an error, not a new run
  std::string tensorboard;  // a TensorBoard log directory for this run's events
  bool tensorboard_given = false;
  std::map<std::string, std::string> values;  // --key value, applied over the file
  DeviceOptions dev;
};

// The model's depth as a user reads it: L, or an encoder-decoder's encoder + decoder layers.
std::string depth_text(const ModelConfig& m) {
  if (m.model != ModelKind::encdec) return std::to_string(m.layers);
  const EncDecConfig stacks = encdec_config(m);
  return fmt::format("{}+{}", stacks.encoder_layers, stacks.decoder_layers);
}

std::string default_run_dir(const TrainConfig& c) {
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return fmt::format("runs/{}-{}-{}-{}-L{}-s{}", stamp, to_string(c.model.model), to_string(c.model.norm),
                     to_string(c.model.placement), depth_text(c.model), c.seed);
}

// --tensorboard DIR, before anything is created: a directory (or nothing yet), not inside this
// run's directory or any other run's (which hold only their run's files), nor a sweep's runs/.
void check_tensorboard_dir(const std::string& tb, const std::string& run_dir, bool resuming) {
  namespace fs = std::filesystem;
  std::error_code ec;
  NL_USAGE(!fs::exists(tb, ec) || fs::is_directory(tb, ec), "--tensorboard '{}' is not a directory", shown(tb, 200));
  const fs::path t = fs::absolute(tb).lexically_normal(), r = fs::absolute(run_dir).lexically_normal();
  const fs::path rel = t.lexically_relative(r);
  NL_USAGE(rel.empty() || *rel.begin() == "..", "--tensorboard '{}' is inside the run directory '{}' (give a directory beside it)",
           shown(tb, 200), shown(run_dir, 200));
  const std::string inside = enclosing_run_or_sweep(tb);
  NL_USAGE(inside.empty(), "--tensorboard '{}' is inside '{}' (a run directory, or a sweep's runs/, holds only runs)",
           shown(tb, 200), shown(inside, 200));
  check_output_dir(tb, "--tensorboard");
  if (!resuming && !event_files(tb).empty())
    spdlog::warn("--tensorboard {} already holds event files: TensorBoard shows them and this run's as one run", tb);
}

int run_train(const TrainArgs& a, const GlobalOptions& g) {
  NL_USAGE(!a.out_given || !a.out.empty(), "--out needs a directory name (leave --out out for runs/<time>-...)");
  std::unique_ptr<ResumableRun> resume;
  NL_USAGE(!a.resume_given || !a.resume.empty(), "--resume needs a run directory (a DIR.partial.<pid> or DIR)");
  if (a.resume_given) {
    // A resumed run is the stopped run: the same config, the same destination.
    NL_USAGE(a.config_file.empty() && a.values.empty(),
             "--resume continues a run with the config it started with (its config.json); drop {}",
             a.config_file.empty() ? "--" + a.values.begin()->first : "--config");
    NL_USAGE(!a.out_given, "--resume finishes the run where it was going (the directory it was started with); drop --out");
    resume = std::make_unique<ResumableRun>(find_resumable(a.resume));
  }
  use_device(a.dev);  // before anything else: "no CUDA device found" is the first word
  TrainConfig cfg = resume ? resume->config : load_train_config(a.config_file, a.values);
  if (!resume) validate_run(cfg);

  RunOptions opt;
  opt.dir = resume ? resume->dir : a.out.empty() ? default_run_dir(cfg) : a.out;
  opt.resume = resume.get();
  NL_USAGE(!a.tensorboard_given || !a.tensorboard.empty(), "--tensorboard needs a directory (TensorBoard's --logdir, or a run below it)");
  if (a.tensorboard_given) check_tensorboard_dir(a.tensorboard, opt.dir, resume != nullptr);
  if (a.out.empty() && !resume) {
    std::error_code ec;
    std::filesystem::create_directories("runs", ec);  // after the config is known to be good
  }
  opt.force = a.force;
  opt.save_every = resume && !a.save_every_given ? resume->save_every : a.save_every;
  opt.versions = provenance();
  opt.versions["device"] = a.dev.device == "cuda"       ? fmt::format("cuda ({}{})", cuda_summary(), a.dev.tf32 ? ", tf32" : "")
                           : a.dev.device == "cuda-sim" ? fmt::format("cuda-sim ({})", cuda_sim_summary())
                                                        : "cpu";
  std::unique_ptr<RunEventLog> events;
  const bool table = !g.json;
  const bool progress = isatty(STDERR_FILENO) && isatty(STDOUT_FILENO) && !g.quiet;
  opt.on_start = [table, &cfg, &opt, &a, &events] {
    if (a.tensorboard_given) events = std::make_unique<RunEventLog>(a.tensorboard, config_to_json(cfg));
    if (opt.resume)
      spdlog::info("resuming {} at step {} of {}", opt.resume->partial, opt.resume->point.state.step, cfg.steps);
    const ModelConfig& m = cfg.model;
    spdlog::info("training {} {} {} L={} lr={} for {} steps -> {}", to_string(m.model), to_string(m.norm),
                 to_string(m.placement), depth_text(m), cfg.lr, cfg.steps, opt.dir);
    if (table) print_loss_table_header();
  };
  opt.on_notice = [](const std::string& s) { spdlog::warn("{}", s); };
  opt.interrupt = catch_interrupts();
  opt.on_eval = [table, progress, &events](const EvalRecord& r) {
    // An events file that cannot be written (a full disk, a file-size limit) stops the run with an
    // error naming it, as any file of the run does (docs/tensorboard.md); the file keeps its whole
    // records only.
    if (events) events->eval(r);
    if (progress) clear_progress_line();
    if (table) print_loss_table_row(r);
  };
  if (progress) opt.on_step = [steps = cfg.steps](int64_t step, double loss) { print_progress_line(step, steps, loss); };
  TrainResult r;
  std::string result;
  try {
    result = run_and_record(cfg, opt, &r);
  } catch (const Error& e) {
    // The run's own error is what the user hears; the events only say how it ended, if they can.
    if (events) try {
        events->stopped(fmt::format("{}: {}", dynamic_cast<const Interrupted*>(&e) ? "interrupted" : "stopped by an error", e.what()));
      } catch (const Error&) {
      }
    throw;
  }
  if (events) try {
      events->finish(result);
      spdlog::info("TensorBoard events: {}", events->path());
    } catch (const Error& e) {
      spdlog::warn("TensorBoard events: {}", e.what());
    }
  if (progress) clear_progress_line();
  std::cout << (g.json ? result + "\n" : train_result_text(r, opt.dir));
  return 0;
}

}  // namespace

Runner add_train(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand("train", "Train one small Transformer configuration and record its run");
  sub->add_option("--config", args->config_file, "JSON file of config keys (flags override it)");
  add_given_option(*sub, "--out", args->out, args->out_given,
                   "Run directory (default runs/<time>-<model>-<norm>-<placement>-L<layers>-s<seed>)");
  sub->add_flag("--force", args->force, "Replace an existing run directory");
  sub->add_option_function<int64_t>(
         "--save_every,--save-every",
         [args](int64_t n) {
           args->save_every = n;
           args->save_every_given = true;
         },
         "Also write checkpoints/step-N.safetensors (+ the optimizer state, step-N.state.safetensors) every N "
         "steps; a run stopped after one can be resumed (the final model.safetensors always)")
      ->check(whole_count);
  add_given_option(*sub, "--tensorboard", args->tensorboard, args->tensorboard_given,
                   "Also write TensorBoard event files into this directory as the run goes (every metrics.jsonl "
                   "number, per layer too; docs/tensorboard.md)");
  add_given_option(*sub, "--resume", args->resume, args->resume_given,
                   "Continue a stopped run from its latest checkpoint, bit for bit: its DIR.partial.<pid> directory, or DIR");
  for (const ConfigKey& k : config_keys()) {
    std::string name = k.name;
    sub->add_option_function<std::string>(
        config_flag_names(name), [args, name](const std::string& v) { args->values[name] = v; },
        fmt::format("{} ({})", k.help, k.type));
  }
  add_device_flags(*sub, args->dev);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab train --norm rmsnorm --placement pre --layers 20 --steps 3000
  normlab train --model gpt --qk_norm true --norm layernorm --placement post --lr 3e-3 --warmup_steps 200
  normlab train --config experiments/toy-pre-rms-L20.json --lr 1e-2 --out runs/lr1e-2
  normlab train --data text:experiments/data/tiny.txt --model gpt --steps 500 --json
  normlab train --device cuda --steps 200   (every kernel on GPU 0; the model, Adam's state and the activations live in device memory)
  normlab train --layers 20 --steps 3000 --tensorboard tb/L20   (then: tensorboard --logdir tb)
  normlab train --layers 20 --steps 3000 --save_every 500 --out runs/long   (Ctrl-C, then:)
  normlab train --resume runs/long

A run directory holds config.json (resolved, defaults included), metrics.jsonl (one line per eval:
losses, lr, residual-stream norm after each block, gradient norm of each block), timing.jsonl and
result.json. A diverged run (non-finite loss or gradient) ends with status "diverged", exit 0; a run that learned
nothing (final validation loss within 0.05 nats of the unigram baseline, or above it) "collapsed".)");
  return [args, &g] { return run_train(*args, g); };
}

}  // namespace normlab::cli
