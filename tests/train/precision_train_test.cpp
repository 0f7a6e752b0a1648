// Training in bf16 / fp16 (TrainConfig::precision): the run stores every activation and gradient
// in the format (StoragePrecisionScope around steps and evals) with float32 master weights; it is
// deterministic, differs from fp32, and learns about as well on the toy task.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "normlab/checkpoint.h"
#include "normlab/error.h"
#include "normlab/ops.h"
#include "normlab/train.h"
#include "normlab/train_model.h"
#include "test_util.h"

using namespace normlab;

namespace {

TrainConfig small_run() {
  TrainConfig c;
  c.model.layers = 2;
  c.model.d_model = 32;
  c.model.d_hidden = 64;
  c.batch_size = 16;
  c.steps = 200;
  c.eval_every = 100;
  c.eval_batches = 4;
  c.threads = 1;
  return c;
}

TEST(TrainPrecision, Bf16AndFp16TrainDeterministicallyAndApartFromFp32) {
  TrainConfig f32 = small_run(), bf = small_run(), h = small_run();
  bf.precision = Precision::bf16;
  h.precision = Precision::fp16;
  const TrainResult r32 = train(f32), rb = train(bf), rh = train(h), rb2 = train(bf);
  EXPECT_EQ(storage_precision(), Precision::fp32);  // the run's scope ended with it
  for (const TrainResult* r : {&r32, &rb, &rh}) {
    ASSERT_EQ(r->status, "ok");
    ASSERT_TRUE(std::isfinite(r->final_val_loss));
    EXPECT_LT(r->final_val_loss, r->unigram_loss - 0.5) << "it learned";
  }
  EXPECT_EQ(rb.final_val_loss, rb2.final_val_loss);  // bit for bit
  EXPECT_NE(rb.final_val_loss, r32.final_val_loss);
  EXPECT_NE(rh.final_val_loss, r32.final_val_loss);
  EXPECT_NE(rb.final_val_loss, rh.final_val_loss);
  // Close to float32 on this small model: within a few hundredths of a nat.
  EXPECT_NEAR(rb.final_val_loss, r32.final_val_loss, 0.05);
  EXPECT_NEAR(rh.final_val_loss, r32.final_val_loss, 0.05);
}

std::string usage_error(const TrainConfig& c) {
  try {
    c.validate();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

Tensor param(Model& m, const std::string& name) {
  for (const Tensor& t : m.params().all())
    if (t.impl().name == name) return t;
  ADD_FAILURE() << "no parameter " << name;
  return Tensor();
}

}  // namespace

TEST(LossScaler, FollowsGradScalersSchedule) {
  LossScalerSettings s;
  s.growth_interval = 3;
  LossScaler sc(s);
  EXPECT_EQ(sc.scale(), 65536.0);
  EXPECT_TRUE(sc.update(true));
  EXPECT_TRUE(sc.update(true));
  EXPECT_EQ(sc.scale(), 65536.0);
  EXPECT_TRUE(sc.update(true));  // the third finite step in a row: x2
  EXPECT_EQ(sc.scale(), 131072.0);
  EXPECT_TRUE(sc.update(true));
  EXPECT_TRUE(sc.update(true));
  EXPECT_FALSE(sc.update(false));  // skipped: x0.5, and the count of finite steps starts again
  EXPECT_EQ(sc.scale(), 65536.0);
  EXPECT_EQ(sc.state().skipped, 1);
  EXPECT_EQ(sc.state().consecutive_skips, 1);
  EXPECT_FALSE(sc.update(false));
  EXPECT_EQ(sc.state().consecutive_skips, 2);
  EXPECT_TRUE(sc.update(true));
  EXPECT_TRUE(sc.update(true));
  EXPECT_EQ(sc.scale(), 32768.0);
  EXPECT_EQ(sc.state().consecutive_skips, 0);
  EXPECT_TRUE(sc.update(true));
  EXPECT_EQ(sc.scale(), 65536.0);
  EXPECT_EQ(sc.state().skipped, 2);
  // A growth that would overflow the float32 scale is not made (torch keeps the old scale).
  LossScalerSettings big;
  big.init = 3e38;
  big.growth_interval = 1;
  LossScaler top(big);
  const double before = top.scale();
  EXPECT_TRUE(top.update(true));
  EXPECT_EQ(top.scale(), before);
  EXPECT_TRUE(std::isfinite(top.scale()));
}

TEST(TrainPrecision, Fp16ScalesItsLossAndLogsTheScale) {
  TrainConfig h = small_run();
  h.precision = Precision::fp16;
  const TrainResult r = train(h);
  ASSERT_EQ(r.status, "ok");
  EXPECT_EQ(r.final_loss_scale, 65536.0);  // 200 steps: no growth at 2000, no overflow here
  EXPECT_EQ(r.skipped_steps, 0);
  for (const EvalRecord& e : r.evals) EXPECT_EQ(e.loss_scale, 65536.0);
  // bf16 has no scaler unless asked; asked, it has GradScaler's.
  TrainConfig b = small_run();
  b.precision = Precision::bf16;
  EXPECT_TRUE(std::isnan(train(b).final_loss_scale));
  b.loss_scale = LossScaling::dynamic;
  b.loss_scale_init = 1024;
  EXPECT_EQ(train(b).final_loss_scale, 1024.0);
}

TEST(TrainPrecision, AnOverflowingScaleIsSkippedDownToOneThatFits) {
  // 2^40 times the logits' gradients (about 1/(16*32) each) overflows fp16's 65504: the scaler
  // halves the scale and skips steps until it fits, and the run learns from the other steps.
  TrainConfig h = small_run();
  h.precision = Precision::fp16;
  h.loss_scale_init = std::ldexp(1.0, 40);
  h.loss_scale_growth_interval = 50;
  const TrainResult r = train(h);
  ASSERT_EQ(r.status, "ok") << r.diverged_reason;
  EXPECT_GE(r.skipped_steps, 10);
  EXPECT_LT(r.final_loss_scale, std::ldexp(1.0, 30));
  EXPECT_LT(r.final_val_loss, r.unigram_loss - 0.5);
  EXPECT_EQ(r.evals.back().skipped_steps, r.skipped_steps);
}

TEST(TrainPrecision, ResumedScaledRunIsTheUninterruptedOne) {
  TrainConfig h = small_run();
  h.precision = Precision::fp16;
  h.loss_scale_init = std::ldexp(1.0, 30);  // skips early, so the state carries counts
  h.loss_scale_growth_interval = 40;
  const auto dir = test::fresh_dir("precision_resume");
  std::filesystem::create_directories(dir);
  const TrainResult whole = train(h, TrainHooks{});
  ResumePoint point;
  TrainHooks hooks;
  hooks.checkpoint_every = 100;
  hooks.on_checkpoint = [&](int64_t step, TrainModel& model, const TrainState& st) {
    if (step != 100) return;
    point.weights = (dir / "model.safetensors").string();
    save_safetensors(point.weights, model_state(model), {});
    const std::string state = (dir / "state.safetensors").string();
    save_train_state(state, st);
    point.state = load_train_state(state);  // through the file
  };
  (void)train(h, hooks);
  ASSERT_FALSE(point.weights.empty());
  EXPECT_GT(point.state.loss_scaler.skipped, 0);
  const TrainResult resumed = train(h, TrainHooks{}, &point);
  EXPECT_EQ(resumed.final_val_loss, whole.final_val_loss);
  EXPECT_EQ(resumed.final_loss_scale, whole.final_loss_scale);
  EXPECT_EQ(resumed.skipped_steps, whole.skipped_steps);
  // A scaled run cannot resume from a state without the scaler's.
  point.state.loss_scaler = LossScalerState{};
  EXPECT_THROW(train(h, TrainHooks{}, &point), UsageError);
}

TEST(TrainPrecision, ResidualStreamInFloat32IsAnotherRunAndDeterministic) {
  TrainConfig a = small_run(), b = small_run();
  a.precision = b.precision = Precision::fp16;
  b.residual_dtype = ResidualDtype::fp32;
  const TrainResult ra = train(a), rb = train(b), rb2 = train(b);
  ASSERT_EQ(rb.status, "ok");
  EXPECT_EQ(rb.final_val_loss, rb2.final_val_loss);
  EXPECT_NE(ra.final_val_loss, rb.final_val_loss);
  EXPECT_NEAR(ra.final_val_loss, rb.final_val_loss, 0.05);
}

TEST(TrainPrecision, EvalsRecordPerBlockRangeOnlyInLowPrecision) {
  TrainConfig h = small_run();
  h.steps = 100;
  const TrainResult r32 = train(h);
  EXPECT_TRUE(r32.evals.back().stream_max_abs.empty());
  EXPECT_TRUE(std::isnan(r32.evals.back().loss_scale));
  h.precision = Precision::fp16;
  const TrainResult r = train(h);
  const EvalRecord& e = r.evals.back();
  ASSERT_EQ(e.stream_max_abs.size(), 2u);
  ASSERT_EQ(e.norm_input_max_abs.size(), 2u);
  ASSERT_EQ(e.overflow_share.size(), 2u);
  ASSERT_EQ(e.underflow_share.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_GT(e.stream_max_abs[l], 0);
    EXPECT_LT(e.stream_max_abs[l], 65504);
    EXPECT_GT(e.norm_input_max_abs[l], 0);
    EXPECT_EQ(e.overflow_share[l], 0);
    EXPECT_GE(e.underflow_share[l], 0);
    EXPECT_LT(e.underflow_share[l], 0.01);
  }
}

TEST(TrainPrecision, NonFiniteOriginNamesTheFirstOverflow) {
  TrainConfig c = small_run();
  const std::unique_ptr<TrainModel> trained = make_train_model(c.model, 3);
  Model& model = *trained->decoder_only();
  Rng rng(5, stream::check);
  Tensor ids = Tensor::from_ids(std::vector<int32_t>(static_cast<size_t>(4 * c.model.seq_len), 3), {4, c.model.seq_len});
  Tensor targets = ids.clone();
  {
    StoragePrecisionScope fp16(Precision::fp16);
    EXPECT_EQ(find_nonfinite(*trained, Batch{ids, targets}, 7, 1.0).step, -1) << "a healthy model: nothing to find";
    // Block 1's first MLP product: weights of ~1e4 make outputs beyond 65504 (the weights fit).
    Tensor w = param(model, "blocks.1.mlp.fc1.w");
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>(1e4 * rng.normal());
    const NonFiniteOrigin o = find_nonfinite(*trained, Batch{ids, targets}, 7, 1.0);
    EXPECT_EQ(o.step, 7);
    EXPECT_EQ(o.phase, "forward");
    EXPECT_EQ(o.op, "linear");
    EXPECT_EQ(o.module, "blocks.1");
    EXPECT_EQ(o.cause, "overflow");
    EXPECT_EQ(o.format, "fp16");
    EXPECT_GT(o.max_abs, 65504);
    EXPECT_NE(o.str().find("step 7, forward, linear in blocks.1: overflow"), std::string::npos) << o.str();
  }
  // In float32 the same model is finite; a seed of 1e38 overflows its loss's gradient there.
  const std::unique_ptr<TrainModel> healthy = make_train_model(c.model, 3);
  EXPECT_EQ(find_nonfinite(*healthy, Batch{ids, targets}, 2, std::nullopt).step, -1);
  StoragePrecisionScope fp16(Precision::fp16);
  const NonFiniteOrigin g = find_nonfinite(*healthy, Batch{ids, targets}, 2, 1e30);
  EXPECT_EQ(g.phase, "backward");
  EXPECT_EQ(g.op, "cross_entropy");
  EXPECT_EQ(g.module, "loss");
  EXPECT_EQ(g.cause, "overflow");
}

TEST(TrainPrecision, ANonFiniteForwardIsSkippedUntilTheScaleGivesUp) {
  // No norm, lr 0.3, fp16: the forward overflows within a few dozen steps and stays so. The
  // scaler skips those steps (as GradScaler would: their gradients are inf) and backs off; below
  // 2^-16 the run is diverged, and the replay names the overflow.
  TrainConfig c = small_run();
  c.model.norm = NormKind::none;
  c.model.layers = 4;
  c.lr = 0.3;
  c.precision = Precision::fp16;
  const TrainResult r = train(c);
  ASSERT_EQ(r.status, "diverged");
  EXPECT_NE(r.diverged_reason.find("non-finite loss at"), std::string::npos) << r.diverged_reason;
  EXPECT_LT(r.final_loss_scale, kMinLossScale);
  EXPECT_GE(r.skipped_steps, 32);
  EXPECT_EQ(r.nonfinite.step, r.diverged_step);
  EXPECT_EQ(r.nonfinite.phase, "forward");
  EXPECT_EQ(r.nonfinite.cause, "overflow") << r.nonfinite.str();
}

TEST(TrainPrecision, EpsThatRoundsToZeroIsRecorded) {
  TrainConfig c = small_run();
  EXPECT_TRUE(eps_rounding(c).empty());
  c.precision = Precision::fp16;
  c.model.norm_eps = 1e-12;  // added in float32 (norm_compute fused): exact enough
  EXPECT_TRUE(eps_rounding(c).empty());
  c.model.norm_eps = 1e-50;  // below float32's smallest subnormal
  const std::vector<EpsRounding> e = eps_rounding(c);
  ASSERT_EQ(e.size(), 2u);  // the blocks' norms and the final norm
  EXPECT_EQ(e[0].norm, "blocks");
  EXPECT_EQ(e[0].stored, 0.0);
  EXPECT_EQ(e[0].format, "fp32");
  EXPECT_NE(eps_rounding_warning(e[0]).find("rounds to zero in fp32"), std::string::npos);
  const TrainResult r = train(c);  // allowed: it is the experiment
  EXPECT_EQ(r.eps_rounding.size(), 2u);
  // The composite adds eps in fp16 where it runs: on the stream's norms with the stream in fp16;
  // with a float32 stream only on the norms that read a branch (Sandwich's second ones).
  c.model.norm_eps = 1e-12;
  c.norm_compute = NormCompute::format;
  std::vector<EpsRounding> f = eps_rounding(c);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].format, "fp16");
  c.residual_dtype = ResidualDtype::fp32;
  EXPECT_TRUE(eps_rounding(c).empty());
  c.model.placement = Placement::sandwich;
  f = eps_rounding(c);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].norm, "blocks.sandwich_out");
}

TEST(TrainPrecision, NormsWithoutEpsHaveNoEpsRounding) {
  // DyT and Derf have no statistic and no eps: no warning, no entry, in any precision; a final
  // norm that has one is still checked.
  for (NormKind k : {NormKind::dyt, NormKind::derf}) {
    for (Precision p : {Precision::fp32, Precision::fp16}) {
      TrainConfig c = small_run();
      c.model.norm = k;
      c.precision = p;
      EXPECT_TRUE(eps_rounding(c).empty()) << to_string(k) << " " << to_string(p);
      c.model.final_norm = FinalNorm::layernorm;
      c.model.norm_eps = 1e-50;
      const std::vector<EpsRounding> e = eps_rounding(c);
      ASSERT_EQ(e.size(), 1u);
      EXPECT_EQ(e[0].norm, "final_norm");
    }
  }
  TrainConfig c = small_run();
  c.model.norm = NormKind::dyt;
  c.steps = 2;
  c.eval_every = 2;
  EXPECT_TRUE(train(c).eps_rounding.empty());
}

TEST(TrainPrecision, LowPrecisionKeysAreCheckedTogether) {
  TrainConfig c = small_run();
  c.residual_dtype = ResidualDtype::fp32;
  EXPECT_NE(usage_error(c).find("residual_dtype fp32 needs precision bf16 or fp16"), std::string::npos) << usage_error(c);
  c = small_run();
  c.loss_scale = LossScaling::dynamic;
  EXPECT_NE(usage_error(c).find("loss_scale dynamic needs precision bf16 or fp16"), std::string::npos);
  c = small_run();
  c.loss_scale_init = 1024;
  EXPECT_NE(usage_error(c).find("loss_scale_init needs precision fp16"), std::string::npos) << usage_error(c);
  c.precision = Precision::bf16;
  EXPECT_NE(usage_error(c).find("loss_scale_init needs loss_scale dynamic"), std::string::npos) << usage_error(c);
  c.loss_scale = LossScaling::dynamic;
  EXPECT_EQ(usage_error(c), "");
  c.precision = Precision::fp16;
  c.loss_scale = LossScaling::none;
  EXPECT_NE(usage_error(c).find("loss_scale none"), std::string::npos) << usage_error(c);
  c.loss_scale.reset();
  c.loss_scale_growth_factor = 1.0;
  EXPECT_NE(usage_error(c).find("loss_scale_growth_factor must be > 1"), std::string::npos);
  c.loss_scale_growth_factor.reset();
  c.loss_scale_backoff_factor = 1.5;
  EXPECT_NE(usage_error(c).find("loss_scale_backoff_factor must be in (0, 1)"), std::string::npos);
  c.loss_scale_backoff_factor.reset();
  c.loss_scale_growth_interval = 0;
  EXPECT_NE(usage_error(c).find("loss_scale_growth_interval must be >= 1"), std::string::npos);
  c.loss_scale_growth_interval.reset();
  c.loss_scale_init = 1e39;
  EXPECT_NE(usage_error(c).find("loss_scale_init must be in [2^-16, 3.4e38]"), std::string::npos) << usage_error(c);
  c.loss_scale_init = 1e-6;
  EXPECT_NE(usage_error(c).find("loss_scale_init must be in [2^-16, 3.4e38]"), std::string::npos);
}

TEST(TrainPrecision, NormComputeNeedsALowPrecision) {
  TrainConfig c = small_run();
  c.norm_compute = NormCompute::fp32;
  EXPECT_NE(usage_error(c).find("norm_compute fp32 needs precision bf16 or fp16"), std::string::npos) << usage_error(c);
  c.precision = Precision::fp16;
  EXPECT_EQ(usage_error(c), "");
  c.norm_compute = NormCompute::format;
  EXPECT_EQ(usage_error(c), "");
}

TEST(TrainPrecision, CompositeNormTrainsAndIsAnotherArithmetic) {
  TrainConfig f = small_run(), c = small_run();
  f.precision = c.precision = Precision::bf16;
  c.norm_compute = NormCompute::format;
  const TrainResult rf = train(f), rc = train(c), rc2 = train(c);
  ASSERT_EQ(rc.status, "ok");
  EXPECT_EQ(rc.final_val_loss, rc2.final_val_loss);
  EXPECT_NE(rc.final_val_loss, rf.final_val_loss);
  EXPECT_NEAR(rc.final_val_loss, rf.final_val_loss, 0.05);
}

TEST(TrainPrecision, Fp16CompositeSkipsEveryStepAtGpt2InitInRsqrtsBackward) {
  // At gpt2 init a norm's input has std ~0.02, so r is near 50 and the composite's backward of
  // torch.rsqrt, -0.5 * grad * r.pow(3), overflows fp16 (r^3 ~ 1e5) whatever the loss scale:
  // every step is skipped, the scale backs off below 2^-16, and the replay names that step. With
  // float32 statistics (fused) the same run trains.
  TrainConfig c = small_run();
  c.precision = Precision::fp16;
  c.norm_compute = NormCompute::format;
  const TrainResult r = train(c);
  ASSERT_EQ(r.status, "diverged");
  EXPECT_EQ(r.skipped_steps, r.diverged_step) << r.diverged_reason;
  EXPECT_LT(r.final_loss_scale, kMinLossScale);
  EXPECT_EQ(r.nonfinite.phase, "backward");
  EXPECT_NE(r.nonfinite.op.find("torch.rsqrt backward"), std::string::npos) << r.nonfinite.str();
  EXPECT_EQ(r.nonfinite.cause, "overflow") << r.nonfinite.str();
  c.norm_compute = NormCompute::fused;
  EXPECT_EQ(train(c).status, "ok");
}

TEST(TrainPrecision, NonFiniteOriginTellsEpsFromVarianceUnderflow) {
  // fp16, LayerNorm as the composite, eps 1e-12 (0 in fp16). Embeddings of 0: block 0's first
  // norm sees rows of equal values, var = 0, var + eps = 0, rsqrt = inf: eps_zero. Embeddings
  // of ~1e-4 (distinct): the centred squares (~1e-8) underflow, var = 0: var_underflow.
  TrainConfig c = small_run();
  c.model.norm_eps = 1e-12;
  const std::unique_ptr<TrainModel> trained = make_train_model(c.model, 3);
  Model& model = *trained->decoder_only();
  Tensor ids = Tensor::from_ids(std::vector<int32_t>(static_cast<size_t>(2 * c.model.seq_len), 3), {2, c.model.seq_len});
  Tensor tok = param(model, "tok_emb"), pos = param(model, "pos_emb");
  tok.fill_(0.0);
  pos.fill_(0.0);
  StoragePrecisionScope fp16(Precision::fp16, std::nullopt, NormCompute::format);
  const NonFiniteOrigin zero = find_nonfinite(*trained, Batch{ids, ids}, 1, std::nullopt);
  EXPECT_EQ(zero.op, "layernorm");
  EXPECT_EQ(zero.module, "blocks.0");
  EXPECT_EQ(zero.cause, "eps_zero");
  EXPECT_NE(zero.str().find("eps rounds to zero in fp16"), std::string::npos) << zero.str();
  Rng rng(9, stream::check);
  for (int64_t i = 0; i < pos.numel(); ++i) pos.data<float>()[i] = static_cast<float>(1e-4 * (1.0 + rng.uniform()));
  const NonFiniteOrigin under = find_nonfinite(*trained, Batch{ids, ids}, 1, std::nullopt);
  EXPECT_EQ(under.op, "layernorm");
  EXPECT_EQ(under.cause, "var_underflow") << under.str();
  // With fp32 statistics (fused), the same rows are finite.
  StoragePrecisionScope fused(Precision::fp16, std::nullopt, NormCompute::fused);
  EXPECT_EQ(find_nonfinite(*trained, Batch{ids, ids}, 1, std::nullopt).step, -1);
}
