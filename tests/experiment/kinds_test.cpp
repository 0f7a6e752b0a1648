// experiment's name tables (sweep.h): every value parses back from its printed name, in any case and
// by its aliases.
#include <gtest/gtest.h>

#include "normlab/sweep.h"
#include "test_util.h"

using namespace normlab;

TEST(Names, ExperimentEnumerationsRoundTrip) { EXPECT_EQ(test::names_round_trip_errors<LayerReduce>(), ""); }
