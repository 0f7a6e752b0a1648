// A training run on disk: <dir>/config.json (resolved), metrics.jsonl (one line per eval,
// deterministic), timing.jsonl (per-eval step time; wall-clock, so kept out of metrics.jsonl),
// result.json, model.safetensors (the final weights, PyTorch names, the resolved config in its
// __metadata__; not for a diverged run; with save_every also checkpoints/step-<N>.safetensors),
// and the marker file .normlab-run that makes it recognizable as normlab's.
//
// The run is written to <dir>.partial.<pid> and renamed when complete: a directory named <dir>
// is always whole. What normlab guarantees about the files around it:
// - the destination is checked before training: an existing <dir> stays unless --force, and
//   --force replaces only a normlab run directory (never '.', '..', a symlink or a person's
//   directory), and only the one that was there when the run started;
// - the final rename never replaces anything (renameat2 RENAME_NOREPLACE): of two runs into one
//   <dir>, one wins and the other fails with an error, its finished run kept under its
//   temporary name;
// - if the rename fails, the finished run is kept under <dir>.partial.<pid> and the error says so;
// - every write is checked: a full disk or a file-size limit fails the run (UsageError), the
//   partial directory removed;
// - an interrupt (RunOptions::interrupt) removes the partial directory and throws Interrupted,
//   unless the run has saved a checkpoint (save_every): then the partial directory is kept, and
//   `train --resume` continues it from its latest checkpoint; partial directories of processes
//   that are gone (SIGKILL, a crash) are reported by the next run into the same <dir>
//   (RunOptions::on_notice), never removed silently.
//
// With save_every, each checkpoints/step-<N>.safetensors has a checkpoints/step-<N>.state.safetensors
// beside it (the optimizer's moments, the data stream's position, the evals so far): a run
// resumed from it ends with the same metrics.jsonl and model.safetensors, byte for byte, as one
// that never stopped.
#pragma once
#include <csignal>
#include <map>
#include <string>
#include <vector>

#include "normlab/train.h"

namespace normlab {

// A stopped run that can be continued: its partial directory, the config it ran with (its
// config.json) and its latest complete checkpoint.
struct ResumableRun {
  std::string partial;  // <dir>.partial.<pid>
  std::string dir;      // where it lands when finished
  TrainConfig config;
  ResumePoint point;
  int64_t save_every = 0;  // the stopped run's
};
// `path` is the partial directory itself, or the run directory it would become (then exactly one
// partial directory of it must hold a checkpoint). A UsageError names what is wrong: nothing
// there, a finished run, a run whose process is still going, no checkpoint to continue from,
// a checkpoint that does not match its config.
ResumableRun find_resumable(const std::string& path);

struct RunOptions {
  std::string dir;     // where the run lands
  bool force = false;  // replace an existing normlab run directory
  // result.json's "versions": what built and runs this binary (normlab, oneDNN, CPU, ...); the
  // caller asks (about.h), so that this layer need not know the backends.
  std::map<std::string, std::string> versions;
  // Told as the run goes (the cli prints the loss table and a progress line); the run itself
  // prints nothing.
  std::function<void()> on_start;  // after the inputs and the destination are checked, before the first step
  EvalCallback on_eval;
  ProgressCallback on_step;
  // Besides the final model.safetensors: checkpoints/step-<N>.safetensors every N steps (0: none).
  int64_t save_every = 0;
  std::function<void(const std::string&)> on_notice;  // things worth a warning (stale partial directories)
  // Set (to the signal's number) by the caller's signal handler: the run stops after the current
  // step, removes its partial directory and throws Interrupted.
  const volatile std::sig_atomic_t* interrupt = nullptr;
  // Continue this stopped run (its partial directory is taken over) instead of starting one;
  // dir must be resume->dir.
  const ResumableRun* resume = nullptr;
};

// The marker file in every run directory normlab writes.
inline constexpr const char* kRunMarker = ".normlab-run";

// Everything that can be wrong with a run's inputs (config, text file, memory), checked before
// anything is created or logged.
void validate_run(const TrainConfig& cfg);
// Everything that can be wrong with where the run goes (see the top of this file), checked
// before anything is created; throws UsageError.
void check_run_destination(const RunOptions& opt);
// A directory normlab wrote as a run: a real directory (not a symlink) that holds only run files
// (the marker, config.json, result.json, metrics.jsonl, timing.jsonl) and the marker, or (runs
// written before the marker existed) config.json and result.json.
bool is_run_directory(const std::string& path);
// The nearest directory at or above `path` (which need not exist yet) that is a run directory or a
// sweep's runs/ folder (beside its spec.json), or "" when there is none: where another command's
// files must not go (a run directory holds only its run; a sweep's runs/ only its points).
std::string enclosing_run_or_sweep(const std::string& path);
// Runs and writes the run directory; returns result.json's text.
std::string run_and_record(const TrainConfig& cfg, const RunOptions& opt, TrainResult* out = nullptr);
std::string result_to_json(const TrainConfig& cfg, const TrainResult& r,
                           const std::map<std::string, std::string>& versions);
std::string eval_to_json_line(const EvalRecord& r);
// timing.jsonl's line: the eval's step time (wall-clock, so apart from metrics.jsonl).
std::string timing_to_json_line(const EvalRecord& r);
// The top-level numbers of result.json (null where not finite): what a sweep summary can tabulate.
const std::vector<std::string>& result_number_fields();

}  // namespace normlab
