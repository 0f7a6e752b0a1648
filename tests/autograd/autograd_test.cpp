// The tape: accumulation, gradient masks, no-grad mode, misuse errors, steady-state allocation.
#include <gtest/gtest.h>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/nn.h"
#include "normlab/ops.h"

using namespace normlab;

namespace {
Tensor leaf(std::vector<double> v, Shape s, DType t = DType::f64) { return Tensor::from(v, s, t).requires_grad_(true); }
}  // namespace

TEST(Autograd, ChainAndFanOutAccumulate) {
  // y = a*b + a  -> dy/da = b + 1, dy/db = a
  Tensor a = leaf({1, 2, 3}, {3}), b = leaf({4, 5, 6}, {3});
  Tensor y = add(mul(a, b), a);
  y.backward(Tensor::full({3}, 1.0, DType::f64));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{5, 6, 7}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{1, 2, 3}));
}

TEST(Autograd, SameTensorTwiceInOneOp) {
  Tensor a = leaf({1, -2, 3}, {3});
  Tensor y = mul(a, a);  // dy/da = 2a
  y.backward(Tensor::full({3}, 1.0, DType::f64));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{2, -4, 6}));
}

// Residual paths hand dy's buffer on instead of copying it (GradOutputs::pass_through). A
// gradient someone may write in place (a leaf's, a retained one, the root's) never shares a
// buffer, and sums into a shared buffer happen out of place.
TEST(Autograd, PassThroughNeverAliasesAWritableGradient) {
  const Tensor seed = Tensor::from({1, 2, 3}, {3}, DType::f64);
  {
    Tensor a = leaf({1, 1, 1}, {3}), b = leaf({2, 2, 2}, {3});
    Tensor y = add(a, b);
    y.backward(seed);
    ASSERT_NE(a.grad().raw(), b.grad().raw());
    a.grad().data<double>()[0] = 100;  // what clipping or an optimizer may do
    EXPECT_EQ(b.grad().to_vector(), seed.to_vector());
  }
  {
    Tensor a = leaf({1, 2, 3}, {3});
    add(a, a).backward(seed);  // both inputs pass through to the same tensor: 2 * seed
    EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{2, 4, 6}));
  }
  {
    // A residual chain: h = a + a*b (a fans out), y = h + 2h; dy/da = 3 (1 + b), dy/db = 3a.
    Tensor a = leaf({1, 2, 3}, {3}), b = leaf({4, 5, 6}, {3});
    Tensor h = add(a, mul(a, b));
    h.retain_grad();
    Tensor y = add(h, scale(h, 2.0));
    y.backward(seed);
    EXPECT_EQ(h.grad().to_vector(), (std::vector<double>{3, 6, 9}));
    EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{15, 36, 63}));
    EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{3, 12, 27}));
    a.grad().data<double>()[0] = -1;
    EXPECT_EQ(h.grad().to_vector(), (std::vector<double>{3, 6, 9})) << "a retained gradient was shared";
  }
  {
    // Two intermediates share dy's buffer; the first is then summed into: out of place.
    Tensor a = leaf({1, 2, 3}, {3}), b = leaf({1, 1, 1}, {3});
    Tensor p = scale(a, 1.0), q = scale(b, 1.0);
    Tensor s = add(p, q);
    Tensor y = add(s, mul(p, q));  // dp = seed (1 + q), dq = seed (1 + p)
    y.backward(seed);
    EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{2, 4, 6}));
    EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{2, 6, 12}));
  }
}

// A flattened parameter list's gradients are views into one buffer that the optimizer reads:
// pass_through and gradient sums must land in those views, not replace them.
TEST(Autograd, FlattenedParameterGradientsStayInTheFlatBuffer) {
  ParamList params;
  Tensor p = params.add("p", Tensor::from({1, 2, 3}, {3}, DType::f64));
  Tensor q = params.add("q", Tensor::from({4, 5, 6}, {3}, DType::f64));
  params.flatten();
  for (int step = 0; step < 2; ++step) {
    params.zero_grad();
    // p passes through an add and is also used by a mul (two contributions); q is used twice.
    Tensor y = add(p, mul(p, q));
    Tensor z = add(y, mul(q, q));
    z.backward(Tensor::from({1, 1, 1}, {3}, DType::f64));
    params.fill_missing_grads();
    // dz/dp = 1 + q, dz/dq = p + 2q
    EXPECT_EQ(params.flat_grad().to_vector(), (std::vector<double>{5, 6, 7, 9, 12, 15})) << "step " << step;
    EXPECT_EQ(p.grad().to_vector(), (std::vector<double>{5, 6, 7}));
  }
  // A handle held across backward calls (two micro-batches, a gradient kept for logging) must
  // not detach the gradient from the flat buffer either, nor across zero_grad().
  Tensor held = p.grad();
  for (int step = 0; step < 2; ++step) {
    params.zero_grad();
    for (int micro = 0; micro < 2; ++micro) add(p, mul(p, q)).backward(Tensor::from({1, 1, 1}, {3}, DType::f64));
    params.fill_missing_grads();
    EXPECT_EQ(params.flat_grad().to_vector(), (std::vector<double>{10, 12, 14, 2, 4, 6})) << "held, step " << step;
    EXPECT_EQ(held.to_vector(), (std::vector<double>{10, 12, 14})) << "the held handle sees the gradient";
  }
}

TEST(Autograd, GradientsAccumulateAcrossBackwardsUntilZeroGrad) {
  Tensor a = leaf({1, 2}, {2});
  for (int i = 0; i < 2; ++i) scale(a, 3.0).backward(Tensor::full({2}, 1.0, DType::f64));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{6, 6}));
  a.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  scale(a, 3.0).backward(Tensor::full({2}, 1.0, DType::f64));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{3, 3}));
}

TEST(Autograd, MisuseThrowsWithAMessage) {
  Tensor a = leaf({1, 2}, {2});
  Tensor y = scale(a, 2.0);
  try {
    y.backward();
    FAIL() << "backward() on a non-scalar must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one-element"), std::string::npos) << e.what();
  }
  Tensor loss = cross_entropy(reshape(a, {1, 2}), Tensor::from_ids({1}, {1}));
  loss.backward();
  try {
    loss.backward();
    FAIL() << "a second backward through a freed graph must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
  Tensor f = Tensor::from({1, 2}, {2}, DType::f32).requires_grad_(true);
  try {
    add(a, f);
    FAIL() << "mixing dtypes must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mixing dtypes"), std::string::npos) << e.what();
  }
  Tensor c = Tensor::from({1, 2}, {2}, DType::f64);
  EXPECT_THROW(scale(c, 2.0).backward(Tensor::full({2}, 1.0, DType::f64)), Error);  // nothing requires grad
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor a = leaf({1, 2}, {2});
  NoGradGuard guard;
  Tensor y = scale(a, 2.0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
}

TEST(Autograd, ShapeErrorsNameBothShapes) {
  Tensor x = Tensor::zeros({2, 8, 64});
  Tensor w = Tensor::zeros({64, 48});
  try {
    linear(x, w);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("(2, 8, 64)"), std::string::npos) << m;
    EXPECT_NE(m.find("(64, 48)"), std::string::npos) << m;
  }
}

// After the first step, a forward + backward + optimizer-free step of the same graph takes
// every tensor from the arena's cache and creates no oneDNN primitive.
TEST(Autograd, SteadyStateStepAllocatesNothing) {
  ModelConfig cfg;
  cfg.model = ModelKind::gpt;
  cfg.layers = 2;
  cfg.norm = NormKind::rmsnorm;
  cfg.qk_norm = true;
  Model m(cfg, 3);
  m.params().flatten();
  std::vector<int32_t> ids(4 * 16), tg(4 * 16);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(i * 7 % 64);
    tg[i] = static_cast<int32_t>(i * 5 % 64);
  }
  Tensor x = Tensor::from_ids(ids, {4, 16}), t = Tensor::from_ids(tg, {4, 16});
  auto step = [&] {
    m.params().zero_grad();
    Tensor loss = m.loss(x, t);
    loss.backward();
  };
  step();
  step();
  ArenaStats before = arena_stats();
  uint64_t prims = backend("cpu").primitives_created();
  for (int i = 0; i < 3; ++i) step();
  ArenaStats after = arena_stats();
  EXPECT_EQ(after.system_allocs, before.system_allocs);
  EXPECT_GT(after.requests, before.requests);
  EXPECT_EQ(backend("cpu").primitives_created(), prims);
  // Parameter gradients were written straight into the flat gradient buffer.
  for (const Tensor& p : m.params().all()) {
    ASSERT_TRUE(p.grad().defined()) << p.name();
    EXPECT_EQ(p.grad().impl().storage.get(), m.params().flat_grad().impl().storage.get()) << p.name();
  }
}
