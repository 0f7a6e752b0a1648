// nanoGPT's model options: bias false (no linear's bias, no norm's beta) and tie_embeddings (the
// head is the token embedding). Under gpt2's init biases and betas start at zero and are drawn
// from no random numbers, so a model without them computes what the model with them computes at
// initialisation, bit for bit.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "normlab/autograd.h"
#include "normlab/nn.h"

using namespace normlab;

namespace {

ModelConfig small_gpt(Placement placement) {
  ModelConfig c;
  c.model = ModelKind::gpt;
  c.layers = 2;
  c.d_model = 16;
  c.d_hidden = 32;
  c.heads = 2;
  c.vocab = 11;
  c.seq_len = 6;
  c.placement = placement;
  return c;
}

std::set<std::string> names(Model& m) {
  std::set<std::string> out;
  for (const Tensor& p : m.params().all()) out.insert(p.name());
  return out;
}

Tensor ids() {
  std::vector<int32_t> v;
  for (int i = 0; i < 12; ++i) v.push_back((i * 7 + 3) % 11);
  return Tensor::from_ids(v, {2, 6});
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST(ModelRecipe, BiasFalseDropsEveryBiasAndBetaAndNothingElse) {
  for (Placement pl : {Placement::pre, Placement::post, Placement::sandwich}) {
    ModelConfig with = small_gpt(pl), without = small_gpt(pl);
    without.bias = false;
    Model a(with, 3), b(without, 3);
    std::set<std::string> want;
    for (const std::string& n : names(a))
      if (!ends_with(n, ".b") && !ends_with(n, ".beta")) want.insert(n);
    EXPECT_EQ(names(b), want) << to_string(pl);
    EXPECT_LT(names(b).size(), names(a).size());
    NoGradGuard no_grad;
    EXPECT_EQ(a.forward(ids()).to_vector(), b.forward(ids()).to_vector()) << to_string(pl);
  }
}

TEST(ModelRecipe, TiedEmbeddingsAreOneTensorReadTwice) {
  ModelConfig c = small_gpt(Placement::pre);
  c.tie_embeddings = true;
  Model m(c, 5);
  EXPECT_EQ(names(m).count("head.w"), 0u);
  EXPECT_EQ(m.head().w.data<float>(), m.params().all()[0].data<float>());  // tok_emb, the same storage
  ModelConfig untied = small_gpt(Placement::pre);
  Model u(untied, 5);
  EXPECT_EQ(m.params().count() + c.vocab * c.d_model, u.params().count());
}
