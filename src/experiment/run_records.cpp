// The one way a run directory is read: its state, and its files' records.
#include "normlab/run_records.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>

#include "normlab/encdec.h"
#include "normlab/error.h"
#include "normlab/io.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool is_partial(const std::string& path) {
  std::string target;
  long pid = 0;
  return split_partial(fs::path(path).lexically_normal().string(), &target, &pid);
}

bool is_regular(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// None when the file is absent; a FIFO or a device in its place is never read (never waited on).
std::vector<MetricsRecord> read_records_if_present(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  if (!is_regular(path)) return {};
  return read_metrics_file(path);
}

}  // namespace

std::vector<MetricsRecord> read_metrics_file(const std::string& path) {
  const std::string text = read_file(path);
  // Only a run being written (its <dir>.partial.<pid>) may end in half a line: its trainer may be
  // inside that write. A finished run was renamed into place whole.
  const bool being_written = is_partial(fs::path(path).parent_path().string());
  std::vector<MetricsRecord> records;
  size_t at = 0, line = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    const bool torn = end == std::string::npos;  // no newline: the writer stopped inside this line
    if (torn) end = text.size();
    ++line;
    if (end > at) {
      json rec = json::parse(text.substr(at, end - at), nullptr, false);
      const bool whole = !rec.is_discarded() && rec.is_object() && rec.contains("step") && rec["step"].is_number_integer();
      if (whole) records.push_back({line, rec["step"].get<int64_t>(), std::move(rec)});
      else if (!(being_written && torn && rec.is_discarded()))
        throw UsageError(fmt::format("'{}' line {}: not a record of a step (a JSON object with an integer step)",
                                     shown(path, 200), line));
    }
    at = end + 1;
  }
  return records;
}

RunDir::RunDir(std::string path) : path_(std::move(path)) {
  struct stat st {};
  if (::lstat(path_.c_str(), &st) != 0) return;
  state_ = State::damaged;
  if (S_ISLNK(st.st_mode)) {
    problem_ = "is a symbolic link, not a run directory";
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    problem_ = "is not a directory";
    return;
  }
  if (is_partial(path_)) {
    state_ = State::being_written;
    return;
  }
  // A file a person added beside them (notes, a plot) leaves it a run: it only keeps train --force
  // from replacing the directory (is_run_directory).
  for (const char* f : {"config.json", "result.json", "metrics.jsonl"})
    if (!is_regular(file(f))) {
      problem_ = fmt::format("has no {}", f);
      return;
    }
  state_ = State::finished;
}

std::string RunDir::result_text() const { return read_file(file("result.json")); }

json RunDir::result() const {
  json j = json::parse(result_text(), nullptr, false);
  NL_USAGE(!j.is_discarded(), "'{}' is not valid JSON (truncated, or overwritten)", shown(file("result.json"), 200));
  NL_USAGE(j.is_object(), "'{}' is not a JSON object", shown(file("result.json"), 200));
  return j;
}

std::string RunDir::config_text() const { return read_file(file("config.json")); }

TrainConfig RunDir::config() const { return load_train_config(file("config.json"), {}); }

std::vector<MetricsRecord> RunDir::metrics() const { return read_records_if_present(file("metrics.jsonl")); }

std::vector<MetricsRecord> RunDir::timing() const { return read_records_if_present(file("timing.jsonl")); }

bool is_finished_run(const std::string& dir) { return RunDir(dir).finished(); }

int64_t RunDir::encoder_layers() const {
  struct stat st {};
  if (::stat(file("config.json").c_str(), &st) != 0) return 0;
  try {
    return encoder_layers_of(config());
  } catch (const UsageError&) {
    return 0;  // plotted and exported as before this key existed, rather than not at all
  }
}

int64_t encoder_layers_of(const TrainConfig& cfg) {
  return cfg.model.model == ModelKind::encdec ? encdec_config(cfg.model).encoder_layers : 0;
}

}  // namespace normlab
