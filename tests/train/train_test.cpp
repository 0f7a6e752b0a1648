// Training: the lr schedule and the synthetic task and its floor.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/train.h"

using namespace normlab;

TEST(TrainSchedule, WarmupThenConstantOrCosine) {
  TrainConfig c;
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 50), 1.0);
  c.schedule = Schedule::cosine;
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


// A run that learned nothing, or lost what it learned, is "collapsed" from the first eval after
// which its validation loss stayed within 0.05 nats of the unigram baseline or above it.
TEST(TrainStatus, CollapseStepIsWhereTheLossStayedAtTheBaseline) {
  auto evals = [](std::vector<double> losses) {
    std::vector<EvalRecord> v;
    for (size_t i = 0; i < losses.size(); ++i) {
      EvalRecord r;
      r.step = int64_t(100 * (i + 1));
      r.val_loss = losses[i];
      v.push_back(r);
    }
    return v;
  };
  const double unigram = 4.09;
  EXPECT_EQ(collapse_step(evals({4.2, 4.1, 4.08}), unigram), 100);        // never learned
  EXPECT_EQ(collapse_step(evals({3.0, 1.0, 4.05, 4.2}), unigram), 300);   // learned, then lost it
  EXPECT_EQ(collapse_step(evals({4.2, 1.0, 4.05, 1.2}), unigram), -1);    // recovered: not collapsed
  EXPECT_EQ(collapse_step(evals({3.0, 4.03}), unigram), -1);              // 0.06 below: learned a little
  EXPECT_EQ(collapse_step({}, unigram), -1);
}

TEST(TrainStatus, GapToFloorIsTheFinalValidationLossAboveTheFloor) {
  TrainResult r;
  r.final_val_loss = 3.25;
  r.best_val_loss = 3.0;
  r.loss_floor = 2.0;
  EXPECT_EQ(r.gap_to_floor(), 1.25);
}

// Post-LN at lr 1e-2 under PyTorch's default init: the 12-layer toy model collapses to the unigram
// loss within 100 steps; the same model in Pre-LN learns.
TEST(TrainStatus, PostLnAtHighLrUnderTorchInitCollapses) {
  TrainConfig c;
  c.model.placement = Placement::post;
  c.model.init = InitScheme::torch;
  c.model.layers = 12;
  c.lr = 1e-2;
  c.steps = 100;
  c.eval_every = 50;
  c.eval_batches = 2;
  c.threads = 1;
  TrainResult r = train(c);
  EXPECT_EQ(r.status, "collapsed");
  EXPECT_EQ(r.collapsed_step, 50);
  EXPECT_GE(r.final_val_loss, r.unigram_loss - kCollapseMargin);
  c.model.placement = Placement::pre;
  c.lr = 1e-3;
  r = train(c);
  EXPECT_EQ(r.status, "ok");
  EXPECT_LT(r.final_val_loss, r.unigram_loss - 1.0);
}

// A run uses its own thread count and gives the caller's back (a fourth setter without the scope
// left the process at the run's count), and says which count it ran with.
TEST(TrainThreads, ARunRestoresTheCallersThreadCount) {
  ThreadCountScope caller(2);
  TrainConfig c;
  c.model.layers = 1;
  c.steps = 2;
  c.eval_every = 2;
  c.eval_batches = 1;
  c.threads = 1;
  const TrainResult r = train(c);
  EXPECT_EQ(r.threads, 1);
  EXPECT_EQ(num_threads(), 2);
}

// The attention statistics behind the QK-Norm table: uniform attention has entropy log(t+1) at
// position t, a key that dominates gives entropy near 0 and its logit is the largest.
TEST(TrainAttentionStats, UniformAndPeakedRowsByHand) {
  const int64_t b = 2, t = 5, h = 2, dh = 3, c = h * dh;
  AttentionTap tap{Tensor::zeros({b, t, c}), Tensor::zeros({b, t, c}), h};
  AttentionStats u = attention_statistics(tap);
  double expect = 0;
  for (int64_t i = 0; i < t; ++i) expect += std::log(static_cast<double>(i + 1));
  // Each row's entropy comes back in the activations' dtype (Backend::attention_logit_stats):
  // float32 here, so 6e-8 relative per row.
  EXPECT_NEAR(u.mean_entropy, expect / static_cast<double>(t), 1e-7 * expect / static_cast<double>(t));
  EXPECT_EQ(u.max_logit, 0.0);

  // Every query (1, 0, 0) in head 0; key 0 of batch row 0 is (L, 0, 0), the others 0: in head 0 of
  // row 0 every position attends almost only to key 0 (logit L/sqrt(3)).
  std::vector<double> q(static_cast<size_t>(b * t * c), 0.0), k(q.size(), 0.0);
  for (int64_t i = 0; i < b * t; ++i) q[static_cast<size_t>(i * c)] = 1.0;
  const double big = 60.0;
  k[0] = big;
  AttentionTap peaked{Tensor::from(q, {b, t, c}, DType::f64), Tensor::from(k, {b, t, c}, DType::f64), h};
  AttentionStats p = attention_statistics(peaked);
  EXPECT_NEAR(p.max_logit, big / std::sqrt(3.0), 1e-12);
  // Row 0 head 0: entropy ~0 at every t; every other (row, head) stays uniform.
  EXPECT_NEAR(p.mean_entropy, (3.0 / 4.0) * expect / static_cast<double>(t), 1e-6);
}
