// Dropout (ops.h, DropoutScope): the identity outside a scope; inside one, each call its own mask
// at the scope's rate, the kept values scaled by 1 / (1 - rate); a scope made again with the same
// key draws the same masks; a model's loss changes under it and its evaluation does not.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/autograd.h"
#include "normlab/nn.h"
#include "normlab/ops.h"

using namespace normlab;

namespace {

Tensor ones(int64_t n) { return Tensor::full({n}, 1.0, DType::f32); }

ModelConfig small_gpt() {
  ModelConfig c;
  c.model = ModelKind::gpt;
  c.layers = 2;
  c.d_model = 16;
  c.d_hidden = 32;
  c.heads = 2;
  c.vocab = 11;
  c.seq_len = 6;
  return c;
}

Tensor ids() {
  std::vector<int32_t> v;
  for (int i = 0; i < 12; ++i) v.push_back((i * 7 + 3) % 11);
  return Tensor::from_ids(v, {2, 6});
}

}  // namespace

TEST(Dropout, IsTheIdentityOutsideAScopeAndAtRateZero) {
  const Tensor x = ones(100);
  EXPECT_FALSE(dropout_active());
  EXPECT_EQ(dropout(x).to_vector(), x.to_vector());
  const DropoutScope off(0.0, 7);
  EXPECT_FALSE(dropout_active());
  EXPECT_EQ(dropout(x).to_vector(), x.to_vector());
}

// 100,000 ones at rate 0.3: the dropped share within 5 binomial standard deviations (0.0014) of
// 0.3, every kept value 1 / 0.7 in float32.
TEST(Dropout, DropsTheRateAndScalesTheRest) {
  const int64_t n = 100000;
  const DropoutScope scope(0.3, 11);
  EXPECT_TRUE(dropout_active());
  const std::vector<double> y = dropout(ones(n)).to_vector();
  int64_t dropped = 0;
  for (double v : y) {
    if (v == 0.0) ++dropped;
    else ASSERT_EQ(v, double(static_cast<float>(1.0 / 0.7)));
  }
  const double share = double(dropped) / double(n), sd = std::sqrt(0.3 * 0.7 / double(n));
  EXPECT_NEAR(share, 0.3, 5 * sd);
}

TEST(Dropout, EachCallHasItsOwnMaskAndTheSameScopeAgainTheSameMasks) {
  const Tensor x = ones(1000);
  std::vector<double> first, second;
  {
    const DropoutScope scope(0.5, 3);
    first = dropout(x).to_vector();
    second = dropout(x).to_vector();
  }
  EXPECT_NE(first, second);
  {
    const DropoutScope again(0.5, 3);
    EXPECT_EQ(dropout(x).to_vector(), first);
    EXPECT_EQ(dropout(x).to_vector(), second);
  }
  const DropoutScope other(0.5, 4);
  EXPECT_NE(dropout(x).to_vector(), first);
}

TEST(Dropout, ScopesNestAndRestore) {
  const Tensor x = ones(1000);
  const DropoutScope outer(0.5, 3);
  const std::vector<double> a = dropout(x).to_vector();
  {
    const DropoutScope inner(0.0, 9);
    EXPECT_FALSE(dropout_active());
    EXPECT_EQ(dropout(x).to_vector(), x.to_vector());
  }
  EXPECT_TRUE(dropout_active());
  const std::vector<double> b = dropout(x).to_vector();  // the outer scope's second call
  const DropoutScope replay(0.5, 3);
  EXPECT_EQ(dropout(x).to_vector(), a);
  EXPECT_EQ(dropout(x).to_vector(), b);
}

TEST(Dropout, RefusesARateOutsideZeroToOne) {
  EXPECT_THROW(DropoutScope(1.0, 0), Error);
  EXPECT_THROW(DropoutScope(-0.1, 0), Error);
  EXPECT_THROW(DropoutScope(std::nan(""), 0), Error);
}

// The gradient of a dropped element is 0 and of a kept one 1 / (1 - rate): the forward's mask.
TEST(Dropout, TheBackwardUsesTheForwardsMask) {
  Tensor x = ones(1000);
  x.requires_grad_();
  const DropoutScope scope(0.4, 5);
  const Tensor y = dropout(x);
  y.backward(ones(1000));
  EXPECT_EQ(x.grad().to_vector(), y.to_vector());
}

// Every site at once (embeddings, both sublayers' outputs, attention's probabilities) in every
// placement: the loss under a scope differs from the evaluation's, which a scope of rate 0 leaves
// as it is; the same key gives the same loss.
TEST(Dropout, AModelsLossChangesUnderAScopeAndItsEvaluationDoesNot) {
  for (Placement pl : {Placement::pre, Placement::post, Placement::sandwich}) {
    ModelConfig cfg = small_gpt();
    cfg.placement = pl;
    Model m(cfg, 1);
    NoGradGuard no_grad;
    const double eval = m.loss(ids(), ids()).item();
    double train_a, train_b, other;
    {
      const DropoutScope s(0.3, 8);
      train_a = m.loss(ids(), ids()).item();
    }
    {
      const DropoutScope s(0.3, 8);
      train_b = m.loss(ids(), ids()).item();
    }
    {
      const DropoutScope s(0.3, 9);
      other = m.loss(ids(), ids()).item();
    }
    {
      const DropoutScope s(0.0, 8);
      EXPECT_EQ(m.loss(ids(), ids()).item(), eval) << to_string(pl);
    }
    EXPECT_NE(train_a, eval) << to_string(pl);
    EXPECT_EQ(train_a, train_b) << to_string(pl);
    EXPECT_NE(train_a, other) << to_string(pl);
    EXPECT_EQ(m.loss(ids(), ids()).item(), eval) << to_string(pl);
  }
}

// Only attention's probabilities: one layer of attention alone under a scope changes its output,
// and the probabilities' dropout keeps each row's expectation (checked by the kernels' cases).
TEST(Dropout, AttentionsProbabilitiesAreDroppedInsideAScope) {
  const Tensor q = Tensor::full({1, 8, 4}, 0.5, DType::f32), v = Tensor::full({1, 8, 4}, 1.0, DType::f32);
  const std::vector<double> plain = causal_attention(q, q, v, 2).to_vector();
  for (double o : plain) EXPECT_NEAR(o, 1.0, 1e-6);  // every row averages ones
  const DropoutScope scope(0.5, 2);
  const std::vector<double> dropped = causal_attention(q, q, v, 2).to_vector();
  EXPECT_NE(dropped, plain);
}
