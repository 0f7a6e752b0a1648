// Training: schedule, the synthetic task and its floor, determinism, divergence, every
// norm x placement x model x data combination, and the train CLI's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_util.h"
#include "normlab/config.h"
#include "normlab/run.h"
#include "normlab/train.h"

using namespace normlab;
namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::run_cli;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fresh_dir(const std::string& name) {
  fs::path p = fs::path(testing::TempDir()) / ("normlab_" + name);
  fs::remove_all(p);
  return p;
}

TrainConfig tiny() {
  TrainConfig c;
  c.model.layers = 2;
  c.model.d_model = 16;
  c.model.d_hidden = 32;
  c.model.heads = 2;
  c.batch_size = 4;
  c.steps = 6;
  c.eval_every = 3;
  c.eval_batches = 2;
  c.threads = 1;
  return c;
}

const std::string kText = std::string(NORMLAB_SOURCE_DIR) + "/experiments/data/tiny.txt";

}  // namespace

TEST(TrainSchedule, WarmupThenConstantOrCosine) {
  TrainConfig c;
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 50), 1.0);
  c.schedule = "cosine";
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_NEAR(learning_rate(c, 60), 0.5, 1e-12);
  EXPECT_NEAR(learning_rate(c, 110), 0.0, 1e-12);
}

// The floor is the cross-entropy of the true conditional distribution. Score an oracle that
// knows the topic permutations (recovered from the data: the most frequent successor of each
// (topic, token) pair) and check it reaches the analytic floor within sampling error.
TEST(TrainData, SyntheticFloorMatchesAnOracle) {
  SyntheticSpec spec{64, 4, 0.1, 3};
  auto data = make_synthetic(spec);
  const int64_t T = 16, R = 60;
  Rng rng(1, stream::data);
  std::vector<std::vector<std::vector<int>>> counts(4, std::vector<std::vector<int>>(R, std::vector<int>(R, 0)));
  for (int i = 0; i < 200; ++i) {
    Batch b = data->train_batch(rng, 32, T);
    auto in = b.inputs.to_vector(), tg = b.targets.to_vector();
    for (int64_t s = 0; s < 32; ++s) {
      int z = static_cast<int>(in[s * T]) - R;
      ASSERT_GE(z, 0);
      for (int64_t t = 1; t < T; ++t) counts[z][static_cast<int>(in[s * T + t])][static_cast<int>(tg[s * T + t])]++;
    }
  }
  const double p = 0.1, q = 1 - p + p / R;
  double total = 0;
  int64_t n = 0;
  Rng rng2(2, stream::data);
  for (int i = 0; i < 50; ++i) {
    Batch b = data->train_batch(rng2, 32, T);
    auto in = b.inputs.to_vector(), tg = b.targets.to_vector();
    for (int64_t s = 0; s < 32; ++s) {
      int z = static_cast<int>(in[s * T]) - R;
      total += std::log(static_cast<double>(R));  // first target: uniform
      ++n;
      for (int64_t t = 1; t < T; ++t) {
        auto& row = counts[z][static_cast<int>(in[s * T + t])];
        int rule = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
        total += static_cast<int>(tg[s * T + t]) == rule ? -std::log(q) : -std::log(p / R);
        ++n;
      }
    }
  }
  EXPECT_NEAR(total / static_cast<double>(n), data->loss_floor(T), 0.03);
  EXPECT_NEAR(data->unigram_loss(), std::log(60.0), 1e-12);
  // Validation batches are fixed.
  EXPECT_EQ(data->val_batch(3, 2, T).inputs.to_vector(), data->val_batch(3, 2, T).inputs.to_vector());
}

TEST(TrainRun, SameConfigSameMetricsBitForBit) {
  TrainConfig c = tiny();
  c.model.norm = NormKind::rmsnorm;
  fs::path a = fresh_dir("det_a"), b = fresh_dir("det_b");
  RunOptions o;
  o.print_table = false;
  o.dir = a.string();
  testing::internal::CaptureStdout();
  run_and_record(c, o);
  o.dir = b.string();
  run_and_record(c, o);
  testing::internal::GetCapturedStdout();
  std::string ma = slurp(a / "metrics.jsonl"), mb = slurp(b / "metrics.jsonl");
  EXPECT_FALSE(ma.empty());
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(slurp(a / "config.json"), slurp(b / "config.json"));
  auto result = nlohmann::json::parse(slurp(a / "result.json"));
  EXPECT_EQ(result["status"], "ok");
  EXPECT_EQ(result["steps_done"], 6);
  EXPECT_TRUE(result["versions"].contains("onednn"));
  EXPECT_FALSE(fs::exists(a.string() + ".partial"));
}

TEST(TrainRun, DivergenceIsAResult) {
  TrainConfig c = tiny();
  c.model.norm = NormKind::none;
  c.lr = 1e6;
  c.steps = 50;
  c.eval_every = 25;
  TrainResult r = train(c);
  EXPECT_EQ(r.status, "diverged");
  EXPECT_GE(r.diverged_step, 1);
  EXPECT_LE(r.diverged_step, 50);
  EXPECT_FALSE(r.evals.empty());
}

TEST(TrainRun, EveryNormPlacementModelAndDataTrains) {
  for (std::string data : {std::string("synthetic"), "text:" + kText})
    for (std::string model : {"toy", "gpt"})
      for (NormKind norm : {NormKind::none, NormKind::layernorm, NormKind::rmsnorm})
        for (Placement pl : {Placement::pre, Placement::post, Placement::sandwich, Placement::deepnorm}) {
          TrainConfig c = tiny();
          c.steps = 3;
          c.eval_every = 3;
          c.eval_batches = 1;
          c.data = data;
          c.model.model = model;
          c.model.norm = norm;
          c.model.placement = pl;
          c.model.qk_norm = model == "gpt" && norm == NormKind::rmsnorm;
          if (data != "synthetic") c.model.vocab = 256;
          TrainResult r = train(c);
          SCOPED_TRACE(data + " " + model + " " + to_string(norm) + " " + to_string(pl));
          EXPECT_EQ(r.status, "ok");
          ASSERT_EQ(r.evals.size(), 1u);
          EXPECT_TRUE(std::isfinite(r.evals[0].val_loss));
          EXPECT_EQ(r.evals[0].stream_norm.size(), 2u);
          EXPECT_EQ(r.evals[0].block_grad_norm.size(), 2u);
        }
}

TEST(TrainRun, LearnsBelowUnigramQuickly) {
  TrainConfig c;
  c.model.layers = 4;
  c.model.norm = NormKind::rmsnorm;
  c.lr = 3e-3;
  c.steps = 200;
  c.eval_every = 200;
  c.threads = 1;
  TrainResult r = train(c);
  EXPECT_LT(r.final_val_loss, r.unigram_loss - 1.0);
  EXPECT_GT(r.final_val_loss, r.loss_floor - 0.05);
}

TEST(TrainConfigKeys, UnknownKeySuggestsTheClosest) {
  TrainConfig c;
  try {
    apply_config_json(c, R"({"lerning_rate": 0.1})", "x.json");
    FAIL();
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("lerning_rate"), std::string::npos) << m;
  }
  try {
    apply_config_json(c, R"({"layer": 3})", "x.json");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'layers'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(apply_config_json(c, R"({"lr": "fast"})", "x.json"), UsageError);
  EXPECT_THROW(apply_config_json(c, R"({"layers": 2.5})", "x.json"), UsageError);
  EXPECT_THROW(apply_config_json(c, R"([1, 2])", "x.json"), UsageError);
  EXPECT_THROW(apply_config_json(c, R"({"lr": )", "x.json"), UsageError);
  apply_config_json(c, R"({"lr": 0.01, "norm": "rmsnorm", "qk_norm": true, "model": "gpt"})", "x.json");
  EXPECT_DOUBLE_EQ(c.lr, 0.01);
  EXPECT_EQ(c.model.norm, NormKind::rmsnorm);
  // The resolved config reads back to the same config.
  TrainConfig d;
  apply_config_json(d, config_to_json(c), "resolved");
  EXPECT_EQ(config_to_json(d), config_to_json(c));
}

TEST(TrainCli, TrainsAndWritesTheRunDirectory) {
  fs::path dir = fresh_dir("cli_run");
  auto r = run_cli({"train", "--steps", "4", "--eval_every", "2", "--layers", "2", "--batch_size", "4", "--out",
                    dir.string(), "--json", "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["status"], "ok");
  for (const char* f : {"config.json", "metrics.jsonl", "result.json", "timing.jsonl"}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_EQ(normlab::test::split_lines(slurp(dir / "metrics.jsonl")).size(), 2u);
  // An existing directory is not replaced without --force.
  r = run_cli({"train", "--steps", "2", "--out", dir.string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  // Flags override the config file; text data gets vocab 256 unless one is given.
  TrainConfig t = load_train_config("", {{"data", "text:x.txt"}});
  EXPECT_EQ(t.model.vocab, 256);
  t = load_train_config("", {{"data", "text:x.txt"}, {"vocab", "300"}});
  EXPECT_EQ(t.model.vocab, 300);
  fs::path cfg = fs::path(testing::TempDir()) / "normlab_cfg.json";
  std::ofstream(cfg) << R"({"layers": 3, "steps": 2, "eval_every": 2, "batch_size": 2, "lr": 0.5})";
  r = run_cli({"train", "--config", cfg.string(), "--lr", "0.25", "--out", dir.string(), "--force", "--json", "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto resolved = nlohmann::json::parse(slurp(dir / "config.json"));
  EXPECT_EQ(resolved["layers"], 3);
  EXPECT_DOUBLE_EQ(resolved["lr"].get<double>(), 0.25);
  EXPECT_EQ(resolved["d_model"], 64);  // defaults are filled in
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
