// The build's provenance: the sources' hash is a SHA-256 (cmake/git_commit.cmake), so that a
// result from a "-dirty" commit still names its code.
#include <gtest/gtest.h>

#include "normlab/version.h"
#include "test_util.h"

TEST(BuildInfo, SourceHashIsASha256) {
  const std::string& h = normlab::build_info().source_hash;
  EXPECT_TRUE(normlab::test::is_sha256_hex(h)) << "'" << h << "'";
  EXPECT_FALSE(normlab::build_info().git_commit.empty());
}
