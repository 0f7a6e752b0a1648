// Low-precision storage (ops.h, StoragePrecisionScope): inside the scope every op output and every
// gradient is on the format's grid, the float32 leaves keep their values and receive gradients
// computed from stored operands, overflow gives inf as the format would, and fp32 changes nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <cmath>
#include <optional>
#include <vector>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/ops.h"
#include "normlab/precision.h"
#include "normlab/rng.h"
#include "normlab/statistics_kernels.h"

using namespace normlab;

namespace {

Tensor randn(Rng& rng, const Shape& shape, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = scale * rng.normal();
  return Tensor::from(v, shape);
}

// How many values of t are not on the format's grid (NaN counts as on it).
int64_t off_grid(const Tensor& t, Precision p) {
  int64_t n = 0;
  for (double v : t.to_vector())
    if (!std::isnan(v) && round_to(p, static_cast<float>(v)) != static_cast<float>(v)) ++n;
  return n;
}

struct Net {
  Tensor x, w1, gamma, beta, w2;
  Tensor targets = Tensor::from_ids({1, 0, 3, 2, 2, 1, 0}, {7});
  explicit Net(uint64_t seed) {
    Rng rng(seed, stream::check);
    x = randn(rng, {7, 12}).requires_grad_(true);
    w1 = randn(rng, {16, 12}, 0.3).requires_grad_(true);
    gamma = Tensor::from(std::vector<double>(16, 1.0), {16}).requires_grad_(true);
    beta = randn(rng, {16}, 0.1).requires_grad_(true);
    w2 = randn(rng, {4, 16}, 0.3).requires_grad_(true);
  }
  std::vector<Tensor> leaves() const { return {x, w1, gamma, beta, w2}; }
  // linear -> layernorm -> gelu -> linear -> cross entropy, every intermediate kept.
  std::vector<Tensor> forward() const {
    Tensor h = linear(x, w1);
    Tensor n = layernorm(h, gamma, beta);
    Tensor a = gelu(n);
    Tensor logits = linear(a, w2);
    Tensor loss = cross_entropy(logits, targets);
    return {h, n, a, logits, loss};
  }
  // forward() and the loss's backward, inside a scope of `p` when one is given.
  std::vector<Tensor> step(std::optional<Precision> p = std::nullopt) const {
    std::optional<StoragePrecisionScope> scope;
    if (p) scope.emplace(*p);
    std::vector<Tensor> out = forward();
    out.back().backward();
    return out;
  }
};

}  // namespace

TEST(StoragePrecision, ScopesNestAndRestore) {
  EXPECT_EQ(storage_precision(), Precision::fp32);
  {
    StoragePrecisionScope a(Precision::fp16);
    EXPECT_EQ(storage_precision(), Precision::fp16);
    {
      StoragePrecisionScope b(Precision::bf16);
      EXPECT_EQ(storage_precision(), Precision::bf16);
    }
    EXPECT_EQ(storage_precision(), Precision::fp16);
  }
  EXPECT_EQ(storage_precision(), Precision::fp32);
}

TEST(StoragePrecision, EveryOutputAndGradientIsOnTheGrid) {
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    SCOPED_TRACE(to_string(p));
    Net net(7);
    const std::vector<double> w1_before = net.w1.to_vector();
    const std::vector<Tensor> out = net.step(p);
    // Activations on the grid (the loss is float32, as autocast keeps it).
    for (size_t i = 0; i + 1 < out.size(); ++i) EXPECT_EQ(off_grid(out[i], p), 0) << "output " << i;
    // Gradients of the float32 leaves: computed from stored operands and stored.
    for (const Tensor& leaf : net.leaves()) EXPECT_EQ(off_grid(leaf.grad(), p), 0) << leaf.shape().size();
    // The master weights themselves are untouched (not rounded in place).
    EXPECT_EQ(net.w1.to_vector(), w1_before);
    EXPECT_GT(off_grid(net.w1, p), 0);  // so the check above could fail
  }
}

TEST(StoragePrecision, LowPrecisionTracksFloat32WithinTheFormat) {
  Net ref(11), half(11);
  const std::vector<Tensor> r = ref.step(), h = half.step(Precision::fp16);
  EXPECT_NEAR(h.back().item(), r.back().item(), 5e-3 * std::fabs(r.back().item()));
  for (size_t k = 0; k < ref.leaves().size(); ++k) {
    const std::vector<double> a = ref.leaves()[k].grad().to_vector(), b = half.leaves()[k].grad().to_vector();
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], na += a[i] * a[i], nb += b[i] * b[i];
    EXPECT_GT(dot / std::sqrt(na * nb), 0.999) << "leaf " << k;  // same direction, fp16-close
    EXPECT_NE(a, b) << "leaf " << k;                              // but not float32's bits
  }
}

TEST(StoragePrecision, Fp32ScopeIsBitIdentical) {
  Net a(3), b(3);
  const std::vector<Tensor> x = a.step(), y = b.step(Precision::fp32);
  EXPECT_EQ(x.back().item(), y.back().item());
  for (size_t k = 0; k < a.leaves().size(); ++k) EXPECT_EQ(a.leaves()[k].grad().to_vector(), b.leaves()[k].grad().to_vector());
}

TEST(StoragePrecision, OverflowIsInfInFp16AndFiniteInBf16) {
  Tensor x = Tensor::from({300.0, -2.0, 1.0}, {3});
  {
    StoragePrecisionScope scope(Precision::fp16);
    const std::vector<double> y = mul(x, x).to_vector();  // 90000 > 65504
    EXPECT_TRUE(std::isinf(y[0]));
    EXPECT_EQ(y[1], 4.0);
  }
  {
    StoragePrecisionScope scope(Precision::bf16);
    EXPECT_EQ(mul(x, x).to_vector()[0], 90112.0);  // 90000 on bf16's grid (spacing 512)
  }
}

TEST(StoragePrecision, GradientSumsAreStoredInTheirTensorsFormat) {
  // h reaches y by two paths with gradients 1 + 2^-10 and 2^-12 (both fp16 values); their sum
  // 1 + 2^-10 + 2^-12 lies a quarter of a spacing above 1 + 2^-10 in fp16, so h's stored
  // gradient is 1 + 2^-10, where float32 keeps all of it. A float32 leaf (a master weight)
  // used twice sums its two gradients in float32, as PyTorch accumulates .grad.
  Tensor x = Tensor::from({1.0, 2.0}, {2}).requires_grad_(true);
  const double a = 1.0 + std::ldexp(1.0, -10), b = std::ldexp(1.0, -12);
  {
    StoragePrecisionScope scope(Precision::fp16);
    Tensor h = scale(x, 1.0);
    h.retain_grad();
    Tensor y = add(scale(h, a), scale(h, b));
    y.backward(Tensor::from({1.0, 1.0}, {2}));
    EXPECT_EQ(h.grad().to_vector(), (std::vector<double>{a, a}));
    EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{a, a}));
    x.zero_grad();
    add(scale(x, a), scale(x, b)).backward(Tensor::from({1.0, 1.0}, {2}));
    EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{a + b, a + b}));
  }
  x.zero_grad();
  add(scale(x, a), scale(x, b)).backward(Tensor::from({1.0, 1.0}, {2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{a + b, a + b}));
}

TEST(StoragePrecision, LeafInputsAreUsedAsStored) {
  // a = 1 + 2^-11 is a tie in fp16 and is stored as 1: a * 3 is then 3. Computed from the float32
  // leaf it would be 3.0015, stored as 3 + 2^-9.
  Tensor a = Tensor::from({1.0 + std::ldexp(1.0, -11)}, {1}).requires_grad_(true);
  Tensor b = Tensor::from({3.0}, {1});
  StoragePrecisionScope scope(Precision::fp16);
  Tensor y = mul(a, b);
  EXPECT_EQ(y.item(), 3.0);
  y.backward(Tensor::from({1.0}, {1}));
  EXPECT_EQ(a.grad().item(), 3.0);                                  // through the cast, unchanged
  EXPECT_EQ(a.item(), 1.0 + std::ldexp(1.0, -11));                  // the leaf keeps its value
}

TEST(StoragePrecision, Float32ResidualStreamPromotesAsAutocast) {
  // fp16 activations, a float32 stream: r = 1 starts the stream; c = 2^-12 is a low-precision
  // branch. r + c is float32 (1 + 2^-12; fp16 would store 1). The stream's gradient stays
  // float32; the branch's is rounded to fp16.
  const double tiny = std::ldexp(1.0, -12);
  Tensor leaf = Tensor::from({1.0}, {1}).requires_grad_(true);
  Tensor cl = Tensor::from({tiny}, {1}).requires_grad_(true);
  StoragePrecisionScope scope(Precision::fp16, Precision::fp32);
  Tensor h = scale(leaf, 1.0);
  h.retain_grad();
  EXPECT_EQ(h.impl().format, Precision::fp16);
  Tensor r = residual_stream(h);
  EXPECT_EQ(r.impl().format, Precision::fp32);
  Tensor c = scale(cl, 1.0);
  Tensor y = add(r, c);
  EXPECT_EQ(y.impl().format, Precision::fp32);
  EXPECT_EQ(y.item(), 1.0 + tiny);
  r.retain_grad();
  c.retain_grad();
  y.backward(Tensor::from({1.0 + tiny}, {1}));
  EXPECT_EQ(r.grad().item(), 1.0 + tiny);  // float32
  EXPECT_EQ(c.grad().item(), 1.0);         // fp16: 1 + 2^-12 rounds to 1
  EXPECT_EQ(h.grad().item(), 1.0);         // the stream's start is fp16 again
}

TEST(StoragePrecision, ProductsOnAFloat32StreamRoundTheirOutputFirst) {
  // linear(x, w, residual = stream): the product is stored in fp16, then added to the float32
  // stream (autocast's x + proj(h)), not rounded once with the residual as one fp16 op.
  const double tiny = std::ldexp(1.0, -12);
  Tensor x = Tensor::from({1.0 + std::ldexp(1.0, -11)}, {1, 1});  // fp16 stores 1
  Tensor w = Tensor::from({1.0}, {1, 1});
  Tensor s0 = Tensor::from({tiny}, {1, 1}).requires_grad_(true);
  StoragePrecisionScope scope(Precision::fp16, Precision::fp32);
  Tensor stream = residual_stream(scale(s0, 1.0));  // 2^-12, exact in both
  Tensor y = linear(x, w, Tensor(), stream);
  EXPECT_EQ(y.impl().format, Precision::fp32);
  EXPECT_EQ(y.item(), 1.0 + tiny);
  StoragePrecisionScope all_fp16(Precision::fp16);
  Tensor z = linear(x, w, Tensor(), scale(s0, 1.0));
  EXPECT_EQ(z.impl().format, Precision::fp16);
  EXPECT_EQ(z.item(), 1.0);  // 1 + 2^-12 in one fp16 rounding
}

TEST(StoragePrecision, TheFloat32StreamStaysFloat32WithoutAGraph) {
  // Evals run under NoGradGuard, where every op output is a leaf: it must still be used as
  // stored (the float32 stream not cast to fp16), as with a graph.
  const double tiny = std::ldexp(1.0, -12);
  Tensor one = Tensor::from({1.0}, {1}), c0 = Tensor::from({tiny}, {1});
  NoGradGuard no_grad;
  StoragePrecisionScope scope(Precision::fp16, Precision::fp32);
  Tensor r = residual_stream(scale(one, 1.0));
  Tensor y = add(r, scale(c0, 1.0));
  EXPECT_EQ(y.impl().format, Precision::fp32);
  EXPECT_EQ(y.item(), 1.0 + tiny);
  Tensor z = linear(Tensor::from({1.0}, {1, 1}), Tensor::from({tiny}, {1, 1}), Tensor(), reshape(r, {1, 1}));
  EXPECT_EQ(z.impl().format, Precision::fp32);
  EXPECT_EQ(z.item(), 1.0 + tiny);
}

// ---- native 16-bit storage on cuda-sim (ops.h, set_native_low_precision) ----------------------
namespace {

// f's output and every input's gradient, computed on cuda-sim inside a scope of `p`, with native
// storage on or off (float32 storage rounded after each op); the loss is a cross-entropy over the
// output's last dimension, so that every op has a backward.
struct OpRun {
  std::vector<double> out, loss;
  std::vector<std::vector<double>> grads;
  DType out_dtype = DType::f32;
};
OpRun run_op(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Shape>& shapes,
             Precision p, std::optional<Precision> residual, NormCompute norm, bool native) {
  set_native_low_precision(native);
  Rng rng(7, stream::check);
  std::vector<Tensor> in;
  for (const Shape& s : shapes) in.push_back(randn(rng, s, 1.5).to_device(Device::cuda_sim).requires_grad_(true));
  OpRun r;
  {
    StoragePrecisionScope scope(p, residual, norm);
    const Tensor y = f(in);
    r.out_dtype = y.dtype();
    r.out = y.to_vector();
    const int64_t rows = y.numel() / y.size(-1);
    std::vector<int32_t> t(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + 1) % y.size(-1));
    const Tensor loss = cross_entropy(y, Tensor::from_ids(t, Shape(y.shape().begin(), y.shape().end() - 1))
                                             .to_device(Device::cuda_sim));
    r.loss = loss.to_vector();
    loss.backward();
  }
  for (const Tensor& t : in) r.grads.push_back(t.grad().to_vector());
  set_native_low_precision(true);
  return r;
}

// Bitwise equality of two value lists (NaN equal to NaN, -0 apart from +0).
int64_t bits_apart(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    uint32_t bx, by;
    std::memcpy(&bx, &x, 4);
    std::memcpy(&by, &y, 4);
    if (bx != by && !(std::isnan(x) && std::isnan(y))) ++n;
  }
  return n;
}

}  // namespace

// Every op on odd shapes, forward and backward, in bf16 and fp16: native 16-bit storage gives the
// emulation's values bit for bit (each kernel computes the same float32 values and rounds once at
// its store), and the op's output is a 2-byte tensor of the format.
TEST(StoragePrecision, CudaSimNativeStorageIsTheEmulationOpByOp) {
  (void)backend("cuda-sim");  // its memory hooks
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  struct Case {
    const char* name;
    Fn f;
    std::vector<Shape> shapes;
    NormCompute norm = NormCompute::fused;
    std::optional<Precision> residual = std::nullopt;
  };
  const Tensor ids = Tensor::from_ids({4, 0, 2, 4, 1, 3, 0}, {7}).to_device(Device::cuda_sim);
  const std::vector<Case> cases = {
      {"add_scaled", [](auto& x) { return add_scaled(x[0], 0.75, x[1]); }, {{7, 13}, {7, 13}}},
      {"scale", [](auto& x) { return scale(x[0], -1.25); }, {{5, 9}}},
      {"mul", [](auto& x) { return mul(x[0], x[1]); }, {{3, 11}, {3, 11}}},
      {"gelu", [](auto& x) { return gelu(x[0]); }, {{6, 7}}},
      {"softmax", [](auto& x) { return softmax(x[0]); }, {{5, 17}}},
      {"layernorm d=36", [](auto& x) { return layernorm(x[0], x[1], x[2], 1e-5); }, {{9, 36}, {36}, {36}}},
      {"layernorm d=13", [](auto& x) { return layernorm(x[0], x[1], x[2], 1e-5); }, {{9, 13}, {13}, {13}}},
      {"rmsnorm d=20", [](auto& x) { return rmsnorm(x[0], x[1], 1e-6); }, {{11, 20}, {20}}},
      {"layernorm composite", [](auto& x) { return layernorm(x[0], x[1], x[2], 1e-5); }, {{9, 12}, {12}, {12}},
       NormCompute::format},
      {"rmsnorm composite", [](auto& x) { return rmsnorm(x[0], x[1], 1e-6); }, {{9, 12}, {12}}, NormCompute::format},
      {"rmsnorm on a float32 stream", [](auto& x) { return rmsnorm(residual_stream(add(x[0], x[0])), x[1], 1e-6); },
       {{5, 24}, {24}}, NormCompute::fused, Precision::fp32},
      {"linear + bias + residual", [](auto& x) { return linear(x[0], x[1], x[2], x[3]); },
       {{2, 3, 10}, {7, 10}, {7}, {2, 3, 7}}},
      {"linear without bias", [](auto& x) { return linear(x[0], x[1], Tensor()); }, {{5, 6}, {9, 6}}},
      {"gelu_linear", [](auto& x) { return gelu_linear(x[0], x[1], x[2]); }, {{5, 14}, {6, 14}, {6}}},
      {"matmul batched", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 3, 5}, {2, 5, 7}}},
      {"matmul shared b", [](auto& x) { return matmul(x[0], x[1]); }, {{3, 4, 6}, {6, 5}}},
      {"causal_attention", [](auto& x) { return causal_attention(x[0], x[1], x[2], 3); },
       {{2, 5, 12}, {2, 5, 12}, {2, 5, 12}}},
      {"prefix_mean", [](auto& x) { return prefix_mean(x[0]); }, {{2, 6, 5}}},
      {"embedding", [&ids](auto& x) { return embedding(ids, x[0]); }, {{5, 9}}},
      {"transpose", [](auto& x) { return transpose(add(x[0], x[0]), 0, 1); }, {{4, 3, 5}}},
      {"a tensor used twice", [](auto& x) { Tensor h = layernorm(x[0], x[1], x[2], 1e-5); return add(h, gelu(h)); },
       {{6, 8}, {8}, {8}}},
  };
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + to_string(p));
      const OpRun native = run_op(c.f, c.shapes, p, c.residual, c.norm, true);
      const OpRun emulated = run_op(c.f, c.shapes, p, c.residual, c.norm, false);
      EXPECT_EQ(emulated.out_dtype, DType::f32);
      if (!c.residual) {
        EXPECT_EQ(native.out_dtype, storage_dtype(p));
      }
      EXPECT_EQ(bits_apart(native.out, emulated.out), 0);
      EXPECT_EQ(bits_apart(native.loss, emulated.loss), 0);
      ASSERT_EQ(native.grads.size(), emulated.grads.size());
      for (size_t i = 0; i < native.grads.size(); ++i)
        EXPECT_EQ(bits_apart(native.grads[i], emulated.grads[i]), 0) << "input " << i;
    }
  }
}

// The cuda backend's kernels of a log step read 16-bit storage as they read its float32 values.
TEST(StoragePrecision, CudaSimStatisticsRead16BitStorage) {
  Backend& kb = backend("cuda-sim");
  Rng rng(11, stream::check);
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(to_string(p));
    const Tensor host = randn(rng, {2, 5, 12}, 3.0);
    std::vector<double> v = host.to_vector();
    for (double& x : v) x = round_to(p, static_cast<float>(x));
    const Tensor f32 = Tensor::from(v, host.shape()).to_device(Device::cuda_sim);
    const Tensor h16 = Tensor::from(v, host.shape(), storage_dtype(p)).to_device(Device::cuda_sim);
    EXPECT_EQ(h16.nbytes(), 2u * 120u);
    EXPECT_EQ(sum_squares(kb, h16), sum_squares(kb, f32));
    const FormatCensus a = format_census(kb, h16, Precision::fp16), b = format_census(kb, f32, Precision::fp16);
    EXPECT_EQ(a.max_abs, b.max_abs);
    EXPECT_EQ(a.underflow, b.underflow);
    Tensor n16 = Tensor::empty({10}, DType::f32, Device::cuda_sim), n32 = Tensor::empty({10}, DType::f32, Device::cuda_sim);
    run_kernel(kb, RowNorms{n16, h16, 10, 12});
    run_kernel(kb, RowNorms{n32, f32, 10, 12});
    EXPECT_EQ(bits_apart(n16.to_vector(), n32.to_vector()), 0);
    Tensor m16 = Tensor::empty({2, 3, 5}, DType::f32, Device::cuda_sim), e16 = Tensor::empty({2, 3, 5}, DType::f32, Device::cuda_sim);
    Tensor m32 = Tensor::empty({2, 3, 5}, DType::f32, Device::cuda_sim), e32 = Tensor::empty({2, 3, 5}, DType::f32, Device::cuda_sim);
    run_kernel(kb, AttentionLogitStats{m16, e16, h16, h16, 2, 5, 3, 4, 0.5});
    run_kernel(kb, AttentionLogitStats{m32, e32, f32, f32, 2, 5, 3, 4, 0.5});
    EXPECT_EQ(bits_apart(m16.to_vector(), m32.to_vector()), 0);
    EXPECT_EQ(bits_apart(e16.to_vector(), e32.to_vector()), 0);
    // fill writes the format's encoding; a conversion back to float32 is exact.
    Tensor filled = Tensor::empty({7}, storage_dtype(p), Device::cuda_sim);
    run_kernel(kb, Fill{filled, 1.0 / 3.0});
    for (double x : filled.to_vector()) EXPECT_EQ(x, round_to(p, static_cast<float>(1.0 / 3.0)));
    Tensor back = Tensor::empty(host.shape(), DType::f32, Device::cuda_sim);
    run_kernel(kb, Copy{back, h16});
    EXPECT_EQ(bits_apart(back.to_vector(), v), 0);
  }
}
