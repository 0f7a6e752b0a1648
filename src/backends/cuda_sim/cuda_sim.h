// cuda-sim: the small CUDA execution layer that lets normlab's kernel sources (src/backends/cuda,
// written for nvcc) compile with the host compiler and run on the CPU, so that every kernel's
// arithmetic, indexing and synchronization are tested on machines without a GPU (docs/cuda.md,
// "cuda-sim"). It is strict where a GPU is strict and stricter where a GPU is silent:
//   - each thread of a block is a cooperative fiber (Boost.Context); __syncthreads() lets no
//     thread pass before every thread of the block has arrived, and a barrier that some threads
//     never reach (they exited, or wait elsewhere) is an error naming the kernel, not a hang;
//   - warp shuffles and votes exchange values among the lanes of their mask only after all of
//     them have arrived;
//   - the block's threads run warp by warp, each warp as far as it can go before the next one
//     starts (lowest warp first on even blocks, highest first on odd ones), so that a missing
//     barrier lets one warp read what another has not yet written, or overwrite what it has not
//     yet read;
//   - __shared__ memory (static and dynamic) is filled with NaN bytes (0xff) at block start;
//   - device memory is an mmap'd region that is PROT_NONE except while a kernel, a copy or a
//     cuBLAS call runs, with guard bytes around every allocation, checked after every launch;
//   - the launch limits of an H200 (sm_90) are enforced with the runtime's error codes.
// Kernels are launched with normlab::cuda::launch (launch.h), which is `<<<...>>>` under nvcc.
// Nothing here is a timing model: speed measured on cuda-sim means nothing.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)

// ---- vector types ------------------------------------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// ---- the runtime's error codes (the values of cuda_runtime_api.h) -------------------------------
enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

namespace cudasim {

// The device cuda-sim stands for: an H200 (sm_90), as cudaGetDeviceProperties reports it.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDimX = 1024, kMaxBlockDimY = 1024, kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimX = 2147483647u, kMaxGridDimY = 65535, kMaxGridDimZ = 65535;
constexpr size_t kSharedPerBlock = 48 * 1024;        // without the opt-in attribute
constexpr size_t kSharedPerBlockOptin = 232448;      // 227 KiB, with it
constexpr int kMultiprocessors = 132;
constexpr int kWarpSize = 32;

namespace detail {

struct Launch;
struct Block;
struct Thread;

// The thread that is running now (kernels run on one host thread at a time; see runtime.cpp).
extern Thread* g_thread;
extern Block* g_block;
extern Launch* g_launch;

struct Thread {
  uint3 idx;
  unsigned linear;  // x + y*bx + z*bx*by
  size_t shared_cursor;
};
struct Block {
  uint3 idx;
};
struct Launch {
  dim3 grid, block;
};

// Launches `body(ctx)` on every thread of every block (runtime.cpp). `kernel` identifies the
// kernel (its attributes), `name` is what errors call it.
cudaError_t launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t dynamic_smem,
                   void (*body)(void*), void* ctx);

// Inside a kernel: the barriers, warp exchange, shared memory, faults.
void sync_block();
void sync_warp(unsigned mask, const char* what);
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, const char* what);
unsigned warp_ballot(unsigned mask, bool pred, const char* what);
void* shared_static(size_t bytes, size_t align);
void* shared_dynamic();
[[noreturn]] void fault(const char* what);
// Atomics: kernels run one thread at a time, so an atomic is an ordinary read-modify-write
// on device memory; it exists so that atomic code compiles and computes the same result.

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

template <class F, class Tuple>
void run_body(void* ctx) {
  auto* p = static_cast<std::pair<F, Tuple>*>(ctx);
  std::apply(p->first, p->second);  // each thread gets its own copies of the arguments
}

}  // namespace detail

// Used by normlab::cuda::launch: runs kernel(args...) on grid x block.
template <class... Params, class... Args>
cudaError_t launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   Args&&... args) {
  using Tuple = std::tuple<std::decay_t<Params>...>;
  using F = void (*)(Params...);
  std::pair<F, Tuple> ctx{kernel, Tuple(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...)};
  return detail::launch(name, reinterpret_cast<const void*>(kernel), grid, block, smem,
                        &detail::run_body<F, Tuple>, &ctx);
}

// __shared__ declarations (see NL_SHARED_ARRAY in launch.h): every thread of the block gets
// the same address for the same declaration, because all of them declare the same arrays in
// the same order.
template <class T>
T* shared_array(size_t count) {
  return static_cast<T*>(detail::shared_static(count * sizeof(T), alignof(T) < 16 ? 16 : alignof(T)));
}
template <class T>
T* dynamic_shared() {
  return static_cast<T*>(detail::shared_dynamic());
}

}  // namespace cudasim

// ---- built-in variables and functions -----------------------------------------------------------
#define threadIdx (::cudasim::detail::g_thread->idx)
#define blockIdx (::cudasim::detail::g_block->idx)
#define blockDim (::cudasim::detail::g_launch->block)
#define gridDim (::cudasim::detail::g_launch->grid)
constexpr int warpSize = 32;

inline void __syncthreads() { ::cudasim::detail::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::cudasim::detail::sync_warp(mask, "__syncwarp"); }

inline int cudasim_lane() { return static_cast<int>(::cudasim::detail::g_thread->linear % 32u); }

// Lanes are taken in segments of `width` (a power of two up to 32), as on the GPU.
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = cudasim_lane();
  const int base = lane & ~(width - 1);
  return ::cudasim::detail::from_bits<T>(
      ::cudasim::detail::warp_exchange(mask, ::cudasim::detail::to_bits(v), base + (src & (width - 1)), "__shfl_sync"));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = cudasim_lane();
  const int base = lane & ~(width - 1);
  int src = lane ^ lane_mask;
  if (src >= base + width) src = lane;  // as PTX shfl.sync.bfly: a lower segment may be read
  return ::cudasim::detail::from_bits<T>(
      ::cudasim::detail::warp_exchange(mask, ::cudasim::detail::to_bits(v), src, "__shfl_xor_sync"));
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = cudasim_lane();
  const int base = lane & ~(width - 1);
  int src = lane + static_cast<int>(delta);
  if (src >= base + width) src = lane;
  return ::cudasim::detail::from_bits<T>(
      ::cudasim::detail::warp_exchange(mask, ::cudasim::detail::to_bits(v), src, "__shfl_down_sync"));
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = cudasim_lane();
  const int base = lane & ~(width - 1);
  int src = lane - static_cast<int>(delta);
  if (src < base) src = lane;
  return ::cudasim::detail::from_bits<T>(
      ::cudasim::detail::warp_exchange(mask, ::cudasim::detail::to_bits(v), src, "__shfl_up_sync"));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return ::cudasim::detail::warp_ballot(mask, pred != 0, "__ballot_sync");
}
inline int __any_sync(unsigned mask, int pred) {
  return ::cudasim::detail::warp_ballot(mask, pred != 0, "__any_sync") != 0;
}
inline int __all_sync(unsigned mask, int pred) {
  return ::cudasim::detail::warp_ballot(mask, pred != 0, "__all_sync") == mask;
}

template <class T>
T atomicMin(T* address, T value) {
  const T old = *address;
  if (value < old) *address = value;
  return old;
}
template <class T>
T atomicMax(T* address, T value) {
  const T old = *address;
  if (value > old) *address = value;
  return old;
}
template <class T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// Math functions with CUDA's float names (erff, expf, fmaxf, ...) are the C library's.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }  // a product never contracted into an FMA
