// `bench ops`: the perf mode of the op cases (normlab/opcases.h). Any case, on any backend, on
// tensors resident on that backend's device, through the Backend interface; each case checked by
// the test mode's check_case before it is timed.
//
//   normlab bench ops rmsnorm_fwd layernorm_fwd              every case of two ops, cpu, 1 thread
//   normlab bench ops 'rmsnorm_bwd rows=64 d=512 eps=1e-06 seed=907' --device cuda-sim
#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/cuda.h"
#include "normlab/error.h"
#include "normlab/opcases.h"

namespace normlab::bench {

std::string OpRow::name() const { return fmt::format("{} backend={} threads={}", line, backend, threads); }

namespace {

using opcases::OpCase;

// A sample is a batch of calls of about this long: a clock read and, on a device, a download
// end each sample, so that the batch makes them a small share of it.
constexpr double kSampleSeconds = 200e-6;

// Warm-up, a batch size from one call, then samples until opt.repeats and opt.min_time; the
// rotation's sets made first.
void time_row(OpRow& row, const OpCase& c, Backend& b, const OpsOptions& opt) {
  detail::CaseSets t(c, b, detail::CaseSets::count_for(c, opt.footprint));
  row.sets = t.size();
  int64_t next = 0;
  for (int64_t i = 0; i < opt.warmup; ++i) t.call(b, next++);
  const double one = std::max(t.time_calls(b, next++, 1), 1e-9);
  row.calls_per_sample = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kSampleSeconds / one)), 1, 1000000);
  std::vector<double> samples;
  double total = 0;
  while (static_cast<int64_t>(samples.size()) < opt.repeats || total < opt.min_time) {
    const double s = t.time_calls(b, next, row.calls_per_sample);
    next += row.calls_per_sample;
    total += s;
    samples.push_back(s / static_cast<double>(row.calls_per_sample));
  }
  row.time = summarize(samples);
  row.gb_per_s = static_cast<double>(row.bytes) / row.time.median / 1e9;
  row.gflop_per_s = row.flops / row.time.median / 1e9;
}

OpRow run_case(const OpCase& c, Backend& b, int threads, const OpsOptions& opt) {
  OpRow row;
  row.op = c.op;
  row.line = c.line();
  row.backend = b.name();
  row.threads = threads;
  row.bytes = opcases::case_bytes(c);
  row.flops = c.flops;
  const opcases::CaseCheck check = opcases::check_case(c, b);
  if (!check.pass) {
    row.status = "rejected";
    row.verify = row.line + check.report;
    if (opt.log) opt.log("REJECTED " + row.verify);
    return row;
  }
  row.verify = detail::verified_summary(check);
  time_row(row, c, b, opt);
  if (opt.log) opt.log(fmt::format("{}: {:.3g} us ({})", row.name(), row.time.median * 1e6, row.verify));
  return row;
}

}  // namespace

void validate(const OpsOptions& opt) {
  check_timing(opt.repeats, opt.warmup, opt.min_time);
  NL_USAGE(opt.footprint >= 0, "--footprint-mib must be >= 0 (0: resident), got {}", opt.footprint >> 20);
}

OpsReport run_ops_bench(const OpsOptions& opt) {
  validate(opt);
  const std::vector<const OpCase*> cases = opcases::select_cases(opt.cases);
  Backend& b = backend(opt.backend);
  const bool on_device = b.device() != Device::cpu;
  OpsReport report;
  report.context = collect_context();
  if (on_device)
    report.context.device = opt.backend + ": " + (b.device() == Device::cuda_sim ? cuda_sim_summary() : cuda_summary());
  CpuUsage usage;
  usage.start();
  ThreadCountScope thread_count;
  // A device's kernels do not depend on the host's thread count: one row per case there.
  const std::vector<int> threads = on_device ? std::vector<int>{1} : opt.threads;
  for (const int n : threads) {
    thread_count.set(n);
    for (const OpCase* c : cases) report.rows.push_back(run_case(*c, b, n, opt));
  }
  thread_count.restore();
  usage.stop(report.context);
  report.warnings = context_warnings(report.context);
  std::vector<std::string> noisy;
  for (const OpRow& r : report.rows)
    if (r.status == "ok" && r.time.cv() > 0.1) noisy.push_back(r.name());
  if (const std::string w = detail::noisy_rows_warning(noisy, "1"); !w.empty()) report.warnings.push_back(w);
  return report;
}

std::vector<NamedStats> timed_entries(const OpsReport& r) {
  std::vector<NamedStats> out;
  for (const OpRow& row : r.rows)
    if (row.status == "ok") out.push_back({row.name(), row.time});
  return out;
}

}  // namespace normlab::bench
