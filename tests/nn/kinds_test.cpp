// nn's name tables (nn_kinds.h): every value parses back from its printed name, in any case and
// by its aliases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "normlab/error.h"
#include "normlab/nn.h"
#include "normlab/nn_kinds.h"
#include "test_util.h"

using namespace normlab;

TEST(Names, NnEnumerationsRoundTrip) {
  EXPECT_EQ(test::names_round_trip_errors<ModelKind>(), "");
  EXPECT_EQ(test::names_round_trip_errors<FinalNorm>(), "");
  EXPECT_EQ(test::names_round_trip_errors<InitScheme>(), "");
  EXPECT_STREQ(to_string(FinalNorm::auto_), "auto");
}

// The final norm: its kind follows final_norm (auto by placement), a final norm alone on a no-norm
// model is a LayerNorm or RMSNorm with that norm's parameters and eps, and "on" without a block
// norm is refused instead of silently meaning none.
TEST(FinalNorm, KindParametersAndEps) {
  ModelConfig c;
  c.layers = 2;
  c.d_model = 8;
  c.d_hidden = 16;
  c.norm = NormKind::none;
  c.placement = Placement::pre;
  c.final_norm = FinalNorm::auto_;
  EXPECT_EQ(c.final_norm_kind(), NormKind::none);
  c.final_norm = FinalNorm::layernorm;
  EXPECT_EQ(c.final_norm_kind(), NormKind::layernorm);
  EXPECT_EQ(c.final_eps(), default_eps(NormKind::layernorm));
  {
    Model m(c, 0);
    std::vector<std::string> names;
    for (const Tensor& p : m.params().all()) names.push_back(p.name());
    EXPECT_NE(std::find(names.begin(), names.end(), "final_norm.gamma"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "final_norm.beta"), names.end());
    EXPECT_EQ(std::count_if(names.begin(), names.end(), [](const std::string& n) { return n.find("norm1") != std::string::npos; }), 0);
  }
  c.final_norm = FinalNorm::rmsnorm;
  EXPECT_EQ(c.final_norm_kind(), NormKind::rmsnorm);
  EXPECT_EQ(c.final_eps(), default_eps(NormKind::rmsnorm));
  c.final_norm = FinalNorm::on;
  EXPECT_THROW(c.validate(), UsageError);
  c.norm = NormKind::rmsnorm;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.final_norm_kind(), NormKind::rmsnorm);
  c.final_norm = FinalNorm::auto_;
  c.placement = Placement::post;
  EXPECT_EQ(c.final_norm_kind(), NormKind::none);
  c.final_norm = FinalNorm::layernorm;  // the blocks' RMSNorm, a final LayerNorm
  EXPECT_EQ(c.final_norm_kind(), NormKind::layernorm);
}

// norm_eps 0 is each norm's default_eps, and that default is what the model's norms divide with:
// every norm of every block (sandwich has four) and the final norm hold it, and a row whose mean
// square equals it comes out at 1/sqrt(2) of its normalized value (with another eps it would not).
// A given norm_eps replaces it everywhere.
TEST(NormEps, TheDefaultIsWhatTheModelsNormsDivideWith) {
  for (NormKind k : kind_values<NormKind>()) {
    if (!has_eps(k)) continue;
    for (double given : {0.0, 1e-3}) {
      ModelConfig c;
      c.layers = 2;
      c.d_model = 8;
      c.d_hidden = 16;
      c.norm = k;
      c.placement = Placement::sandwich;
      c.norm_eps = given;
      const Model m(c, 0);
      const double eps = given > 0 ? given : default_eps(k);
      std::vector<const Norm*> norms = {&m.final_norm()};
      for (const Block& b : m.blocks())
        for (const Norm* n : {&b.norm1, &b.norm2, &b.norm1b, &b.norm2b}) norms.push_back(n);
      for (const Norm* n : norms) {
        EXPECT_EQ(n->kind, k) << to_string(k);
        EXPECT_EQ(n->eps, eps) << to_string(k) << " norm_eps " << given;
      }
      // The closed form below is LayerNorm's and RMSNorm's (a norm whose gain depends on the row has none).
      if (k != NormKind::layernorm && k != NormKind::rmsnorm) continue;
      // x = +-a, mean 0 and mean square a^2 = eps: y = gamma * x / sqrt(a^2 + eps) + beta.
      const double a = std::sqrt(eps);
      std::vector<double> x;
      for (int i = 0; i < 8; ++i) x.push_back(i % 2 ? -a : a);
      const Norm& n = m.blocks()[1].norm2b;
      const std::vector<double> y = n(Tensor::from(x, {1, 8})).to_vector(), gamma = n.param("gamma").to_vector();
      const std::vector<double> beta = k == NormKind::layernorm ? n.param("beta").to_vector() : std::vector<double>(8, 0.0);
      for (size_t i = 0; i < 8; ++i)
        EXPECT_NEAR(y[i], gamma[i] * x[i] / std::sqrt(2 * eps) + beta[i], 1e-5) << to_string(k) << " norm_eps " << given << " " << i;
    }
  }
}
