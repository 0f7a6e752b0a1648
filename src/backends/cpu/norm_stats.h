// The norms' final statistics, one definition for every cpu kernel (fused, pipelined, tiled and
// the baselines), so that they round alike whatever the compiler contracts into FMAs.
#pragma once
#include <cmath>

namespace normlab::cpu {

// mean(x) = c + sum(x - c)/d for a row summed shifted by c (a value near its mean, see
// row_shift in norm_kernels.cpp): a row far from 0 (|mean| >> std) would otherwise be summed
// as large numbers, each addition rounding at their scale (a row of 1000 floats near 1000 sums
// to 1e6, where a float's step is 0.06); the shifted terms are small and x - c is exact for
// values within a factor 2 of each other.
inline float mean_from(float c, float shifted_sum, float inv_d) { return c + shifted_sum * inv_d; }

// The variance from one sweep's sums of s = x - c and s^2: E[s^2] - E[s]^2, with m = E[s].
// Cancellation loses about log2(1 + 2 m^2/var) bits, so the kernels accept it only while
// shift_close_enough(m, var) (at most ~1.6 bits, from a shift within one standard deviation of
// the mean) and otherwise sum the row again, centred.
inline float shifted_variance(float m, float sum_sq, float inv_d) { return sum_sq * inv_d - m * m; }
inline bool shift_close_enough(float m, float var) { return !(m * m > var); }

inline float rstd_of_variance(float var, float eps) { return 1.0f / std::sqrt(var + eps); }
// rstd = 1/sqrt(sum_sq/d + eps), from a sum of (centred) squares.
inline float rstd_from(float sum_sq, float inv_d, float eps) { return rstd_of_variance(sum_sq * inv_d, eps); }

}  // namespace normlab::cpu
