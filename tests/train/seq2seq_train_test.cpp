// The sequence-to-sequence tasks (each target against its rule by hand, the floor against the
// oracle) and the encoder-decoder trained on them: to the floor, resumed bit for bit, per-layer
// statistics for both stacks, checkpoints by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "normlab/checkpoint.h"
#include "normlab/train.h"
#include "normlab/train_model.h"

using namespace normlab;

namespace {

std::vector<int32_t> row(const Tensor& t, int64_t r) {
  const int64_t n = t.size(1);
  return std::vector<int32_t>(t.data<int32_t>() + r * n, t.data<int32_t>() + (r + 1) * n);
}

TrainConfig encdec_config_for(DataKind task) {
  TrainConfig c;
  c.model.model = ModelKind::encdec;
  c.model.layers = 2;
  c.model.d_model = 32;
  c.model.d_hidden = 64;
  c.model.heads = 2;
  c.model.vocab = 11;
  c.model.seq_len = 6;
  c.data.kind = task;
  c.noise = 0.0;
  c.lr = 3e-3;
  c.warmup_steps = 20;
  c.batch_size = 16;
  c.steps = 400;
  c.eval_every = 200;
  c.eval_batches = 4;
  c.threads = 1;
  return c;
}

}  // namespace

TEST(Seq2SeqData, EachTaskIsItsRuleWithTheStartTokenFirst) {
  const int64_t V = 9, T = 7;
  for (DataKind task : {DataKind::copy, DataKind::reverse, DataKind::translate}) {
    auto data = make_seq2seq({task, V, 0.0, 4});
    Rng rng(1, stream::data);
    const Batch b = data->train_batch(rng, 5, T);
    ASSERT_TRUE(b.sources.defined());
    std::vector<int32_t> mapping(V - 1, -1);  // translate: the one map every position shares
    for (int64_t r = 0; r < 5; ++r) {
      const auto src = row(b.sources, r), tg = row(b.targets, r), in = row(b.inputs, r);
      EXPECT_EQ(in[0], V - 1) << "the start token";
      for (int64_t t = 1; t < T; ++t) EXPECT_EQ(in[t], tg[t - 1]) << "the decoder's input is the target shifted";
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_GE(src[t], 0);
        ASSERT_LT(src[t], V - 1);
        if (task == DataKind::copy) {
          EXPECT_EQ(tg[t], src[t]);
        }
        if (task == DataKind::reverse) {
          EXPECT_EQ(tg[t], src[T - 1 - t]);
        }
        if (task == DataKind::translate) {
          // Windows {0,1,2} {3,4,5} {6}: position t reads the mirror of t in its window.
          const int64_t from = t < 6 ? (t / 3) * 3 + 2 - t % 3 : 6;
          int32_t& m = mapping[static_cast<size_t>(src[from])];
          if (m < 0) m = tg[t];
          EXPECT_EQ(tg[t], m) << "a token maps to one token wherever it is";
        }
      }
    }
    EXPECT_EQ(data->loss_floor(T), 0.0);
    EXPECT_EQ(data->oracle_loss(b), 0.0) << to_string(task);
  }
}

TEST(Seq2SeqData, TheOracleMeetsTheFloorUnderNoise) {
  auto data = make_seq2seq({DataKind::translate, 12, 0.2, 3});
  const double r = 11, p = 0.2, q = 1 - p + p / r;
  EXPECT_NEAR(data->loss_floor(8), -q * std::log(q) - (r - 1) * (p / r) * std::log(p / r), 1e-15);
  EXPECT_NEAR(data->unigram_loss(), std::log(r), 1e-15);
  double sum = 0;
  const int n = 200;
  for (int i = 0; i < n; ++i) sum += data->oracle_loss(data->val_batch(i, 32, 8));
  EXPECT_NEAR(sum / n, data->loss_floor(8), 0.01);
  // The held-out batches are a function of the seed and the index alone.
  EXPECT_EQ(row(data->val_batch(3, 4, 8).targets, 2), row(make_seq2seq({DataKind::translate, 12, 0.2, 3})->val_batch(3, 4, 8).targets, 2));
}

TEST(Seq2SeqConfig, TheModelAndTheDataGoTogether) {
  TrainConfig c = encdec_config_for(DataKind::copy);
  EXPECT_NO_THROW(c.validate());
  c.data.kind = DataKind::synthetic;
  EXPECT_THROW(c.validate(), UsageError);
  c = encdec_config_for(DataKind::reverse);
  c.model.model = ModelKind::gpt;
  EXPECT_THROW(c.validate(), UsageError);
  c = encdec_config_for(DataKind::copy);
  c.model.vocab = 2;
  EXPECT_THROW(c.validate(), UsageError);
  c = encdec_config_for(DataKind::copy);
  c.precision = Precision::bf16;
  EXPECT_THROW(c.validate(), UsageError);
  c = encdec_config_for(DataKind::copy);
  c.model.placement = Placement::mixln;
  EXPECT_THROW(c.validate(), UsageError);
  TrainConfig gpt;
  gpt.model.model = ModelKind::gpt;
  gpt.model.encoder_layers = 3;
  EXPECT_THROW(gpt.validate(), UsageError) << "encoder_layers belongs to model encdec";
}

// Every task to its floor (noise 0: a loss near 0), Post-LN and Pre-LN, with the per-layer figures
// of the encoder's layers and then the decoder's.
TEST(EncDecTrain, EachTaskTrainsToItsFloor) {
  for (DataKind task : {DataKind::copy, DataKind::reverse, DataKind::translate}) {
    TrainConfig c = encdec_config_for(task);
    c.model.encoder_layers = 2;
    c.model.decoder_layers = 1;
    const TrainResult r = train(c);
    ASSERT_EQ(r.status, "ok") << to_string(task);
    EXPECT_LT(r.final_val_loss, 0.1) << to_string(task) << ": unigram " << r.unigram_loss;
    EXPECT_NEAR(r.evals.back().excess_loss, r.final_val_loss, 1e-12) << "the oracle's loss is 0";
    ASSERT_EQ(r.evals.back().stream_norm.size(), 3u) << "2 encoder layers, then 1 decoder layer";
    ASSERT_EQ(r.evals.back().block_grad_norm.size(), 3u);
    for (double g : r.evals.back().block_grad_norm) EXPECT_GT(g, 0);
  }
}

TEST(EncDecTrain, AResumedRunIsTheOneThatNeverStopped) {
  TrainConfig c = encdec_config_for(DataKind::translate);
  c.steps = 40;
  c.eval_every = 20;
  c.model.placement = Placement::post;
  c.dropout = 0.1;
  TrainState at20;
  std::string weights = ::testing::TempDir() + "/encdec_resume.safetensors";
  TrainHooks hooks;
  hooks.checkpoint_every = 20;
  hooks.on_checkpoint = [&](int64_t step, TrainModel& model, const TrainState& st) {
    if (step != 20) return;
    save_safetensors(weights, model_state(model), {});
    at20 = st;
  };
  const TrainResult whole = train(c, hooks);
  ResumePoint point{weights, at20};
  const TrainResult resumed = train(c, TrainHooks{}, &point);
  ASSERT_EQ(whole.evals.size(), resumed.evals.size());
  EXPECT_EQ(whole.final_val_loss, resumed.final_val_loss);
  EXPECT_EQ(whole.final_train_loss, resumed.final_train_loss);
}

TEST(EncDecCheckpoint, ParametersAreNamedByStackAndLayer) {
  TrainConfig c = encdec_config_for(DataKind::copy);
  c.model.shared_embeddings = false;
  c.model.tie_embeddings = true;
  auto model = make_train_model(c.model, 0);
  std::vector<std::string> names;
  for (const auto& [name, t] : model_state(*model)) names.push_back(name);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("src_emb.weight"));
  EXPECT_TRUE(has("tgt_emb.weight"));
  EXPECT_FALSE(has("head.weight")) << "tied: the head is the target embedding";
  EXPECT_TRUE(has("encoder.1.attn.q.weight"));
  EXPECT_TRUE(has("decoder.0.cross_attn.k.weight"));
  EXPECT_TRUE(has("decoder.final_norm.weight"));
  // A checkpoint of another shape is refused by name.
  TrainConfig other = c;
  other.model.decoder_layers = 3;
  auto deeper = make_train_model(other.model, 0);
  const std::string path = ::testing::TempDir() + "/encdec_names.safetensors";
  save_safetensors(path, model_state(*model), {});
  EXPECT_THROW(load_model_state(*deeper, load_safetensors(path), path), UsageError);
}
