// The one reader of a run directory's metrics.jsonl, and the one definition of a finished run.
#include "normlab/run_records.h"

#include <fmt/format.h>

#include <filesystem>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/run.h"

namespace normlab {

namespace fs = std::filesystem;

bool is_finished_run(const std::string& dir) {
  std::string target;
  long pid = 0;
  std::error_code ec;
  return !split_partial(fs::path(dir).lexically_normal().string(), &target, &pid) && is_run_directory(dir) &&
         fs::is_regular_file(fs::path(dir) / "result.json", ec) && fs::is_regular_file(fs::path(dir) / "metrics.jsonl", ec);
}

std::vector<MetricsRecord> read_metrics_file(const std::string& path) {
  const std::string text = read_file(path);
  std::string target;
  long pid = 0;
  // Only a run being written (its <dir>.partial.<pid>) may end in half a line: its trainer may be
  // inside that write. A finished run was renamed into place whole.
  const bool being_written = split_partial(fs::path(path).parent_path().lexically_normal().string(), &target, &pid);
  std::vector<MetricsRecord> records;
  size_t at = 0, line = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    const bool torn = end == std::string::npos;  // no newline: the writer stopped inside this line
    if (torn) end = text.size();
    ++line;
    if (end > at) {
      nlohmann::json rec = nlohmann::json::parse(text.substr(at, end - at), nullptr, false);
      const bool whole = !rec.is_discarded() && rec.is_object() && rec.contains("step") && rec["step"].is_number_integer();
      if (whole) records.push_back({line, rec["step"].get<int64_t>(), std::move(rec)});
      else if (!(being_written && torn && rec.is_discarded()))
        throw UsageError(fmt::format("'{}' line {}: not a record of an evaluation (a JSON object with an integer step)",
                                     shown(path, 200), line));
    }
    at = end + 1;
  }
  return records;
}

std::vector<MetricsRecord> read_run_metrics(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / "metrics.jsonl";
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  return read_metrics_file(path.string());
}

}  // namespace normlab
