// `normlab train` as a user runs it: a run directory from flags and a config file, and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::fresh_dir;
using normlab::test::run_cli;
using normlab::test::slurp;

TEST(TrainCli, TrainsAndWritesTheRunDirectory) {
  fs::path dir = fresh_dir("cli_run");
  auto r = run_cli({"train", "--steps", "4", "--eval_every", "2", "--layers", "2", "--batch_size", "4", "--out",
                    dir.string(), "--json", "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["status"], "collapsed");  // 4 steps learn nothing: finished, not diverged
  for (const char* f : {"config.json", "metrics.jsonl", "result.json", "timing.jsonl"}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_EQ(normlab::test::split_lines(slurp(dir / "metrics.jsonl")).size(), 2u);
  // An existing directory is not replaced without --force.
  r = run_cli({"train", "--steps", "2", "--out", dir.string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  // Flags override the config file.
  fs::path cfg = fs::path(testing::TempDir()) / "normlab_cfg.json";
  std::ofstream(cfg) << R"({"layers": 3, "steps": 2, "eval_every": 2, "batch_size": 2, "lr": 0.5})";
  r = run_cli({"train", "--config", cfg.string(), "--lr", "0.25", "--out", dir.string(), "--force", "--json", "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto resolved = nlohmann::json::parse(slurp(dir / "config.json"));
  EXPECT_EQ(resolved["layers"], 3);
  EXPECT_DOUBLE_EQ(resolved["lr"].get<double>(), 0.25);
  EXPECT_EQ(resolved["d_model"], 64);  // defaults are filled in
}

// train names a norm as handcalc does (`train --norm LayerNorm` once failed), and the resolved
// config prints the canonical name.
TEST(TrainCli, NormTakesEverySpelling) {
  for (const char* spelling : {"LayerNorm", "ln", "RMSNorm"}) {
    fs::path dir = fresh_dir(std::string("cli_norm_") + spelling);
    auto r = run_cli({"train", "--steps", "1", "--eval_every", "1", "--layers", "1", "--batch_size", "2", "--norm",
                      spelling, "--out", dir.string(), "-q"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "config.json"))["norm"], spelling[0] == 'R' ? "rmsnorm" : "layernorm");
  }
}

// convert names its target norm and method through their tables (any case, the norm's short
// spellings) and prints the canonical names.
TEST(TrainCli, ConvertTakesTheTablesSpellings) {
  fs::path dir = fresh_dir("cli_convert_names");
  fs::create_directories(dir);
  auto r = run_cli({"train", "--steps", "2", "--eval_every", "2", "--layers", "1", "--batch_size", "2", "--norm", "ln",
                    "--out", (dir / "ln").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  r = run_cli({"convert", (dir / "ln").string(), "--to", "RMS", "--method", "Exact", "--out", (dir / "c").string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("(rmsnorm, exact)"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "c" / "convert.json"))["method"], "exact");
  r = run_cli({"convert", (dir / "ln").string(), "--to", "rms", "--method", "magic", "--out", (dir / "d").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'magic' is not one of naive, exact"), std::string::npos) << describe(r);
}

// The norm kernels' variants are measured on the machine the first time a shape class is used and
// cached: result.json says which variant ran for every class and why, and a second run that takes
// them from the cache computes the same numbers bit for bit (deterministic for a machine and cache).
TEST(TrainCli, ResultRecordsTheKernelVariantsAndCachedChoicesReproduce) {
  const fs::path cache = fresh_dir("cli_tune_cache");
  normlab::test::RunOptions o;
  o.env = {{"NORMLAB_TUNE", "cached"}, {"XDG_CACHE_HOME", cache.string()}};
  std::vector<nlohmann::json> results;
  for (const char* name : {"cli_tune_a", "cli_tune_b"}) {
    const fs::path dir = fresh_dir(name);
    auto r = run_cli({"train", "--steps", "6", "--eval_every", "3", "--layers", "2", "--batch_size", "4", "--norm",
                      "layernorm", "--out", dir.string(), "-q"},
                     o);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    results.push_back(nlohmann::json::parse(slurp(dir / "result.json")));
  }
  const nlohmann::json& first = results[0]["kernel_choices"];
  const nlohmann::json& second = results[1]["kernel_choices"];
  ASSERT_TRUE(first.is_array());
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(first.size(), second.size());
  bool forward = false;
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i]["source"], "measured") << first[i].dump();
    EXPECT_EQ(second[i]["source"], "cached") << second[i].dump();
    EXPECT_EQ(first[i]["kernel"], second[i]["kernel"]);
    EXPECT_EQ(first[i]["variant"], second[i]["variant"]);
    forward = forward || first[i]["kernel"].get<std::string>().rfind("layernorm_forward d=64", 0) == 0;
  }
  EXPECT_TRUE(forward) << first.dump();
  EXPECT_EQ(results[0]["final_train_loss"], results[1]["final_train_loss"]);
  EXPECT_EQ(results[0]["final_val_loss"], results[1]["final_val_loss"]);
  EXPECT_TRUE(fs::exists(cache / "normlab" / "kernel-choices.json"));
  // A bad NORMLAB_TUNE is a one-line error, exit 2, before anything is written.
  o.env = {{"NORMLAB_TUNE", "always"}, {"XDG_CACHE_HOME", cache.string()}};
  const fs::path bad = fresh_dir("cli_tune_bad");
  fs::remove_all(bad);
  auto r = run_cli({"train", "--steps", "2", "--layers", "1", "--out", bad.string()}, o);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("NORMLAB_TUNE='always': expected off, cached or fresh"), std::string::npos) << describe(r);
  EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << describe(r);
}

TEST(TrainCli, BadInputIsOneLineExitTwoAndNoRunDirectory) {
  fs::path dir = fresh_dir("cli_bad");
  fs::path short_text = fs::path(testing::TempDir()) / "normlab_short.txt";
  std::ofstream(short_text) << "too short";
  fs::path bad_json = fs::path(testing::TempDir()) / "normlab_bad.json";
  std::ofstream(bad_json) << R"({"lerning_rate": 1})";
  std::vector<std::vector<std::string>> cases = {
      {"--layers", "0"},          {"--lr", "0"},          {"--lr", "-1"},
      {"--lr", "abc"},            {"--model", "gpt", "--heads", "5"}, {"--seq_len", "1"},
      {"--data", "text:/no/such/file.txt"}, {"--data", "text:" + short_text.string()},
      {"--config", bad_json.string()},      {"--config", "/no/such.json"},
      {"--norm", "batchnorm"},    {"--placement", "middle"}, {"--qk_norm", "maybe"},
  };
  for (auto args : cases) {
    args.insert(args.begin(), "train");
    args.push_back("--out");
    args.push_back(dir.string());
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << describe(r);
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << describe(r);
    EXPECT_FALSE(fs::exists(dir)) << describe(r);
  }
  auto r = run_cli({"train", "--config", bad_json.string()});
  EXPECT_NE(r.err.find("lerning_rate"), std::string::npos);
  EXPECT_NE(r.err.find("did you mean 'lr'"), std::string::npos) << r.err;
}

// A finished run leaves model.safetensors (PyTorch names, the config in its metadata); a run can
// start from it, and a checkpoint that does not fit the config is one line, exit 2, nothing written.
TEST(TrainCli, CheckpointAndInitFrom) {
  fs::path a = fresh_dir("ck_a"), b = fresh_dir("ck_b"), c = fresh_dir("ck_c");
  auto r = run_cli({"train", "--steps", "4", "--eval_every", "2", "--layers", "2", "--batch_size", "4", "--out",
                    a.string(), "--save_every", "2", "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  ASSERT_TRUE(fs::exists(a / "model.safetensors"));
  EXPECT_TRUE(fs::exists(a / "checkpoints" / "step-2.safetensors"));
  const std::string model = (a / "model.safetensors").string();
  r = run_cli({"train", "--steps", "2", "--eval_every", "2", "--layers", "2", "--batch_size", "4", "--init_from", model,
               "--out", b.string(), "--json", "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(slurp(b / "config.json").find(model), std::string::npos);
  r = run_cli({"train", "--steps", "2", "--layers", "3", "--init_from", model, "--out", c.string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("blocks.2.norm1.weight missing"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(c));
}
