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

bool add_torch_rows(NormReport& report, const NormBenchOptions& opt, const TorchOptions& torch, std::string& why) {
  const std::string script = torch.script.empty() ? find_torch_script() : torch.script;
  if (script.empty() || access(script.c_str(), R_OK) != 0) {
    why = "scripts/torch_bench.py not found (pass --torch-script PATH)";
    return false;
  }
  if (run_child({{torch.python, "-c", "import torch"}, "", ""}) != 0) {
    why = fmt::format("{} cannot import torch (pip install torch, or --python PATH)", torch.python);
    return false;
  }
  if (opt.device == "cuda-sim") {
    why = "PyTorch has no cuda-sim: its CUDA rows need --device cuda";
    return false;
  }
  // The script has LayerNorm and RMSNorm forward and backward; no add+norm.
  if (!opt.fwd && !opt.bwd) {
    why = "PyTorch has no fused add+norm rows (--pass addfwd): run with fwd or bwd for its rows";
    return false;
  }
  std::string threads;
  std::vector<int> ts = opt.threads.empty() ? parse_threads("1,all") : opt.threads;
  for (int t : ts) threads += (threads.empty() ? "" : ",") + std::to_string(t);
  const std::string tmp = fmt::format("/tmp/normlab_torch_bench.{}.json", getpid());
  const std::string err = tmp + ".stderr";
  const bool device = opt.device != "cpu";
  const int64_t footprint = device ? detail::device_footprint(opt) : detail::footprint_of(opt, report.context.llc_bytes);
  const int64_t resident_below = device ? detail::device_footprint(NormBenchOptions{})
                                        : detail::cache_resident_below(report.context.llc_bytes);

  // Each run of the script repeats its context's warnings: said once.
  auto warn = [&](const std::string& w) {
    if (std::find(report.warnings.begin(), report.warnings.end(), w) == report.warnings.end())
      report.warnings.push_back(w);
  };
  // One run of the script per kind of shape: memory-bound (rotated) and resident.
  auto run_script = [&](const std::vector<NormShape>& list, bool resident) {
    std::string shapes;
    for (const NormShape& s : list) shapes += (shapes.empty() ? "" : ",") + s.str();
    std::vector<std::string> argv = {torch.python,
                                     script,
                                     "--shapes",
                                     shapes,
                                     "--threads",
                                     threads,
                                     "--pass",
                                     opt.fwd && opt.bwd ? "both" : (opt.fwd ? "fwd" : "bwd"),
                                     "--warmup",
                                     std::to_string(opt.warmup),
                                     "--repeats",
                                     std::to_string(opt.repeats),
                                     "--min-time",
                                     fmt::format("{}", opt.min_time),
                                     "--footprint-bytes",
                                     std::to_string(footprint),
                                     "--cache-resident-below",
                                     std::to_string(resident_below),
                                     "--ln-eps",
                                     fmt::format("{}", opt.ln_eps),
                                     "--rms-eps",
                                     fmt::format("{}", opt.rms_eps),
                                     "--seed",
                                     std::to_string(opt.seed),
                                     "--out",
                                     tmp};
    if (resident) argv.push_back("--resident");
    std::string dtypes;
    for (const std::string& t : opt.dtypes) dtypes += (dtypes.empty() ? "" : ",") + t;
    argv.insert(argv.end(), {"--dtypes", dtypes});
    if (device) argv.insert(argv.end(), {"--device", opt.device});
    CpuUsage usage;  // whether other processes ran during PyTorch's rows too
    usage.start();
    const int rc = run_child({argv, "", err});
    Context during;
    usage.stop(during);
    if (during.others_cpu > report.context.others_cpu || std::isnan(report.context.others_cpu))
      report.context.others_cpu = during.others_cpu;
    if (during.others_cpu > 0.05)
      warn(fmt::format("other processes used {:.0f}% of the CPUs' time while PyTorch's {}rows ran: rerun them on an "
                       "idle machine",
                       100 * during.others_cpu, resident ? "resident " : ""));
    std::string err_text;
    try {
      err_text = read_file(err);
    } catch (const std::exception&) {
    }
    std::remove(err.c_str());
    if (rc != 0) {
      std::remove(tmp.c_str());
      while (!err_text.empty() && err_text.back() == '\n') err_text.pop_back();
      const auto last = err_text.find_last_of('\n');
      why = fmt::format("{} exited with status {}: {}", script, rc,
                        last == std::string::npos ? err_text : err_text.substr(last + 1));
      return false;
    }
    NormReport t = norm_report_from_json(read_file(tmp), tmp);
    std::remove(tmp.c_str());
    for (auto& [lib, version] : t.context.libraries)
      if (lib != "oneDNN") report.context.libraries[lib] = version;
    for (NormRow& r : t.rows) report.rows.push_back(std::move(r));
    for (const std::string& w : t.warnings) warn("torch_bench.py: " + w);
    return true;
  };
  const bool ok = (opt.shapes.empty() || run_script(opt.shapes, false)) &&
                  (opt.resident_shapes.empty() || run_script(opt.resident_shapes, true));
  derive(report);
  return ok;
}

}  // namespace normlab::bench
