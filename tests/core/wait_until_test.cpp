// tests/test_util.h's wait_until: a wait that runs out fails the test, naming what it waited for.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "test_util.h"

TEST(TestUtil, WaitUntilFailsNamingWhatItWaitedFor) {
  EXPECT_NONFATAL_FAILURE(EXPECT_FALSE(normlab::test::wait_until([] { return false; }, "the moon", 0.05)),
                          "gave up after 0.05 s waiting for the moon");
  int polls = 0;
  EXPECT_TRUE(normlab::test::wait_until([&] { return ++polls == 3; }, "three polls", 60));
  EXPECT_EQ(polls, 3);
}
