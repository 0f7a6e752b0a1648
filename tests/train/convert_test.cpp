// LayerNorm -> RMSNorm: the exact method preserves the model's logits (to rounding) on random
// inputs, toy and gpt; the naive one does not once beta is non-zero; placements the exact method
// cannot handle are refused with the reason.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/autograd.h"
#include "normlab/checkpoint.h"
#include "normlab/convert.h"
#include "normlab/error.h"

using namespace normlab;

namespace {

// A trained-looking LayerNorm model: every gain, beta and bias drawn away from its init.
ModelConfig ln_config(ModelKind model, DType dtype) {
  ModelConfig c;
  c.model = model;
  c.norm = NormKind::layernorm;
  c.placement = Placement::pre;
  c.layers = 3;
  c.d_model = 16;
  c.d_hidden = 24;
  c.heads = 2;
  c.qk_norm = model == ModelKind::gpt;
  c.dtype = dtype;
  return c;
}

void perturb(Model& m) {
  Rng rng(99, stream::check);
  for (const Tensor& p : m.params().all()) {
    std::vector<double> v = p.to_vector();
    for (double& x : v) x += rng.normal(0.0, 0.3);
    Tensor dst = p;
    dst.copy_(Tensor::from(v, p.shape(), p.dtype()));
  }
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return diff / scale;
}

Tensor random_ids(uint64_t seed) {
  Rng rng(seed, stream::data);
  std::vector<int32_t> ids(3 * 16);
  for (int32_t& i : ids) i = int32_t(rng.below(64));
  return Tensor::from_ids(ids, {3, 16});
}

// Logits of the LayerNorm model and of its conversion on the same ids.
double conversion_error(ModelKind kind, DType dtype, ConvertMethod method) {
  Model src(ln_config(kind, dtype), 3);
  perturb(src);
  Conversion conv = convert_layernorm_to_rmsnorm(src, method);
  Model dst(conv.config, 0);
  load_model_state(dst, SafetensorsFile{{}, conv.state}, "converted");
  NoGradGuard no_grad;
  Tensor ids = random_ids(5);
  return max_rel_diff(dst.forward(ids), src.forward(ids));
}

}  // namespace

TEST(ConvertLnToRms, ExactPreservesTheLogits) {
  for (ModelKind kind : {ModelKind::toy, ModelKind::gpt}) {
    SCOPED_TRACE(to_string(kind));
    EXPECT_LT(conversion_error(kind, DType::f64, ConvertMethod::exact), 1e-12);  // float64: rounding only
    EXPECT_LT(conversion_error(kind, DType::f32, ConvertMethod::exact), 1e-5);   // float32 rounding
  }
}

TEST(ConvertLnToRms, NaiveDoesNotOnceBetaIsNonZero) {
  for (ModelKind kind : {ModelKind::toy, ModelKind::gpt})
    EXPECT_GT(conversion_error(kind, DType::f64, ConvertMethod::naive), 1e-2) << to_string(kind);
}

TEST(ConvertLnToRms, RefusalsNameTheReason) {
  for (Placement pl : {Placement::post, Placement::sandwich, Placement::deepnorm}) {
    ModelConfig c = ln_config(ModelKind::toy, DType::f32);
    c.placement = pl;
    EXPECT_NE(conversion_refusal(c, ConvertMethod::exact).find(to_string(pl)), std::string::npos);
    EXPECT_EQ(conversion_refusal(c, ConvertMethod::naive), "");
    Model m(c, 1);
    EXPECT_THROW(convert_layernorm_to_rmsnorm(m, ConvertMethod::exact), UsageError);
  }
  ModelConfig off = ln_config(ModelKind::toy, DType::f32);
  off.final_norm = FinalNorm::off;
  EXPECT_NE(conversion_refusal(off, ConvertMethod::exact).find("final norm is off"), std::string::npos);
  // A tied head is the embedding the exact method centres; the naive one leaves both alone.
  ModelConfig tied = ln_config(ModelKind::gpt, DType::f32);
  tied.tie_embeddings = true;
  EXPECT_NE(conversion_refusal(tied, ConvertMethod::exact).find("tie_embeddings"), std::string::npos);
  EXPECT_EQ(conversion_refusal(tied, ConvertMethod::naive), "");
  Model tied_model(tied, 1);
  EXPECT_THROW(convert_layernorm_to_rmsnorm(tied_model, ConvertMethod::exact), UsageError);
  EXPECT_NO_THROW(convert_layernorm_to_rmsnorm(tied_model, ConvertMethod::naive));
  ModelConfig nobias = ln_config(ModelKind::gpt, DType::f32);
  nobias.bias = false;
  EXPECT_NE(conversion_refusal(nobias, ConvertMethod::exact).find("bias false"), std::string::npos);
  Model nobias_model(nobias, 1);
  EXPECT_NO_THROW(convert_layernorm_to_rmsnorm(nobias_model, ConvertMethod::naive));
  ModelConfig rms = ln_config(ModelKind::toy, DType::f32);
  rms.norm = NormKind::rmsnorm;
  EXPECT_NE(conversion_refusal(rms, ConvertMethod::naive).find("not layernorm"), std::string::npos);
}

namespace {

Model from_conversion(const Conversion& conv) {
  Model m(conv.config, 0);
  load_model_state(m, SafetensorsFile{{}, conv.state}, "converted");
  return m;
}

}  // namespace

// RMSNorm -> LayerNorm with beta = 0 is exact when every norm sees zero-mean input: the round trip
// LN -> RMS (exact) -> LN (beta 0) gives the original logits, and then the naive LN -> RMS of that
// model is exact too (beta 0, centred stream). A generic RMSNorm model's stream is not centred,
// and there the mapping is not exact.
TEST(ConvertRmsToLn, ExactOnACentredStreamAndOnlyThere) {
  for (ModelKind kind : {ModelKind::toy, ModelKind::gpt}) {
    SCOPED_TRACE(to_string(kind));
    Model src(ln_config(kind, DType::f64), 3);
    perturb(src);
    EXPECT_FALSE(stream_centred(src));
    Model rms = from_conversion(convert_layernorm_to_rmsnorm(src, ConvertMethod::exact));
    EXPECT_TRUE(stream_centred(rms));
    Model back = from_conversion(convert_rmsnorm_to_layernorm(rms));
    EXPECT_EQ(back.config().norm, NormKind::layernorm);
    Model again = from_conversion(convert_layernorm_to_rmsnorm(back, ConvertMethod::naive));
    NoGradGuard no_grad;
    const Tensor ids = random_ids(7);
    const Tensor want = src.forward(ids);
    EXPECT_LT(max_rel_diff(back.forward(ids), want), 1e-12);
    EXPECT_LT(max_rel_diff(again.forward(ids), want), 1e-12);

    ModelConfig rc = ln_config(kind, DType::f64);
    rc.norm = NormKind::rmsnorm;
    Model generic(rc, 4);
    perturb(generic);
    EXPECT_FALSE(stream_centred(generic));
    Model as_ln = from_conversion(convert_rmsnorm_to_layernorm(generic));
    EXPECT_GT(max_rel_diff(as_ln.forward(ids), generic.forward(ids)), 1e-2);
  }
  Model ln(ln_config(ModelKind::toy, DType::f32), 1);
  EXPECT_THROW(convert_rmsnorm_to_layernorm(ln), UsageError);
}

// Gemma's gains (1 + w) and back: the same logits, bit for bit where every gain is in [0.5, 2]
// (drawn there), and every parameter back as it was.
TEST(ConvertGain, GemmaAndBackPreserveTheLogitsAndTheParameters) {
  for (ModelKind kind : {ModelKind::toy, ModelKind::gpt}) {
    ModelConfig c = ln_config(kind, DType::f32);
    c.norm = NormKind::rmsnorm;
    Model src(c, 3);
    perturb(src);
    Rng rng(4, stream::check);
    for (const Tensor& p : src.params().all()) {
      if (p.name().find("gamma") == std::string::npos) continue;
      std::vector<double> g(static_cast<size_t>(p.numel()));
      for (double& x : g) x = rng.uniform(0.5, 2.0);
      Tensor dst = p;
      dst.copy_(Tensor::from(g, p.shape(), p.dtype()));
    }
    Conversion gemma = convert_gain_parametrization(src, true);
    EXPECT_TRUE(gemma.config.gain_offset());
    Model dst(gemma.config, 0);
    load_model_state(dst, SafetensorsFile{{}, gemma.state}, "gemma");
    NoGradGuard no_grad;
    Tensor ids = random_ids(5);
    EXPECT_EQ(dst.forward(ids).to_vector(), src.forward(ids).to_vector()) << to_string(kind);
    Conversion back = convert_gain_parametrization(dst, false);
    EXPECT_FALSE(back.config.gemma_norm.has_value());
    const auto original = model_state(src);
    ASSERT_EQ(back.state.size(), original.size());
    for (size_t i = 0; i < original.size(); ++i) {
      EXPECT_EQ(back.state[i].first, original[i].first);
      EXPECT_EQ(back.state[i].second.to_vector(), original[i].second.to_vector()) << original[i].first;
    }
    EXPECT_THROW(convert_gain_parametrization(src, false), UsageError);  // already plain
  }
  ModelConfig dyt = ln_config(ModelKind::toy, DType::f32);
  dyt.norm = NormKind::dyt;
  Model d(dyt, 1);
  EXPECT_THROW(convert_gain_parametrization(d, true), UsageError);
}
