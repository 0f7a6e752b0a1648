// Launch configurations under cuda-sim: an H200's limits (1024 threads per block, block
// 1024 x 1024 x 64, grid (2^31-1) x 65535 x 65535, no zero dimension), refused with
// cudaErrorInvalidConfiguration before anything runs, reported by cudaGetLastError (and
// cleared by it, kept by cudaPeekAtLastError).
#include "sim_test.h"

namespace {

using simtest::DeviceArray;

__global__ void index_kernel(int* out) {
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[block * threads + t] = static_cast<int>(block * threads + t);
}

void expect_refused(dim3 grid, dim3 block, const char* what) {
  DeviceArray<int> out(16);
  const std::vector<int> before = out.download();
  SCOPED_TRACE(what);
  EXPECT_LAUNCH_ERROR(cudasim::launch("index_kernel", index_kernel, grid, block, 0, out.p),
                      cudaErrorInvalidConfiguration);
  EXPECT_NE(cudasim::last_error_detail().find("index_kernel"), std::string::npos) << cudasim::last_error_detail();
  EXPECT_EQ(out.download(), before) << "a refused launch ran";
}

TEST(CudaSimLaunch, ConfigurationsBeyondTheLimitsAreInvalidConfiguration) {
  expect_refused(dim3(1), dim3(1025), "1025 threads per block");
  expect_refused(dim3(1), dim3(32, 33), "32 x 33 = 1056 threads per block");
  expect_refused(dim3(1), dim3(1, 1, 65), "block z 65");
  expect_refused(dim3(1), dim3(2048, 1, 1), "block x 2048");
  expect_refused(dim3(1, 65536), dim3(32), "grid y 65536");
  expect_refused(dim3(1, 1, 65536), dim3(32), "grid z 65536");
  expect_refused(dim3(0), dim3(32), "grid x 0");
  expect_refused(dim3(4, 0), dim3(32), "grid y 0");
  expect_refused(dim3(1), dim3(0), "block x 0");
  expect_refused(dim3(1), dim3(32, 1, 0), "block z 0");
}

TEST(CudaSimLaunch, TheLargestBlocksRun) {
  const dim3 blocks[] = {dim3(1024), dim3(1, 1024), dim3(16, 1, 64), dim3(4, 4, 64)};
  for (const dim3 block : blocks) {
    const unsigned n = block.x * block.y * block.z;
    DeviceArray<int> out(2 * n);
    EXPECT_LAUNCH_OK(cudasim::launch("index_kernel", index_kernel, dim3(2), block, 0, out.p));
    const std::vector<int> got = out.download();
    for (unsigned i = 0; i < 2 * n; ++i) ASSERT_EQ(got[i], static_cast<int>(i)) << "block (" << block.x << ", "
                                                                                 << block.y << ", " << block.z << ")";
  }
}

TEST(CudaSimLaunch, GridYAndZUpTo65535Run) {
  DeviceArray<int> out(65535);
  EXPECT_LAUNCH_OK(cudasim::launch("index_kernel", index_kernel, dim3(1, 65535), dim3(1), 0, out.p));
  const std::vector<int> got = out.download();
  for (unsigned i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<int>(i));
  DeviceArray<int> out3(3 * 5 * 7 * 64);
  EXPECT_LAUNCH_OK(cudasim::launch("index_kernel", index_kernel, dim3(3, 5, 7), dim3(64), 0, out3.p));
  const std::vector<int> got3 = out3.download();
  for (unsigned i = 0; i < got3.size(); ++i) ASSERT_EQ(got3[i], static_cast<int>(i));
}

TEST(CudaSimLaunch, PeekKeepsTheErrorAndGetLastErrorClearsIt) {
  DeviceArray<int> out(1);
  (void)cudaGetLastError();
  EXPECT_EQ(cudasim::launch("index_kernel", index_kernel, dim3(1), dim3(1025), 0, out.p), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidConfiguration), "cudaErrorInvalidConfiguration");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorLaunchFailure), "cudaErrorLaunchFailure");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
}

TEST(CudaSimLaunch, TheDevicePropertiesAreAnH200s) {
  cudaDeviceProp p;
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.maxThreadsDim[2], 64);
  EXPECT_EQ(p.maxGridSize[1], 65535);
  EXPECT_EQ(p.sharedMemPerBlock, size_t{48 * 1024});
  EXPECT_EQ(p.sharedMemPerBlockOptin, size_t{232448});
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.major * 10 + p.minor, 90);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(sms, 132);
  EXPECT_EQ(cudaGetDeviceProperties(&p, 1), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
}

// A kernel launched from inside a kernel is refused (one kernel runs at a time).
__global__ void nested_kernel(int* out, int* status) {
  if (threadIdx.x == 0) *status = cudasim::launch("inner", index_kernel, dim3(1), dim3(1), 0, out);
}

TEST(CudaSimLaunch, ALaunchFromAKernelIsRefused) {
  DeviceArray<int> out(1), status(1);
  (void)cudaGetLastError();
  EXPECT_EQ(cudasim::launch("outer", nested_kernel, dim3(1), dim3(32), 0, out.p, status.p), cudaSuccess);
  EXPECT_EQ(status.download()[0], cudaErrorLaunchFailure);
  EXPECT_NE(cudasim::last_error_detail().find("inner launched from a kernel"), std::string::npos)
      << cudasim::last_error_detail();
  (void)cudaGetLastError();
}

}  // namespace
