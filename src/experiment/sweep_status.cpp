// `normlab sweep status`: where sweep directories stand and what they cost (sweep.h).
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/sweep.h"
#include "normlab/table.h"
#include "sweep_internal.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Seconds since the epoch of the manifest's "2026-11-30T18:53:25Z"; NaN when it is not one.
double epoch_seconds(const std::string& iso) {
  std::tm tm{};
  const char* end = ::strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return end != nullptr && *end == '\0' ? static_cast<double>(::timegm(&tm)) : NAN;
}

// "42 min", "2 h 05 min": rounded to the minute.
std::string hours_minutes(double seconds) {
  const long m = std::lround(seconds / 60);
  return m >= 60 ? fmt::format("{} h {:02d} min", m / 60, m % 60) : fmt::format("{} min", m);
}

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

SweepStatus sweep_status(const std::string& dir_text) {
  SweepStatus st;
  st.dir = without_trailing_slashes(dir_text);
  const std::string spec = (fs::path(st.dir) / "spec.json").string();
  struct stat sst {};
  NL_USAGE(::stat(spec.c_str(), &sst) == 0, "'{}' is not a sweep directory (it has no spec.json)", shown(st.dir, 200));
  // The resolved spec plans the sweep's points, every default included.
  const SweepPlan plan = plan_stored_sweep(spec);
  st.points = plan.points.size();
  for (const SweepPoint& p : plan.points) {
    const std::string init = to_string(p.config.model.init);
    if (std::find(st.inits.begin(), st.inits.end(), init) == st.inits.end()) st.inits.push_back(init);
  }
  std::map<std::string, size_t> statuses;
  for (const SweepPoint& p : plan.points) {
    const RunRecord r = read_run(st.dir, p, plan.layout.metric);
    if (r.status.empty()) continue;  // not finished (the runner runs it)
    ++st.finished;
    std::string status = r.status;
    try {
      status = json::parse(r.result_json).value("status", r.status);
    } catch (const std::exception&) {
      // read_run accepted it: a finished run whose status is its record's
    }
    ++statuses[status];
  }
  st.statuses.assign(statuses.begin(), statuses.end());

  const Manifest m = read_manifest(st.dir);
  double first_start = NAN, last_end = NAN;
  for (const std::string& t : m.start_times) first_start = std::fmin(first_start, epoch_seconds(t));
  // Run time: each point's last attempt, by the point's name (an attempt under a config that a
  // --force replaced, or that an older build hashed otherwise, is the same point run again).
  std::map<std::string, std::pair<double, double>> last_attempt;  // name -> (end time, seconds)
  for (const auto& [key, end] : m.last_end) {
    const double t = epoch_seconds(end.time);
    last_end = std::fmax(last_end, t);
    auto& a = last_attempt.try_emplace(key.substr(0, key.rfind('#')), -INFINITY, 0.0).first->second;
    if (!(t < a.first)) a = {t, end.seconds};
  }
  for (const auto& [name, a] : last_attempt) st.run_seconds += a.second;
  if (std::isfinite(first_start) && std::isfinite(last_end)) st.wall_seconds = last_end - first_start;
  return st;
}

std::string sweep_status_markdown(const std::vector<SweepStatus>& sweeps) {
  Table t;
  t.columns = {{"sweep"}, {"init"}, {"points done", Align::right}, {"statuses"}, {"wall clock", Align::right},
               {"sum of run times", Align::right}};
  for (const SweepStatus& s : sweeps) {
    std::string statuses;
    for (const auto& [status, n] : s.statuses) statuses += fmt::format("{}{} {}", statuses.empty() ? "" : ", ", n, status);
    std::string inits;
    for (const std::string& i : s.inits) inits += (inits.empty() ? "" : ", ") + i;
    t.add_row({fs::path(s.dir).filename().string(), inits, fmt::format("{} / {}", s.finished, s.points),
               statuses.empty() ? "—" : statuses, hours_minutes(s.wall_seconds), hours_minutes(s.run_seconds)});
  }
  return t.markdown();
}

std::string sweep_status_json(const std::vector<SweepStatus>& sweeps) {
  json out = json::array();
  for (const SweepStatus& s : sweeps) {
    json statuses = json::object();
    for (const auto& [status, n] : s.statuses) statuses[status] = n;
    out.push_back({{"dir", s.dir},
                   {"init", s.inits},
                   {"points", s.points},
                   {"finished", s.finished},
                   {"statuses", statuses},
                   {"wall_seconds", s.wall_seconds},
                   {"run_seconds", s.run_seconds}});
  }
  return out.dump(2) + "\n";
}

}  // namespace normlab
