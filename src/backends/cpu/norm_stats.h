// The norms' final statistics, one definition for every cpu kernel (fused, pipelined, tiled and
// the baselines), so that they round alike whatever the compiler contracts into FMAs.
#pragma once
#include <cmath>

namespace normlab::cpu {

// mean(x) = x0 + sum(x - x0)/d for a row summed shifted by x0 (its first element): a row far
// from 0 (|mean| >> std) would otherwise be summed as large numbers, each addition rounding at
// their scale (a row of 1000 floats near 1000 sums to 1e6, where a float's step is 0.06); the
// shifted terms are small and x - x0 is exact for values within a factor 2 of each other.
inline float mean_from(float x0, float shifted_sum, float inv_d) { return x0 + shifted_sum * inv_d; }
// rstd = 1/sqrt(sum_sq/d + eps), from a sum of (centred) squares.
inline float rstd_from(float sum_sq, float inv_d, float eps) { return 1.0f / std::sqrt(sum_sq * inv_d + eps); }

}  // namespace normlab::cpu
