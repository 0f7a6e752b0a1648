// The CUDA backend's kernels (see kernels.h). Written to be obviously correct first: grid-stride
// loops with 64-bit indices, one block per row for row reductions, shared-memory block
// reductions in a fixed order (no float atomics anywhere), every index bounds-checked.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels.h"
#include "launch.h"

namespace normlab::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 65535LL * 16;  // grid-stride loops cover the rest
constexpr int64_t kMaxRowsGrid = 2147483647LL;

bool sync_each_kernel() {
  static const bool on = [] {
    const char* e = std::getenv("NORMLAB_CUDA_SYNC");
    return e != nullptr && std::strcmp(e, "0") != 0 && e[0] != '\0';
  }();
  return on;
}

int grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min(blocks, kMaxGrid)));
}

#define NL_GRID_STRIDE(i, n)                                                         \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// ---- block reductions -------------------------------------------------------------------------
// blockDim.x is a multiple of 32 (<= 1024) wherever these are used; every thread of the block
// must call them; every thread gets the total. `scratch` holds 32 values.
struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <class T, class Op>
__device__ T block_reduce(T v, T* scratch, Op op, T identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call may still be reading scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? scratch[lane] : identity;
  return warp_reduce(r, op);  // every warp reduces the same partials in the same order
}

__device__ float block_sum(float v, float* scratch) { return block_reduce(v, scratch, SumOp{}, 0.0f); }
__device__ float block_max(float v, float* scratch) {
  return block_reduce(v, scratch, MaxOp{}, -INFINITY);
}
__device__ double block_sum_d(double v, double* scratch) {
  return block_reduce(v, scratch, SumOp{}, 0.0);
}

// Threads for a block that walks `units` per row: a multiple of 32, 32..max_threads.
int row_threads(int64_t units, int max_threads = 512) {
  int64_t t = (units + 3) / 4;  // about four units per thread
  t = (t + 31) / 32 * 32;
  return static_cast<int>(std::max<int64_t>(32, std::min<int64_t>(t, max_threads)));
}

// Shared memory above 48 KiB (dynamic + the kernel's static scratch) needs the kernel's opt-in;
// asked for with a margin for the static part.
template <class K>
void allow_smem(K kernel, size_t bytes, const char* name) {
  if (bytes > 40 * 1024)
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", name);
}

// ---- elementwise kernels ------------------------------------------------------------------------
template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  NL_GRID_STRIDE(i, n) out[i] = value;
}

__global__ void add_kernel(float* out, const float* a, const float* b, float alpha, float beta,
                           int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = alpha * a[i] + beta * b[i];
}

__global__ void accumulate_kernel(float* dst, const float* src, int64_t n) {
  NL_GRID_STRIDE(i, n) dst[i] = dst[i] + src[i];
}

__global__ void scale_kernel(float* out, const float* x, float alpha, int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = alpha * x[i];
}

__global__ void mul_kernel(float* out, const float* a, const float* b, int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

__global__ void gelu_kernel(float* y, float* dydx, const float* x, int64_t n) {
  const float inv_sqrt2 = 0.70710678118654752440f;
  const float inv_sqrt_2pi = 0.39894228040143267794f;
  NL_GRID_STRIDE(i, n) {
    const float xi = x[i];
    const float cdf = 0.5f * (1.0f + erff(xi * inv_sqrt2));
    y[i] = xi * cdf;
    if (dydx) dydx[i] = cdf + xi * inv_sqrt_2pi * expf(-0.5f * xi * xi);
  }
}

constexpr int kSumSquaresBlocks = 1024;

__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double acc = 0.0;
  NL_GRID_STRIDE(i, n) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_sum_d(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(double* result, const double* partial, int64_t count) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum_d(acc, scratch);
  if (threadIdx.x == 0) result[0] = acc;
}

__global__ void bias_residual_kernel(float* out, const float* bias, const float* residual,
                                     int64_t m, int64_t n) {
  NL_GRID_STRIDE(i, m * n) {
    float v = residual ? residual[i] : 0.0f;
    if (bias) v += bias[i % n];
    out[i] = v;
  }
}

// ---- column reductions --------------------------------------------------------------------------
// Stage 1: block (32, 8) sums rows [r0, r1) of 32 columns; thread (tx, ty) takes rows r0+ty,
// r0+ty+8, ...; the 8 partial sums of a column are added in order of ty. Stage 2 adds the chunks
// in order. Mode: 0 sum of x; 1 LayerNorm (g: dy*xhat, b: dy); 2 RMSNorm (g: dy*xhat).
constexpr int kColX = 32, kColY = 8;

__device__ inline float to_f(float v) { return v; }
__device__ inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ inline T from_f(float v);
template <>
__device__ inline float from_f<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class T, int kMode>
__global__ void column_partial_kernel(float* part_g, float* part_b, const T* dy, const T* x,
                                      const float* mean, const float* rstd, int64_t rows,
                                      int64_t cols, int64_t rows_per_chunk) {
  NL_SHARED_ARRAY2(float, sg, kColY, kColX + 1);
  NL_SHARED_ARRAY2(float, sb, kColY, kColX + 1);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float ag = 0.0f, ab = 0.0f;
  if (j < cols) {
    for (int64_t i = r0 + ty; i < r1; i += kColY) {
      const float g = to_f(dy[i * cols + j]);
      if (kMode == 0) {
        ag += g;
      } else {
        const float mu = kMode == 1 ? mean[i] : 0.0f;
        const float xhat = (to_f(x[i * cols + j]) - mu) * rstd[i];
        ag += g * xhat;
        if (kMode == 1) ab += g;
      }
    }
  }
  sg[ty][tx] = ag;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < cols) {
    float tg = 0.0f, tb = 0.0f;
    for (int k = 0; k < kColY; ++k) {
      tg += sg[k][tx];
      tb += sb[k][tx];
    }
    part_g[static_cast<int64_t>(blockIdx.y) * cols + j] = tg;
    if (part_b) part_b[static_cast<int64_t>(blockIdx.y) * cols + j] = tb;
  }
}

__global__ void column_final_kernel(float* out_g, float* out_b, const float* part_g,
                                    const float* part_b, int64_t chunks, int64_t cols) {
  NL_GRID_STRIDE(j, cols) {
    double tg = 0.0, tb = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      tg += part_g[c * cols + j];
      if (part_b) tb += part_b[c * cols + j];
    }
    if (out_g) out_g[j] = static_cast<float>(tg);
    if (out_b) out_b[j] = static_cast<float>(tb);
  }
}

// Chunks of rows for the column reductions: enough blocks to fill the GPU, few enough that
// the partials stay small.
int64_t column_chunks(int64_t rows, int64_t& rows_per_chunk) {
  int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(256, rows / 64));
  rows_per_chunk = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  return std::max<int64_t>(1, (rows + rows_per_chunk - 1) / rows_per_chunk);
}

template <class T, int kMode>
void column_reduce(float* out_g, float* out_b, const T* dy, const T* x, const float* mean,
                   const float* rstd, int64_t rows, int64_t cols, float* work, const char* name) {
  if (cols == 0) return;
  if (rows == 0) {
    if (out_g) fill_f32(out_g, cols, 0.0f);
    if (out_b) fill_f32(out_b, cols, 0.0f);
    return;
  }
  int64_t rpc = 0;
  const int64_t chunks = column_chunks(rows, rpc);
  float* part_g = work;
  float* part_b = kMode == 1 ? work + chunks * cols : nullptr;
  dim3 block(kColX, kColY);
  dim3 grid(static_cast<unsigned>((cols + kColX - 1) / kColX), static_cast<unsigned>(chunks));
  launch(name, column_partial_kernel<T, kMode>, grid, block, 0, part_g, part_b, dy, x, mean, rstd, rows, cols, rpc);
  launch(name, column_final_kernel, grid_for(cols), kThreads, 0, out_g, out_b, part_g, part_b, chunks, cols);
}

// ---- norms ----------------------------------------------------------------------------------------
// A row is walked in units of P elements: P = 1 (scalar), or 16 bytes (float4: 4 floats, 8
// bf16) when D is a multiple of P and every pointer is 16-byte aligned.
template <class T, int P>
__device__ inline void load_unit(const T* row, int64_t u, float (&v)[P]);
template <>
__device__ inline void load_unit<float, 1>(const float* row, int64_t u, float (&v)[1]) {
  v[0] = row[u];
}
template <>
__device__ inline void load_unit<__nv_bfloat16, 1>(const __nv_bfloat16* row, int64_t u, float (&v)[1]) {
  v[0] = __bfloat162float(row[u]);
}
template <>
__device__ inline void load_unit<float, 4>(const float* row, int64_t u, float (&v)[4]) {
  const float4 q = reinterpret_cast<const float4*>(row)[u];
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}
template <>
__device__ inline void load_unit<__nv_bfloat16, 8>(const __nv_bfloat16* row, int64_t u, float (&v)[8]) {
  const uint4 q = reinterpret_cast<const uint4*>(row)[u];
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&q);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}

template <class T, int P>
__device__ inline void store_unit(T* row, int64_t u, const float (&v)[P]);
template <>
__device__ inline void store_unit<float, 1>(float* row, int64_t u, const float (&v)[1]) {
  row[u] = v[0];
}
template <>
__device__ inline void store_unit<__nv_bfloat16, 1>(__nv_bfloat16* row, int64_t u, const float (&v)[1]) {
  row[u] = __float2bfloat16_rn(v[0]);
}
template <>
__device__ inline void store_unit<float, 4>(float* row, int64_t u, const float (&v)[4]) {
  reinterpret_cast<float4*>(row)[u] = make_float4(v[0], v[1], v[2], v[3]);
}
template <>
__device__ inline void store_unit<__nv_bfloat16, 8>(__nv_bfloat16* row, int64_t u, const float (&v)[8]) {
  uint4 q;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&q);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  reinterpret_cast<uint4*>(row)[u] = q;
}

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

// dx, one block per row: g = dy*gamma, xhat = (x-mu)*rstd;
// dx = rstd*(g - mean(g) - xhat*mean(g*xhat)) (RMSNorm: without mean(g)). kCache keeps x and
// dy of the row in shared memory between the two passes.
template <class T, int P, bool kRms, bool kCache>
__global__ void norm_backward_dx_kernel(NormBwd<T> p) {
  NL_DYNAMIC_SHARED(float, cache);  // [0, d): x, [d, 2d): dy
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t d = p.d, units = d / P;
  const T* xr = p.x + row * d;
  const T* dyr = p.dy + row * d;
  const float mu = kRms ? 0.0f : p.mean[row];
  const float rs = p.rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float xv[P], dv[P], gv[P];
    load_unit<T, P>(xr, u, xv);
    load_unit<T, P>(dyr, u, dv);
    load_unit<T, P>(p.gamma, u, gv);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (kCache) {
        cache[u * P + k] = xv[k];
        cache[d + u * P + k] = dv[k];
      }
      const GradElem e = grad_elem(xv[k], dv[k], gv[k], mu, rs);
      sg += e.g;
      sgx += e.g * e.xhat;
    }
  }
  float mean_g, mean_gx;
  grad_means<kRms>(sg, sgx, scratch, d, mean_g, mean_gx);
  T* dxr = p.dx + row * d;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float xv[P], dv[P], gv[P], o[P];
    if (kCache) {
#pragma unroll
      for (int k = 0; k < P; ++k) {
        xv[k] = cache[u * P + k];
        dv[k] = cache[d + u * P + k];
      }
    } else {
      load_unit<T, P>(xr, u, xv);
      load_unit<T, P>(dyr, u, dv);
    }
    load_unit<T, P>(p.gamma, u, gv);
#pragma unroll
    for (int k = 0; k < P; ++k) o[k] = grad_dx(grad_elem(xv[k], dv[k], gv[k], mu, rs), rs, mean_g, mean_gx);
    store_unit<T, P>(dxr, u, o);
  }
}

// The backward with one read of x and dy from memory: a block takes rows blockIdx.x,
// blockIdx.x + gridDim.x, ...; thread t always owns the same units of a row (t, t + blockDim.x,
// ...), so it alone accumulates its columns' dgamma/dbeta sums over the block's rows, in shared
// memory, without atomics. Per row: pass 1 reads x and dy (the sums for the two block
// reductions, and the column sums), pass 2 reads the row again for dx (from L1/L2: the block just
// read it). At the end each block writes its column sums to part_g/part_b[blockIdx.x, :], which
// column_final_kernel adds in block order: deterministic, no float atomics.
template <class T, int P, bool kRms>
__global__ void norm_backward_fused_kernel(NormBwd<T> p, int64_t n, float* part_g, float* part_b) {
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
    const T* xr = p.x + row * d;
    const T* dyr = p.dy + row * d;
    const float mu = kRms ? 0.0f : p.mean[row];
    const float rs = p.rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      float xv[P], dv[P], gv[P];
      load_unit<T, P>(xr, u, xv);
      load_unit<T, P>(dyr, u, dv);
      load_unit<T, P>(p.gamma, u, gv);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const GradElem t = grad_elem(xv[e], dv[e], gv[e], mu, rs);
        sg += t.g;
        sgx += t.g * t.xhat;
        sg_col[u * P + e] += dv[e] * t.xhat;
        if (!kRms) sb_col[u * P + e] += dv[e];
      }
    }
    float mean_g, mean_gx;
    grad_means<kRms>(sg, sgx, scratch, d, mean_g, mean_gx);
    if (p.dx) {
      T* dxr = p.dx + row * d;
      for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
        float xv[P], dv[P], gv[P], o[P];
        load_unit<T, P>(xr, u, xv);
        load_unit<T, P>(dyr, u, dv);
        load_unit<T, P>(p.gamma, u, gv);
#pragma unroll
        for (int e = 0; e < P; ++e) o[e] = grad_dx(grad_elem(xv[e], dv[e], gv[e], mu, rs), rs, mean_g, mean_gx);
        store_unit<T, P>(dxr, u, o);
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

// The device's multiprocessor count, asked once (132 if the query fails: only block counts
// depend on it).
int device_sms() {
  static const int sms = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || count <= 0) {
      (void)cudaGetLastError();
      count = 132;
    }
    return count;
  }();
  return sms;
}

// At most this many blocks for the fused backward (the partial sums are sized by it): 4 per
// multiprocessor, at most one per row.
int64_t fused_blocks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(rows, 4LL * device_sms()));
}

constexpr size_t kFusedMaxSmem = 192 * 1024;  // column sums per block (sm_90 allows 227 KiB)

constexpr size_t kMaxCacheBytes = 96 * 1024;  // opt-in shared memory per block (sm_90: 227 KiB)

bool aligned16(const void* ptr) { return ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

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

template <class T, bool kAdd, bool kRms>
void norm_forward_t(const NormFwd<T>& p, int64_t n) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = p.d % kVec == 0 && aligned16(p.y) && aligned16(p.a) && aligned16(p.b) &&
                   aligned16(p.s) && aligned16(p.gamma) && aligned16(p.beta);
  if (vec)
    launch_norm_forward<T, kVec, kAdd, kRms>(p, n);
  else
    launch_norm_forward<T, 1, kAdd, kRms>(p, n);
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

// The one-read backward when a block's column sums fit in shared memory (d <= 24576 for
// LayerNorm, 49152 for RMSNorm); true when it ran.
template <class T, int P, bool kRms>
bool try_norm_backward_fused(const NormBwd<T>& p, int64_t n, float* dgamma, float* dbeta,
                             float* work, const char* name) {
  const size_t bytes = (kRms ? 1 : 2) * static_cast<size_t>(p.d) * sizeof(float);
  if (bytes > kFusedMaxSmem) return false;
  const int threads = row_threads(p.d / P);
  auto kernel = norm_backward_fused_kernel<T, P, kRms>;
  allow_smem(kernel, bytes, name);
  // One wave: as many blocks as are resident at once (rows are shared out evenly among them).
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor", name);
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(fused_blocks(n), static_cast<int64_t>(std::max(per_sm, 1)) * device_sms()));
  float* part_g = (dgamma || dbeta) ? work : nullptr;
  float* part_b = (!kRms && (dgamma || dbeta)) ? work + blocks * p.d : nullptr;
  launch(name, kernel, static_cast<unsigned>(blocks), threads, bytes, p, n, part_g, part_b);
  if (part_g) {
    launch(name, column_final_kernel, grid_for(p.d), kThreads, 0, dgamma, dbeta, part_g, part_b, blocks, p.d);
  }
  return true;
}

template <class T, bool kRms>
void norm_backward_t(const NormBwd<T>& p, float* dgamma, float* dbeta, int64_t n, float* work) {
  const char* name = kRms ? "rmsnorm_backward" : "layernorm_backward";
  if (!p.dx && !dgamma && !dbeta) return;
  if (n > 0 && p.d > 0) {
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = p.d % kVec == 0 && aligned16(p.dx) && aligned16(p.dy) && aligned16(p.x) &&
                     aligned16(p.gamma);
    const bool fused = vec ? try_norm_backward_fused<T, kVec, kRms>(p, n, dgamma, dbeta, work, name)
                           : try_norm_backward_fused<T, 1, kRms>(p, n, dgamma, dbeta, work, name);
    if (fused) return;
    // Rows too long for registers: dx one block per row, then the column reductions.
    if (p.dx) {
      if (vec)
        launch_norm_backward_dx<T, kVec, kRms>(p, n);
      else
        launch_norm_backward_dx<T, 1, kRms>(p, n);
    }
  }
  if (dgamma || dbeta) {
    if (kRms)
      column_reduce<T, 2>(dgamma, nullptr, p.dy, p.x, p.mean, p.rstd, n, p.d, work, name);
    else
      column_reduce<T, 1>(dgamma, dbeta, p.dy, p.x, p.mean, p.rstd, n, p.d, work, name);
  }
}

// ---- softmax, cross-entropy --------------------------------------------------------------------
__global__ void softmax_forward_kernel(float* y, const float* x, int64_t d) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* xr = x + row * d;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) mx = fmaxf(mx, xr[j]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += expf(xr[j] - mx);
  sum = block_sum(sum, scratch);
  float* yr = y + row * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = expf(xr[j] - mx) / sum;
}

__global__ void softmax_backward_kernel(float* dx, const float* dy, const float* y, int64_t d) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* dyr = dy + row * d;
  const float* yr = y + row * d;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += dyr[j] * yr[j];
  dot = block_sum(dot, scratch);
  float* dxr = dx + row * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dxr[j] = yr[j] * (dyr[j] - dot);
}

__global__ void check_ids_kernel(int32_t* flag, const int32_t* ids, int64_t n, int64_t v) {
  NL_GRID_STRIDE(i, n) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<int64_t>(id) >= v) {
      // The lowest bad index wins (int atomics only: the answer does not depend on timing).
      atomicMin(flag, static_cast<int32_t>(i < 2147483647LL ? i : 2147483646LL));
    }
  }
}

__global__ void cross_entropy_rows_kernel(float* probs, double* row_loss, const float* logits,
                                          const int32_t* targets, int64_t v) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* lr = logits + row * v;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, lr[j]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += expf(lr[j] - mx);
  sum = block_sum(sum, scratch);
  const float lse = mx + logf(sum);
  float* pr = probs + row * v;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) pr[j] = expf(lr[j] - lse);
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    const bool ok = t >= 0 && static_cast<int64_t>(t) < v;
    row_loss[row] = ok ? static_cast<double>(lse) - static_cast<double>(lr[t]) : NAN;
  }
}

__global__ void mean_rows_kernel(float* loss, const double* row_loss, int64_t n) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += row_loss[i];
  acc = block_sum_d(acc, scratch);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(acc / static_cast<double>(n));
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* dloss,
                                              const float* probs, const int32_t* targets,
                                              int64_t n, int64_t v) {
  const float s = dloss[0] / static_cast<float>(n);
  NL_GRID_STRIDE(idx, n * v) {
    const int64_t i = idx / v, j = idx % v;
    const float onehot = j == static_cast<int64_t>(targets[i]) ? 1.0f : 0.0f;
    dlogits[idx] = s * (probs[idx] - onehot);
  }
}

// ---- embedding --------------------------------------------------------------------------------------
__global__ void embedding_forward_kernel(float* y, const float* table, const int32_t* ids,
                                         int64_t n, int64_t v, int64_t d) {
  NL_GRID_STRIDE(idx, n * d) {
    const int64_t i = idx / d, j = idx % d;
    const int64_t id = ids[i];
    y[idx] = (id >= 0 && id < v) ? table[id * d + j] : NAN;
  }
}

// dtable[r, j] = sum over i with ids[i] == r of dy[i, j], summed in order of i (no atomics):
// block (128 columns) x one vocabulary row at a time; the ids pass through shared memory in
// tiles. Cost O(V * N) id comparisons: meant for normlab's small vocabularies (bytes, toy).
constexpr int kEmbCols = 128, kEmbTile = 1024;
__global__ void embedding_backward_kernel(float* dtable, const float* dy, const int32_t* ids,
                                          int64_t n, int64_t v, int64_t d) {
  NL_SHARED_ARRAY(int32_t, tile, kEmbTile);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kEmbCols + threadIdx.x;
  for (int64_t r = blockIdx.y; r < v; r += gridDim.y) {
    float acc = 0.0f;
    for (int64_t t0 = 0; t0 < n; t0 += kEmbTile) {
      const int64_t len = n - t0 < kEmbTile ? n - t0 : kEmbTile;
      __syncthreads();
      for (int64_t k = threadIdx.x; k < len; k += blockDim.x) tile[k] = ids[t0 + k];
      __syncthreads();
      if (j < d)
        for (int64_t k = 0; k < len; ++k)
          if (static_cast<int64_t>(tile[k]) == r) acc += dy[(t0 + k) * d + j];
    }
    if (j < d) dtable[r * d + j] = acc;
  }
}

// ---- attention ---------------------------------------------------------------------------------------
constexpr int kAttnThreads = 128;
// One row of T floats in shared memory, with the static scratch within the default 48 KiB.
constexpr int64_t kAttnMaxT = 12000;

// One block per (b, h, t): scores over s <= t in shared memory, softmax, P written (zeros
// above the diagonal), then out_t = sum_s P[t,s] v_s with threads over the head's channels.
__global__ void attention_forward_kernel(float* out, float* probs, const float* q, const float* k,
                                         const float* v, int64_t t, int64_t h, int64_t dh,
                                         float scale) {
  NL_DYNAMIC_SHARED(float, p);
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t ti = row % t, bh = row / t, hi = bh % h, bi = bh / h;
  const int64_t c = h * dh;
  const float* qt = q + (bi * t + ti) * c + hi * dh;
  float mx = -INFINITY;
  for (int64_t s = threadIdx.x; s <= ti; s += blockDim.x) {
    const float* ks = k + (bi * t + s) * c + hi * dh;
    float dot = 0.0f;
    for (int64_t e = 0; e < dh; ++e) dot += qt[e] * ks[e];
    p[s] = scale * dot;
    mx = fmaxf(mx, p[s]);
  }
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s <= ti; s += blockDim.x) {
    p[s] = expf(p[s] - mx);
    sum += p[s];
  }
  sum = block_sum(sum, scratch);
  float* prow = probs + row * t;
  for (int64_t s = threadIdx.x; s < t; s += blockDim.x) {
    if (s <= ti) {
      p[s] = p[s] / sum;
      prow[s] = p[s];
    } else {
      prow[s] = 0.0f;
    }
  }
  __syncthreads();  // every p[s] normalized before any thread reads them all
  float* ot = out + (bi * t + ti) * c + hi * dh;
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s <= ti; ++s) acc += p[s] * v[(bi * t + s) * c + hi * dh + e];
    ot[e] = acc;
  }
}

// scale * dS for one (b, h, t) row: dP[t,s] = dout_t . v_s; dS = P (dP - sum_s dP P).
__global__ void attention_ds_kernel(float* ds, const float* dout, const float* v,
                                    const float* probs, int64_t t, int64_t h, int64_t dh,
                                    float scale) {
  NL_DYNAMIC_SHARED(float, dp);
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t ti = row % t, bh = row / t, hi = bh % h, bi = bh / h;
  const int64_t c = h * dh;
  const float* dot_ = dout + (bi * t + ti) * c + hi * dh;
  const float* prow = probs + row * t;
  float rowdot = 0.0f;
  for (int64_t s = threadIdx.x; s <= ti; s += blockDim.x) {
    const float* vs = v + (bi * t + s) * c + hi * dh;
    float acc = 0.0f;
    for (int64_t e = 0; e < dh; ++e) acc += dot_[e] * vs[e];
    dp[s] = acc;  // read back only by this thread
    rowdot += acc * prow[s];
  }
  rowdot = block_sum(rowdot, scratch);
  float* dsr = ds + row * t;
  for (int64_t s = threadIdx.x; s < t; s += blockDim.x)
    dsr[s] = s <= ti ? scale * prow[s] * (dp[s] - rowdot) : 0.0f;
}

// dq[b,t,h,e] = sum_{s<=t} dS[t,s] k[s,e]
__global__ void attention_dq_kernel(float* dq, const float* ds, const float* k, int64_t b,
                                    int64_t t, int64_t h, int64_t dh) {
  const int64_t c = h * dh;
  NL_GRID_STRIDE(idx, b * t * c) {
    const int64_t e = idx % dh, hi = (idx / dh) % h, ti = (idx / c) % t, bi = idx / (c * t);
    const float* dsr = ds + ((bi * h + hi) * t + ti) * t;
    float acc = 0.0f;
    for (int64_t s = 0; s <= ti; ++s) acc += dsr[s] * k[(bi * t + s) * c + hi * dh + e];
    dq[idx] = acc;
  }
}

// dk[b,s,h,e] = sum_{t>=s} dS[t,s] q[t,e];  dv[b,s,h,e] = sum_{t>=s} P[t,s] dout[t,e]
__global__ void attention_dkv_kernel(float* out, const float* m, const float* src, int64_t b,
                                     int64_t t, int64_t h, int64_t dh) {
  const int64_t c = h * dh;
  NL_GRID_STRIDE(idx, b * t * c) {
    const int64_t e = idx % dh, hi = (idx / dh) % h, si = (idx / c) % t, bi = idx / (c * t);
    const float* mb = m + (bi * h + hi) * t * t;
    float acc = 0.0f;
    for (int64_t ti = si; ti < t; ++ti) acc += mb[ti * t + si] * src[(bi * t + ti) * c + hi * dh + e];
    out[idx] = acc;
  }
}

// ---- prefix mean, transpose, adam, conversions ------------------------------------------------------
__global__ void prefix_mean_forward_kernel(float* y, const float* x, int64_t b, int64_t t,
                                           int64_t c) {
  NL_GRID_STRIDE(idx, b * c) {
    const int64_t bi = idx / c, ci = idx % c;
    double acc = 0.0;
    for (int64_t ti = 0; ti < t; ++ti) {
      acc += x[(bi * t + ti) * c + ci];
      y[(bi * t + ti) * c + ci] = static_cast<float>(acc / static_cast<double>(ti + 1));
    }
  }
}

__global__ void prefix_mean_backward_kernel(float* dx, const float* dy, int64_t b, int64_t t,
                                            int64_t c) {
  NL_GRID_STRIDE(idx, b * c) {
    const int64_t bi = idx / c, ci = idx % c;
    double acc = 0.0;
    for (int64_t si = t - 1; si >= 0; --si) {
      acc += dy[(bi * t + si) * c + ci] / static_cast<double>(si + 1);
      dx[(bi * t + si) * c + ci] = static_cast<float>(acc);
    }
  }
}

__global__ void transpose_kernel(float* out, const float* x, int64_t outer, int64_t a,
                                 int64_t mid, int64_t bdim, int64_t inner) {
  NL_GRID_STRIDE(dst, outer * a * mid * bdim * inner) {
    // dst indexes out (O, Bd, M, A, I)
    int64_t r = dst;
    const int64_t ii = r % inner;
    r /= inner;
    const int64_t ai = r % a;
    r /= a;
    const int64_t mi = r % mid;
    r /= mid;
    const int64_t bi = r % bdim;
    const int64_t o = r / bdim;
    out[dst] = x[(((o * a + ai) * mid + mi) * bdim + bi) * inner + ii];
  }
}

__global__ void adam_kernel(float* param, float* m, float* v, const float* grad, int64_t n,
                            float lr, float b1, float omb1, float b2, float omb2, float eps,
                            float inv_bc1, float inv_bc2, float wd_l2, float wd_decoupled) {
  NL_GRID_STRIDE(i, n) {
    const float p = param[i];
    const float g = fmaf(wd_l2, p, grad[i]);
    const float mi = fmaf(b1, m[i], omb1 * g);
    const float vi = fmaf(b2, v[i], omb2 * g * g);
    const float update = fmaf(wd_decoupled, p, (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps));
    param[i] = fmaf(-lr, update, p);
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void f32_to_bf16_kernel(__nv_bfloat16* out, const float* x, int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(x[i]);
}

__global__ void copy16_kernel(uint4* out, const uint4* x, int64_t n16) {
  NL_GRID_STRIDE(i, n16) out[i] = x[i];
}
__global__ void copy1_kernel(unsigned char* out, const unsigned char* x, int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = x[i];
}

bool rows_fit(int64_t n) { return n <= kMaxRowsGrid; }

}  // namespace

// ============================================================================================
// launchers
// ============================================================================================

void check_launch(const char* kernel) {
  check(cudaGetLastError(), "kernel launch", kernel);
  if (sync_each_kernel()) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", kernel);
}

void fill_f32(float* out, int64_t n, float value) {
  if (n <= 0) return;
  launch("fill", fill_kernel<float>, grid_for(n), kThreads, 0, out, n, value);
}
void fill_f64(double* out, int64_t n, double value) {
  if (n <= 0) return;
  launch("fill", fill_kernel<double>, grid_for(n), kThreads, 0, out, n, value);
}
void fill_i32(int32_t* out, int64_t n, int32_t value) {
  if (n <= 0) return;
  launch("fill", fill_kernel<int32_t>, grid_for(n), kThreads, 0, out, n, value);
}

void add(float* out, const float* a, const float* b, float alpha, float beta, int64_t n) {
  if (n <= 0) return;
  launch("add", add_kernel, grid_for(n), kThreads, 0, out, a, b, alpha, beta, n);
}
void accumulate(float* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  launch("accumulate", accumulate_kernel, grid_for(n), kThreads, 0, dst, src, n);
}
void scale(float* out, const float* x, float alpha, int64_t n) {
  if (n <= 0) return;
  launch("scale", scale_kernel, grid_for(n), kThreads, 0, out, x, alpha, n);
}
void mul(float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  launch("mul", mul_kernel, grid_for(n), kThreads, 0, out, a, b, n);
}
void gelu_forward(float* y, float* dydx, const float* x, int64_t n) {
  if (n <= 0) return;
  launch("gelu_forward", gelu_kernel, grid_for(n), kThreads, 0, y, dydx, x, n);
}

int64_t sum_squares_work(int64_t) { return kSumSquaresBlocks; }

void sum_squares(double* result_dev, double* work, const float* x, int64_t n) {
  const int blocks = n <= 0 ? 1 : std::min(kSumSquaresBlocks, grid_for(n));
  launch("sum_squares", sum_squares_partial_kernel, blocks, kThreads, 0, work, x, n < 0 ? 0 : n);
  launch("sum_squares", sum_partials_kernel, 1, kThreads, 0, result_dev, work, blocks);
}

void bias_residual_init(float* out, const float* bias, const float* residual, int64_t m, int64_t n) {
  if (m * n <= 0) return;
  launch("linear_forward", bias_residual_kernel, grid_for(m * n), kThreads, 0, out, bias, residual, m, n);
}

int64_t column_work(int64_t rows, int64_t cols) {
  int64_t rpc = 0;
  return 2 * std::max(column_chunks(rows, rpc), fused_blocks(rows)) * cols;
}

void sum_rows(float* out, const float* x, int64_t rows, int64_t cols, float* work) {
  column_reduce<float, 0>(out, nullptr, x, nullptr, nullptr, nullptr, rows, cols, work, "sum_rows");
}

void norm_forward(Storage st, void* y, float* mean, float* rstd, void* s, const void* a,
                  const void* b, float alpha, const void* gamma, const void* beta, int64_t n,
                  int64_t d, float eps, bool rms) {
  const char* name = rms ? "rmsnorm_forward" : "layernorm_forward";
  if (n <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", name);
  const bool add = s != nullptr;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    NormFwd<T> p{static_cast<T*>(y), mean, rstd, static_cast<T*>(s), static_cast<const T*>(a),
                 static_cast<const T*>(b), alpha, static_cast<const T*>(gamma),
                 static_cast<const T*>(beta), d, eps};
    if (add) {
      if (rms) norm_forward_t<T, true, true>(p, n);
      else norm_forward_t<T, true, false>(p, n);
    } else {
      if (rms) norm_forward_t<T, false, true>(p, n);
      else norm_forward_t<T, false, false>(p, n);
    }
  };
  if (st == Storage::f32) run(float{});
  else run(__nv_bfloat16{});
}

void norm_backward(Storage st, void* dx, float* dgamma, float* dbeta, const void* dy,
                   const void* x, const void* gamma, const float* mean, const float* rstd,
                   int64_t n, int64_t d, bool rms, float* work) {
  const char* name = rms ? "rmsnorm_backward" : "layernorm_backward";
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", name);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    NormBwd<T> p{static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
                 static_cast<const T*>(gamma), mean, rstd, d};
    if (rms) norm_backward_t<T, true>(p, dgamma, nullptr, n, work);
    else norm_backward_t<T, false>(p, dgamma, dbeta, n, work);
  };
  if (st == Storage::f32) run(float{});
  else run(__nv_bfloat16{});
}

void softmax_forward(float* y, const float* x, int64_t n, int64_t d) {
  if (n <= 0 || d <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "softmax_forward");
  launch("softmax_forward", softmax_forward_kernel, static_cast<unsigned>(n), row_threads(d, 256), 0, y, x, d);
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t n, int64_t d) {
  if (n <= 0 || d <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "softmax_backward");
  launch("softmax_backward", softmax_backward_kernel, static_cast<unsigned>(n), row_threads(d, 256), 0, dx, dy, y, d);
}

int64_t first_bad_id(const int32_t* ids, int64_t n, int64_t v, int32_t* flag_dev,
                     const char* kernel) {
  if (n <= 0) return -1;
  const int32_t none = 2147483647;
  check(cudaMemcpy(flag_dev, &none, sizeof none, cudaMemcpyHostToDevice), "cudaMemcpy", kernel);
  launch(kernel, check_ids_kernel, grid_for(n), kThreads, 0, flag_dev, ids, n, v);
  int32_t found = none;
  check(cudaMemcpy(&found, flag_dev, sizeof found, cudaMemcpyDeviceToHost), "cudaMemcpy", kernel);
  return found == none ? -1 : found;
}

void embedding_forward(float* y, const float* table, const int32_t* ids, int64_t n, int64_t v,
                       int64_t d) {
  if (n * d <= 0) return;
  launch("embedding_forward", embedding_forward_kernel, grid_for(n * d), kThreads, 0, y, table, ids, n, v, d);
}

void embedding_backward(float* dtable, const float* dy, const int32_t* ids, int64_t n, int64_t v,
                        int64_t d) {
  if (v * d <= 0) return;
  dim3 grid(static_cast<unsigned>((d + kEmbCols - 1) / kEmbCols),
            static_cast<unsigned>(std::min<int64_t>(v, 65535)));
  launch("embedding_backward", embedding_backward_kernel, grid, kEmbCols, 0, dtable, dy, ids, n, v, d);
}

void cross_entropy_forward(float* loss, float* probs, const float* logits,
                           const int32_t* targets, int64_t n, int64_t v, double* work) {
  if (n <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "cross_entropy_forward");
  launch("cross_entropy_forward", cross_entropy_rows_kernel, static_cast<unsigned>(n), row_threads(v, 256), 0, probs, work, logits, targets, v);
  launch("cross_entropy_forward", mean_rows_kernel, 1, kThreads, 0, loss, work, n);
}

void cross_entropy_backward(float* dlogits, const float* dloss, const float* probs,
                            const int32_t* targets, int64_t n, int64_t v) {
  if (n * v <= 0) return;
  launch("cross_entropy_backward", cross_entropy_backward_kernel, grid_for(n * v), kThreads, 0, dlogits, dloss, probs, targets, n, v);
}

int64_t attention_max_t() { return kAttnMaxT; }

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                       int64_t b, int64_t t, int64_t h, int64_t dh, float scale) {
  const int64_t rows = b * h * t;
  if (rows <= 0) return;
  if (!rows_fit(rows) || t > kAttnMaxT)
    check(cudaErrorInvalidConfiguration, "grid of one block per query row", "attention_forward");
  const size_t bytes = static_cast<size_t>(t) * sizeof(float);
  launch("attention_forward", attention_forward_kernel, static_cast<unsigned>(rows), kAttnThreads, bytes, out, probs, q, k, v, t, h, dh, scale);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* probs, int64_t b, int64_t t,
                        int64_t h, int64_t dh, float scale, float* work) {
  const int64_t rows = b * h * t, total = b * t * h * dh;
  if (rows <= 0) return;
  if (!rows_fit(rows) || t > kAttnMaxT)
    check(cudaErrorInvalidConfiguration, "grid of one block per query row", "attention_backward");
  if (dv && total > 0) {
    launch("attention_backward", attention_dkv_kernel, grid_for(total), kThreads, 0, dv, probs, dout, b, t, h, dh);
  }
  if (!dq && !dk) return;
  const size_t bytes = static_cast<size_t>(t) * sizeof(float);
  launch("attention_backward", attention_ds_kernel, static_cast<unsigned>(rows), kAttnThreads, bytes, work, dout, v, probs, t, h, dh, scale);
  if (total <= 0) return;
  if (dq) {
    launch("attention_backward", attention_dq_kernel, grid_for(total), kThreads, 0, dq, work, k, b, t, h, dh);
  }
  if (dk) {
    launch("attention_backward", attention_dkv_kernel, grid_for(total), kThreads, 0, dk, work, q, b, t, h, dh);
  }
}

void prefix_mean_forward(float* y, const float* x, int64_t b, int64_t t, int64_t c) {
  if (b * c <= 0 || t <= 0) return;
  launch("prefix_mean_forward", prefix_mean_forward_kernel, grid_for(b * c), kThreads, 0, y, x, b, t, c);
}

void prefix_mean_backward(float* dx, const float* dy, int64_t b, int64_t t, int64_t c) {
  if (b * c <= 0 || t <= 0) return;
  launch("prefix_mean_backward", prefix_mean_backward_kernel, grid_for(b * c), kThreads, 0, dx, dy, b, t, c);
}

void transpose(float* out, const float* x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
               int64_t inner) {
  const int64_t n = outer * a * mid * bdim * inner;
  if (n <= 0) return;
  launch("transpose", transpose_kernel, grid_for(n), kThreads, 0, out, x, outer, a, mid, bdim, inner);
}

void adam_step(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
               float beta1, float beta2, float eps, float inv_bc1, float inv_bc2, float wd_l2,
               float wd_decoupled) {
  if (n <= 0) return;
  launch("adam_step", adam_kernel, grid_for(n), kThreads, 0, param, m, v, grad, n, lr, beta1, 1.0f - beta1, beta2,
                                         1.0f - beta2, eps, inv_bc1, inv_bc2, wd_l2, wd_decoupled);
}

void f32_to_bf16(void* out, const float* x, int64_t n) {
  if (n <= 0) return;
  launch("f32_to_bf16", f32_to_bf16_kernel, grid_for(n), kThreads, 0, static_cast<__nv_bfloat16*>(out), x, n);
}

void copy_kernel(void* out, const void* x, size_t bytes) {
  if (bytes == 0) return;
  if (bytes % 16 == 0 && aligned16(out) && aligned16(x)) {
    const int64_t n16 = static_cast<int64_t>(bytes / 16);
    launch("copy_kernel", copy16_kernel, grid_for(n16), kThreads, 0, static_cast<uint4*>(out),
           static_cast<const uint4*>(x), n16);
  } else {
    const int64_t n = static_cast<int64_t>(bytes);
    launch("copy_kernel", copy1_kernel, grid_for(n), kThreads, 0, static_cast<unsigned char*>(out),
           static_cast<const unsigned char*>(x), n);
  }
}

}  // namespace normlab::cuda
