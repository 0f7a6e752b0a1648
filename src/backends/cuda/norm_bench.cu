// The bench's own kernels (bench norms --device cuda): the bf16 conversion of its inputs and a
// device-to-device copy kernel, the bandwidth limit next to cudaMemcpy.
#include "common.cuh"

namespace normlab::cuda {

namespace {

__global__ void f32_to_bf16_kernel(__nv_bfloat16* out, const float* x, int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(x[i]);
}

}  // namespace

void f32_to_bf16(void* out, const float* x, int64_t n) {
  if (n <= 0) return;
  launch("f32_to_bf16", f32_to_bf16_kernel, grid_for(n), kThreads, 0, static_cast<__nv_bfloat16*>(out), x, n);
}

namespace {

__global__ void copy16_kernel(uint4* out, const uint4* x, int64_t n16) {
  NL_GRID_STRIDE(i, n16) out[i] = x[i];
}
__global__ void copy1_kernel(unsigned char* out, const unsigned char* x, int64_t n) {
  NL_GRID_STRIDE(i, n) out[i] = x[i];
}

}  // namespace

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
