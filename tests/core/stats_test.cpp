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

// The 95% two-sided t quantile against a printed table (3 decimals); beyond dof 30 the expansion
// approaches the normal quantile 1.95996 from above.
TEST(Stats, TQuantile975MatchesTheTable) {
  EXPECT_NEAR(t_quantile_975(1), 12.706, 5e-4);
  EXPECT_NEAR(t_quantile_975(2), 4.303, 5e-4);
  EXPECT_NEAR(t_quantile_975(10), 2.228, 5e-4);
  EXPECT_NEAR(t_quantile_975(30), 2.042, 5e-4);
  EXPECT_NEAR(t_quantile_975(60), 2.000, 5e-4);    // table: 2.000
  EXPECT_NEAR(t_quantile_975(120), 1.980, 5e-4);   // table: 1.980
  EXPECT_NEAR(t_quantile_975(1000), 1.962, 5e-4);  // table: 1.962
  EXPECT_GT(t_quantile_975(31), t_quantile_975(1000));
  EXPECT_LT(t_quantile_975(31), t_quantile_975(30) + 1e-3);  // the table and the expansion join
  EXPECT_TRUE(std::isnan(t_quantile_975(0)));
  EXPECT_TRUE(std::isnan(t_quantile_975(-3)));
}

TEST(Stats, PairedDifferenceByHand) {
  // {0.1, 0.2, 0.3}: mean 0.2, sample std 0.1, half-width t(2) * 0.1 / sqrt(3).
  const PairedDifference d = paired_difference({0.1, 0.2, 0.3});
  EXPECT_EQ(d.n, 3);
  EXPECT_NEAR(d.mean, 0.2, 1e-15);
  const double half = 4.303 * 0.1 / std::sqrt(3.0);
  EXPECT_NEAR(d.low, 0.2 - half, 1e-12);
  EXPECT_NEAR(d.high, 0.2 + half, 1e-12);
  // Two pairs: t(1) = 12.706, sd = |a - b| / sqrt(2).
  const PairedDifference two = paired_difference({-1.0, 3.0});
  EXPECT_EQ(two.n, 2);
  EXPECT_EQ(two.mean, 1.0);
  EXPECT_NEAR(two.high - two.mean, 12.706 * (4.0 / std::sqrt(2.0)) / std::sqrt(2.0), 1e-12);
  // One pair: a mean, no interval.
  const PairedDifference one = paired_difference({0.5});
  EXPECT_EQ(one.n, 1);
  EXPECT_EQ(one.mean, 0.5);
  EXPECT_TRUE(std::isnan(one.low));
  EXPECT_TRUE(std::isnan(one.high));
  // None.
  const PairedDifference none = paired_difference({});
  EXPECT_EQ(none.n, 0);
  EXPECT_TRUE(std::isnan(none.mean));
  EXPECT_TRUE(std::isnan(none.low));
  EXPECT_TRUE(std::isnan(none.high));
}
