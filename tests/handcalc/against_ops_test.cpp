// handcalc computes by hand-written double loops; the training stack computes with the ops and the
// reference backend. The same inputs must give the same numbers in both: LayerNorm, RMSNorm, the
// residual gradient split and both placements, in float64 (tolerance: a few ulps of the values).
#include <gtest/gtest.h>

#include <vector>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/handcalc.h"
#include "normlab/ops.h"
#include "test_util.h"

using namespace normlab;
namespace hc = normlab::handcalc;

namespace {

constexpr double kTol = 1e-12;

Tensor row(const std::vector<double>& v) {
  return Tensor::from(v, {1, static_cast<int64_t>(v.size())}, DType::f64);
}
Tensor vec(const std::vector<double>& v) { return Tensor::from(v, {static_cast<int64_t>(v.size())}, DType::f64); }
Tensor mat(const std::vector<double>& w, size_t d) {
  return Tensor::from(w, {static_cast<int64_t>(d), static_cast<int64_t>(d)}, DType::f64);
}

// Inputs: the worksheet's vector and an odd one with a non-trivial gamma and beta.
struct Inputs {
  std::vector<double> x, gamma, beta, dy;
};
std::vector<Inputs> inputs() {
  return {{{2, -1, 0, 3}, {1, 1, 1, 1}, {0, 0, 0, 0}, {1, 1, 1, 1}},
          {{1.5, -2, 0.5, 4, -3.25}, {1, 2, 0.5, -1, 1.5}, {0.1, 0, -0.2, 0.3, 1}, {1, -1, 0.5, 2, -0.25}}};
}

}  // namespace

TEST(HandcalcAgainstOps, LayerNormAndRMSNorm) {
  BackendScope scope("reference");
  for (const Inputs& in : inputs()) {
    for (double eps : {1e-5, 0.5}) {
      const hc::LayerNormWorksheet ln = hc::layernorm_worksheet(in.x, in.gamma, in.beta, eps);
      test::expect_close(layernorm(row(in.x), vec(in.gamma), vec(in.beta), eps).to_vector(), ln.y, kTol, kTol,
                         "layernorm y");
      const hc::RMSNormWorksheet rms = hc::rmsnorm_worksheet(in.x, in.gamma, eps);
      test::expect_close(rmsnorm(row(in.x), vec(in.gamma), eps).to_vector(), rms.y, kTol, kTol, "rmsnorm y");
    }
  }
}

TEST(HandcalcAgainstOps, ResidualGradientSplit) {
  BackendScope scope("reference");
  for (const Inputs& in : inputs()) {
    const size_t d = in.x.size();
    const std::vector<double> w = hc::default_w(d);
    const hc::ResidualWorksheet ws = hc::residual_worksheet(in.x, w, in.dy);
    // y = x + F(x) with F(x) = W x: Linear's x W^T for a row x.
    Tensor x = row(in.x);
    x.requires_grad_(true);
    Tensor y = linear(x, mat(w, d), Tensor(), x);
    test::expect_close(y.to_vector(), ws.y, kTol, kTol, "residual y");
    y.backward(row(in.dy));
    test::expect_close(x.grad().to_vector(), ws.dx, kTol, kTol, "residual dL/dx");
    // Without the skip path only the F term is left.
    Tensor x2 = row(in.x);
    x2.requires_grad_(true);
    linear(x2, mat(w, d)).backward(row(in.dy));
    test::expect_close(x2.grad().to_vector(), ws.grad_f, kTol, kTol, "F term");
    test::expect_close(x2.grad().to_vector(), ws.dx_no_residual, kTol, kTol, "no-residual gradient");
  }
}

TEST(HandcalcAgainstOps, PreAndPostPlacement) {
  BackendScope scope("reference");
  for (const Inputs& in : inputs()) {
    const size_t d = in.x.size();
    const std::vector<double> w = hc::default_w(d);
    for (NormKind kind : {NormKind::layernorm, NormKind::rmsnorm}) {
      const std::vector<double> beta = kind == NormKind::layernorm ? in.beta : std::vector<double>(d, 0.0);
      const hc::PlacementWorksheet ws = hc::placement_worksheet(kind, in.x, w, in.gamma, beta, 1e-5);
      auto norm = [&](const Tensor& t) {
        return kind == NormKind::layernorm ? layernorm(t, vec(in.gamma), vec(beta), 1e-5)
                                           : rmsnorm(t, vec(in.gamma), 1e-5);
      };
      Tensor x = row(in.x);
      test::expect_close((x + linear(norm(x), mat(w, d))).to_vector(), ws.pre_y, kTol, kTol, "pre y");
      test::expect_close(norm(x + linear(x, mat(w, d))).to_vector(), ws.post_y, kTol, kTol, "post y");
    }
  }
}
