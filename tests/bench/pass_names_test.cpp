// bench's Pass table: every value parses back from its printed name (the row names and
// --pass use the same spellings).
#include <gtest/gtest.h>

#include "normlab/bench.h"
#include "test_util.h"

using namespace normlab;

TEST(Names, BenchPassRoundTrip) {
  EXPECT_EQ(test::names_round_trip_errors<bench::Pass>(), "");
  EXPECT_STREQ(to_string(bench::Pass::addfwd), "addfwd");
}
