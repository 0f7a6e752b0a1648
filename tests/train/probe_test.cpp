// `probe` (signal propagation at init): the library's presets measure what the textbook says, or,
// for Xiong et al. 2020, what normlab actually measures; and `normlab probe` as a user runs it.
// Small seeds and batches throughout: the whole file runs in a few seconds.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "test_util.h"
#include "normlab/backend.h"
#include "normlab/ops.h"
#include "normlab/probe.h"

using normlab::ConfigProbe;
using normlab::ProbeOptions;
using normlab::TrainConfig;
using normlab::test::describe;
using normlab::test::run_cli;
using normlab::test::split_lines;

namespace {

ProbeOptions small(int seeds = 1, int64_t batch = 4) {
  ProbeOptions o;
  o.seeds = seeds;
  o.batch = batch;
  return o;
}

TrainConfig gpt(normlab::Placement placement, int64_t layers, bool residual = true) {
  TrainConfig c;
  c.model.model = normlab::ModelKind::gpt;
  c.model.init = normlab::InitScheme::xavier;
  c.model.placement = placement;
  c.model.layers = layers;
  c.model.residual = residual;
  return c;
}

}  // namespace

// ---- preset 1 ------------------------------------------------------------------------------

TEST(ProbePlainStack, LayerNormStaysAtSqrtDWhilePlainVanishesOrExplodes) {
  normlab::PlainStackOptions so;  // 20 linear layers, d = 64, gains 0.5, 1, 2
  auto r = normlab::probe_plain_stack(so, small(2, 4));
  ASSERT_EQ(r.stacks.size(), 6u);
  EXPECT_DOUBLE_EQ(r.sqrt_d, 8.0);
  for (const auto& s : r.stacks) {
    ASSERT_EQ(s.act_norm.size(), 21u) << s.label;
    ASSERT_EQ(s.weight_grad_norm.size(), 20u) << s.label;
    if (!s.layernorm) continue;
    // gamma 1, beta 0: every token has norm sqrt(d) * sqrt(var / (var + eps)), whatever the gain.
    for (size_t l = 1; l < s.act_norm.size(); ++l) EXPECT_NEAR(s.act_norm[l].mean / r.sqrt_d, 1.0, 0.03) << s.label << " layer " << l;
  }
  EXPECT_LT(r.layernorm_max_rel_dev, 0.03);
  const auto& shrink = r.stacks[0];  // plain gain 0.5: E||Wx||^2 = gain^2 ||x||^2
  EXPECT_FALSE(shrink.layernorm);
  EXPECT_LT(shrink.last_over_input.mean, 1e-4);  // orders of magnitude
  EXPECT_NEAR(std::log(shrink.last_over_input.mean), std::log(std::pow(0.5, 20)), std::log(2.0));
  EXPECT_LT(shrink.weight_grad_norm.front().mean, 1e-3 * r.stacks[3].weight_grad_norm.front().mean);
  const auto& grow = r.stacks[2];  // plain gain 2
  EXPECT_GT(grow.last_over_input.mean, 1e4);
  EXPECT_NEAR(std::log(grow.last_over_input.mean), std::log(std::pow(2.0, 20)), std::log(2.0));
}

TEST(ProbePlainStack, GeluAndBadOptions) {
  normlab::PlainStackOptions so;
  so.activation = normlab::Activation::gelu;
  so.layers = 5;
  so.gains = {1.0};
  auto r = normlab::probe_plain_stack(so, small());
  ASSERT_EQ(r.stacks.size(), 2u);
  EXPECT_TRUE(std::isnan(r.stacks[0].expected_last_over_input));
  EXPECT_LT(r.stacks[0].last_over_input.mean, 1.0);  // gelu halves the signal's second moment, roughly
  EXPECT_THROW(normlab::parse_kind<normlab::Activation>("relu"), normlab::UsageError);
  so.activation = normlab::Activation::linear;
  so.gains = {-1};
  EXPECT_THROW(normlab::probe_plain_stack(so, small()), normlab::UsageError);
}

// ---- preset 2 ------------------------------------------------------------------------------

TEST(ProbePrelnGrowth, StreamGrowsAndTheFinalNormBringsItBack) {
  auto r = normlab::probe_preln_growth(small(1, 4));
  ASSERT_EQ(r.runs.size(), 2u);
  for (const ConfigProbe& p : r.runs) {
    ASSERT_EQ(p.layers.size(), 12u);
    EXPECT_TRUE(p.final_norm_on);
    EXPECT_GT(p.stream_last_over_embed.mean, 1.0) << p.label;
    EXPECT_NEAR(p.final_out_norm.mean / p.sqrt_d, 1.0, 0.01) << p.label;
    EXPECT_NEAR(p.final_in_norm.mean, p.layers.back().act_norm.mean, 1e-12);
  }
  const ConfigProbe& xavier = r.runs[1];
  EXPECT_EQ(xavier.config.model.init, normlab::InitScheme::xavier);
  for (size_t l = 1; l < xavier.layers.size(); ++l) {
    EXPECT_GT(xavier.layers[l].act_norm.mean, xavier.layers[l - 1].act_norm.mean) << "layer " << l + 1;
    EXPECT_NEAR(xavier.layers[l].growth.mean, xavier.layers[l].act_norm.mean / xavier.layers[l - 1].act_norm.mean, 1e-9);
  }
  EXPECT_GT(xavier.layers.back().act_norm.mean, 2 * xavier.sqrt_d);  // well past sqrt(d) before the final norm
}

// ---- preset 3 ------------------------------------------------------------------------------

// Xiong et al. 2020 claim Post-LN's W^{2,l} gradient grows toward the output and Pre-LN's is
// flat. normlab (gpt, LayerNorm, Xavier, d = 64, N(0, 0.02) embeddings) measures: Post-LN roughly
// flat (last/first ~1), Pre-LN FALLING toward the output (last/first ~0.2-0.35). What does hold:
// Post-LN's ratio exceeds Pre-LN's, and Theorem 1's depth scaling of the last layer's gradient
// (Post-LN independent of L, Pre-LN ~ 1/sqrt(L)). These tests assert the measurement.
TEST(ProbeXiong, PostLnRatioExceedsPreLnAndTheoremOneScaling) {
  auto r = normlab::probe_xiong(small(3, 16), {4, 12});
  ASSERT_EQ(r.runs.size(), 4u);
  EXPECT_EQ(r.runs[0].placement, normlab::Placement::post);
  EXPECT_EQ(r.runs[1].placement, normlab::Placement::pre);
  EXPECT_TRUE(r.post_above_pre);
  for (size_t i = 0; i < r.runs.size(); i += 2) {
    const double post = r.runs[i].probe.fc2_last_over_first.mean, pre = r.runs[i + 1].probe.fc2_last_over_first.mean;
    EXPECT_GT(post, 0.5) << "L=" << r.runs[i].layers;  // measured: roughly flat
    EXPECT_LT(post, 2.0) << "L=" << r.runs[i].layers;
    EXPECT_LT(pre, 0.6) << "L=" << r.runs[i].layers;   // measured: falls toward the output
  }
  EXPECT_FALSE(r.runs[0].probe.final_norm_on);
  EXPECT_TRUE(r.runs[1].probe.final_norm_on);
  // Theorem 1: from L = 4 to 12, Post-LN's last-layer gradient stays put, Pre-LN's falls
  // (predicted by sqrt(4/12) = 0.58; measured ~0.5).
  EXPECT_GT(r.post_last_depth_ratio, 0.6);
  EXPECT_LT(r.post_last_depth_ratio, 1.6);
  EXPECT_NEAR(r.pre_predicted_depth_ratio, std::sqrt(4.0 / 12.0), 1e-12);
  EXPECT_LT(r.pre_last_depth_ratio, 0.8);
  EXPECT_LT(r.pre_last_depth_ratio, r.post_last_depth_ratio);
  EXPECT_NE(r.verdict.find("Xiong"), std::string::npos);
}

// ---- preset 4 ------------------------------------------------------------------------------

TEST(ProbeIdentityShare, PreLnIdentityTermIsTheUpstreamGradientExactly) {
  ConfigProbe p = normlab::probe_config(gpt(normlab::Placement::pre, 6), small());
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const auto& lp = p.layers[l];
    // pre: y = h + F2(N2(h)), h = x + F1(N1(x)): the identity path of dL/dx is dL/dy itself.
    EXPECT_NEAR(lp.identity_norm.mean, lp.stream_grad_norm.mean, 1e-6 * lp.stream_grad_norm.mean) << "layer " << l + 1;
    EXPECT_GT(lp.identity_share.mean, 0.0);
    EXPECT_LT(lp.identity_share.mean, 1.0);
    // identity + F = dL/dx_{l-1}: the triangle inequality both ways.
    EXPECT_LE(lp.input_grad_norm.mean, (lp.identity_norm.mean + lp.f_norm.mean) * (1 + 1e-6));
    EXPECT_GE(lp.input_grad_norm.mean, std::abs(lp.identity_norm.mean - lp.f_norm.mean) * (1 - 1e-6));
    EXPECT_LE(std::abs(lp.cosine.mean), 1.0 + 1e-9);
  }
  EXPECT_NEAR(p.layers[0].input_grad_norm.mean, p.embed_grad_norm.mean, 1e-12);
  EXPECT_GT(p.layers.back().identity_share.mean, 0.5);  // deep in the stack the identity path dominates
}

TEST(ProbeIdentityShare, WithoutResidualTheIdentityTermIsZero) {
  auto r = normlab::probe_identity_share(small(), 4);
  ASSERT_EQ(r.runs.size(), 4u);  // pre, pre no-residual, post, post no-residual
  for (const ConfigProbe& p : r.runs) {
    for (const auto& lp : p.layers) {
      if (p.config.model.residual) {
        EXPECT_GT(lp.identity_share.mean, 0.0) << p.label;
        EXPECT_GT(lp.identity_norm.mean, 0.0) << p.label;
      } else {
        EXPECT_EQ(lp.identity_norm.mean, 0.0) << p.label;
        EXPECT_EQ(lp.identity_share.mean, 0.0) << p.label;
        EXPECT_TRUE(std::isnan(lp.cosine.mean)) << p.label;
        EXPECT_NEAR(lp.f_norm.mean, lp.input_grad_norm.mean, 1e-9 * lp.input_grad_norm.mean) << p.label;
      }
    }
  }
  // post: the identity path runs through the norms' Jacobians, so it is not dL/dy.
  const ConfigProbe& post = r.runs[2];
  EXPECT_EQ(post.config.model.placement, normlab::Placement::post);
  EXPECT_GT(std::abs(post.layers[1].identity_norm.mean / post.layers[1].stream_grad_norm.mean - 1.0), 0.05);
}

// ---- probe_config --------------------------------------------------------------------------

TEST(ProbeConfig, DefaultToyModelAndSeeds) {
  TrainConfig c;  // toy, layernorm, pre, 6 layers
  ConfigProbe p = normlab::probe_config(c, small(3, 2));
  ASSERT_EQ(p.layers.size(), 6u);
  EXPECT_EQ(p.loss.n, 3);
  EXPECT_GT(p.loss.std, 0.0);  // the seeds differ
  EXPECT_NEAR(p.loss.mean, std::log(64.0), 0.3);
  for (const auto& lp : p.layers) {
    EXPECT_TRUE(std::isfinite(lp.act_norm.mean));
    EXPECT_GT(lp.block_grad_norm.mean, 0.0);
    EXPECT_GT(lp.fc2_grad_norm.mean, 0.0);
    EXPECT_LE(lp.fc2_grad_norm.mean, lp.block_grad_norm.mean);
  }
  ProbeOptions bad = small();
  bad.seeds = 0;
  EXPECT_THROW(normlab::probe_config(c, bad), normlab::UsageError);
  c.model.layers = 0;
  EXPECT_THROW(normlab::probe_config(c, small()), normlab::UsageError);
}

TEST(ProbeConfig, SummarizeIsMeanAndSampleStd) {
  auto s = normlab::summarize({1.0, 2.0, 3.0});
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.std, 1.0);
  EXPECT_EQ(normlab::summarize({5.0}).std, 0.0);
}

// ---- the CLI -------------------------------------------------------------------------------


// BatchNorm's statistics mix sequences, padding and the future; LayerNorm's and RMSNorm's do not:
// their changes are exactly 0 (computed by the ops, not assumed), BatchNorm's are not.
TEST(ProbeBatchNorm, BatchStatisticsMixWhatPerTokenNormsKeepApart) {
  normlab::BatchNormProbeResult r = normlab::probe_batchnorm(small(2));
  EXPECT_GT(r.pad_fraction.mean, 0.1);
  EXPECT_GT(r.pad_mean_shift.mean, 0.01);
  EXPECT_GT(r.pad_output_change.mean, 0.01);
  ASSERT_EQ(r.dependence.size(), 2u);
  for (const auto& d : r.dependence) {
    EXPECT_GT(d.bn_companions.mean, 1e-3) << d.batch;
    EXPECT_GT(d.bn_alone.mean, 1e-3) << d.batch;
    EXPECT_EQ(d.ln_companions.mean, 0.0) << d.batch;
    EXPECT_EQ(d.rms_companions.mean, 0.0) << d.batch;
  }
  EXPECT_GT(r.dependence[1].bn_companions.mean, r.dependence[0].bn_companions.mean);  // smaller batch, more noise
  ASSERT_EQ(r.train_vs_eval.size(), 3u);
  EXPECT_GT(r.train_vs_eval[0].gap.mean, r.train_vs_eval[2].gap.mean);  // running stats converge
  EXPECT_GT(r.bn_leak.mean, 0.0);
  EXPECT_EQ(r.ln_leak.mean, 0.0);
  EXPECT_EQ(r.rms_leak.mean, 0.0);
}

// ||dL/dW_fc2|| of the last block over the first's, computed here from the model alone: the gpt
// LayerNorm model of that init, width (d_hidden 2d, d/16 heads) and depth, one batch of `batch`
// sequences of the config's data at its seed, the mean cross-entropy's gradient.
namespace {
double fc2_last_over_first(normlab::InitScheme init, normlab::Placement placement, int64_t d, int64_t layers,
                           int64_t batch) {
  normlab::ThreadCountScope one(1);  // as the probe runs: the same sums in the same order
  TrainConfig c;
  c.model.model = normlab::ModelKind::gpt;
  c.model.norm = normlab::NormKind::layernorm;
  c.model.init = init;
  c.model.placement = placement;
  c.model.layers = layers;
  c.model.d_model = d;
  c.model.d_hidden = 2 * d;
  c.model.heads = d / 16;
  normlab::Model model(c.model, c.seed);
  normlab::Rng rng(c.seed, normlab::stream::data);
  const normlab::Batch b = normlab::make_data_source(c)->train_batch(rng, batch, c.model.seq_len);
  normlab::cross_entropy(model.forward(b.inputs), b.targets).backward();
  auto norm = [](const normlab::Tensor& g) {
    double ss = 0;
    for (double v : g.to_vector()) ss += v * v;
    return std::sqrt(ss);
  };
  return norm(model.blocks().back().mlp.fc2.w.grad()) / norm(model.blocks().front().mlp.fc2.w.grad());
}
}  // namespace

// Each row is its init, width and depth, in that order of nesting, and its two factors are the
// fc2 ratios of that model, Post-LN and Pre-LN, as computed above without the probe.
TEST(ProbeXiong, FactorTableOverInitsWidthsAndDepths) {
  const std::vector<normlab::InitScheme> inits = {normlab::InitScheme::torch, normlab::InitScheme::fairseq};
  normlab::XiongFactors f = normlab::probe_xiong_factors(small(1, 2), inits, {16, 32}, {2, 3});
  ASSERT_EQ(f.rows.size(), 8u);
  size_t i = 0;
  for (normlab::InitScheme init : inits)
    for (int64_t d : {16, 32})
      for (int64_t layers : {2, 3}) {
        const auto& r = f.rows[i++];
        EXPECT_EQ(r.init, init);
        EXPECT_EQ(r.d_model, d);
        EXPECT_EQ(r.layers, layers);
        EXPECT_EQ(r.post.n, 1);
        EXPECT_EQ(r.pre.n, 1);
        const double post = fc2_last_over_first(init, normlab::Placement::post, d, layers, 2);
        const double pre = fc2_last_over_first(init, normlab::Placement::pre, d, layers, 2);
        EXPECT_NEAR(r.post.mean, post, 1e-5 * post) << normlab::to_string(init) << " d=" << d << " L=" << layers;
        EXPECT_NEAR(r.pre.mean, pre, 1e-5 * pre) << normlab::to_string(init) << " d=" << d << " L=" << layers;
      }
  EXPECT_NE(f.summary.find("model width"), std::string::npos);
  EXPECT_THROW(normlab::probe_xiong_factors(small(1, 2), {normlab::InitScheme::torch}, {20}, {2}), normlab::UsageError);
}

TEST(ProbeConfig, LowPrecisionProbesAsATrainingStepStores) {
  // fp16 (with its loss scale, divided out again) and bf16 give the fp32 statistics to within
  // the formats' precision, and not bit for bit: the probe ran in them.
  normlab::TrainConfig c;
  const normlab::ConfigProbe f32 = normlab::probe_config(c, small(2, 2));
  for (normlab::Precision p : {normlab::Precision::fp16, normlab::Precision::bf16}) {
    c.precision = p;
    const normlab::ConfigProbe lp = normlab::probe_config(c, small(2, 2));
    ASSERT_EQ(lp.layers.size(), f32.layers.size());
    const double tol = p == normlab::Precision::fp16 ? 0.01 : 0.05;
    EXPECT_NEAR(lp.loss.mean, f32.loss.mean, tol * f32.loss.mean);
    EXPECT_NE(lp.loss.mean, f32.loss.mean);
    for (size_t l = 0; l < lp.layers.size(); ++l) {
      EXPECT_NEAR(lp.layers[l].act_norm.mean, f32.layers[l].act_norm.mean, tol * f32.layers[l].act_norm.mean);
      EXPECT_NEAR(lp.layers[l].block_grad_norm.mean, f32.layers[l].block_grad_norm.mean,
                  2 * tol * f32.layers[l].block_grad_norm.mean);
      EXPECT_NEAR(lp.layers[l].identity_share.mean, f32.layers[l].identity_share.mean, 2 * tol);
      EXPECT_NEAR(lp.layers[l].cosine.mean, f32.layers[l].cosine.mean, 0.1);
    }
  }
  EXPECT_EQ(normlab::storage_precision(), normlab::Precision::fp32);
}
