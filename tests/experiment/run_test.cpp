// Run directories: determinism, divergence as a result, every norm x placement x model x data
// combination, and the config schema.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "normlab/about.h"
#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/run.h"
#include "normlab/train.h"

using namespace normlab;
namespace fs = std::filesystem;
using normlab::test::fresh_dir;
using normlab::test::slurp;

namespace {

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

TEST(TrainRun, SameConfigSameMetricsBitForBit) {
  TrainConfig c = tiny();
  c.model.norm = NormKind::rmsnorm;
  fs::path a = fresh_dir("det_a"), b = fresh_dir("det_b");
  RunOptions o;
  o.versions = provenance();
  o.dir = a.string();
  testing::internal::CaptureStdout();
  run_and_record(c, o);
  o.dir = b.string();
  run_and_record(c, o);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");  // printing is the cli's
  std::string ma = slurp(a / "metrics.jsonl"), mb = slurp(b / "metrics.jsonl");
  EXPECT_FALSE(ma.empty());
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(slurp(a / "config.json"), slurp(b / "config.json"));
  auto result = nlohmann::json::parse(slurp(a / "result.json"));
  EXPECT_EQ(result["status"], "collapsed");  // 6 steps learn nothing: finished, not diverged
  EXPECT_EQ(result["steps_done"], 6);
  EXPECT_TRUE(result["versions"].contains("onednn"));
  // The run was written under a temporary name (<dir>.partial.<pid>) that is gone now.
  for (const auto& e : fs::directory_iterator(a.parent_path()))
    EXPECT_EQ(e.path().filename().string().rfind(a.filename().string() + ".partial", 0), std::string::npos)
        << e.path();
}

// --steps 0 is the initial model: model.safetensors holds exactly the init the seed draws
// (scripts/torch_init_parity.py reads it), evaluated once at step 0, status ok (not "collapsed":
// it has not trained).
TEST(TrainRun, ZeroStepsWritesTheInitialModel) {
  TrainConfig c = tiny();
  c.steps = 0;
  c.seed = 7;
  const fs::path dir = fresh_dir("steps0");
  RunOptions o;
  o.versions = provenance();
  o.dir = dir.string();
  run_and_record(c, o);
  Model init(c.model, c.seed);
  const auto expected = model_state(init);
  const SafetensorsFile file = load_safetensors((dir / "model.safetensors").string());
  ASSERT_EQ(file.tensors.size(), expected.size());
  std::map<std::string, std::vector<double>> written;  // the file holds its tensors in name order
  for (const auto& [name, t] : file.tensors) written[name] = t.to_vector();
  for (const auto& [name, t] : expected) {
    ASSERT_TRUE(written.count(name)) << name;
    EXPECT_EQ(written[name], t.to_vector()) << name;
  }
  const auto result = nlohmann::json::parse(slurp(dir / "result.json"));
  EXPECT_EQ(result["status"], "ok") << result.dump();
  EXPECT_EQ(result["steps_done"], 0);
  EXPECT_TRUE(result["final_val_loss"].is_number()) << result.dump();
  // Nothing was trained: no train loss, no gradient norms (null, not a measured 0).
  EXPECT_TRUE(result["final_train_loss"].is_null()) << result.dump();
  const auto metrics = nlohmann::json::parse(slurp(dir / "metrics.jsonl"));
  EXPECT_EQ(metrics["step"], 0);
  EXPECT_TRUE(metrics["train_loss"].is_null()) << metrics.dump();
  EXPECT_TRUE(metrics["grad_norm"].is_null()) << metrics.dump();
  EXPECT_TRUE(metrics["block_grad_norm"].empty()) << metrics.dump();
  EXPECT_TRUE(metrics["val_loss"].is_number()) << metrics.dump();
  fs::remove_all(dir);
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
    for (ModelKind model : {ModelKind::toy, ModelKind::gpt})
      for (NormKind norm : {NormKind::none, NormKind::layernorm, NormKind::rmsnorm})
        for (Placement pl : {Placement::pre, Placement::post, Placement::sandwich, Placement::deepnorm}) {
          TrainConfig c = tiny();
          c.steps = 3;
          c.eval_every = 3;
          c.eval_batches = 1;
          c.data = DataSpec::parse(data);
          c.model.model = model;
          c.model.norm = norm;
          c.model.placement = pl;
          c.model.qk_norm = model == ModelKind::gpt && norm == NormKind::rmsnorm;
          if (data != "synthetic") c.model.vocab = 256;
          TrainResult r = train(c);
          SCOPED_TRACE(data + " " + to_string(model) + " " + to_string(norm) + " " + to_string(pl));
          EXPECT_TRUE(r.status == "ok" || r.status == "collapsed") << r.status;  // 3 steps: finished
          ASSERT_EQ(r.evals.size(), 1u);
          EXPECT_TRUE(std::isfinite(r.evals[0].val_loss));
          EXPECT_EQ(r.evals[0].stream_norm.size(), 2u);
          EXPECT_EQ(r.evals[0].block_grad_norm.size(), 2u);
          // Attention statistics per attention layer (gpt), none for the toy model's mixer.
          const size_t attn_layers = model == ModelKind::gpt ? 2u : 0u;
          ASSERT_EQ(r.evals[0].attn_entropy.size(), attn_layers);
          ASSERT_EQ(r.evals[0].attn_max_logit.size(), attn_layers);
          for (size_t l = 0; l < attn_layers; ++l) {
            EXPECT_GE(r.evals[0].attn_entropy[l], 0.0);
            EXPECT_LE(r.evals[0].attn_entropy[l], std::log(static_cast<double>(c.model.seq_len)));
            EXPECT_TRUE(std::isfinite(r.evals[0].attn_max_logit[l]));
          }
          const std::string line = eval_to_json_line(r.evals[0]);
          EXPECT_EQ(line.find("attn_entropy") != std::string::npos, model == ModelKind::gpt) << line;
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
  // Text data gets vocab 256 unless one is given.
  TrainConfig t = load_train_config("", {{"data", "text:x.txt"}});
  EXPECT_EQ(t.model.vocab, 256);
  t = load_train_config("", {{"data", "text:x.txt"}, {"vocab", "300"}});
  EXPECT_EQ(t.model.vocab, 300);
}


// ---- the destination changes while the run goes: the finished run is never lost and
// nothing that appeared at the destination is replaced.
namespace {

std::string partial_of(const fs::path& dir) { return dir.string() + ".partial." + std::to_string(getpid()); }

// Runs with `during` called once the run has started; returns the UsageError's message ("" if none).
std::string run_with(const fs::path& dir, bool force, const std::function<void()>& during) {
  RunOptions o;
  o.dir = dir.string();
  o.force = force;
  o.on_start = during;
  try {
    run_and_record(tiny(), o);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RunDestination, ADirectoryThatAppearsDuringTheRunIsKeptAndSoIsTheRun) {
  const fs::path dir = fresh_dir("appears");
  const std::string err = run_with(dir, false, [&] {
    fs::create_directories(dir);
    std::ofstream(dir / "theirs.txt") << "another run's or a person's file";
  });
  EXPECT_NE(err.find("appeared while this run was going"), std::string::npos) << err;
  EXPECT_NE(err.find("kept at " + partial_of(dir)), std::string::npos) << err;
  EXPECT_EQ(slurp(dir / "theirs.txt"), "another run's or a person's file");
  EXPECT_TRUE(is_run_directory(partial_of(dir)));
  EXPECT_TRUE(fs::exists(fs::path(partial_of(dir)) / "result.json"));
  fs::remove_all(partial_of(dir));
}

TEST(RunDestination, ADanglingSymlinkThatAppearsIsNotFollowedAndTheRunIsKept) {
  const fs::path dir = fresh_dir("symlink_appears");
  const std::string err = run_with(dir, false, [&] { fs::create_symlink("nowhere", dir); });
  EXPECT_NE(err.find("kept at"), std::string::npos) << err;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir)));
  EXPECT_TRUE(is_run_directory(partial_of(dir)));
  fs::remove(dir);
  fs::remove_all(partial_of(dir));
}

TEST(RunDestination, ForceReplacesOnlyTheRunDirectoryThatWasThereAtTheStart) {
  const fs::path dir = fresh_dir("force_swap");
  RunOptions o;
  o.dir = dir.string();
  run_and_record(tiny(), o);  // a run directory to replace
  ASSERT_TRUE(is_run_directory(dir.string()));
  // Replaced with --force: fine.
  EXPECT_EQ(run_with(dir, true, [] {}), "");
  EXPECT_TRUE(is_run_directory(dir.string()));
  // Swapped for a person's directory during the run: kept, and so is the run.
  const std::string err = run_with(dir, true, [&] {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "thesis.tex") << "mine";
  });
  EXPECT_NE(err.find("kept at"), std::string::npos) << err;
  EXPECT_EQ(slurp(dir / "thesis.tex"), "mine");
  EXPECT_TRUE(is_run_directory(partial_of(dir)));
  fs::remove_all(partial_of(dir));
}

TEST(RunDestination, ARecognizedRunDirectory) {
  const fs::path d = fresh_dir("recognize");
  fs::create_directories(d);
  EXPECT_FALSE(is_run_directory(d.string()));  // empty
  std::ofstream(d / "config.json") << "{}";
  std::ofstream(d / "result.json") << "{}";
  EXPECT_TRUE(is_run_directory(d.string()));  // a run from before the marker
  std::ofstream(d / kRunMarker) << "";
  EXPECT_TRUE(is_run_directory(d.string()));  // normlab wrote it (the marker)
  std::ofstream(d / "notes.txt") << "mine";
  EXPECT_FALSE(is_run_directory(d.string()));  // a person added a file: theirs too
  fs::remove(d / "notes.txt");
  fs::create_directory(d / "plots");
  EXPECT_FALSE(is_run_directory(d.string()));  // or a directory
  fs::remove_all(d);
}

TEST(TrainConfigKeys, EveryResolvedConfigReadsBack) {
  // Extreme but valid values are written as JSON that loads back to the same config.
  TrainConfig c = tiny();
  c.lr = 1e-300;
  c.adam_eps = 1e300;
  c.clip = 1.7976931348623157e308;
  c.weight_decay = 4.9e-324;
  c.seed = 18446744073709551615ull;
  c.model.norm_eps = 1e29;
  EXPECT_NO_THROW(validate_config(c));
  TrainConfig back;
  apply_config_json(back, config_to_json(c), "test");
  EXPECT_EQ(config_to_json(back), config_to_json(c));
}

// data_seed is written only when set, so every config from before it reads and hashes as it did.
TEST(TrainConfigKeys, DataSeedIsWrittenOnlyWhenSet) {
  TrainConfig c = tiny();
  const std::string unset = config_to_json(c);
  EXPECT_EQ(unset.find("data_seed"), std::string::npos) << unset;
  c.data_seed = 18446744073709551615ull;
  const std::string set = config_to_json(c);
  EXPECT_NE(set.find("\"data_seed\": 18446744073709551615"), std::string::npos) << set;
  TrainConfig back;
  apply_config_json(back, set, "test");
  ASSERT_TRUE(back.data_seed.has_value());
  EXPECT_EQ(*back.data_seed, 18446744073709551615ull);
  EXPECT_EQ(config_to_json(back), set);
  TrainConfig d;
  apply_config_json(d, R"({"data_seed": 7, "seed": 3})", "x.json");
  EXPECT_EQ(d.task_seed(), 7u);
  apply_config_json(d, R"({"data_seed": null})", "x.json");  // null: unset again
  EXPECT_FALSE(d.data_seed.has_value());
  EXPECT_EQ(d.task_seed(), 3u);
  EXPECT_THROW(apply_config_json(d, R"({"data_seed": -1})", "x.json"), UsageError);
  EXPECT_THROW(apply_config_json(d, R"({"data_seed": "one"})", "x.json"), UsageError);
  // Unset, the resolved config is the one written before the key existed.
  TrainConfig old;
  apply_config_json(old, unset, "resolved");
  EXPECT_FALSE(old.data_seed.has_value());
  EXPECT_EQ(config_to_json(old), unset);
}

// result.json and metrics.jsonl carry the resolution, the excess loss and the spikes.
TEST(TrainRun, ResultHoldsTheExcessLossSpikesAndPlateaus) {
  TrainConfig c = tiny();
  c.eval_batches = 4;
  const fs::path dir = fresh_dir("excess");
  RunOptions o;
  o.dir = dir.string();
  run_and_record(c, o);
  const auto result = nlohmann::json::parse(slurp(dir / "result.json"));
  for (const char* k : {"final_val_loss_se", "final_oracle_loss", "final_excess_loss", "final_excess_loss_se"})
    ASSERT_TRUE(result[k].is_number()) << k << ": " << result.dump();
  EXPECT_NEAR(result["final_excess_loss"].get<double>(),
              result["final_val_loss"].get<double>() - result["final_oracle_loss"].get<double>(), 1e-12);
  EXPECT_EQ(result["final_oracle_loss"].get<double>(), held_out_oracle_loss(c));
  EXPECT_EQ(result["val_tokens"], c.eval_batches * c.batch_size * c.model.seq_len);
  EXPECT_EQ(result["spike_count"], 0);  // 6 steps: none is judged
  EXPECT_TRUE(result["spike_steps"].is_array() && result["spike_steps"].empty()) << result.dump();
  EXPECT_NE(result["spike_rule"].get<std::string>().find("1.5 x the median of the 100 steps"), std::string::npos);
  EXPECT_TRUE(result["plateaus"].is_array()) << result.dump();
  for (const char* k : {"final_excess_loss", "final_excess_loss_se", "spike_count", "val_tokens"})
    EXPECT_NE(std::find(result_number_fields().begin(), result_number_fields().end(), k), result_number_fields().end()) << k;
  for (const std::string& line : normlab::test::split_lines(slurp(dir / "metrics.jsonl"))) {
    const auto m = nlohmann::json::parse(line);
    for (const char* k : {"val_loss_se", "val_oracle_loss", "excess_loss", "excess_loss_se"})
      EXPECT_TRUE(m[k].is_number()) << k << ": " << line;
  }
  // One held-out batch: no standard error (null, not a measured 0).
  c.eval_batches = 1;
  const fs::path one = fresh_dir("excess_one");
  o.dir = one.string();
  run_and_record(c, o);
  const auto r1 = nlohmann::json::parse(slurp(one / "result.json"));
  EXPECT_TRUE(r1["final_val_loss_se"].is_null()) << r1.dump();
  EXPECT_TRUE(r1["final_excess_loss_se"].is_null()) << r1.dump();
  EXPECT_TRUE(r1["final_excess_loss"].is_number()) << r1.dump();
  fs::remove_all(dir);
  fs::remove_all(one);
}

// A plateau that a run left is in result.json as [first, last] eval steps. Post-LN at lr 1e-2
// under torch init collapses (TrainStatus.PostLnAtHighLrUnderTorchInitCollapses); what matters
// here is that the writer copies TrainResult::plateaus as pairs.
TEST(TrainRun, PlateausAreWrittenAsStepPairs) {
  TrainResult r;
  r.status = "ok";
  r.plateaus = {{100, 300}, {500, 500}};
  r.spike_count = 120;
  r.spike_steps = {101, 250};
  const auto j = nlohmann::json::parse(result_to_json(tiny(), r, {}));
  EXPECT_EQ(j["plateaus"], nlohmann::json::parse("[[100, 300], [500, 500]]")) << j.dump();
  EXPECT_EQ(j["spike_count"], 120);
  EXPECT_EQ(j["spike_steps"], nlohmann::json::parse("[101, 250]"));
}

// precision and norm_compute are written only when set: an fp32 config reads and hashes as before.
TEST(ConfigPrecision, KeysAreWrittenOnlyWhenSet) {
  TrainConfig c;
  EXPECT_EQ(config_to_json(c).find("precision"), std::string::npos);
  EXPECT_EQ(config_to_json(c).find("norm_compute"), std::string::npos);
  c.precision = Precision::bf16;
  c.norm_compute = NormCompute::fused;
  const std::string text = config_to_json(c);
  EXPECT_NE(text.find("\"precision\": \"bf16\""), std::string::npos) << text;
  TrainConfig back;
  apply_config_json(back, text, "test");
  EXPECT_EQ(back.precision, Precision::bf16);
  EXPECT_EQ(back.norm_compute, NormCompute::fused);
  TrainConfig bad;
  EXPECT_THROW(apply_config_json(bad, R"({"precision": "fp8"})", "test"), UsageError);
}
