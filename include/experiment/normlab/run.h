// A training run on disk: <dir>/config.json (resolved), metrics.jsonl (one line per eval,
// deterministic), timing.jsonl (per-eval step time; wall-clock, so kept out of metrics.jsonl),
// result.json, model.safetensors (the final weights, PyTorch names, the resolved config in its
// __metadata__; not for a diverged run). The run is written to <dir>.partial and renamed when
// complete: a directory named <dir> is always whole.
#pragma once
#include <map>
#include <string>

#include "normlab/train.h"

namespace normlab {

struct RunOptions {
  std::string dir;     // where the run lands
  bool force = false;  // replace an existing run directory
  // result.json's "versions": what built and runs this binary (normlab, oneDNN, CPU, ...); the
  // caller asks (about.h), so that this layer need not know the backends.
  std::map<std::string, std::string> versions;
  // Told as the run goes (the cli prints the loss table and a progress line); the run itself
  // prints nothing.
  std::function<void()> on_start;  // after the inputs are validated, before the first step
  EvalCallback on_eval;
  ProgressCallback on_step;
  // Besides the final model.safetensors: checkpoints/step-<N>.safetensors every N steps (0: none).
  int64_t save_every = 0;
};

// Everything that can be wrong with a run's inputs (config, text file), checked before anything
// is created or logged.
void validate_run(const TrainConfig& cfg);
// Runs and writes the run directory; returns result.json's text.
std::string run_and_record(const TrainConfig& cfg, const RunOptions& opt, TrainResult* out = nullptr);
std::string result_to_json(const TrainConfig& cfg, const TrainResult& r,
                           const std::map<std::string, std::string>& versions);
std::string eval_to_json_line(const EvalRecord& r);

}  // namespace normlab
