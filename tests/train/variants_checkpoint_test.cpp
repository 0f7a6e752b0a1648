// Every variant's checkpoint (docs/variants.md) round-trips through safetensors.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "normlab/autograd.h"
#include "normlab/checkpoint.h"
#include "normlab/nn.h"
#include "test_util.h"
#include "variants_fixture.h"

using namespace normlab;
using normlab::test::ids_of;
using normlab::test::loss_of;
namespace fs = std::filesystem;

// Every variant's checkpoint loads back into a model of its config with the same loss, and a
// plain Pre-LN model refuses it by name where the variant's parameters differ (Mix-LN and LayerNorm
// Scaling have Pre-LN's parameters: their checkpoints are interchangeable by design).
TEST(VariantCheckpoints, RoundTripAndRefuseAnotherVariant) {
  const std::vector<std::function<void(ModelConfig&)>> same_params = {
      [](ModelConfig& c) { c.placement = Placement::mixln; },
      [](ModelConfig& c) { c.ln_scaling = true; },
  };
  std::vector<std::function<void(ModelConfig&)>> variants = {
      [](ModelConfig& c) { c.norm = NormKind::dyt; },
      [](ModelConfig& c) { c.norm = NormKind::derf; c.placement = Placement::post; },
      [](ModelConfig& c) { c.norm = NormKind::none; c.residual_scale = ResidualScale::rezero; },
      [](ModelConfig& c) { c.residual_scale = ResidualScale::skipinit; },
      [](ModelConfig& c) { c.residual_scale = ResidualScale::layerscale; },
      [](ModelConfig& c) { c.placement = Placement::postsub; c.norm = NormKind::rmsnorm; },
      [](ModelConfig& c) { c.model = ModelKind::gpt; c.qk_norm = true; c.norm = NormKind::rmsnorm; c.gemma_norm = true; },
      [](ModelConfig& c) { c.placement = Placement::sandwich; c.embed_norm = true; },
  };
  const fs::path dir = test::fresh_dir("variants_ckpt");
  fs::create_directories(dir);
  const size_t own = variants.size();
  variants.insert(variants.end(), same_params.begin(), same_params.end());
  size_t i = 0;
  for (auto& v : variants) {
    ModelConfig c = test::small_variant_config();
    v(c);
    Model a(c, 21);
    // Move every parameter off its init, so that a load that skipped one would show.
    Rng rng(5, stream::check);
    for (const Tensor& t : a.params().all()) {
      std::vector<double> x = t.to_vector();
      for (double& e : x) e += 0.05 * rng.normal();
      Tensor(t).copy_(Tensor::from(x, t.shape(), DType::f32));
    }
    const std::string path = (dir / ("m" + std::to_string(i++) + ".safetensors")).string();
    save_safetensors(path, model_state(a), {});
    Model b(c, 99);
    load_model_state(b, load_safetensors(path), path);
    EXPECT_EQ(loss_of(b, 3), loss_of(a, 3)) << path;
    Model other(test::small_variant_config(), 1);
    if (i <= own) {
      EXPECT_THROW(load_model_state(other, load_safetensors(path), path), UsageError) << path;
    } else {
      EXPECT_NO_THROW(load_model_state(other, load_safetensors(path), path)) << path;
    }
  }
  fs::remove_all(dir);
}

// Gemma's w and a plain gamma are both saved as `.weight`: a checkpoint normlab wrote says which
// form it holds (its normlab_config), and a model of the other form refuses it, naming the
// conversion; a checkpoint without normlab's config (PyTorch's) cannot say and loads as it is.
TEST(VariantCheckpoints, GemmaAndPlainGainsRefuseEachOther) {
  const fs::path dir = test::fresh_dir("variants_gain_ckpt");
  fs::create_directories(dir);
  ModelConfig plain = test::small_variant_config();
  plain.norm = NormKind::rmsnorm;
  ModelConfig gemma = plain;
  gemma.gemma_norm = true;
  for (const bool saved_gemma : {false, true}) {
    Model a(saved_gemma ? gemma : plain, 21);
    const std::string path = (dir / (saved_gemma ? "gemma.safetensors" : "plain.safetensors")).string();
    save_safetensors(path, model_state(a),
                     {{"format", "pt"}, {"normlab_config", saved_gemma ? R"({"gemma_norm": true})" : R"({"norm": "rmsnorm"})"}});
    Model same(saved_gemma ? gemma : plain, 99);
    EXPECT_NO_THROW(load_model_state(same, load_safetensors(path), path));
    EXPECT_EQ(loss_of(same, 3), loss_of(a, 3));
    Model across(saved_gemma ? plain : gemma, 99);
    try {
      load_model_state(across, load_safetensors(path), path);
      ADD_FAILURE() << path << " loaded into a model of the other gain form";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(saved_gemma ? "--gain plain" : "--gain gemma"), std::string::npos) << e.what();
    }
    const std::string bare = path + ".bare.safetensors";
    save_safetensors(bare, model_state(a), {{"format", "pt"}});
    Model other(saved_gemma ? plain : gemma, 99);
    EXPECT_NO_THROW(load_model_state(other, load_safetensors(bare), bare));
  }
  fs::remove_all(dir);
}
