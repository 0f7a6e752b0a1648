// Slurm: the sweep as a job array. Each array task runs one shard of the resolved spec over the shared
// sweep directory; `normlab sweep summarize DIR` merges them (any shard's end also writes summaries).
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/parse.h"
#include "normlab/sweep.h"

namespace normlab {

namespace fs = std::filesystem;

namespace {

std::string sh_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A value as one argument of an #SBATCH line. sbatch splits a directive at spaces, ends it at an
// unquoted '#' (older versions: even a quoted one), takes "..." (newer versions: '...' too) as quotes and a backslash as an escape; the
// escapes below read the same in both parsers.
std::string sbatch_quote(const std::string& s) {
  if (s.find_first_of(" \"'\\#") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\'' || c == '\\' || c == '#') out += '\\';
    out += c;
  }
  return out + "\"";
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

// Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED / INFINITE.
bool slurm_time(const std::string& t) {
  std::string upper;
  for (char c : t) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "UNLIMITED" || upper == "INFINITE") return true;
  std::string rest = t;
  const size_t dash = t.find('-');
  if (dash != std::string::npos) {
    if (!all_digits(t.substr(0, dash))) return false;
    rest = t.substr(dash + 1);
  }
  size_t fields = 0;
  for (size_t start = 0;; ++fields) {
    const size_t colon = rest.find(':', start);
    if (!all_digits(rest.substr(start, colon == std::string::npos ? std::string::npos : colon - start))) return false;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return fields < 3;
}

// A comma list of partition names (Slurm's names: letters, digits, '_', '-', '.').
bool slurm_partitions(const std::string& p) {
  for (const std::string& name : split_at(p, ','))
    if (name.empty() || name.size() > 64 ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != std::string::npos)
      return false;
  return true;
}

bool has_control(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

std::string absolute_dir(const std::string& dir) {
  std::error_code ec;
  return fs::absolute(dir, ec).lexically_normal().string();
}

// Slurm's --output file name: % starts a pattern (%A, %a), %% is a literal %.
std::string percent_escaped(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

}  // namespace

void check_slurm_options(const std::string& dir, const SlurmOptions& o, size_t points) {
  NL_USAGE(o.shards >= 1, "--slurm-shards must be >= 1, got {}", o.shards);
  NL_USAGE(points == 0 || static_cast<size_t>(o.shards) <= points,
           "--slurm-shards {}: the sweep has {} point{} (at most one array task per point)", o.shards, points,
           points == 1 ? "" : "s");
  // --slurm-cpus is each task's --jobs
  NL_USAGE(o.cpus >= 1 && o.cpus <= kMaxThreads, "--slurm-cpus must be from 1 to {}, got {}", kMaxThreads, o.cpus);
  SweepRunOptions task;
  task.threads = o.threads;
  check_run_options(task);
  NL_USAGE(o.array_max >= 0, "--slurm-array-max must be >= 0 (0 = no limit), got {}", o.array_max);
  NL_USAGE(o.time.empty() || slurm_time(o.time),
           "--slurm-time '{}' is not a Slurm time (minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED)",
           shown(o.time));
  NL_USAGE(o.partition.empty() || slurm_partitions(o.partition),
           "--slurm-partition '{}' is not a comma list of partition names (letters, digits, '_', '-', '.')",
           shown(o.partition));
  NL_USAGE(!dir.empty(), "--out: no sweep directory given");
  const std::string abs = absolute_dir(dir);
  NL_USAGE(!has_control(abs), "--out '{}' holds a control character, which would start a new line of sweep.sbatch; "
           "choose another directory for a Slurm sweep", shown(dir, 200));
  NL_USAGE(abs.find('\\') == std::string::npos, "--out '{}' holds a backslash, which Slurm's --output reads as "
           "\"no %A/%a patterns\"; choose another directory for a Slurm sweep", shown(dir, 200));
  NL_USAGE(!o.exe.empty() && o.exe[0] == '/' && !has_control(o.exe),
           "the normlab binary's path '{}' cannot go into sweep.sbatch (it must be absolute, without control characters)",
           shown(o.exe, 200));
  NL_USAGE(!has_control(o.tensorboard), "--tensorboard '{}' holds a control character, which would start a new line of "
           "sweep.sbatch; choose another directory for a Slurm sweep", shown(o.tensorboard, 200));
}

std::string sbatch_script(const std::string& dir, const SlurmOptions& o) {
  check_slurm_options(dir, o, 0);
  const std::string abs_dir = absolute_dir(dir);
  std::string s = "#!/bin/bash\n";
  s += "# normlab sweep as a Slurm job array: one array task per shard, all writing runs into the same directory.\n";
  s += fmt::format("#   submit:    sbatch {}\n", sh_quote(abs_dir + "/sweep.sbatch"));
  s += fmt::format("#   afterwards: {} sweep summarize {}\n", sh_quote(o.exe), sh_quote(abs_dir));
  s += "#SBATCH --job-name=normlab-sweep\n";
  s += fmt::format("#SBATCH --array=0-{}{}\n", o.shards - 1, o.array_max > 0 ? fmt::format("%{}", o.array_max) : "");
  s += "#SBATCH --ntasks=1\n";
  s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus);
  if (!o.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", sbatch_quote(o.partition));
  if (!o.time.empty()) s += fmt::format("#SBATCH --time={}\n", sbatch_quote(o.time));
  s += fmt::format("#SBATCH --output={}\n", sbatch_quote(percent_escaped(abs_dir) + "/slurm/%A_%a.out"));
  s += "set -euo pipefail\n";
  std::string cmd = fmt::format("exec {} sweep {} --out {} --shard \"${{SLURM_ARRAY_TASK_ID}}/{}\" --jobs {} --threads {}",
                                sh_quote(o.exe), sh_quote(abs_dir + "/spec.json"), sh_quote(abs_dir), o.shards, o.cpus,
                                o.threads);
  if (!o.rerun.empty()) cmd += fmt::format(" --rerun {}", fmt::join(o.rerun, ","));
  if (!o.tensorboard.empty()) cmd += " --tensorboard " + sh_quote(o.tensorboard);
  s += cmd + "\n";
  return s;
}

std::string write_sbatch_script(SweepDir& d, const SlurmOptions& o) {
  const std::string script_text = sbatch_script(d.path(), o);
  const std::string slurm_dir = (fs::path(d.path()) / "slurm").string();
  if (::mkdir(slurm_dir.c_str(), 0755) == 0) d.add_created(slurm_dir, true);
  else NL_USAGE(errno == EEXIST, "cannot create '{}': {}", shown(slurm_dir, 200), std::strerror(errno));
  const std::string script = (fs::path(d.path()) / "sweep.sbatch").string();
  const bool existed = ::access(script.c_str(), F_OK) == 0;
  write_file_atomic(script, script_text);
  if (!existed) d.add_created(script, false);
  return script;
}

void check_sbatch_available() {
  const char* path = std::getenv("PATH");
  const std::string dirs = path && *path ? path : "/usr/bin:/bin";  // what sh uses without PATH
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = dirs.find(':', start);
    std::string d = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (d.empty()) d = ".";
    const std::string candidate = d + "/sbatch";
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) return;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw UsageError("--submit: sbatch is not on PATH (is Slurm installed here?); without --submit, --slurm writes "
                   "DIR/sweep.sbatch for submitting elsewhere");
}

std::string submit_sbatch(const std::string& script_path) {
  const std::string cmd = "sbatch --parsable " + sh_quote(script_path) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  NL_USAGE(p != nullptr, "cannot run sbatch");
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  NL_USAGE(ok, "sbatch failed{}: {}", (WIFEXITED(status) && WEXITSTATUS(status) == 127) ? " (is Slurm installed?)" : "",
           out.empty() ? "no output" : out);
  // --parsable prints "jobid" or "jobid;cluster"
  std::string id = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  return id.substr(0, id.find(';'));
}

}  // namespace normlab
