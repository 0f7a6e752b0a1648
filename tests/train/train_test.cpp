// Training: the lr schedule, the synthetic task, its floor and its oracle, the evals' standard errors,
// plateaus, collapse and loss spikes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/checkpoint.h"
#include "normlab/stats.h"
#include "normlab/train.h"
#include "normlab/train_model.h"

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
  // Each row's entropy comes back in the activations' dtype (the AttentionLogitStats kernel):
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

// ---- the oracle's loss on a batch ----------------------------------------------------------------

// Averaged over many held-out batches, the oracle's loss is the floor's estimate: within four
// standard errors of the per-batch means.
TEST(TrainOracle, MeanOverManyBatchesApproachesTheFloor) {
  auto data = make_synthetic({64, 4, 0.1, 3});
  const int64_t T = 16;
  std::vector<double> per_batch;
  for (int64_t i = 0; i < 400; ++i) per_batch.push_back(data->oracle_loss(data->val_batch(i, 32, T)));
  const double se = sample_std(per_batch) / std::sqrt(static_cast<double>(per_batch.size()));
  ASSERT_GT(se, 0.0);
  EXPECT_NEAR(mean(per_batch), data->loss_floor(T), 4 * se) << "se " << se;
  // Without noise the oracle knows every target but the first: exactly log R / T on any batch.
  auto exact = make_synthetic({64, 4, 0.0, 3});
  EXPECT_NEAR(exact->oracle_loss(exact->val_batch(0, 8, T)), std::log(60.0) / T, 1e-12);
}

// A batch written by hand: every target after the first follows the rule, so the oracle's loss is
// (log R + (T-1)(-log q)) / T per row; one target off the rule costs -log(p/R) in place of -log q.
TEST(TrainOracle, AHandBuiltBatchScoresExactly) {
  const int64_t V = 12, K = 2, R = V - K, T = 8;
  const double p = 0.1;
  auto data = make_synthetic({V, K, p, 5});
  // The rule (the permutations hang on the seed alone): read off a noise-free source's batch,
  // where every target after the first is the rule's token.
  auto rule_source = make_synthetic({V, K, 0.0, 5});
  std::vector<std::vector<int>> perm(K, std::vector<int>(R, -1));
  {
    const int64_t rows = 256;
    Batch b = rule_source->val_batch(0, rows, T);
    auto in = b.inputs.to_vector(), tg = b.targets.to_vector();
    for (int64_t s = 0; s < rows; ++s) {
      const int z = static_cast<int>(in[static_cast<size_t>(s * T)]) - static_cast<int>(R);
      for (int64_t t = 1; t < T; ++t)
        perm[static_cast<size_t>(z)][static_cast<size_t>(in[static_cast<size_t>(s * T + t)])] =
            static_cast<int>(tg[static_cast<size_t>(s * T + t)]);
    }
  }
  for (const auto& pz : perm)
    for (int x : pz) ASSERT_GE(x, 0) << "the sample missed a (topic, token) pair";
  // Two rows by hand: topic 0 from token 3, topic 1 from token 7, each following its rule.
  std::vector<int32_t> ids, targets;
  for (auto [z, start] : {std::pair<int, int>{0, 3}, {1, 7}}) {
    ids.push_back(static_cast<int32_t>(R + z));
    int tok = start;
    for (int64_t t = 1; t < T; ++t) {
      targets.push_back(static_cast<int32_t>(tok));
      ids.push_back(static_cast<int32_t>(tok));
      tok = perm[static_cast<size_t>(z)][static_cast<size_t>(tok)];
    }
    targets.push_back(static_cast<int32_t>(tok));
  }
  const double r = static_cast<double>(R), q = 1 - p + p / r;
  const double on_rule = (std::log(r) + static_cast<double>(T - 1) * -std::log(q)) / static_cast<double>(T);
  Batch b{Tensor::from_ids(ids, {2, T}), Tensor::from_ids(targets, {2, T})};
  EXPECT_NEAR(data->oracle_loss(b), on_rule, 1e-12);
  // The first target is never judged by the rule: any token there costs log R.
  targets[0] = static_cast<int32_t>((targets[0] + 1) % R);
  EXPECT_NEAR(data->oracle_loss({Tensor::from_ids(ids, {2, T}), Tensor::from_ids(targets, {2, T})}), on_rule, 1e-12);
  // One target off the rule (row 1, position 4).
  const size_t off = static_cast<size_t>(T + 4);
  targets[off] = static_cast<int32_t>((targets[off] + 1) % R);
  const double expect = (2 * std::log(r) + static_cast<double>(2 * (T - 1) - 1) * -std::log(q) - std::log(p / r)) /
                        static_cast<double>(2 * T);
  EXPECT_NEAR(data->oracle_loss({Tensor::from_ids(ids, {2, T}), Tensor::from_ids(targets, {2, T})}), expect, 1e-12);
}

TEST(TrainOracle, TextHasNoOracle) {
  auto text = make_text(std::string(NORMLAB_SOURCE_DIR) + "/experiments/data/tiny.txt", Tokenizer::bytes, "", 16, 0);
  EXPECT_TRUE(std::isnan(text->oracle_loss(text->val_batch(0, 2, 16))));
}

// ---- data_seed: the task apart from the init ----------------------------------------------------------

namespace {
TrainConfig tiny_run() {
  TrainConfig c;
  c.model.layers = 2;
  c.model.d_model = 16;
  c.model.d_hidden = 32;
  c.model.heads = 2;
  c.batch_size = 4;
  c.steps = 6;
  c.eval_every = 3;
  c.eval_batches = 4;
  c.threads = 1;
  return c;
}
}  // namespace

TEST(TrainDataSeed, SharedDataSeedSharesTheTokensNotTheInit) {
  TrainConfig a = tiny_run(), b = tiny_run(), c = tiny_run();
  EXPECT_EQ(a.task_seed(), a.seed);  // unset: the seed's task
  a.steps = b.steps = c.steps = 0;   // the init, evaluated once
  a.seed = 1;
  b.seed = 2;
  a.data_seed = b.data_seed = 9;
  c.seed = 1;  // a's init, the seed's own task
  EXPECT_EQ(a.task_seed(), 9u);
  EXPECT_EQ(c.task_seed(), 1u);
  auto da = make_data_source(a), db = make_data_source(b), dc = make_data_source(c);
  for (int64_t i = 0; i < a.eval_batches; ++i) {
    EXPECT_EQ(da->val_batch(i, 4, 16).inputs.to_vector(), db->val_batch(i, 4, 16).inputs.to_vector()) << i;
    EXPECT_EQ(da->val_batch(i, 4, 16).targets.to_vector(), db->val_batch(i, 4, 16).targets.to_vector()) << i;
    EXPECT_NE(da->val_batch(i, 4, 16).inputs.to_vector(), dc->val_batch(i, 4, 16).inputs.to_vector()) << i;
  }
  const TrainResult ra = train(a), rb = train(b), rc = train(c);
  ASSERT_EQ(ra.evals.size(), 1u);
  ASSERT_EQ(rb.evals.size(), 1u);
  ASSERT_EQ(rc.evals.size(), 1u);
  // Same tokens: the same oracle loss; other inits: other model losses.
  EXPECT_EQ(ra.evals[0].val_oracle_loss, rb.evals[0].val_oracle_loss);
  EXPECT_NE(ra.evals[0].val_loss, rb.evals[0].val_loss);
  EXPECT_EQ(ra.evals[0].val_oracle_loss, held_out_oracle_loss(a));
  // Same init, other tokens.
  EXPECT_NE(ra.evals[0].val_oracle_loss, rc.evals[0].val_oracle_loss);
  EXPECT_EQ(rc.evals[0].val_oracle_loss, held_out_oracle_loss(c));
  Model ma(a.model, a.seed), mc(c.model, c.seed), mb(b.model, b.seed);
  EXPECT_EQ(ma.params().all()[0].to_vector(), mc.params().all()[0].to_vector());
  EXPECT_NE(ma.params().all()[0].to_vector(), mb.params().all()[0].to_vector());
}

// ---- every eval's standard error and excess loss ---------------------------------------------------

// At step 0 the evaluated model is the seed's init: its per-batch losses, recomputed here, give the
// standard errors the eval must report (sample std over the batches / sqrt(batches)).
TEST(TrainEval, StandardErrorsAndExcessLossByHand) {
  TrainConfig c = tiny_run();
  c.steps = 0;
  const TrainResult res = train(c);
  ASSERT_EQ(res.evals.size(), 1u);
  const EvalRecord& e = res.evals[0];
  ThreadCountScope threads(1);
  NoGradGuard no_grad;
  Model m(c.model, c.seed);
  auto data = make_data_source(c);
  std::vector<double> loss, excess;
  double oracle = 0;
  for (int64_t i = 0; i < c.eval_batches; ++i) {
    Batch b = data->val_batch(i, c.batch_size, c.model.seq_len);
    loss.push_back(m.loss(b.inputs, b.targets).item());
    excess.push_back(loss.back() - data->oracle_loss(b));
    oracle += data->oracle_loss(b);
  }
  const double n = static_cast<double>(c.eval_batches);
  // float32 losses from possibly other kernels: 1e-5 relative; a wrong divisor (n for n-1) or a
  // missing sqrt is 15% or more.
  EXPECT_NEAR(e.val_loss, mean(loss), 1e-5 * mean(loss));
  EXPECT_NEAR(e.val_loss_se, sample_std(loss) / std::sqrt(n), 1e-4 * sample_std(loss));
  EXPECT_NEAR(e.excess_loss_se, sample_std(excess) / std::sqrt(n), 1e-4 * sample_std(excess));
  EXPECT_NEAR(e.val_oracle_loss, oracle / n, 1e-12);
  EXPECT_NEAR(e.excess_loss, e.val_loss - e.val_oracle_loss, 1e-12);
  EXPECT_GT(e.val_loss_se, 0.0);
}

TEST(TrainEval, EveryEvalReportsItsErrorsAndOneBatchHasNone) {
  TrainConfig c = tiny_run();
  TrainResult r = train(c);
  ASSERT_EQ(r.evals.size(), 2u);
  for (const EvalRecord& e : r.evals) {
    SCOPED_TRACE(e.step);
    EXPECT_TRUE(std::isfinite(e.val_loss_se) && e.val_loss_se > 0);
    EXPECT_TRUE(std::isfinite(e.val_oracle_loss));
    EXPECT_TRUE(std::isfinite(e.excess_loss));
    EXPECT_TRUE(std::isfinite(e.excess_loss_se) && e.excess_loss_se > 0);
    EXPECT_NEAR(e.excess_loss, e.val_loss - e.val_oracle_loss, 1e-12);
    EXPECT_EQ(e.val_oracle_loss, held_out_oracle_loss(c));  // the same held-out tokens at every eval
  }
  c.eval_batches = 1;
  r = train(c);
  ASSERT_EQ(r.evals.size(), 2u);
  for (const EvalRecord& e : r.evals) {
    EXPECT_TRUE(std::isnan(e.val_loss_se));
    EXPECT_TRUE(std::isnan(e.excess_loss_se));
    EXPECT_NEAR(e.excess_loss, e.val_loss - e.val_oracle_loss, 1e-12);
  }
  // Text: no oracle, so no excess loss; the standard error is still measured.
  c.eval_batches = 2;
  c.data = DataSpec::parse("text:" + std::string(NORMLAB_SOURCE_DIR) + "/experiments/data/tiny.txt");
  c.model.vocab = 256;
  r = train(c);
  ASSERT_FALSE(r.evals.empty());
  EXPECT_TRUE(std::isnan(r.evals.back().val_oracle_loss));
  EXPECT_TRUE(std::isnan(r.evals.back().excess_loss));
  EXPECT_TRUE(std::isnan(r.evals.back().excess_loss_se));
  EXPECT_TRUE(std::isfinite(r.evals.back().val_loss_se));
}

// ---- plateaus and collapse on hand-built evals --------------------------------------------------

namespace {
std::vector<EvalRecord> evals_at(const std::vector<std::pair<int64_t, double>>& points) {
  std::vector<EvalRecord> v;
  for (const auto& [step, loss] : points) {
    EvalRecord r;
    r.step = step;
    r.val_loss = loss;
    v.push_back(r);
  }
  return v;
}
using Spells = std::vector<std::pair<int64_t, int64_t>>;
}  // namespace

TEST(TrainStatus, PlateauIsASpellAtTheUnigramLossThatWasLeft) {
  const double u = 4.09;  // threshold u - 0.05 = 4.04
  // Step 0 sits at the unigram loss by construction: never a plateau.
  auto e = evals_at({{0, 4.2}, {100, 3.0}, {200, 4.1}, {300, 4.05}, {400, 2.0}, {500, 1.5}});
  EXPECT_EQ(plateau_spells(e, u), (Spells{{200, 300}}));
  EXPECT_EQ(collapse_step(e, u), -1);
  // Two spells, the first from step 100 (after step 0).
  e = evals_at({{0, 4.2}, {100, 4.1}, {200, 3.0}, {300, 4.04}, {400, 1.0}});
  EXPECT_EQ(plateau_spells(e, u), (Spells{{100, 100}, {300, 300}}));
  // A spell still open at the end is the collapse, not a plateau (a first eval at the unigram loss,
  // then learning, is one: runs evaluate at step 0 only when they train no steps).
  e = evals_at({{100, 4.2}, {200, 3.0}, {300, 4.1}, {400, 2.0}, {500, 4.08}, {600, 4.1}});
  EXPECT_EQ(plateau_spells(e, u), (Spells{{100, 100}, {300, 300}}));
  EXPECT_EQ(collapse_step(e, u), 500);
  // 0.06 below the unigram loss is learning: no spell.
  e = evals_at({{100, 4.03}, {200, 3.0}});
  EXPECT_TRUE(plateau_spells(e, u).empty());
  // A diverged eval (NaN) is not below the threshold.
  e = evals_at({{100, NAN}, {200, 3.0}});
  EXPECT_EQ(plateau_spells(e, u), (Spells{{100, 100}}));
  EXPECT_TRUE(plateau_spells(e, NAN).empty());  // no baseline: nothing to judge
  EXPECT_TRUE(plateau_spells({}, u).empty());
}

// ---- training-loss spikes --------------------------------------------------------------------------

TEST(TrainSpikes, CountedAgainstTheMedianOfTheStepsBefore) {
  std::vector<double> flat(300, 1.0);
  auto with = [&](std::vector<std::pair<int64_t, double>> at) {
    std::vector<double> v = flat;
    for (auto [step, x] : at) v[static_cast<size_t>(step - 1)] = x;  // losses[0] is step 1
    return v;
  };
  SpikeCount s = count_spikes(with({{150, 2.0}}));
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.steps, (std::vector<int64_t>{150}));
  // The first judged step is kSpikeWindow + 1.
  EXPECT_EQ(count_spikes(with({{50, 2.0}})).count, 0);
  EXPECT_EQ(count_spikes(with({{100, 2.0}})).count, 0);
  EXPECT_EQ(count_spikes(with({{101, 2.0}})).steps, (std::vector<int64_t>{101}));
  // At or below 1.5 x the median: not a spike.
  EXPECT_EQ(count_spikes(with({{150, 1.4}})).count, 0);
  EXPECT_EQ(count_spikes(with({{150, 1.5}})).count, 0);
  // The first step's number.
  EXPECT_EQ(count_spikes(with({{150, 2.0}}), 1001).steps, (std::vector<int64_t>{1150}));
  // NaN is neither judged nor counted in a window: with step 50 NaN the window fills one step later.
  s = count_spikes(with({{50, NAN}, {101, 2.0}, {102, 2.0}, {200, INFINITY}}));
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.steps, (std::vector<int64_t>{102}));
  // Many spikes: every 4th step at 3.0 keeps the median at 1.0; the steps list stops at kMaxSpikeSteps.
  std::vector<double> many(1100, 1.0);
  for (size_t i = 100; i < many.size(); i += 4) many[i] = 3.0;
  s = count_spikes(many);
  EXPECT_EQ(s.count, 250);
  ASSERT_EQ(s.steps.size(), kMaxSpikeSteps);
  EXPECT_EQ(s.steps.front(), 101);
  EXPECT_EQ(s.steps.back(), 101 + 4 * static_cast<int64_t>(kMaxSpikeSteps - 1));
  // The counter as the trainer runs it, one step at a time, agrees.
  SpikeCounter c;
  for (size_t i = 0; i < many.size(); ++i) c.add(static_cast<int64_t>(i + 1), many[i]);
  EXPECT_EQ(c.result.count, 250);
  EXPECT_EQ(c.recent.size(), static_cast<size_t>(kSpikeWindow));
}

// weight_decay_on matrices decays the parameters of 2 or more dimensions (linear weights,
// embeddings) as weight_decay_on all does, and leaves the others (biases, norm gains, QK-Norm's
// gains) as weight_decay 0 does, bit for bit: nanoGPT's two parameter groups. One step, so that
// every run's gradient is the initial model's.
TEST(TrainDecay, MatricesOnlyDecaysTheMatricesAndNothingElse) {
  TrainConfig cfg;
  cfg.model.model = ModelKind::gpt;
  cfg.model.layers = 2;
  cfg.model.d_model = 16;
  cfg.model.d_hidden = 32;
  cfg.model.heads = 2;
  cfg.model.qk_norm = true;
  cfg.batch_size = 4;
  cfg.steps = 1;
  cfg.eval_every = 1;
  cfg.eval_batches = 1;
  cfg.threads = 1;
  cfg.lr = 1e-2;
  auto final_weights = [&](double wd, std::optional<WeightDecayOn> on) {
    TrainConfig c = cfg;
    c.weight_decay = wd;
    c.weight_decay_on = on;
    std::map<std::string, std::vector<double>> w;
    TrainHooks hooks;
    hooks.on_checkpoint = [&](int64_t, TrainModel& model, const TrainState&) {
      for (const auto& [name, t] : model_state(model)) w[name] = t.to_vector();
    };
    train(c, hooks);
    return w;
  };
  const auto all = final_weights(0.5, WeightDecayOn::all), none = final_weights(0.0, std::nullopt),
             matrices = final_weights(0.5, WeightDecayOn::matrices), unset = final_weights(0.5, std::nullopt);
  EXPECT_EQ(unset, all);  // unset is all, as before the key
  int decayed = 0, kept = 0;
  for (const auto& [name, values] : matrices) {
    // PyTorch's names: the linear layers' and embeddings' weights, not the norms' (norm1.weight, ...).
    bool matrix = name == "tok_emb.weight" || name == "pos_emb.weight" || name == "head.weight";
    for (const char* linear : {".attn.q.weight", ".attn.k.weight", ".attn.v.weight", ".attn.o.weight",
                               ".mlp.fc1.weight", ".mlp.fc2.weight"})
      matrix = matrix || (name.size() > std::strlen(linear) &&
                          name.compare(name.size() - std::strlen(linear), std::string::npos, linear) == 0);
    const auto& want = matrix ? all.at(name) : none.at(name);
    EXPECT_TRUE(values == want) << name << (matrix ? " should be decayed" : " should not be decayed");
    // Where decaying would have changed nothing (a bias initialised to 0), the test shows nothing.
    if (all.at(name) != none.at(name)) (matrix ? decayed : kept) += 1;
  }
  EXPECT_EQ(decayed, 2 * 6 + 3);  // q, k, v, o, fc1, fc2 of each block, the embeddings, the head
  EXPECT_GE(kept, 2 * 4);         // each block's two norm gains and two QK-Norm gains
}
