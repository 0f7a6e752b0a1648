// The warnings both benches end with (src/bench/bench_internal.h).
#include <gtest/gtest.h>

#include "bench_internal.h"

using normlab::bench::detail::noisy_rows_warning;

TEST(BenchWarnings, NoisyRowsFirstFourNamedThenHowManyMore) {
  EXPECT_EQ(noisy_rows_warning({}, "1"), "");
  EXPECT_EQ(noisy_rows_warning({"a (12%)"}, "1"),
            "coefficient of variation above 10% for a (12%): the machine is noisy; rerun when idle, or with "
            "--min-time 1");
  // bench step listed every noisy row before; both benches now name four.
  EXPECT_EQ(noisy_rows_warning({"a", "b", "c", "d", "e", "f"}, "3"),
            "coefficient of variation above 10% for a, b, c, d and 2 more: the machine is noisy; rerun when idle, or "
            "with --min-time 3");
}
