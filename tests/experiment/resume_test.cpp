// `train --resume`: a run stopped after a checkpoint and continued ends with the same
// files, byte for byte, as one that never stopped; what cannot be resumed is refused by name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "normlab/checkpoint.h"
#include "normlab/error.h"
#include "normlab/run.h"
#include "normlab/train.h"

using namespace normlab;
namespace fs = std::filesystem;
using normlab::test::fresh_dir;
using normlab::test::slurp;

namespace {

TrainConfig small(ModelKind model) {
  TrainConfig c;
  c.model.model = model;
  c.model.layers = 2;
  c.model.d_model = 16;
  c.model.d_hidden = 32;
  c.model.heads = 2;
  c.model.norm = NormKind::layernorm;
  c.batch_size = 4;
  c.steps = 13;  // the last eval is not on the eval_every grid
  c.eval_every = 3;
  c.eval_batches = 2;
  c.threads = 1;
  // Every piece of the loop's state matters: warm-up and cosine (the step), AdamW's moments and
  // decay, the data stream.
  c.optimizer = OptimizerKind::adamw;
  c.weight_decay = 0.1;
  c.warmup_steps = 4;
  c.schedule = Schedule::cosine;
  c.lr = 3e-3;
  return c;
}

std::string partial_of(const fs::path& dir) { return dir.string() + ".partial." + std::to_string(getpid()); }

// Runs cfg into dir and stops it after step `stop_after` (the interrupt is seen at the next step),
// as Ctrl-C does; returns the Interrupted message.
std::string run_and_stop(const TrainConfig& cfg, const fs::path& dir, int64_t save_every, int64_t stop_after) {
  volatile std::sig_atomic_t flag = 0;
  RunOptions o;
  o.dir = dir.string();
  o.save_every = save_every;
  o.interrupt = &flag;
  o.on_step = [&](int64_t step, double) {
    if (step == stop_after) flag = SIGINT;
  };
  try {
    run_and_record(cfg, o);
  } catch (const Interrupted& e) {
    return e.what();
  }
  ADD_FAILURE() << "the run was not interrupted";
  return "";
}

// The result without its wall-clock fields.
nlohmann::json result_without_timing(const fs::path& dir) {
  auto j = nlohmann::json::parse(slurp(dir / "result.json"));
  j.erase("timing");
  return j;
}

// moved_away: the stopped run's partial directory is renamed as if another process (gone now)
// had written it, so the resume takes it over by a rename; else it is this process's own.
void expect_resume_is_exact(ModelKind model, int64_t save_every, int64_t stop_after, int64_t resumed_at,
                            bool moved_away) {
  const TrainConfig cfg = small(model);
  const fs::path whole = fresh_dir("resume_whole"), stopped = fresh_dir("resume_stopped");
  RunOptions o;
  o.dir = whole.string();
  o.save_every = save_every;
  run_and_record(cfg, o);

  const std::string msg = run_and_stop(cfg, stopped, save_every, stop_after);
  EXPECT_NE(msg.find("checkpoint at step " + std::to_string(resumed_at)), std::string::npos) << msg;
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
  ASSERT_FALSE(fs::exists(stopped));
  ASSERT_TRUE(fs::is_directory(partial_of(stopped)));

  std::string partial = partial_of(stopped);
  if (moved_away) {
    partial = stopped.string() + ".partial.999999999";  // no such process
    fs::rename(partial_of(stopped), partial);
  }
  ResumableRun r = find_resumable(stopped.string());  // by the run's name: finds its partial directory
  EXPECT_EQ(r.partial, partial);
  EXPECT_EQ(r.point.state.step, resumed_at);
  EXPECT_EQ(r.save_every, save_every);
  RunOptions ro;
  ro.dir = r.dir;
  ro.save_every = r.save_every;
  ro.resume = &r;
  std::vector<int64_t> told;
  ro.on_eval = [&](const EvalRecord& e) { told.push_back(e.step); };
  run_and_record(r.config, ro);

  EXPECT_FALSE(fs::exists(partial_of(stopped)));
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_EQ(told, (std::vector<int64_t>{3, 6, 9, 12, 13}));  // the loss table is whole
  EXPECT_EQ(slurp(stopped / "metrics.jsonl"), slurp(whole / "metrics.jsonl"));
  EXPECT_TRUE(slurp(stopped / "model.safetensors") == slurp(whole / "model.safetensors"));  // binary: no dump
  EXPECT_EQ(slurp(stopped / "config.json"), slurp(whole / "config.json"));
  EXPECT_EQ(result_without_timing(stopped), result_without_timing(whole));
  EXPECT_EQ(normlab::test::split_lines(slurp(stopped / "timing.jsonl")).size(), 5u);
  for (int64_t s = save_every; s < cfg.steps; s += save_every) {
    const std::string name = "checkpoints/step-" + std::to_string(s);
    EXPECT_TRUE(slurp(stopped / (name + ".safetensors")) == slurp(whole / (name + ".safetensors"))) << name;
    // The states differ only in the evals' wall-clock fields.
    const TrainState a = load_train_state((stopped / (name + ".state.safetensors")).string());
    const TrainState b = load_train_state((whole / (name + ".state.safetensors")).string());
    EXPECT_EQ(a.step, b.step);
    EXPECT_TRUE(a.adam_m.to_vector() == b.adam_m.to_vector()) << name;
    EXPECT_TRUE(a.adam_v.to_vector() == b.adam_v.to_vector()) << name;
    EXPECT_EQ(a.data_rng.state, b.data_rng.state);
    EXPECT_EQ(a.train_loss_sum, b.train_loss_sum);
    EXPECT_EQ(a.train_loss_count, b.train_loss_count);
    // The spike counter's window and counts continue where they were: a resumed run counts the
    // spikes the uninterrupted one counts.
    EXPECT_EQ(a.recent_losses, b.recent_losses) << name;
    EXPECT_EQ(a.recent_losses.size(), static_cast<size_t>(std::min<int64_t>(s, kSpikeWindow))) << name;
    EXPECT_EQ(a.spike_count, b.spike_count) << name;
    EXPECT_EQ(a.spike_steps, b.spike_steps) << name;
    ASSERT_EQ(a.evals.size(), b.evals.size());
    for (size_t i = 0; i < a.evals.size(); ++i) EXPECT_EQ(eval_to_json_line(a.evals[i]), eval_to_json_line(b.evals[i]));
  }
  EXPECT_TRUE(is_run_directory(stopped.string()));
  fs::remove_all(whole);
  fs::remove_all(stopped);
}

}  // namespace

TEST(Resume, ToyStoppedBetweenCheckpointsByAnotherProcessEndsBitForBitAsTheWholeRun) {
  expect_resume_is_exact(ModelKind::toy, 4, 10, 8, true);  // stopped at 11, resumed from 8: steps 9-10 done again
}

TEST(Resume, GptStoppedRightAfterACheckpointOnAnEvalStep) {
  expect_resume_is_exact(ModelKind::gpt, 3, 6, 6, false);  // the checkpoint at 6 comes after the eval at 6
}

TEST(Resume, ARunStoppedBeforeItsFirstCheckpointIsRemovedAsBefore) {
  const fs::path dir = fresh_dir("resume_early");
  const std::string msg = run_and_stop(small(ModelKind::toy), dir, 8, 3);
  EXPECT_NE(msg.find("was removed"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(partial_of(dir)));
  try {
    find_resumable(dir.string());
    ADD_FAILURE() << "resumed a run that saved nothing";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no stopped run of"), std::string::npos) << e.what();
  }
}

namespace {
std::string resume_error(const std::string& path) {
  try {
    find_resumable(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Resume, WhatCannotBeResumedIsRefusedByName) {
  const TrainConfig cfg = small(ModelKind::toy);
  const fs::path finished = fresh_dir("resume_finished");
  RunOptions o;
  o.dir = finished.string();
  run_and_record(cfg, o);
  EXPECT_NE(resume_error(finished.string()).find("is finished"), std::string::npos);

  const fs::path dir = fresh_dir("resume_bad");
  run_and_stop(cfg, dir, 4, 5);
  const fs::path partial = partial_of(dir);
  const fs::path state = partial / "checkpoints" / "step-4.state.safetensors";
  const std::string good = slurp(state);

  // A damaged state file: named, never a crash.
  std::ofstream(state, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() / 2);
  std::string err = resume_error(partial.string());
  EXPECT_NE(err.find("step-4.state.safetensors"), std::string::npos) << err;

  // A model checkpoint that is not a training state.
  fs::copy_file(partial / "checkpoints" / "step-4.safetensors", state, fs::copy_options::overwrite_existing);
  err = resume_error(partial.string());
  EXPECT_NE(err.find("not a training state"), std::string::npos) << err;

  // No checkpoint pair at all.
  fs::remove(state);
  err = resume_error(partial.string());
  EXPECT_NE(err.find("no checkpoint to continue from"), std::string::npos) << err;

  // A directory someone else wrote.
  const fs::path theirs = fresh_dir("resume_theirs");
  fs::create_directories(theirs.string() + ".partial.1");
  std::ofstream(theirs.string() + ".partial.1/notes.txt") << "mine";
  err = resume_error(theirs.string() + ".partial.1");
  EXPECT_NE(err.find("not a normlab run directory"), std::string::npos) << err;
  EXPECT_EQ(slurp(theirs.string() + ".partial.1/notes.txt"), "mine");

  fs::remove_all(finished);
  fs::remove_all(partial);
  fs::remove_all(theirs.string() + ".partial.1");
}

TEST(Resume, TrainStateRoundTripsExactly) {
  TrainState st;
  st.step = 7;
  st.adam_m = Tensor::from({1e-30, -2.5, 3.0}, {3});
  st.adam_v = Tensor::from({0.0, 1e-8, 7.0}, {3});
  st.data_rng = {0xdeadbeefcafef00dULL, 0x123456789abcdef1ULL, true, -0.1234567890123456789};
  st.train_loss_sum = 1.0 / 3.0;
  st.train_loss_count = 1;
  EvalRecord r;
  r.step = 6;
  r.lr = 3e-3 * 0.7;
  r.train_loss = std::nan("");
  r.val_loss = INFINITY;
  r.grad_norm = 0.1 + 0.2;
  r.stream_norm = {1.0 / 7.0, 2.0};
  r.block_grad_norm = {-0.0};
  st.evals.push_back(r);
  const fs::path dir = fresh_dir("state_roundtrip");
  fs::create_directories(dir);
  save_train_state((dir / "s.safetensors").string(), st, {{"save_every", "3"}});
  std::map<std::string, std::string> meta;
  TrainState back = load_train_state((dir / "s.safetensors").string(), &meta);
  EXPECT_EQ(meta["save_every"], "3");
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.adam_m.to_vector(), st.adam_m.to_vector());
  EXPECT_EQ(back.adam_v.to_vector(), st.adam_v.to_vector());
  EXPECT_EQ(back.data_rng.state, st.data_rng.state);
  EXPECT_EQ(back.data_rng.inc, st.data_rng.inc);
  EXPECT_EQ(back.data_rng.has_spare, true);
  EXPECT_EQ(back.data_rng.spare, st.data_rng.spare);
  EXPECT_EQ(back.train_loss_sum, st.train_loss_sum);
  ASSERT_EQ(back.evals.size(), 1u);
  EXPECT_TRUE(std::isnan(back.evals[0].train_loss));
  EXPECT_EQ(back.evals[0].val_loss, INFINITY);
  EXPECT_EQ(back.evals[0].grad_norm, r.grad_norm);
  EXPECT_EQ(back.evals[0].lr, r.lr);
  EXPECT_EQ(back.evals[0].stream_norm, r.stream_norm);
  EXPECT_TRUE(std::signbit(back.evals[0].block_grad_norm[0]));
  fs::remove_all(dir);
}

// The spike counter's state and the evals' standard errors and excess loss survive a state file;
// a state written before they existed still loads, with counting restarted.
TEST(Resume, TrainStateKeepsTheSpikeCounterAndTheExcessLoss) {
  TrainState st;
  st.step = 130;
  st.adam_m = Tensor::from({1.0, 2.0}, {2});
  st.adam_v = Tensor::from({3.0, 4.0}, {2});
  st.recent_losses = {1.0 / 3.0, 4.25, 1e-300};
  st.spike_count = 101;
  st.spike_steps = {101, 117, 129};
  EvalRecord r;
  r.step = 120;
  r.val_loss = 3.5;
  r.val_loss_se = 0.1 / 3.0;
  r.val_oracle_loss = 0.9331121027541021;
  r.excess_loss = 3.5 - 0.9331121027541021;
  r.excess_loss_se = std::nan("");
  st.evals.push_back(r);
  const fs::path dir = fresh_dir("state_spikes");
  fs::create_directories(dir);
  const std::string path = (dir / "s.safetensors").string();
  save_train_state(path, st, {});
  TrainState back = load_train_state(path);
  EXPECT_EQ(back.recent_losses, st.recent_losses);
  EXPECT_EQ(back.spike_count, 101);
  EXPECT_EQ(back.spike_steps, st.spike_steps);
  ASSERT_EQ(back.evals.size(), 1u);
  EXPECT_EQ(back.evals[0].val_loss_se, r.val_loss_se);
  EXPECT_EQ(back.evals[0].val_oracle_loss, r.val_oracle_loss);
  EXPECT_EQ(back.evals[0].excess_loss, r.excess_loss);
  EXPECT_TRUE(std::isnan(back.evals[0].excess_loss_se));

  // The same file as a state from before: no counter keys, evals without the four fields.
  SafetensorsFile f = load_safetensors(path);
  for (const char* k : {"recent_losses", "spike_count", "spike_steps"}) ASSERT_EQ(f.metadata.erase(k), 1u) << k;
  nlohmann::json evals = nlohmann::json::parse(f.metadata.at("evals"));
  for (auto& e : evals)
    for (const char* k : {"val_loss_se", "val_oracle_loss", "excess_loss", "excess_loss_se"}) ASSERT_EQ(e.erase(k), 1u) << k;
  f.metadata["evals"] = evals.dump();
  const std::string old_path = (dir / "old.safetensors").string();
  save_safetensors(old_path, f.tensors, f.metadata);
  TrainState old = load_train_state(old_path);
  EXPECT_EQ(old.step, 130);
  EXPECT_TRUE(old.recent_losses.empty());
  EXPECT_EQ(old.spike_count, 0);
  EXPECT_TRUE(old.spike_steps.empty());
  ASSERT_EQ(old.evals.size(), 1u);
  EXPECT_EQ(old.evals[0].val_loss, 3.5);
  EXPECT_TRUE(std::isnan(old.evals[0].val_loss_se));
  EXPECT_TRUE(std::isnan(old.evals[0].val_oracle_loss));
  EXPECT_TRUE(std::isnan(old.evals[0].excess_loss));

  // A damaged counter is named, never a crash.
  f.metadata["recent_losses"] = "[\"0x1p+0\"]";
  f.metadata["spike_count"] = "2";
  f.metadata["spike_steps"] = "[101, \"x\"]";
  save_safetensors(old_path, f.tensors, f.metadata);
  try {
    load_train_state(old_path);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("spike_steps"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
