// How normlab's kernel sources launch kernels and declare shared memory, so that the same
// sources compile with nvcc for a GPU and with the host compiler for cuda-sim
// (src/backends/cuda_sim, docs/cuda.md):
//   launch("rmsnorm_forward", kernel, grid, block, smem_bytes, args...);   // + check_launch
//   NL_SHARED_ARRAY(float, scratch, 32);          // __shared__ float scratch[32];
//   NL_SHARED_ARRAY2(float, tile, 8, 33);         // __shared__ float tile[8][33];
//   NL_DYNAMIC_SHARED(float, cache);              // extern __shared__ float cache[];
// Under cuda-sim the arrays are pointers into the block's shared memory: use them as arrays,
// never with sizeof.
#pragma once
#include <cstddef>

#include "kernels.h"

#if defined(NORMLAB_CUDA_SIM)
#define NL_SHARED_ARRAY(T, name, n) T* const name = ::cudasim::shared_array<T>(static_cast<size_t>(n))
#define NL_SHARED_ARRAY2(T, name, n, m) \
  T(*const name)[m] = reinterpret_cast<T(*)[m]>(::cudasim::shared_array<T>(static_cast<size_t>(n) * (m)))
#define NL_DYNAMIC_SHARED(T, name) T* const name = ::cudasim::dynamic_shared<T>()
#else
#define NL_SHARED_ARRAY(T, name, n) __shared__ T name[n]
#define NL_SHARED_ARRAY2(T, name, n, m) __shared__ T name[n][m]
#define NL_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

namespace normlab::cuda {

// kernel<<<grid, block, smem>>>(args...), then check_launch(name): the launch's status, and
// with NORMLAB_CUDA_SYNC=1 the kernel's completion.
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
#if defined(NORMLAB_CUDA_SIM)
  (void)::cudasim::launch(name, kernel, grid, block, smem, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, smem>>>(static_cast<Params>(args)...);
#endif
  check_launch(name);
}

}  // namespace normlab::cuda
