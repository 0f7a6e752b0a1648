// --rerun goes through the one list parser (core's split_list): every entry named, none empty.
#include <gtest/gtest.h>

#include "normlab/error.h"
#include "normlab/sweep.h"

using namespace normlab;

TEST(SweepRerun, ListOfKnownStatuses) {
  EXPECT_EQ(parse_rerun("diverged,failed"), (std::vector<std::string>{"diverged", "failed"}));
  EXPECT_TRUE(parse_rerun("").empty());  // no --rerun
  EXPECT_THROW(parse_rerun("diverged,x"), UsageError);
  EXPECT_THROW(parse_rerun("diverged,,failed"), UsageError);
}

TEST(SweepRerun, TrailingCommaIsAnEmptyEntry) {
  // Read as "failed" before (std::getline dropped the empty last entry); every other list flag
  // refuses it.
  EXPECT_THROW(parse_rerun("failed,"), UsageError);
}
