// The worksheet's exam: a Pre-LN block (LN -> causal self-attention -> add; LN -> MLP -> add)
// maps (2, 8, 64) to (2, 8, 64) and matches an independent computation of the same formula,
// written here with plain loops in double and sharing no code with normlab's kernels.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/backend.h"
#include "normlab/nn.h"
#include "normlab/ops.h"

using namespace normlab;

namespace {

using Mat = std::vector<double>;  // row-major

Mat layer_norm(const Mat& x, int rows, int d, const Mat& g, const Mat& b, double eps) {
  Mat y(x.size());
  for (int r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int i = 0; i < d; ++i) mu += x[r * d + i];
    mu /= d;
    for (int i = 0; i < d; ++i) var += (x[r * d + i] - mu) * (x[r * d + i] - mu);
    var /= d;
    for (int i = 0; i < d; ++i) y[r * d + i] = (x[r * d + i] - mu) / std::sqrt(var + eps) * g[i] + b[i];
  }
  return y;
}

Mat affine(const Mat& x, int rows, int in, const Mat& w, const Mat& b, int out) {
  Mat y(static_cast<size_t>(rows * out));
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = b[o];
      for (int i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

Mat causal_heads(const Mat& q, const Mat& k, const Mat& v, int B, int T, int H, int Dh) {
  const int C = H * Dh;
  Mat out(q.size(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> w(t + 1);
        double mx = -1e300, z = 0;
        for (int s = 0; s <= t; ++s) {
          double dot = 0;
          for (int e = 0; e < Dh; ++e) dot += q[(b * T + t) * C + h * Dh + e] * k[(b * T + s) * C + h * Dh + e];
          w[s] = dot / std::sqrt(static_cast<double>(Dh));
          mx = std::max(mx, w[s]);
        }
        for (int s = 0; s <= t; ++s) z += (w[s] = std::exp(w[s] - mx));
        for (int e = 0; e < Dh; ++e) {
          double acc = 0;
          for (int s = 0; s <= t; ++s) acc += w[s] / z * v[(b * T + s) * C + h * Dh + e];
          out[(b * T + t) * C + h * Dh + e] = acc;
        }
      }
  return out;
}

Mat independent_pre_ln_block(const Block& blk, const Mat& x, int B, int T, int C, int hidden, int H) {
  auto v = [](const Tensor& t) { return t.to_vector(); };
  const int rows = B * T;
  Mat h1 = layer_norm(x, rows, C, v(blk.norm1.param("gamma")), v(blk.norm1.param("beta")), 1e-5);
  Mat q = affine(h1, rows, C, v(blk.attn.q.w), v(blk.attn.q.b), C);
  Mat k = affine(h1, rows, C, v(blk.attn.k.w), v(blk.attn.k.b), C);
  Mat val = affine(h1, rows, C, v(blk.attn.v.w), v(blk.attn.v.b), C);
  Mat a = affine(causal_heads(q, k, val, B, T, H, C / H), rows, C, v(blk.attn.o.w), v(blk.attn.o.b), C);
  Mat r1(x.size());
  for (size_t i = 0; i < x.size(); ++i) r1[i] = x[i] + a[i];
  Mat h2 = layer_norm(r1, rows, C, v(blk.norm2.param("gamma")), v(blk.norm2.param("beta")), 1e-5);
  Mat f = affine(h2, rows, C, v(blk.mlp.fc1.w), v(blk.mlp.fc1.b), hidden);
  for (double& z : f) z = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  Mat m = affine(f, rows, hidden, v(blk.mlp.fc2.w), v(blk.mlp.fc2.b), C);
  Mat out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = r1[i] + m[i];
  return out;
}

void run_exam(DType dtype, const std::string& backend_name, double tol) {
  BackendScope scope(backend_name);
  const int B = 2, T = 8, C = 64, hidden = 128, H = 4;
  ModelConfig cfg;
  cfg.model = ModelKind::gpt;
  cfg.norm = NormKind::layernorm;
  cfg.placement = Placement::pre;
  cfg.d_model = C;
  cfg.d_hidden = hidden;
  cfg.heads = H;
  cfg.init = InitScheme::xavier;
  cfg.dtype = dtype;
  Init init{Rng(11, stream::init), dtype};
  ParamList params;
  Block blk = make_block(params, "b", cfg, init);
  Rng r(5, stream::check);
  Mat xv(B * T * C);
  for (double& z : xv) z = r.normal();
  Tensor x = Tensor::from(xv, {B, T, C}, dtype);
  Tensor y = blk(x);
  ASSERT_EQ(y.shape(), (Shape{B, T, C}));
  Mat expect = independent_pre_ln_block(blk, x.to_vector(), B, T, C, hidden, H);
  Mat got = y.to_vector();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - expect[i]));
  EXPECT_LT(worst, tol) << backend_name;
}

}  // namespace

TEST(Exam, PreLnBlockMatchesIndependentComputationFloat64) { run_exam(DType::f64, "reference", 1e-11); }

// float32: inputs are O(1) and reductions run over at most 128 terms; 2e-5 leaves room for
// float32 rounding in two LayerNorms, five products and the softmax.
TEST(Exam, PreLnBlockMatchesIndependentComputationCpuFloat32) { run_exam(DType::f32, "cpu", 2e-5); }

TEST(Exam, WrongOutputProjectionWidthIsAShapeError) {
  ModelConfig cfg;
  cfg.model = ModelKind::gpt;
  Init init{Rng(1, stream::init), DType::f32};
  ParamList params;
  Block blk = make_block(params, "b", cfg, init);
  blk.attn.o.w = init.normal({64, 48}, 0.02);  // d != d_model: the classic mistake
  Tensor x = Tensor::zeros({2, 8, 64});
  try {
    blk(x);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("(64, 48)"), std::string::npos) << m;
    EXPECT_NE(m.find("in_features"), std::string::npos) << m;
  }
}
