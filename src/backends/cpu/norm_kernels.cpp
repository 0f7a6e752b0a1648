// LayerNorm and RMSNorm kernels of the cpu backend, forward and backward, plus the fused
// residual-add + norm forwards (the math is in normlab/cpu_kernel_lab.h; the baselines that
// exist for comparison are in norm_baselines.cpp and onednn_layernorm.cpp):
//   *_fused      one pass over memory: x (and dy) read once, y (dx) written once, the rows
//                re-read from L1 by the later sweeps over them (tiles, below), vectorized
//                (simd.h) with the plain loop each sweep computes in a comment above it.
// Rows run in parallel (OpenMP) above a size threshold; each row's result does not depend on
// the thread that computes it. Parameter gradients (dgamma, dbeta) are summed per fixed block
// of rows, then over the blocks in order: no atomics, and the same bits for any thread count.
#include "normlab/cpu_kernel_lab.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "norm_stats.h"
#include "parallel.h"
#include "simd.h"
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

// ---- rows in L1 tiles, two phases ------------------------------------------------------------
//
// Each fused kernel has a statistics phase per row (one or two reductions over the row, whose
// latency - the adds of a reduction, a horizontal sum, a divide, a square root - is what a
// short row costs) and an apply phase (a sweep that writes the output). Rows are taken in tiles
// of ~8 KiB: first the statistics of every row of the tile, then the sweeps. The statistics of
// neighbouring rows do not depend on each other, so the out-of-order core overlaps their
// latencies (in L1, 512 rows of d 64 took 26 us one row at a time, 13-22 us in tiles); the tile is
// still in L1 when the apply phase re-reads it, so x comes from memory once. While it works
// out of L1, the apply phase prefetches the matching row of the next tile, so that the next
// statistics phase finds its rows on the way (the forward at 2048x1024 on one thread went from
// ~70% to ~85% of memcpy's bandwidth with it).

// From this row length on, the kernels pipeline rows instead of tiling them (the backward ones when
// dx is wanted): row i's sweep runs in the same loop as row i+1's statistics. Shorter rows keep the tiles, whose
// strength is overlapping many rows' statistics latencies.
constexpr int64_t kPipelineMinD = 256;

constexpr int64_t kTileFloats = 2048;  // 8 KiB: a tile of x (and dy) stays in a 32 KiB L1
constexpr int64_t kTileMaxRows = 64;   // bounds the tile's per-row scratch (on the stack)

inline int64_t tile_rows(int64_t d) {
  return std::clamp<int64_t>(kTileFloats / std::max<int64_t>(d, 1), 1, kTileMaxRows);
}

// Asks for the cache line of p + j (p: a row of the next tile, or nullptr past the end).
inline void prefetch_line(const float* p, int64_t j) {
#if defined(__GNUC__)
  if (p != nullptr && (j & 15) == 0) __builtin_prefetch(p + j);  // one request per 64-byte line
#else
  (void)p;
  (void)j;
#endif
}

// Row i of the next tile (rows ahead = the tile's height), or nullptr when that is past n.
inline const float* ahead(const float* base, int64_t i, int64_t n, int64_t d) {
  const int64_t k = i + tile_rows(d);
  return k < n ? base + k * d : nullptr;
}

// Rows [lo, hi) in tiles: stats(i, u, v) for every row of a tile, which leaves two numbers
// per row (u, v: mean and rstd, or the backward's two means), then apply(i, u, v).
template <class Stats, class Apply>
void for_tiles(int64_t lo, int64_t hi, int64_t d, Stats&& stats, Apply&& apply) {
  const int64_t rows = tile_rows(d);
  float u[kTileMaxRows] = {}, v[kTileMaxRows] = {};  // a kernel may leave v (or both) unused
  for (int64_t t0 = lo; t0 < hi; t0 += rows) {
    const int64_t t1 = std::min(hi, t0 + rows);
    for (int64_t i = t0; i < t1; ++i) stats(i, u[i - t0], v[i - t0]);
    for (int64_t i = t0; i < t1; ++i) apply(i, u[i - t0], v[i - t0]);
  }
}

// Forward kernels: rows split over threads, each thread's range in tiles.
template <class Stats, class Apply>
void for_rows_tiled(int64_t n, int64_t d, Stats&& stats, Apply&& apply) {
  parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) { for_tiles(lo, hi, d, stats, apply); });
}

// Backward kernels: rows in the fixed reduction blocks (RowBlocks), each block in tiles;
// apply gets the block, so that it can add to that block's parameter-gradient partials.
template <class Stats, class Apply>
void for_row_blocks_tiled(int64_t n, int64_t d, const RowBlocks& blocks, Stats&& stats,
                          Apply&& apply) {
  parallel_for(blocks.count, n * d, [&](int64_t b) {
    const int64_t lo = b * blocks.rows, hi = std::min(n, lo + blocks.rows);
    for_tiles(lo, hi, d, stats, [&](int64_t i, float u, float v) { apply(b, i, u, v, i == lo); });
  });
}

// Backward kernels for rows of d >= kPipelineMinD: rows in the same fixed blocks, and within a
// block row i's sweep runs alongside row i+1's statistics. stats_alone(i, u, v) computes row
// i's two statistics; stats_alongside(i, u, v, sweep) computes them while calling sweep(j, n)
// on every vector position (the same bits as stats_alone); sweep_of(b, i, u, v, first) makes
// row i's per-vector sweep.
template <class StatsAlone, class StatsAlongside, class SweepOf>
void for_row_blocks_pipelined(int64_t n, int64_t d, const RowBlocks& blocks, StatsAlone&& stats_alone,
                              StatsAlongside&& stats_alongside, SweepOf&& sweep_of) {
  parallel_for(blocks.count, n * d, [&](int64_t b) {
    const int64_t lo = b * blocks.rows, hi = std::min(n, lo + blocks.rows);
    float u = 0.0f, v = 0.0f;
    stats_alone(lo, u, v);
    for (int64_t i = lo; i < hi; ++i) {
      auto sweep = sweep_of(b, i, u, v, i == lo);
      if (i + 1 < hi)
        stats_alongside(i + 1, u, v, sweep);
      else
        row_for(d, sweep);
    }
  });
}

// ---- the row math: one definition of each statistic's terms and of each sweep -----------------
// Each factory returns the function of a vector position (j, lanes) that row_reduce,
// row_reduce2, their *_alongside forms or row_for apply to a row; the tiled and the pipelined
// kernels call the same ones, and every final statistic goes through mean_from / rstd_from
// (norm_stats.h), so both paths give the same bits whatever the compiler contracts into FMAs.

// for j: s += x[j] - x0
inline auto shifted_terms(const float* x) {
  const VF v0 = set1(x[0]);
  return [x, v0](int64_t j, int64_t n) { return load_n(x + j, n) - v0; };
}

// for j: ss += (x[j]-mu)^2   (centred: E[x^2]-mu^2 cancels when |mu| >> std)
inline auto centred_sq_terms(const float* x, float mu) {
  const VF vmu = set1(mu);
  return [x, vmu](int64_t j, int64_t n) {
    VF c = load_n(x + j, n) - vmu;
    return c * c;
  };
}

// for j: ss += x[j]^2
inline auto sq_terms(const float* x) {
  return [x](int64_t j, int64_t n) {
    VF v = load_n(x + j, n);
    return v * v;
  };
}

// for j: y[j] = (x[j]-mu)*rs*gamma[j] + beta[j]
inline auto layernorm_out(float* y, const float* x, const float* gamma, const float* beta, float mu, float rs) {
  const VF vmu = set1(mu), vrs = set1(rs);
  return [=](int64_t j, int64_t n) {
    VF xhat = (load_n(x + j, n) - vmu) * vrs;
    store_n(y + j, fmadd(xhat, load_n(gamma + j, n), load_n(beta + j, n)), n);
  };
}

// for j: y[j] = x[j]*rs*gamma[j]
inline auto rmsnorm_out(float* y, const float* x, const float* gamma, float rs) {
  const VF vrs = set1(rs);
  return [=](int64_t j, int64_t n) { store_n(y + j, load_n(x + j, n) * vrs * load_n(gamma + j, n), n); };
}

// LayerNorm backward statistics: with xhat = (x-mu)*rs and g = dy*gamma, mg = sum(g)/d and
// mgx = sum(g*xhat)/d.
// for j: g = dy[j]*gamma[j]; sg += g; sgx += g*(x[j]-mu)*rs
inline auto layernorm_grad_terms(const float* dy, const float* x, const float* gamma, float mu, float rs) {
  const VF vmu = set1(mu), vrs = set1(rs);
  return [=](int64_t j, int64_t n, VF& u, VF& v) {
    VF g = load_n(dy + j, n) * load_n(gamma + j, n);
    VF xhat = (load_n(x + j, n) - vmu) * vrs;
    u = u + g;
    v = fmadd(g, xhat, v);
  };
}

// dx (nullable) and the block partials dgp, dbp (nullable).
// for j: xhat = (x[j]-mu)*rs; dx[j] = rs*(dy[j]*gamma[j] - mg - xhat*mgx);
//        dgp[j] += dy[j]*xhat; dbp[j] += dy[j]
inline auto layernorm_grad_out(float* dx, float* dgp, float* dbp, const float* dy, const float* x,
                               const float* gamma, float mu, float rs, float mg, float mgx) {
  const VF vmu = set1(mu), vrs = set1(rs), vmg = set1(mg), vmgx = set1(mgx);
  return [=](int64_t j, int64_t n) {
    VF dyv = load_n(dy + j, n);
    VF xhat = (load_n(x + j, n) - vmu) * vrs;
    if (dx) store_n(dx + j, vrs * fnmadd(xhat, vmgx, dyv * load_n(gamma + j, n) - vmg), n);
    if (dgp) store_n(dgp + j, fmadd(dyv, xhat, load_n(dgp + j, n)), n);
    if (dbp) store_n(dbp + j, load_n(dbp + j, n) + dyv, n);
  };
}

// RMSNorm backward statistic: mgx = sum(dy*gamma*x*rs)/d.
// for j: sgx += dy[j]*gamma[j]*x[j]*rs
inline auto rmsnorm_grad_terms(const float* dy, const float* x, const float* gamma, float rs) {
  const VF vrs = set1(rs);
  return [=](int64_t j, int64_t n) { return load_n(dy + j, n) * load_n(gamma + j, n) * (load_n(x + j, n) * vrs); };
}

// for j: xhat = x[j]*rs; dx[j] = rs*(dy[j]*gamma[j] - xhat*mgx); dgp[j] += dy[j]*xhat
inline auto rmsnorm_grad_out(float* dx, float* dgp, const float* dy, const float* x, const float* gamma, float rs,
                             float mgx) {
  const VF vrs = set1(rs), vmgx = set1(mgx);
  return [=](int64_t j, int64_t n) {
    VF dyv = load_n(dy + j, n);
    VF xhat = load_n(x + j, n) * vrs;
    if (dx) store_n(dx + j, vrs * fnmadd(xhat, vmgx, dyv * load_n(gamma + j, n)), n);
    if (dgp) store_n(dgp + j, fmadd(dyv, xhat, load_n(dgp + j, n)), n);
  };
}

// A sweep that also asks for the cache lines of rows next1 and next2 (nullable) on the way.
template <class F>
inline void sweep_prefetching(int64_t d, const F& f, const float* next1, const float* next2) {
  row_for(d, [&](int64_t j, int64_t n) {
    prefetch_line(next1, j);
    prefetch_line(next2, j);
    f(j, n);
  });
}

inline float centred_rstd(const float* x, float mu, int64_t d, float inv_d, float eps) {
  return rstd_from(row_reduce(d, centred_sq_terms(x, mu)), inv_d, eps);
}

// s = alpha*a + b, stored, and its mean on the way, shifted by s[0] as shifted_terms() is.
// s0 = alpha*a[0] + b[0]; for j: s[j] = alpha*a[j] + b[j]; sum += s[j] - s0
inline float add_row_mean(float* s, const float* a, const float* b, float alpha, int64_t d,
                          float inv_d) {
  const VF valpha = set1(alpha);
  const float s0 = std::fma(alpha, a[0], b[0]);  // as fmadd rounds it, so s[0] - s0 = 0
  const VF v0 = set1(s0);
  return mean_from(s0, row_reduce(d, [&](int64_t j, int64_t n) {
                     VF v = fmadd(valpha, load_n(a + j, n), load_n(b + j, n));
                     store_n(s + j, v, n);
                     return v - v0;
                   }),
                   inv_d);
}

// s = alpha*a + b, stored; returns sum(s^2).
// for j: s[j] = alpha*a[j] + b[j]; ss += s[j]^2
inline float add_row_sumsq(float* s, const float* a, const float* b, float alpha, int64_t d) {
  const VF valpha = set1(alpha);
  return row_reduce(d, [&](int64_t j, int64_t n) {
    VF v = fmadd(valpha, load_n(a + j, n), load_n(b + j, n));
    store_n(s + j, v, n);
    return v * v;
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

void layernorm_forward_fused(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                             const float* beta, int64_t n, int64_t d, float eps) {
  if (d <= 0) return;
  const float inv_d = 1.0f / float(d);
  auto finish_mean = [&](int64_t r, float sum) { return mean[r] = mean_from(x[r * d], sum, inv_d); };
  auto finish_rstd = [&](int64_t r, float ss) { return rstd[r] = rstd_from(ss, inv_d, eps); };
  if (d >= kPipelineMinD) {
    // Row i's output sweep runs in the loop that sums row i+1's mean (reading it from memory);
    // row i+1's centred variance is then a second sweep over it, from L1/L2. (A three-row version,
    // row i+2's mean and row i+1's variance both alongside row i's sweep, measured the same.)
    parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) {
      float mu = finish_mean(lo, row_reduce(d, shifted_terms(x + lo * d)));
      float rs = finish_rstd(lo, row_reduce(d, centred_sq_terms(x + lo * d, mu)));
      for (int64_t i = lo; i < hi; ++i) {
        auto apply = layernorm_out(y + i * d, x + i * d, gamma, beta, mu, rs);
        if (i + 1 < hi) {
          const float* next = x + (i + 1) * d;
          mu = finish_mean(i + 1, row_reduce_alongside(d, shifted_terms(next), apply));
          rs = finish_rstd(i + 1, row_reduce(d, centred_sq_terms(next, mu)));
        } else {
          row_for(d, apply);
        }
      }
    });
    return;
  }
  for_rows_tiled(
      n, d,
      [&](int64_t i, float& mu, float& rs) {
        mu = finish_mean(i, row_reduce(d, shifted_terms(x + i * d)));
        rs = finish_rstd(i, row_reduce(d, centred_sq_terms(x + i * d, mu)));
      },
      [&](int64_t i, float mu, float rs) {
        sweep_prefetching(d, layernorm_out(y + i * d, x + i * d, gamma, beta, mu, rs), ahead(x, i, n, d), nullptr);
      });
}

void layernorm_backward_fused(float* dx, float* dgamma, float* dbeta, const float* dy,
                              const float* x, const float* gamma, const float* mean,
                              const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (n <= 0) return zero_params(dgamma, dbeta, d);
  const RowBlocks blocks(n);
  Partials pg(blocks.count, d, dgamma != nullptr), pb(blocks.count, d, dbeta != nullptr);
  const float inv_d = 1.0f / float(d);
  auto terms = [&](int64_t i) { return layernorm_grad_terms(dy + i * d, x + i * d, gamma, mean[i], rstd[i]); };
  auto sweep_of = [&](int64_t b, int64_t i, float mg, float mgx, bool first_in_block) {
    float* dgp = pg.block(b, d);
    float* dbp = pb.block(b, d);
    if (first_in_block) zero_params(dgp, dbp, d);
    return layernorm_grad_out(dx ? dx + i * d : nullptr, dgp, dbp, dy + i * d, x + i * d, gamma, mean[i], rstd[i],
                              mg, mgx);
  };
  if (d >= kPipelineMinD && dx) {
    for_row_blocks_pipelined(
        n, d, blocks,
        [&](int64_t i, float& mg, float& mgx) {
          float sg = 0, sgx = 0;
          row_reduce2(d, sg, sgx, terms(i));
          mg = sg * inv_d;
          mgx = sgx * inv_d;
        },
        [&](int64_t i, float& mg, float& mgx, auto& sweep) {
          float sg = 0, sgx = 0;
          row_reduce2_alongside(d, sg, sgx, terms(i), sweep);
          mg = sg * inv_d;
          mgx = sgx * inv_d;
        },
        sweep_of);
  } else {
    for_row_blocks_tiled(
        n, d, blocks,
        [&](int64_t i, float& mg, float& mgx) {
          if (!dx) return;  // the parameter gradients need no row statistics
          float sg = 0, sgx = 0;
          row_reduce2(d, sg, sgx, terms(i));
          mg = sg * inv_d;
          mgx = sgx * inv_d;
        },
        [&](int64_t b, int64_t i, float mg, float mgx, bool first_in_block) {
          sweep_prefetching(d, sweep_of(b, i, mg, mgx, first_in_block), ahead(dy, i, n, d), ahead(x, i, n, d));
        });
  }
  sum_partials(dgamma, pg.p, blocks.count, d);
  sum_partials(dbeta, pb.p, blocks.count, d);
}

// The backend's LayerNorm: the fused kernel, forward and backward. Measured side by side
// (one thread, buffers rotated through 1 GiB, a 2-vCPU AMD EPYC guest with AVX2, GB/s as a
// share of memcpy's in the same run, three runs): at 8x256 rows of d 1024 the forward reached
// 95-103% against oneDNN 2.6's 78-84%, the backward 86-94% against 59-65%; at 512 rows of
// d 64 (the toy model) the forward is even (68% vs 71%) and the backward ahead (81% vs 74%).
// The fused forward is also the more accurate on rows far from zero (shifted mean; the test
// CpuNormKernels.ConstantRowsAndLargeMean). layernorm_*_onednn and *_multipass (norm_baselines.cpp)
// stay for the benchmark and as cross-checks in the tests.
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
  const float inv_d = 1.0f / float(d);
  auto finish_rstd = [&](int64_t r, float ss) { return rstd[r] = rstd_from(ss, inv_d, eps); };
  if (d >= kPipelineMinD) {
    // Row i's output sweep runs inside row i+1's sum of squares (see row_reduce_alongside).
    parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) {
      float ss = row_reduce(d, sq_terms(x + lo * d));
      for (int64_t i = lo; i < hi; ++i) {
        auto apply = rmsnorm_out(y + i * d, x + i * d, gamma, finish_rstd(i, ss));
        if (i + 1 < hi)
          ss = row_reduce_alongside(d, sq_terms(x + (i + 1) * d), apply);
        else
          row_for(d, apply);
      }
    });
    return;
  }
  for_rows_tiled(
      n, d, [&](int64_t i, float& rs, float&) { rs = finish_rstd(i, row_reduce(d, sq_terms(x + i * d))); },
      [&](int64_t i, float rs, float) {
        sweep_prefetching(d, rmsnorm_out(y + i * d, x + i * d, gamma, rs), ahead(x, i, n, d), nullptr);
      });
}

void rmsnorm_backward_fused(float* dx, float* dgamma, const float* dy, const float* x,
                            const float* gamma, const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (n <= 0) return zero_params(dgamma, nullptr, d);
  const RowBlocks blocks(n);
  Partials pg(blocks.count, d, dgamma != nullptr);
  const float inv_d = 1.0f / float(d);
  auto terms = [&](int64_t i) { return rmsnorm_grad_terms(dy + i * d, x + i * d, gamma, rstd[i]); };
  auto sweep_of = [&](int64_t b, int64_t i, float mgx, float, bool first_in_block) {
    float* dgp = pg.block(b, d);
    if (first_in_block) zero_params(dgp, nullptr, d);
    return rmsnorm_grad_out(dx ? dx + i * d : nullptr, dgp, dy + i * d, x + i * d, gamma, rstd[i], mgx);
  };
  if (d >= kPipelineMinD && dx) {
    for_row_blocks_pipelined(
        n, d, blocks, [&](int64_t i, float& mgx, float&) { mgx = row_reduce(d, terms(i)) * inv_d; },
        [&](int64_t i, float& mgx, float&, auto& sweep) { mgx = row_reduce_alongside(d, terms(i), sweep) * inv_d; },
        sweep_of);
  } else {
    for_row_blocks_tiled(
        n, d, blocks,
        [&](int64_t i, float& mgx, float&) {
          if (dx) mgx = row_reduce(d, terms(i)) * inv_d;
        },
        [&](int64_t b, int64_t i, float mgx, float u, bool first_in_block) {
          sweep_prefetching(d, sweep_of(b, i, mgx, u, first_in_block), ahead(dy, i, n, d), ahead(x, i, n, d));
        });
  }
  sum_partials(dgamma, pg.p, blocks.count, d);
}

// The backend's RMSNorm: the fused kernel (oneDNN 2.6 has none), forward and backward; measured
// against the multipass baseline and PyTorch in results/bench-cpu.md. rmsnorm_*_multipass
// (norm_baselines.cpp) stay for the benchmark and as cross-checks in the tests.
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int64_t n, int64_t d,
                     float eps) {
  rmsnorm_forward_fused(y, rstd, x, gamma, n, d, eps);
}

void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                      const float* rstd, int64_t n, int64_t d) {
  rmsnorm_backward_fused(dx, dgamma, dy, x, gamma, rstd, n, d);
}

// ==== fused residual add + norm ================================================================

// The statistics phase computes and stores s (a and b from memory, s into L1) with its mean,
// then the centred variance from s in L1; the apply phase normalizes s from L1.
void add_layernorm_forward_fused(float* s, float* y, float* mean, float* rstd, const float* a,
                                 const float* b, float alpha, const float* gamma, const float* beta,
                                 int64_t n, int64_t d, float eps) {
  if (d <= 0) return;
  const float inv_d = 1.0f / float(d);
  for_rows_tiled(
      n, d,
      [&](int64_t i, float& mu, float& rs) {
        float* sr = s + i * d;
        mu = mean[i] = add_row_mean(sr, a + i * d, b + i * d, alpha, d, inv_d);
        rs = rstd[i] = centred_rstd(sr, mu, d, inv_d, eps);
      },
      [&](int64_t i, float mu, float rs) {
        sweep_prefetching(d, layernorm_out(y + i * d, s + i * d, gamma, beta, mu, rs), ahead(a, i, n, d),
                          ahead(b, i, n, d));
      });
}

void add_rmsnorm_forward_fused(float* s, float* y, float* rstd, const float* a, const float* b,
                               float alpha, const float* gamma, int64_t n, int64_t d, float eps) {
  if (d <= 0) return;
  const float inv_d = 1.0f / float(d);
  for_rows_tiled(
      n, d,
      [&](int64_t i, float& rs, float&) {
        rs = rstd[i] = rstd_from(add_row_sumsq(s + i * d, a + i * d, b + i * d, alpha, d), inv_d, eps);
      },
      [&](int64_t i, float rs, float) {
        sweep_prefetching(d, rmsnorm_out(y + i * d, s + i * d, gamma, rs), ahead(a, i, n, d), ahead(b, i, n, d));
      });
}

}  // namespace normlab::cpu
