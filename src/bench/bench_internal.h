// `bench`: helpers shared by the files of src/bench (not part of the public header).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/opcases.h"

namespace normlab::bench {

// bench_json.cpp: the JSON documents (render(..., OutputFormat::json) returns these).
std::string norm_report_json(const NormReport& r);
std::string step_report_json(const StepReport& r);
std::string ops_report_json(const OpsReport& r);
std::string compare_json(const std::vector<CompareRow>& rows);
}  // namespace normlab::bench

namespace normlab::bench::detail {

// copy_kernels.cpp: the bandwidth baselines; n floats, split over the OpenMP threads.
void copy_loop(float* dst, const float* src, int64_t n);
void copy_memcpy(float* dst, const float* src, int64_t n);
// A norm row's own copy: the bytes of one or two inputs (their XOR) stored into each output, `bytes`
// of each, split over the OpenMP threads from where the norm kernels split (16K elements);
// streaming: non-temporal stores, as a kernel with streaming stores makes them.
struct OwnCopyArrays {
  void* outs[2] = {nullptr, nullptr};
  const void* ins[2] = {nullptr, nullptr};
  int n_out = 0, n_in = 0;
  int64_t bytes = 0;     // of each array
  int64_t elements = 0;  // of each array: the kernels take threads from 16K
  bool streaming = false;
};
void own_copy(const OwnCopyArrays& a);
// s = alpha*a + b: the add of the unfused add+norm baseline.
void add_scaled(float* s, const float* a, const float* b, float alpha, int64_t n);

// step_parts.cpp: `steps` calls of `step` under a KernelClock; sets r's clocked_step, its parts'
// seconds and its kernels.
void measure_step_parts(const std::function<void()>& step, int64_t steps, StepRow& r);

// ---- bench_common.cpp: the start and the end every cpu bench run has -------------------------

// Started before the first row: the thread count to restore, the threads' cache-line round trip
// when any row runs on several threads, the CPU time of other processes from here on.
class RunFrame {
 public:
  RunFrame(Context& context, const std::vector<int>& threads);
  // After the last row: the thread count restored, the round trip measured again, the other
  // processes' share recorded, the kernel choices recorded, the report's figures derived and its
  // warnings those of the context (each bench adds its own after).
  template <class Report>
  void finish(Report& report) {
    finish_context(report.context);
    derive(report);
    report.warnings = context_warnings(report.context);
  }

 private:
  void finish_context(Context& context);
  ThreadCountScope thread_count_;
  bool multi_;
  CpuUsage usage_;
};

// The warning for rows whose timings vary (coefficient of variation above 10%): "" when none do;
// the first four named, with how many more. min_time: the --min-time that steadies them.
std::string noisy_rows_warning(const std::vector<std::string>& noisy, const char* min_time);

// Working sets below this are labelled cache-resident: max(1 GiB, 4 x the last-level cache).
int64_t cache_resident_below(int64_t llc_bytes);

// ---- norm16_bench.cpp: the cpu's 16-bit storage rows (--precision bf16, fp16) -----------------

// "f32", "bf16", "fp16" as the format (an unknown name is a bug: validate() checks them).
Precision storage_of(const std::string& dtype);
// LayerNorm's or RMSNorm's 16-bit kernels (bench_kernels.h's *_16) on their op cases stored in p.
NormImpl norm16_impl(NormKind norm, Precision p);

// One timed case: a row of the report and the call it times on buffer set k. A sample is
// `batch` calls in a row timed by the host's clock (1 for memory-bound cases), or
// with timed_call a batch of calls timed to their completion on a device: it returns the seconds
// per call.
class CaseSets;
struct Case {
  NormRow row;
  std::shared_ptr<CaseSets> sets;  // the tensors it runs on (none: rejected, never timed)
  std::function<void(int64_t k)> call;
  std::function<double(int64_t k)> timed_call;
  int64_t batch = 1;
  std::vector<double> samples;
  double timed = 0;
  bool done = false;
};
// Warm-up calls (opt.warmup per case), then the verified cases in turn, one sample each, each
// call on the next of `sets` buffer sets, until every case has opt.repeats samples and
// opt.min_time seconds: drift then hits all cases alike. Resident: samples are batches of calls.
// Each case's row, with its time, is appended to report.rows.
void time_cases(std::vector<Case>& cases, int64_t sets, bool resident, const NormBenchOptions& opt,
                NormReport& report);
// The warnings about the rows of a run (short rotations, noisy rows, rejected implementations).
void add_row_warnings(NormReport& report, int64_t resident_below);

// Where a case runs: threads and kind on the cpu, or the device and its storage.
struct RowPlace {
  int threads = 1;
  bool resident = false;
  std::string device = "cpu";
  std::string dtype = "f32";
};
// A case's row before it runs: what, where, the bytes from the formula, the working set of
// `sets` buffer sets and whether it is below `resident_below` (may be cache speed).
NormRow case_row(const std::string& norm, const std::string& impl, const std::string& provider, const std::string& pass,
                 const NormShape& shape, const RowPlace& place, int64_t sets, int64_t resident_below);
// Bytes all the buffer sets a case cycles through add up to.
int64_t working_set(const NormRow& r, int64_t sets);
// "512 MiB"
std::string mib(int64_t bytes);
// Buffer sets of shape s that make `footprint` bytes (x + y of a forward per set), at most
// kMaxSets: each set is a handful of tensors per row, and a shape too small to fill the footprint
// with that many (every default memory-bound shape fills it with fewer) rotates through less; its
// rows then say they may run at cache speed.
constexpr int64_t kMaxSets = 1024;
int64_t sets_for(const NormShape& s, int64_t footprint, int64_t stored_bytes = 4);
// Bytes each memory-bound case rotates through: opt.footprint, or max(1 GiB, 4 x LLC).
int64_t footprint_of(const NormBenchOptions& opt, int64_t llc);
// Bytes a row's check takes on top of the group's sets while it runs: the case's float64 copies
// of its inputs and outputs and the reference's outputs, 16 arrays of N x D doubles (measured: a
// whole 8x1024x4096 run with one buffer set peaked 15.4 arrays above its set).
inline int64_t check_bytes(const NormShape& s) { return 16 * s.numel() * 8; }

// ---- case_sets.cpp: op cases as the bench times them --------------------------------------

// The buffer sets of several op cases that run side by side (a bench norms group), their tensors
// shared where they can be: an input by its name, shape, dtype and values (the norms' cases draw x
// and dy alike from the seed), an output by its name, shape and dtype (each call writes its own
// outputs before anything reads them). Set 0's tensors come from the first case that has them,
// the others are copies.
class SharedSets {
 public:
  SharedSets(Backend& b, int64_t sets) : b_(b), sets_(sets) {}
  int64_t size() const { return sets_; }
  // Every set's tensor (one per set) for input `name` whose set-0 value (on b's device) is `value`.
  const std::vector<Tensor>& input(const std::string& name, const Tensor& value);
  const std::vector<Tensor>& output(const std::string& name, const Shape& shape, DType dtype);

 private:
  Backend& b_;
  int64_t sets_;
  std::map<std::string, std::vector<Tensor>> tensors_;  // key: what is shared, then one per set
};

// An op case's tensors on b's device (the float32 inputs it draws, in `storage` for the ones it
// stores in a 16-bit format, and its outputs), and copies of them: `sets` in all (or those of
// `shared`), call k on set k modulo their number, so that a rotation through more memory than the
// caches hold gives memory-bound figures.
class CaseSets {
 public:
  CaseSets(const opcases::OpCase& c, Backend& b, int64_t sets, Precision storage = Precision::fp32,
           SharedSets* shared = nullptr);
  // Sets of c that add up to `footprint` bytes (1 for 0: resident).
  static int64_t count_for(const opcases::OpCase& c, int64_t footprint);
  int64_t size() const { return static_cast<int64_t>(sets_.size()); }
  opcases::Tensors& at(int64_t k) { return sets_[static_cast<size_t>(k % size())]; }
  void call(Backend& b, int64_t k);
  // Waits for a device's queue: one element of set k's first output downloaded (nothing on the cpu).
  void drain(Backend& b, int64_t k);
  // Seconds of `calls` calls on sets first, first+1, ..., to their completion (drained).
  double time_calls(Backend& b, int64_t first, int64_t calls);

 private:
  const opcases::OpCase& case_;
  std::vector<opcases::Tensors> sets_;
};

// "max |diff| 3e-07 in dx": a passing check's largest difference from the reference and where.
std::string verified_summary(const opcases::CaseCheck& check);

// The op case a norm's pass calls on a backend ("rmsnorm_bwd", "add_layernorm_fwd"), one that
// can be made at any rows x d; "" when the norm has none for that pass.
std::string norm_op(NormKind norm, Pass p);

// A bench norms row: case c checked by check_case at `storage` (a failure is the row's report,
// status "rejected", never timed), then called on `sets` sets of its tensors on b (a device's
// timed in batches drained at the end, as bench ops does). The call is the backend's (c.call), or
// `fn` on the tensors (an implementation of the cpu's own: b is then the cpu's backend).
Case checked_case(Backend& b, const opcases::OpCase& c, Precision storage, SharedSets& sets, NormRow row,
                  const NormFn& fn = nullptr);

// ---- device_norm_bench.cpp -----------------------------------------------------------------
// run_norm_bench for opt.device "cuda" or "cuda-sim".
NormReport run_device_norm_bench(const NormBenchOptions& opt, const NormRegistry& registry);
// Bytes each case on a device rotates through: opt.footprint, or 1 GiB (> 16 x the L2 of an
// H100/H200); rows below it are marked as possibly cache-resident.
int64_t device_footprint(const NormBenchOptions& opt);

}  // namespace normlab::bench::detail
