// `bench norms`: what the cpu and the device runs share after the check: the rows of the cases,
// the interleaved timing loop, the warnings about the rows, and the options' validation.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/system.h"

namespace normlab::bench {

using Clock = std::chrono::steady_clock;

namespace detail {

int64_t cache_resident_below(int64_t llc_bytes) {
  return std::max<int64_t>(int64_t{1} << 30, 4 * llc_bytes);
}

}  // namespace detail

namespace detail {

int64_t working_set(const NormRow& r, int64_t sets) {
  // Everything with N rows that one call touches, times the sets it rotates over.
  return (r.bytes.data + r.bytes.stats) * sets;
}

std::string mib(int64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }

NormRow case_row(const std::string& norm, const std::string& impl, const std::string& provider, const std::string& pass,
                 const NormShape& shape, const RowPlace& place, int64_t sets, int64_t resident_below) {
  NormRow r;
  r.norm = norm;
  r.impl = impl;
  r.provider = provider;
  r.pass = pass;
  r.shape = shape;
  r.threads = place.threads;
  r.resident = place.resident;
  r.device = place.device;
  r.dtype = place.dtype;
  r.bytes = norm_bytes(norm, pass, shape, storage_of(place.dtype) == Precision::fp32 ? 4 : 2);
  r.parameters = norm_parameters(norm, shape.d);
  r.working_set_bytes = working_set(r, sets);
  r.cache_resident = r.working_set_bytes < resident_below;
  return r;
}

int64_t sets_for(const NormShape& s, int64_t footprint, int64_t stored_bytes) {
  const int64_t per_set = 2 * s.numel() * stored_bytes;  // x + y of a forward: the smallest case footprint
  return std::clamp<int64_t>((footprint + per_set - 1) / per_set, 1, kMaxSets);
}

int64_t footprint_of(const NormBenchOptions& opt, int64_t llc) {
  return opt.footprint > 0 ? opt.footprint : detail::cache_resident_below(llc);
}

}  // namespace detail

namespace {

using detail::Case;
using detail::mib;
using detail::sets_for;
using detail::footprint_of;
using detail::working_set;

// A resident call takes a few microseconds: one sample is a batch of calls lasting about this
// long, so that the clock's resolution and cost (tens of nanoseconds) stay far below 1% of it,
// while a sample remains short enough that few are hit by an interrupt (the median drops those).
constexpr double kResidentSample = 200e-6;
constexpr int64_t kMaxBatch = 100000;

// Calls per sample for a resident case: from the fastest of three single calls (after warm-up).
int64_t batch_for(const Case& c) {
  double fastest = INFINITY;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    c.call(0);
    fastest = std::min(fastest, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (!(fastest > 0)) return kMaxBatch;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kResidentSample / fastest)), 1, kMaxBatch);
}

}  // namespace

namespace detail {

void time_cases(std::vector<Case>& cases, int64_t sets, bool resident, const NormBenchOptions& opt,
                NormReport& report) {
  // Warm-up, then the cases in turn, one sample each, each call on the next buffer set, until
  // every case has its repeats and its min-time: drift (other tenants, clocks) then hits all
  // cases alike, and their ratios are measured side by side.
  int64_t next = 0;
  auto next_set = [&] { return next++ % sets; };
  for (int64_t w = 0; w < opt.warmup; ++w)
    for (Case& c : cases)
      if (c.row.status == "ok") c.call(next_set());
  if (resident)
    for (Case& c : cases)
      if (c.row.status == "ok" && !c.timed_call) c.batch = batch_for(c);
  constexpr int64_t kMaxSamples = 1000000;
  bool running = true;
  while (running) {
    running = false;
    for (Case& c : cases) {
      if (c.row.status != "ok" || c.done) continue;
      const int64_t k = next_set();
      double s = 0;
      if (c.timed_call) {
        s = c.timed_call(k);
      } else {
        const auto t0 = Clock::now();
        for (int64_t b = 0; b < c.batch; ++b) c.call(k);
        s = std::chrono::duration<double>(Clock::now() - t0).count();
      }
      c.samples.push_back(s / static_cast<double>(c.batch));
      c.timed += s;
      const int64_t n = static_cast<int64_t>(c.samples.size());
      c.done = (n >= opt.repeats && c.timed >= opt.min_time) || n >= kMaxSamples;
      running = running || !c.done;
    }
  }
  for (Case& c : cases) {
    c.row.time = summarize(c.samples);
    c.row.calls_per_sample = c.batch;
    if (opt.log)
      opt.log(fmt::format("{}: median {:.2f} us over {} samples of {} call(s)", c.row.name(),
                          c.row.time.median * 1e6, c.row.time.samples, c.batch));
    report.rows.push_back(std::move(c.row));
  }
}

void add_row_warnings(NormReport& report, int64_t resident_below) {
  // Resident rows are in the caches on purpose; a memory-bound row there by accident is not.
  int short_rotation = 0;
  for (const NormRow& r : report.rows) short_rotation += r.cache_resident && !r.resident && !is_own_copy(r) ? 1 : 0;
  if (short_rotation > 0)
    report.warnings.push_back(fmt::format(
        "{} row(s) rotate through less than {} (working set in the ws column, marked *): they may run at cache "
        "speed, not memory speed; use --footprint-mib 0 (automatic) for memory-bound figures",
        short_rotation, mib(resident_below)));
  std::vector<std::string> noisy;
  for (const NormRow& r : report.rows)
    if (r.status == "ok" && r.time.cv() > 0.10) noisy.push_back(fmt::format("{} ({:.0f}%)", r.name(), 100 * r.time.cv()));
  if (!noisy.empty()) report.warnings.push_back(noisy_rows_warning(noisy, "1"));
  int rejected = 0;
  for (const NormRow& r : report.rows) rejected += r.status == "rejected" ? 1 : 0;
  if (rejected > 0)
    report.warnings.push_back(fmt::format("{} implementation(s) failed the check against the reference and were "
                                          "not timed (status 'rejected')",
                                          rejected));
}

}  // namespace detail

namespace {

// One buffer set and one row's float64 check are all a shape cannot do without: they may take
// more than the planning budget (system.h's kMemoryBudgetShare, which the rotation's extra sets
// stay within) but not this; beyond it the run would be killed for memory half way.
constexpr double kOneSetShare = 0.8;

// Why shape s cannot run in this machine's memory, or "" when it can (or nothing is known).
std::string memory_excess(const NormShape& s, bool addfwd) {
  const int64_t avail = available_memory_bytes();
  // The rows' N x D arrays in float32: x, dy, y, dx, and the add+norm's a and s.
  const int64_t one = s.numel() * 4 * (addfwd ? 6 : 4), check = detail::check_bytes(s);
  if (avail <= 0 || static_cast<double>(one + check) <= kOneSetShare * static_cast<double>(avail)) return "";
  return fmt::format("{} needs {} for one set of buffers (x, dy, y, dx{}) and {} for a row's float64 check, more than "
                     "{:.0f}% of the {} of memory available: too large for memory",
                     s.str(), detail::mib(one), addfwd ? ", a, s" : "", detail::mib(check), 100 * kOneSetShare,
                     detail::mib(avail));
}

}  // namespace

NormBenchOptions fitted_to_memory(const NormBenchOptions& opt, std::vector<std::string>& left_out) {
  NormBenchOptions fitted = opt;
  if (!opt.default_shape_lists) return fitted;
  for (auto* list : {&fitted.shapes, &fitted.resident_shapes}) {
    std::vector<NormShape> kept;
    for (const NormShape& s : *list) {
      const std::string excess = memory_excess(s, opt.addfwd);
      if (excess.empty()) kept.push_back(s);
      else left_out.push_back("the default shape " + excess + "; left out");
    }
    *list = kept;
  }
  return fitted;
}

void validate(const NormBenchOptions& opt) {
  const bool device = opt.device != "cpu";
  NL_USAGE(opt.device == "cpu" || opt.device == "cuda" || opt.device == "cuda-sim",
           "--device must be cpu, cuda or cuda-sim, got '{}'", shown(opt.device));
  NL_USAGE(!opt.dtypes.empty(), "--precision: no format given (fp32, bf16, fp16)");
  for (const std::string& t : opt.dtypes) {
    NL_USAGE(t == "f32" || t == "bf16" || t == "fp16", "--precision: '{}' is not fp32, bf16 or fp16", shown(t));
  }
  NL_USAGE(!device || opt.resident_shapes.empty(),
           "--resident-shapes: the cpu's caches only; --device {} takes --shapes", opt.device);
  NL_USAGE(opt.fwd || opt.bwd || std::find(opt.dtypes.begin(), opt.dtypes.end(), "f32") != opt.dtypes.end(),
           "--pass addfwd: no bf16 or fp16 rows (the 16-bit kernels have no fused add+norm); add --precision fp32");
  NL_USAGE(!opt.shapes.empty() || !opt.resident_shapes.empty(), "--shapes: no shape given");
  NL_USAGE(opt.fwd || opt.bwd || opt.addfwd, "--pass: nothing to run (fwd, bwd, addfwd or all)");
  check_timing(opt.repeats, opt.warmup, opt.min_time);
  NL_USAGE(opt.footprint >= 0, "--footprint-mib must be >= 0 (0: automatic), got {}", opt.footprint >> 20);
  NL_USAGE(std::isfinite(opt.add_alpha), "the add+norm alpha must be finite, got {}", opt.add_alpha);
  for (int t : opt.threads) NL_USAGE(t >= 1, "--threads: {} is not a thread count", t);
  // The default lists are fitted to memory by the run itself (fitted_to_memory).
  for (const auto* list : {&opt.shapes, &opt.resident_shapes}) {
    for (const NormShape& s : opt.default_shape_lists ? std::vector<NormShape>{} : *list) {
      const std::string excess = memory_excess(s, opt.addfwd);
      NL_USAGE(excess.empty(), "{}: {}", list == &opt.shapes ? "--shapes" : "--resident-shapes", excess);
    }
  }
}

}  // namespace normlab::bench
