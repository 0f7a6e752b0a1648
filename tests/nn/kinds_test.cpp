// nn's name tables (nn_kinds.h): every value parses back from its printed name, in any case and
// by its aliases.
#include <gtest/gtest.h>

#include <algorithm>

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
