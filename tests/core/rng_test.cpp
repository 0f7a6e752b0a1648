// The RNG's streams are part of every result's reproducibility: the 64-bit draw is the first
// 32-bit draw in its high half, whatever the compiler (the order is written out, not left to
// the evaluation order of an expression).
#include <gtest/gtest.h>

#include "normlab/rng.h"

using normlab::Rng;

TEST(Rng, U64IsTwoU32DrawsHighFirst) {
  Rng a(42, 7), b(42, 7);
  for (int i = 0; i < 100; ++i) {
    const uint64_t high = b.next_u32();
    const uint64_t low = b.next_u32();
    EXPECT_EQ(a.next_u64(), (high << 32) | low) << i;
  }
}

TEST(Rng, StreamsDiffer) {
  Rng a(1, normlab::stream::init), b(1, normlab::stream::data);
  int same = 0;
  for (int i = 0; i < 64; ++i) same += a.next_u32() == b.next_u32();
  EXPECT_LT(same, 2);
}
