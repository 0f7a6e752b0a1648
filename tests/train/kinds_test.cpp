// train's name tables (train_kinds.h, convert.h's method, probe.h's activation): every value
// parses back from its printed name, in any case and by its aliases.
#include <gtest/gtest.h>

#include "normlab/convert.h"
#include "normlab/probe.h"
#include "normlab/train_kinds.h"
#include "test_util.h"

using namespace normlab;

TEST(Names, TrainEnumerationsRoundTrip) {
  EXPECT_EQ(test::names_round_trip_errors<OptimizerKind>(), "");
  EXPECT_EQ(test::names_round_trip_errors<Schedule>(), "");
  EXPECT_EQ(test::names_round_trip_errors<DataKind>(), "");
  EXPECT_EQ(test::names_round_trip_errors<Tokenizer>(), "");
  EXPECT_EQ(test::names_round_trip_errors<ConvertMethod>(), "");
  EXPECT_EQ(test::names_round_trip_errors<Activation>(), "");
  EXPECT_THROW(parse_kind<ConvertMethod>("gain"), UsageError);
  EXPECT_THROW(parse_kind<Activation>("relu"), UsageError);
}
