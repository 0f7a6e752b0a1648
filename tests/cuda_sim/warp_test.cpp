// Warp shuffles and votes under cuda-sim: values are exchanged among the lanes of the mask once
// all of them have arrived, with the GPU's lane arithmetic for sub-warp widths (PTX shfl.sync:
// a source lane outside the allowed range gives the caller its own value); a mask naming lanes
// the warp does not have, or lanes of one warp calling with different masks, are errors.
#include <cstdint>

#include "sim_test.h"

namespace {

using simtest::DeviceArray;

enum Op : int {
  kXorReduce,  // butterfly sum over the warp (5 exchanges in a row)
  kXor,        // __shfl_xor_sync(full, v, arg, width)
  kDown,       // __shfl_down_sync(full, v, arg, width)
  kUp,         // __shfl_up_sync(full, v, arg, width)
  kIdx,        // __shfl_sync(full, v, arg, width)
  kIdxDouble,  // __shfl_sync of a double (64-bit exchange)
};

// v = 100 * warp + lane + 1 (never 0, so that a lane's own value is told apart from another's).
__global__ void shuffle_kernel(int* out, int op, int arg, int width) {
  const unsigned t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int v = static_cast<int>(100 * warp + lane + 1);
  int r = 0;
  switch (op) {
    case kXorReduce: {
      r = v;
      for (int offset = 16; offset > 0; offset >>= 1) r += __shfl_xor_sync(0xffffffffu, r, offset);
      break;
    }
    case kXor: r = __shfl_xor_sync(0xffffffffu, v, arg, width); break;
    case kDown: r = __shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(arg), width); break;
    case kUp: r = __shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(arg), width); break;
    case kIdx: r = __shfl_sync(0xffffffffu, v, arg, width); break;
    case kIdxDouble: {
      const double d = __shfl_sync(0xffffffffu, static_cast<double>(v) + 0.25, arg, width);
      r = static_cast<int>(d * 4.0);
      break;
    }
  }
  out[blockIdx.x * blockDim.x + t] = r;
}

// The lane the GPU reads from (PTX ISA, shfl.sync; width w: segment base b = lane & ~(w-1),
// last lane of the segment m = b + w - 1): up: lane - d if >= b; down: lane + d if <= m;
// xor: lane ^ mask if <= m (a lower segment may be read); idx: b + (src mod w).
int source_lane(int op, int lane, int arg, int width) {
  const int base = lane & ~(width - 1), last = base + width - 1;
  int j = lane;
  switch (op) {
    case kXor: j = lane ^ arg; return j <= last ? j : lane;
    case kDown: j = lane + arg; return j <= last ? j : lane;
    case kUp: j = lane - arg; return j >= base ? j : lane;
    default: return base | (arg & (width - 1));
  }
}

std::vector<int> run_shuffle(int op, int arg, int width, unsigned blocks = 2, unsigned threads = 64) {
  DeviceArray<int> out(blocks * threads);
  EXPECT_LAUNCH_OK(cudasim::launch("shuffle", shuffle_kernel, dim3(blocks), dim3(threads), 0, out.p, op, arg, width));
  return out.download();
}

TEST(CudaSimWarp, XorButterflySumsTheWholeWarpInEveryLane) {
  const std::vector<int> got = run_shuffle(kXorReduce, 0, 32, 2, 96);
  for (unsigned i = 0; i < got.size(); ++i) {
    const int warp = static_cast<int>((i % 96) / 32);
    ASSERT_EQ(got[i], 32 * 100 * warp + 32 * 33 / 2) << "thread " << i;
  }
}

void check_shuffle(int op, const char* name, int arg, int width) {
  const std::vector<int> got = run_shuffle(op, arg, width);
  for (unsigned i = 0; i < got.size(); ++i) {
    const int lane = static_cast<int>(i % 32), warp = static_cast<int>((i % 64) / 32);
    const int want = 100 * warp + source_lane(op, lane, arg, width) + 1;
    ASSERT_EQ(got[i], want) << name << "(arg " << arg << ", width " << width << ") in lane " << lane << " of warp "
                            << warp << " (block " << i / 64 << ")";
  }
}

TEST(CudaSimWarp, ShflDownWithAndWithoutWidth) {
  for (int width : {32, 16, 8, 4, 2})
    for (int delta : {1, 2, 3, 5, 16})
      if (delta < width || delta == 16) check_shuffle(kDown, "__shfl_down_sync", delta, width);
}

TEST(CudaSimWarp, ShflUpWithAndWithoutWidth) {
  for (int width : {32, 16, 8, 4, 2})
    for (int delta : {1, 2, 3, 5, 16})
      if (delta < width || delta == 16) check_shuffle(kUp, "__shfl_up_sync", delta, width);
}

TEST(CudaSimWarp, ShflIdxWithAndWithoutWidth) {
  for (int width : {32, 16, 8, 4, 2, 1})
    for (int src : {0, 1, 3, 7, 17, 31, 33}) check_shuffle(kIdx, "__shfl_sync", src, width);
}

TEST(CudaSimWarp, ShflXorWithinASegment) {
  for (int width : {32, 16, 8, 4, 2})
    for (int mask = 1; mask < width; mask <<= 1) check_shuffle(kXor, "__shfl_xor_sync", mask, width);
  check_shuffle(kXor, "__shfl_xor_sync", 0x15, 32);
}

TEST(CudaSimWarp, ShflXorAcrossSegmentsReadsLowerSegmentsOnly) {
  // CUDA Programming Guide, __shfl_xor_sync: with width < warpSize a group may read "earlier
  // groups of threads", and a lane whose partner lies in a later group gets its own value.
  // Width 16, lane mask 16: lanes 16..31 read lanes 0..15, lanes 0..15 keep their own value.
  check_shuffle(kXor, "__shfl_xor_sync", 16, 16);
  check_shuffle(kXor, "__shfl_xor_sync", 8, 8);
  check_shuffle(kXor, "__shfl_xor_sync", 12, 4);
  const std::vector<int> got = run_shuffle(kXor, 16, 16, 1, 32);
  EXPECT_EQ(got[0], 1);        // lane 0: partner 16 is in a later group
  EXPECT_EQ(got[16], 0 + 1);   // lane 16: partner 0, an earlier group
  EXPECT_EQ(got[31], 15 + 1);  // lane 31: partner 15
}

TEST(CudaSimWarp, ShflOfA64BitValue) {
  for (int width : {32, 8})
    for (int src : {0, 5, 31}) {
      const std::vector<int> got = run_shuffle(kIdxDouble, src, width);
      for (unsigned i = 0; i < got.size(); ++i) {
        const int lane = static_cast<int>(i % 32), warp = static_cast<int>((i % 64) / 32);
        ASSERT_EQ(got[i], 4 * (100 * warp + source_lane(kIdx, lane, src, width) + 1) + 1) << "thread " << i;
      }
    }
}

// A partial last warp: 48 threads, warp 1 has lanes 0..15; its shuffles use mask 0xffff.
__global__ void partial_warp_kernel(int* out) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned mask = threadIdx.x < 32 ? 0xffffffffu : 0x0000ffffu;
  int v = static_cast<int>(lane);
  for (int offset = 8; offset > 0; offset >>= 1) v += __shfl_xor_sync(mask, v, offset);
  out[threadIdx.x] = v;
}

TEST(CudaSimWarp, APartialWarpShufflesAmongItsExistingLanes) {
  DeviceArray<int> out(48);
  EXPECT_LAUNCH_OK(cudasim::launch("partial_warp", partial_warp_kernel, dim3(1), dim3(48), 0, out.p));
  const std::vector<int> got = out.download();
  for (unsigned t = 0; t < 48; ++t) {
    const unsigned lane = t % 32, base = lane & ~15u;
    ASSERT_EQ(got[t], static_cast<int>(16 * base + 120)) << "thread " << t;  // sum of the 16-lane group
  }
}

// ---- votes -------------------------------------------------------------------------------------
__global__ void vote_kernel(unsigned* out) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned* o = out + 8 * (blockIdx.x * (blockDim.x / 32) + warp);
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0 || lane == warp);
  const int any_none = __any_sync(0xffffffffu, lane > 40);
  const int any_one = __any_sync(0xffffffffu, lane == 31);
  const int all_yes = __all_sync(0xffffffffu, lane < 32);
  const int all_but_one = __all_sync(0xffffffffu, lane != 7);
  // Half the warp, its own mask: the result has bits of the mask only.
  unsigned half_ballot = 0;
  int half_all = 0;
  if (lane < 16) {
    half_ballot = __ballot_sync(0x0000ffffu, 1);
    half_all = __all_sync(0x0000ffffu, lane < 16);
  }
  if (lane == 0) {
    o[0] = ballot;
    o[1] = static_cast<unsigned>(any_none);
    o[2] = static_cast<unsigned>(any_one);
    o[3] = static_cast<unsigned>(all_yes);
    o[4] = static_cast<unsigned>(all_but_one);
    o[5] = half_ballot;
    o[6] = static_cast<unsigned>(half_all);
    o[7] = 0xabcu;
  }
}

TEST(CudaSimWarp, BallotAnyAll) {
  const unsigned blocks = 2, warps = 3;
  DeviceArray<unsigned> out(8 * blocks * warps);
  EXPECT_LAUNCH_OK(cudasim::launch("vote", vote_kernel, dim3(blocks), dim3(32 * warps), 0, out.p));
  const std::vector<unsigned> got = out.download();
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned w = 0; w < warps; ++w) {
      const unsigned* o = got.data() + 8 * (b * warps + w);
      unsigned want = 1u << w;
      for (unsigned l = 0; l < 32; l += 3) want |= 1u << l;
      EXPECT_EQ(o[0], want) << "ballot, block " << b << " warp " << w;
      EXPECT_EQ(o[1], 0u) << "any of none";
      EXPECT_EQ(o[2], 1u) << "any of one";
      EXPECT_EQ(o[3], 1u) << "all of all";
      EXPECT_EQ(o[4], 0u) << "all but one";
      EXPECT_EQ(o[5], 0x0000ffffu) << "ballot with a half mask";
      EXPECT_EQ(o[6], 1u) << "all with a half mask";
      EXPECT_EQ(o[7], 0xabcu);
    }
}

// ---- errors ------------------------------------------------------------------------------------
enum Misuse : int {
  kMaskBeyondTheBlock,  // full mask in a warp of 16 lanes
  kMismatchedMasks,     // lane 5 calls with a mask other than the rest's
  kCallerNotInMask,     // lanes 16..31 pass a mask of lanes 0..15
  kSourceNotInMask,     // __shfl_sync(0xffff, v, 20)
  kBallotMaskBeyond,    // __ballot_sync with a mask beyond the block
};

__global__ void misuse_kernel(int* out, int misuse) {
  const unsigned lane = threadIdx.x % 32;
  int v = static_cast<int>(threadIdx.x);
  switch (misuse) {
    case kMaskBeyondTheBlock: v = __shfl_down_sync(0xffffffffu, v, 1); break;
    case kMismatchedMasks: v = __shfl_sync(lane == 5 ? 0x7fffffffu : 0xffffffffu, v, 0); break;
    case kCallerNotInMask: v = __shfl_sync(0x0000ffffu, v, 0); break;
    case kSourceNotInMask:
      if (lane < 16) v = __shfl_sync(0x0000ffffu, v, 20);
      break;
    case kBallotMaskBeyond: v = static_cast<int>(__ballot_sync(0xffffffffu, 1)); break;
  }
  out[threadIdx.x] = v;
}

void expect_misuse(int misuse, unsigned threads, const char* needle) {
  DeviceArray<int> out(threads);
  EXPECT_LAUNCH_ERROR(cudasim::launch("misuse_kernel", misuse_kernel, dim3(1), dim3(threads), 0, out.p, misuse),
                      cudaErrorLaunchFailure);
  const std::string detail = cudasim::last_error_detail();
  EXPECT_NE(detail.find("misuse_kernel"), std::string::npos) << detail;
  EXPECT_NE(detail.find(needle), std::string::npos) << "wanted \"" << needle << "\" in: " << detail;
}

TEST(CudaSimWarp, AMaskWithLanesTheWarpDoesNotHaveIsAnError) {
  expect_misuse(kMaskBeyondTheBlock, 16, "__shfl_down_sync with mask 0xffffffff in warp 0, whose lanes are 0x0000ffff");
  expect_misuse(kMaskBeyondTheBlock, 40, "whose lanes are 0x000000ff");
  expect_misuse(kBallotMaskBeyond, 20, "__ballot_sync with mask 0xffffffff");
}

TEST(CudaSimWarp, MismatchedMasksInOneWarpAreAnError) {
  expect_misuse(kMismatchedMasks, 32, "with mask 0x7fffffff while lanes 0x0000001f wait at __shfl_sync with mask 0xffffffff");
}

TEST(CudaSimWarp, ACallerOutsideItsMaskIsAnError) { expect_misuse(kCallerNotInMask, 32, "a lane not in its mask"); }

TEST(CudaSimWarp, ReadingALaneOutsideTheMaskIsAnError) {
  expect_misuse(kSourceNotInMask, 32, "__shfl_sync reads lane 20, which is not in its mask");
}

}  // namespace
