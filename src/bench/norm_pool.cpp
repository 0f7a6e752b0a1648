// `bench norms`: the buffer sets of one shape, their values (cheap enough to fill gigabytes in
// parallel) and the saved statistics a backward reads, and the arguments of a call on one set.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/reference_kernels.h"

namespace normlab::bench {

namespace {

// Deterministic values from (seed, stream, index), cheap enough to fill gigabytes in parallel.
inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
inline float uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  return static_cast<float>(splitmix64(seed * 0x100000001b3ULL ^ (stream << 56) ^ i) >> 40) * 0x1p-24f;
}

}  // namespace

namespace detail {

void parallel_all(int64_t n, const std::function<void(int64_t)>& f) {
#pragma omp parallel for schedule(static) num_threads(omp_get_num_procs())
  for (int64_t i = 0; i < n; ++i) f(i);
}

int64_t Pool::floats_needed(const NormShape& s, int64_t sets, bool with_sum) {
  return 4 * padded(s.d) + sets * ((with_sum ? 4 : 3) * padded(s.numel()) + 5 * padded(s.rows()));
}

Pool::Pool(float* memory, const NormShape& s, int64_t sets, bool with_sum, uint64_t seed, float ln_eps, float rms_eps)
    : shape_(s), ln_eps_(ln_eps), rms_eps_(rms_eps) {
  const int64_t nd = s.numel(), n = s.rows(), d = s.d;
  float* p = memory;
  auto take = [&](int64_t floats) {
    float* q = p;
    p += padded(floats);
    return q;
  };
  gamma_ = take(d);
  beta_ = take(d);
  dgamma_ = take(d);
  dbeta_ = take(d);
  for (int64_t j = 0; j < d; ++j) {
    gamma_[j] = 0.5f + uniform01(seed, 1, static_cast<uint64_t>(j));
    beta_[j] = uniform01(seed, 2, static_cast<uint64_t>(j)) - 0.5f;
    dgamma_[j] = dbeta_[j] = 0.0f;
  }
  for (int64_t k = 0; k < sets; ++k) {
    BufferSet b;
    b.x = take(nd);
    b.dy = take(nd);
    b.out = take(nd);
    if (with_sum) b.sum = take(nd);
    b.out_mean = take(n);
    b.out_rstd = take(n);
    b.ln_mean = take(n);
    b.ln_rstd = take(n);
    b.rms_rstd = take(n);
    sets_.push_back(b);
  }
  // All rows of all sets in one parallel region (thousands of small sets otherwise pay a
  // fork/join each, which is slow when other processes hold the cores).
  parallel_all(sets * n, [&](int64_t r) {
    const BufferSet& b = sets_[static_cast<size_t>(r / n)];
    fill_row(b, seed + static_cast<uint64_t>(r / n) * 7919, r % n);
    save_stats_row(b, r % n);
  });
}

void Pool::round_inputs(float (*round)(float)) {
  const int64_t n = shape_.rows(), d = shape_.d, sets = size();
  for (int64_t j = 0; j < d; ++j) {
    gamma_[j] = round(gamma_[j]);
    beta_[j] = round(beta_[j]);
  }
  parallel_all(sets * n, [&](int64_t r) {
    const BufferSet& b = sets_[static_cast<size_t>(r / n)];
    const int64_t i = r % n;
    for (int64_t j = i * d; j < (i + 1) * d; ++j) {
      b.x[j] = round(b.x[j]);
      b.dy[j] = round(b.dy[j]);
    }
    save_stats_row(b, i);
  });
}

// x[i,j] = off_i + scale_i * u, u uniform with variance 1, off_i in [-1, 1), scale_i in
// [0.5, 2); dy uniform in [-1, 1). Every array is written here (first touch: no page faults
// while timing).
void Pool::fill_row(const BufferSet& b, uint64_t seed, int64_t i) {
  const int64_t d = shape_.d;
  const uint64_t r = static_cast<uint64_t>(i);
  const float off = 2.0f * uniform01(seed, 3, r) - 1.0f;
  const float scale = 0.5f + 1.5f * uniform01(seed, 4, r);
  float* xr = b.x + i * d;
  float* dyr = b.dy + i * d;
  for (int64_t j = 0; j < d; ++j) {
    const uint64_t e = r * static_cast<uint64_t>(d) + static_cast<uint64_t>(j);
    xr[j] = off + scale * 1.7320508f * (2.0f * uniform01(seed, 5, e) - 1.0f);
    dyr[j] = 2.0f * uniform01(seed, 6, e) - 1.0f;
    if (b.sum) b.sum[i * d + j] = 0.0f;
  }
  b.out_mean[i] = 0.0f;
  b.out_rstd[i] = 0.0f;
}

// The saved statistics of row i: the reference forwards of x (they write their y into `out`,
// overwritten by every call later).
void Pool::save_stats_row(const BufferSet& b, int64_t i) {
  const int64_t d = shape_.d;
  const float* xr = b.x + i * d;
  float* outr = b.out + i * d;
  layernorm_forward_ref<float>(outr, b.ln_mean + i, b.ln_rstd + i, xr, gamma_, beta_, 1, d, ln_eps_);
  rmsnorm_forward_ref<float>(outr, b.rms_rstd + i, xr, gamma_, 1, d, rms_eps_);
}

NormArgs args_for(const Pool& pool, int64_t k, NormKind norm, Pass pass, float eps, float alpha) {
  const BufferSet& b = pool.set(k);
  const bool ln = norm == NormKind::layernorm;
  NormArgs a;
  a.n = pool.shape().rows();
  a.d = pool.shape().d;
  a.eps = eps;
  a.x = b.x;
  a.gamma = pool.gamma();
  if (detail::is_squash(norm)) {  // gamma, beta, alpha (0.5), Derf's shift; no statistics
    a.beta = pool.beta();
    // Derf's shift away from its init (0), so that a kernel that drops it fails the check.
    if (norm == NormKind::derf) a.derf_shift = 0.25f;
    if (pass == Pass::bwd) {
      a.dy = b.dy;
      a.dx = b.out;
      a.dgamma = pool.dgamma();
      a.dbeta = pool.dbeta();
      a.dalpha = pool.dalpha();
      if (norm == NormKind::derf) a.dshift = pool.dshift();
    } else {
      a.y = b.out;
    }
    return a;
  }
  a.beta = ln ? pool.beta() : nullptr;
  if (pass == Pass::fwd || pass == Pass::addfwd) {
    a.y = b.out;
    a.mean = ln ? b.out_mean : nullptr;
    a.rstd = b.out_rstd;
    if (pass == Pass::addfwd) {
      a.branch = b.dy;
      a.alpha = alpha;
      a.s = b.sum;
    }
  } else {
    a.dy = b.dy;
    a.saved_mean = ln ? b.ln_mean : nullptr;
    a.saved_rstd = ln ? b.ln_rstd : b.rms_rstd;
    a.dx = b.out;
    a.dgamma = pool.dgamma();
    a.dbeta = ln ? pool.dbeta() : nullptr;
  }
  return a;
}

int64_t pool_bytes(const NormShape& s, int64_t sets, bool with_sum) {
  return Pool::floats_needed(s, sets, with_sum) * 4;
}

}  // namespace detail

}  // namespace normlab::bench
