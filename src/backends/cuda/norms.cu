// LayerNorm and RMSNorm over the last dimension (N rows of D), forward (alone or fused with the
// residual add s = alpha*a + b) and backward, each launcher below its kernels, under the cpu
// backend's names. Templated on the storage of the N x D arrays and of the parameters: float,
// or __nv_bfloat16 / __half for `bench norms --precision bf16,fp16` (statistics and parameter
// gradients are float32 either way).
#include <vector>

#include "columns.h"
#include "flavor.h"
#include "normlab/composite_norm_kernels.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/rmsnorm_kernels.h"
#include "tensor_args.h"

namespace normlab::cuda {

namespace {

constexpr size_t kMaxCacheBytes = 96 * 1024;  // opt-in shared memory per block (sm_90: 227 KiB)

// ---- forward ------------------------------------------------------------------------------------
template <class T>
struct NormFwd {
  T* y;
  float* mean;  // null for RMSNorm
  float* rstd;
  T* s;         // the sum, kAdd only
  const T* a;   // x, or the first addend
  const T* b;   // kAdd only
  float alpha;
  const T* gamma;
  const T* beta;  // null for RMSNorm
  int64_t d;
  float eps;
};

// One block per row. The row (or the sum s) is read once from global memory: pass 1 keeps it
// in shared memory (kCache) as float; without the cache (very long rows) the later passes
// read it again (from L2). Statistics in float32: the mean, then the centred variance.
template <class T, int P, bool kAdd, bool kRms, bool kCache>
__global__ void norm_forward_kernel(NormFwd<T> p) {
  NL_DYNAMIC_SHARED(float, cache);
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t d = p.d, units = d / P;
  const T* xr = p.a + row * d;
  const T* br = kAdd ? p.b + row * d : nullptr;
  T* sr = kAdd ? p.s + row * d : nullptr;
  auto fetch = [&](int64_t u, float (&v)[P]) {
    if (kCache) {
#pragma unroll
      for (int k = 0; k < P; ++k) v[k] = cache[u * P + k];
    } else if (kAdd) {
      load_unit<T, P>(sr, u, v);  // written by this thread in pass 1
    } else {
      load_unit<T, P>(xr, u, v);
    }
  };
  float acc = 0.0f;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float v[P];
    load_unit<T, P>(xr, u, v);
    if (kAdd) {
      float w[P];
      load_unit<T, P>(br, u, w);
#pragma unroll
      for (int k = 0; k < P; ++k) v[k] = to_f(from_f<T>(p.alpha * v[k] + w[k]));  // s as stored
      store_unit<T, P>(sr, u, v);
    }
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (kCache) cache[u * P + k] = v[k];
      acc += kRms ? v[k] * v[k] : v[k];
    }
  }
  float mu = 0.0f, var = 0.0f;
  if (kRms) {
    var = block_sum(acc, scratch) / static_cast<float>(d);
  } else {
    mu = block_sum(acc, scratch) / static_cast<float>(d);
    float acc2 = 0.0f;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      float v[P];
      fetch(u, v);
#pragma unroll
      for (int k = 0; k < P; ++k) acc2 += (v[k] - mu) * (v[k] - mu);
    }
    var = block_sum(acc2, scratch) / static_cast<float>(d);
  }
  const float rs = 1.0f / sqrtf(var + p.eps);
  T* yr = p.y + row * d;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float v[P], g[P], o[P];
    fetch(u, v);
    load_unit<T, P>(p.gamma, u, g);
    if (kRms) {
#pragma unroll
      for (int k = 0; k < P; ++k) o[k] = g[k] * (v[k] * rs);
    } else {
      float bt[P];
      load_unit<T, P>(p.beta, u, bt);
#pragma unroll
      for (int k = 0; k < P; ++k) o[k] = g[k] * ((v[k] - mu) * rs) + bt[k];
    }
    store_unit<T, P>(yr, u, o);
  }
  if (threadIdx.x == 0) {
    if (!kRms) p.mean[row] = mu;
    p.rstd[row] = rs;
  }
}

template <class T, int P, bool kAdd, bool kRms>
void launch_norm_forward(const NormFwd<T>& p, int64_t n) {
  const char* name = kAdd ? (kRms ? "add_rmsnorm_forward" : "add_layernorm_forward")
                          : (kRms ? "rmsnorm_forward" : "layernorm_forward");
  const int threads = row_threads(p.d / P);
  const size_t bytes = static_cast<size_t>(p.d) * sizeof(float);
  if (bytes <= kMaxCacheBytes) {
    auto kernel = norm_forward_kernel<T, P, kAdd, kRms, true>;
    allow_smem(kernel, bytes, name);
    launch(name, kernel, static_cast<unsigned>(n), threads, bytes, p);
  } else {
    launch(name, norm_forward_kernel<T, P, kAdd, kRms, false>, static_cast<unsigned>(n), threads, 0, p);
  }
}

// One block per row (n of them), 4-element units when d and every pointer allow.
template <class T, bool kAdd, bool kRms>
void norm_forward_t(const NormFwd<T>& p, int64_t n) {
  if (n <= 0) return;
  if (!rows_fit(n))
    check(cudaErrorInvalidConfiguration, "grid of one block per row",
          kAdd ? (kRms ? "add_rmsnorm_forward" : "add_layernorm_forward")
               : (kRms ? "rmsnorm_forward" : "layernorm_forward"));
  constexpr int kVec = 4;  // elements: every storage walks a row in the same units (common.cuh)
  const bool vec = p.d % kVec == 0 && unit_aligned<T>(p.y) && unit_aligned<T>(p.a) && unit_aligned<T>(p.b) &&
                   unit_aligned<T>(p.s) && unit_aligned<T>(p.gamma) && unit_aligned<T>(p.beta);
  if (vec)
    launch_norm_forward<T, kVec, kAdd, kRms>(p, n);
  else
    launch_norm_forward<T, 1, kAdd, kRms>(p, n);
}

// ---- the composite (norm_compute format) ----------------------------------------------------------
// One block per row, in the order of precision.h's composite_norm_row: every intermediate as the
// format stores it, sums in double. Three passes over the row (it is recomputed, not cached:
// this mode is for finding where a format breaks, not for speed).
__global__ void composite_norm_kernel(Out y, float* mean, float* rstd, In x, In gamma, In beta, int64_t d, float eps,
                                      int format) {
  NL_SHARED_ARRAY(double, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t base = row * d;
  const float fd = static_cast<float>(d);
  float mu = 0.0f;
  if (beta) {
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += ld(x, base + j);
    mu = stored_as(static_cast<float>(block_sum_d(s, scratch)) / fd, format);
  }
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float xj = ld(x, base + j);
    const float c = beta ? stored_as(xj - mu, format) : xj;
    sq += stored_as(c * c, format);
  }
  const float var = stored_as(static_cast<float>(block_sum_d(sq, scratch)) / fd, format);
  const float r = stored_as(1.0f / sqrtf(stored_as(var + stored_as(eps, format), format)), format);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float xj = ld(x, base + j);
    const float c = beta ? stored_as(xj - mu, format) : xj;
    const float scaled = stored_as(stored_as(c * r, format) * ld(gamma, j), format);
    // The last rounding is the store's own when y holds the format (native storage).
    st(y, base + j, beta ? stored_as(scaled + ld(beta, j), format) : scaled);
  }
  if (threadIdx.x == 0) {
    if (beta) mean[row] = mu;
    rstd[row] = r;
  }
}

// The composite's backward (precision.h's composite_norm_row_backward, in its order): one block
// per row, the row's two sums (dr; LayerNorm's dmu) in double across the block, c and dxh
// recomputed on each pass rather than kept.
__device__ inline float composite_centred(In x, int64_t i, float mu, bool ln, int format) {
  return ln ? stored_as(ld(x, i) - mu, format) : ld(x, i);
}

__global__ void composite_norm_backward_kernel(Out dx, In dy, In x, In gamma, const float* mean, const float* rstd,
                                               int64_t d, int format) {
  NL_SHARED_ARRAY(double, scratch, 32);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * d;
  const bool ln = mean != nullptr;
  const float mu = ln ? mean[blockIdx.x] : 0.0f, r = rstd[blockIdx.x], fd = static_cast<float>(d);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float dxh = stored_as(ld(dy, base + j) * ld(gamma, j), format);
    s += stored_as(dxh * composite_centred(x, base + j, mu, ln, format), format);
  }
  const float dr = stored_as(static_cast<float>(block_sum_d(s, scratch)), format);
  // r.pow(3): bf16 multiplies in its own type, fp16 rounds pow's float32 result once.
  const float cube = format == 1 ? stored_as(stored_as(r * r, format) * r, format)
                                 : stored_as(static_cast<float>(static_cast<double>(r) * r * r), format);
  const float dv = stored_as(stored_as(-0.5f * dr, format) * cube, format);
  const float ds = stored_as(dv / fd, format);
  double sc = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float c = composite_centred(x, base + j, mu, ln, format);
    const float dc1 = stored_as(stored_as(ld(dy, base + j) * ld(gamma, j), format) * r, format);
    const float dc = stored_as(dc1 + stored_as(ds * stored_as(2.0f * c, format), format), format);
    sc += dc;
    if (!ln) st(dx, base + j, dc);
  }
  if (!ln) return;
  const float dx2 = stored_as(stored_as(-static_cast<float>(block_sum_d(sc, scratch)), format) / fd, format);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float c = composite_centred(x, base + j, mu, ln, format);
    const float dc1 = stored_as(stored_as(ld(dy, base + j) * ld(gamma, j), format) * r, format);
    const float dc = stored_as(dc1 + stored_as(ds * stored_as(2.0f * c, format), format), format);
    st(dx, base + j, stored_as(dc + dx2, format));
  }
}

// dgamma and dbeta: one thread per column, the rows in order, in double.
__global__ void composite_norm_columns_kernel(float* dgamma, float* dbeta, In dy, In x, const float* mean,
                                              const float* rstd, int64_t n, int64_t d, int format) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const bool ln = mean != nullptr;
  double sg = 0.0, sb = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float g = ld(dy, i * d + j);
    const float xh = stored_as(composite_centred(x, i * d + j, ln ? mean[i] : 0.0f, ln, format) * rstd[i], format);
    sg += stored_as(g * xh, format);
    sb += g;
  }
  if (dgamma) dgamma[j] = static_cast<float>(sg);
  if (dbeta) dbeta[j] = static_cast<float>(sb);
}

}  // namespace

void composite_norm_forward(Out y, float* mean, float* rstd, In x, In gamma, In beta, int64_t n, int64_t d,
                            double eps, int format) {
  if (n <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "composite_norm_forward");
  // eps as a Python scalar: float32 here, rounded to the format in the kernel (composite_norm_row).
  launch("composite_norm_forward", composite_norm_kernel, static_cast<unsigned>(n), row_threads(d), 0, y, mean, rstd,
         x, gamma, beta, d, static_cast<float>(eps), format);
}

void composite_norm_backward(Out dx, float* dgamma, float* dbeta, In dy, In x, In gamma, const float* mean,
                             const float* rstd, int64_t n, int64_t d, int format) {
  if (n <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "composite_norm_backward");
  if (dx.p)
    launch("composite_norm_backward", composite_norm_backward_kernel, static_cast<unsigned>(n), row_threads(d), 0, dx,
           dy, x, gamma, mean, rstd, d, format);
  if (dgamma || dbeta)
    launch("composite_norm_backward (columns)", composite_norm_columns_kernel, static_cast<unsigned>((d + 255) / 256),
           256, 0, dgamma, dbeta, dy, x, mean, rstd, n, d, format);
}

template <class T>
void layernorm_forward(T* y, float* mean, float* rstd, const T* x, const T* gamma, const T* beta, int64_t n,
                       int64_t d, float eps) {
  norm_forward_t<T, false, false>({y, mean, rstd, nullptr, x, nullptr, 1.0f, gamma, beta, d, eps}, n);
}

template <class T>
void rmsnorm_forward(T* y, float* rstd, const T* x, const T* gamma, int64_t n, int64_t d, float eps) {
  norm_forward_t<T, false, true>({y, nullptr, rstd, nullptr, x, nullptr, 1.0f, gamma, nullptr, d, eps}, n);
}

template <class T>
void add_layernorm_forward(T* s, T* y, float* mean, float* rstd, const T* a, const T* b, float alpha,
                           const T* gamma, const T* beta, int64_t n, int64_t d, float eps) {
  norm_forward_t<T, true, false>({y, mean, rstd, s, a, b, alpha, gamma, beta, d, eps}, n);
}

template <class T>
void add_rmsnorm_forward(T* s, T* y, float* rstd, const T* a, const T* b, float alpha, const T* gamma,
                         int64_t n, int64_t d, float eps) {
  norm_forward_t<T, true, true>({y, nullptr, rstd, s, a, b, alpha, gamma, nullptr, d, eps}, n);
}

// ---- backward -----------------------------------------------------------------------------------
namespace {

template <class T>
struct NormBwd {
  T* dx;
  const T* dy;
  const T* x;
  const T* gamma;
  const float* mean;  // null for RMSNorm
  const float* rstd;
  int64_t d;
};

// One element of a norm backward, for both backward kernels: g = dy*gamma and xhat =
// (x-mu)*rstd (mu = 0 for RMSNorm); with the row's means of g and g*xhat,
// dx = rstd*(g - mean(g) - xhat*mean(g*xhat)).
struct GradElem {
  float g, xhat;
};
__device__ __forceinline__ GradElem grad_elem(float x, float dy, float gamma, float mu, float rs) {
  return {dy * gamma, (x - mu) * rs};
}
__device__ __forceinline__ float grad_dx(GradElem e, float rs, float mean_g, float mean_gx) {
  return rs * (e.g - mean_g - e.xhat * mean_gx);
}
// The row's two means from each thread's partial sums (RMSNorm has no mean(g) term).
template <bool kRms>
__device__ __forceinline__ void grad_means(float sg, float sgx, float* scratch, int64_t d, float& mean_g,
                                           float& mean_gx) {
  mean_g = kRms ? 0.0f : block_sum(sg, scratch) / static_cast<float>(d);
  mean_gx = block_sum(sgx, scratch) / static_cast<float>(d);
}

// One row of the backward: where its x and dy start, its saved statistics, and its two means
// (grad_means) from pass 1, one read of x, dy and gamma; `each(i, x, dy, e)` sees element i of the
// row on the way (the dx kernel keeps the row in shared memory, the one-pass kernel adds its column
// sums).
template <class T>
struct BwdRow {
  const T* x;
  const T* dy;
  float mu, rs, mean_g, mean_gx;
};
template <class T, int P, bool kRms, class Each>
__device__ __forceinline__ BwdRow<T> backward_row(const NormBwd<T>& p, int64_t row, float* scratch, Each each) {
  const int64_t d = p.d, units = d / P;
  BwdRow<T> r{p.x + row * d, p.dy + row * d, kRms ? 0.0f : p.mean[row], p.rstd[row], 0.0f, 0.0f};
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float xv[P], dv[P], gv[P];
    load_unit<T, P>(r.x, u, xv);
    load_unit<T, P>(r.dy, u, dv);
    load_unit<T, P>(p.gamma, u, gv);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const GradElem e = grad_elem(xv[k], dv[k], gv[k], r.mu, r.rs);
      sg += e.g;
      sgx += e.g * e.xhat;
      each(u * P + k, xv[k], dv[k], e);
    }
  }
  grad_means<kRms>(sg, sgx, scratch, d, r.mean_g, r.mean_gx);
  return r;
}

// Pass 2 of a row's backward for one unit of P values, x and dy already in registers.
template <class T, int P>
__device__ __forceinline__ void store_dx_unit(const NormBwd<T>& p, const BwdRow<T>& r, T* dxr, int64_t u,
                                              const float* xv, const float* dv) {
  float gv[P], o[P];
  load_unit<T, P>(p.gamma, u, gv);
#pragma unroll
  for (int k = 0; k < P; ++k) o[k] = grad_dx(grad_elem(xv[k], dv[k], gv[k], r.mu, r.rs), r.rs, r.mean_g, r.mean_gx);
  store_unit<T, P>(dxr, u, o);
}

// dx, one block per row: g = dy*gamma, xhat = (x-mu)*rstd;
// dx = rstd*(g - mean(g) - xhat*mean(g*xhat)) (RMSNorm: without mean(g)). kCache keeps x and
// dy of the row in shared memory between the two passes.
template <class T, int P, bool kRms, bool kCache>
__global__ void norm_backward_dx_kernel(NormBwd<T> p) {
  NL_DYNAMIC_SHARED(float, cache);  // [0, d): x, [d, 2d): dy
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t d = p.d, units = d / P;
  const BwdRow<T> r = backward_row<T, P, kRms>(p, row, scratch, [&](int64_t i, float xi, float dyi, const GradElem&) {
    if (kCache) {
      cache[i] = xi;
      cache[d + i] = dyi;
    }
  });
  T* dxr = p.dx + row * d;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float xv[P], dv[P];
    if (kCache) {
#pragma unroll
      for (int k = 0; k < P; ++k) {
        xv[k] = cache[u * P + k];
        dv[k] = cache[d + u * P + k];
      }
    } else {
      load_unit<T, P>(r.x, u, xv);
      load_unit<T, P>(r.dy, u, dv);
    }
    store_dx_unit<T, P>(p, r, dxr, u, xv, dv);
  }
}

template <class T, int P, bool kRms>
void launch_norm_backward_dx(const NormBwd<T>& p, int64_t n) {
  const char* name = kRms ? "rmsnorm_backward" : "layernorm_backward";
  const int threads = row_threads(p.d / P);
  const size_t bytes = 2 * static_cast<size_t>(p.d) * sizeof(float);
  if (bytes <= kMaxCacheBytes) {
    auto kernel = norm_backward_dx_kernel<T, P, kRms, true>;
    allow_smem(kernel, bytes, name);
    launch(name, kernel, static_cast<unsigned>(n), threads, bytes, p);
  } else {
    launch(name, norm_backward_dx_kernel<T, P, kRms, false>, static_cast<unsigned>(n), threads, 0, p);
  }
}

// The backward with one read of x and dy from memory: a block takes rows blockIdx.x,
// blockIdx.x + gridDim.x, ...; thread t always owns the same units of a row (t, t + blockDim.x,
// ...), so it alone accumulates its columns' dgamma/dbeta sums over the block's rows, in shared
// memory, without atomics. Per row: pass 1 reads x and dy (the sums for the two block
// reductions, and the column sums), pass 2 reads the row again for dx (from L1/L2: the block just
// read it). At the end each block writes its column sums to part_g/part_b[blockIdx.x, :], which
// column_final adds in block order: deterministic, no float atomics.
template <class T, int P, bool kRms>
__global__ void norm_backward_onepass_kernel(NormBwd<T> p, int64_t n, float* part_g, float* part_b) {
  NL_DYNAMIC_SHARED(float, sums);  // [0, d): dgamma; [d, 2d): dbeta (LayerNorm)
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t d = p.d, units = d / P;
  float* sg_col = sums;
  float* sb_col = sums + d;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
#pragma unroll
    for (int e = 0; e < P; ++e) {
      sg_col[u * P + e] = 0.0f;
      if (!kRms) sb_col[u * P + e] = 0.0f;
    }
  }
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const BwdRow<T> r = backward_row<T, P, kRms>(p, row, scratch, [&](int64_t i, float, float dyi, const GradElem& t) {
      sg_col[i] += dyi * t.xhat;
      if (!kRms) sb_col[i] += dyi;
    });
    if (p.dx) {
      T* dxr = p.dx + row * d;
      for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
        float xv[P], dv[P];
        load_unit<T, P>(r.x, u, xv);
        load_unit<T, P>(r.dy, u, dv);
        store_dx_unit<T, P>(p, r, dxr, u, xv, dv);
      }
    }
  }
  if (part_g) {
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        part_g[static_cast<int64_t>(blockIdx.x) * d + u * P + e] = sg_col[u * P + e];
        if (part_b) part_b[static_cast<int64_t>(blockIdx.x) * d + u * P + e] = sb_col[u * P + e];
      }
    }
  }
}

constexpr size_t kFusedMaxSmem = 192 * 1024;  // column sums per block (sm_90 allows 227 KiB)

// The one-read backward when a block's column sums fit in shared memory (d <= 24576 for
// LayerNorm, 49152 for RMSNorm); true when it ran.
template <class T, int P, bool kRms>
bool try_norm_backward_onepass(const NormBwd<T>& p, int64_t n, float* dgamma, float* dbeta,
                             float* work, const char* name) {
  const size_t bytes = (kRms ? 1 : 2) * static_cast<size_t>(p.d) * sizeof(float);
  if (bytes > kFusedMaxSmem) return false;
  const int threads = row_threads(p.d / P);
  auto kernel = norm_backward_onepass_kernel<T, P, kRms>;
  allow_smem(kernel, bytes, name);
  // One wave: as many blocks as are resident at once (rows are shared out evenly among them).
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor", name);
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(onepass_blocks(n), static_cast<int64_t>(std::max(per_sm, 1)) * device_sms()));
  float* part_g = (dgamma || dbeta) ? work : nullptr;
  float* part_b = (!kRms && (dgamma || dbeta)) ? work + blocks * p.d : nullptr;
  launch(name, kernel, static_cast<unsigned>(blocks), threads, bytes, p, n, part_g, part_b);
  if (part_g) {
    column_final(dgamma, dbeta, part_g, part_b, blocks, p.d, name);
  }
  return true;
}

template <class T, bool kRms>
void norm_backward_t(const NormBwd<T>& p, float* dgamma, float* dbeta, int64_t n, float* work) {
  const char* name = kRms ? "rmsnorm_backward" : "layernorm_backward";
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", name);
  if (!p.dx && !dgamma && !dbeta) return;
  if (n > 0 && p.d > 0) {
    constexpr int kVec = 4;  // as the forward
    const bool vec = p.d % kVec == 0 && unit_aligned<T>(p.dx) && unit_aligned<T>(p.dy) && unit_aligned<T>(p.x) &&
                     unit_aligned<T>(p.gamma);
    const bool onepass = vec ? try_norm_backward_onepass<T, kVec, kRms>(p, n, dgamma, dbeta, work, name)
                             : try_norm_backward_onepass<T, 1, kRms>(p, n, dgamma, dbeta, work, name);
    if (onepass) return;
    // Rows too long for registers: dx one block per row, then the column reductions.
    if (p.dx) {
      if (vec)
        launch_norm_backward_dx<T, kVec, kRms>(p, n);
      else
        launch_norm_backward_dx<T, 1, kRms>(p, n);
    }
  }
  if (dgamma || dbeta) {
    norm_column_sums<T>(dgamma, dbeta, p.dy, p.x, p.mean, p.rstd, n, p.d, kRms, work, name);
  }
}

}  // namespace

template <class T>
void layernorm_backward(T* dx, float* dgamma, float* dbeta, const T* dy, const T* x, const T* gamma,
                        const float* mean, const float* rstd, int64_t n, int64_t d, float* work) {
  norm_backward_t<T, false>({dx, dy, x, gamma, mean, rstd, d}, dgamma, dbeta, n, work);
}

template <class T>
void rmsnorm_backward(T* dx, float* dgamma, const T* dy, const T* x, const T* gamma, const float* rstd,
                      int64_t n, int64_t d, float* work) {
  norm_backward_t<T, true>({dx, dy, x, gamma, nullptr, rstd, d}, dgamma, nullptr, n, work);
}

// The three storage types (kernels.h declares the templates).
#define NL_NORMS_FOR(T)                                                                                          \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t, float);  \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float);                     \
  template void add_layernorm_forward<T>(T*, T*, float*, float*, const T*, const T*, float, const T*, const T*,   \
                                         int64_t, int64_t, float);                                               \
  template void add_rmsnorm_forward<T>(T*, T*, float*, const T*, const T*, float, const T*, int64_t, int64_t,     \
                                       float);                                                                   \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*,            \
                                      const float*, int64_t, int64_t, float*);                                   \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int64_t, int64_t,    \
                                    float*);
NL_NORMS_FOR(float)
NL_NORMS_FOR(__nv_bfloat16)
NL_NORMS_FOR(__half)
#undef NL_NORMS_FOR

// ---- the Backend's norm kernels (layernorm_kernels.h, rmsnorm_kernels.h, composite_norm_kernels.h)

namespace {

// The census of a diagnosis (never a step's path): core's definition over the downloaded rows.
void composite_census_on_host(CompositeBackwardCensus& census, const Tensor& dy, const Tensor& x,
                              const Tensor& gamma, const Tensor& mean, const Tensor& rstd, int64_t n,
                              int64_t d, Precision format) {
  auto host = [](const Tensor& t) {
    std::vector<float> v;
    if (!t.defined()) return v;
    for (double e : t.to_vector()) v.push_back(static_cast<float>(e));
    return v;
  };
  const std::vector<float> hdy = host(dy), hx = host(x), hg = host(gamma), hm = host(mean), hr = host(rstd);
  std::vector<float> row(static_cast<size_t>(d));
  const bool ln = mean.defined();
  for (int64_t i = 0; i < n; ++i) {
    composite_norm_row_backward(ln, format, hdy.data() + i * d, hx.data() + i * d, hg.data(), ln ? hm[i] : 0.0f,
                                hr[i], row.data(), d, &census);
    for (int64_t j = 0; j < d; ++j)
      composite_gamma_term(ln, format, hdy[i * d + j], hx[i * d + j], ln ? hm[i] : 0.0f, hr[i], &census);
  }
}

void call_layernorm_forward(Backend&, const LayerNormForward& a) {
  const char* kn = "layernorm_forward";
  expect(kn, "y", a.y);
  expect_f32(kn, "mean", a.mean);
  expect_f32(kn, "rstd", a.rstd);
  expect_all(kn, {{"x", &a.x}, {"gamma", &a.gamma}, {"beta", &a.beta}});
  expect_same_storage(kn, "y", &a.y, "x", a.x);
  const Tensor g = in_storage(a.gamma, a.x.dtype()), b = in_storage(a.beta, a.x.dtype());
  with_storage(a.x.dtype(), [&](auto t) {
    using T = decltype(t);
    layernorm_forward<T>(ptr<T>(a.y), fp(a.mean), fp(a.rstd), ptr<const T>(a.x), ptr<const T>(g), ptr<const T>(b), a.n,
                         a.d, static_cast<float>(a.eps));
  });
}

void call_layernorm_backward(Backend& self, const LayerNormBackward& a) {
  const char* kn = "layernorm_backward";
  expect_all(kn, {{"dx", a.dx}, {"dgamma", a.dgamma}, {"dbeta", a.dbeta}, {"dy", &a.dy}, {"x", &a.x},
                  {"gamma", &a.gamma}});
  expect_f32(kn, "mean", a.mean);
  expect_f32(kn, "rstd", a.rstd);
  expect_same_storage(kn, "dy", &a.dy, "x", a.x);
  expect_same_storage(kn, "dx", a.dx, "x", a.x);
  const Tensor g = in_storage(a.gamma, a.x.dtype());
  F32Out dg(a.dgamma), db(a.dbeta);
  float* work = (a.dgamma || a.dbeta) ? work_floats(self, column_work(a.n, a.d), kn) : nullptr;
  with_storage(a.x.dtype(), [&](auto t) {
    using T = decltype(t);
    layernorm_backward<T>(ptr<T>(a.dx), dg.get(), db.get(), ptr<const T>(a.dy), ptr<const T>(a.x), ptr<const T>(g),
                          fp(a.mean), fp(a.rstd), a.n, a.d, work);
  });
  dg.finish();
  db.finish();
}

void call_add_layernorm_forward(Backend&, const AddLayerNormForward& a) {
  const char* kn = "add_layernorm_forward";
  // float32 only: low precision runs the add and the norm as two ops (ops/norm.cpp).
  expect_all_f32(kn, {{"s", &a.s}, {"y", &a.y}, {"mean", &a.mean}, {"rstd", &a.rstd}, {"a", &a.a}, {"b", &a.b},
                      {"gamma", &a.gamma}, {"beta", &a.beta}});
  add_layernorm_forward(fp(a.s), fp(a.y), fp(a.mean), fp(a.rstd), fp(a.a), fp(a.b), static_cast<float>(a.alpha),
                        fp(a.gamma), fp(a.beta), a.n, a.d, static_cast<float>(a.eps));
}

void call_rmsnorm_forward(Backend&, const RmsNormForward& a) {
  const char* kn = "rmsnorm_forward";
  expect(kn, "y", a.y);
  expect_f32(kn, "rstd", a.rstd);
  expect(kn, "x", a.x);
  expect(kn, "gamma", a.gamma);
  expect_same_storage(kn, "y", &a.y, "x", a.x);
  const Tensor g = in_storage(a.gamma, a.x.dtype());
  with_storage(a.x.dtype(), [&](auto t) {
    using T = decltype(t);
    rmsnorm_forward<T>(ptr<T>(a.y), fp(a.rstd), ptr<const T>(a.x), ptr<const T>(g), a.n, a.d,
                       static_cast<float>(a.eps));
  });
}

void call_rmsnorm_backward(Backend& self, const RmsNormBackward& a) {
  const char* kn = "rmsnorm_backward";
  expect_all(kn, {{"dx", a.dx}, {"dgamma", a.dgamma}, {"dy", &a.dy}, {"x", &a.x}, {"gamma", &a.gamma}});
  expect_f32(kn, "rstd", a.rstd);
  expect_same_storage(kn, "dy", &a.dy, "x", a.x);
  expect_same_storage(kn, "dx", a.dx, "x", a.x);
  const Tensor g = in_storage(a.gamma, a.x.dtype());
  F32Out dg(a.dgamma);
  float* work = a.dgamma ? work_floats(self, column_work(a.n, a.d), kn) : nullptr;
  with_storage(a.x.dtype(), [&](auto t) {
    using T = decltype(t);
    rmsnorm_backward<T>(ptr<T>(a.dx), dg.get(), ptr<const T>(a.dy), ptr<const T>(a.x), ptr<const T>(g), fp(a.rstd),
                        a.n, a.d, work);
  });
  dg.finish();
}

void call_add_rmsnorm_forward(Backend&, const AddRmsNormForward& a) {
  const char* kn = "add_rmsnorm_forward";
  // float32 only, as add_layernorm_forward.
  expect_all_f32(kn, {{"s", &a.s}, {"y", &a.y}, {"rstd", &a.rstd}, {"a", &a.a}, {"b", &a.b}, {"gamma", &a.gamma}});
  add_rmsnorm_forward(fp(a.s), fp(a.y), fp(a.rstd), fp(a.a), fp(a.b), static_cast<float>(a.alpha), fp(a.gamma), a.n,
                      a.d, static_cast<float>(a.eps));
}

void call_composite_norm_forward(Backend&, const CompositeNormForward& a) {
  const char* kn = "composite_norm_forward";
  const bool ln = a.beta.defined();
  expect_all(kn, {{"y", &a.y}, {"x", &a.x}, {"gamma", &a.gamma}});
  if (ln) {
    expect(kn, "beta", a.beta);
    expect_f32(kn, "mean", a.mean);
  }
  expect_f32(kn, "rstd", a.rstd);
  composite_norm_forward(arr_out(a.y), ln ? fp(a.mean) : nullptr, fp(a.rstd), arr_in(a.x), arr_in(a.gamma),
                         arr_in(a.beta), a.n, a.d, a.eps, static_cast<int>(a.format));
}

void call_composite_norm_backward(Backend&, const CompositeNormBackward& a) {
  const char* kn = "composite_norm_backward";
  const bool ln = a.mean.defined();
  expect_all(kn, {{"dx", a.dx}, {"dgamma", a.dgamma}, {"dbeta", a.dbeta}, {"dy", &a.dy}, {"x", &a.x},
                  {"gamma", &a.gamma}});
  if (ln) expect_f32(kn, "mean", a.mean);
  expect_f32(kn, "rstd", a.rstd);
  F32Out dg(a.dgamma), db(a.dbeta);
  composite_norm_backward(arr_out(a.dx), dg.get(), db.get(), arr_in(a.dy), arr_in(a.x), arr_in(a.gamma),
                          ln ? fp(a.mean) : nullptr, fp(a.rstd), a.n, a.d, static_cast<int>(a.format));
  dg.finish();
  db.finish();
  if (a.census) composite_census_on_host(*a.census, a.dy, a.x, a.gamma, a.mean, a.rstd, a.n, a.d, a.format);
}

}  // namespace

NORMLAB_KERNEL(LayerNormForward, kBackendName, call_layernorm_forward);
NORMLAB_KERNEL(LayerNormBackward, kBackendName, call_layernorm_backward);
NORMLAB_KERNEL(AddLayerNormForward, kBackendName, call_add_layernorm_forward);
NORMLAB_KERNEL(RmsNormForward, kBackendName, call_rmsnorm_forward);
NORMLAB_KERNEL(RmsNormBackward, kBackendName, call_rmsnorm_backward);
NORMLAB_KERNEL(AddRmsNormForward, kBackendName, call_add_rmsnorm_forward);
NORMLAB_KERNEL(CompositeNormForward, kBackendName, call_composite_norm_forward);
NORMLAB_KERNEL(CompositeNormBackward, kBackendName, call_composite_norm_backward);

}  // namespace normlab::cuda
