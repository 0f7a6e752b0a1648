// The normalization variants after the article (docs/variants.md): what each builds (parameter
// names, values at init, per-block placements and scales), what holds at init by construction
// (ReZero's identity blocks, Gemma's gain equal to the plain one). Their checkpoints:
// tests/train/variants_checkpoint_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "normlab/autograd.h"
#include "normlab/nn.h"
#include "normlab/ops.h"
#include "test_util.h"
#include "variants_fixture.h"

using namespace normlab;
using normlab::test::ids_of;
using normlab::test::loss_of;

namespace {

std::map<std::string, Tensor> by_name(Model& m) {
  std::map<std::string, Tensor> out;
  for (const Tensor& p : m.params().all()) out[p.name()] = p;
  return out;
}

bool all_equal(const Tensor& t, double v) {
  for (double x : t.to_vector())
    if (x != v) return false;
  return true;
}

}  // namespace

TEST(Variants, DytAndDerfParametersAtInit) {
  ModelConfig c = test::small_variant_config();
  c.norm = NormKind::dyt;
  c.dyt_alpha = 0.8;
  Model dyt(c, 1);
  auto p = by_name(dyt);
  ASSERT_TRUE(p.count("blocks.0.norm1.alpha"));
  EXPECT_EQ(p["blocks.0.norm1.alpha"].shape(), Shape({1}));
  EXPECT_FLOAT_EQ(static_cast<float>(p["blocks.0.norm1.alpha"].item()), 0.8f);
  EXPECT_TRUE(all_equal(p["blocks.2.norm2.gamma"], 1.0));
  EXPECT_TRUE(all_equal(p["blocks.2.norm2.beta"], 0.0));
  EXPECT_FALSE(p.count("blocks.0.norm1.shift"));
  // Pre-DyT: the final norm is DyT too, as the paper replaces every norm.
  EXPECT_TRUE(p.count("final_norm.alpha"));

  c.norm = NormKind::derf;
  c.dyt_alpha.reset();
  Model derf(c, 1);
  auto q = by_name(derf);
  EXPECT_FLOAT_EQ(static_cast<float>(q["blocks.1.norm1.alpha"].item()), 0.5f);
  ASSERT_TRUE(q.count("blocks.1.norm1.shift"));
  EXPECT_EQ(q["blocks.1.norm1.shift"].item(), 0.0);
}

TEST(Variants, ResidualScalesAtInit) {
  ModelConfig c = test::small_variant_config();
  c.norm = NormKind::none;
  c.residual_scale = ResidualScale::rezero;
  Model rz(c, 2);
  auto p = by_name(rz);
  EXPECT_EQ(p["blocks.3.rezero.alpha"].shape(), Shape({1}));
  EXPECT_EQ(p["blocks.3.rezero.alpha"].item(), 0.0);
  // One scalar per block, shared by its two sublayers (ReZero's resweight).
  EXPECT_EQ(rz.blocks()[0].branch_scale1.raw(), rz.blocks()[0].branch_scale2.raw());

  c.norm = NormKind::layernorm;
  c.residual_scale = ResidualScale::skipinit;
  Model si(c, 2);
  auto s = by_name(si);
  EXPECT_TRUE(s.count("blocks.0.skip1.alpha") && s.count("blocks.0.skip2.alpha"));

  // LayerScale: CaiT's init by depth, unless layerscale_init says otherwise.
  c.residual_scale = ResidualScale::layerscale;
  for (auto [layers, want] : {std::pair<int64_t, double>{6, 0.1}, {18, 0.1}, {20, 1e-5}, {24, 1e-5}, {25, 1e-6}}) {
    c.layers = layers;
    EXPECT_EQ(c.layerscale_value(), want) << layers;
  }
  c.layers = 4;
  c.layerscale_init = 0.25;
  Model ls(c, 2);
  auto l = by_name(ls);
  EXPECT_EQ(l["blocks.1.ls2.lambda"].shape(), Shape({16}));
  EXPECT_TRUE(all_equal(l["blocks.1.ls2.lambda"], 0.25));
}

// ReZero at init: every block is the identity (a = 0), whatever its sublayers compute.
TEST(Variants, ReZeroBlocksAreTheIdentityAtInit) {
  for (ModelKind model : {ModelKind::toy, ModelKind::gpt}) {
    ModelConfig c = test::small_variant_config(5);
    c.model = model;
    c.norm = NormKind::none;
    c.residual_scale = ResidualScale::rezero;
    Model m(c, 3);
    ForwardTrace trace;
    NoGradGuard no_grad;
    m.forward(ids_of(4, 2, c.seq_len, c.vocab), &trace);
    const std::vector<double> e = trace.embed.to_vector();
    for (const Tensor& out : trace.block_out) EXPECT_EQ(out.to_vector(), e) << to_string(model);
  }
}

TEST(Variants, MixLnIsPostInTheFirstBlocksAndPreAfter) {
  ModelConfig c = test::small_variant_config(8);
  c.placement = Placement::mixln;
  Model m(c, 5);
  for (int64_t l = 0; l < 8; ++l)
    EXPECT_EQ(m.blocks()[static_cast<size_t>(l)].placement, l < 2 ? Placement::post : Placement::pre) << l;
  EXPECT_TRUE(m.config().final_norm_on());  // its last blocks are Pre-LN
  c.mix_post_layers = 3;
  Model m3(c, 5);
  for (int64_t l = 0; l < 8; ++l)
    EXPECT_EQ(m3.blocks()[static_cast<size_t>(l)].placement, l < 3 ? Placement::post : Placement::pre) << l;
}

TEST(Variants, LayerNormScalingScalesBlockLByOneOverSqrtL) {
  ModelConfig c = test::small_variant_config(6);
  c.ln_scaling = true;
  Model m(c, 6);
  for (size_t l = 0; l < 6; ++l) {
    EXPECT_DOUBLE_EQ(m.blocks()[l].norm1.scale, 1.0 / std::sqrt(double(l + 1))) << l;
    EXPECT_DOUBLE_EQ(m.blocks()[l].norm2.scale, 1.0 / std::sqrt(double(l + 1))) << l;
  }
  EXPECT_EQ(m.final_norm().scale, 1.0);
  // The norm's output is scaled: block l's norm equals the plain LayerNorm divided by sqrt(l).
  Tensor x = Tensor::from(std::vector<double>{1, -2, 3, 0.5, 2, -1, 0, 4}, {2, 4}, DType::f32);
  Norm plain = m.blocks()[3].norm1;
  plain.scale = 1.0;
  Norm gamma4 = plain;
  gamma4.params = {Tensor::full({4}, 1.0, DType::f32), Tensor::full({4}, 0.0, DType::f32)};  // LayerNorm's gamma, beta
  Norm scaled = gamma4;
  scaled.scale = 0.5;
  const std::vector<double> a = gamma4(x).to_vector(), b = scaled(x).to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(static_cast<float>(b[i]), static_cast<float>(a[i] * 0.5));
  // The paper drops GPT-2's scaled init of the residual projections; so does normlab.
  auto p = by_name(m);
  ModelConfig plain_cfg = test::small_variant_config(6);
  Model unscaled(plain_cfg, 6);
  auto q = by_name(unscaled);
  const double with = std::sqrt(sum_squares(p["blocks.0.mlp.fc2.w"]) / double(p["blocks.0.mlp.fc2.w"].numel()));
  const double without = std::sqrt(sum_squares(q["blocks.0.mlp.fc2.w"]) / double(q["blocks.0.mlp.fc2.w"].numel()));
  EXPECT_NEAR(with / without, std::sqrt(12.0), 0.5);  // 0.02 against 0.02 / sqrt(2L), L = 6
}

// Gemma's gain 1 + w with w = gamma - 1 is the plain model (gammas in [0.5, 2] make w exact).
TEST(Variants, GemmaGainEqualsThePlainGain) {
  for (ModelKind model : {ModelKind::toy, ModelKind::gpt}) {
    ModelConfig c = test::small_variant_config();
    c.model = model;
    c.norm = NormKind::rmsnorm;
    c.qk_norm = model == ModelKind::gpt;
    Model plain(c, 7);
    Rng rng(9, stream::check);
    for (const Tensor& t : plain.params().all()) {
      const std::string& n = t.name();
      if (n.size() > 6 && n.compare(n.size() - 6, 6, ".gamma") == 0) {
        std::vector<double> v(static_cast<size_t>(t.numel()));
        for (double& x : v) x = rng.uniform(0.6, 1.8);
        Tensor(t).copy_(Tensor::from(v, t.shape(), DType::f32));
      }
    }
    c.gemma_norm = true;
    Model gemma(c, 7);
    auto src = by_name(plain);
    int offsets = 0;
    for (const Tensor& t : gemma.params().all()) {
      const std::string& n = t.name();
      if (n.size() > 2 && n.compare(n.size() - 2, 2, ".w") == 0 && src.count(n.substr(0, n.size() - 2) + ".gamma")) {
        std::vector<double> v = src[n.substr(0, n.size() - 2) + ".gamma"].to_vector();
        for (double& x : v) x -= 1.0;
        Tensor(t).copy_(Tensor::from(v, t.shape(), DType::f32));
        ++offsets;
        continue;
      }
      ASSERT_TRUE(src.count(n)) << n;
      Tensor(t).copy_(src[n]);
    }
    EXPECT_EQ(offsets, model == ModelKind::gpt ? 4 * 4 + 1 : 4 * 2 + 1);
    EXPECT_EQ(loss_of(gemma, 11), loss_of(plain, 11)) << to_string(model);
  }
}

TEST(Variants, EmbedNormNormalizesTheStreamEnteringBlockZero) {
  ModelConfig c = test::small_variant_config();
  c.norm = NormKind::rmsnorm;
  c.placement = Placement::sandwich;
  c.embed_norm = true;
  Model m(c, 8);
  ASSERT_TRUE(by_name(m).count("embed_norm.gamma"));
  ForwardTrace trace;
  NoGradGuard no_grad;
  m.forward(ids_of(2, 2, c.seq_len, c.vocab), &trace);
  const std::vector<double> e = trace.embed.to_vector();
  for (size_t row = 0; row < e.size() / 16; ++row) {
    double ms = 0;
    for (size_t j = 0; j < 16; ++j) ms += e[row * 16 + j] * e[row * 16 + j];
    // RMSNorm with gain 1: unit RMS, less eps's share of the embeddings' tiny mean square
    // (1e-6 against ~2 * 0.02^2 = 8e-4).
    EXPECT_NEAR(ms / 16, 1.0, 5e-3) << row;
  }
  EXPECT_EQ(parse_kind<Placement>("peri"), Placement::sandwich);
  EXPECT_EQ(parse_kind<Placement>("olmo2"), Placement::postsub);
}
