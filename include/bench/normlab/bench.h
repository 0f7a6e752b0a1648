// `normlab bench`: timing normalization kernels and whole training steps, with figures anyone
// can rerun. This header is the library half (src/bench/); src/cli/bench_command.cpp only parses flags
// into the option structs below and prints what the exporters return.
//
//   norms  every registered implementation of LayerNorm / RMSNorm (oneDNN's primitive, normlab's
//          multi-pass and fused kernels, PyTorch via scripts/torch_bench.py), forward, backward
//          and the fused residual add + norm forward, per shape and thread count. Each
//          implementation is checked against the float64 reference kernels before it is timed;
//          one that fails is reported and never timed. Two kinds of shapes:
//            memory-bound   buffers rotate through >= max(1 GiB, 4 x LLC), so that timings are
//                           of memory, not cache;
//            resident       the training step's shapes (512 rows of d = 64..256): one buffer
//                           set reused by every call, so that they run from L1/L2 as inside
//                           the step, timed in batches of calls.
//          A copy loop and memcpy are timed in the same run on the same buffers, interleaved with
//          the kernels, as the bandwidth limit (of memory, or of the cache for resident shapes).
//   step   whole training steps (forward + backward + AdamW) of the toy and GPT models with
//          LayerNorm vs RMSNorm, interleaved step by step, the time the norm kernels take at the
//          step's shapes, timed separately, and the step's matrix-product GFLOP/s against the
//          machine's float32 FMA peak, measured by an FMA loop in the same run.
//
// Results are plain structs (NormReport, StepReport), documented field by field; the
// exporters (table, markdown, csv, json) only serialize them. docs/bench.md has the JSON schema.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "normlab/kinds.h"
#include "normlab/opcases.h"
#include "normlab/precision.h"
#include "normlab/table.h"

namespace normlab::bench {

// ============================================================================
// shapes and thread lists
// ============================================================================

// batch x seq x d: the norm runs over d, on N = batch*seq rows.
struct NormShape {
  int64_t batch = 0, seq = 0, d = 0;
  int64_t rows() const { return batch * seq; }
  int64_t numel() const { return batch * seq * d; }
  std::string str() const;  // "8x256x1024"
  bool operator==(const NormShape& o) const { return batch == o.batch && seq == o.seq && d == o.d; }
};

// "8x256x1024" -> {8, 256, 1024}. UsageError (naming `flag`) for anything else: a missing or
// extra dimension, 0, a negative number, not a number, or more than 2^40 elements.
NormShape parse_shape(const std::string& text, const std::string& flag = "--shapes");
// Comma-separated shapes; empty entries are errors.
std::vector<NormShape> parse_shapes(const std::string& list, const std::string& flag = "--shapes");
// 4x128x512, 8x256x1024, 16x512x2048, 32x1024x4096: memory-bound, their buffers rotated.
std::vector<NormShape> default_shapes();
// 1x512x64, 1x512x128, 1x512x256: the norms of the training step (batch 32 x seq 16 tokens at
// d_model 64, and the larger configs' 128 and 256), timed cache-resident.
std::vector<NormShape> default_resident_shapes();
// "1,all" -> {1, cores}; "all" is the number of CPUs OpenMP sees. Duplicates removed, order kept.
// UsageError for 0, negatives, non-numbers.
std::vector<int> parse_threads(const std::string& list, const std::string& flag = "--threads");

// ============================================================================
// statistics of repeated timings
// ============================================================================

struct Stats {
  int64_t samples = 0;
  double median = NAN, min = NAN, max = NAN, mean = NAN, stddev = NAN;  // seconds (or any unit)
  double cv() const { return mean > 0 ? stddev / mean : NAN; }             // coefficient of variation
  double spread() const { return median > 0 ? (max - min) / median : NAN; }  // full range / median
};
// Sample statistics; stddev with n-1 (0 for one sample). An empty vector gives samples = 0, NaNs.
Stats summarize(std::vector<double> samples);

// ============================================================================
// the machine and the build (Google Benchmark's "context" block)
// ============================================================================

struct CacheInfo {
  std::string type;  // Data, Instruction, Unified
  int level = 0;
  int64_t size = 0;     // bytes
  int num_sharing = 0;  // CPUs sharing one instance
};

// The machine's float32 FMA throughput (src/bench/fma_peak.cpp): every thread runs a loop of
// independent FMAs on registers, enough accumulators to hide the FMA latency, at the vector width
// the build compiled for. It is to a matrix product what the copy loop is to a norm: the
// physical limit, measured on this machine in the same run.
struct FmaPeak {
  int threads = 1;
  double gflop_per_s = NAN;  // all threads together; 2 flops per lane per FMA; best of the repeats
  std::string isa;           // "avx512f", "avx2+fma" or "scalar": the vector width compiled in
  int lanes = 1;             // floats per vector
  std::pair<double, double> run_range{NAN, NAN};  // merge_runs: gflop_per_s's (min, max) over the runs
};
// Runs the loop on `threads` threads for about `seconds` (in repeats of a few milliseconds) and
// returns the best repeat: slower ones were interrupted, not a lower limit.
FmaPeak measure_fma_peak(int threads, double seconds);

// The round trip of a cache line between the cores of OpenMP threads 0 and 1, in ns (best of a
// few repeats; src/bench/thread_latency.cpp); NaN with fewer than 2 threads. What every fork,
// join and hand-over of data between the two threads pays; under a hypervisor it can change
// several-fold from minute to minute as the host moves the vCPUs.
double measure_thread_round_trip_ns();
// Above this round trip the two threads' cores are far apart (different core complexes or
// sockets): multi-threaded timings are slower than the same machine's usual ones.
constexpr double kFarThreadsNs = 200;

// One shape class's choice of norm kernel variant (cpu::NormChoice, as the bench records it).
struct KernelChoiceRecord {
  std::string shape_class;  // "layernorm_forward d=4096 mem t=1"
  std::string fused;        // the variant the fused rows ran: "pipelined-pf2+nt"
  std::string backend;      // what the backend runs (LayerNorm: "onednn" where it measured faster)
  std::string source;       // "measured", "cached", "forced (...)", "rule (...)"
  int64_t timed_rows = 0;   // rows x d of the timed problem
  std::vector<std::pair<std::string, double>> seconds;  // every candidate's median, fastest first
};

struct Context {
  std::string date;          // ISO 8601, local time with offset
  std::string host_name, executable, cpu_model;
  // Which CPU, past its marketing name ("AMD EPYC" is Zen 1 to Zen 4): /proc/cpuinfo's family and
  // model numbers and the ISA flags that pick a kernel path (cpu_info()); empty in older JSON.
  std::string cpu_family, cpu_model_number, cpu_isa;
  int num_cpus = 0;          // CPUs OpenMP sees (omp_get_num_procs): this process's affinity mask
  int cpus_online = 0;       // CPUs the system has online; more than num_cpus when the process
                             // inherited a narrower affinity mask (e.g. from a pinned parent)
  double mhz_per_cpu = 0;    // from /proc/cpuinfo (nominal under a hypervisor)
  std::vector<CacheInfo> caches;
  std::vector<double> load_avg;  // 1, 5, 15 minutes, when the run started
  std::string build_type;        // CMAKE_BUILD_TYPE of normlab
  std::string normlab_version, git_commit, compiler;
  std::string source_hash;  // BuildInfo::source_hash; empty in JSON written before it existed
  std::map<std::string, std::string> libraries;  // "oneDNN" -> "2.6.3", "PyTorch" -> ...
  std::string omp_proc_bind;   // OMP_PROC_BIND as the OpenMP runtime sees it (false = not pinned)
  std::string omp_wait_policy; // OMP_WAIT_POLICY from the environment, "default" when unset
  bool threads_pinned = false;
  int64_t llc_bytes = 0;       // the largest cache level's size
  int64_t footprint_target = 0;  // bytes the buffer rotation covers per case
  // Measured over the run (CpuUsage): the share of all CPUs' time other processes used, and
  // the share the hypervisor stole. NaN when not measured.
  double others_cpu = NAN, steal = NAN;
  // `bench step`: the float32 FMA peak at each thread count it ran (measure_fma_peak); empty
  // for `bench norms`.
  std::vector<FmaPeak> fma_peaks;
  const FmaPeak* fma_peak(int threads) const;  // nullptr when not measured at that count
  // measure_thread_round_trip_ns at the run's start and at its end (merged runs: every run's,
  // in order); empty where fewer than 2 threads ran.
  std::vector<double> thread_round_trip_ns;
  // `bench norms` before kernel variants were chosen per shape class: the fused kernels' machine-wide
  // choice of streaming stores (read from older JSON files; a run now records kernel_choices instead).
  std::string streaming_stores;
  // `bench norms` on the cpu: NORMLAB_TUNE's mode, the tuning cache, and every shape class's choice
  // of kernel variant made during the run, with the candidates' times (cpu::norm_choices_made).
  std::string tune_mode, tune_cache;
  std::vector<KernelChoiceRecord> kernel_choices;
  // `bench norms --device cuda | cuda-sim`: the device the rows ran on, as the CUDA module
  // reports it ("cuda: built (runtime 13.0), 1 device(s): NVIDIA H200 (sm_90)"); empty on cpu.
  std::string device;
};
Context collect_context();
// The cpu norm kernels' tuning mode and cache, and every shape class's choice of variant made so far
// in this process (cpu::norm_choices_made), into the context: every bench run on the cpu says
// which variants it ran.
void record_kernel_choices(Context& c);
// Warnings every benchmark gives about its context: threads not pinned, fewer CPUs usable than
// online, other processes busy during the run (from CpuUsage).
std::vector<std::string> context_warnings(const Context& c);

// What the CPUs did between start() and stop(): /proc/stat against this process's own time.
class CpuUsage {
 public:
  void start();
  // Sets ctx.others_cpu and ctx.steal.
  void stop(Context& ctx) const;

 private:
  double busy_ = 0, total_ = 0, steal_ = 0, self_ = 0;
};

// ============================================================================
// norm implementations: a registry of calls on their op cases' tensors
// ============================================================================

// addfwd: the fused residual add + norm forward of Post-LN and DeepNorm, s = alpha*a + b
// (written: the residual stream), then y = norm(s).
enum class Pass { fwd, bwd, addfwd };
}  // namespace normlab::bench
namespace normlab {
template <>
const EnumNames& enum_names<bench::Pass>();
}  // namespace normlab
namespace normlab::bench {

// One call of an implementation on its op case's tensors (normlab/opcases.h: the case of its norm
// and pass made at the row's shape, its tensors float32 on the cpu, or stored in bf16/fp16 for a
// 16-bit row), the case's scalars (eps, the add+norm's alpha) from it: the inputs read, the
// outputs present written (an absent optional gradient: not wanted).
using NormFn = std::function<void(opcases::Tensors&, const opcases::OpCase&)>;

// The variant a row ran and why (see NormImpl::variant).
struct RowVariant {
  std::string name;     // "pipelined-pf2+nt"
  std::string source;   // "measured", "cached", ...
  std::string backend;  // the variant the backend runs for the same class, when it differs ("onednn")
  bool streams = false; // its output was written with streaming stores (held to memcpy)
};

struct NormImpl {
  NormKind norm = NormKind::layernorm;  // a norm with op cases
  std::string impl;         // "fused", "multipass", "onednn", ...
  std::string provider;     // who wrote the kernel: "normlab", "oneDNN 2.6.3"
  std::string description;  // one line for --list
  bool streaming_stores = false;  // writes with non-temporal stores: held to memcpy's bandwidth
  NormFn forward, backward;       // an empty function: that pass is not implemented
  NormFn add_forward;             // Pass::addfwd
  // The variant a call of `pass` on n x d runs, writing its output (y, dx) at `written`, where the
  // kernel chooses one per shape class (the fused kernels: cpu::norm_choice); empty: the
  // implementation has one form only.
  std::function<RowVariant(Pass, int64_t n, int64_t d, const float* written)> variant;
  // Storage of the N x D arrays and the parameters: "f32", "bf16" or "fp16" (the 16-bit kernels:
  // their op case checked at that storage, check_case).
  std::string dtype = "f32";
  // The backend's kernel (the norms other than LayerNorm and RMSNorm on the cpu; every norm on a device), called through
  // the Backend interface on its op case made at the row's shape, checked by check_case: the
  // functions above stay empty.
  bool backend = false;
  std::string name() const { return std::string(to_string(norm)) + "." + impl; }
  const NormFn& fn(Pass p) const { return p == Pass::fwd ? forward : p == Pass::bwd ? backward : add_forward; }
  // Whether the implementation has pass p: its function, or for a backend one its op case.
  bool has(Pass p) const;
};

class NormRegistry {
 public:
  // Error when the name exists already or the norm has no op cases.
  void add(NormImpl impl);
  const std::vector<NormImpl>& all() const { return impls_; }
  // Selected by patterns: "all", a full name ("layernorm.fused"), an implementation ("fused":
  // every norm that has one) or a norm ("rmsnorm": all of its implementations). Registry
  // order, no duplicates. UsageError naming `flag` and the known names for a pattern that
  // matches nothing.
  std::vector<const NormImpl*> select(const std::vector<std::string>& patterns,
                                      const std::string& flag = "--impl") const;

 private:
  std::vector<NormImpl> impls_;
};

// The cpu backend's kernels (include/backend_cpu/normlab/cpu_kernels.h): layernorm.onednn,
// layernorm.multipass, layernorm.fused, rmsnorm.multipass, rmsnorm.fused (the fused ones with
// their add+norm forward); and layernorm.unfused, rmsnorm.unfused: the add+norm forward as two
// kernels, an add then the fused norm (the baseline the fused add+norm is held to).
NormRegistry builtin_norm_impls();

// Parameters of one norm over d: its forward op case's tensors that do not grow with the rows
// (LayerNorm 2d: gamma, beta; RMSNorm d; DyT 2d + 1 with its alpha).
int64_t norm_parameters(const std::string& norm, int64_t d);

// Bytes one call moves: each tensor of the row's op case read or written once, counted from the
// case made at 1 and 2 rows (what grows by d per row is an N x D array, by 1 a row statistic,
// not at all a parameter). What the case stores in a 16-bit format (OpCase::stored) takes
// `stored_bytes` (4: float32, 2: bf16), the rest (statistics, parameter gradients) float32.
// `data`: the N x D arrays (forward x read + y written = 2ND; backward x, dy read + dx written =
// 3ND; add+norm forward a, b read + s, y written = 4ND; copy 2ND); `params`: the parameters read
// and their gradients written; `stats`: the per-row statistics.
struct ByteCount {
  int64_t data = 0, params = 0, stats = 0;
};
// norm: a norm with op cases ("layernorm", "rmsnorm", ...) or "copy"; pass: "fwd" | "bwd" | "addfwd" | "copy".
ByteCount norm_bytes(const std::string& norm, const std::string& pass, const NormShape& s, int64_t stored_bytes = 4);

// ============================================================================
// results of `bench norms`
// ============================================================================

// A row's check: its op case by check_case (normlab/opcases.h), each output held to the case's
// tolerance (normlab/tolerances.h).
struct VerifyResult {
  bool pass = false;
  double max_abs_err = 0;   // over every output
  std::string worst_output; // "y", "mean", "rstd", "s", "dx", "dgamma", "dbeta"
  std::string report;       // mismatch report (first values side by side) when it fails
};

// One row of the table: one (implementation, pass, shape, threads), or a copy baseline.
struct NormRow {
  // ---- what was run
  std::string norm;      // "layernorm" | "rmsnorm" | "copy"
  std::string impl;      // "fused" | "multipass" | "onednn" | "unfused" | "torch" | copy: "loop" | "memcpy"
  std::string provider;  // "normlab", "oneDNN 2.6.3", "PyTorch 2.5.1", "libc"
  std::string pass;      // "fwd" | "bwd" | "addfwd" | "copy"
  NormShape shape;
  int threads = 1;         // cpu rows
  std::string device = "cpu";  // "cpu", or the CUDA device the row ran on: "cuda", "cuda-sim"
  std::string dtype = "f32";   // storage of the N x D arrays and the parameters: "f32", "bf16"
  // A resident case: one buffer set reused by every call (its data stays in L1/L2), compared
  // with the copy loop on the same reused buffers. Otherwise the buffers rotate (memory-bound).
  bool resident = false;
  bool streaming_stores = false;  // held to memcpy rather than the copy loop
  // The kernel variant that ran (fused rows: cpu::norm_choice) and why; empty for the others.
  std::string variant, variant_source, backend_variant;
  // ---- correctness: checked on the first buffer set before any timing
  std::string status = "ok";  // "ok" | "rejected" (wrong output: never timed)
  VerifyResult verify;
  // ---- timing: seconds per call. A sample is one call on the next buffer set, or for a
  // resident case the mean of a batch of calls (a call is a few microseconds)
  Stats time;
  int64_t calls_per_sample = 1;
  // ---- sizes
  ByteCount bytes;                // per call, from the formula
  int64_t working_set_bytes = 0;  // bytes all the buffer sets this case touches add up to
  bool cache_resident = false;    // working set < max(1 GiB, 4 x LLC): may be cache speed
  int64_t parameters = 0;         // of the norm (0 for copy rows)
  // ---- derived by derive(): NaN where it does not apply
  double gb_per_s = NAN;             // bytes.data / time.median / 1e9
  double copy_loop_gb_per_s = NAN;   // the copy loop's GB/s, same shape and threads, same run
  double memcpy_gb_per_s = NAN;      // memcpy's GB/s, same shape and threads, same run
  double pct_of_copy_loop = NAN;     // 100 * gb_per_s / copy_loop_gb_per_s
  double pct_of_memcpy = NAN;        // 100 * gb_per_s / memcpy_gb_per_s
  // A cpu norm row's own copy ("copy.own-<norm>.<impl>" rows): the bytes its kernel moves, from
  // its own buffer sets, with its kind of stores, timed beside it in the same run.
  double own_copy_gb_per_s = NAN;    // the own copy's data bytes (the row's) / its median
  double pct_of_own_copy = NAN;      // 100 * median(own copy) / median(this)
  // Above kOwnCopyLimitPct of its own copy: a kernel cannot beat a copy of its own bytes in the
  // same cache regime, so the measurement is wrong; the row's figures are not a result.
  bool measurement_error = false;
  // The copy the row is held to: its own copy where it has one ("own-copy"), else the copy loop;
  // for a streaming-store kernel the faster of the copy loop and memcpy, i.e. the lower percentage.
  std::string pct_against;           // "own-copy" | "copy-loop" | "memcpy"
  double pct_of_copy = NAN;          // the headline percentage: of the copy in pct_against
  double rms_over_ln = NAN;  // rmsnorm rows: median(layernorm, same impl) / median(this)
  double vs_onednn = NAN;    // median(layernorm.onednn, same pass) / median(this)
  // layernorm rows but oneDNN's: what training runs against oneDNN, 1 where the backend runs
  // oneDNN's primitive for the row's shape class (backend_variant), else vs_onednn
  double backend_vs_onednn = NAN;
  double vs_torch = NAN;     // median(<same norm>.torch, same pass) / median(this)
  double vs_unfused = NAN;   // addfwd rows: median(<same norm>.unfused) / median(this)
  // ---- several runs merged (merge_runs): each derived figure above is then the median over the
  // runs of the figure each run derived (ratios measured side by side in one run), its range here
  int runs = 1;
  std::map<std::string, std::pair<double, double>> run_range;  // figure -> (min, max) over runs

  // "layernorm.fused/fwd/8x256x1024/threads:1", "copy.loop/copy/8x256x1024/threads:1",
  // resident: "rmsnorm.fused/fwd/1x512x64/resident/threads:1"; on a device (no thread count),
  // "layernorm.fused/fwd/8x256x1024/cuda", "rmsnorm.fused/bwd/8x256x1024/bf16/cuda"
  std::string name() const;
};

struct NormReport {
  Context context;
  std::vector<NormRow> rows;
  std::vector<std::string> warnings;  // say what to do: "... consider --min-time 1"
  std::vector<Context> run_contexts;  // merge_runs: each merged run's context, in order; else empty
};

// The targets each fused cpu row of a (derived) report is held to: >= kCopyTargetPct of the copy
// it is compared with, and LayerNorm's not slower than oneDNN's unless the backend runs oneDNN for
// that shape class. One line that sums up, then one per row that misses; empty without such rows.
// Rendered after the table and written to the JSON as context.verdicts.
std::vector<std::string> norm_verdicts(const NormReport& report);
// Memory-bound rows below this share of their copy miss the speed target.
constexpr double kCopyTargetPct = 80;
// Above this percentage of its own copy a row is a measurement error (5%: the run-to-run spread
// of medians on these machines).
constexpr double kOwnCopyLimitPct = 105;
// "own-layernorm.fused", "own-rmsnorm.fused-bf16": the impl of row r's own copy.
std::string own_copy_impl(const NormRow& r);
// Whether r is a norm row's own copy.
bool is_own_copy(const NormRow& r);

// Fills every derived field of every row from the measured ones (idempotent). A merged row
// (runs > 1) keeps its figures: they are medians of per-run figures, not figures of its merged time.
void derive(NormReport& report);

// ============================================================================
// running `bench norms`
// ============================================================================

struct NormBenchOptions {
  // "cpu": the registry's implementations (the backend's, on their op cases, and the cpu's own
  // kernels and baselines on the pool's buffers). "cuda" (GPU 0) or "cuda-sim" (the same CUDA
  // sources simulated on the host: slow, for checking them): the device backend's kernels of the
  // norms with a selected fused implementation (LayerNorm, RMSNorm, their add+norm; the others
  // with f32 storage only), each on its op case (checked by check_case, then rotated
  // through `footprint`, 0: 1 GiB), against the device's scale kernel ("copy.loop") and its copy
  // ("copy.memcpy"). threads and resident_shapes are the cpu's only.
  std::string device = "cpu";
  // The storage of the N x D arrays and parameters, "f32", "bf16" and/or "fp16" (float32
  // statistics; 16 bits have rows only for the ops whose cases have a 16-bit form: the LayerNorm
  // and RMSNorm passes, not add+norm's or the other norms').
  std::vector<std::string> dtypes = {"f32"};
  std::vector<NormShape> shapes = default_shapes();                    // memory-bound: rotated
  std::vector<NormShape> resident_shapes = default_resident_shapes();  // one buffer set reused
  // The shapes are the defaults, not a user's: one that does not fit in this machine's memory is
  // left out with a warning, where a shape a user names is refused (validate).
  bool default_shape_lists = true;
  std::vector<int> threads;                  // empty: {1, all}
  std::vector<std::string> impls = {"all"};  // patterns for NormRegistry::select
  bool fwd = true, bwd = true, addfwd = true;
  // s = alpha*a + b of the add+norm forward: DeepNorm's (2L)^(1/4) at 20 layers rather than
  // Post-LN's 1, so that the check sees a kernel that drops alpha (the time does not depend on it).
  float add_alpha = 2.5148669f;
  bool copy_baselines = true;  // time the copy loop and memcpy (the % columns need them)
  int64_t warmup = 2;          // untimed calls per case (creates oneDNN primitives, faults pages)
  int64_t repeats = 5;         // at least this many timed calls per case
  double min_time = 0.2;       // and at least this many seconds of timed calls per case
  int64_t footprint = 0;       // bytes to rotate through per memory-bound case; 0: max(1 GiB, 4 x LLC)
  uint64_t seed = 0;
  float ln_eps = static_cast<float>(default_eps(NormKind::layernorm));
  float rms_eps = static_cast<float>(default_eps(NormKind::rmsnorm));
  std::function<void(const std::string&)> log;  // progress lines (optional)
};

// The shapes of opt that fit in this machine's memory (one buffer set and one row's float64 check
// within 80% of what is available), each one left out named in `left_out` with its reason. The
// unchanged options when default_shape_lists is false: validate refuses what does not fit.
NormBenchOptions fitted_to_memory(const NormBenchOptions& opt, std::vector<std::string>& left_out);
// Checks options (UsageError: shapes too large for memory, bad counts) before running anything.
// The timing loop's bounds, the same for every bench: repeats 1..1000000, warmup 0..1000000,
// min_time 0..3600 seconds. UsageError naming the flag.
void check_timing(int64_t repeats, int64_t warmup, double min_time);
void validate(const NormBenchOptions& opt);
// Runs every (shape, threads) group, memory-bound shapes first, then the resident ones:
// allocates and fills the buffer sets, verifies each case against the reference, warms up, then
// times the verified cases round-robin (one sample each in turn) so that the ratios between them
// are measured side by side. Calls derive(). On a device (opt.device), every (shape, dtype)
// group the same way, the registry unused.
NormReport run_norm_bench(const NormBenchOptions& opt, const NormRegistry& registry = builtin_norm_impls());

// PyTorch's rows from scripts/torch_bench.py, run as `python3 SCRIPT ...` with the same shapes,
// threads, passes (fwd, bwd: it has no add+norm) and rotation as `opt`, once for the memory-bound
// shapes and once (--resident) for the resident ones; for opt.device "cuda", once with
// --device cuda and opt.dtypes (PyTorch's CUDA kernels, timed with CUDA events).
// Returns false (and says why in `why`) when
// python3 cannot import torch, only addfwd is asked for, or a run of the script fails; the rows
// of the runs that succeeded are appended to `report` and derive() is called again.
struct TorchOptions {
  std::string python = "python3";
  std::string script;  // empty: scripts/torch_bench.py next to the source tree (see find_torch_script)
};
bool add_torch_rows(NormReport& report, const NormBenchOptions& opt, const TorchOptions& torch,
                    std::string& why);
// scripts/torch_bench.py searched in ./scripts, then ../scripts and ../../scripts next to the
// running executable; empty when not found.
std::string find_torch_script();

// ============================================================================
// `bench step`: whole training steps
// ============================================================================

struct StepOptions {
  std::vector<std::string> models = {"toy", "gpt"};
  std::vector<int> threads;  // empty: {1, all}
  int64_t layers = 20, d_model = 64, d_hidden = 128, heads = 4, vocab = 64;
  int64_t batch = 32, seq = 16;
  // The run's storage precisions (train's --precision), each its own rows: fp32 and bf16 (bf16:
  // activations rounded to bf16 as a bf16 run stores them, products native where the CPU has bf16
  // dot products).
  std::vector<Precision> precisions = {Precision::fp32};
  int64_t warmup = 3;
  int64_t repeats = 10;
  double min_time = 1.0;  // seconds of timed steps per (model, norm, threads)
  double peak_time = 0.2; // seconds of the FMA loop per thread count (measure_fma_peak)
  uint64_t seed = 0;
  std::function<void(const std::string&)> log;
};
void validate(const StepOptions& opt);

struct StepRow;
// The parts a step's time is read in, in the order printed: products (oneDNN's matrix products
// with their fused epilogues), norms, attention (or the toy's prefix mean), elementwise,
// optimizer (AdamW and the gradient norm) and other (embedding, loss, statistics, and what is in
// no kernel).
struct StepPart {
  const char* name;
  double StepRow::*seconds;
};
const std::vector<StepPart>& step_parts();
// The part of kernel (or timed region) `name`: a name of step_parts(), or "" for a name it does
// not know (counted as other).
std::string step_part_of(const std::string& name);

struct StepRow {
  std::string model;  // "toy" | "gpt"
  std::string norm;   // "layernorm" | "rmsnorm"
  int threads = 1;
  Precision precision = Precision::fp32;  // the storage precision the step ran in
  int64_t layers = 0, d_model = 0, d_hidden = 0, heads = 0, vocab = 0, batch = 0, seq = 0;
  int64_t parameters = 0;       // of the model
  int64_t norm_parameters = 0;  // of its norms
  int64_t norm_calls = 0;       // norm forwards per step (each with one backward)
  int64_t norm_rows = 0;        // N of each norm call (batch*seq), over d_model
  Stats step;                   // seconds per training step (forward + backward + AdamW)
  Stats norm_kernels;           // seconds per step in the norm kernels (fwd + bwd of every call)
  VerifyResult norm_verify;     // the norm kernels checked against the reference first
  double matmul_flops = 0;      // of the step's matrix products (step_matmul_flops)
  // Where the step's time goes: steps taken apart from the timed ones under a KernelClock, seconds
  // per step in each part (step_parts(): its kernels' exclusive time; `other` also holds the time
  // outside every kernel, the tape's and the allocator's). They add up to clocked_step.
  double clocked_step = NAN;  // seconds per step of those steps
  double products_s = NAN, norms_s = NAN, attention_s = NAN, elementwise_s = NAN, optimizer_s = NAN, other_s = NAN;
  double outside_kernels_s = NAN;  // the part of other_s in no kernel
  struct Kernel {
    std::string name, part;
    double calls = 0, seconds = 0;  // per step
  };
  std::vector<Kernel> kernels;  // every timed kernel and region, by time, largest first
  // derived (derive_step)
  double norm_share = NAN;      // norm_kernels.median / step.median
  double tokens_per_s = NAN;    // batch*seq / step.median
  double gflop_per_s = NAN;     // matmul_flops / step.median / 1e9: the products' flops over the whole step
  double fma_peak_gflop_per_s = NAN;  // the context's FMA peak at this row's thread count
  double pct_of_fma_peak = NAN;       // 100 * gflop_per_s / fma_peak_gflop_per_s
  double outside_products_share = NAN;    // 1 - products_s / clocked_step
  double products_gflop_per_s = NAN;      // the linear layers' and the head's flops (matmul_flops less
                                          // step_attention_flops) / products_s / 1e9: the products alone
  double products_pct_of_fma_peak = NAN;  // 100 * products_gflop_per_s / fma_peak_gflop_per_s
  // rmsnorm rows: LayerNorm / RMSNorm of the same model and threads
  double step_speedup = NAN;    // step.median(LN) / step.median(RMS): model level
  double op_speedup = NAN;      // norm_kernels.median(LN) / norm_kernels.median(RMS): operator level
  // what the step speed-up would be if only the norm time changed (Amdahl):
  // step(LN) / (step(LN) - norm(LN) + norm(RMS))
  double predicted_step_speedup = NAN;
  // A bf16 row: the fp32 row's step median / this row's (same model, norm and threads, this run).
  double precision_speedup = NAN;
  int runs = 1;
  std::map<std::string, std::pair<double, double>> run_range;
  std::string name() const;  // "step/toy/rmsnorm/threads:1", "step/gpt/rmsnorm/threads:2/bf16"
};

struct StepReport {
  Context context;
  std::vector<StepRow> rows;
  std::vector<std::string> warnings;
  std::vector<Context> run_contexts;  // merge_runs: each merged run's context, in order; else empty
};
// As derive(NormReport&): merged rows (runs > 1) keep their figures.
void derive(StepReport& report);
// Measures the FMA peak at each thread count (into the context), then times the steps.
StepReport run_step_bench(const StepOptions& opt);

// Floating-point operations of the matrix products of one training step of `model` ("toy" or
// "gpt"), forward and backward, counted from the sizes as the cpu backend computes them: a
// product of (M x K) by (K x N) is 2*M*N*K, and each forward product has two backward products
// of the same count (dX and dW of a linear; dQ and dK of Q K^T, dP and dV of P V). With
// M = batch*seq tokens, d = d_model, h = d_hidden, T = seq:
//   toy block  mix d x d, fc1 d x h, fc2 h x d:          3 * 2M(d^2 + 2dh)
//   gpt block  q, k, v, o d x d, fc1, fc2:               3 * 2M(4d^2 + 2dh)
//              + Q K^T and P V over the full T x T:      3 * 2 * 2 batch T^2 d
//   head       d x vocab:                                3 * 2M d vocab
// The prefix mean, norms, softmax, GELU, the loss and AdamW are not products: not counted. The
// attention products are counted over the full T x T, as a dense implementation (PyTorch's SDPA
// on the CPU, the earlier oneDNN one) computes them; the cpu backend's attention kernels compute
// the causal half only, inside the step's attention part.
double step_matmul_flops(const std::string& model, int64_t layers, int64_t d_model, int64_t d_hidden, int64_t vocab,
                         int64_t batch, int64_t seq);
// The part of step_matmul_flops that is attention's Q K^T and P V (0 for the toy model).
double step_attention_flops(const std::string& model, int64_t layers, int64_t d_model, int64_t batch, int64_t seq);

// ============================================================================
// running `bench ops`: any op case (normlab/opcases.h) on any backend
// ============================================================================

struct OpsOptions {
  std::vector<std::string> cases = {"all"};  // patterns for opcases::select_cases
  std::string backend = "cpu";               // reference, cpu, cuda or cuda-sim: a backend by name
  std::vector<int> threads = {1};            // the cpu's and reference's (OpenMP) thread counts
  int64_t warmup = 2;                        // untimed calls per case
  int64_t repeats = 5;                       // at least this many timed samples per case
  double min_time = 0.1;                     // and at least this many seconds of samples per case
  // Bytes of buffer sets each case rotates through, one set per call (memory-bound figures: more
  // than the caches hold); 0: one set, resident.
  int64_t footprint = 0;
  std::function<void(const std::string&)> log;  // progress lines (optional)
};

struct OpRow {
  std::string op, line, backend;  // line: the case's (opcases.h), its reproducer
  int threads = 1;
  std::string status = "ok";  // "ok", or "rejected": check_case failed; never timed
  std::string verify;         // "max |diff| 3e-07 in dx", or check_case's report
  int64_t calls_per_sample = 1;
  int64_t sets = 1;   // buffer sets the calls rotate through (1: resident)
  Stats time;      // seconds per call
  int64_t bytes = 0;  // one call: every input read and every output written once (float32)
  double flops = 0;
  double gb_per_s = NAN, gflop_per_s = NAN;  // bytes (flops) / median
  std::string name() const;  // "<line> backend=<b> threads=<t>": the JSON's and --compare's key
};

struct OpsReport {
  Context context;
  std::vector<OpRow> rows;
  std::vector<std::string> warnings;
};

// Checks the counts (UsageError) before anything runs; run_ops_bench checks them too.
void validate(const OpsOptions& opt);
// Each selected case on opt.backend, on tensors resident on its device: checked by check_case
// (rejected rows are reported and never timed), then warmed up and timed on the same tensors
// (cache-resident where they fit: the kernel's own speed, as ggml's perf mode measures it), or,
// with opt.footprint, on copies of them that rotate through that many bytes (memory-bound). A sample is a batch of calls of ~200 us,
// ended by a download of one output element on a device (its queue drained), reported per call.
OpsReport run_ops_bench(const OpsOptions& opt);

// ============================================================================
// exporters (in any OutputFormat, normlab/table.h), reading results back, several runs, comparisons
// ============================================================================

std::string render(const NormReport& r, OutputFormat f);
std::string render(const StepReport& r, OutputFormat f);
std::string render(const OpsReport& r, OutputFormat f);
// The RMSNorm / LayerNorm summary (ratios per shape, threads and pass), table or markdown.
std::string render_norm_summary(const NormReport& r, OutputFormat f);
// The shape classes' choices of kernel variant (Context::kernel_choices) as a table, with every
// candidate's median when every_candidate; "" when the run made none (a device run, older JSON).
std::string render_kernel_choices(const Context& c, OutputFormat f, bool every_candidate);
// `bench norms --list`: every implementation of the registry, then PyTorch's (--with-torch).
std::string render_norm_impls(const NormRegistry& registry);

// Reading a --json document back (what: the file name, for messages). UsageError when it is
// not a `bench norms` (resp. `bench step`) document.
NormReport norm_report_from_json(const std::string& text, const std::string& what);
StepReport step_report_from_json(const std::string& text, const std::string& what);
OpsReport ops_report_from_json(const std::string& text, const std::string& what);
// "norms", "step" or "ops": the kind of a bench JSON document (UsageError otherwise).
std::string bench_kind_of_json(const std::string& text, const std::string& what);

// Several runs of the same benchmark as one: per row, the median over the runs of each
// figure (time median, GB/s, %, ratios), with its range over the runs in run_range; the
// time's min/max are the extremes over all runs. A ratio is each run's own (its two rows timed
// side by side in that run), then the median of those: never a ratio of the merged medians.
// Rows missing from some runs keep the runs they are in (runs counts them). The report's run_contexts
// hold every run's context; its context's FMA peaks are the medians, with their run_range.
NormReport merge_runs(const std::vector<NormReport>& runs);
StepReport merge_runs(const std::vector<StepReport>& runs);

// One row of `--compare`: an earlier run's median against this run's, matched by name.
struct CompareRow {
  std::string name;
  Stats base, now;       // seconds
  double ratio = NAN;    // now.median / base.median (< 1: faster now)
  double noise = NAN;    // the change below which a ratio is not told apart from 1
  std::string verdict;   // "faster", "slower", "same" (within noise), "only in base", "only now"
};
struct NamedStats {
  std::string name;
  Stats time;
};
std::vector<NamedStats> timed_entries(const NormReport& r);
std::vector<NamedStats> timed_entries(const StepReport& r);
std::vector<NamedStats> timed_entries(const OpsReport& r);
// Entries of any bench JSON document (norms, step or ops).
std::vector<NamedStats> timed_entries_from_json(const std::string& text, const std::string& what);
std::vector<CompareRow> compare(const std::vector<NamedStats>& base, const std::vector<NamedStats>& now);
std::string render(const std::vector<CompareRow>& rows, OutputFormat f);

}  // namespace normlab::bench
