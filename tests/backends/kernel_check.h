// What cpu_backend_test.cpp's kernel tests take: random float32 inputs from the check stream,
// float64 copies for the reference, the tolerances (each with its reason) and the closeness check
// that reports values side by side.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/rng.h"
#include "normlab/tolerances.h"
#include "normlab/tensor.h"

namespace normlab::kernel_check {

inline Backend& cpu_backend() { return backend("cpu"); }
inline Backend& ref() { return backend("reference"); }

// A float32 tensor of N(mean, scale^2) values from the check stream.
inline Tensor randn(Rng& rng, const Shape& shape, double scale = 1.0, double mean = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = mean + scale * rng.normal();
  return Tensor::from(v, shape, DType::f32);
}
inline Tensor f64(const Tensor& t) { return t.to(DType::f64); }
inline Tensor e32(const Shape& s) { return Tensor::empty(s, DType::f32); }
inline Tensor e64(const Shape& s) { return Tensor::empty(s, DType::f64); }

// atol + rtol*|ref|, per output: the one table of tolerances and their reasons.
using Tol = Tolerance;
using tol::kForward;
using tol::kGradient;
using tol::kReduction;

// A mismatch report: the first values side by side and the largest difference.
inline void expect_close(const Tensor& got32, const Tensor& want64, Tol tol, const std::string& what) {
  std::vector<double> got = got32.to_vector(), want = want64.to_vector();
  ASSERT_EQ(got.size(), want.size()) << what << ": sizes differ";
  int bad = 0;
  double max_diff = 0.0;
  std::string report;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(got[i] - want[i]);
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const bool ok =
        both_nan || got[i] == want[i] || diff <= tol.atol + tol.rtol * std::fabs(want[i]);
    if (!both_nan && !(diff <= max_diff)) max_diff = diff;
    if (!ok && ++bad <= 5) {
      char line[160];
      std::snprintf(line, sizeof line, "\n  [%zu] got %.9g reference %.9g diff %.3g", i, got[i],
                    want[i], diff);
      report += line;
    }
  }
  if (bad)
    ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " values outside atol "
                  << tol.atol << " + rtol " << tol.rtol << "*|ref|; max diff " << max_diff
                  << report;
}

// The last two shapes are too long for the CUDA backward's one-read kernel (its column sums in
// shared memory: 2*d floats for LayerNorm, d for RMSNorm, at most 192 KiB) and for the forward's
// row cache (d floats, at most 96 KiB): the per-row dx kernel, the column reductions of dgamma
// and dbeta, and the uncached forward run only on these (scalar, then float4 units).
inline constexpr int64_t kNormShapes[][2] = {{1, 1},     {1, 3},    {7, 1},   {7, 3},    {7, 65},
                                             {1, 1000},  {7, 1000}, {64, 512}, {512, 64}, {3, 4096},
                                             {5, 4097},  {37, 256}, {2, 49153}, {3, 49156}};

struct NormInputs {
  Tensor x, gamma, beta, dy;
  NormInputs(int64_t n, int64_t d, uint64_t seed) {
    Rng rng(seed, stream::check);
    // A row mean of 3 against a spread of 2: the variance must be centred, not E[x^2]-mu^2.
    x = randn(rng, {n, d}, 2.0, 3.0);
    gamma = randn(rng, {d}, 0.2, 1.0);
    beta = randn(rng, {d}, 0.2);
    dy = randn(rng, {n, d});
  }
};

inline std::string norm_case(const char* what, int64_t n, int64_t d) {
  return std::string(what) + " " + std::to_string(n) + "x" + std::to_string(d);
}

inline float* fp(const Tensor& t) { return t.data<float>(); }

}  // namespace normlab::kernel_check
