// `bench`: helpers shared by the files of src/bench (not part of the public header).
#pragma once
#include <cstdint>
#include <functional>
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

// DyT and Derf: one elementwise kernel (tanh / erf), no statistics, float32 rows only.
inline bool is_squash(NormKind norm) { return norm == NormKind::dyt || norm == NormKind::derf; }

// copy_kernels.cpp: the bandwidth baselines; n floats, split over the OpenMP threads.
void copy_loop(float* dst, const float* src, int64_t n);
void copy_memcpy(float* dst, const float* src, int64_t n);
// s = alpha*a + b: the add of the unfused add+norm baseline.
void add_scaled(float* s, const float* a, const float* b, float alpha, int64_t n);

// norm_pool.cpp: f(i) for i in [0, n) on all cores (setup and checks: not timed; give it rows or
// chunks, not single values: a call costs a function call).
void parallel_all(int64_t n, const std::function<void(int64_t)>& f);

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

// ---- norm_pool.cpp: the buffer sets of the cpu's own kernels and baselines in `bench norms` ---

// One set: everything a call reads or writes that has N rows. Inputs: x, dy and the saved
// statistics of the backward; outputs: out (y or dx), sum (s of the add+norm forward, which
// reads x and dy as its a and b) and the forward's statistics. Parameters (gamma, beta, dgamma,
// dbeta: d floats) are shared by all sets, as a model's are.
struct BufferSet {
  float* x = nullptr;
  float* dy = nullptr;
  float* out = nullptr;
  float* sum = nullptr;  // only in a pool made with_sum
  float* out_mean = nullptr;
  float* out_rstd = nullptr;
  float* ln_mean = nullptr;   // saved by the LayerNorm reference forward of x
  float* ln_rstd = nullptr;
  float* rms_rstd = nullptr;  // saved by the RMSNorm reference forward of x
};

// The buffer sets of one shape, in host memory, with their values: x[i,j] = off_i + scale_i * u
// (row offsets and scales vary, so that the mean matters to LayerNorm), dy uniform in [-1, 1),
// the saved statistics from the reference forwards of x.
class Pool {
 public:
  // Floats a pool of `sets` sets of shape s needs.
  static int64_t floats_needed(const NormShape& s, int64_t sets, bool with_sum);
  // The arrays are carved out of `memory` (floats_needed(s, sets) floats, reused from shape to
  // shape: the first touch of fresh memory costs more than the benchmark under a hypervisor),
  // packed one after the other at 64-byte boundaries plus one cache line, so that x, dy and out
  // do not sit at the same offset modulo 4 KiB (loads and stores that alias there stall).
  Pool(float* memory, const NormShape& s, int64_t sets, bool with_sum, uint64_t seed, float ln_eps, float rms_eps);
  // Every input (x, dy, gamma, beta) replaced by round(value), and the saved statistics
  // computed again from them: the values a narrower storage format holds (the cpu's 16-bit rows).
  void round_inputs(float (*round)(float));

  const NormShape& shape() const { return shape_; }
  int64_t size() const { return static_cast<int64_t>(sets_.size()); }
  const BufferSet& set(int64_t k) const { return sets_[static_cast<size_t>(k)]; }
  const float* gamma() const { return gamma_; }
  const float* beta() const { return beta_; }
  float* dgamma() const { return dgamma_; }
  float* dbeta() const { return dbeta_; }
  float* dalpha() const { return &dalpha_; }  // DyT's and Derf's alpha gradient
  float* dshift() const { return &dshift_; }  // Derf's shift gradient

 private:
  void fill_row(const BufferSet& b, uint64_t seed, int64_t i);
  void save_stats_row(const BufferSet& b, int64_t i);
  static int64_t padded(int64_t floats) { return (floats + 15) / 16 * 16 + 16; }

  NormShape shape_;
  float ln_eps_, rms_eps_;
  std::vector<BufferSet> sets_;
  float *gamma_ = nullptr, *beta_ = nullptr, *dgamma_ = nullptr, *dbeta_ = nullptr;
  mutable float dalpha_ = 0.0f, dshift_ = 0.0f;
};

// ---- norm16_bench.cpp: the cpu's 16-bit storage rows (--dtypes bf16, fp16) --------------------

// "f32", "bf16", "fp16" as the format (an unknown name is a bug: validate() checks them).
Precision storage_of(const std::string& dtype);

// The buffer sets of one shape stored in bf16 or fp16: x, dy, out as 2-byte encodings and the
// forward's statistics (float32) per set, the parameters shared. Its inputs are those of a
// one-set Pool rounded to the format (round_inputs), in every set; the backward reads that pool's
// saved statistics.
class Pool16 {
 public:
  Pool16(Precision p, const NormShape& shape, int64_t sets, uint64_t seed, float ln_eps, float rms_eps);
  Pool16(const Pool16&) = delete;
  Pool16& operator=(const Pool16&) = delete;
  // Bytes a pool of `sets` sets takes, the rounded float pool included.
  static int64_t bytes(const NormShape& s, int64_t sets);
  Precision format() const { return p_; }
  int64_t size() const { return static_cast<int64_t>(sets_.size()); }
  // One kernel call (fwd or bwd) on set k (modulo the sets).
  void run(NormKind norm, Pass pass, int64_t k, float eps);
  // The kernels as verify_norm checks them, on args_for(source(), 0, ...).
  NormImpl impl(NormKind norm);
  const Pool& source() const { return src_; }

 private:
  struct Set {
    uint16_t *x, *dy, *out;
    float *mean, *rstd;
  };
  Precision p_;
  int64_t n_, d_;
  std::vector<float> host_;
  Pool src_;
  std::vector<uint16_t> bits_, gamma_, beta_;
  std::vector<float> stats_, dgamma_, dbeta_;
  std::vector<Set> sets_;
};

// Bytes a pool of `sets` sets of shape s takes.
int64_t pool_bytes(const NormShape& s, int64_t sets, bool with_sum);

// norm_check.cpp: n floats of p set to NaN (nothing for nullptr), so that an output a kernel
// never writes fails its check.
void fill_nan(float* p, int64_t n);

// The arguments of one call of `norm`'s `pass` on set k of the pool.
NormArgs args_for(const Pool& pool, int64_t k, NormKind norm, Pass pass, float eps, float alpha);

// One timed case: a row of the report and the call it times on buffer set k. A sample is
// `batch` calls in a row timed by the host's clock (1 for memory-bound cases), or
// with timed_call a batch of calls timed to their completion on a device: it returns the seconds
// per call.
struct Case {
  NormRow row;
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
// Buffer sets of shape s that make `footprint` bytes (x + y of a forward per set).
int64_t sets_for(const NormShape& s, int64_t footprint, int64_t stored_bytes = 4);
// Bytes each memory-bound case rotates through: opt.footprint, or max(1 GiB, 4 x LLC).
int64_t footprint_of(const NormBenchOptions& opt, int64_t llc);

// ---- case_sets.cpp: op cases as the bench times them --------------------------------------

// An op case's tensors on b's device (the float32 inputs it draws, in `storage` for the ones it
// stores in a 16-bit format, and its outputs), and copies of them: `sets` in all, call k on set
// k modulo their number, so that a rotation through more memory than the caches hold gives
// memory-bound figures.
class CaseSets {
 public:
  CaseSets(const opcases::OpCase& c, Backend& b, int64_t sets, Precision storage = Precision::fp32);
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

// A bench norms row of the backend's kernel: case c checked by check_case at `storage` (a
// failure is the row's report, status "rejected", never timed), then its call on `sets` sets of
// its tensors on b (a device's timed in batches drained at the end, as bench ops does).
Case backend_case(Backend& b, const opcases::OpCase& c, Precision storage, int64_t sets, NormRow row);

// ---- device_norm_bench.cpp -----------------------------------------------------------------
// run_norm_bench for opt.device "cuda" or "cuda-sim".
NormReport run_device_norm_bench(const NormBenchOptions& opt, const NormRegistry& registry);
// Bytes each case on a device rotates through: opt.footprint, or 1 GiB (> 16 x the L2 of an
// H100/H200); rows below it are marked as possibly cache-resident.
int64_t device_footprint(const NormBenchOptions& opt);

}  // namespace normlab::bench::detail
