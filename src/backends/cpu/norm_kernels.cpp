// LayerNorm and RMSNorm kernels of the cpu backend, forward and backward, plus the fused
// residual-add + norm forwards (the math is in norm_kernels.h):
//   *_multipass  the naive baseline: one sweep over the whole tensor per step, plain loops;
//   *_fused      one pass per row: x (and dy) read from memory once, y (dx) written once, the
//                row re-read from L1/L2 by the later sweeps over it, vectorized (simd.h).
// Rows run in parallel (OpenMP) above a size threshold; each row's result does not depend on
// the thread that computes it. Parameter gradients (dgamma, dbeta) are summed per fixed block
// of rows, then over the blocks in order: no atomics, and the same bits for any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/norm_kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"
#include "normlab/tensor.h"

namespace normlab::cpu {

namespace {

using namespace simd;

// ---- parameter-gradient reduction over rows ---------------------------------------------------

// At most this many blocks of rows: enough to keep 16+ threads busy, few enough that summing
// the per-block partials (blocks x D) stays small next to the rows (N x D).
constexpr int64_t kMaxRowBlocks = 32;

struct RowBlocks {
  int64_t count = 0, rows = 0;  // blocks, rows per block (the last may have fewer)
  explicit RowBlocks(int64_t n) {
    rows = std::max<int64_t>(1, (n + kMaxRowBlocks - 1) / kMaxRowBlocks);
    count = (n + rows - 1) / rows;
  }
};

// out[j] = sum over blocks b (in order) of partial[b*d + j]; out may be nullptr (not wanted).
// for j: out[j] = 0; for b: out[j] += partial[b*d + j]
void sum_partials(float* out, const float* partial, int64_t blocks, int64_t d) {
  if (!out) return;
  parallel_chunks(
      d, blocks * d,
      [&](int64_t lo, int64_t hi) {
        row_for(hi - lo, [&](int64_t j, int64_t n) {
          VF acc = zero();
          for (int64_t b = 0; b < blocks; ++b) acc = acc + load_n(partial + b * d + lo + j, n);
          store_n(out + lo + j, acc, n);
        });
      },
      kWidth);
}

// Workspace for the per-block partial sums, from the arena (no allocation in the steady state).
struct Partials {
  Tensor buf;
  float* p = nullptr;
  Partials(int64_t blocks, int64_t d, bool wanted) {
    if (!wanted) return;
    buf = Tensor::empty({blocks, d});
    p = buf.data<float>();
  }
  float* block(int64_t b, int64_t d) const { return p ? p + b * d : nullptr; }
};

// ---- one row, fused ---------------------------------------------------------------------------

// Asks for the cache line of p + j (p: the next row, or nullptr on the last). The fused kernels
// call it from the sweeps that work out of L1, so that the next row streams in meanwhile
// instead of after: +20% on the forward (12.7 -> 15.6 GB/s, 2048x1024, one thread).
inline void prefetch_next(const float* p, int64_t j) {
#if defined(__GNUC__)
  if (p != nullptr && (j & 15) == 0) __builtin_prefetch(p + j);  // one request per 64-byte line
#else
  (void)p;
  (void)j;
#endif
}

// What to prefetch while row i is in L1: the row at least kPrefetchAhead floats further on
// (the next row when rows are long; 16 rows on when d = 64, so that the requests go out a
// memory latency early), or nullptr when that is past the end.
constexpr int64_t kPrefetchAhead = 1024;
inline const float* next_row(const float* base, int64_t i, int64_t n, int64_t d) {
  const int64_t rows_ahead = std::max<int64_t>(1, kPrefetchAhead / std::max<int64_t>(d, 1));
  return i + rows_ahead < n ? base + (i + rows_ahead) * d : nullptr;
}

// mean(x) = x0 + sum(x - x0)/d with x0 = x[0]: a row far from 0 (|mean| >> std) would
// otherwise be summed as large numbers, each addition rounding at their scale (a row of 1000
// floats near 1000 sums to 1e6, where a float's step is 0.06); the shifted terms are small and
// x - x0 is exact for values within a factor 2 of each other.
// for j: s += x[j] - x0
inline float shifted_mean(const float* x, int64_t d) {
  const float x0 = x[0];
  const VF v0 = set1(x0);
  return x0 + row_reduce(d, [&](int64_t j, int64_t n) { return load_n(x + j, n) - v0; }) / float(d);
}

// mu = mean(x); var = sum((x-mu)^2)/d (centred: E[x^2]-mu^2 cancels when |mu| >> std);
// rstd = 1/sqrt(var + eps); y = (x-mu)*rstd*gamma + beta.
// The first sweep reads x from memory; the second and third find it in L1 (d <= 4096 floats
// is at most 16 KiB) or L2.
inline void layernorm_row(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                          const float* beta, int64_t d, float eps, const float* next) {
  const float mu = shifted_mean(x, d);
  const VF vmu = set1(mu);
  // for j: ss += (x[j]-mu)^2
  const float var = row_reduce(d, [&](int64_t j, int64_t n) {
                      prefetch_next(next, j);
                      VF c = load_n(x + j, n) - vmu;
                      return c * c;
                    }) / float(d);
  const float rs = 1.0f / std::sqrt(var + eps);
  const VF vrs = set1(rs);
  // for j: y[j] = (x[j]-mu)*rs*gamma[j] + beta[j]
  row_for(d, [&](int64_t j, int64_t n) {
    VF xhat = (load_n(x + j, n) - vmu) * vrs;
    store_n(y + j, fmadd(xhat, load_n(gamma + j, n), load_n(beta + j, n)), n);
  });
  *mean = mu;
  *rstd = rs;
}

// rstd = 1/sqrt(sum(x^2)/d + eps); y = x*rstd*gamma.
inline void rmsnorm_row(float* y, float* rstd, const float* x, const float* gamma, int64_t d,
                        float eps, const float* next) {
  // for j: ss += x[j]^2
  const float ms = row_reduce(d, [&](int64_t j, int64_t n) {
                     VF v = load_n(x + j, n);
                     return v * v;
                   }) / float(d);
  const float rs = 1.0f / std::sqrt(ms + eps);
  const VF vrs = set1(rs);
  // for j: y[j] = x[j]*rs*gamma[j]
  row_for(d, [&](int64_t j, int64_t n) {
    prefetch_next(next, j);
    store_n(y + j, load_n(x + j, n) * vrs * load_n(gamma + j, n), n);
  });
  *rstd = rs;
}

// One row of the LayerNorm backward; dx (row) and the block partials dgp/dbp each nullable.
//   xhat = (x-mu)*rs; g = dy*gamma
//   mg = sum(g)/d; mgx = sum(g*xhat)/d                        (first sweep: dy, x from memory)
//   dx = rs*(g - mg - xhat*mgx); dgp += dy*xhat; dbp += dy     (second sweep: from L1)
inline void layernorm_backward_row(float* dx, float* dgp, float* dbp, const float* dy,
                                   const float* x, const float* gamma, float mu, float rs,
                                   int64_t d, const float* next_dy, const float* next_x) {
  const VF vmu = set1(mu), vrs = set1(rs);
  VF vmg = zero(), vmgx = zero();
  if (dx) {
    float sg = 0.0f, sgx = 0.0f;
    // for j: g = dy[j]*gamma[j]; sg += g; sgx += g*(x[j]-mu)*rs
    row_reduce2(d, sg, sgx, [&](int64_t j, int64_t n, VF& u, VF& v) {
      VF g = load_n(dy + j, n) * load_n(gamma + j, n);
      VF xhat = (load_n(x + j, n) - vmu) * vrs;
      u = u + g;
      v = fmadd(g, xhat, v);
    });
    vmg = set1(sg / float(d));
    vmgx = set1(sgx / float(d));
  }
  row_for(d, [&](int64_t j, int64_t n) {
    prefetch_next(next_dy, j);
    prefetch_next(next_x, j);
    VF dyv = load_n(dy + j, n);
    VF xhat = (load_n(x + j, n) - vmu) * vrs;
    if (dx) {
      VF g = dyv * load_n(gamma + j, n);
      store_n(dx + j, vrs * fnmadd(xhat, vmgx, g - vmg), n);
    }
    if (dgp) store_n(dgp + j, fmadd(dyv, xhat, load_n(dgp + j, n)), n);
    if (dbp) store_n(dbp + j, load_n(dbp + j, n) + dyv, n);
  });
}

// One row of the RMSNorm backward: as LayerNorm without the mean.
//   xhat = x*rs; g = dy*gamma; mgx = sum(g*xhat)/d; dx = rs*(g - xhat*mgx); dgp += dy*xhat
inline void rmsnorm_backward_row(float* dx, float* dgp, const float* dy, const float* x,
                                 const float* gamma, float rs, int64_t d, const float* next_dy,
                                 const float* next_x) {
  const VF vrs = set1(rs);
  VF vmgx = zero();
  if (dx) {
    // for j: sgx += dy[j]*gamma[j]*x[j]*rs
    const float sgx = row_reduce(d, [&](int64_t j, int64_t n) {
      return load_n(dy + j, n) * load_n(gamma + j, n) * (load_n(x + j, n) * vrs);
    });
    vmgx = set1(sgx / float(d));
  }
  row_for(d, [&](int64_t j, int64_t n) {
    prefetch_next(next_dy, j);
    prefetch_next(next_x, j);
    VF dyv = load_n(dy + j, n);
    VF xhat = load_n(x + j, n) * vrs;
    if (dx) store_n(dx + j, vrs * fnmadd(xhat, vmgx, dyv * load_n(gamma + j, n)), n);
    if (dgp) store_n(dgp + j, fmadd(dyv, xhat, load_n(dgp + j, n)), n);
  });
}

// s = alpha*a + b, stored, and its mean on the way (the first sweep of the norm, fused),
// shifted by s[0] as shifted_mean() is.
// s0 = alpha*a[0] + b[0]; for j: s[j] = alpha*a[j] + b[j]; sum += s[j] - s0
inline float add_row_mean(float* s, const float* a, const float* b, float alpha, int64_t d) {
  const VF valpha = set1(alpha);
  const float s0 = std::fma(alpha, a[0], b[0]);  // as fmadd rounds it, so s[0] - s0 = 0
  const VF v0 = set1(s0);
  return s0 + row_reduce(d, [&](int64_t j, int64_t n) {
                VF v = fmadd(valpha, load_n(a + j, n), load_n(b + j, n));
                store_n(s + j, v, n);
                return v - v0;
              }) / float(d);
}

// Runs row_fn(i) for rows [0, n) in parallel (above the threshold).
template <class F>
void for_rows(int64_t n, int64_t d, F&& row_fn) {
  parallel_for(n, n * d, row_fn);
}

// Backward driver: rows grouped in fixed blocks, each block's rows in order into its partials.
template <class F>
void for_row_blocks(int64_t n, int64_t d, const RowBlocks& blocks, F&& row_fn) {
  parallel_for(blocks.count, n * d, [&](int64_t b) {
    const int64_t lo = b * blocks.rows, hi = std::min(n, lo + blocks.rows);
    for (int64_t i = lo; i < hi; ++i) row_fn(b, i, i == lo);
  });
}

void zero_params(float* a, float* b, int64_t d) {
  for (int64_t j = 0; j < d; ++j) {
    if (a) a[j] = 0.0f;
    if (b) b[j] = 0.0f;
  }
}

}  // namespace

// ==== LayerNorm ================================================================================

void layernorm_forward_fused(float* y, float* mean, float* rstd, const float* x,
                             const float* gamma, const float* beta, int64_t n, int64_t d,
                             float eps) {
  if (d <= 0) return;
  for_rows(n, d, [&](int64_t i) {
    layernorm_row(y + i * d, mean + i, rstd + i, x + i * d, gamma, beta, d, eps,
                  next_row(x, i, n, d));
  });
}

// Three sweeps over the whole tensor, as a first version would be written.
void layernorm_forward_multipass(float* y, float* mean, float* rstd, const float* x,
                                 const float* gamma, const float* beta, int64_t n, int64_t d,
                                 float eps) {
  if (d <= 0) return;
  for_rows(n, d, [&](int64_t i) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; ++j) s += x[i * d + j];
    mean[i] = s / float(d);
  });
  for_rows(n, d, [&](int64_t i) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; ++j) s += (x[i * d + j] - mean[i]) * (x[i * d + j] - mean[i]);
    rstd[i] = 1.0f / std::sqrt(s / float(d) + eps);
  });
  for_rows(n, d, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j)
      y[i * d + j] = (x[i * d + j] - mean[i]) * rstd[i] * gamma[j] + beta[j];
  });
}

void layernorm_backward_fused(float* dx, float* dgamma, float* dbeta, const float* dy,
                              const float* x, const float* gamma, const float* mean,
                              const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (n <= 0) return zero_params(dgamma, dbeta, d);
  const RowBlocks blocks(n);
  Partials pg(blocks.count, d, dgamma != nullptr), pb(blocks.count, d, dbeta != nullptr);
  for_row_blocks(n, d, blocks, [&](int64_t b, int64_t i, bool first_in_block) {
    float* dgp = pg.block(b, d);
    float* dbp = pb.block(b, d);
    if (first_in_block) zero_params(dgp, dbp, d);
    layernorm_backward_row(dx ? dx + i * d : nullptr, dgp, dbp, dy + i * d, x + i * d, gamma,
                           mean[i], rstd[i], d, next_row(dy, i, n, d), next_row(x, i, n, d));
  });
  sum_partials(dgamma, pg.p, blocks.count, d);
  sum_partials(dbeta, pb.p, blocks.count, d);
}

// Sweeps over the whole tensor: the row means of g and g*xhat, then dx, then the parameter
// gradients column by column.
void layernorm_backward_multipass(float* dx, float* dgamma, float* dbeta, const float* dy,
                                  const float* x, const float* gamma, const float* mean,
                                  const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (dx) {
    std::vector<float> mg(static_cast<size_t>(n)), mgx(static_cast<size_t>(n));
    for_rows(n, d, [&](int64_t i) {
      float sg = 0.0f, sgx = 0.0f;
      for (int64_t j = 0; j < d; ++j) {
        float g = dy[i * d + j] * gamma[j];
        sg += g;
        sgx += g * (x[i * d + j] - mean[i]) * rstd[i];
      }
      mg[static_cast<size_t>(i)] = sg / float(d);
      mgx[static_cast<size_t>(i)] = sgx / float(d);
    });
    for_rows(n, d, [&](int64_t i) {
      for (int64_t j = 0; j < d; ++j) {
        float xhat = (x[i * d + j] - mean[i]) * rstd[i];
        dx[i * d + j] = rstd[i] * (dy[i * d + j] * gamma[j] - mg[static_cast<size_t>(i)] -
                                   xhat * mgx[static_cast<size_t>(i)]);
      }
    });
  }
  if (dgamma || dbeta) {
    // Threads own column ranges and walk the rows in order (a column at a time would stride
    // through memory d floats per step).
    parallel_chunks(d, n * d, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        if (dgamma) dgamma[j] = 0.0f;
        if (dbeta) dbeta[j] = 0.0f;
      }
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = lo; j < hi; ++j) {
          if (dgamma) dgamma[j] += dy[i * d + j] * (x[i * d + j] - mean[i]) * rstd[i];
          if (dbeta) dbeta[j] += dy[i * d + j];
        }
      }
    });
  }
}

// Measured on the development machine (bench_norms, 8x256 rows, d 1024, 1 thread): the fused
// kernels beat oneDNN 2.6's simple_layer_normalization forward and backward, so the backend
// uses them; layernorm_*_onednn stay for the benchmark and as a cross-check in the tests.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int64_t n, int64_t d, float eps) {
  layernorm_forward_fused(y, mean, rstd, x, gamma, beta, n, d, eps);
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t n,
                        int64_t d) {
  layernorm_backward_fused(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, n, d);
}

// ==== RMSNorm ==================================================================================

void rmsnorm_forward_fused(float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                           int64_t d, float eps) {
  if (d <= 0) return;
  for_rows(n, d, [&](int64_t i) {
    rmsnorm_row(y + i * d, rstd + i, x + i * d, gamma, d, eps, next_row(x, i, n, d));
  });
}

void rmsnorm_forward_multipass(float* y, float* rstd, const float* x, const float* gamma,
                               int64_t n, int64_t d, float eps) {
  if (d <= 0) return;
  for_rows(n, d, [&](int64_t i) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; ++j) s += x[i * d + j] * x[i * d + j];
    rstd[i] = 1.0f / std::sqrt(s / float(d) + eps);
  });
  for_rows(n, d, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * rstd[i] * gamma[j];
  });
}

void rmsnorm_backward_fused(float* dx, float* dgamma, const float* dy, const float* x,
                            const float* gamma, const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (n <= 0) return zero_params(dgamma, nullptr, d);
  const RowBlocks blocks(n);
  Partials pg(blocks.count, d, dgamma != nullptr);
  for_row_blocks(n, d, blocks, [&](int64_t b, int64_t i, bool first_in_block) {
    float* dgp = pg.block(b, d);
    if (first_in_block) zero_params(dgp, nullptr, d);
    rmsnorm_backward_row(dx ? dx + i * d : nullptr, dgp, dy + i * d, x + i * d, gamma, rstd[i], d,
                         next_row(dy, i, n, d), next_row(x, i, n, d));
  });
  sum_partials(dgamma, pg.p, blocks.count, d);
}

void rmsnorm_backward_multipass(float* dx, float* dgamma, const float* dy, const float* x,
                                const float* gamma, const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (dx) {
    std::vector<float> mgx(static_cast<size_t>(n));
    for_rows(n, d, [&](int64_t i) {
      float s = 0.0f;
      for (int64_t j = 0; j < d; ++j) s += dy[i * d + j] * gamma[j] * x[i * d + j] * rstd[i];
      mgx[static_cast<size_t>(i)] = s / float(d);
    });
    for_rows(n, d, [&](int64_t i) {
      for (int64_t j = 0; j < d; ++j)
        dx[i * d + j] = rstd[i] * (dy[i * d + j] * gamma[j] -
                                   x[i * d + j] * rstd[i] * mgx[static_cast<size_t>(i)]);
    });
  }
  if (dgamma) {
    parallel_chunks(d, n * d, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) dgamma[j] = 0.0f;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = lo; j < hi; ++j) dgamma[j] += dy[i * d + j] * x[i * d + j] * rstd[i];
    });
  }
}

// ==== fused residual add + norm ================================================================

void add_layernorm_forward_fused(float* s, float* y, float* mean, float* rstd, const float* a,
                                 const float* b, float alpha, const float* gamma,
                                 const float* beta, int64_t n, int64_t d, float eps) {
  if (d <= 0) return;
  for_rows(n, d, [&](int64_t i) {
    float* sr = s + i * d;
    const float mu = add_row_mean(sr, a + i * d, b + i * d, alpha, d);
    const VF vmu = set1(mu);
    // for j: ss += (s[j]-mu)^2           (s is in L1: it was just written)
    const float* next_a = next_row(a, i, n, d);
    const float* next_b = next_row(b, i, n, d);
    const float var = row_reduce(d, [&](int64_t j, int64_t nl) {
                        prefetch_next(next_a, j);
                        VF c = load_n(sr + j, nl) - vmu;
                        return c * c;
                      }) / float(d);
    const float rs = 1.0f / std::sqrt(var + eps);
    const VF vrs = set1(rs);
    float* yr = y + i * d;
    // for j: y[j] = (s[j]-mu)*rs*gamma[j] + beta[j]
    row_for(d, [&](int64_t j, int64_t nl) {
      prefetch_next(next_b, j);
      VF xhat = (load_n(sr + j, nl) - vmu) * vrs;
      store_n(yr + j, fmadd(xhat, load_n(gamma + j, nl), load_n(beta + j, nl)), nl);
    });
    mean[i] = mu;
    rstd[i] = rs;
  });
}

void add_rmsnorm_forward_fused(float* s, float* y, float* rstd, const float* a, const float* b,
                               float alpha, const float* gamma, int64_t n, int64_t d, float eps) {
  if (d <= 0) return;
  const VF valpha = set1(alpha);
  for_rows(n, d, [&](int64_t i) {
    float* sr = s + i * d;
    const float* ar = a + i * d;
    const float* br = b + i * d;
    // for j: s[j] = alpha*a[j] + b[j]; ss += s[j]^2
    const float ms = row_reduce(d, [&](int64_t j, int64_t nl) {
                       VF v = fmadd(valpha, load_n(ar + j, nl), load_n(br + j, nl));
                       store_n(sr + j, v, nl);
                       return v * v;
                     }) / float(d);
    const float rs = 1.0f / std::sqrt(ms + eps);
    const VF vrs = set1(rs);
    float* yr = y + i * d;
    const float* next_a = next_row(a, i, n, d);
    const float* next_b = next_row(b, i, n, d);
    // for j: y[j] = s[j]*rs*gamma[j]
    row_for(d, [&](int64_t j, int64_t nl) {
      prefetch_next(next_a, j);
      prefetch_next(next_b, j);
      store_n(yr + j, load_n(sr + j, nl) * vrs * load_n(gamma + j, nl), nl);
    });
    rstd[i] = rs;
  });
}

}  // namespace normlab::cpu
