// `bench`: what every benchmark shares: shape and thread-list parsing, sample statistics, the
// byte counts, and the machine/build context (Google Benchmark's "context" block).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <fmt/ranges.h>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/opcases.h"
#include "normlab/cpu_backend.h"
#include "normlab/cpu_kernels.h"
#include "normlab/parse.h"
#include "normlab/system.h"
#include "normlab/stats.h"
#include "normlab/version.h"

namespace normlab {
template <>
const EnumNames& enum_names<bench::Pass>() {
  static const EnumNames t{"pass",
                           {{bench::Pass::fwd, "fwd", {}, "the forward pass"},
                            {bench::Pass::bwd, "bwd", {}, "the backward pass"},
                            {bench::Pass::addfwd, "addfwd", {}, "the fused residual add + norm forward"}}};
  return t;
}
}  // namespace normlab

namespace normlab::bench {

void check_timing(int64_t repeats, int64_t warmup, double min_time) {
  NL_USAGE(repeats >= 1 && repeats <= 1000000, "--repeats must be 1..1000000, got {}", repeats);
  NL_USAGE(warmup >= 0 && warmup <= 1000000, "--warmup must be 0..1000000, got {}", warmup);
  NL_USAGE(std::isfinite(min_time) && min_time >= 0 && min_time <= 3600, "--min-time must be 0..3600 seconds, got {}",
           min_time);
}

// ---- shapes -----------------------------------------------------------------------------

std::string NormShape::str() const { return fmt::format("{}x{}x{}", batch, seq, d); }

namespace {

// At most 2^40 elements (4 TiB of floats): beyond any machine, and far from int64 overflow in
// the byte counts; what fits in this machine's memory is checked by validate().
constexpr int64_t kMaxElements = int64_t{1} << 40;

// A positive decimal integer, digits only (no sign, no spaces, no exponent).
bool parse_positive(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  out = std::stoll(s);
  return out > 0;
}

}  // namespace

NormShape parse_shape(const std::string& text, const std::string& flag) {
  const std::array<int64_t, 3> v = parse_shape3(text, flag, "BATCHxSEQxD", kMaxElements, kMaxElements);
  return NormShape{v[0], v[1], v[2]};
}

std::vector<NormShape> parse_shapes(const std::string& list, const std::string& flag) {
  std::vector<NormShape> shapes;
  for (const std::string& item : split_list(list, flag)) shapes.push_back(parse_shape(item, flag));
  return shapes;
}

std::vector<NormShape> default_shapes() {
  return {{4, 128, 512}, {8, 256, 1024}, {16, 512, 2048}, {32, 1024, 4096}};
}

std::vector<NormShape> default_resident_shapes() { return {{1, 512, 64}, {1, 512, 128}, {1, 512, 256}}; }

std::vector<int> parse_threads(const std::string& list, const std::string& flag) {
  std::vector<int> out;
  for (const std::string& item : split_list(list, flag)) {
    int64_t n = 0;
    if (item == "all") {
      n = omp_get_num_procs();
    } else {
      NL_USAGE(parse_positive(item, n) && n <= 4096,
               "{}: '{}' is not a thread count (a positive integer or 'all')", flag, shown(item));
    }
    if (std::find(out.begin(), out.end(), static_cast<int>(n)) == out.end()) out.push_back(static_cast<int>(n));
  }
  return out;
}


// ---- statistics -----------------------------------------------------------------------------

Stats summarize(std::vector<double> v) {
  Stats s;
  s.samples = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());  // the mean summed in this order, as always
  s.min = v.front();
  s.max = v.back();
  s.median = median(v);
  s.mean = mean(v);
  s.stddev = sample_std(v);
  return s;
}

// ---- sizes --------------------------------------------------------------------------------

namespace {

// One tensor of an op case, measured on the case made at 1 and at 2 rows: the elements it has per
// row (d for an N x D array, 1 for a row statistic, 0 for a parameter) and besides the rows.
struct TensorSize {
  std::string name;
  int64_t per_row = 0, fixed = 0;
  bool stored = false;  // held in the run's 16-bit format when it has one (OpCase::stored)
};

std::vector<TensorSize> measure_tensor_sizes(const std::string& op, int64_t d) {
  auto numels = [&](int64_t rows) {
    const opcases::OpCase& c = opcases::find_case(fmt::format("{} rows={} d={}", op, rows, d));
    std::vector<std::pair<std::string, int64_t>> out;
    const opcases::Tensors inputs = c.inputs();
    for (const auto& [name, t] : inputs.items()) out.emplace_back(name, t.numel());
    for (const opcases::Output& o : c.outputs) out.emplace_back(o.name, shape_numel(o.shape));
    return std::make_pair(out, c.stored);
  };
  const auto [one, stored] = numels(1);
  const auto two = numels(2).first;
  NL_CHECK(one.size() == two.size(), "op case {}: its tensors depend on its rows", op);
  std::vector<TensorSize> sizes;
  for (size_t i = 0; i < one.size(); ++i) {
    NL_CHECK(one[i].first == two[i].first, "op case {}: its tensors depend on its rows", op);
    TensorSize t;
    t.name = one[i].first;
    t.per_row = two[i].second - one[i].second;
    t.fixed = one[i].second - t.per_row;
    t.stored = std::find(stored.begin(), stored.end(), t.name) != stored.end();
    sizes.push_back(t);
  }
  return sizes;
}

// The same, measured once per op and width (every row of a bench asks).
const std::vector<TensorSize>& tensor_sizes(const std::string& op, int64_t d) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int64_t>, std::vector<TensorSize>> measured;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = measured.find({op, d});
  if (it == measured.end()) it = measured.emplace(std::make_pair(op, d), measure_tensor_sizes(op, d)).first;
  return it->second;
}

// The op case a row of `bench norms` times: "copy", or the norm's pass ("rmsnorm_bwd").
std::string op_of(const std::string& norm, const std::string& pass) {
  if (norm == "copy" || pass == "copy") return "copy";
  const std::string op = detail::norm_op(parse_kind<NormKind>(norm), parse_kind<Pass>(pass));
  NL_CHECK(!op.empty(), "bench norms: {} has no op case for its {} pass", norm, pass);
  return op;
}

}  // namespace

int64_t norm_parameters(const std::string& norm, int64_t d) {
  int64_t n = 0;
  for (const TensorSize& t : tensor_sizes(op_of(norm, "fwd"), d))
    if (t.per_row == 0) n += t.fixed;
  return n;
}

ByteCount norm_bytes(const std::string& norm, const std::string& pass, const NormShape& s, int64_t stored_bytes) {
  ByteCount b;
  const std::string op = op_of(norm, pass);
  for (const TensorSize& t : tensor_sizes(op, s.d)) {
    // The copy's arrays and what a case stores in the format take stored_bytes; the rest float32.
    const int64_t bytes = (t.stored || op == "copy") ? stored_bytes : 4;
    const int64_t count = (t.per_row * s.rows() + t.fixed) * bytes;
    // A row of d is an N x D array (at d = 1 a statistic counts as one too), none a parameter.
    (t.per_row == s.d ? b.data : t.per_row == 0 ? b.params : b.stats) += count;
  }
  return b;
}

std::string NormRow::name() const {
  std::string s = fmt::format("{}.{}/{}/{}{}", norm, impl, pass, shape.str(), resident ? "/resident" : "");
  if (dtype != "f32") s += "/" + dtype;
  return device == "cpu" ? s + fmt::format("/threads:{}", threads) : s + "/" + device;
}

std::string StepRow::name() const {
  return fmt::format("step/{}/{}/threads:{}{}", model, norm, threads,
                     precision == Precision::fp32 ? std::string() : std::string("/") + to_string(precision));
}

// ---- context -------------------------------------------------------------------------------

const FmaPeak* Context::fma_peak(int threads) const {
  for (const FmaPeak& p : fma_peaks)
    if (p.threads == threads) return &p;
  return nullptr;
}

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "48K" / "2048K" / "32M" -> bytes
int64_t parse_cache_size(const std::string& s) {
  if (s.empty()) return 0;
  int64_t v = std::atoll(s.c_str());
  char unit = s.back();
  if (unit == 'K') v *= 1024;
  if (unit == 'M') v *= 1024 * 1024;
  if (unit == 'G') v *= int64_t{1024} * 1024 * 1024;
  return v;
}

// "0-1" / "0,2,4" / "0-3,8-11" -> number of CPUs
int count_cpu_list(const std::string& s) {
  int count = 0;
  for (const std::string& part : split_at(s, ',')) {
    if (part.empty()) continue;
    auto dash = part.find('-');
    if (dash == std::string::npos) {
      ++count;
    } else {
      count += std::atoi(part.c_str() + dash + 1) - std::atoi(part.c_str()) + 1;
    }
  }
  return count;
}

std::string iso_date() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", &tm);
  std::string s = buf;  // +0000 -> +00:00 as Google Benchmark writes it
  if (s.size() > 2) s.insert(s.size() - 2, ":");
  return s;
}

const char* proc_bind_name(omp_proc_bind_t b) {
  switch (b) {
    case omp_proc_bind_false: return "false";
    case omp_proc_bind_true: return "true";
    case omp_proc_bind_master: return "master";
    case omp_proc_bind_close: return "close";
    case omp_proc_bind_spread: return "spread";
  }
  return "unknown";
}

}  // namespace

namespace {

// Ticks since boot: busy (user, nice, system, irq, softirq), all, steal; and this process's.
struct CpuTicks {
  double busy = 0, total = 0, steal = 0, self = 0;
};
CpuTicks read_ticks() {
  CpuTicks t;
  {
    std::ifstream in("/proc/stat");
    std::string cpu;
    double v[10] = {0};
    in >> cpu;
    for (double& x : v) in >> x;
    // user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6];
    t.steal = v[7];
    t.total = t.busy + v[3] + v[4] + v[7];
  }
  {
    std::ifstream in("/proc/self/stat");
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command name (which may hold spaces) start after the last ')'.
    std::istringstream rest(content.substr(content.rfind(')') + 2));
    std::string field;
    // utime, stime (fields 14, 15) and cutime, cstime (16, 17: children waited for, such as
    // scripts/torch_bench.py): all of it is this benchmark's own work.
    double own = 0;
    for (int i = 3; i <= 17 && rest >> field; ++i)
      if (i >= 14) own += std::atof(field.c_str());
    t.self = own;
  }
  return t;
}

}  // namespace

void CpuUsage::start() {
  const CpuTicks t = read_ticks();
  busy_ = t.busy;
  total_ = t.total;
  steal_ = t.steal;
  self_ = t.self;
}

void CpuUsage::stop(Context& ctx) const {
  const CpuTicks t = read_ticks();
  const double total = t.total - total_;
  if (total <= 0) return;
  ctx.others_cpu = std::max(0.0, (t.busy - busy_) - (t.self - self_)) / total;
  ctx.steal = (t.steal - steal_) / total;
}

std::vector<std::string> context_warnings(const Context& c) {
  std::vector<std::string> w;
  if (!c.threads_pinned)
    w.push_back(
        "threads are not pinned (OMP_PROC_BIND=false): multi-threaded timings may move between cores; "
        "run with OMP_PROC_BIND=close OMP_PLACES=cores");
  if (c.cpus_online > 0 && c.num_cpus < c.cpus_online)
    w.push_back(fmt::format(
        "this process may run on only {} of the {} online CPUs (its affinity mask, e.g. inherited from a pinned "
        "parent process): 'all' threads means {}; run it from an unpinned shell (taskset -p $$)",
        c.num_cpus, c.cpus_online, c.num_cpus));
  double far = 0;
  for (double ns : c.thread_round_trip_ns)
    if (ns > kFarThreadsNs) far = std::max(far, ns);
  if (far > 0)
    w.push_back(fmt::format(
        "threads 0 and 1 exchanged a cache line in {:.0f} ns (round trip) at some point of the run, above {:.0f}: their "
        "cores were far apart (under a hypervisor, the host moves vCPUs), and multi-threaded figures of that stretch are "
        "slower than usual; rerun, or compare with a run whose round trip is short",
        far, kFarThreadsNs));
  if (c.others_cpu > 0.05 || c.steal > 0.05)
    w.push_back(fmt::format(
        "other processes used {:.0f}% of the CPUs' time during the run (the hypervisor stole {:.0f}%): these are not "
        "figures of an idle machine; rerun when it is idle",
        100 * c.others_cpu, 100 * c.steal));
  // The load average counts this process's own recent past; the CPU time others used during
  // the run is the better measure, so the load average only speaks when that is missing.
  if (!std::isfinite(c.others_cpu) && !c.load_avg.empty() && c.load_avg[0] > 0.5)
    w.push_back(fmt::format(
        "load average {:.2f} on {} CPUs when the run started: other processes share the cores and the memory "
        "bandwidth; rerun on an idle machine for reference figures",
        c.load_avg[0], c.num_cpus));
  return w;
}

void record_kernel_choices(Context& c) {
  c.tune_mode = cpu::to_string(cpu::tune_mode());
  c.tune_cache = cpu::tune_cache_path();
  c.kernel_choices.clear();
  for (const cpu::NormChoice& ch : cpu::norm_choices_made()) {
    KernelChoiceRecord k{ch.shape.key(), ch.own.name(), ch.best.name(), ch.source, ch.timed_rows, {}};
    for (const cpu::NormCandidateTime& t : ch.times) k.seconds.emplace_back(t.variant, t.seconds);
    c.kernel_choices.push_back(std::move(k));
  }
}

Context collect_context() {
  Context c;
  c.date = iso_date();
  c.host_name = host_name();
  c.cpu_model = cpu_model();
  c.cpu_family = cpu_info().family;
  c.cpu_model_number = cpu_info().model;
  c.cpu_isa = fmt::format("{}", fmt::join(cpu_info().isa, " "));  // as the run results' versions.cpu_isa
  c.num_cpus = omp_get_num_procs();
  c.cpus_online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  c.omp_wait_policy = wait ? wait : "default";
  c.executable = self_exe();
  if (c.executable.empty()) c.executable = "normlab";
  {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("cpu MHz", 0) == 0) {
        auto pos = line.find(':');
        if (pos != std::string::npos) c.mhz_per_cpu = std::atof(line.c_str() + pos + 1);
        break;
      }
    }
  }
  for (int i = 0; i < 8; ++i) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
    const std::string level = read_first_line(dir + "level");
    if (level.empty()) break;
    CacheInfo ci;
    ci.level = std::atoi(level.c_str());
    ci.type = read_first_line(dir + "type");
    ci.size = parse_cache_size(read_first_line(dir + "size"));
    ci.num_sharing = count_cpu_list(read_first_line(dir + "shared_cpu_list"));
    c.caches.push_back(ci);
    c.llc_bytes = std::max(c.llc_bytes, ci.size);
  }
  {
    std::ifstream in("/proc/loadavg");
    double a = 0, b = 0, d = 0;
    if (in >> a >> b >> d) c.load_avg = {a, b, d};
  }
  const BuildInfo& bi = build_info();
  c.build_type = bi.build_type;
  c.normlab_version = bi.normlab_version;
  c.git_commit = bi.git_commit;
  c.source_hash = bi.source_hash;
  c.compiler = bi.compiler;
  c.libraries["oneDNN"] = onednn_version();
  const omp_proc_bind_t bind = omp_get_proc_bind();
  c.omp_proc_bind = proc_bind_name(bind);
  c.threads_pinned = bind != omp_proc_bind_false;
  return c;
}

namespace detail {

RunFrame::RunFrame(Context& context, const std::vector<int>& threads)
    : multi_(std::any_of(threads.begin(), threads.end(), [](int t) { return t > 1; })) {
  usage_.start();
  if (multi_) context.thread_round_trip_ns.push_back(measure_thread_round_trip_ns());
}

void RunFrame::finish_context(Context& context) {
  thread_count_.restore();
  if (multi_) context.thread_round_trip_ns.push_back(measure_thread_round_trip_ns());
  usage_.stop(context);
  record_kernel_choices(context);
}

std::string noisy_rows_warning(const std::vector<std::string>& noisy, const char* min_time) {
  if (noisy.empty()) return "";
  std::string list;
  for (size_t i = 0; i < noisy.size() && i < 4; ++i) list += (i ? ", " : "") + noisy[i];
  if (noisy.size() > 4) list += fmt::format(" and {} more", noisy.size() - 4);
  return fmt::format("coefficient of variation above 10% for {}: the machine is noisy; rerun when idle, or with "
                     "--min-time {}",
                     list, min_time);
}

}  // namespace detail

}  // namespace normlab::bench
