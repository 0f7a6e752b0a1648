// `bench norms`: the bandwidth limits the norm kernels are held to, timed in the same run on the
// same buffers and thread count:
//   copy_loop    dst[i] = src[i] with ordinary vector loads and stores (what the norm kernels
//                themselves do: a norm can at best read x and write y at this speed);
//   copy_memcpy  memcpy, one call per thread on its chunk; glibc switches to non-temporal
//                (streaming) stores above a size threshold, which is faster on large buffers:
//                the limit for a kernel that streams its stores.
// And each norm row's own copy (own_copy): the bytes its kernel moves, from the same buffers, with
// the same kind of stores.
// And the first half of the unfused add+norm baseline (an add, then the fused norm):
//   add_scaled   s = alpha*a + b with the same loads, FMAs and stores as the fused add+norm
//                kernels' first sweep, so the two differ only in the passes over memory.
// Chunks follow the cpu backend's parallel_chunks: one contiguous range per thread.
//
// GCC turns a recognisable copy loop into a memcpy call (-ftree-loop-distribute-patterns):
// turned off for this file, or the "plain copy loop" would be memcpy again.
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "bench_internal.h"

#if defined(__AVX512F__) || defined(__AVX__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace normlab::bench::detail {

namespace {

// dst[i] = src[i] for i in [0, n), four vectors per iteration, then the tail.
void copy_loop_range(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 64 <= n; i += 64) {
    __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + 16);
    __m512 c = _mm512_loadu_ps(src + i + 32), d = _mm512_loadu_ps(src + i + 48);
    _mm512_storeu_ps(dst + i, a);
    _mm512_storeu_ps(dst + i + 16, b);
    _mm512_storeu_ps(dst + i + 32, c);
    _mm512_storeu_ps(dst + i + 48, d);
  }
#elif defined(__AVX__)
  for (; i + 32 <= n; i += 32) {
    __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
    __m256 c = _mm256_loadu_ps(src + i + 16), d = _mm256_loadu_ps(src + i + 24);
    _mm256_storeu_ps(dst + i, a);
    _mm256_storeu_ps(dst + i + 8, b);
    _mm256_storeu_ps(dst + i + 16, c);
    _mm256_storeu_ps(dst + i + 24, d);
  }
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

// s[i] = alpha*a[i] + b[i] for i in [0, n), FMA-rounded as the fused kernels round it.
void add_scaled_range(float* s, const float* a, const float* b, float alpha, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(alpha);
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(s + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    _mm512_storeu_ps(s + i + 16, _mm512_fmadd_ps(va, _mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16)));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 va = _mm256_set1_ps(alpha);
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(s + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    _mm256_storeu_ps(s + i + 8, _mm256_fmadd_ps(va, _mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
  }
#endif
  for (; i < n; ++i) s[i] = std::fma(alpha, a[i], b[i]);
}

// f(lo, hi) on one contiguous chunk of [0, n) per thread, or f(0, n) alone below min_n.
template <class F>
void per_thread_chunk(int64_t n, F&& f, int64_t min_n = 1024) {
  if (omp_get_max_threads() <= 1 || n < min_n || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  constexpr int64_t kAlign = 16;  // chunk boundaries on 64-byte lines
  const int64_t units = (n + kAlign - 1) / kAlign;
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = std::min(n, units * t / nt * kAlign), hi = std::min(n, units * (t + 1) / nt * kAlign);
    if (lo < hi) f(lo, hi);
  }
}

// The n_in inputs' bytes [lo, hi) combined (the first, or the XOR of two: integer work, so no
// value of any format is slow) and stored into each of the n_out outputs. A block of 64 bytes at a
// time; streaming: non-temporal stores where every output is 64-byte aligned at the block.
void own_copy_range(unsigned char* const* outs, int n_out, const unsigned char* const* ins, int n_in, int64_t lo,
                    int64_t hi, bool streaming) {
  int64_t i = lo;
#if defined(__AVX512F__)
  auto aligned = [&](int64_t at) {
    for (int o = 0; o < n_out; ++o)
      if (reinterpret_cast<uintptr_t>(outs[o] + at) % 64 != 0) return false;
    return true;
  };
  const bool stream = streaming && aligned(i);
  for (; i + 64 <= hi; i += 64) {
    __m512i v = _mm512_loadu_si512(ins[0] + i);
    if (n_in > 1) v = _mm512_xor_si512(v, _mm512_loadu_si512(ins[1] + i));
    for (int o = 0; o < n_out; ++o) {
      if (stream)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(outs[o] + i), v);
      else
        _mm512_storeu_si512(outs[o] + i, v);
    }
  }
  if (stream) _mm_sfence();
#elif defined(__AVX2__)
  const bool stream = [&] {
    for (int o = 0; o < n_out; ++o)
      if (reinterpret_cast<uintptr_t>(outs[o] + i) % 32 != 0) return false;
    return streaming;
  }();
  for (; i + 32 <= hi; i += 32) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ins[0] + i));
    if (n_in > 1) v = _mm256_xor_si256(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ins[1] + i)));
    for (int o = 0; o < n_out; ++o) {
      if (stream)
        _mm256_stream_si256(reinterpret_cast<__m256i*>(outs[o] + i), v);
      else
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(outs[o] + i), v);
    }
  }
  if (stream) _mm_sfence();
#else
  (void)streaming;
#endif
  for (; i < hi; ++i) {
    const unsigned char v = n_in > 1 ? static_cast<unsigned char>(ins[0][i] ^ ins[1][i]) : ins[0][i];
    for (int o = 0; o < n_out; ++o) outs[o][i] = v;
  }
}

}  // namespace

void own_copy(const OwnCopyArrays& a) {
  unsigned char* const outs[2] = {static_cast<unsigned char*>(a.outs[0]), static_cast<unsigned char*>(a.outs[1])};
  const unsigned char* const ins[2] = {static_cast<const unsigned char*>(a.ins[0]),
                                       static_cast<const unsigned char*>(a.ins[1])};
  if (a.n_out < 1 || a.n_out > 2 || a.n_in < 1 || a.n_in > 2) return;
  // In 4-byte words, chunks on 64-byte lines, on the threads from where the norm kernels take them
  // (16K elements: the cpu backend's kParallelMinWork): below, a fork the kernel never pays would
  // slow the copy it is held to.
  constexpr int64_t kKernelsParallelFrom = int64_t{1} << 14;
  per_thread_chunk(
      (a.bytes + 3) / 4,
      [&](int64_t lo, int64_t hi) {
        own_copy_range(outs, a.n_out, ins, a.n_in, lo * 4, std::min(a.bytes, hi * 4), a.streaming);
      },
      a.elements >= kKernelsParallelFrom ? 1 : std::numeric_limits<int64_t>::max());
}

void copy_loop(float* dst, const float* src, int64_t n) {
  per_thread_chunk(n, [&](int64_t lo, int64_t hi) { copy_loop_range(dst + lo, src + lo, hi - lo); });
}

void copy_memcpy(float* dst, const float* src, int64_t n) {
  per_thread_chunk(n, [&](int64_t lo, int64_t hi) {
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(float));
  });
}

void add_scaled(float* s, const float* a, const float* b, float alpha, int64_t n) {
  per_thread_chunk(n, [&](int64_t lo, int64_t hi) { add_scaled_range(s + lo, a + lo, b + lo, alpha, hi - lo); });
}

}  // namespace normlab::bench::detail
