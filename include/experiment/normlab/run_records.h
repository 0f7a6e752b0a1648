// Reading a run directory, one definition for every reader: the sweep (its runner, status,
// summaries, curves and profiles), `plot`, `report` and `export tensorboard` open a run here, so
// they agree on which runs are finished, on what a damaged one is, and on what a damaged line is.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/config.h"

namespace normlab {

// One line of metrics.jsonl (an evaluation's record: EvalRecord's fields, as train writes them) or
// of timing.jsonl.
struct MetricsRecord {
  size_t line = 0;      // 1-based, in the file
  int64_t step = 0;     // the record's "step"
  nlohmann::json fields;  // the whole record, a JSON object
};
// The records of a metrics.jsonl (or timing.jsonl) file, in file order. Every line must be a JSON
// object with an integer step, or it is a UsageError naming the file and the line (as is a file
// that cannot be read); the one exception is the last line of a run still being written (in its
// <dir>.partial.<pid>), which may be half written, and is left out.
std::vector<MetricsRecord> read_metrics_file(const std::string& path);

// A run directory as `normlab train` leaves it, opened once: what is at the path, and its files,
// each read one way. Opening reads no file; each accessor reads its file when called.
class RunDir {
 public:
  enum class State {
    absent,         // nothing at the path: a run not started (train renames a run into place whole)
    being_written,  // a <dir>.partial.<pid>: a trainer is writing it, or was until it was stopped
    damaged,        // something that is not a whole run; problem() says what
    finished,       // config.json, result.json and metrics.jsonl (files a person added beside them allowed)
  };
  explicit RunDir(std::string path);

  const std::string& path() const { return path_; }
  State state() const { return state_; }
  bool finished() const { return state_ == State::finished; }
  // What is wrong with a damaged one, as a predicate of the path ("has no result.json").
  const std::string& problem() const { return problem_; }

  // The files. Each throws a UsageError naming the file when it cannot be read or is not what
  // train writes there.
  std::string result_text() const;
  nlohmann::json result() const;  // result.json, a JSON object
  std::string config_text() const;
  TrainConfig config() const;     // config.json, as train would run it
  // encoder_layers_of(config()); 0 where config.json is absent or not a config this build reads
  // (an older or hand-edited file): the run's per-layer lists are then shown as one stack.
  int64_t encoder_layers() const;
  // metrics.jsonl's records (none when there is no such file: a run that has not started; or when
  // something else than a file is in its place, which is never waited on).
  std::vector<MetricsRecord> metrics() const;
  // timing.jsonl's records (none when there is no such file: a run from before it was written).
  std::vector<MetricsRecord> timing() const;

 private:
  std::string file(const char* name) const { return path_ + "/" + name; }
  std::string path_;
  State state_ = State::absent;
  std::string problem_;
};

// An encoder-decoder run's per-layer lists (metrics.jsonl's stream_norm, block_grad_norm) hold its
// encoder's layers, then its decoder's: the encoder's count; 0 for a decoder-only run.
int64_t encoder_layers_of(const TrainConfig& cfg);

// RunDir(dir).finished(): the run directories `plot`, `report` and `export tensorboard` read.
bool is_finished_run(const std::string& dir);

}  // namespace normlab
