// The shared statistics, the JSON number and the list splitter (core's small helpers).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "normlab/parse.h"
#include "normlab/stats.h"

using namespace normlab;

TEST(Stats, MedianOfOddAndEvenCountsAndOfNothing) {
  EXPECT_EQ(median({3, 1, 2}), 2.0);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({7}), 7.0);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(Stats, SampleStdDividesByNMinusOne) {
  EXPECT_DOUBLE_EQ(sample_std({1, 2, 3, 4}), std::sqrt(5.0 / 3.0));
  EXPECT_EQ(sample_std({5}), 0.0);
  EXPECT_TRUE(std::isnan(sample_std({})));
  EXPECT_DOUBLE_EQ(mean({1, 2, 3, 4}), 2.5);
  EXPECT_TRUE(std::isnan(mean({})));
}

namespace {
// A stand-in for a JSON value type: what json_number constructs it from.
struct FakeJson {
  explicit FakeJson(double x) : text(std::to_string(x)) {}
  explicit FakeJson(std::nullptr_t) : text("null") {}
  std::string text;
};
}  // namespace

TEST(Stats, JsonNumberWritesWhatIsNotFiniteAsNull) {
  EXPECT_EQ(json_number<FakeJson>(1.5).text, std::to_string(1.5));
  EXPECT_EQ(json_number<FakeJson>(NAN).text, "null");
  EXPECT_EQ(json_number<FakeJson>(std::numeric_limits<double>::infinity()).text, "null");
  EXPECT_EQ(json_number<FakeJson>(-std::numeric_limits<double>::infinity()).text, "null");
}

TEST(Parse, SplitAtKeepsEmptyParts) {
  EXPECT_EQ(split_at("a,b,c", ','), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(split_at("a,,b,", ','), (std::vector<std::string>{"a", "", "b", ""}));
  EXPECT_EQ(split_at("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(split_at("2x5x8", 'x'), (std::vector<std::string>{"2", "5", "8"}));
}
