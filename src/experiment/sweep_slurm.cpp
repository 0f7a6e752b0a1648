// Slurm: the sweep as a job array. Each array task runs one shard of the resolved spec over the shared
// sweep directory; `normlab sweep summarize DIR` merges them (any shard's end also writes summaries).
#include <fmt/ranges.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "normlab/error.h"
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

}  // namespace

std::string sbatch_script(const std::string& dir, const SlurmOptions& o) {
  NL_USAGE(o.shards >= 1, "--slurm-shards must be >= 1, got {}", o.shards);
  NL_USAGE(o.cpus >= 1, "--slurm-cpus must be >= 1, got {}", o.cpus);
  NL_USAGE(o.array_max >= 0, "--slurm-array-max must be >= 0 (0 = no limit), got {}", o.array_max);
  std::error_code ec;
  const std::string abs_dir = fs::absolute(dir, ec).lexically_normal().string();
  std::string s = "#!/bin/bash\n";
  s += "# normlab sweep as a Slurm job array: one array task per shard, all writing runs into the same directory.\n";
  s += fmt::format("#   submit:    sbatch {}\n", sh_quote(abs_dir + "/sweep.sbatch"));
  s += fmt::format("#   afterwards: {} sweep summarize {}\n", sh_quote(o.exe), sh_quote(abs_dir));
  s += "#SBATCH --job-name=normlab-sweep\n";
  s += fmt::format("#SBATCH --array=0-{}{}\n", o.shards - 1, o.array_max > 0 ? fmt::format("%{}", o.array_max) : "");
  s += "#SBATCH --ntasks=1\n";
  s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus);
  if (!o.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", o.partition);
  if (!o.time.empty()) s += fmt::format("#SBATCH --time={}\n", o.time);
  s += fmt::format("#SBATCH --output={}/slurm/%A_%a.out\n", abs_dir);
  s += "set -euo pipefail\n";
  std::string cmd = fmt::format("exec {} sweep {} --out {} --shard \"${{SLURM_ARRAY_TASK_ID}}/{}\" --jobs {} --threads {}",
                                sh_quote(o.exe), sh_quote(abs_dir + "/spec.json"), sh_quote(abs_dir), o.shards, o.cpus,
                                o.threads);
  if (!o.rerun.empty()) cmd += fmt::format(" --rerun {}", fmt::join(o.rerun, ","));
  s += cmd + "\n";
  return s;
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
