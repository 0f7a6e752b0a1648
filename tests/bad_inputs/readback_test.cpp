// Every config.json a run writes loads back with --config and reproduces the run (a run's record
// is only as good as the rerun it allows): extreme but valid values included (a huge adam_eps, a
// tiny lr, seed 2^64 - 1, clip near DBL_MAX), which JSON must hold exactly.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::run_cli;
using normlab::test::slurp;

TEST(Readback, EveryWrittenConfigLoadsAndReproducesTheRun) {
  const fs::path root = normlab::test::fresh_dir("readback");
  fs::create_directories(root);
  const std::vector<std::vector<std::string>> configs = {
      {"--adam_eps", "1e300", "--seed", "18446744073709551615"},
      {"--lr", "1e-300", "--clip", "1.7976931348623157e308", "--weight_decay", "4.9e-324"},
      {"--norm_eps", "1e29", "--norm", "rmsnorm", "--placement", "post"},
      {"--model", "gpt", "--qk_norm", "on", "--heads", "2", "--d_model", "8", "--schedule", "cosine",
       "--warmup_steps", "1"},
  };
  int i = 0;
  for (const auto& extra : configs) {
    const fs::path a = root / ("a" + std::to_string(i)), b = root / ("b" + std::to_string(i));
    ++i;
    std::vector<std::string> args = {"train", "--steps", "4", "--eval_every", "2", "--layers", "2", "--batch_size", "2",
                                     "--threads", "1", "-q", "--out", a.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    r = run_cli({"train", "--config", (a / "config.json").string(), "-q", "--out", b.string()});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(slurp(a / "config.json"), slurp(b / "config.json"));
    EXPECT_EQ(slurp(a / "metrics.jsonl"), slurp(b / "metrics.jsonl"));
  }
  fs::remove_all(root);
}
