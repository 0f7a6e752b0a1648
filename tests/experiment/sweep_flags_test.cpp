// sweep flags read through core's parsers: --rerun (split_list) and summarize --format (the format names).
#include <gtest/gtest.h>

#include "normlab/error.h"
#include "normlab/sweep.h"
#include "test_util.h"

using namespace normlab;
using namespace normlab::test;

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

// sweep summarize --format through the formats' name table: any case, md or markdown; a
// summary has no text form.
TEST(SweepSummarizeFormat, NamedByTheFormatTable) {
  const std::string dir = std::string(NORMLAB_SOURCE_DIR) + "/results/sweeps/warmup-gpt2";
  for (const char* f : {"md", "MD", "markdown"}) {
    CliResult r = run_cli({"sweep", "summarize", dir, "--no-write", "--format", f});
    EXPECT_EQ(r.exit_code, 0) << f << ": " << describe(r);
    EXPECT_EQ(r.out.rfind("# Sweep summary: ", 0), 0u) << f << ": " << r.out;
  }
  CliResult r = run_cli({"sweep", "summarize", dir, "--no-write", "--format", "text"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--format 'text' is not one of md, csv, json"), std::string::npos) << r.err;
}
