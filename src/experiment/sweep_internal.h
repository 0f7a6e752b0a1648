// Shared by the sweep implementation files (src/experiment/sweep_*.cpp); not a public header.
#pragma once
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "normlab/io.h"
#include "normlab/run_records.h"

#include "normlab/sweep.h"

namespace normlab {

// 16 hex digits: FNV-1a 64 of config_to_json with threads set to 0.
std::string config_hash(const TrainConfig& cfg);
// A sweep with one varied axis has it as its rows and no columns; --paired over that axis means
// "compare its values": the axis becomes the one column and the rows one row ("all").
void pair_across_rows_when_alone(SummaryLayout& layout);
// The varied axes (seed aside) that neither the rows nor a column name but that they determine
// over `points`: an axis zipped with one of them ("zip": d_model with d_hidden) has one value per
// cell, so it needs no place of its own in the table, and it must not keep a cell's seeds from
// pairing across columns.
std::vector<std::string> implied_axes(const std::vector<SweepPoint>& points, const SummaryLayout& layout,
                                      const std::vector<std::string>& axes);
// rows/cols/metric against the varied axes (an axis in `implied` needs no place); UsageError naming `where`.
void check_layout(const SummaryLayout& layout, const std::vector<std::string>& axes, const std::string& where,
                  const std::vector<std::string>& implied = {});
// Appends one line to DIR/manifest.jsonl with a single write() on an O_APPEND descriptor (so lines from
// concurrent shards never interleave); throws Error when the write fails.
void manifest_append(const std::string& dir, const std::string& json_line);
// "key=v1,v2" conditions (--where): the point's axis key has one of the values (numbers compared
// as numbers); every condition must hold.
bool point_matches(const SweepPoint& p, const std::vector<std::string>& where);
// Run directory, point config and log paths of a point.
std::string run_dir(const std::string& dir, const SweepPoint& p);
std::string point_config_path(const std::string& dir, const SweepPoint& p);
std::string point_log_path(const std::string& dir, const SweepPoint& p);
// Reads a run directory: status (completed / diverged, or "" when not a whole run of this config).
struct RunRecord {
  std::string status;  // completed, diverged or "" (missing, partial, other config)
  double metric = 0;
  double metric_se = NAN;  // result.json's "<metric>_se" where the run measured it (its resolution)
  std::vector<std::pair<int64_t, int64_t>> plateaus;  // result.json "plateaus"
  int64_t spikes = -1;     // result.json "spike_count" (-1: not counted)
  int64_t diverged_step = -1;
  bool collapsed = false;  // train's status "collapsed": finished, but learned nothing (train.h)
  int64_t collapsed_step = -1;
  std::string result_json;  // the text of result.json
  std::string problem;      // status "": what is wrong with what is there ("" when nothing is: pending)
};
RunRecord read_run(const std::string& dir, const SweepPoint& p, const std::string& metric);
// f(step, record) for each record of the run's metrics.jsonl.
template <class F>
void for_each_metrics_record(const RunDir& run, F&& f) {
  for (const MetricsRecord& r : run.metrics()) f(r.step, r.fields);
}

// A run directory's metrics.jsonl as eval records holding step and val_loss only (none when absent
// or unreadable).
std::vector<EvalRecord> read_eval_losses(const std::string& run);
std::string now_iso8601();

// DIR/manifest.jsonl as the runner reads it: per point (name and config hash), its last record
// decides ("last end wins": a rerun's end replaces the earlier one; a start after it means running).
struct ManifestRecord {
  std::string event;   // start or end
  std::string status;  // an end's: completed, diverged, failed, interrupted
  std::string time;    // ISO 8601, UTC
  double seconds = 0;  // an end's: the attempt's run time
};
struct Manifest {
  std::map<std::string, ManifestRecord> last;      // by manifest_key: the point's last record
  std::map<std::string, ManifestRecord> last_end;  // by manifest_key: its last end record
  std::vector<std::string> start_times;            // every start, in file order
};
std::string manifest_key(const SweepPoint& p);
// An absent manifest is empty; a torn line (a killed writer) is not a record.
Manifest read_manifest(const std::string& dir);

}  // namespace normlab
