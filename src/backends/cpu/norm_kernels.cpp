// LayerNorm and RMSNorm kernels of the cpu backend, forward and backward, plus the fused
// residual-add + norm forwards (the math is in normlab/cpu_kernels.h; the baselines that
// exist for comparison are in norm_baselines.cpp and onednn_layernorm.cpp):
//   *_onepass, add_*_fused (the residual add and the norm in one kernel)
//                one pass over memory: x (and dy) read once, y (dx) written once, the rows
//                re-read from L1 by the later sweeps over them (tiles, below), vectorized
//                (simd.h) with the plain loop each sweep computes in a comment above it.
// Rows run in parallel (OpenMP) above a size threshold; each row's result does not depend on
// the thread that computes it. Parameter gradients (dgamma, dbeta) are summed per fixed block
// of rows, then over the blocks in order: no atomics, and the same bits for any thread count.
#include "normlab/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "norm_stats.h"
#include "parallel.h"
#include "simd.h"
#include "normlab/error.h"
#include "normlab/tensor.h"

// The tests compile this file once more for each instruction set (CMakeLists.txt), every
// definition of it in the namespace normlab::cpu::NORMLAB_KERNEL_ISA_NS, so that those builds and
// the library's link into one program; calls with a NormVariant argument name their namespace
// (self::), since argument-dependent lookup would also find cpu_kernels.h's declarations in
// normlab::cpu and the call would be ambiguous there. The library's own build is normlab::cpu.
#if defined(NORMLAB_KERNEL_ISA_NS)
#define NORMLAB_NORM_KERNELS_NS normlab::cpu::NORMLAB_KERNEL_ISA_NS
#else
#define NORMLAB_NORM_KERNELS_NS normlab::cpu
#endif

namespace NORMLAB_NORM_KERNELS_NS {

namespace {

namespace self = ::NORMLAB_NORM_KERNELS_NS;
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

// Each thread's share of a kernel is one function with everything it calls inlined into it: the
// row math is lambdas passed through several layers, and where GCC's inliner stopped short of
// that on its own, the per-vector loops reloaded their pointers from the stack (one kernel
// changed by 20-37% with unrelated edits elsewhere in this file).
#if defined(__GNUC__)
#define NORMLAB_FLATTEN __attribute__((flatten))
#else
#define NORMLAB_FLATTEN
#endif

// ---- rows in L1 tiles, two phases ------------------------------------------------------------
//
// Each one-pass kernel has a statistics phase per row (one or two reductions over the row, whose
// latency - the adds of a reduction, a horizontal sum, a divide, a square root - is what a
// short row costs) and an apply phase (a sweep that writes the output). Rows are taken in tiles
// of ~8 KiB: first the statistics of every row of the tile, kWidth rows at a time with one
// transposing sum across their lanes (group_sums), then the sweeps. The statistics of
// neighbouring rows do not depend on each other, so the out-of-order core overlaps their
// latencies (in L1, 512 rows of d 64 took 26 us one row at a time, 13-22 us in tiles); the tile is
// still in L1 when the apply phase re-reads it, so x comes from memory once. The tiles leave
// memory to the hardware prefetcher: asking for the next tile's rows during the apply phase
// (which had paid off when rows of 1024 were tiled) measured mixed on Zen 4 for the short rows
// tiled now (64x512x64 and 32x512x128 memory-bound, one thread: the LayerNorm forward 57-58% of
// the copy loop with it against 47-52% without, the RMSNorm add + norm forward 77-80% against
// 91-102%, the backwards even; resident rows within the noise).

// Which of the two ways a kernel walks its rows (tiles, or rows pipelined: row i's sweep in the
// same loop as row i+1's statistics), the tile's size, how far ahead the pipelined kernels
// prefetch and whether the output streams is the NormVariant each call runs with, chosen by
// measuring the candidates on the machine (norm_tuning.cpp). Tiles overlap many short rows'
// statistics latencies; the pipeline interleaves loads and stores of long rows as a copy loop does.

constexpr int64_t kTileMaxRows = 64;  // bounds the tile's per-row scratch (on the stack)

// tile_floats (8 KiB by default: a tile of x and dy stays in a 32 KiB L1) as whole rows.
inline int64_t tile_rows(int64_t d, int64_t tile_floats) {
  return std::clamp<int64_t>(tile_floats / std::max<int64_t>(d, 1), 1, kTileMaxRows);
}

// Asks for the cache line of p + j (p: a row ahead, or nullptr past the end).
inline void prefetch_line(const float* p, int64_t j) {
#if defined(__GNUC__)
  if (p != nullptr && (j & 15) == 0) __builtin_prefetch(p + j);  // one request per 64-byte line
#else
  (void)p;
  (void)j;
#endif
}


// f, which also asks for the cache lines of rows next1 and next2 (nullable) on the way.
template <class F>
inline auto prefetching(const F& f, const float* next1, const float* next2) {
  return [&f, next1, next2](int64_t j, int64_t n) {
    prefetch_line(next1, j);
    prefetch_line(next2, j);
    f(j, n);
  };
}

// Row i + ahead of [., hi), or nullptr (ahead 0: no prefetch): what the pipelined kernels
// prefetch while they sweep row i and sum row i + 1. Whether it pays depends on the CPU and the
// row length: on Zen 4 at 32x1024x4096, 2 threads, row i+2 took the LayerNorm forward from
// 95-105% of the copy loop to 125-150%, while at d 512-1024 on one thread it cost 5-15 points
// (the hardware prefetcher keeps up alone there, and the extra requests compete with it); a
// Zen 1 guest ran the d 4096 forward 3x slower than a copy. So it is a measured choice.
inline const float* ahead_row(const float* base, int64_t i, int64_t hi, int64_t d, int64_t ahead) {
  if (ahead <= 0 || base == nullptr) return nullptr;
  return i + ahead < hi ? base + (i + ahead) * d : nullptr;
}

// Pipelined forward kernels, rows split over threads: row i's output sweep runs
// in the loop that computes row i+1's statistics (reading that row from memory), so that loads
// from memory, loads from L1/L2 and stores interleave as in a copy loop, and it prefetches row i+ahead
// of in1 and in2 (nullable). stats(i, alongside) computes row i's statistics while calling
// alongside(j, n) on every vector position (the same bits whatever alongside does); out_of(i, st)
// makes row i's output sweep.
template <bool kStream, class Stats, class OutOf>
void for_rows_pipelined(int64_t n, int64_t d, int64_t ahead, const float* in1, const float* in2, Stats&& stats,
                        OutOf&& out_of) {
  parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) NORMLAB_FLATTEN {
    auto st = stats(lo, [](int64_t, int64_t) {});
    for (int64_t i = lo; i < hi; ++i) {
      auto out = out_of(i, st);
      if (i + 1 < hi)
        st = stats(i + 1, prefetching(out, ahead_row(in1, i, hi, d, ahead), ahead_row(in2, i, hi, d, ahead)));
      else
        row_for(d, out);
    }
    if (kStream) stream_fence();
  });
}

// Rows [lo, hi) in tiles: stats(g0, g1, st) leaves the statistics of rows [g0, g1) (at most
// kWidth rows: a row's mean, shift and rstd, or the backward's two means) in st[0, g1 - g0),
// for every group of the tile, then apply(i, st) runs on each row, then tile_done(t0, t1) on
// the tile's rows [t0, t1) (the backward's parameter gradients).
template <class S, class Stats, class Apply, class TileDone>
void for_tiles(int64_t lo, int64_t hi, int64_t d, int64_t tile_floats, Stats&& stats, Apply&& apply,
               TileDone&& tile_done) {
  const int64_t rows = tile_rows(d, tile_floats);
  S st[kTileMaxRows] = {};
  for (int64_t t0 = lo; t0 < hi; t0 += rows) {
    const int64_t t1 = std::min(hi, t0 + rows);
    for (int64_t g0 = t0; g0 < t1; g0 += kWidth) stats(g0, std::min(t1, g0 + kWidth), st + (g0 - t0));
    for (int64_t i = t0; i < t1; ++i) apply(i, st[i - t0]);
    tile_done(t0, t1);
  }
}
template <class S, class Stats, class Apply>
void for_tiles(int64_t lo, int64_t hi, int64_t d, int64_t tile_floats, Stats&& stats, Apply&& apply) {
  for_tiles<S>(lo, hi, d, tile_floats, stats, apply, [](int64_t, int64_t) {});
}

// The parameter-gradient partials of a tile's rows [t0, t1), column by column: for j:
// dgp[j] += sum over the rows, in order, of dy[i][j]*xhat[i][j]; dbp[j] += sum of dy[i][j]
// (dgp, dbp nullable; zeroed first when fresh). The same additions in the same order as one row
// at a time, but the partials stay in registers across the tile (in L1, 512 rows of d 64 spent
// most of the backward loading and storing them once per row). xhat_of(i, j, n) gives row i's
// xhat at vector position j; blocks of 4 vectors keep 4 independent chains of adds in flight.
template <class XhatOf>
inline void add_param_grads(float* dgp, float* dbp, bool fresh, int64_t t0, int64_t t1, int64_t d, const float* dy,
                            XhatOf&& xhat_of) {
  constexpr int64_t kBlock = 4;
  for (int64_t j0 = 0; j0 < d; j0 += kBlock * kWidth) {
    int64_t lanes[kBlock];
    VF g[kBlock], b[kBlock];
    for (int64_t k = 0; k < kBlock; ++k) {
      lanes[k] = std::clamp<int64_t>(d - j0 - k * kWidth, 0, kWidth);
      const int64_t j = j0 + k * kWidth;
      g[k] = dgp && !fresh ? load_n(dgp + j, lanes[k]) : zero();
      b[k] = dbp && !fresh ? load_n(dbp + j, lanes[k]) : zero();
    }
    for (int64_t i = t0; i < t1; ++i) {
      for (int64_t k = 0; k < kBlock; ++k) {
        if (lanes[k] == 0) break;
        const int64_t j = j0 + k * kWidth;
        const VF dyv = load_n(dy + i * d + j, lanes[k]);
        if (dgp) g[k] = fmadd(dyv, xhat_of(i, j, lanes[k]), g[k]);
        if (dbp) b[k] = b[k] + dyv;
      }
    }
    for (int64_t k = 0; k < kBlock && lanes[k] > 0; ++k) {
      if (dgp) store_n(dgp + j0 + k * kWidth, g[k], lanes[k]);
      if (dbp) store_n(dbp + j0 + k * kWidth, b[k], lanes[k]);
    }
  }
}

// The sums of rows [g0, g1) (at most kWidth), lane r for row g0 + r (other lanes 0): each row
// summed lane-wise (row_accumulate), then all of them across lanes at once (reduce_add_rows).
// The statistics computed from them stay in lanes too (layernorm_finish_group, rstd_from on VF).
// terms_of(i) is row i's function of a vector position, as row_reduce takes. The order of the
// additions within a row does not depend on the other rows of the group, so a row's sum does
// not depend on how rows were grouped (or on the thread count).
template <class TermsOf>
inline VF group_sums(int64_t g0, int64_t g1, int64_t d, TermsOf&& terms_of) {
  VF a[kWidth];
  for (int64_t r = 0; r < kWidth; ++r) a[r] = g0 + r < g1 ? row_accumulate(d, terms_of(g0 + r)) : zero();
  return reduce_add_rows(a);
}

// Two sums per row (row_accumulate2's f), as group_sums.
template <class TermsOf>
inline void group_sums2(int64_t g0, int64_t g1, int64_t d, TermsOf&& terms_of, VF& su, VF& sv) {
  VF u[kWidth], v[kWidth];
  for (int64_t r = 0; r < kWidth; ++r) {
    u[r] = v[r] = zero();
    if (g0 + r < g1) row_accumulate2(d, u[r], v[r], terms_of(g0 + r));
  }
  su = reduce_add_rows(u);
  sv = reduce_add_rows(v);
}

// Forward kernels: rows split over threads, each thread's range in tiles.
template <bool kStream, class S, class Stats, class Apply>
void for_rows_tiled(int64_t n, int64_t d, int64_t tile_floats, Stats&& stats, Apply&& apply) {
  parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) NORMLAB_FLATTEN {
    for_tiles<S>(lo, hi, d, tile_floats, stats, apply);
    if (kStream) stream_fence();
  });
}

// The backward's two row statistics (LayerNorm: mean(g), mean(g*xhat); RMSNorm: the second).
struct GradStats {
  float mg = 0, mgx = 0;
};

// Backward kernels: rows in the fixed reduction blocks (RowBlocks), each block in tiles; apply
// makes a row's dx, params(b, t0, t1, fresh) adds the tile's rows to block b's parameter-gradient
// partials (fresh: the block's first tile).
template <bool kStream, class Stats, class Apply, class Params>
void for_row_blocks_tiled(int64_t n, int64_t d, int64_t tile_floats, const RowBlocks& blocks, Stats&& stats,
                          Apply&& apply, Params&& params) {
  parallel_for(blocks.count, n * d, [&](int64_t b) {
    const int64_t lo = b * blocks.rows, hi = std::min(n, lo + blocks.rows);
    for_tiles<GradStats>(lo, hi, d, tile_floats, stats, apply, [&](int64_t t0, int64_t t1) { params(b, t0, t1, t0 == lo); });
    if (kStream) stream_fence();
  });
}

// Pipelined backward kernels: rows in the same fixed blocks, and within a block row i's sweep
// runs alongside row i+1's statistics. stats_alone(i) computes row i's statistics;
// stats_alongside(i, sweep) computes them while calling sweep(j, n) on every vector position (the
// same bits as stats_alone); sweep_of(b, i, st, first) makes row i's sweep, which also
// prefetches row i + ahead of the inputs in1 and in2.
template <bool kStream, class StatsAlone, class StatsAlongside, class SweepOf>
void for_row_blocks_pipelined(int64_t n, int64_t d, int64_t ahead, const RowBlocks& blocks, const float* in1,
                              const float* in2, StatsAlone&& stats_alone, StatsAlongside&& stats_alongside,
                              SweepOf&& sweep_of) {
  parallel_for(blocks.count, n * d, [&](int64_t b) {
    const int64_t lo = b * blocks.rows, hi = std::min(n, lo + blocks.rows);
    GradStats st = stats_alone(lo);
    for (int64_t i = lo; i < hi; ++i) {
      auto sweep_row = sweep_of(b, i, st, i == lo);
      auto sweep = prefetching(sweep_row, ahead_row(in1, i, hi, d, ahead), ahead_row(in2, i, hi, d, ahead));
      if (i + 1 < hi)
        st = stats_alongside(i + 1, sweep);
      else
        row_for(d, sweep);
    }
    if (kStream) stream_fence();
  });
}

// ---- the row math: one definition of each statistic's terms and of each sweep -----------------
// Each factory returns the function of a vector position (j, lanes) that row_reduce,
// row_reduce2, their *_alongside forms or row_for apply to a row; the tiled and the pipelined
// kernels call the same ones, and every final statistic goes through norm_stats.h, so both
// paths give the same bits whatever the compiler contracts into FMAs. Output sweeps take
// kStream: streaming stores for the N x D output (see streams_output).

// A LayerNorm row's statistics: its shift c, m = mean(x - c) and rstd; mean(x) = c + m.
struct LnStats {
  float c = 0, m = 0, rs = 0;
};

// The value a row is summed shifted by: the mean of its first vector (all of it when d <=
// kWidth). It is within a fraction of a standard deviation of the row's mean for most rows
// (1/4 of one on average for 16 Gaussian values), which keeps the one-sweep variance exact to a
// few roundings (shift_too_far); the row's first element alone would be further away.
// row_shift for one row (the pipelined kernels), group_shifts for the rows [g0, g1) of a tile
// at once, first_of(i) giving row i's first vector.
inline float row_shift(const float* x, int64_t d) {
  const int64_t n = std::min(d, kWidth);
  return reduce_add(load_n(x, n)) / float(n);
}
template <class FirstOf>
inline void group_shifts(int64_t g0, int64_t g1, int64_t d, FirstOf&& first_of, float* c) {
  const int64_t n = std::min(d, kWidth);
  VF f[kWidth];
  for (int64_t r = 0; r < kWidth; ++r) f[r] = g0 + r < g1 ? first_of(g0 + r, n) : zero();
  store(c, reduce_add_rows(f) / set1(float(n)));
}

// for j: s = x[j]-c; su += s; ss += s*s
inline auto shifted_moment_terms(const float* x, float c) {
  const VF vc = set1(c);
  return [x, vc](int64_t j, int64_t n, VF& u, VF& v) {
    VF s = load_n(x + j, n) - vc;
    u = u + s;
    v = fmadd(s, s, v);
  };
}

// for j: e = (x[j]-c)-m; se += e; ss += e*e   (centred: the fallback where the shift was too far)
inline auto centred_moment_terms(const float* x, float c, float m) {
  const VF vc = set1(c), vm = set1(m);
  return [x, vc, vm](int64_t j, int64_t n, VF& u, VF& v) {
    VF e = (load_n(x + j, n) - vc) - vm;
    u = u + e;
    v = fmadd(e, e, v);
  };
}

// The statistics of row x from its shifted sums (written to mean_out, rstd_out as well). Where
// the one-sweep variance would cancel (the shift far from the mean: an outlier among the first
// values, say), the row is summed again centred, from L1/L2 where the sweep left it, and the
// mean corrected by the centred sum (the corrected two-pass algorithm of Chan, Golub and
// LeVeque): the shifted sum of large terms is where the first mean lost its digits.
inline void centred_correction(const float* x, int64_t d, float c, float inv_d, float& m, float& var) {
  float se = 0, see = 0;
  row_reduce2(d, se, see, centred_moment_terms(x, c, m));
  const float dm = se * inv_d;
  m += dm;
  var = shifted_variance(dm, see, inv_d);
}

inline LnStats layernorm_finish(const float* x, int64_t d, float c, float su, float ss, float inv_d, float eps,
                                float& mean_out, float& rstd_out) {
  float m = su * inv_d;
  float var = shifted_variance(m, ss, inv_d);
  if (shift_too_far(m, var)) centred_correction(x, d, c, inv_d, m, var);
  const LnStats st{c, m, rstd_of_variance(var, eps)};
  mean_out = c + m;
  rstd_out = st.rs;
  return st;
}

// layernorm_finish for the rows [g0, g1) of a group at once, lane r for row g0 + r (c: the
// shifts, kWidth of them; su, ss: the shifted sums), row_of(i) the row summed; the statistics go
// to mean, rstd (the kernel's outputs, indexed by row) and st (the tile's, from row g0). The same
// operations in lanes, so the same bits; the rare row whose shift was too far is corrected alone.
template <class RowOf>
inline void layernorm_finish_group(int64_t g0, int64_t g1, int64_t d, RowOf&& row_of, const float* c, VF su, VF ss,
                                   float inv_d, float eps, float* mean, float* rstd, LnStats* st) {
  const int64_t k = g1 - g0;
  const VF vinv = set1(inv_d);
  VF m = su * vinv;
  VF var = shifted_variance(m, ss, vinv);
  alignas(64) float mf[kWidth], vf[kWidth];
  if (shift_too_far(m, var) & ((uint32_t(1) << k) - 1)) {
    store(mf, m);
    store(vf, var);
    for (int64_t r = 0; r < k; ++r)
      if (shift_too_far(mf[r], vf[r])) centred_correction(row_of(g0 + r), d, c[r], inv_d, mf[r], vf[r]);
    m = load(mf);
    var = load(vf);
  }
  const VF rs = rstd_of_variance(var, set1(eps));
  store_n(mean + g0, load(c) + m, k);
  store_n(rstd + g0, rs, k);
  store(mf, m);
  store(vf, rs);
  for (int64_t r = 0; r < k; ++r) st[r] = LnStats{c[r], mf[r], vf[r]};
}

// for j: ss += x[j]^2
inline auto sq_terms(const float* x) {
  return [x](int64_t j, int64_t n) {
    VF v = load_n(x + j, n);
    return v * v;
  };
}

// for j: y[j] = ((x[j]-c)-m)*rs*gamma[j] + beta[j]   (x - c exact near the mean: no rounding of
// the mean at the row's scale reaches y)
template <bool kStream>
inline auto layernorm_out(float* y, const float* x, const float* gamma, const float* beta, const LnStats& st) {
  const VF vc = set1(st.c), vm = set1(st.m), vrs = set1(st.rs);
  return [=](int64_t j, int64_t n) {
    VF xhat = ((load_n(x + j, n) - vc) - vm) * vrs;
    put<kStream>(y + j, fmadd(xhat, load_n(gamma + j, n), load_n(beta + j, n)), n);
  };
}

// for j: y[j] = x[j]*rs*gamma[j]
template <bool kStream>
inline auto rmsnorm_out(float* y, const float* x, const float* gamma, float rs) {
  const VF vrs = set1(rs);
  return [=](int64_t j, int64_t n) { put<kStream>(y + j, load_n(x + j, n) * vrs * load_n(gamma + j, n), n); };
}

// Row i's xhat = (x-mu)*rs at vector position j (LayerNorm), one definition for the sweeps and
// add_param_grads.
inline VF layernorm_xhat(const float* x, int64_t j, int64_t n, VF vmu, VF vrs) { return (load_n(x + j, n) - vmu) * vrs; }
inline VF rmsnorm_xhat(const float* x, int64_t j, int64_t n, VF vrs) { return load_n(x + j, n) * vrs; }

// LayerNorm backward statistics: with xhat = (x-mu)*rs and g = dy*gamma, mg = sum(g)/d and
// mgx = sum(g*xhat)/d.
// for j: g = dy[j]*gamma[j]; sg += g; sgx += g*(x[j]-mu)*rs
inline auto layernorm_grad_terms(const float* dy, const float* x, const float* gamma, float mu, float rs) {
  const VF vmu = set1(mu), vrs = set1(rs);
  return [=](int64_t j, int64_t n, VF& u, VF& v) {
    VF g = load_n(dy + j, n) * load_n(gamma + j, n);
    VF xhat = layernorm_xhat(x, j, n, vmu, vrs);
    u = u + g;
    v = fmadd(g, xhat, v);
  };
}

// dx (nullable) and the block partials dgp, dbp (nullable).
// for j: xhat = (x[j]-mu)*rs; dx[j] = rs*(dy[j]*gamma[j] - mg - xhat*mgx);
//        dgp[j] += dy[j]*xhat; dbp[j] += dy[j]
template <bool kStream>
inline auto layernorm_grad_out(float* dx, float* dgp, float* dbp, const float* dy, const float* x,
                               const float* gamma, float mu, float rs, const GradStats& st) {
  const VF vmu = set1(mu), vrs = set1(rs), vmg = set1(st.mg), vmgx = set1(st.mgx);
  return [=](int64_t j, int64_t n) {
    VF dyv = load_n(dy + j, n);
    VF xhat = layernorm_xhat(x, j, n, vmu, vrs);
    if (dx) put<kStream>(dx + j, vrs * fnmadd(xhat, vmgx, dyv * load_n(gamma + j, n) - vmg), n);
    if (dgp) store_n(dgp + j, fmadd(dyv, xhat, load_n(dgp + j, n)), n);
    if (dbp) store_n(dbp + j, load_n(dbp + j, n) + dyv, n);
  };
}

// RMSNorm backward statistic: mgx = sum(dy*gamma*x*rs)/d.
// for j: sgx += dy[j]*gamma[j]*x[j]*rs
inline auto rmsnorm_grad_terms(const float* dy, const float* x, const float* gamma, float rs) {
  const VF vrs = set1(rs);
  return [=](int64_t j, int64_t n) { return load_n(dy + j, n) * load_n(gamma + j, n) * rmsnorm_xhat(x, j, n, vrs); };
}

// for j: xhat = x[j]*rs; dx[j] = rs*(dy[j]*gamma[j] - xhat*mgx); dgp[j] += dy[j]*xhat
template <bool kStream>
inline auto rmsnorm_grad_out(float* dx, float* dgp, const float* dy, const float* x, const float* gamma, float rs,
                             float mgx) {
  const VF vrs = set1(rs), vmgx = set1(mgx);
  return [=](int64_t j, int64_t n) {
    VF dyv = load_n(dy + j, n);
    VF xhat = rmsnorm_xhat(x, j, n, vrs);
    if (dx) put<kStream>(dx + j, vrs * fnmadd(xhat, vmgx, dyv * load_n(gamma + j, n)), n);
    if (dgp) store_n(dgp + j, fmadd(dyv, xhat, load_n(dgp + j, n)), n);
  };
}

// s = alpha*a + b stored, and its shifted moments summed on the way (shifted_moment_terms on s).
// for j: s[j] = alpha*a[j] + b[j]; su += s[j]-c; ss += (s[j]-c)^2
inline auto add_moment_terms(float* s, const float* a, const float* b, float alpha, float c) {
  const VF valpha = set1(alpha), vc = set1(c);
  return [=](int64_t j, int64_t n, VF& u, VF& v) {
    VF sv = fmadd(valpha, load_n(a + j, n), load_n(b + j, n));
    store_n(s + j, sv, n);
    VF e = sv - vc;
    u = u + e;
    v = fmadd(e, e, v);
  };
}

// s = alpha*a + b stored, and its squares summed on the way.
// for j: s[j] = alpha*a[j] + b[j]; ss += s[j]^2
inline auto add_sq_terms(float* s, const float* a, const float* b, float alpha) {
  const VF valpha = set1(alpha);
  return [=](int64_t j, int64_t n) {
    VF v = fmadd(valpha, load_n(a + j, n), load_n(b + j, n));
    store_n(s + j, v, n);
    return v * v;
  };
}

void zero_params(float* a, float* b, int64_t d) {
  for (int64_t j = 0; j < d; ++j) {
    if (a) a[j] = 0.0f;
    if (b) b[j] = 0.0f;
  }
}

// ==== the kernels, for ordinary or streaming stores of the N x D output =========================

// A NormVariant's row walk (its store kind is the kernels' template argument).
struct Walk {
  bool pipelined = false;
  int64_t tile_floats = 2048, ahead = 0;
  explicit Walk(const NormVariant& v)
      : pipelined(v.layout == NormVariant::Layout::pipelined), tile_floats(v.tile_floats), ahead(v.prefetch) {}
};

template <bool kStream>
void layernorm_forward_rows(const Walk& w, float* y, float* mean, float* rstd, const float* x, const float* gamma,
                            const float* beta, int64_t n, int64_t d, float eps) {
  const float inv_d = 1.0f / float(d);
  if (w.pipelined) {
    for_rows_pipelined<kStream>(
        n, d, w.ahead, x, nullptr,
        [&](int64_t i, auto&& alongside) {
          const float* xr = x + i * d;
          const float c = row_shift(xr, d);
          float su = 0, ss = 0;
          row_reduce2_alongside(d, su, ss, shifted_moment_terms(xr, c), alongside);
          return layernorm_finish(xr, d, c, su, ss, inv_d, eps, mean[i], rstd[i]);
        },
        [&](int64_t i, const LnStats& st) { return layernorm_out<kStream>(y + i * d, x + i * d, gamma, beta, st); });
    return;
  }
  for_rows_tiled<kStream, LnStats>(
      n, d, w.tile_floats,
      [&](int64_t g0, int64_t g1, LnStats* st) {
        alignas(64) float c[kWidth];
        VF su, ss;
        group_shifts(g0, g1, d, [&](int64_t i, int64_t k) { return load_n(x + i * d, k); }, c);
        group_sums2(g0, g1, d, [&](int64_t i) { return shifted_moment_terms(x + i * d, c[i - g0]); }, su, ss);
        layernorm_finish_group(g0, g1, d, [&](int64_t i) { return x + i * d; }, c, su, ss, inv_d, eps, mean, rstd, st);
      },
      [&](int64_t i, const LnStats& st) {
        row_for(d, layernorm_out<kStream>(y + i * d, x + i * d, gamma, beta, st));
      });
}

template <bool kStream>
void layernorm_backward_rows(const Walk& w, float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                             const float* gamma, const float* mean, const float* rstd, int64_t n, int64_t d) {
  const RowBlocks blocks(n);
  Partials pg(blocks.count, d, dgamma != nullptr), pb(blocks.count, d, dbeta != nullptr);
  const float inv_d = 1.0f / float(d);
  auto terms = [&](int64_t i) { return layernorm_grad_terms(dy + i * d, x + i * d, gamma, mean[i], rstd[i]); };
  auto means = [&](float sg, float sgx) { return GradStats{sg * inv_d, sgx * inv_d}; };
  auto sweep_of = [&](int64_t b, int64_t i, const GradStats& st, bool first_in_block) {
    float* dgp = pg.block(b, d);
    float* dbp = pb.block(b, d);
    if (first_in_block) zero_params(dgp, dbp, d);
    return layernorm_grad_out<kStream>(dx ? dx + i * d : nullptr, dgp, dbp, dy + i * d, x + i * d, gamma, mean[i],
                                       rstd[i], st);
  };
  auto stats_alone = [&](int64_t i) {
    float sg = 0, sgx = 0;
    row_reduce2(d, sg, sgx, terms(i));
    return means(sg, sgx);
  };
  if (w.pipelined && dx) {
    for_row_blocks_pipelined<kStream>(
        n, d, w.ahead, blocks, dy, x, stats_alone,
        [&](int64_t i, auto& sweep) {
          float sg = 0, sgx = 0;
          row_reduce2_alongside(d, sg, sgx, terms(i), sweep);
          return means(sg, sgx);
        },
        sweep_of);
  } else {
    for_row_blocks_tiled<kStream>(
        n, d, w.tile_floats, blocks,
        [&](int64_t g0, int64_t g1, GradStats* st) {
          if (!dx) return;  // the parameter gradients need no row statistics
          VF sg, sgx;
          group_sums2(g0, g1, d, terms, sg, sgx);
          alignas(64) float mg[kWidth], mgx[kWidth];
          store(mg, sg * set1(inv_d));
          store(mgx, sgx * set1(inv_d));
          for (int64_t i = g0; i < g1; ++i) st[i - g0] = GradStats{mg[i - g0], mgx[i - g0]};
        },
        [&](int64_t i, const GradStats& st) {
          if (!dx) return;
          row_for(d, layernorm_grad_out<kStream>(dx + i * d, nullptr, nullptr, dy + i * d, x + i * d, gamma,
                                                 mean[i], rstd[i], st));
        },
        [&](int64_t b, int64_t t0, int64_t t1, bool fresh) {
          add_param_grads(pg.block(b, d), pb.block(b, d), fresh, t0, t1, d, dy, [&](int64_t i, int64_t j, int64_t k) {
            return layernorm_xhat(x + i * d, j, k, set1(mean[i]), set1(rstd[i]));
          });
        });
  }
  sum_partials(dgamma, pg.p, blocks.count, d);
  sum_partials(dbeta, pb.p, blocks.count, d);
}

template <bool kStream>
void rmsnorm_forward_rows(const Walk& w, float* y, float* rstd, const float* x, const float* gamma, int64_t n, int64_t d,
                          float eps) {
  const float inv_d = 1.0f / float(d);
  auto finish_rstd = [&](int64_t r, float ss) { return rstd[r] = rstd_from(ss, inv_d, eps); };
  if (w.pipelined) {
    for_rows_pipelined<kStream>(
        n, d, w.ahead, x, nullptr,
        [&](int64_t i, auto&& alongside) {
          return finish_rstd(i, row_reduce_alongside(d, sq_terms(x + i * d), alongside));
        },
        [&](int64_t i, float rs) { return rmsnorm_out<kStream>(y + i * d, x + i * d, gamma, rs); });
    return;
  }
  for_rows_tiled<kStream, float>(
      n, d, w.tile_floats,
      [&](int64_t g0, int64_t g1, float* rs) {
        const VF r = rstd_from(group_sums(g0, g1, d, [&](int64_t i) { return sq_terms(x + i * d); }), set1(inv_d),
                               set1(eps));
        store_n(rs, r, g1 - g0);
        store_n(rstd + g0, r, g1 - g0);
      },
      [&](int64_t i, float rs) {
        row_for(d, rmsnorm_out<kStream>(y + i * d, x + i * d, gamma, rs));
      });
}

template <bool kStream>
void rmsnorm_backward_rows(const Walk& w, float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                           const float* rstd, int64_t n, int64_t d) {
  const RowBlocks blocks(n);
  Partials pg(blocks.count, d, dgamma != nullptr);
  const float inv_d = 1.0f / float(d);
  auto terms = [&](int64_t i) { return rmsnorm_grad_terms(dy + i * d, x + i * d, gamma, rstd[i]); };
  auto sweep_of = [&](int64_t b, int64_t i, const GradStats& st, bool first_in_block) {
    float* dgp = pg.block(b, d);
    if (first_in_block) zero_params(dgp, nullptr, d);
    return rmsnorm_grad_out<kStream>(dx ? dx + i * d : nullptr, dgp, dy + i * d, x + i * d, gamma, rstd[i], st.mgx);
  };
  auto stats_alone = [&](int64_t i) { return GradStats{0, row_reduce(d, terms(i)) * inv_d}; };
  if (w.pipelined && dx) {
    for_row_blocks_pipelined<kStream>(
        n, d, w.ahead, blocks, dy, x, stats_alone,
        [&](int64_t i, auto& sweep) { return GradStats{0, row_reduce_alongside(d, terms(i), sweep) * inv_d}; },
        sweep_of);
  } else {
    for_row_blocks_tiled<kStream>(
        n, d, w.tile_floats, blocks,
        [&](int64_t g0, int64_t g1, GradStats* st) {
          if (!dx) return;
          alignas(64) float mgx[kWidth];
          store(mgx, group_sums(g0, g1, d, terms) * set1(inv_d));
          for (int64_t i = g0; i < g1; ++i) st[i - g0] = GradStats{0, mgx[i - g0]};
        },
        [&](int64_t i, const GradStats& st) {
          if (!dx) return;
          row_for(d, rmsnorm_grad_out<kStream>(dx + i * d, nullptr, dy + i * d, x + i * d, gamma, rstd[i], st.mgx));
        },
        [&](int64_t b, int64_t t0, int64_t t1, bool fresh) {
          add_param_grads(pg.block(b, d), nullptr, fresh, t0, t1, d, dy,
                          [&](int64_t i, int64_t j, int64_t k) { return rmsnorm_xhat(x + i * d, j, k, set1(rstd[i])); });
        });
  }
  sum_partials(dgamma, pg.p, blocks.count, d);
}

// Short rows in tiles: the statistics phase computes and stores s (a and b from memory, s into
// L1) with its shifted sums; the apply phase normalizes s from L1.
template <bool kStream>
void add_layernorm_forward_rows(const Walk& w, float* s, float* y, float* mean, float* rstd, const float* a, const float* b,
                                float alpha, const float* gamma, const float* beta, int64_t n, int64_t d,
                                float eps) {
  const float inv_d = 1.0f / float(d);
  if (w.pipelined) {
    // As layernorm_forward_rows: row i's output sweep (s from L1/L2) runs in the loop that adds
    // row i+1 (a and b from memory) and sums its moments.
    const VF valpha = set1(alpha);
    auto stats = [&](int64_t i, auto&& alongside) {
      const int64_t k = std::min(d, kWidth);
      const float c = reduce_add(fmadd(valpha, load_n(a + i * d, k), load_n(b + i * d, k))) / float(k);
      float su = 0, ss = 0;
      row_reduce2_alongside(d, su, ss, add_moment_terms(s + i * d, a + i * d, b + i * d, alpha, c), alongside);
      return layernorm_finish(s + i * d, d, c, su, ss, inv_d, eps, mean[i], rstd[i]);
    };
    for_rows_pipelined<kStream>(n, d, w.ahead, a, b, stats, [&](int64_t i, const LnStats& st) {
      return layernorm_out<kStream>(y + i * d, s + i * d, gamma, beta, st);
    });
    return;
  }
  for_rows_tiled<kStream, LnStats>(
      n, d, w.tile_floats,
      [&](int64_t g0, int64_t g1, LnStats* st) {
        const VF valpha = set1(alpha);
        alignas(64) float c[kWidth];
        VF su, ss;
        group_shifts(g0, g1, d, [&](int64_t i, int64_t k) { return fmadd(valpha, load_n(a + i * d, k), load_n(b + i * d, k)); },
                     c);
        group_sums2(g0, g1, d, [&](int64_t i) { return add_moment_terms(s + i * d, a + i * d, b + i * d, alpha, c[i - g0]); },
                    su, ss);
        layernorm_finish_group(g0, g1, d, [&](int64_t i) { return s + i * d; }, c, su, ss, inv_d, eps, mean, rstd, st);
      },
      [&](int64_t i, const LnStats& st) {
        row_for(d, layernorm_out<kStream>(y + i * d, s + i * d, gamma, beta, st));
      });
}

template <bool kStream>
void add_rmsnorm_forward_rows(const Walk& w, float* s, float* y, float* rstd, const float* a, const float* b, float alpha,
                              const float* gamma, int64_t n, int64_t d, float eps) {
  const float inv_d = 1.0f / float(d);
  if (w.pipelined) {
    auto sumsq = [&](int64_t i, auto&& alongside) {
      return rstd[i] = rstd_from(row_reduce_alongside(d, add_sq_terms(s + i * d, a + i * d, b + i * d, alpha), alongside),
                                 inv_d, eps);
    };
    for_rows_pipelined<kStream>(n, d, w.ahead, a, b, sumsq, [&](int64_t i, float rs) {
      return rmsnorm_out<kStream>(y + i * d, s + i * d, gamma, rs);
    });
    return;
  }
  for_rows_tiled<kStream, float>(
      n, d, w.tile_floats,
      [&](int64_t g0, int64_t g1, float* rs) {
        const VF r = rstd_from(group_sums(g0, g1, d, [&](int64_t i) { return add_sq_terms(s + i * d, a + i * d, b + i * d, alpha); }),
                               set1(inv_d), set1(eps));
        store_n(rs, r, g1 - g0);
        store_n(rstd + g0, r, g1 - g0);
      },
      [&](int64_t i, float rs) {
        row_for(d, rmsnorm_out<kStream>(y + i * d, s + i * d, gamma, rs));
      });
}

}  // namespace

// The variant asks for streaming stores, the output is aligned to the vector width and the rows
// are whole vectors (stores of a row tail cannot stream).
bool variant_streams(const NormVariant& v, const float* out, int64_t d) {
  return v.stream && v.layout != NormVariant::Layout::onednn && out != nullptr &&
         reinterpret_cast<uintptr_t>(out) % (kWidth * sizeof(float)) == 0 && d % kWidth == 0;
}

// Compiled with the kernels: a new build of them is a new build for the tuning cache.
const char* norm_kernels_build_stamp() { return __DATE__ " " __TIME__; }

const char* norm_kernels_isa() { return kIsa; }

// ==== one variant, named ======================================================================
// The variant's name decides nothing about the values: every variant but onednn computes the
// same operations in the same order (tests: CpuNormVariants.*).

void layernorm_forward_with(const NormVariant& v, float* y, float* mean, float* rstd, const float* x,
                            const float* gamma, const float* beta, int64_t n, int64_t d, float eps) {
  if (v.layout == NormVariant::Layout::onednn) return layernorm_forward_onednn(y, mean, rstd, x, gamma, beta, n, d, eps);
  if (d <= 0) return;
  const Walk w(v);
  if (self::variant_streams(v, y, d))
    layernorm_forward_rows<true>(w, y, mean, rstd, x, gamma, beta, n, d, eps);
  else
    layernorm_forward_rows<false>(w, y, mean, rstd, x, gamma, beta, n, d, eps);
}

void layernorm_backward_with(const NormVariant& v, float* dx, float* dgamma, float* dbeta, const float* dy,
                             const float* x, const float* gamma, const float* mean, const float* rstd, int64_t n,
                             int64_t d) {
  if (v.layout == NormVariant::Layout::onednn)
    return layernorm_backward_onednn(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, n, d);
  if (d <= 0) return;
  if (n <= 0) return zero_params(dgamma, dbeta, d);
  const Walk w(v);
  if (self::variant_streams(v, dx, d))
    layernorm_backward_rows<true>(w, dx, dgamma, dbeta, dy, x, gamma, mean, rstd, n, d);
  else
    layernorm_backward_rows<false>(w, dx, dgamma, dbeta, dy, x, gamma, mean, rstd, n, d);
}

void rmsnorm_forward_with(const NormVariant& v, float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                          int64_t d, float eps) {
  NL_CHECK(v.layout != NormVariant::Layout::onednn, "rmsnorm has no oneDNN variant (oneDNN 2.6 has no RMS flag)");
  if (d <= 0) return;
  const Walk w(v);
  if (self::variant_streams(v, y, d))
    rmsnorm_forward_rows<true>(w, y, rstd, x, gamma, n, d, eps);
  else
    rmsnorm_forward_rows<false>(w, y, rstd, x, gamma, n, d, eps);
}

void rmsnorm_backward_with(const NormVariant& v, float* dx, float* dgamma, const float* dy, const float* x,
                           const float* gamma, const float* rstd, int64_t n, int64_t d) {
  NL_CHECK(v.layout != NormVariant::Layout::onednn, "rmsnorm has no oneDNN variant (oneDNN 2.6 has no RMS flag)");
  if (d <= 0) return;
  if (n <= 0) return zero_params(dgamma, nullptr, d);
  const Walk w(v);
  if (self::variant_streams(v, dx, d))
    rmsnorm_backward_rows<true>(w, dx, dgamma, dy, x, gamma, rstd, n, d);
  else
    rmsnorm_backward_rows<false>(w, dx, dgamma, dy, x, gamma, rstd, n, d);
}

// Only y may stream: the apply phase re-reads s from L1, where a streamed s would not be.
void add_layernorm_forward_with(const NormVariant& v, float* s, float* y, float* mean, float* rstd, const float* a,
                                const float* b, float alpha, const float* gamma, const float* beta, int64_t n,
                                int64_t d, float eps) {
  NL_CHECK(v.layout != NormVariant::Layout::onednn, "the fused add + norm has no oneDNN variant");
  if (d <= 0) return;
  const Walk w(v);
  if (self::variant_streams(v, y, d))
    add_layernorm_forward_rows<true>(w, s, y, mean, rstd, a, b, alpha, gamma, beta, n, d, eps);
  else
    add_layernorm_forward_rows<false>(w, s, y, mean, rstd, a, b, alpha, gamma, beta, n, d, eps);
}

void add_rmsnorm_forward_with(const NormVariant& v, float* s, float* y, float* rstd, const float* a, const float* b,
                              float alpha, const float* gamma, int64_t n, int64_t d, float eps) {
  NL_CHECK(v.layout != NormVariant::Layout::onednn, "the fused add + norm has no oneDNN variant");
  if (d <= 0) return;
  const Walk w(v);
  if (self::variant_streams(v, y, d))
    add_rmsnorm_forward_rows<true>(w, s, y, rstd, a, b, alpha, gamma, n, d, eps);
  else
    add_rmsnorm_forward_rows<false>(w, s, y, rstd, a, b, alpha, gamma, n, d, eps);
}

// ==== the chosen variant =======================================================================
// *_onepass, add_*_fused: the fastest of normlab's own variants for the call's shape class; the backend's
// layernorm_* may also choose oneDNN's primitive where it measured faster (norm_choice).

void layernorm_forward_onepass(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                               const float* beta, int64_t n, int64_t d, float eps) {
  self::layernorm_forward_with(norm_choice(NormKernel::layernorm_forward, n, d).own, y, mean, rstd, x, gamma, beta, n,
                               d, eps);
}

void layernorm_backward_onepass(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                const float* gamma, const float* mean, const float* rstd, int64_t n, int64_t d) {
  self::layernorm_backward_with(norm_choice(NormKernel::layernorm_backward, n, d, dx != nullptr).own, dx, dgamma,
                                dbeta, dy, x, gamma, mean, rstd, n, d);
}

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                       int64_t n, int64_t d, float eps) {
  self::layernorm_forward_with(norm_choice(NormKernel::layernorm_forward, n, d).best, y, mean, rstd, x, gamma, beta, n,
                               d, eps);
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                        const float* mean, const float* rstd, int64_t n, int64_t d) {
  self::layernorm_backward_with(norm_choice(NormKernel::layernorm_backward, n, d, dx != nullptr).best, dx, dgamma,
                                dbeta, dy, x, gamma, mean, rstd, n, d);
}

void rmsnorm_forward_onepass(float* y, float* rstd, const float* x, const float* gamma, int64_t n, int64_t d,
                             float eps) {
  self::rmsnorm_forward_with(norm_choice(NormKernel::rmsnorm_forward, n, d).own, y, rstd, x, gamma, n, d, eps);
}

void rmsnorm_backward_onepass(float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,
                              const float* rstd, int64_t n, int64_t d) {
  self::rmsnorm_backward_with(norm_choice(NormKernel::rmsnorm_backward, n, d, dx != nullptr).own, dx, dgamma, dy, x,
                              gamma, rstd, n, d);
}

void add_layernorm_forward_fused(float* s, float* y, float* mean, float* rstd, const float* a, const float* b,
                                 float alpha, const float* gamma, const float* beta, int64_t n, int64_t d, float eps) {
  self::add_layernorm_forward_with(norm_choice(NormKernel::add_layernorm_forward, n, d).own, s, y, mean, rstd, a, b,
                                   alpha, gamma, beta, n, d, eps);
}

void add_rmsnorm_forward_fused(float* s, float* y, float* rstd, const float* a, const float* b, float alpha,
                               const float* gamma, int64_t n, int64_t d, float eps) {
  self::add_rmsnorm_forward_with(norm_choice(NormKernel::add_rmsnorm_forward, n, d).own, s, y, rstd, a, b, alpha,
                                 gamma, n, d, eps);
}

}  // namespace NORMLAB_NORM_KERNELS_NS
