// block_forward is the one definition of every placement: the model's blocks (sublayers live) and
// probe's identity path (sublayers held constant) must compute the same values, and holding the
// sublayers must leave exactly the identity path: none for a block without a skip connection,
// the identity itself for a pre-norm block.
#include <gtest/gtest.h>

#include <string>

#include "normlab/autograd.h"
#include "normlab/nn.h"
#include "normlab/ops.h"
#include "test_util.h"

using namespace normlab;

namespace {

struct BlockCase {
  ModelKind model;
  NormKind norm;
  Placement placement;
  bool skip;
  std::string name() const {
    return std::string(to_string(model)) + "-" + to_string(norm) + "-" + to_string(placement) + (skip ? "" : "-noskip");
  }
};

std::vector<BlockCase> all_cases() {
  std::vector<BlockCase> cases;
  for (ModelKind model : {ModelKind::toy, ModelKind::gpt})
    for (NormKind n : {NormKind::none, NormKind::layernorm, NormKind::rmsnorm, NormKind::dyt, NormKind::derf})
      for (Placement p : {Placement::pre, Placement::post, Placement::sandwich, Placement::deepnorm, Placement::postsub,
                          Placement::mixln})
        for (bool skip : {true, false}) cases.push_back({model, n, p, skip});
  return cases;
}

// A block of case c with the given sizes, its parameters drawn from init_seed.
Block make_case_block(ParamList& params, const BlockCase& c, int64_t d, int64_t hidden, uint64_t init_seed) {
  ModelConfig cfg;
  cfg.model = c.model;
  cfg.norm = c.norm;
  cfg.placement = c.placement;
  cfg.residual = c.skip;
  cfg.layers = 3;
  cfg.d_model = d;
  cfg.d_hidden = hidden;
  cfg.heads = 2;
  Init init{Rng(init_seed, stream::init), DType::f32};
  return make_block(params, "b", cfg, init);
}

Tensor random_input(uint64_t seed, const Shape& shape) {
  Rng rng(seed, stream::data);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = rng.normal(0.0, 1.0);
  return Tensor::from(v, shape, DType::f32);
}

}  // namespace

TEST(BlockForward, LiveAndHeldSublayersComputeTheSameValues) {
  for (const BlockCase& c : all_cases()) {
    ParamList params;
    Block b = make_case_block(params, c, 16, 24, 7);
    Tensor x = random_input(3, {2, 5, 16});
    const std::vector<double> live = b(x).to_vector();
    const std::vector<double> held = block_forward(b, x, Sublayers::held).to_vector();
    // The fused epilogue adds in the product's accumulator, the held path in a separate op.
    test::expect_close(held, live, 1e-6, 1e-6, c.name());
  }
}

TEST(BlockForward, HeldSublayersLeaveOnlyTheIdentityPath) {
  for (const BlockCase& c : all_cases()) {
    ParamList params;
    Block b = make_case_block(params, c, 8, 8, 11);
    Tensor x = random_input(5, {1, 3, 8});
    x.requires_grad_(true);
    Tensor seed = random_input(9, {1, 3, 8});
    Tensor y = block_forward(b, x, Sublayers::held);
    if (!c.skip) {
      // Nothing of x reaches the output once the sublayers are constants (a norm's gain may
      // still want a gradient).
      if (y.requires_grad()) y.backward(seed);
      EXPECT_FALSE(x.grad().defined()) << c.name();
      continue;
    }
    ASSERT_TRUE(y.requires_grad()) << c.name();
    y.backward(seed);
    const std::vector<double> dx = x.grad().to_vector();
    // Block 0 of a 3-layer mixln model is Pre-LN (3 / 4 = 0 post blocks).
    if (c.placement == Placement::pre || c.placement == Placement::sandwich || c.placement == Placement::postsub ||
        c.placement == Placement::mixln || c.norm == NormKind::none) {
      // x + F(N(x)) (pre), x + N_b(F(N(x))) (sandwich) and x + N(F(x)) (postsub) with the branch
      // held: d/dx is the identity, the upstream gradient exactly.
      EXPECT_EQ(dx, seed.to_vector()) << c.name();
    } else if (c.placement == Placement::post || c.placement == Placement::deepnorm) {
      // N(alpha x + F): the identity path runs through the norms' Jacobians.
      double diff = 0;
      const std::vector<double> s = seed.to_vector();
      for (size_t i = 0; i < s.size(); ++i) diff += std::abs(dx[i] - s[i]);
      EXPECT_GT(diff, 1e-3) << c.name();
    } else {
      ADD_FAILURE() << c.name() << ": a placement this test does not know";
    }
  }
}
