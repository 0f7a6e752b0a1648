// How the cpu backend's own kernels split work over OpenMP threads, and when they do not.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "isa.h"

namespace normlab::cpu {
// Per instruction set, like simd.h (isa.h): use_threads is compiled into every ISA's kernels.
inline namespace NORMLAB_SIMD_ISA {

// Below this many elements touched, the kernels stay on one thread: an OpenMP region costs
// ~1 us to fork and join at 2 threads (docs/cpu-costs.md), and streaming 16K floats in and out takes
// one core ~5-10 us (~13 GB/s), so from here on the second thread saves several times what it
// costs; below, tiny ops (a bias, a row of statistics) would mostly pay for the fork.
constexpr int64_t kParallelMinWork = int64_t{1} << 14;

inline bool use_threads(int64_t work) {
  return work >= kParallelMinWork && omp_get_max_threads() > 1 && !omp_in_parallel();
}

// Calls f(lo, hi) on contiguous chunks of [0, n), one chunk per thread, chunk boundaries on
// multiples of `align` (so vector loops see whole vectors); runs f(0, n) on the calling thread
// when `work` (elements touched) is too small to pay for the threads. Results of a kernel that
// treats each index independently do not depend on the chunking; kernels that reduce across
// indices use fixed blocks instead (see norm_kernels.cpp), so that they do not either.
template <class F>
void parallel_chunks(int64_t n, int64_t work, F&& f, int64_t align = 1) {
  if (n <= 0) return;
  if (!use_threads(work) || n < 2 * align) {
    f(int64_t{0}, n);
    return;
  }
  const int64_t units = (n + align - 1) / align;
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = std::min(n, units * t / nt * align);
    const int64_t hi = std::min(n, units * (t + 1) / nt * align);
    if (lo < hi) f(lo, hi);
  }
}

// f(i) for each i in [0, n), statically scheduled; sequential when the work is small.
template <class F>
void parallel_for(int64_t n, int64_t work, F&& f) {
  parallel_chunks(n, work, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) f(i);
  });
}

}  // namespace NORMLAB_SIMD_ISA
}  // namespace normlab::cpu
