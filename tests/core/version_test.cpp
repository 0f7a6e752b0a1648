// The build's provenance: the sources' hash is a SHA-256 (cmake/git_commit.cmake), so that a
// result from a "-dirty" commit still names its code.
#include <gtest/gtest.h>

#include <regex>

#include "normlab/version.h"

TEST(BuildInfo, SourceHashIsASha256) {
  const std::string& h = normlab::build_info().source_hash;
  EXPECT_TRUE(std::regex_match(h, std::regex("[0-9a-f]{64}"))) << "'" << h << "'";
  EXPECT_FALSE(normlab::build_info().git_commit.empty());
}
