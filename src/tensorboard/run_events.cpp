// What a run's events hold (the mapping of normlab/tensorboard.h), the log `train --tensorboard`
// writes as it goes, and `export tensorboard` of finished run directories.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <algorithm>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/run.h"
#include "normlab/system.h"
#include "normlab/run_records.h"
#include "normlab/tensorboard.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kTrainWriter = "normlab train";
constexpr const char* kExportWriter = "normlab export";
constexpr const char* kExportSuffix = ".normlab-export";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json parse_object(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, false);
  NL_USAGE(j.is_object(), "{} is not a JSON object: {}", what, shown(text, 80));
  return j;
}

double number_or_nan(const json& v) { return v.is_number() ? v.get<double>() : NAN; }

// A field of a file someone may have edited: the fallback when absent or of another type.
int64_t int_or(const json& j, const char* key, int64_t fallback) {
  const auto v = j.find(key);
  return v != j.end() && v->is_number_integer() ? v->get<int64_t>() : fallback;
}
std::string text_or(const json& j, const char* key, const std::string& fallback) {
  const auto v = j.find(key);
  return v != j.end() && v->is_string() ? v->get<std::string>() : fallback;
}

// The tag of entry k of a per-layer list of n: layer_K, or for an encoder-decoder's lists (the
// encoder's layers, then the decoder's) encoder_K and decoder_K, each stack counted from 1.
std::string layer_tag(size_t k, size_t n, int64_t encoder_layers) {
  const auto enc = static_cast<size_t>(std::max<int64_t>(encoder_layers, 0));
  auto numbered = [](const char* stack, size_t i, size_t count) {
    return fmt::format("{}_{:0{}}", stack, i + 1, static_cast<int>(std::to_string(count).size()));
  };
  if (enc == 0 || n <= enc) return numbered("layer", k, n);
  return k < enc ? numbered("encoder", k, enc) : numbered("decoder", k - enc, n - enc);
}

// A record's numbers and per-layer lists as scalars under prefix (its step given).
TbStep record_scalars(const json& j, int64_t step, const std::string& prefix, int64_t encoder_layers = 0) {
  TbStep out;
  out.step = step;
  for (const auto& [key, v] : j.items()) {
    if (key == "step") continue;
    if (v.is_array()) {
      for (size_t k = 0; k < v.size(); ++k)
        out.scalars.push_back({prefix + key + "/" + layer_tag(k, v.size(), encoder_layers), number_or_nan(v[k])});
    } else if (v.is_number() || v.is_null()) {
      out.scalars.push_back({prefix + key, number_or_nan(v)});
    }
  }
  return out;
}

// A JSON line's numbers and per-layer lists as scalars under prefix.
TbStep line_scalars(const std::string& line, const std::string& prefix, const char* what, int64_t encoder_layers = 0) {
  const json j = parse_object(line, what);
  const auto step = j.find("step");
  NL_USAGE(step != j.end() && step->is_number_integer(), "{} has no integer \"step\": {}", what, shown(line, 80));
  return record_scalars(j, step->get<int64_t>(), prefix, encoder_layers);
}

std::vector<std::string> nonempty_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

TrainConfig config_from_json(const std::string& config_json) {
  TrainConfig cfg;
  apply_config_json(cfg, config_json, "the run's config");
  return cfg;
}

}  // namespace

TbStep metrics_line_scalars(const std::string& metrics_line, int64_t encoder_layers) {
  return line_scalars(metrics_line, "", "a metrics.jsonl line", encoder_layers);
}


TbStep timing_line_scalars(const std::string& timing_line) {
  return line_scalars(timing_line, "timing/", "a timing.jsonl line");
}

std::vector<TbScalar> result_scalars(const std::string& result_json) {
  const json j = parse_object(result_json, "result.json");
  std::vector<TbScalar> out;
  for (const std::string& f : result_number_fields()) {
    const auto v = j.find(f);
    if (v != j.end() && v->is_number()) out.push_back({"result/" + f, v->get<double>()});
  }
  return out;
}

std::string result_status_text(const std::string& result_json) {
  const json j = parse_object(result_json, "result.json");
  const std::string status = text_or(j, "status", "unknown");
  if (status == "diverged" && int_or(j, "diverged_step", -1) >= 0)
    return fmt::format("diverged at step {}{}", int_or(j, "diverged_step", -1),
                       text_or(j, "diverged_reason", "").empty() ? "" : " (" + text_or(j, "diverged_reason", "") + ")");
  if (status == "collapsed" && int_or(j, "collapsed_step", -1) >= 0)
    return fmt::format("collapsed from step {} (the validation loss ended at the unigram baseline or above it)",
                       int_or(j, "collapsed_step", -1));
  return status;
}

std::string config_text(const std::string& config_json) {
  std::string out;
  // Markdown: an indented block is shown as code, line for line.
  for (const std::string& line : nonempty_lines(config_json)) out += "    " + line + "\n";
  return out;
}

// ---- during training --------------------------------------------------------------------------

RunEventLog::RunEventLog(const std::string& dir, const std::string& config_json)
    : writer_(dir, kTrainWriter), encoder_layers_(encoder_layers_of(config_from_json(config_json))) {
  writer_.append(text_event(now_seconds(), 0, "config", config_text(config_json)));
}

void RunEventLog::eval(const EvalRecord& r) {
  std::vector<TbScalar> s = metrics_line_scalars(eval_to_json_line(r), encoder_layers_).scalars;
  for (TbScalar& t : timing_line_scalars(timing_to_json_line(r)).scalars) s.push_back(std::move(t));
  writer_.append(scalars_event(now_seconds(), r.step, s));
  last_step_ = r.step;
}

void RunEventLog::finish(const std::string& result_json) {
  const json j = parse_object(result_json, "result.json");
  const int64_t step = int_or(j, "steps_done", last_step_);
  const double now = now_seconds();
  writer_.append(scalars_event(now, step, result_scalars(result_json)) +
                 text_event(now, step, "status", result_status_text(result_json)));
  writer_.close();
}

void RunEventLog::stopped(const std::string& why) {
  writer_.append(text_event(now_seconds(), last_step_, "status", why));
  writer_.close();
}

// ---- export -----------------------------------------------------------------------------------

namespace {

// The run directories at or below `path`, with their names (see export_tensorboard).
void find_runs(const std::string& path, std::vector<std::pair<std::string, std::string>>& runs) {
  std::error_code ec;
  fs::path root = fs::path(path).lexically_normal();
  if (root.filename().empty()) root = root.parent_path();  // "dir/" -> "dir"
  const fs::file_status st = fs::symlink_status(root, ec);
  NL_USAGE(fs::exists(st), "cannot read '{}': no such file or directory", shown(path, 200));
  NL_USAGE(fs::is_directory(st), "'{}' is not a directory (a run or sweep directory, or a folder of them)", shown(path, 200));
  std::string base = fs::absolute(root).lexically_normal().filename().string();
  if (base.empty() || base == "." || base == "..") base = fs::absolute(root).lexically_normal().parent_path().filename().string();
  if (is_finished_run(root.string())) {
    runs.emplace_back(root.string(), base);
    return;
  }
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  NL_USAGE(!ec, "cannot read '{}': {}", shown(path, 200), ec.message());
  for (; it != end; it.increment(ec)) {
    NL_USAGE(!ec, "cannot read '{}': {}", shown(path, 200), ec.message());
    if (!it->is_directory(ec) || it->is_symlink(ec)) {
      if (it->is_symlink(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!is_finished_run(it->path().string())) continue;
    it.disable_recursion_pending();  // a run's checkpoints/ holds no runs
    std::string name = base;
    for (const fs::path& part : it->path().lexically_relative(root))
      if (part != "runs") name += "/" + part.string();
    runs.emplace_back(it->path().string(), name);
  }
}

// The run's events, whole: config, one event per eval (metrics and timing of its step), result.
// Wall times: the run's end (metrics.jsonl's modification time) less its seconds, spread over the
// steps as the run went (the step time is not recorded per step).
std::string run_events(const std::string& path, size_t* scalar_count) {
  const RunDir run(path);
  const std::string result = run.result_text();
  const json rj = parse_object(result, fmt::format("'{}/result.json'", path).c_str());
  std::map<int64_t, std::vector<TbScalar>> by_step;
  const int64_t encoder_layers = run.encoder_layers();
  for (const MetricsRecord& m : run.metrics())
    for (TbScalar& t : record_scalars(m.fields, m.step, "", encoder_layers).scalars)
      by_step[m.step].push_back(std::move(t));
  for (const MetricsRecord& m : run.timing()) {
    auto at = by_step.find(m.step);
    if (at != by_step.end())
      for (TbScalar& t : record_scalars(m.fields, m.step, "timing/").scalars) at->second.push_back(std::move(t));
  }
  struct stat st {};
  const double end = ::stat((path + "/metrics.jsonl").c_str(), &st) == 0 ? static_cast<double>(st.st_mtime) : 0;
  const int64_t steps = std::max<int64_t>(1, int_or(rj, "steps_done", 1));
  double seconds = 0;
  if (rj.contains("timing") && rj["timing"].is_object()) seconds = rj["timing"].contains("seconds") ? number_or_nan(rj["timing"]["seconds"]) : 0;
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  auto wall = [&](int64_t step) { return end - seconds + seconds * static_cast<double>(step) / static_cast<double>(steps); };

  std::string out = version_event(wall(0), kExportWriter);
  out += text_event(wall(0), 0, "config", config_text(run.config_text()));
  size_t n = 0;
  for (const auto& [step, scalars] : by_step) {
    out += scalars_event(wall(step), step, scalars);
    n += scalars.size();
  }
  const int64_t last = int_or(rj, "steps_done", by_step.empty() ? int64_t{0} : by_step.rbegin()->first);
  const std::vector<TbScalar> rs = result_scalars(result);
  out += scalars_event(wall(last), last, rs) + text_event(wall(last), last, "status", result_status_text(result));
  *scalar_count = n + rs.size();
  return out;
}

// An events file an earlier export wrote (its first event names the export as its writer).
bool written_by_export(const std::string& file) {
  try {
    const std::vector<TbEvent> ev = read_event_file(file);
    return !ev.empty() && ev[0].writer == kExportWriter;
  } catch (const Error&) {
    return false;
  }
}

bool inside(const fs::path& p, const fs::path& dir) {
  const fs::path rel = p.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

// An export's file is written whole under <DIR/name>/.export.partial.<pid> (TensorBoard reads only
// names holding "tfevents"), then renamed.
constexpr const char* kExportPartial = ".export";

// DIR/<name> and every folder between them: directories or absent, never a symbolic link (an
// export writes below --out only, never through a link into someone's directory).
void check_destination(const std::string& out_dir, const std::string& name) {
  fs::path at = out_dir;
  for (const fs::path& part : fs::path(name)) {
    at /= part;
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) return;  // absent: the export makes it, and what is below it
    NL_USAGE(!S_ISLNK(st.st_mode), "'{}' is a symbolic link; the export neither follows it nor writes through it: "
             "remove it or choose another --out", shown(at.string(), 200));
    NL_USAGE(S_ISDIR(st.st_mode), "'{}' is not a directory", shown(at.string(), 200));
  }
}

// `path` and the folders above it that are absent, made one by one; each made is added to `made`
// (to be removed if the export fails). A symbolic link below `out_dir` is refused, as it was when
// the export was planned.
void make_directories(const fs::path& out_dir, const std::string& name, std::vector<std::string>& made) {
  fs::path at;
  auto make = [&made](const fs::path& dir, bool below_out) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) == 0) {
      NL_USAGE(!below_out || !S_ISLNK(st.st_mode), "'{}' is a symbolic link; the export neither follows it nor writes "
               "through it", shown(dir.string(), 200));
      NL_USAGE(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "'{}' is not a directory", shown(dir.string(), 200));
      return;
    }
    NL_USAGE(::mkdir(dir.c_str(), 0755) == 0, "cannot create '{}': {}", shown(dir.string(), 200), std::strerror(errno));
    made.push_back(dir.string());
  };
  for (const fs::path& part : out_dir) {
    at /= part;
    make(at, false);
  }
  for (const fs::path& part : fs::path(name)) {
    at /= part;
    make(at, true);
  }
}

// All of the plan's files or none: each written whole under its partial name (stop() between
// files), then all renamed to their names, then the earlier export's files of the same runs
// removed. A failed write (a full disk, a file-size limit) or an interrupt removes every partial
// file and every folder the export made, and leaves the rest as it was.
void write_exports(const std::string& out_dir, std::vector<TbExport>& plan, const std::vector<std::string>& events_of,
                   const std::function<void()>& stop) {
  std::vector<std::string> made, staged;
  std::vector<std::vector<std::string>> earlier(plan.size());
  auto undo = [&] {
    for (const std::string& f : staged) ::unlink(f.c_str());
    for (auto d = made.rbegin(); d != made.rend(); ++d) ::rmdir(d->c_str());  // empty: only ours was in it
  };
  try {
    for (size_t i = 0; i < plan.size(); ++i) {
      stop();
      TbExport& e = plan[i];
      const std::string dest = out_dir + "/" + e.name;
      make_directories(out_dir, e.name, made);
      earlier[i] = event_files(dest);
      struct stat st {};
      const long long stamp = ::stat((e.run + "/metrics.jsonl").c_str(), &st) == 0 ? static_cast<long long>(st.st_mtime) : 0;
      e.file = fmt::format("{}/events.out.tfevents.{}{}", dest, stamp, kExportSuffix);
      const std::string tmp = partial_path(dest + "/" + kExportPartial);
      staged.push_back(tmp);
      CheckedFile f(tmp);
      f.write(events_of[i]);
      f.close();
    }
    stop();  // the last moment the export can stop with nothing changed
  } catch (const Interrupted& e) {
    undo();
    throw Interrupted(fmt::format("interrupted by {}; the export's partial files were removed, nothing was exported",
                                  signal_name(e.signal)),
                      e.signal);
  } catch (...) {
    undo();
    throw;
  }
  // Renamed over an earlier export's file of the same name (the only kind that can be there:
  // checked when planned).
  for (size_t i = 0; i < plan.size(); ++i) {
    if (::rename(staged[i].c_str(), plan[i].file.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      for (size_t j = i; j < staged.size(); ++j) ::unlink(staged[j].c_str());
      throw UsageError(fmt::format("cannot write '{}': {}", shown(plan[i].file, 200), why));
    }
  }
  std::error_code ec;
  for (size_t i = 0; i < plan.size(); ++i)
    for (const std::string& old : earlier[i])
      if (old != plan[i].file && fs::is_regular_file(fs::symlink_status(old, ec)) && written_by_export(old))
        fs::remove(old, ec);  // an earlier export's
}

}  // namespace

std::vector<TbExport> export_tensorboard(const std::vector<std::string>& paths, const std::string& out_dir,
                                         const TbExportOptions& opt) {
  NL_USAGE(!paths.empty(), "export tensorboard needs a run or sweep directory");
  NL_USAGE(!out_dir.empty(), "--out needs a directory name");
  auto stop_if_interrupted = [&opt] {
    if (opt.interrupt && *opt.interrupt)
      throw Interrupted(fmt::format("interrupted by {}; nothing was exported", signal_name(*opt.interrupt)),
                        static_cast<int>(*opt.interrupt));
  };
  std::vector<std::pair<std::string, std::string>> runs;
  for (const std::string& p : paths) {
    const size_t before = runs.size();
    find_runs(p, runs);
    std::sort(runs.begin() + static_cast<std::ptrdiff_t>(before), runs.end());
    NL_USAGE(runs.size() > before, "'{}' holds no finished run directory (config.json, metrics.jsonl and result.json)",
             shown(p, 200));
  }
  std::error_code ec;
  const fs::path out_abs = fs::weakly_canonical(fs::absolute(out_dir), ec);
  NL_USAGE(!fs::exists(out_dir, ec) || fs::is_directory(out_dir, ec), "--out '{}' is not a directory", shown(out_dir, 200));
  check_output_dir(out_dir, "--out");
  std::set<std::string> names;
  std::vector<TbExport> plan;
  for (const auto& [run, name] : runs) {
    NL_USAGE(names.insert(name).second, "two runs would be exported as '{}' (give them from different folders)", shown(name, 200));
    const fs::path run_abs = fs::weakly_canonical(fs::absolute(run), ec);
    NL_USAGE(!inside(out_abs, run_abs) && out_abs != run_abs, "--out '{}' is inside the run directory '{}' (a run directory holds only its run)",
             shown(out_dir, 200), shown(run, 200));
    TbExport e;
    e.run = run;
    e.name = name;
    const std::string dest = out_dir + "/" + name;
    check_destination(out_dir, name);
    const std::string inside_run = enclosing_run_or_sweep(dest);
    NL_USAGE(inside_run.empty(), "the events of '{}' would go to '{}', inside '{}' (a run directory, or a sweep's runs/, holds "
             "only runs): choose another --out", shown(run, 200), shown(dest, 200), shown(inside_run, 200));
    for (const std::string& f : event_files(dest))
      NL_USAGE(written_by_export(f),
               "'{}' already holds event files that normlab's export did not write ('{}'): TensorBoard would show them as one "
               "run; choose another --out",
               shown(dest, 200), shown(fs::path(f).filename().string(), 120));
    plan.push_back(e);
  }
  // Every run read and rendered before the first file is written: a torn line in the last run
  // stops the export with nothing written.
  std::vector<std::string> events_of;
  for (TbExport& e : plan) {
    stop_if_interrupted();
    events_of.push_back(run_events(e.run, &e.scalars));
  }
  // Named once the input is known good: a bad input stays one error line.
  if (opt.on_notice)
    for (const TbExport& e : plan)
      for (const std::string& p : stale_partials(out_dir + "/" + e.name + "/" + kExportPartial))
        opt.on_notice(fmt::format("{} is left from an export that was stopped (its process is gone); TensorBoard does not "
                                  "read it: remove it (rm '{}')",
                                  shown(p, 200), shown(p, 200)));
  write_exports(out_dir, plan, events_of, stop_if_interrupted);
  return plan;
}

}  // namespace normlab
