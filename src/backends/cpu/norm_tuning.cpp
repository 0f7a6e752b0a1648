// Which variant of a one-pass or fused (add + norm) kernel runs: measured on this machine, per shape class, the first
// time the class is used, and kept in a small cache per CPU model and normlab build.
//
// Why measure instead of a rule: the best variant moved with the CPU, and a proxy measurement
// chose wrong. On a Zen 4 guest, prefetching two rows ahead took the d 4096 LayerNorm forward from
// 95-105% of the copy loop to 125-150%; on a Zen 1 guest the same kernel ran at 1.3 GB/s (6% of
// memcpy), and streaming stores, chosen there because a streaming *copy* beat an ordinary one,
// made the kernel 3x slower than ordinary stores. So each candidate is the kernel
// itself, timed on the call's shape class, side by side, and the median decides.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "normlab/cpu_kernels.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/stats.h"
#include "normlab/version.h"

namespace normlab::cpu {

namespace {

using json = nlohmann::json;
using Layout = NormVariant::Layout;

// ---- caches ---------------------------------------------------------------------------------

int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (v <= 0) return 0;
  const char unit = end ? *end : '\0';
  const int64_t k = unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? int64_t{1} << 30 : 1;
  return static_cast<int64_t>(v) * k;
}

// The size of cpu0's cache of `level` (0: the largest, the last level), or 0 when unknown.
int64_t cache_bytes(int level) {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream size_in(dir + "/size"), level_in(dir + "/level"), type_in(dir + "/type");
    std::string size, type;
    int lvl = 0;
    if (!(size_in >> size)) break;
    level_in >> lvl;
    type_in >> type;
    if (type == "Instruction") continue;
    if (level == 0 || lvl == level) best = std::max(best, parse_size(size));
  }
  return best;
}

// ---- candidates and the rule ----------------------------------------------------------------

bool has_onednn_variant(NormKernel k) {
  return k == NormKernel::layernorm_forward || k == NormKernel::layernorm_backward;
}

// Prefetch distances tried for pipelined rows: none, the row after the one being summed, and
// further ahead for the CPUs whose memory latency outruns a row.
constexpr int kPrefetchChoices[] = {0, 2, 4};
constexpr int kTileChoices[] = {1024, 2048, 4096};

NormVariant tiled(int tile_floats, bool stream = false) {
  NormVariant v;
  v.layout = Layout::tiled;
  v.tile_floats = tile_floats;
  v.stream = stream;
  return v;
}
NormVariant pipelined(int prefetch, bool stream = false) {
  NormVariant v;
  v.layout = Layout::pipelined;
  v.prefetch = prefetch;
  v.stream = stream;
  return v;
}
NormVariant onednn() {
  NormVariant v;
  v.layout = Layout::onednn;
  return v;
}

// What NORMLAB_TUNE=off runs, and the tie-breaker of a measurement: the rule measured on Zen 4
// before this file existed (tiles below 256 floats a row, the pipeline from there, prefetching
// two rows ahead from 4096), ordinary stores.
NormVariant rule_variant(const NormShapeClass& c) {
  if (c.kernel == NormKernel::layernorm_backward || c.kernel == NormKernel::rmsnorm_backward)
    if (!c.dx) return tiled(2048);
  if (c.d < 256) return tiled(2048);
  return pipelined(c.d >= 4096 ? 2 : 0);
}

std::vector<NormVariant> candidates(const NormShapeClass& c) {
  std::vector<NormVariant> out;
  const bool params_only =
      (c.kernel == NormKernel::layernorm_backward || c.kernel == NormKernel::rmsnorm_backward) && !c.dx;
  // Streaming stores only pay where the output cannot stay in a cache anyway.
  std::vector<bool> stores = {false};
  if (c.fits == "mem" && !params_only) stores.push_back(true);
  for (bool nt : stores) {
    // Long rows too: a tile of one row is the plain two sweeps per row (statistics, then output),
    // the fallback where interleaving a row's loads with the previous row's stores hurts (a Zen 1
    // guest ran the pipelined d 4096 forward at 6% of memcpy; the cause is unverified there:
    // the prefetch distance and the store kind are candidates too, so whichever it was, a
    // candidate without it exists).
    for (int t : kTileChoices)
      if ((t >= c.d && c.d <= 1024) || t == 2048) out.push_back(tiled(t, nt));
    if (!params_only)
      for (int pf : kPrefetchChoices)
        if (pf == 0 || c.d >= 256) out.push_back(pipelined(pf, nt));
  }
  if (has_onednn_variant(c.kernel)) out.push_back(onednn());
  return out;
}

// ---- timing the candidates ------------------------------------------------------------------

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, AlignedFree>;

Buffer buffer(int64_t count) {
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float) + 63) / 64 * 64;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  NL_CHECK(p != nullptr, "tuning the norm kernels: no memory for {} bytes", bytes);
  return Buffer(p);
}

// Values like a residual stream's: a row mean near 0.5, spread ~1 (a fixed LCG: the same data in
// every measurement).
void fill(float* p, int64_t count, uint32_t seed, float offset, float spread) {
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < count; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = offset + spread * (float(s >> 8) * (1.0f / 16777216.0f) - 0.5f) * 3.4f;
  }
}

// The N x D arrays each kernel touches: x, y; dy, x, dx; a, b, s, y.
int64_t arrays_of(NormKernel k, bool dx) {
  switch (k) {
    case NormKernel::layernorm_forward:
    case NormKernel::rmsnorm_forward:
      return 2;
    case NormKernel::layernorm_backward:
    case NormKernel::rmsnorm_backward:
      return dx ? 3 : 2;
    default:
      return 4;
  }
}

struct Problem {
  NormKernel kernel;
  int64_t n, d;
  bool dx;
  Buffer x, y, s, b, dy, dxb, mean, rstd, gamma, beta, dgamma, dbeta;

  Problem(NormKernel k, int64_t rows, int64_t cols, bool want_dx) : kernel(k), n(rows), d(cols), dx(want_dx) {
    const int64_t nd = n * d;
    x = buffer(nd);
    y = buffer(nd);
    mean = buffer(n);
    rstd = buffer(n);
    gamma = buffer(d);
    beta = buffer(d);
    dgamma = buffer(d);
    dbeta = buffer(d);
    fill(x.get(), nd, 1, 0.5f, 1.0f);
    fill(gamma.get(), d, 2, 1.0f, 0.1f);
    fill(beta.get(), d, 3, 0.0f, 0.1f);
    std::fill(y.get(), y.get() + nd, 0.0f);  // first touch outside the timings
    if (k == NormKernel::add_layernorm_forward || k == NormKernel::add_rmsnorm_forward) {
      s = buffer(nd);
      b = buffer(nd);
      fill(b.get(), nd, 4, 0.0f, 0.5f);
      std::fill(s.get(), s.get() + nd, 0.0f);
    }
    if (k == NormKernel::layernorm_backward || k == NormKernel::rmsnorm_backward) {
      dy = buffer(nd);
      fill(dy.get(), nd, 5, 0.0f, 0.01f);
      if (dx) {
        dxb = buffer(nd);
        std::fill(dxb.get(), dxb.get() + nd, 0.0f);
      }
      // The statistics the backward reads.
      if (k == NormKernel::layernorm_backward)
        layernorm_forward_with(tiled(2048), y.get(), mean.get(), rstd.get(), x.get(), gamma.get(), beta.get(), n, d,
                               1e-5f);
      else
        rmsnorm_forward_with(tiled(2048), y.get(), rstd.get(), x.get(), gamma.get(), n, d, 1e-5f);
    }
  }

  void run(const NormVariant& v) {
    switch (kernel) {
      case NormKernel::layernorm_forward:
        return layernorm_forward_with(v, y.get(), mean.get(), rstd.get(), x.get(), gamma.get(), beta.get(), n, d,
                                      1e-5f);
      case NormKernel::rmsnorm_forward:
        return rmsnorm_forward_with(v, y.get(), rstd.get(), x.get(), gamma.get(), n, d, 1e-5f);
      case NormKernel::layernorm_backward:
        return layernorm_backward_with(v, dxb.get(), dgamma.get(), dbeta.get(), dy.get(), x.get(), gamma.get(),
                                       mean.get(), rstd.get(), n, d);
      case NormKernel::rmsnorm_backward:
        return rmsnorm_backward_with(v, dxb.get(), dgamma.get(), dy.get(), x.get(), gamma.get(), rstd.get(), n, d);
      case NormKernel::add_layernorm_forward:
        return add_layernorm_forward_with(v, s.get(), y.get(), mean.get(), rstd.get(), x.get(), b.get(), 1.0f,
                                          gamma.get(), beta.get(), n, d, 1e-5f);
      case NormKernel::add_rmsnorm_forward:
        return add_rmsnorm_forward_with(v, s.get(), y.get(), rstd.get(), x.get(), b.get(), 1.0f, gamma.get(), n, d,
                                        1e-5f);
    }
  }
};

double seconds_of(const std::function<void()>& f, int64_t reps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < reps; ++r) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(reps);
}

// Rows of the timed problem: the call's own where its arrays fit in a cache; beyond, enough rows
// for three times the last-level cache (at least 64 MiB), so that every call streams from memory
// as the real one does, without allocating a copy of a multi-GiB tensor.
int64_t timed_rows(const NormShapeClass& c, int64_t n) {
  if (c.fits != "mem") return std::max<int64_t>(n, 1);
  const int64_t bytes_per_row = arrays_of(c.kernel, c.dx) * c.d * int64_t{sizeof(float)};
  const int64_t target = std::max<int64_t>(3 * last_level_cache_size(), int64_t{64} << 20);
  return std::clamp<int64_t>(target / bytes_per_row, 1, std::max<int64_t>(n, 1));
}

// Candidates closer to the rule's (or, for `best`, to the fastest of normlab's own variants) than this are
// not worth a change: the medians of equal kernels differ by about this much run to run.
constexpr double kMargin = 0.03;

void measure(NormChoice& ch, int64_t n) {
  const NormShapeClass& c = ch.shape;
  const std::vector<NormVariant> cands = candidates(c);
  ch.timed_rows = timed_rows(c, n);
  Problem p(c.kernel, ch.timed_rows, c.d, c.dx);
  // Two calls each to warm up (page faults, oneDNN's primitive: the first call of a candidate can
  // take milliseconds), then samples of >= 0.2 ms, their calls back to back (so that a call of a
  // few microseconds is not timed alone, with the clock's and a waking thread team's costs), in
  // rounds that rotate the order, so that a noisy moment hits every candidate alike.
  std::vector<double> warm;
  for (const NormVariant& v : cands) {
    p.run(v);
    warm.push_back(seconds_of([&] { p.run(v); }, 1));
  }
  const double typical = median(warm), slowest = *std::max_element(warm.begin(), warm.end());
  const int64_t reps = std::clamp<int64_t>(static_cast<int64_t>(2e-4 / std::max(typical, 1e-9)) + 1, 1, 1000);
  // About a second at most for the class (a memory-bound class of 64+ MiB per call).
  const double per_round = slowest * double(reps) * double(cands.size());
  const int rounds = static_cast<int>(std::clamp(1.0 / std::max(per_round, 1e-9), 3.0, 11.0));
  std::vector<std::vector<double>> samples(cands.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < cands.size(); ++i) {
      const size_t k = (i + static_cast<size_t>(r)) % cands.size();
      samples[k].push_back(seconds_of([&] { p.run(cands[k]); }, reps));
    }
  const NormVariant rule = rule_variant(c);
  double rule_t = 0, best_own_t = 1e30, best_t = 1e30;
  for (size_t i = 0; i < cands.size(); ++i) {
    const double t = median(samples[i]);
    ch.times.push_back({cands[i].name(), t});
    if (cands[i] == rule) rule_t = t;
  }
  std::sort(ch.times.begin(), ch.times.end(),
            [](const NormCandidateTime& a, const NormCandidateTime& b) { return a.seconds < b.seconds; });
  for (const NormCandidateTime& t : ch.times) {
    const NormVariant v = parse_norm_variant(t.variant);
    if (v.layout != Layout::onednn && t.seconds < best_own_t) {
      best_own_t = t.seconds;
      ch.own = v;
    }
  }
  if (rule_t > 0 && rule_t <= best_own_t * (1 + kMargin)) {
    ch.own = rule;
    best_own_t = rule_t;
  }
  ch.best = ch.own;
  best_t = best_own_t;
  for (const NormCandidateTime& t : ch.times)
    if (t.variant == "onednn" && t.seconds * (1 + kMargin) < best_t) ch.best = onednn();
  ch.source = "measured";
}

// ---- the environment ------------------------------------------------------------------------

TuneMode mode_from_env() {
  const char* env = std::getenv("NORMLAB_TUNE");
  if (!env || !*env) return TuneMode::cached;
  const std::string v = env;
  if (v == "off") return TuneMode::off;
  if (v == "cached") return TuneMode::cached;
  if (v == "fresh") return TuneMode::fresh;
  throw UsageError(fmt::format("NORMLAB_TUNE='{}': expected off, cached or fresh", shown(v)));
}

// NORMLAB_NORM_VARIANT forces one variant on every kernel that has it (onednn only on LayerNorm's);
// NORMLAB_STREAMING_STORES=0|1 forces the store kind of whatever runs.
std::optional<NormVariant> forced_variant() {
  const char* env = std::getenv("NORMLAB_NORM_VARIANT");
  if (!env || !*env) return std::nullopt;
  try {
    return parse_norm_variant(env);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("NORMLAB_NORM_VARIANT: {}", e.what()));
  }
}

std::optional<bool> forced_stores() {
  const char* env = std::getenv("NORMLAB_STREAMING_STORES");
  if (!env || !*env) return std::nullopt;
  const std::string v = env;
  if (v == "0" || v == "1") return v == "1";
  throw UsageError(fmt::format("NORMLAB_STREAMING_STORES='{}': expected 0 or 1", shown(v)));
}

// ---- the cache file -------------------------------------------------------------------------

std::string cpu_identity() {
  const CpuInfo& c = cpu_info();
  return fmt::format("{} family {} model {} stepping {} ({}), L2 {} KiB, LLC {} KiB", c.vendor, c.family, c.model,
                     c.stepping, c.name, l2_cache_size() >> 10, last_level_cache_size() >> 10);
}

std::string build_identity() {
  return fmt::format("normlab {} {} kernels {} built {}", build_info().normlab_version, build_info().git_commit,
                     norm_kernels_isa(), norm_kernels_build_stamp());
}

json choice_json(const NormChoice& ch) {
  json times = json::object();
  for (const NormCandidateTime& t : ch.times) times[t.variant] = t.seconds;
  // "fused": the cache's key for `own` (a name from before the kernels were renamed; caches are per build anyway).
  return {{"best", ch.best.name()}, {"fused", ch.own.name()}, {"timed_rows", ch.timed_rows}, {"seconds", times}};
}

bool choice_from_json(const json& j, NormChoice& ch) {
  try {
    ch.best = parse_norm_variant(j.at("best").get<std::string>());
    ch.own = parse_norm_variant(j.at("fused").get<std::string>());
    ch.timed_rows = j.value("timed_rows", int64_t{0});
    ch.times.clear();
    for (const auto& [name, t] : j.at("seconds").items()) ch.times.push_back({name, t.get<double>()});
    std::sort(ch.times.begin(), ch.times.end(),
              [](const NormCandidateTime& a, const NormCandidateTime& b) { return a.seconds < b.seconds; });
    return ch.own.layout != Layout::onednn;
  } catch (const std::exception&) {
    return false;  // an entry of another format: measured again
  }
}

// The cache's entries for this CPU and build (empty when the file is missing, unreadable or
// another machine's or build's). A damaged file (not JSON, or JSON of another shape) is ignored
// with a warning, and the next choice measured rewrites it whole.
json read_cache(const std::string& path, bool warn = true) {
  if (path.empty() || ::access(path.c_str(), F_OK) != 0) return json::object();
  try {
    const json j = json::parse(read_file(path, int64_t{1} << 20));
    if (!j.is_object()) throw std::runtime_error("not a JSON object");
    if (j.value("cpu", "") != cpu_identity() || j.value("build", "") != build_identity()) return json::object();
    const json& choices = j.at("choices");
    if (!choices.is_object()) throw std::runtime_error("\"choices\" is not an object");
    return choices;
  } catch (const std::exception& e) {
    if (warn) spdlog::warn("ignoring the kernel tuning cache '{}': {}", shown(path, 200), shown(e.what(), 200));
    return json::object();
  }
}

// An exclusive lock on <path>.lock while this process merges its entry into the file: of several
// processes measuring at once, each one's entry survives the others' writes. Waits at most a few
// seconds (a holder only reads and writes a small file); without the lock the entry is written
// anyway, as the last writer's.
class CacheLock {
 public:
  explicit CacheLock(const std::string& path) {
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) return;
    for (int i = 0; i < 200; ++i) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        held_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

void write_cache(const std::string& path, const std::string& key, const NormChoice& ch) {
  if (path.empty()) return;
  try {
    const std::string dir = path.substr(0, path.rfind('/'));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw UsageError(fmt::format("cannot create '{}': {}", dir, ec.message()));
    const CacheLock lock(path);
    if (!lock.held()) spdlog::debug("the kernel tuning cache's lock is busy: writing without it");
    // Merge with what other processes have written since this one read the file (a damaged file
    // was named when it was read first, and is rewritten whole here).
    json choices = read_cache(path, /*warn=*/false);
    choices[key] = choice_json(ch);
    const json j{{"format", "normlab kernel choices 1"},
                 {"cpu", cpu_identity()},
                 {"build", build_identity()},
                 {"choices", choices}};
    write_file_atomic(path, j.dump(1) + "\n");
  } catch (const std::exception& e) {
    static std::once_flag warned;
    std::call_once(warned, [&] { spdlog::warn("cannot keep the kernel tuning cache: {}", e.what()); });
  }
}

// ---- the process's choices ------------------------------------------------------------------

struct Registry {
  std::mutex mu;
  std::map<std::tuple<int, int64_t, std::string, int, bool>, std::unique_ptr<NormChoice>> by_class;
  std::vector<const NormChoice*> order;
  bool cache_read = false;
  json cache;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: kernels may run during static destruction
  return *r;
}

NormChoice decide(const NormShapeClass& c, int64_t n, Registry& reg) {
  NormChoice ch;
  ch.shape = c;
  const NormVariant rule = rule_variant(c);
  const TuneMode mode = tune_mode();
  if (const auto forced = forced_variant()) {
    const bool fits = forced->layout != Layout::onednn || has_onednn_variant(c.kernel);
    ch.best = ch.own = fits ? *forced : rule;
    if (forced->layout == Layout::onednn) ch.own = rule;
    ch.source = fits ? fmt::format("forced (NORMLAB_NORM_VARIANT={})", forced->name())
                     : fmt::format("rule (NORMLAB_NORM_VARIANT={} has no {} variant)", forced->name(), to_string(c.kernel));
  } else if (mode == TuneMode::off) {
    ch.best = ch.own = rule;
    ch.source = "rule (NORMLAB_TUNE=off)";
  } else {
    const std::string path = tune_cache_path();
    if (!reg.cache_read) {
      reg.cache = mode == TuneMode::cached ? read_cache(path) : json::object();
      reg.cache_read = true;
    }
    const std::string key = c.key();
    if (mode == TuneMode::cached && reg.cache.contains(key) && choice_from_json(reg.cache[key], ch)) {
      ch.source = "cached";
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      measure(ch, n);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      spdlog::debug("{}: {} (measured {} candidates in {:.2f} s)", key, ch.best.name(), ch.times.size(), took);
      write_cache(path, key, ch);
      reg.cache[key] = choice_json(ch);
    }
  }
  if (const auto stores = forced_stores()) {
    if (ch.best.layout != Layout::onednn) ch.best.stream = *stores;
    ch.own.stream = *stores;
    ch.source += fmt::format(", stores forced (NORMLAB_STREAMING_STORES={})", *stores ? 1 : 0);
  }
  return ch;
}

}  // namespace

const char* to_string(NormKernel k) {
  switch (k) {
    case NormKernel::layernorm_forward: return "layernorm_forward";
    case NormKernel::layernorm_backward: return "layernorm_backward";
    case NormKernel::rmsnorm_forward: return "rmsnorm_forward";
    case NormKernel::rmsnorm_backward: return "rmsnorm_backward";
    case NormKernel::add_layernorm_forward: return "add_layernorm_forward";
    case NormKernel::add_rmsnorm_forward: return "add_rmsnorm_forward";
  }
  return "?";
}

const char* to_string(TuneMode m) {
  return m == TuneMode::off ? "off" : m == TuneMode::cached ? "cached" : "fresh";
}

std::string NormVariant::name() const {
  std::string s = layout == Layout::onednn      ? "onednn"
                  : layout == Layout::pipelined ? fmt::format("pipelined-pf{}", prefetch)
                                                : fmt::format("tiled-{}", tile_floats);
  if (stream && layout != Layout::onednn) s += "+nt";
  return s;
}

NormVariant parse_norm_variant(const std::string& name) {
  auto bad = [&](const std::string& why) {
    return UsageError(fmt::format("unknown norm kernel variant '{}': {} (e.g. tiled-2048, pipelined-pf2, "
                                  "pipelined-pf0+nt, onednn)", shown(name), why));
  };
  std::string s = name;
  NormVariant v;
  if (s.size() > 3 && s.compare(s.size() - 3, 3, "+nt") == 0) {
    v.stream = true;
    s.resize(s.size() - 3);
  }
  auto number = [&](const std::string& digits, int lo, int hi) {
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw bad("expected a number after the layout");
    const int k = std::stoi(digits);
    if (k < lo || k > hi) throw bad(fmt::format("{} is outside [{}, {}]", k, lo, hi));
    return k;
  };
  if (s == "onednn") {
    if (v.stream) throw bad("onednn has no streaming-store form");
    v.layout = Layout::onednn;
  } else if (s.rfind("tiled-", 0) == 0) {
    v.layout = Layout::tiled;
    v.tile_floats = number(s.substr(6), 16, 65536);
  } else if (s.rfind("pipelined-pf", 0) == 0) {
    v.layout = Layout::pipelined;
    v.prefetch = number(s.substr(12), 0, 64);
  } else {
    throw bad("the layout must be tiled-<floats>, pipelined-pf<rows> or onednn");
  }
  return v;
}

std::string NormShapeClass::key() const {
  return fmt::format("{} d={} {} t={}{}", to_string(kernel), d, fits, threads, dx ? "" : " params-only");
}

NormShapeClass norm_shape_class(NormKernel k, int64_t n, int64_t d, bool dx) {
  NormShapeClass c;
  c.kernel = k;
  c.d = d;
  c.dx = dx || !(k == NormKernel::layernorm_backward || k == NormKernel::rmsnorm_backward);
  const int64_t bytes = arrays_of(k, c.dx) * std::max<int64_t>(n, 0) * d * int64_t{sizeof(float)};
  c.fits = bytes <= l2_cache_size() ? "l2" : bytes <= last_level_cache_size() ? "llc" : "mem";
  c.threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return c;
}

const NormChoice& norm_choice(NormKernel k, int64_t n, int64_t d, bool dx) {
  const NormShapeClass c = norm_shape_class(k, n, d, dx);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto id = std::make_tuple(static_cast<int>(c.kernel), c.d, c.fits, c.threads, c.dx);
  auto it = reg.by_class.find(id);
  if (it != reg.by_class.end()) return *it->second;
  auto ch = std::make_unique<NormChoice>(decide(c, n, reg));
  const NormChoice& ref = *ch;
  reg.by_class.emplace(id, std::move(ch));
  reg.order.push_back(&ref);
  return ref;
}

std::vector<NormChoice> norm_choices_made() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<NormChoice> out;
  for (const NormChoice* c : reg.order) out.push_back(*c);
  return out;
}

void reset_norm_choices() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  // The choices stay allocated (callers may hold references); they are only forgotten.
  static std::vector<std::unique_ptr<NormChoice>> retired;
  for (auto& [id, ch] : reg.by_class) retired.push_back(std::move(ch));
  reg.by_class.clear();
  reg.order.clear();
  reg.cache_read = false;
  reg.cache = json::object();
}

TuneMode tune_mode() { return mode_from_env(); }

void check_tuning_environment() {
  (void)mode_from_env();
  (void)forced_variant();
  (void)forced_stores();
}

std::string tune_cache_path() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') return std::string(xdg) + "/normlab/kernel-choices.json";
  if (const char* home = std::getenv("HOME"); home && *home == '/') return std::string(home) + "/.cache/normlab/kernel-choices.json";
  return "";
}

int64_t last_level_cache_size() {
  static const int64_t llc = [] {
    int64_t b = cache_bytes(0);
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (b == 0) b = std::max<int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
    return b > 0 ? b : int64_t{32} << 20;  // unknown: a common server LLC
  }();
  return llc;
}

int64_t l2_cache_size() {
  static const int64_t l2 = [] {
    const int64_t b = cache_bytes(2);
    return b > 0 ? b : int64_t{1} << 20;
  }();
  return l2;
}

}  // namespace normlab::cpu
