// When the cpu kernels write their output with streaming (non-temporal) stores.
//
// A kernel whose inputs and output together exceed the last-level cache gains nothing from
// ordinary stores: each output line is first read into the cache (read-for-ownership), then
// evicted to memory, so the store stream costs two transfers. Streaming stores write the line
// to memory once. Whether they are faster depends on the CPU, and not only on its vendor: on an
// Ice Lake guest glibc's memcpy (streaming above its threshold) reached 21 GB/s against 11 for
// a copy loop; on a Zen 3 guest memcpy fell to 7 GB/s against 17; on a Zen 4 guest it reached
// 32 against 18 (results/bench-cpu.md). So the first call that could stream measures both copies
// on this machine, once per process, and streams only where streaming wins.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "normlab/cpu_kernel_lab.h"
#include "simd.h"

namespace normlab::cpu {

namespace {

int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (v <= 0) return 0;
  const char unit = end ? *end : '\0';
  const int64_t k = unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? int64_t{1} << 30 : 1;
  return static_cast<int64_t>(v) * k;
}

int64_t last_level_cache_bytes() {
  int64_t llc = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(in >> s)) break;
    llc = std::max(llc, parse_size(s));
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (llc == 0) llc = std::max<int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
  return llc > 0 ? llc : int64_t{32} << 20;  // unknown: a common server LLC
}

// dst = src with ordinary or streaming stores, whole vectors (n a multiple of kWidth, both
// aligned); the seconds it took.
template <bool kStream>
double timed_copy(float* dst, const float* src, int64_t n) {
  using namespace simd;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t j = 0; j < n; j += kWidth) put<kStream>(dst + j, load(src + j), kWidth);
  stream_fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

StreamingStores measure() {
  StreamingStores s;
  s.llc_bytes = last_level_cache_bytes();
  if (const char* env = std::getenv("NORMLAB_STREAMING_STORES"); env && *env) {
    const std::string v = env;
    if (v == "0" || v == "1") {
      s.enabled = v == "1";
      s.why = "NORMLAB_STREAMING_STORES=" + v;
      return s;
    }
    spdlog::warn("NORMLAB_STREAMING_STORES='{}' is neither 0 nor 1: measuring instead", v);
  }
  if (std::string(simd::kIsa) == "portable") {
    s.why = "no streaming store in the portable build";
    return s;
  }
  // Twice the LLC per buffer, so that neither buffer stays cached between the copies.
  const int64_t n = std::max<int64_t>(2 * s.llc_bytes, int64_t{16} << 20) / int64_t{sizeof(float)};
  struct Freer {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Freer> src(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
  std::unique_ptr<float, Freer> dst(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
  if (!src || !dst) {
    s.why = "no memory for the measurement";
    return s;
  }
  std::memset(src.get(), 0, n * sizeof(float));
  std::memset(dst.get(), 0, n * sizeof(float));
  double ordinary = 1e30, streaming = 1e30;
  for (int rep = 0; rep < 3; ++rep) {  // interleaved, best of three: the machine may be noisy
    ordinary = std::min(ordinary, timed_copy<false>(dst.get(), src.get(), n));
    streaming = std::min(streaming, timed_copy<true>(dst.get(), src.get(), n));
  }
  const double bytes = 2.0 * double(n) * sizeof(float);
  s.measured = true;
  s.ordinary_gbs = bytes / ordinary * 1e-9;
  s.streaming_gbs = bytes / streaming * 1e-9;
  // A margin: where the two are even, ordinary stores keep the output in cache for its reader.
  s.enabled = s.streaming_gbs > 1.1 * s.ordinary_gbs;
  s.why = "measured";
  spdlog::debug("streaming stores {}: copy of {} MiB at {:.1f} GB/s with streaming stores, {:.1f} GB/s without",
                s.enabled ? "on" : "off", (n * int64_t{sizeof(float)}) >> 20, s.streaming_gbs, s.ordinary_gbs);
  return s;
}

std::atomic<StreamChoice> g_choice{StreamChoice::automatic};

}  // namespace

const StreamingStores& streaming_stores() {
  static const StreamingStores s = measure();
  return s;
}

void set_stream_choice(StreamChoice choice) { g_choice.store(choice); }

bool streams_output(const float* out, int64_t n, int64_t d, int64_t arrays) {
  using simd::kWidth;
  const StreamChoice choice = g_choice.load();
  const bool aligned = reinterpret_cast<uintptr_t>(out) % (kWidth * sizeof(float)) == 0 && d % kWidth == 0;
  if (choice == StreamChoice::never || out == nullptr || !aligned || n <= 0) return false;
  if (choice == StreamChoice::always) return true;
  // The call's arrays fit in the LLC: the output may still be there for whoever reads it next.
  if (arrays * n * d * int64_t{sizeof(float)} <= last_level_cache_size()) return false;
  return streaming_stores().enabled;
}

bool fused_streams(FusedPass pass, const float* out, int64_t n, int64_t d) {
  // The N x D arrays each kernel touches: x, y; x, dy, dx; a, b, s, y.
  const int64_t arrays = pass == FusedPass::forward ? 2 : pass == FusedPass::backward ? 3 : 4;
  return streams_output(out, n, d, arrays);
}

int64_t last_level_cache_size() {
  static const int64_t llc = last_level_cache_bytes();
  return llc;
}

}  // namespace normlab::cpu
