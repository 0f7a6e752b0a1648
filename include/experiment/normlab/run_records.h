// Reading a run directory, one definition for every reader: the sweep's summaries, curves and
// profiles, `plot`, `report` and `export tensorboard` all decide "finished" and read metrics.jsonl
// here, so they agree on which runs count and on what a damaged line is.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab {

// A finished run: a run directory as train leaves it (is_run_directory), not a <dir>.partial.<pid>
// being written, holding result.json and metrics.jsonl.
bool is_finished_run(const std::string& dir);

// One line of metrics.jsonl: an evaluation's record (EvalRecord's fields, as train writes them).
struct MetricsRecord {
  size_t line = 0;      // 1-based, in the file
  int64_t step = 0;     // the record's "step"
  nlohmann::json fields;  // the whole record, a JSON object
};
// The records of a metrics.jsonl file, in file order. Every line must be a JSON object with an
// integer step, or it is a UsageError naming the file and the line (as is a file that cannot be
// read); the one exception is the last line of a run still being written (in its
// <dir>.partial.<pid>), which may be half written, and is left out.
std::vector<MetricsRecord> read_metrics_file(const std::string& path);
// RUN/metrics.jsonl's records; none when RUN has no metrics.jsonl (a run that has not started).
std::vector<MetricsRecord> read_run_metrics(const std::string& run_dir);

}  // namespace normlab
