// Tensor, arena and RNG: construction, views, misuse, and the arena's reuse of blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "normlab/rng.h"
#include "normlab/tensor.h"

using namespace normlab;

TEST(Tensor, FromAndToVectorRoundTrip) {
  Tensor t = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(t.size(2), Error);
  EXPECT_THROW(t.data<float>(), Error);  // dtype mismatch is an error, not a reinterpretation
  EXPECT_THROW(Tensor::from({1, 2}, {3}), Error);
}

TEST(Tensor, ViewSharesStorageAndChecksSize) {
  Tensor t = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f32);
  Tensor v = t.view({3, 2});
  v.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[0], 42);
  EXPECT_THROW(t.view({4, 2}), Error);
  Tensor tail = t.view_at(4, {2});
  EXPECT_EQ(tail.to_vector(), (std::vector<double>{5, 6}));
  EXPECT_THROW(t.view_at(5, {2}), Error);
}

TEST(Tensor, ShapeStringAndItem) {
  EXPECT_EQ(shape_str({2, 8, 64}), "(2, 8, 64)");
  EXPECT_EQ(shape_str({5}), "(5,)");
  EXPECT_DOUBLE_EQ(Tensor::from({3.5}, {}, DType::f64).item(), 3.5);
  EXPECT_THROW(Tensor::from({1, 2}, {2}).item(), Error);
}

TEST(Arena, ReusesFreedBlocksOfTheSameSize) {
  { Tensor warm = Tensor::empty({1000}); }
  ArenaStats before = arena_stats();
  for (int i = 0; i < 100; ++i) {
    Tensor a = Tensor::empty({1000});
    Tensor b = Tensor::empty({1000});
  }
  ArenaStats after = arena_stats();
  EXPECT_EQ(after.requests - before.requests, 200u);
  // One more block for the second live tensor at most; the rest come from the cache.
  EXPECT_LE(after.system_allocs - before.system_allocs, 1u);
}

TEST(Rng, IsDeterministicAndStreamsDiffer) {
  Rng a(7, stream::init), b(7, stream::init), c(7, stream::data);
  for (int i = 0; i < 10; ++i) {
    uint32_t x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    (void)c.next_u32();
  }
  Rng d(7, stream::init), e(7, stream::data);
  EXPECT_NE(d.next_u64(), e.next_u64());
}

TEST(Rng, NormalHasUnitMomentsAndBelowIsInRange) {
  Rng r(1, stream::check);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
  std::set<uint32_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint32_t v = r.below(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
}
