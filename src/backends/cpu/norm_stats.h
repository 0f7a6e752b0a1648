// The norms' final statistics, one definition for every cpu kernel (one-pass and fused, pipelined, tiled and
// the baselines), so that they round alike whatever the compiler contracts into FMAs. Each is a
// template over T: float for one row, or simd::VF for a group of rows, one per lane (the short-row
// kernels finish kWidth rows at once); the operations are the same IEEE ones either way (a
// correctly rounded square root and division), so a row gets the same bits in both.
#pragma once
#include <cmath>

#include "isa.h"

namespace normlab::cpu {
// Per instruction set, like simd.h (isa.h).
inline namespace NORMLAB_SIMD_ISA {

inline float reciprocal_sqrt(float v) { return 1.0f / std::sqrt(v); }
inline bool greater(float a, float b) { return a > b; }

// mean(x) = c + sum(x - c)/d for a row summed shifted by c (a value near its mean, see
// row_shift in norm_kernels.cpp): a row far from 0 (|mean| >> std) would otherwise be summed
// as large numbers, each addition rounding at their scale (a row of 1000 floats near 1000 sums
// to 1e6, where a float's step is 0.06); the shifted terms are small and x - c is exact for
// values within a factor 2 of each other.
template <class T>
inline T mean_from(T c, T shifted_sum, T inv_d) {
  return c + shifted_sum * inv_d;
}

// The variance from one sweep's sums of s = x - c and s^2: E[s^2] - E[s]^2, with m = E[s].
// Cancellation loses about log2(1 + 2 m^2/var) bits, so the kernels accept it only while
// the shift is not shift_too_far(m, var) (at most ~1.6 bits, from a shift within one standard
// deviation of the mean) and otherwise sum the row again, centred. For a group of rows,
// shift_too_far gives the lanes' mask.
template <class T>
inline T shifted_variance(T m, T sum_sq, T inv_d) {
  return sum_sq * inv_d - m * m;
}
template <class T>
inline auto shift_too_far(T m, T var) {
  return greater(m * m, var);  // false for NaN: a NaN row keeps its NaN statistics
}

template <class T>
inline T rstd_of_variance(T var, T eps) {
  return reciprocal_sqrt(var + eps);
}
// rstd = 1/sqrt(sum_sq/d + eps), from a sum of (centred) squares.
template <class T>
inline T rstd_from(T sum_sq, T inv_d, T eps) {
  return rstd_of_variance(sum_sq * inv_d, eps);
}

}  // namespace NORMLAB_SIMD_ISA
}  // namespace normlab::cpu
