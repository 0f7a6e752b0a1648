// Device code shared by the CUDA backend's kernel sources (header-only; every .cu file of
// src/backends/cuda includes it): launch-size helpers, the grid-stride loop, block reductions
// in a fixed order, float <-> storage conversions and the vector load/store units of the row
// kernels. Compiled by nvcc for a GPU and by the host compiler for cuda-sim (launch.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels.h"
#include "launch.h"

namespace normlab::cuda {

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 65535LL * 16;  // grid-stride loops cover the rest
constexpr int64_t kMaxRowsGrid = 2147483647LL;

inline int grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min(blocks, kMaxGrid)));
}

// One block per row: at most this many rows.
inline bool rows_fit(int64_t n) { return n <= kMaxRowsGrid; }

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
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
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

__device__ inline float block_sum(float v, float* scratch) { return block_reduce(v, scratch, SumOp{}, 0.0f); }
__device__ inline float block_max(float v, float* scratch) {
  return block_reduce(v, scratch, MaxOp{}, -INFINITY);
}
__device__ inline double block_sum_d(double v, double* scratch) {
  return block_reduce(v, scratch, SumOp{}, 0.0);
}
__device__ inline double block_max_d(double v, double* scratch) {
  return block_reduce(v, scratch, MaxOp{}, -static_cast<double>(INFINITY));
}

// A float32 value as a format stores it (Precision's order: 0 fp32, 1 bf16, 2 fp16), with the
// hardware's round-to-nearest-even conversions.
__device__ inline float stored_as(float v, int format) {
  if (format == 1) return __bfloat162float(__float2bfloat16_rn(v));
  if (format == 2) return __half2float(__float2half_rn(v));
  return v;
}

// Threads for a block that walks `units` per row: a multiple of 32, 32..max_threads.
inline int row_threads(int64_t units, int max_threads = 512) {
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

// The device's multiprocessor count, asked once (132 if the query fails: only block counts
// depend on it).
inline int device_sms() {
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

// 16-byte aligned (nullptr counts as aligned: an absent array constrains nothing).
inline bool aligned16(const void* ptr) { return ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }
// Aligned to a row unit of 4 elements of T (16 bytes of float, 8 of bf16 / fp16).
template <class T>
inline bool unit_aligned(const void* ptr) {
  return ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) & (4 * sizeof(T) - 1)) == 0;
}

// ---- storage types: float32, or bf16 / fp16 with float32 arithmetic ------------------------------
__device__ inline float to_f(float v) { return v; }
__device__ inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_f(__half v) { return __half2float(v); }
template <class T>
__device__ inline T from_f(float v);
template <>
__device__ inline float from_f<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ inline __half from_f<__half>(float v) { return __float2half_rn(v); }

// One element of an In / Out array (kernels.h) as float32, and a float32 stored into one: the
// storage is uniform across a launch, so the branch costs no divergence.
__device__ inline float ld(In a, int64_t i) {
  if (a.e == Precision::bf16) return to_f(static_cast<const __nv_bfloat16*>(a.p)[i]);
  if (a.e == Precision::fp16) return to_f(static_cast<const __half*>(a.p)[i]);
  return static_cast<const float*>(a.p)[i];
}
__device__ inline void st(Out a, int64_t i, float v) {
  if (a.e == Precision::bf16) static_cast<__nv_bfloat16*>(a.p)[i] = from_f<__nv_bfloat16>(v);
  else if (a.e == Precision::fp16) static_cast<__half*>(a.p)[i] = from_f<__half>(v);
  else static_cast<float*>(a.p)[i] = v;
}

// A row is walked in units of P elements: P = 1 (scalar), or P = 4 (16 bytes of float32, 8 of
// bf16 / fp16) when D is a multiple of 4 and every pointer is aligned to a unit. The unit is 4
// elements for every storage so that a thread sums the same elements in the same order whatever
// the storage: native 16-bit rows give the float32 emulation's statistics bit for bit.
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
__device__ inline void load_unit<__half, 1>(const __half* row, int64_t u, float (&v)[1]) {
  v[0] = __half2float(row[u]);
}
template <>
__device__ inline void load_unit<__half, 4>(const __half* row, int64_t u, float (&v)[4]) {
  const uint2 q = reinterpret_cast<const uint2*>(row)[u];
  __half h[4];
  memcpy(h, &q, sizeof q);  // as the bf16 unit: no pointer cast
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = __half2float(h[k]);
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
__device__ inline void load_unit<__nv_bfloat16, 4>(const __nv_bfloat16* row, int64_t u, float (&v)[4]) {
  const uint2 q = reinterpret_cast<const uint2*>(row)[u];
  __nv_bfloat162 h[2];
  memcpy(h, &q, sizeof q);  // not a pointer cast: the host compiler (cuda-sim) assumes no such aliasing
#pragma unroll
  for (int k = 0; k < 2; ++k) {
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
__device__ inline void store_unit<__half, 1>(__half* row, int64_t u, const float (&v)[1]) {
  row[u] = __float2half_rn(v[0]);
}
template <>
__device__ inline void store_unit<__half, 4>(__half* row, int64_t u, const float (&v)[4]) {
  __half h[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __float2half_rn(v[k]);
  uint2 q;
  memcpy(&q, h, sizeof q);
  reinterpret_cast<uint2*>(row)[u] = q;
}
template <>
__device__ inline void store_unit<float, 4>(float* row, int64_t u, const float (&v)[4]) {
  reinterpret_cast<float4*>(row)[u] = make_float4(v[0], v[1], v[2], v[3]);
}
template <>
__device__ inline void store_unit<__nv_bfloat16, 4>(__nv_bfloat16* row, int64_t u, const float (&v)[4]) {
  __nv_bfloat162 h[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  uint2 q;
  memcpy(&q, h, sizeof q);
  reinterpret_cast<uint2*>(row)[u] = q;
}

}  // namespace normlab::cuda
