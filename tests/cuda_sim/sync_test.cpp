// __syncthreads under cuda-sim: no thread passes a barrier before every thread of its block has
// arrived; a barrier that some threads never reach is an error naming the kernel (never a hang);
// and a missing barrier shows as a wrong result, because the block's warps run depth first
// (lowest warp first on even blocks, highest first on odd ones).
#include <cmath>
#include <exception>
#include <numeric>
#include <stdexcept>

#include "sim_test.h"

namespace {

using simtest::DeviceArray;

// Every thread writes its slot, then (after the barrier, if any) reads its neighbour's.
template <bool kBarrier>
__global__ void rotate_kernel(float* out) {
  NL_SHARED_ARRAY(float, s, 1024);
  const unsigned n = blockDim.x * blockDim.y * blockDim.z;
  const unsigned tid = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
  s[tid] = static_cast<float>(blockIdx.x * 10000 + tid);
  if (kBarrier) __syncthreads();
  out[blockIdx.x * n + tid] = s[(tid + 1) % n];
}

TEST(CudaSimSync, NoThreadPassesTheBarrierBeforeAllArrive) {
  // 1-D blocks, a 3-D block, a block that is not a whole number of warps; two blocks each
  // (both scheduling orders).
  const dim3 blocks[] = {dim3(256), dim3(1024), dim3(8, 4, 3), dim3(50)};
  for (const dim3 block : blocks) {
    const unsigned n = block.x * block.y * block.z;
    DeviceArray<float> out(2 * n);
    EXPECT_LAUNCH_OK(cudasim::launch("rotate", rotate_kernel<true>, dim3(2), block, 0, out.p));
    const std::vector<float> got = out.download();
    for (unsigned b = 0; b < 2; ++b)
      for (unsigned t = 0; t < n; ++t)
        ASSERT_EQ(got[b * n + t], static_cast<float>(b * 10000 + (t + 1) % n))
            << "block " << b << " thread " << t << " of " << n;
  }
}

TEST(CudaSimSync, WithoutTheBarrierTheSameKernelReadsUnwrittenSharedMemory) {
  // The control of the test above: the simulator really does run threads ahead of each other.
  const unsigned n = 256;
  DeviceArray<float> out(2 * n);
  EXPECT_LAUNCH_OK(cudasim::launch("rotate_no_barrier", rotate_kernel<false>, dim3(2), dim3(n), 0, out.p));
  const std::vector<float> got = out.download();
  int unwritten = 0;
  for (float v : got) unwritten += std::isnan(v);
  EXPECT_GT(unwritten, 0) << "no thread read a slot before its owner wrote it";
}

// A barrier in a loop: the barrier releases each generation separately.
__global__ void barrier_loop_kernel(int* out, int rounds) {
  NL_SHARED_ARRAY(int, s, 128);
  const unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = static_cast<int>(t);
  for (int r = 0; r < rounds; ++r) {
    __syncthreads();
    const int v = s[(t + 1) % n];
    __syncthreads();
    s[t] = v;
  }
  __syncthreads();
  out[blockIdx.x * n + t] = s[t];
}

TEST(CudaSimSync, RepeatedBarriersReleaseOneGenerationAtATime) {
  const unsigned n = 96;
  const int rounds = 37;
  DeviceArray<int> out(3 * n);
  EXPECT_LAUNCH_OK(cudasim::launch("barrier_loop", barrier_loop_kernel, dim3(3), dim3(n), 0, out.p, rounds));
  const std::vector<int> got = out.download();
  for (unsigned i = 0; i < 3 * n; ++i) ASSERT_EQ(got[i], static_cast<int>((i % n + rounds) % n)) << i;
}

// Threads at or above `live` return before the barrier the others wait at.
__global__ void early_exit_kernel(int* out, unsigned live) {
  if (threadIdx.x >= live) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void ok_kernel(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int>(threadIdx.x); }

TEST(CudaSimSync, ABarrierSomeThreadsNeverReachIsALaunchFailureNotAHang) {
  DeviceArray<int> out(128);
  EXPECT_LAUNCH_ERROR(cudasim::launch("early_exit_kernel", early_exit_kernel, dim3(1), dim3(128), 0, out.p, 100u),
                      cudaErrorLaunchFailure);
  const std::string detail = cudasim::last_error_detail();
  EXPECT_NE(detail.find("early_exit_kernel"), std::string::npos) << detail;
  EXPECT_NE(detail.find("reached by 100 of 128 threads"), std::string::npos) << detail;
  EXPECT_NE(detail.find("28 exited"), std::string::npos) << detail;
  EXPECT_NE(detail.find("block (0, 0, 0)"), std::string::npos) << detail;

  // On an odd block (highest warp first) too, and in a later block of the grid.
  EXPECT_LAUNCH_ERROR(cudasim::launch("early_exit_kernel", early_exit_kernel, dim3(3), dim3(64), 0, out.p, 33u),
                      cudaErrorLaunchFailure);
  EXPECT_NE(cudasim::last_error_detail().find("reached by 33 of 64"), std::string::npos)
      << cudasim::last_error_detail();

  // The simulator is usable afterwards: the abandoned fibers leave nothing behind.
  DeviceArray<int> ok(4 * 64);
  EXPECT_LAUNCH_OK(cudasim::launch("ok", ok_kernel, dim3(4), dim3(64), 0, ok.p));
  const std::vector<int> got = ok.download();
  for (unsigned i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<int>(i % 64));
}

// Half of warp 0 waits at a warp barrier for the whole warp, while the other half (and warp 1)
// wait at __syncthreads: neither barrier can ever complete.
__global__ void barrier_mix_kernel(int* out) {
  if (threadIdx.x < 16)
    __syncwarp(0xffffffffu);
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaSimSync, ThreadsWaitingAtDifferentBarriersAreAnErrorNamingBoth) {
  DeviceArray<int> out(64);
  EXPECT_LAUNCH_ERROR(cudasim::launch("barrier_mix", barrier_mix_kernel, dim3(1), dim3(64), 0, out.p),
                      cudaErrorLaunchFailure);
  const std::string detail = cudasim::last_error_detail();
  EXPECT_NE(detail.find("barrier_mix"), std::string::npos) << detail;
  EXPECT_NE(detail.find("__syncthreads() reached by 48 of 64"), std::string::npos) << detail;
  EXPECT_NE(detail.find("16 wait at __syncwarp"), std::string::npos) << detail;
}

// A C++ exception escaping a kernel (cuda-sim only: device code has none) is a launch failure
// with its message; the host thread is left as it was (no exception still "being handled").
__global__ void throwing_kernel(int* out) {
  if (threadIdx.x == 40) throw std::runtime_error("thrown by thread 40");
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaSimSync, AnExceptionInAKernelIsALaunchFailureNamingIt) {
  DeviceArray<int> out(64);
  EXPECT_LAUNCH_ERROR(cudasim::launch("throwing_kernel", throwing_kernel, dim3(2), dim3(64), 0, out.p),
                      cudaErrorLaunchFailure);
  const std::string detail = cudasim::last_error_detail();
  EXPECT_NE(detail.find("throwing_kernel"), std::string::npos) << detail;
  EXPECT_NE(detail.find("a C++ exception in the kernel: thrown by thread 40"), std::string::npos) << detail;
  EXPECT_FALSE(std::current_exception()) << "the kernel's exception is still current on the host thread";
  EXPECT_EQ(std::uncaught_exceptions(), 0);
  DeviceArray<int> ok(64);
  EXPECT_LAUNCH_OK(cudasim::launch("ok", ok_kernel, dim3(1), dim3(64), 0, ok.p));
}

// ---- a missing barrier -----------------------------------------------------------------------
// The classic shared-memory tree reduction; kDrop removes one of its barriers:
//   1 = the one after the loads, 2 = the one inside the halving loop.
template <int kDrop>
__global__ void tree_sum_kernel(float* out, const float* in) {
  NL_SHARED_ARRAY(float, s, 1024);
  const unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  if (kDrop != 1) __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    if (kDrop != 2) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

template <int kDrop>
std::vector<float> tree_sums(unsigned blocks, unsigned threads) {
  std::vector<float> in(blocks * threads);
  std::iota(in.begin(), in.end(), 1.0f);  // integers: every order of additions is exact
  DeviceArray<float> din(in), dout(blocks);
  EXPECT_LAUNCH_OK(cudasim::launch("tree_sum", tree_sum_kernel<kDrop>, dim3(blocks), dim3(threads), 0, dout.p, din.p));
  return dout.download();
}

float expected_tree_sum(unsigned block, unsigned threads) {
  const double first = block * threads + 1.0, last = (block + 1.0) * threads;
  return static_cast<float>((first + last) * threads / 2);
}

TEST(CudaSimSync, ABlockReductionIsExactWithItsBarriers) {
  for (unsigned threads : {32u, 64u, 256u, 1024u}) {
    const std::vector<float> got = tree_sums<0>(2, threads);
    for (unsigned b = 0; b < 2; ++b) EXPECT_EQ(got[b], expected_tree_sum(b, threads)) << threads << " threads, block " << b;
  }
}

TEST(CudaSimSync, AMissingBarrierInTheLoopGivesAWrongSumInBothWarpOrders) {
  // Block 0 runs its warps lowest first, block 1 highest first: both sums must come out wrong.
  for (unsigned threads : {64u, 256u, 1024u}) {
    const std::vector<float> got = tree_sums<2>(2, threads);
    for (unsigned b = 0; b < 2; ++b)
      EXPECT_NE(got[b], expected_tree_sum(b, threads))
          << threads << " threads, block " << b << (b % 2 ? " (highest warp first)" : " (lowest warp first)")
          << ": the race went unseen";
  }
}

TEST(CudaSimSync, AMissingBarrierAfterTheLoadsIsCaughtByTheLowestWarpFirstOrder) {
  // Without the barrier after the loads, the first additions s[t] += s[t + n/2] (t < n/2) read
  // the slots of the upper half of the block. Lowest warp first (even blocks), those are not
  // written yet: a wrong sum. Highest warp first (odd blocks), the upper warps have run to the
  // barrier in the loop before any lower one starts, so this race goes unseen there: each order
  // catches the races the other misses, which is why cuda-sim alternates them.
  for (unsigned threads : {64u, 256u, 1024u}) {
    const std::vector<float> got = tree_sums<1>(2, threads);
    EXPECT_NE(got[0], expected_tree_sum(0, threads)) << threads << " threads, block 0 (lowest warp first)";
    EXPECT_EQ(got[1], expected_tree_sum(1, threads)) << threads << " threads, block 1 (highest warp first)";
  }
}

// Each warp writes its slot and, without a barrier, reads the next warp's: which warps see
// the value shows the order the warps ran in.
__global__ void warp_neighbour_kernel(float* out) {
  NL_SHARED_ARRAY(float, s, 32);
  const unsigned warp = threadIdx.x / 32, nw = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) s[warp] = static_cast<float>(warp);
  out[blockIdx.x * nw + warp] = s[(warp + 1) % nw];  // every lane writes the same value
}

TEST(CudaSimSync, WarpsRunLowestFirstOnEvenBlocksAndHighestFirstOnOddOnes) {
  const unsigned nw = 8;
  DeviceArray<float> out(4 * nw);
  EXPECT_LAUNCH_OK(cudasim::launch("warp_neighbour", warp_neighbour_kernel, dim3(4), dim3(nw * 32), 0, out.p));
  const std::vector<float> got = out.download();
  for (unsigned b = 0; b < 4; ++b)
    for (unsigned w = 0; w < nw; ++w) {
      const float v = got[b * nw + w];
      // Lowest first: warp w reads warp w+1 before it ran, except the last, which reads warp 0.
      // Highest first: only the last warp (run first) reads warp 0 before it ran.
      const bool unwritten = b % 2 == 0 ? w + 1 < nw : w + 1 == nw;
      if (unwritten)
        EXPECT_TRUE(std::isnan(v)) << "block " << b << " warp " << w << " read " << v;
      else
        EXPECT_EQ(v, static_cast<float>((w + 1) % nw)) << "block " << b << " warp " << w;
    }
}

}  // namespace
