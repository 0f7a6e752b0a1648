// The sweep directory: checking it before anything is created, spec changes, the manifest, point states.
#include <fmt/ranges.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/sweep.h"
#include "sweep_internal.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string run_dir(const std::string& dir, const SweepPoint& p) { return (fs::path(dir) / "runs" / p.name).string(); }

std::string point_config_path(const std::string& dir, const SweepPoint& p) {
  return (fs::path(dir) / "points" / (p.hash + ".json")).string();
}

std::string point_log_path(const std::string& dir, const SweepPoint& p) {
  std::string flat = p.name;
  for (char& c : flat)
    if (c == '/') c = ',';
  return (fs::path(dir) / "logs" / (flat + ".log")).string();
}

std::string now_iso8601() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void manifest_append(const std::string& dir, const std::string& json_line) {
  const std::string path = (fs::path(dir) / "manifest.jsonl").string();
  const std::string line = json_line + "\n";
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  NL_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = errno;
  ::close(fd);
  NL_CHECK(n == static_cast<ssize_t>(line.size()), "cannot append to {}: {}", path, n < 0 ? std::strerror(err) : "short write");
}

RunRecord read_run(const std::string& dir, const SweepPoint& p, const std::string& metric) {
  RunRecord r;
  const fs::path rd = run_dir(dir, p);
  std::error_code ec;
  if (!fs::is_regular_file(rd / "result.json", ec) || !fs::is_regular_file(rd / "config.json", ec)) return r;
  try {
    // The run is of this point only when its resolved config hashes the same.
    if (config_hash(load_train_config((rd / "config.json").string(), {})) != p.hash) return r;
    r.result_json = read_file((rd / "result.json").string());
    json j = json::parse(r.result_json);
    const std::string status = j.value("status", "");
    // A collapsed run finished: it counts as completed, with its loss, and is marked.
    if (status == "ok" || status == "collapsed") r.status = "completed";
    else if (status == "diverged") r.status = "diverged";
    else return r;
    if (j.contains("diverged_step") && j["diverged_step"].is_number()) r.diverged_step = j["diverged_step"].get<int64_t>();
    r.metric = j.contains(metric) && j[metric].is_number() ? j[metric].get<double>() : NAN;
    r.collapsed = status == "collapsed";
    if (r.collapsed && j.contains("collapsed_step") && j["collapsed_step"].is_number())
      r.collapsed_step = j["collapsed_step"].get<int64_t>();
  } catch (const std::exception&) {
    r = RunRecord{};  // unreadable: not a finished run of this point
  }
  return r;
}

namespace {

// Nearest existing ancestor of a path that does not exist.
fs::path existing_ancestor(fs::path p) {
  std::error_code ec;
  p = fs::absolute(p, ec);
  while (!p.empty() && !fs::exists(p, ec)) {
    fs::path parent = p.parent_path();
    if (parent == p) break;
    p = parent;
  }
  return p;
}

std::string list_text(const ojson& values) {
  std::vector<std::string> parts;
  for (const ojson& v : values) parts.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// What differs between two resolved specs, one clause per difference.
std::vector<std::string> spec_differences(const ojson& old_spec, const ojson& new_spec) {
  std::vector<std::string> out;
  const ojson& ob = old_spec["base"];
  const ojson& nb = new_spec["base"];
  for (auto& [k, v] : nb.items())
    if (!ob.contains(k)) out.push_back(fmt::format("base {} added ({})", k, v.dump()));
    else if (ob[k] != v) out.push_back(fmt::format("base {}: {} -> {}", k, ob[k].dump(), v.dump()));
  for (auto& [k, v] : ob.items())
    if (!nb.contains(k)) out.push_back(fmt::format("base {} removed", k));
  // axes: grid, every zip group and seeds, flattened to key -> values
  auto axes = [](const ojson& s) {
    std::map<std::string, ojson> a;
    if (s.contains("grid"))
      for (auto& [k, v] : s["grid"].items()) a[k] = v;
    if (s.contains("zip"))
      for (const ojson& g : s["zip"])
        for (auto& [k, v] : g.items()) a[k] = v;
    if (s.contains("seeds")) a["seed"] = s["seeds"];
    return a;
  };
  auto oa = axes(old_spec), na = axes(new_spec);
  for (auto& [k, v] : na)
    if (!oa.count(k)) out.push_back(fmt::format("axis {} added {}", k, list_text(v)));
    else if (oa[k] != v) out.push_back(fmt::format("axis {}: {} -> {}", k, list_text(oa[k]), list_text(v)));
  for (auto& [k, v] : oa)
    if (!na.count(k)) out.push_back(fmt::format("axis {} removed (was {})", k, list_text(v)));
  return out;
}

}  // namespace

std::string check_sweep_dir(const std::string& dir, const SweepPlan& plan) {
  NL_USAGE(!dir.empty(), "no sweep directory given (--out DIR)");
  std::error_code ec;
  const fs::path d(dir);
  if (fs::exists(d, ec)) {
    NL_USAGE(fs::is_directory(d, ec), "--out '{}' exists and is not a directory", dir);
    NL_USAGE(::access(dir.c_str(), W_OK | X_OK) == 0, "--out '{}' is not writable: {}", dir, std::strerror(errno));
  } else {
    fs::path a = existing_ancestor(d);
    NL_USAGE(fs::is_directory(a, ec), "--out '{}' cannot be created: '{}' is not a directory", dir, a.string());
    NL_USAGE(::access(a.c_str(), W_OK | X_OK) == 0, "--out '{}' cannot be created: '{}' is not writable: {}", dir,
             a.string(), std::strerror(errno));
    return "";
  }
  const fs::path spec_path = d / "spec.json";
  if (!fs::exists(spec_path, ec)) {
    bool empty = fs::is_empty(d, ec);
    NL_USAGE(empty, "--out '{}' is not empty and holds no sweep (no spec.json): choose a new directory", dir);
    return "";
  }
  SweepPlan old_plan;
  try {
    old_plan = plan_sweep({spec_path.string(), {}, {}});
  } catch (const UsageError& e) {
    return fmt::format("its spec.json no longer reads as a sweep ({})", e.what());
  }
  std::set<std::pair<std::string, std::string>> old_points, new_points;
  for (const SweepPoint& p : old_plan.points) old_points.insert({p.name, p.hash});
  for (const SweepPoint& p : plan.points) new_points.insert({p.name, p.hash});
  if (old_points == new_points) return "";
  std::vector<std::string> diffs = spec_differences(ojson::parse(old_plan.spec_json), ojson::parse(plan.spec_json));
  size_t added = 0, removed = 0;
  for (const auto& p : new_points) added += old_points.count(p) ? 0 : 1;
  for (const auto& p : old_points) removed += new_points.count(p) ? 0 : 1;
  diffs.push_back(fmt::format("{} point{} new, {} no longer in the sweep", added, added == 1 ? "" : "s", removed));
  return fmt::format("{}", fmt::join(diffs, "; "));
}

void prepare_sweep_dir(const std::string& dir, const SweepPlan& plan, bool force) {
  std::string changed = check_sweep_dir(dir, plan);
  NL_USAGE(changed.empty() || force,
           "the spec differs from the sweep already in '{}': {}. Use a new --out, or --force to run the new spec "
           "there (runs of changed points are replaced; points no longer in the spec are left out of the summaries)",
           dir, changed);
  std::error_code ec;
  for (const char* sub : {"runs", "points", "logs"}) {
    fs::create_directories(fs::path(dir) / sub, ec);
    NL_USAGE(!ec, "cannot create '{}': {}", (fs::path(dir) / sub).string(), ec.message());
  }
  const std::string spec_path = (fs::path(dir) / "spec.json").string();
  // Shards of one array start together: rewrite only when the text differs.
  std::string old_text;
  if (fs::exists(spec_path, ec)) old_text = read_file(spec_path);
  if (old_text != plan.spec_json) write_file_atomic(spec_path, plan.spec_json);
}

std::vector<PointState> point_states(const std::string& dir, const SweepPlan& plan) {
  // The manifest's last record per point (name + hash): start -> running, end -> its status.
  std::map<std::string, std::string> last;
  std::ifstream in(fs::path(dir) / "manifest.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    try {
      json j = json::parse(line);
      std::string key = j.value("point", "") + "#" + j.value("hash", "");
      last[key] = j.value("event", "") == "start" ? "running" : j.value("status", "failed");
    } catch (const std::exception&) {
      // a torn last line (a killed writer) is not a record
    }
  }
  std::vector<PointState> states(plan.points.size());
  for (size_t i = 0; i < plan.points.size(); ++i) {
    const SweepPoint& p = plan.points[i];
    RunRecord r = read_run(dir, p, plan.layout.metric);
    if (!r.status.empty()) {
      states[i].status = r.status;
      states[i].done = true;
      continue;
    }
    auto it = last.find(p.name + "#" + p.hash);
    if (it == last.end()) continue;
    // An end record of completed/diverged without a matching whole run directory means the directory
    // is gone or replaced: the point must run again.
    states[i].status = (it->second == "completed" || it->second == "diverged") ? "pending" : it->second;
  }
  return states;
}

std::vector<std::string> parse_rerun(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  static const std::vector<std::string> known = {"failed", "interrupted", "diverged", "completed", "all"};
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    NL_USAGE(std::find(known.begin(), known.end(), item) != known.end(),
             "--rerun '{}' is not one of failed, interrupted, diverged, completed, all", item);
    out.push_back(item);
  }
  return out;
}

std::vector<size_t> select_points(const SweepPlan& plan, const std::vector<PointState>& states, const Shard& shard,
                                  const std::vector<std::string>& rerun) {
  auto wants = [&](const std::string& s) {
    return std::find(rerun.begin(), rerun.end(), s) != rerun.end() ||
           std::find(rerun.begin(), rerun.end(), "all") != rerun.end();
  };
  std::vector<size_t> out;
  for (size_t i = 0; i < plan.points.size(); ++i) {
    if (!in_shard(i, shard)) continue;
    if (!states[i].done || wants(states[i].status)) out.push_back(i);
  }
  return out;
}

}  // namespace normlab
