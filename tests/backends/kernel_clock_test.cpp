// KernelClock: each name's exclusive time, only on the thread that runs the clock, the innermost
// clock timed into, and every kernel run_kernel calls timed under its name.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "normlab/backend.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/kernel.h"
#include "normlab/kernel_clock.h"
#include "normlab/tensor.h"

namespace normlab {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const KernelClock::Entry* find(const std::vector<KernelClock::Entry>& entries, const std::string& name) {
  for (const KernelClock::Entry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

TEST(KernelClock, EachRegionGetsItsTimeLessTheRegionsItOpens) {
  KernelClock clock;
  const auto t0 = std::chrono::steady_clock::now();
  {
    const KernelClock::Region outer("outer");
    sleep_ms(5);
    for (int i = 0; i < 2; ++i) {
      const KernelClock::Region inner("inner");
      sleep_ms(10);
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto entries = clock.entries();
  ASSERT_EQ(entries.size(), 2u);
  const KernelClock::Entry* outer = find(entries, "outer");
  const KernelClock::Entry* inner = find(entries, "inner");
  ASSERT_TRUE(outer && inner);
  EXPECT_EQ(outer->calls, 1);
  EXPECT_EQ(inner->calls, 2);
  EXPECT_GE(inner->seconds, 0.020);
  EXPECT_GE(outer->seconds, 0.005);
  // Exclusive: the outer region's 5 ms, not its 25.
  EXPECT_LT(outer->seconds, inner->seconds);
  EXPECT_LE(clock.total_seconds(), wall);
  EXPECT_NEAR(clock.total_seconds(), outer->seconds + inner->seconds, 1e-15);
}

TEST(KernelClock, OnlyTheClocksThreadIsTimed) {
  KernelClock clock;
  std::thread other([] { const KernelClock::Region r("elsewhere"); });
  other.join();
  EXPECT_TRUE(clock.entries().empty());
  { const KernelClock::Region r("(no clock) here"); }
  EXPECT_EQ(clock.entries().size(), 1u);
}

TEST(KernelClock, TheInnermostClockIsTimedInto) {
  KernelClock outer;
  {
    KernelClock inner;
    { const KernelClock::Region r("a"); }
    EXPECT_EQ(inner.entries().size(), 1u);
  }
  EXPECT_TRUE(outer.entries().empty());
  { const KernelClock::Region r("b"); }
  ASSERT_EQ(outer.entries().size(), 1u);
  EXPECT_EQ(outer.entries()[0].name, "b");
}

TEST(KernelClock, RunKernelTimesEachCallUnderTheKernelsName) {
  Tensor t = Tensor::zeros({64});
  { const KernelClock::Region before("not timed: no clock yet"); }
  KernelClock clock;
  for (const char* name : {"reference", "cpu"}) run_kernel(backend(name), Fill{t, 1.0});
  const auto entries = clock.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, "fill");
  EXPECT_EQ(entries[0].calls, 2);
  EXPECT_GT(entries[0].seconds, 0);
}

}  // namespace
}  // namespace normlab
