// Shared memory under cuda-sim: every block starts with its static and dynamic shared memory
// filled with 0xff bytes (NaN as float), whatever an earlier block or launch wrote; and the
// limits of an H200: 48 KiB of dynamic shared memory without the opt-in attribute, up to 227 KiB
// with it, 48 KiB of static declarations.
#include <cmath>

#include "sim_test.h"

namespace {

using simtest::bits_of;
using simtest::DeviceArray;

// Reads its slot before writing it, then writes it (so that a later block would see the write
// if the simulator did not poison shared memory again).
__global__ void static_read_first_kernel(float* out) {
  NL_SHARED_ARRAY(float, s, 256);
  NL_SHARED_ARRAY2(float, tile, 4, 33);
  const unsigned t = threadIdx.x, n = blockDim.x;
  out[(blockIdx.x * n + t) * 2] = s[t];
  out[(blockIdx.x * n + t) * 2 + 1] = tile[t % 4][t % 33];
  __syncthreads();
  s[t] = 1.0f;
  tile[t % 4][t % 33] = 2.0f;
  __syncthreads();
}

TEST(CudaSimShared, StaticSharedMemoryReadsNaNBeforeItIsWrittenInEveryBlockAndLaunch) {
  const unsigned n = 128, blocks = 3;
  for (int launch = 0; launch < 2; ++launch) {
    DeviceArray<float> out(2 * n * blocks);
    EXPECT_LAUNCH_OK(cudasim::launch("static_read_first", static_read_first_kernel, dim3(blocks), dim3(n), 0, out.p));
    const std::vector<float> got = out.download();
    for (unsigned i = 0; i < got.size(); ++i)
      ASSERT_EQ(bits_of(got[i]), 0xffffffffu) << "launch " << launch << ", value " << i << " = " << got[i];
  }
}

__global__ void dynamic_read_first_kernel(float* out, unsigned count) {
  NL_DYNAMIC_SHARED(float, d);
  NL_SHARED_ARRAY(float, s, 32);
  const unsigned t = threadIdx.x, n = blockDim.x;
  for (unsigned i = t; i < count; i += n) out[blockIdx.x * (count + 32) + i] = d[i];
  if (t < 32) out[blockIdx.x * (count + 32) + count + t] = s[t];
  __syncthreads();
  for (unsigned i = t; i < count; i += n) d[i] = 3.0f;
  if (t < 32) s[t] = 4.0f;
  __syncthreads();
}

TEST(CudaSimShared, DynamicSharedMemoryReadsNaNBeforeItIsWrittenAndIsApartFromTheStatic) {
  const unsigned count = 3000, blocks = 3;  // 12000 bytes
  for (int launch = 0; launch < 2; ++launch) {
    DeviceArray<float> out((count + 32) * blocks);
    EXPECT_LAUNCH_OK(cudasim::launch("dynamic_read_first", dynamic_read_first_kernel, dim3(blocks), dim3(96),
                                     count * sizeof(float), out.p, count));
    const std::vector<float> got = out.download();
    for (unsigned i = 0; i < got.size(); ++i)
      ASSERT_EQ(bits_of(got[i]), 0xffffffffu) << "launch " << launch << ", value " << i << " = " << got[i];
  }
}

// Static and dynamic shared memory do not overlap: each thread writes one, reads the other.
__global__ void overlap_kernel(float* out, unsigned count) {
  NL_DYNAMIC_SHARED(float, d);
  NL_SHARED_ARRAY(float, s, 64);
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) d[i] = 5.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(CudaSimShared, StaticAndDynamicSharedMemoryDoNotOverlap) {
  DeviceArray<float> out(64);
  EXPECT_LAUNCH_OK(cudasim::launch("overlap", overlap_kernel, dim3(1), dim3(64), 100 * sizeof(float), out.p, 100u));
  for (float v : out.download()) ASSERT_TRUE(std::isnan(v)) << v;
}

// ---- limits ------------------------------------------------------------------------------------
// A distinct kernel per Tag: cudaFuncSetAttribute is remembered per kernel.
template <int Tag>
__global__ void dynamic_touch_kernel(unsigned char* out, size_t bytes) {
  NL_DYNAMIC_SHARED(unsigned char, d);
  // Every byte written and read back, so that the whole range must be usable.
  for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) d[i] = static_cast<unsigned char>(i * 7u);
  __syncthreads();
  unsigned char bad = 0;
  for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) bad |= d[i] ^ static_cast<unsigned char>(i * 7u);
  out[threadIdx.x] = bad;
}

constexpr size_t k48K = 48 * 1024, kOptin = 232448;  // 227 KiB

TEST(CudaSimShared, DynamicSharedMemoryUpTo48KiBNeedsNoAttribute) {
  DeviceArray<unsigned char> out(128);
  EXPECT_LAUNCH_OK(cudasim::launch("dyn48k", dynamic_touch_kernel<0>, dim3(2), dim3(128), k48K, out.p, k48K));
  for (unsigned char b : out.download()) ASSERT_EQ(b, 0);
}

TEST(CudaSimShared, DynamicSharedMemoryAbove48KiBWithoutTheAttributeIsInvalidValue) {
  DeviceArray<unsigned char> out(128);
  const std::vector<unsigned char> before = out.download();
  EXPECT_LAUNCH_ERROR(cudasim::launch("dyn_too_much", dynamic_touch_kernel<1>, dim3(1), dim3(128), k48K + 1, out.p,
                                      k48K + 1),
                      cudaErrorInvalidValue);
  const std::string detail = cudasim::last_error_detail();
  EXPECT_NE(detail.find("dyn_too_much"), std::string::npos) << detail;
  EXPECT_NE(detail.find("cudaFuncSetAttribute"), std::string::npos) << detail;
  EXPECT_EQ(out.download(), before) << "the kernel ran";
}

TEST(CudaSimShared, WithTheAttributeUpTo227KiBWorks) {
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_touch_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kOptin)),
            cudaSuccess)
      << cudasim::last_error_detail();
  DeviceArray<unsigned char> out(256);
  EXPECT_LAUNCH_OK(cudasim::launch("dyn227k", dynamic_touch_kernel<2>, dim3(2), dim3(256), kOptin, out.p, kOptin));
  for (unsigned char b : out.download()) ASSERT_EQ(b, 0);
  // Above what the attribute allows: invalid, even under 227 KiB.
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_touch_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  EXPECT_LAUNCH_OK(cudasim::launch("dyn64k", dynamic_touch_kernel<3>, dim3(1), dim3(64), 64 * 1024, out.p, size_t{64 * 1024}));
  EXPECT_LAUNCH_ERROR(cudasim::launch("dyn64k", dynamic_touch_kernel<3>, dim3(1), dim3(64), 64 * 1024 + 4, out.p,
                                      size_t{64 * 1024 + 4}),
                      cudaErrorInvalidValue);
}

TEST(CudaSimShared, TheAttributeAboveTheLimitIsInvalidValue) {
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_touch_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kOptin + 1)),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_touch_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, -1),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  // The failed calls changed nothing: still 48 KiB.
  DeviceArray<unsigned char> out(64);
  EXPECT_LAUNCH_ERROR(cudasim::launch("dyn_after_bad_attr", dynamic_touch_kernel<4>, dim3(1), dim3(64), k48K + 16,
                                      out.p, k48K + 16),
                      cudaErrorInvalidValue);
}

// Static declarations: more than 48 KiB in one block is an error (nvcc refuses it at compile
// time; cuda-sim at run time).
__global__ void big_static_kernel(float* out) {
  NL_SHARED_ARRAY(float, s, 12 * 1024 + 1);  // 48 KiB + 4 bytes
  s[threadIdx.x] = 1.0f;
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(CudaSimShared, StaticSharedMemoryAbove48KiBIsALaunchFailure) {
  DeviceArray<float> out(32);
  EXPECT_LAUNCH_ERROR(cudasim::launch("big_static", big_static_kernel, dim3(1), dim3(32), 0, out.p),
                      cudaErrorLaunchFailure);
  EXPECT_NE(cudasim::last_error_detail().find("static __shared__ memory, more than the 48 KiB"), std::string::npos)
      << cudasim::last_error_detail();
}

// Static + dynamic over 48 KiB without the attribute: a launch failure too.
template <int Tag>
__global__ void static_plus_dynamic_kernel(float* out) {
  NL_DYNAMIC_SHARED(float, d);
  NL_SHARED_ARRAY(float, s, 4096);  // 16 KiB
  s[threadIdx.x] = 1.0f;
  d[threadIdx.x] = 2.0f;
  out[threadIdx.x] = s[threadIdx.x] + d[threadIdx.x];
}

TEST(CudaSimShared, StaticPlusDynamicAbove48KiBNeedsTheAttribute) {
  DeviceArray<float> out(32);
  EXPECT_LAUNCH_OK(cudasim::launch("s_plus_d", static_plus_dynamic_kernel<0>, dim3(1), dim3(32), 32 * 1024, out.p));
  EXPECT_LAUNCH_ERROR(cudasim::launch("s_plus_d", static_plus_dynamic_kernel<1>, dim3(1), dim3(32), 32 * 1024 + 16, out.p),
                      cudaErrorLaunchFailure);
  EXPECT_NE(cudasim::last_error_detail().find("without cudaFuncSetAttribute"), std::string::npos)
      << cudasim::last_error_detail();
  EXPECT_EQ(cudaFuncSetAttribute(static_plus_dynamic_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
            cudaSuccess);
  EXPECT_LAUNCH_OK(cudasim::launch("s_plus_d", static_plus_dynamic_kernel<2>, dim3(1), dim3(32), 100 * 1024, out.p));
  for (float v : out.download()) ASSERT_EQ(v, 3.0f);
}

}  // namespace
