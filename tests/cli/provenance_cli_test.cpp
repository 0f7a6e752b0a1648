// What results say about the code that made them: --version prints the sources' hash, and every
// result.json and bench JSON carries the same hash beside the commit.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::fresh_dir;
using normlab::test::run_cli;
using normlab::test::slurp;

TEST(ProvenanceCli, VersionResultAndBenchJsonNameTheSourcesHash) {
  auto r = run_cli({"--version"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::string label = "sources sha256 ";
  const size_t at = r.out.find(label);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string hash = r.out.substr(at + label.size(), 64);
  ASSERT_TRUE(normlab::test::is_sha256_hex(hash)) << r.out;
  ASSERT_EQ(r.out.substr(at + label.size() + 64, 1), "\n") << r.out;
  // How each device stores bf16 / fp16 (docs/precision.md).
  EXPECT_NE(r.out.find("bf16/fp16 on the CPU: emulated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16/fp16 on CUDA (cuda, cuda-sim): native 2-byte storage"), std::string::npos) << r.out;

  const fs::path dir = fresh_dir("provenance_run");
  r = run_cli({"train", "--steps", "2", "--eval_every", "2", "--layers", "1", "--batch_size", "2", "--out",
               dir.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto result = nlohmann::json::parse(slurp(dir / "result.json"));
  EXPECT_EQ(result["versions"]["source_hash"], hash) << result["versions"].dump();
  EXPECT_TRUE(result["versions"].contains("git_commit"));
  fs::remove_all(dir);

  r = run_cli({"bench", "norms", "--shapes", "1x2x32", "--threads", "1", "--footprint-mib", "1", "--min-time", "0",
               "--repeats", "1", "--warmup", "0", "--impl", "rmsnorm.fused", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto bench = nlohmann::json::parse(r.out);
  EXPECT_EQ(bench["context"]["normlab_source_hash"], hash) << bench["context"].dump();
  EXPECT_TRUE(bench["context"].contains("normlab_commit"));
}
