// The sweep directory: checking it before anything is created, spec changes, the manifest, point states.
#include <fmt/ranges.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
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
#include "normlab/parse.h"
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
  // A full disk or a file-size limit is the environment, not a bug: UsageError (exit 2).
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  NL_USAGE(fd >= 0, "cannot open '{}': {}", shown(path, 200), std::strerror(errno));
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = errno;
  if (n > 0 && n < static_cast<ssize_t>(line.size())) {
    // Part of the line went in (the disk filled, the file-size limit): it is cut off again, so that
    // the next record does not start on it. Only while it is still the file's end: another
    // process of the sweep appending after it keeps what it wrote.
    struct stat st {};
    const off_t at = ::lseek(fd, 0, SEEK_CUR);
    const bool cut = at >= n && ::fstat(fd, &st) == 0 && st.st_size == at && ::ftruncate(fd, at - n) == 0;
    ::close(fd);
    throw UsageError(fmt::format("cannot append to '{}': short write{}", shown(path, 200),
                                 cut ? "" : "; its last line may be torn"));
  }
  ::close(fd);
  NL_USAGE(n == static_cast<ssize_t>(line.size()), "cannot append to '{}': {}", shown(path, 200),
           n < 0 ? std::strerror(err) : "short write");
}

std::vector<EvalRecord> read_eval_losses(const std::string& run) {
  std::vector<EvalRecord> evals;
  std::vector<MetricsRecord> records;
  try {
    records = RunDir(run).metrics();
  } catch (const UsageError&) {
    return evals;  // a summary goes on without a damaged run's curve (its status is result.json's)
  }
  for (const MetricsRecord& m : records) {
    EvalRecord r;
    r.step = m.step;
    r.val_loss = m.fields.contains("val_loss") && m.fields["val_loss"].is_number() ? m.fields["val_loss"].get<double>() : NAN;
    evals.push_back(r);
  }
  return evals;
}

namespace {

// The point's metric from its result.json `j`, backfilled for runs from before it was measured.
void read_metric(const json& j, const TrainConfig& config, const std::string& metric, RunRecord& r) {
  r.metric = j.contains(metric) && j[metric].is_number() ? j[metric].get<double>() : NAN;
  // Runs from before evals measured against the oracle: its loss on their held-out tokens follows
  // from their config, exactly (the same batches, the same rule).
  if (!j.contains(metric) && (metric == "final_excess_loss" || metric == "final_oracle_loss") &&
      j.contains("final_val_loss") && j["final_val_loss"].is_number()) {
    const double oracle = held_out_oracle_loss(config);
    r.metric = metric == "final_oracle_loss" ? oracle : j["final_val_loss"].get<double>() - oracle;
  }
  const std::string se = metric + "_se";
  if (j.contains(se) && j[se].is_number()) r.metric_se = j[se].get<double>();
}

// The plateaus, spikes and collapse of a finished run with result.json `j` and status `status`.
void read_events(const RunDir& run, const json& j, const std::string& status, RunRecord& r) {
  if (j.contains("diverged_step") && j["diverged_step"].is_number()) r.diverged_step = j["diverged_step"].get<int64_t>();
  if (j.contains("plateaus") && j["plateaus"].is_array())
    for (const json& spell : j["plateaus"])
      if (spell.is_array() && spell.size() == 2 && spell[0].is_number_integer() && spell[1].is_number_integer())
        r.plateaus.emplace_back(spell[0].get<int64_t>(), spell[1].get<int64_t>());
  // Runs from before result.json listed plateaus: the same rule over their metrics.jsonl.
  if (!j.contains("plateaus") && status != "diverged" && j.contains("unigram_loss") && j["unigram_loss"].is_number())
    r.plateaus = plateau_spells(read_eval_losses(run.path()), j["unigram_loss"].get<double>());
  if (j.contains("spike_count") && j["spike_count"].is_number_integer()) r.spikes = j["spike_count"].get<int64_t>();
  r.collapsed = status == "collapsed";
  if (r.collapsed && j.contains("collapsed_step") && j["collapsed_step"].is_number())
    r.collapsed_step = j["collapsed_step"].get<int64_t>();
}

RunRecord damaged(std::string problem) {
  RunRecord r;
  r.problem = std::move(problem);
  return r;
}

}  // namespace

RunRecord read_run(const std::string& dir, const SweepPoint& p, const std::string& metric) {
  const RunDir run(run_dir(dir, p));
  // train renames a run directory into place only when it is whole: nothing there is a point that
  // has not finished (its partial is the runner's); anything else there was damaged afterwards.
  if (run.state() == RunDir::State::absent || run.state() == RunDir::State::being_written) return {};
  if (!run.finished()) return damaged(run.problem());
  try {
    // The run is of this point only when its resolved config hashes the same.
    if (config_hash(run.config()) != p.hash) return {};
  } catch (const std::exception& e) {
    return damaged(fmt::format("config.json does not read back: {}", e.what()));
  }
  RunRecord r;
  try {
    r.result_json = run.result_text();
  } catch (const std::exception& e) {
    return damaged(fmt::format("result.json cannot be read: {}", e.what()));
  }
  const json j = json::parse(r.result_json, nullptr, false);
  if (j.is_discarded()) return damaged("result.json is not valid JSON (truncated, or overwritten)");
  const std::string status = j.is_object() && j.contains("status") && j["status"].is_string() ? j["status"].get<std::string>() : "";
  // A collapsed run finished: it counts as completed, with its loss, and is marked.
  if (status == "ok" || status == "collapsed") r.status = "completed";
  else if (status == "diverged") r.status = "diverged";
  else return damaged("result.json has no final status");
  try {
    read_metric(j, p.config, metric, r);  // may rebuild the run's data to backfill the metric
  } catch (const std::exception& e) {
    return damaged(fmt::format("its {} cannot be computed: {}", metric, e.what()));
  }
  read_events(run, j, status, r);
  return r;
}

namespace {

constexpr const char* kLockFile = "sweep.lock";

// What a sweep stopped (SIGKILL) after locking DIR but before writing spec.json leaves there.
bool only_sweep_leftovers(const fs::path& d) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(d, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink(ec)) return false;
    if (name == kLockFile && e.is_regular_file(ec)) continue;
    // spec.json being written by a shard that started a moment earlier (under write_file_atomic's
    // name, or renamed since the caller looked): the check after the lock compares it
    if ((name == "spec.json" || name.rfind("spec.json.tmp.", 0) == 0) && e.is_regular_file(ec)) continue;
    const bool ours = name == "runs" || name == "points" || name == "logs" || name == "slurm";
    if (!ours || !e.is_directory(ec) || !fs::is_empty(e.path(), ec)) return false;
  }
  return !ec;
}

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
    NL_USAGE(fs::is_directory(d, ec), "--out '{}' exists and is not a directory", shown(dir, 200));
    NL_USAGE(::access(dir.c_str(), W_OK | X_OK) == 0, "--out '{}' is not writable: {}", shown(dir, 200), std::strerror(errno));
  } else {
    fs::path a = existing_ancestor(d);
    NL_USAGE(fs::is_directory(a, ec), "--out '{}' cannot be created: '{}' is not a directory", shown(dir, 200),
             shown(a.string(), 200));
    NL_USAGE(::access(a.c_str(), W_OK | X_OK) == 0, "--out '{}' cannot be created: '{}' is not writable: {}",
             shown(dir, 200), shown(a.string(), 200), std::strerror(errno));
    return "";
  }
  const fs::path spec_path = d / "spec.json";
  if (!fs::exists(spec_path, ec)) {
    bool empty = fs::is_empty(d, ec) || only_sweep_leftovers(d);
    // A shard that started a moment earlier may have written spec.json, and its points, while
    // this one looked: then DIR holds that sweep, compared below.
    if (!fs::exists(spec_path, ec)) {
      NL_USAGE(empty, "--out '{}' is not empty and holds no sweep (no spec.json): choose a new directory",
               shown(dir, 200));
      return "";
    }
  }
  SweepPlan old_plan;
  try {
    old_plan = plan_stored_sweep(spec_path.string());
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

std::vector<CarriedRun> runs_to_carry(const std::string& dir, const SweepPlan& plan) {
  std::vector<CarriedRun> out;
  SweepPlan old_plan;
  try {
    old_plan = plan_stored_sweep((fs::path(dir) / "spec.json").string());
  } catch (const UsageError&) {
    return out;  // no stored spec, or one that no longer plans: nothing to carry
  }
  std::set<std::string> names;
  std::map<std::string, size_t> by_hash;
  for (size_t i = 0; i < plan.points.size(); ++i) {
    names.insert(plan.points[i].name);
    by_hash.emplace(plan.points[i].hash, i);
  }
  std::set<size_t> taken;
  for (const SweepPoint& q : old_plan.points) {
    const auto it = by_hash.find(q.hash);
    if (names.count(q.name) || it == by_hash.end() || taken.count(it->second)) continue;
    // Only into a place nothing holds, and only a whole run of that very config.
    struct stat st {};
    if (::lstat(run_dir(dir, plan.points[it->second]).c_str(), &st) == 0 || errno != ENOENT) continue;
    const std::string status = read_run(dir, q, "final_val_loss").status;
    if (status.empty()) continue;
    taken.insert(it->second);
    out.push_back({q, it->second, status});
  }
  return out;
}

namespace {

// mkdir -p of `path`'s missing ancestors under DIR/runs (the sweep's own tree).
void make_parents(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  NL_USAGE(!ec, "cannot create '{}': {}", shown(path.parent_path().string(), 200), ec.message());
}

// Removes the directories between `path` and `top` that moving `path` left empty.
void remove_empty_parents(fs::path path, const fs::path& top) {
  for (path = path.parent_path(); path != top && path.has_relative_path(); path = path.parent_path())
    if (::rmdir(path.c_str()) != 0) break;
}

// Moves run `c` (and its log) to its new point's name, and says so in the manifest: an end record
// under the new name, with what the old one's said.
void carry_run(const std::string& dir, const SweepPlan& plan, const CarriedRun& c, const Manifest& m) {
  const SweepPoint& p = plan.points[c.to];
  const std::string from = run_dir(dir, c.from), to = run_dir(dir, p);
  make_parents(to);
  NL_USAGE(::rename(from.c_str(), to.c_str()) == 0, "cannot move '{}' to '{}': {}", shown(from, 200), shown(to, 200),
           std::strerror(errno));
  remove_empty_parents(from, fs::path(dir) / "runs");
  struct stat st {};
  const std::string old_log = point_log_path(dir, c.from), new_log = point_log_path(dir, p);
  if (::lstat(old_log.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::lstat(new_log.c_str(), &st) != 0)
    ::rename(old_log.c_str(), new_log.c_str());  // a log left behind is only a log
  const auto old_end = m.last_end.find(manifest_key(c.from));
  json end{{"event", "end"}, {"point", p.name}, {"hash", p.hash}, {"time", now_iso8601()}, {"status", c.status},
           {"seconds", old_end != m.last_end.end() ? old_end->second.seconds : 0.0}, {"moved_from", c.from.name}};
  manifest_append(dir, end.dump());
}

// Moves every run runs_to_carry finds, before the stored spec is replaced.
void carry_runs(const std::string& dir, const SweepPlan& plan) {
  const std::vector<CarriedRun> carried = runs_to_carry(dir, plan);
  if (carried.empty()) return;
  const Manifest m = read_manifest(dir);
  for (const CarriedRun& c : carried) carry_run(dir, plan, c, m);
}

}  // namespace

namespace {

std::string changed_spec_message(const std::string& dir, const std::string& changed) {
  return fmt::format("the spec differs from the sweep already in '{}': {}. Use a new --out, or --force to run the new "
                     "spec there (runs of changed points are replaced; points no longer in the spec are left out of "
                     "the summaries)", shown(dir, 200), changed);
}

// Who holds a sweep's lock, as its holder wrote it ("process 12 on host h, since ...").
std::string holder_of(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "a process that did not say who it is" : shown(text, 200);
}

}  // namespace

SweepDir::SweepDir(const std::string& dir, const SweepPlan& plan, bool force, Lock lock) : dir_(dir), mode_(lock) {
  {
    const std::string changed = check_sweep_dir(dir, plan);
    if (!changed.empty() && !force) throw UsageError(changed_spec_message(dir, changed));
  }
  try {
    // DIR and every ancestor it lacks, each remembered as ours
    std::vector<fs::path> missing;
    struct stat st {};
    for (fs::path p = dir; !p.empty() && ::lstat(p.c_str(), &st) != 0; p = p.parent_path()) {
      missing.push_back(p);
      if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0755) == 0) add_created(it->string(), true);
      else NL_USAGE(errno == EEXIST, "cannot create '{}': {}", shown(it->string(), 200), std::strerror(errno));
    }
    lock_or_refuse();
    // Another sweep may have written DIR between the first check and the lock.
    const std::string changed = check_sweep_dir(dir, plan);
    if (!changed.empty() && !force) throw UsageError(changed_spec_message(dir, changed));
    if (!changed.empty()) carry_runs(dir, plan);
    const std::string spec_path = (fs::path(dir) / "spec.json").string();
    // Shards of one array start together: rewrite only when the text differs.
    const bool had_spec = ::lstat(spec_path.c_str(), &st) == 0;
    const std::string old_text = had_spec ? read_file(spec_path) : "";
    if (old_text != plan.spec_json) {
      write_file_atomic(spec_path, plan.spec_json);
      if (!had_spec) add_created(spec_path, false);
    }
    for (const char* sub : {"runs", "points", "logs"}) {
      const std::string p = (fs::path(dir) / sub).string();
      if (::mkdir(p.c_str(), 0755) == 0) add_created(p, true);
      else NL_USAGE(errno == EEXIST && ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "cannot create '{}': {}",
                    shown(p, 200), errno == EEXIST ? "it is not a directory" : std::strerror(errno));
    }
  } catch (...) {
    rollback();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw;
  }
}

void SweepDir::lock_or_refuse() {
  const std::string path = (fs::path(dir_) / kLockFile).string();
  bool made = false;
  for (int attempt = 0;; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0 && !made) {
      made = true;
      add_created(path, false);
    }
    if (fd < 0 && errno == EEXIST) fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    NL_USAGE(fd >= 0, "cannot open '{}': {}", shown(path, 200), std::strerror(errno));
    if (::flock(fd, (mode_ == Lock::exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
      const int e = errno;
      std::string who;
      if (mode_ == Lock::exclusive && ::flock(fd, LOCK_SH | LOCK_NB) == 0)
        who = "shards of a sweep (--shard K/N)";  // only shared holders: they do not say who they are
      else
        who = "another normlab sweep (" + holder_of(fd) + ")";
      ::close(fd);
      NL_USAGE(e == EWOULDBLOCK, "cannot lock '{}': {}", shown(path, 200), std::strerror(e));
      throw UsageError(fmt::format("{} {} running in '{}'; wait for it to end or stop it (the lock: {})", who,
                                   who.rfind("shards", 0) == 0 ? "are" : "is", shown(dir_, 200), shown(path, 200)));
    }
    // A sweep that stopped before its first point removes the lock file it made: lock the one there now.
    struct stat mine {}, there {};
    if (::fstat(fd, &mine) == 0 && ::stat(path.c_str(), &there) == 0 && mine.st_ino == there.st_ino &&
        mine.st_dev == there.st_dev) {
      fd_ = fd;
      break;
    }
    ::close(fd);
    NL_USAGE(attempt < 100, "cannot lock '{}': it keeps being replaced", shown(path, 200));
  }
  if (mode_ == Lock::shared) return;  // several holders: none writes who it is
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string who = fmt::format("process {} on host {}, since {}\n", ::getpid(), host, now_iso8601());
  NL_USAGE(::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, who.data(), who.size(), 0) == static_cast<ssize_t>(who.size()),
           "cannot write '{}': {}", shown(path, 200), std::strerror(errno));
}

void SweepDir::add_created(const std::string& path, bool is_dir) { created_.emplace_back(path, is_dir); }

void SweepDir::keep() { kept_ = true; }

void SweepDir::unlock() {
  if (fd_ >= 0) ::flock(fd_, LOCK_UN);
}

void SweepDir::rollback() {
  // Only while no other process holds DIR: a shard beside this one may be using what was made.
  if (kept_ || created_.empty() || fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0) return;
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    if (it->second) ::rmdir(it->first.c_str());  // only if still empty: nothing of anyone else's goes
    else ::unlink(it->first.c_str());
  }
  created_.clear();
}

SweepDir::~SweepDir() {
  rollback();
  if (fd_ >= 0) ::close(fd_);
}

void prepare_sweep_dir(const std::string& dir, const SweepPlan& plan, bool force) {
  SweepDir d(dir, plan, force, SweepDir::Lock::exclusive);
  d.keep();
}

std::string manifest_key(const SweepPoint& p) { return p.name + "#" + p.hash; }

Manifest read_manifest(const std::string& dir) {
  Manifest m;
  const std::string manifest = (fs::path(dir) / "manifest.jsonl").string();
  struct stat mst {};
  // Read only when it is there (a new sweep has none), and never waited on (a FIFO is refused).
  std::istringstream in(::lstat(manifest.c_str(), &mst) == 0 ? read_file(manifest) : std::string());
  std::string line;
  while (std::getline(in, line)) {
    try {
      json j = json::parse(line);
      const std::string key = j.value("point", "") + "#" + j.value("hash", "");
      ManifestRecord r;
      r.event = j.value("event", "");
      r.time = j.value("time", "");
      if (r.event == "start") {
        m.start_times.push_back(r.time);
      } else {
        r.status = j.value("status", "failed");
        const auto s = j.find("seconds");
        r.seconds = s != j.end() && s->is_number() ? s->get<double>() : 0;
        m.last_end[key] = r;
      }
      m.last[key] = r;
    } catch (const std::exception&) {
      // a torn last line (a killed writer) is not a record
    }
  }
  return m;
}

std::vector<PointState> point_states(const std::string& dir, const SweepPlan& plan) {
  const Manifest manifest = read_manifest(dir);
  std::vector<PointState> states(plan.points.size());
  for (size_t i = 0; i < plan.points.size(); ++i) {
    const SweepPoint& p = plan.points[i];
    RunRecord r = read_run(dir, p, plan.layout.metric);
    if (!r.status.empty()) {
      states[i].status = r.status;
      states[i].done = true;
      continue;
    }
    if (!r.problem.empty()) {
      states[i].status = "damaged";
      states[i].problem = r.problem;
      continue;
    }
    auto it = manifest.last.find(manifest_key(p));
    if (it == manifest.last.end()) continue;
    if (it->second.event == "start") {
      states[i].status = "running";
      continue;
    }
    // An end record of completed/diverged without a matching whole run directory means the directory
    // is gone or replaced: the point must run again.
    const std::string& ended = it->second.status;
    states[i].status = (ended == "completed" || ended == "diverged") ? "pending" : ended;
  }
  return states;
}

std::vector<std::string> parse_rerun(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  static const std::vector<std::string> known = {"failed", "interrupted", "diverged", "completed", "all"};
  for (const std::string& item : split_list(text, "--rerun")) {
    NL_USAGE(std::find(known.begin(), known.end(), item) != known.end(),
             "--rerun '{}' is not one of failed, interrupted, diverged, completed, all", shown(item));
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

ShardWork shard_work(const SweepPlan& plan, const std::vector<PointState>& states, const Shard& shard,
                     const std::vector<std::string>& rerun) {
  ShardWork w;
  w.todo = select_points(plan, states, shard, rerun);
  w.runs.assign(plan.points.size(), false);
  for (size_t i : w.todo) w.runs[i] = true;
  for (size_t i = 0; i < plan.points.size(); ++i) {
    if (!in_shard(i, shard)) continue;
    ++w.points;
    if (states[i].done && !w.runs[i]) {
      ++w.done;
      w.diverged += states[i].status == "diverged";
    }
    if (states[i].status == "damaged") w.damaged.emplace_back(plan.points[i].name, states[i].problem);
  }
  return w;
}

}  // namespace normlab
