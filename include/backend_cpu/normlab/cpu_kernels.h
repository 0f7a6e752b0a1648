// The cpu backend's normalization kernels as free functions on raw float arrays: the ones the
// Backend runs (the production API), and beside them oneDNN's, which it may choose instead (the
// naive baselines and the 16-bit storage kernels only bench runs are normlab/bench_kernels.h's):
//   *_onepass    normlab's vectorized kernels, one read of the inputs and one write of each
//                output per row (the row stays in L1/L2 between the sweeps over it);
//   *_onednn     oneDNN 2.6's layer_normalization primitive, its variance converted to rstd;
//   add_*_fused  "fused" always means this: the residual add and the norm in one kernel.
// The Backend's LayerNorm runs layernorm_forward / _backward below, the variant measured fastest
// for the call's shape class on this machine, oneDNN's included (norm_choice, at the end of this
// header); its RMSNorm runs rmsnorm_*_onepass and its add + norm add_*_fused, which choose among
// normlab's own variants the same way. (bench names the one-pass rows "fused": its committed
// results use that name.)
//
// Sizes: N rows (B*T), D the normalized size (C). Math (each kernel's header is its contract):
//   LayerNorm  mu = mean(x); rstd = 1/sqrt(mean((x-mu)^2) + eps); y = gamma*(x-mu)*rstd + beta
//   RMSNorm    rstd = 1/sqrt(mean(x^2) + eps); y = gamma*x*rstd
//   backward   g = dy*gamma, xhat the normalized input:
//              LayerNorm dx = rstd*(g - mean(g) - xhat*mean(g*xhat)); RMSNorm without mean(g);
//              dgamma = sum_rows(dy*xhat); dbeta = sum_rows(dy).
// Outputs and gradients are WRITTEN (=). A gradient pointer may be nullptr: its work is skipped.
// Parameter gradients are reduced over rows in fixed blocks of rows, then the blocks in order:
// the result does not depend on the number of threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/precision.h"
#include "normlab/squash_kernels.h"

namespace normlab::cpu {

// ---- LayerNorm ---------------------------------------------------------------------------
void layernorm_forward_onepass(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                               const float* beta, int64_t n, int64_t d, float eps);
void layernorm_forward_onednn(float* y, float* mean, float* rstd, const float* x,
                              const float* gamma, const float* beta, int64_t n, int64_t d,
                              float eps);

void layernorm_backward_onepass(float* dx, float* dgamma, float* dbeta, const float* dy,
                                const float* x, const float* gamma, const float* mean,
                                const float* rstd, int64_t n, int64_t d);
void layernorm_backward_onednn(float* dx, float* dgamma, float* dbeta, const float* dy,
                               const float* x, const float* gamma, const float* mean,
                               const float* rstd, int64_t n, int64_t d);

// The implementations the cpu Backend uses.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int64_t n, int64_t d, float eps);
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, const float* mean, const float* rstd, int64_t n,
                        int64_t d);

// ---- RMSNorm (oneDNN 2.6 has none: no RMS flag before v3) ----------------------------------
// The cpu Backend's RMSNorm (oneDNN has no candidate to choose instead).
void rmsnorm_forward_onepass(float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                             int64_t d, float eps);
void rmsnorm_backward_onepass(float* dx, float* dgamma, const float* dy, const float* x,
                              const float* gamma, const float* rstd, int64_t n, int64_t d);

// ---- DyT and Derf: y = gamma * f(alpha*x + shift) + beta, f = tanh or erf (squash_kernels.h) --
// The registered kernel's loops (squash_kernels.cpp): one pass forward; one pass backward writing dx and the row
// blocks' partial sums of dgamma, dbeta, dalpha, dshift (each nullable). shift 0 for DyT; beta nullable.
void squash_forward(float* y, const float* x, float alpha, float shift, const float* gamma, const float* beta,
                    int64_t n, int64_t d, Squash f);
void squash_backward(float* dx, float* dalpha, float* dshift, float* dgamma, float* dbeta, const float* dy,
                     const float* x, float alpha, float shift, const float* gamma, int64_t n, int64_t d, Squash f);

// ---- fused residual add + norm ---------------------------------------------------------------
// s = alpha*a + b (written: the residual stream), then the norm of s as stored. One pass per
// row: a and b are read once, s and y written once.
void add_layernorm_forward_fused(float* s, float* y, float* mean, float* rstd, const float* a,
                                 const float* b, float alpha, const float* gamma, const float* beta,
                                 int64_t n, int64_t d, float eps);
void add_rmsnorm_forward_fused(float* s, float* y, float* rstd, const float* a, const float* b,
                               float alpha, const float* gamma, int64_t n, int64_t d, float eps);


// ---- variants, and which one runs (norm_tuning.cpp) --------------------------------------------
// The one-pass and fused kernels come in variants whose speed depends on the CPU (a variant tuned on a Zen 4
// ran 3x slower than a copy on a Zen 1): how rows are walked (in tiles of tile_floats, or
// pipelined, prefetching `prefetch` rows ahead), and ordinary or streaming stores of the N x D
// output. oneDNN's primitive is a candidate for LayerNorm's forward and backward. Every variant
// but onednn gives the same bits; onednn rounds differently (its own statistics and parameter
// gradient reductions).
enum class NormKernel : uint8_t {
  layernorm_forward,
  layernorm_backward,
  rmsnorm_forward,
  rmsnorm_backward,
  add_layernorm_forward,
  add_rmsnorm_forward,
};
const char* to_string(NormKernel k);

struct NormVariant {
  enum class Layout : uint8_t { tiled, pipelined, onednn };
  Layout layout = Layout::tiled;
  int tile_floats = 2048;  // tiled: floats per tile (whole rows, 1 to 64 of them)
  int prefetch = 0;        // pipelined: rows ahead asked for while sweeping (0: none)
  bool stream = false;     // streaming stores of the output, where it is aligned to the vector width
  // "tiled-2048", "pipelined-pf2", "pipelined-pf0+nt" (nt: non-temporal stores), "onednn".
  std::string name() const;
  bool operator==(const NormVariant& o) const {
    return layout == o.layout && tile_floats == o.tile_floats && prefetch == o.prefetch && stream == o.stream;
  }
};
// Whether a call of variant v with output `out` (rows of d) writes it with streaming stores.
bool variant_streams(const NormVariant& v, const float* out, int64_t d);
// The variant named by `name` (NormVariant::name's syntax); throws UsageError naming the problem.
NormVariant parse_norm_variant(const std::string& name);

void layernorm_forward_with(const NormVariant& v, float* y, float* mean, float* rstd, const float* x,
                            const float* gamma, const float* beta, int64_t n, int64_t d, float eps);
void layernorm_backward_with(const NormVariant& v, float* dx, float* dgamma, float* dbeta, const float* dy,
                             const float* x, const float* gamma, const float* mean, const float* rstd, int64_t n,
                             int64_t d);
void rmsnorm_forward_with(const NormVariant& v, float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                          int64_t d, float eps);
void rmsnorm_backward_with(const NormVariant& v, float* dx, float* dgamma, const float* dy, const float* x,
                           const float* gamma, const float* rstd, int64_t n, int64_t d);
void add_layernorm_forward_with(const NormVariant& v, float* s, float* y, float* mean, float* rstd, const float* a,
                                const float* b, float alpha, const float* gamma, const float* beta, int64_t n,
                                int64_t d, float eps);
void add_rmsnorm_forward_with(const NormVariant& v, float* s, float* y, float* rstd, const float* a, const float* b,
                              float alpha, const float* gamma, int64_t n, int64_t d, float eps);

// A shape class: the kernel, the row length, where the call's arrays fit (l2: the per-core L2;
// llc: the last-level cache; mem: neither) and the threads. Each class is tuned once.
struct NormShapeClass {
  NormKernel kernel = NormKernel::layernorm_forward;
  int64_t d = 0;
  std::string fits;  // "l2", "llc", "mem"
  int threads = 1;
  bool dx = true;    // backward: dx wanted (without it only the parameter gradients run, tiled)
  std::string key() const;  // "layernorm_forward d=4096 mem t=2"
};
NormShapeClass norm_shape_class(NormKernel k, int64_t n, int64_t d, bool dx = true);

struct NormCandidateTime {
  std::string variant;
  double seconds = 0;  // median per call on the timed shape
};
struct NormChoice {
  NormShapeClass shape;
  NormVariant best;    // what the backend runs (LayerNorm: may be onednn)
  NormVariant own;     // the fastest of normlab's own variants (*_onepass, add_*_fused)
  // "measured" (timed now, in this process), "cached" (from the tuning cache), "forced
  // (NORMLAB_NORM_VARIANT=...)" or "rule (NORMLAB_TUNE=off)".
  std::string source;
  int64_t timed_rows = 0;                  // the rows x d timed for this class (0: not timed)
  std::vector<NormCandidateTime> times;    // every candidate's median, fastest first
};
// The choice for a call's shape class: decided by the first call of the class in the process
// (NORMLAB_TUNE=off: the fixed rule; cached, the default: the cache entry or a measurement added
// to the cache; fresh: measured, the cache entry replaced). Thread-safe; the reference stays valid.
const NormChoice& norm_choice(NormKernel k, int64_t n, int64_t d, bool dx = true);
// The choices made so far in this process, in the order the classes were first used.
std::vector<NormChoice> norm_choices_made();
// What NORMLAB_TUNE asks for, and where the cache lives ("" when no cache directory is known).
enum class TuneMode : uint8_t { off, cached, fresh };
TuneMode tune_mode();
// Throws UsageError when NORMLAB_TUNE, NORMLAB_NORM_VARIANT or NORMLAB_STREAMING_STORES is set to
// a value they do not take (what norm_choice would throw at its first call).
void check_tuning_environment();
const char* to_string(TuneMode m);
std::string tune_cache_path();
// For tests: forget the process's choices, so that the next call of each class decides again
// (under the environment of that moment).
void reset_norm_choices();

// The ISA the kernels were compiled for ("avx512", "avx2", "portable") and a stamp of their build.
const char* norm_kernels_isa();
const char* norm_kernels_build_stamp();
int64_t last_level_cache_size();
int64_t l2_cache_size();

}  // namespace normlab::cpu
