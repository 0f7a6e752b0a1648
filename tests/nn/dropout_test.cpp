// Dropout (ops.h, DropoutScope): the identity outside a scope; inside one, each call its own mask
// at the scope's rate, the kept values scaled by 1 / (1 - rate); a scope made again with the same
// key draws the same masks; a model's loss changes under it and its evaluation does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "normlab/attention_kernels.h"
#include "normlab/autograd.h"
#include "normlab/kernel_clock.h"
#include "normlab/nn.h"
#include "normlab/ops.h"
#include "normlab/rng.h"

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
  for (Placement pl : {Placement::pre, Placement::post, Placement::sandwich, Placement::postsub, Placement::deepnorm}) {
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

// Every site draws its own mask, in every placement and in the toy model, gated or not: one
// dropout call on the embeddings' sum and one on each sublayer's output, 1 + 2L per forward.
TEST(Dropout, EverySiteDropsOncePerForward) {
  struct Shape {
    ModelKind model;
    Placement placement;
    std::optional<ResidualScale> gate;
  };
  for (const Shape& s : {Shape{ModelKind::gpt, Placement::pre, {}}, Shape{ModelKind::gpt, Placement::post, {}},
                         Shape{ModelKind::gpt, Placement::sandwich, {}}, Shape{ModelKind::gpt, Placement::postsub, {}},
                         Shape{ModelKind::toy, Placement::pre, {}},
                         Shape{ModelKind::gpt, Placement::pre, ResidualScale::layerscale},
                         Shape{ModelKind::toy, Placement::post, ResidualScale::layerscale}}) {
    ModelConfig cfg = small_gpt();
    cfg.model = s.model;
    cfg.placement = s.placement;
    cfg.residual_scale = s.gate;
    Model m(cfg, 1);
    NoGradGuard no_grad;
    const DropoutScope scope(0.3, 8);
    const KernelClock clock;
    (void)m.loss(ids(), ids());
    int64_t calls = 0;
    for (const KernelClock::Entry& e : clock.entries())
      if (e.name == "dropout") calls = e.calls;
    EXPECT_EQ(calls, 1 + 2 * cfg.layers) << to_string(s.model) << " " << to_string(s.placement);
  }
}

// The probabilities' dropout by its definition, computed here in double from the mask's own bits:
// D[t,s] = P[t,s] / (1 - rate) where dropout_bits(key, ((b*H + h)*T + t)*T + s) >= rate * 2^32,
// out = D v. B and H above 1 and T above Dh, so that a transposed or shifted index shows.
TEST(Dropout, AttentionDropsEachProbabilityByItsIndex) {
  const int64_t B = 2, T = 7, H = 3, Dh = 2, C = H * Dh;
  Rng rng(5, stream::check);
  std::vector<double> q(B * T * C), k(B * T * C), v(B * T * C);
  for (auto* x : {&q, &k, &v})
    for (double& e : *x) e = rng.normal();
  const DropoutMask mask = DropoutMask::of(0.4, 1234);
  const double scale = 1.0 / std::sqrt(double(Dh));
  std::vector<double> want(B * T * C, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(t + 1);
        double mx = -INFINITY, sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t e = 0; e < Dh; ++e) dot += q[(b * T + t) * C + h * Dh + e] * k[(b * T + s) * C + h * Dh + e];
          p[s] = scale * dot;
          mx = std::max(mx, p[s]);
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t s = 0; s <= t; ++s) {
          const uint64_t index = static_cast<uint64_t>(((b * H + h) * T + t) * T + s);
          if (dropout_bits(mask.key, index) < mask.threshold) continue;
          for (int64_t e = 0; e < Dh; ++e)
            want[(b * T + t) * C + h * Dh + e] += p[s] / sum / 0.6 * v[(b * T + s) * C + h * Dh + e];
        }
      }
  Tensor out = Tensor::zeros({B, T, C}, DType::f32), stats = Tensor::zeros({B, H, T, 2}, DType::f32);
  const Tensor tq = Tensor::from(q, {B, T, C}), tk = Tensor::from(k, {B, T, C}), tv = Tensor::from(v, {B, T, C});
  run_kernel(backend_for(Device::cpu, DType::f32), AttentionForward{out, stats, tq, tk, tv, B, T, H, Dh, scale, mask});
  const std::vector<double> got = out.to_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
}

TEST(Dropout, EveryStepHasItsOwnKey) {
  EXPECT_NE(dropout_step_key(0, 1), dropout_step_key(0, 2));
  EXPECT_NE(dropout_step_key(0, 1), dropout_step_key(1, 1));
  EXPECT_EQ(dropout_step_key(3, 9), dropout_step_key(3, 9));
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
