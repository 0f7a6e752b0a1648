// `bench step`: the machine's float32 FMA peak, the limit a matrix product is held to as the
// copy loop is the limit of a norm. Every thread runs
//   acc_k = acc_k * m + c   for k in [0, kChains), over and over
// on vectors of the compiled ISA's width. The chains are independent, so the FMA units start
// one per cycle per unit once there are at least latency x units of them (4 x 2 on current
// x86 cores; kChains leaves room); nothing is loaded or stored inside the loop. m < 1 keeps the
// values bounded (acc tends to c / (1 - m)), never denormal.
//
//   normlab bench step          prints the peak at each thread count, and each step's share of it
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "normlab/bench.h"

namespace normlab::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Independent FMA chains per thread: 12 vectors + 2 constants fit AVX2's 16 registers.
constexpr int kChains = 12;

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
constexpr const char* kIsa = "avx512f";
inline Vec splat(float v) { return _mm512_set1_ps(v); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
constexpr const char* kIsa = "avx2+fma";
inline Vec splat(float v) { return _mm256_set1_ps(v); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
#else
using Vec = float;
constexpr int kLanes = 1;
constexpr const char* kIsa = "scalar";
inline Vec splat(float v) { return v; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return std::fma(a, b, c); }
#endif

// GCC 12's _mm512_reduce_add_ps trips -Wuninitialized in its own header: summed through memory.
inline float lane_sum(Vec v) {
  float x[kLanes];
  std::memcpy(x, &v, sizeof x);
  float s = 0;
  for (float f : x) s += f;
  return s;
}

// `iters` rounds of kChains FMAs; returns a sum of the accumulators so that none is dead code.
__attribute__((noinline)) float fma_chains(int64_t iters, float seed) {
  const Vec m = splat(0.999999f), c = splat(1e-6f);
  Vec acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = splat(seed + static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kChains; ++k) acc[k] = fmadd(acc[k], m, c);
  }
  float s = 0;
  for (int k = 0; k < kChains; ++k) s += lane_sum(acc[k]);
  return s;
}

// Seconds for every one of `threads` threads to run `iters` rounds, all started together.
double time_threads(int threads, int64_t iters, volatile float* sink) {
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
  {
    const float s = fma_chains(iters, static_cast<float>(omp_get_thread_num()));
    if (s == 12345.0f) *sink = s;  // never true; keeps the result observable
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

FmaPeak measure_fma_peak(int threads, double seconds) {
  FmaPeak p;
  p.threads = std::max(1, threads);
  p.isa = kIsa;
  p.lanes = kLanes;
  volatile float sink = 0;
  // Rounds per repeat: grown until one repeat takes ~2 ms, long against a parallel region's
  // start (microseconds) and short against a scheduler's time slice.
  int64_t iters = 1024;
  while (time_threads(p.threads, iters, &sink) < 2e-3 && iters < (int64_t{1} << 34)) iters *= 2;
  const double flops = 2.0 * kLanes * kChains * static_cast<double>(iters) * p.threads;
  double spent = 0, best = 0;
  int repeats = 0;
  while (repeats < 3 || spent < seconds) {
    const double s = time_threads(p.threads, iters, &sink);
    spent += s;
    best = std::max(best, flops / s / 1e9);
    ++repeats;
  }
  p.gflop_per_s = best;
  return p;
}

}  // namespace normlab::bench
