// nn's name tables (nn_kinds.h): every value parses back from its printed name, in any case and
// by its aliases.
#include <gtest/gtest.h>

#include "normlab/nn_kinds.h"
#include "test_util.h"

using namespace normlab;

TEST(Names, NnEnumerationsRoundTrip) {
  EXPECT_EQ(test::names_round_trip_errors<ModelKind>(), "");
  EXPECT_EQ(test::names_round_trip_errors<FinalNorm>(), "");
  EXPECT_EQ(test::names_round_trip_errors<InitScheme>(), "");
  EXPECT_STREQ(to_string(FinalNorm::auto_), "auto");
}
