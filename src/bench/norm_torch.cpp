// `bench norms --with-torch`: PyTorch's rows, from scripts/torch_bench.py run as a child process
// with the run's shapes, threads, passes and rotation.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/system.h"

namespace normlab::bench {

// ============================================================================
// PyTorch's rows, from scripts/torch_bench.py
// ============================================================================

std::string find_torch_script() {
  std::vector<std::string> candidates = {"scripts/torch_bench.py"};
  if (const std::string exe = self_exe(); !exe.empty()) {
    const std::string dir = exe.substr(0, exe.find_last_of('/'));
    candidates.push_back(dir + "/../scripts/torch_bench.py");
    candidates.push_back(dir + "/../../scripts/torch_bench.py");
  }
  for (const std::string& c : candidates)
    if (access(c.c_str(), R_OK) == 0) return c;
  return "";
}

namespace {

// Why PyTorch's rows cannot be run here ("" when they can).
std::string torch_unavailable(const NormBenchOptions& opt, const TorchOptions& torch, const std::string& script) {
  if (script.empty() || access(script.c_str(), R_OK) != 0) return "scripts/torch_bench.py not found (pass --torch-script PATH)";
  if (run_child({{torch.python, "-c", "import torch"}, "", ""}) != 0)
    return fmt::format("{} cannot import torch (pip install torch, or --python PATH)", torch.python);
  if (opt.device == "cuda-sim") return "PyTorch has no cuda-sim: its CUDA rows need --device cuda";
  // The script has LayerNorm and RMSNorm forward and backward; no add+norm.
  if (!opt.fwd && !opt.bwd) return "PyTorch has no fused add+norm rows (--pass addfwd): run with fwd or bwd for its rows";
  return "";
}

// One run of torch_bench.py as this bench's options ask: its command line, where it writes its
// rows and its stderr.
struct TorchRun {
  const NormBenchOptions& opt;
  const TorchOptions& torch;
  std::string script, threads, out, err;
  int64_t footprint = 0, resident_below = 0;
  bool device = false;

  std::vector<std::string> argv(const std::vector<NormShape>& list, bool resident) const {
    std::string shapes, dtypes;
    for (const NormShape& s : list) shapes += (shapes.empty() ? "" : ",") + s.str();
    for (const std::string& t : opt.dtypes) dtypes += (dtypes.empty() ? "" : ",") + t;
    std::vector<std::string> a = {torch.python, script, "--shapes", shapes, "--threads", threads, "--pass",
                                  opt.fwd && opt.bwd ? "both" : (opt.fwd ? "fwd" : "bwd"),
                                  "--warmup", std::to_string(opt.warmup), "--repeats", std::to_string(opt.repeats),
                                  "--min-time", fmt::format("{}", opt.min_time),
                                  "--footprint-bytes", std::to_string(footprint),
                                  "--cache-resident-below", std::to_string(resident_below),
                                  "--ln-eps", fmt::format("{}", opt.ln_eps), "--rms-eps", fmt::format("{}", opt.rms_eps),
                                  "--seed", std::to_string(opt.seed), "--out", out};
    if (resident) a.push_back("--resident");
    a.insert(a.end(), {"--dtypes", dtypes});
    if (device) a.insert(a.end(), {"--device", opt.device});
    return a;
  }
};

TorchRun torch_run(const NormReport& report, const NormBenchOptions& opt, const TorchOptions& torch, const std::string& script) {
  TorchRun r{opt, torch, script, "", fmt::format("/tmp/normlab_torch_bench.{}.json", getpid()), "", 0, 0, opt.device != "cpu"};
  r.err = r.out + ".stderr";
  for (int t : opt.threads.empty() ? parse_threads("1,all") : opt.threads) r.threads += (r.threads.empty() ? "" : ",") + std::to_string(t);
  r.footprint = r.device ? detail::device_footprint(opt) : detail::footprint_of(opt, report.context.llc_bytes);
  r.resident_below = r.device ? detail::device_footprint(NormBenchOptions{}) : detail::cache_resident_below(report.context.llc_bytes);
  return r;
}

// A warning once: each run of the script repeats its context's warnings.
void warn_once(NormReport& report, const std::string& w) {
  if (std::find(report.warnings.begin(), report.warnings.end(), w) == report.warnings.end()) report.warnings.push_back(w);
}

// The last line of the script's stderr, for the one-line reason it failed.
std::string last_error_line(const std::string& err_file) {
  std::string text;
  try {
    text = read_file(err_file);
  } catch (const std::exception&) {
  }
  std::remove(err_file.c_str());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const auto last = text.find_last_of('\n');
  return last == std::string::npos ? text : text.substr(last + 1);
}

// One run of the script for one kind of shape (memory-bound, rotated, or resident); its rows go
// into the report. False, with why, when the script failed.
bool run_torch_script(NormReport& report, const TorchRun& run, const std::vector<NormShape>& list, bool resident,
                      std::string& why) {
  CpuUsage usage;  // whether other processes ran during PyTorch's rows too
  usage.start();
  const int rc = run_child({run.argv(list, resident), "", run.err});
  Context during;
  usage.stop(during);
  if (during.others_cpu > report.context.others_cpu || std::isnan(report.context.others_cpu))
    report.context.others_cpu = during.others_cpu;
  if (during.others_cpu > 0.05)
    warn_once(report, fmt::format("other processes used {:.0f}% of the CPUs' time while PyTorch's {}rows ran: rerun them on an "
                                  "idle machine",
                                  100 * during.others_cpu, resident ? "resident " : ""));
  const std::string err_line = last_error_line(run.err);
  if (rc != 0) {
    std::remove(run.out.c_str());
    why = fmt::format("{} exited with status {}: {}", run.script, rc, err_line);
    return false;
  }
  NormReport t = norm_report_from_json(read_file(run.out), run.out);
  std::remove(run.out.c_str());
  for (auto& [lib, version] : t.context.libraries)
    if (lib != "oneDNN") report.context.libraries[lib] = version;
  for (NormRow& r : t.rows) report.rows.push_back(std::move(r));
  for (const std::string& w : t.warnings) warn_once(report, "torch_bench.py: " + w);
  return true;
}

}  // namespace

bool add_torch_rows(NormReport& report, const NormBenchOptions& given, const TorchOptions& torch, std::string& why) {
  std::vector<std::string> left_out;  // the normlab rows' warnings say which
  const NormBenchOptions opt = fitted_to_memory(given, left_out);
  const std::string script = torch.script.empty() ? find_torch_script() : torch.script;
  why = torch_unavailable(opt, torch, script);
  if (!why.empty()) return false;
  const TorchRun run = torch_run(report, opt, torch, script);
  const bool ok = (opt.shapes.empty() || run_torch_script(report, run, opt.shapes, false, why)) &&
                  (opt.resident_shapes.empty() || run_torch_script(report, run, opt.resident_shapes, true, why));
  derive(report);
  return ok;
}

}  // namespace normlab::bench
