// LayerNorm, RMSNorm and SeeDNorm: their kernels' cases (forward, backward, and the fused residual
// add + norm forward) and their op-level grad forms.
#include <algorithm>
#include <cmath>

#include "cases_internal.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/ops.h"
#include "normlab/rmsnorm_kernels.h"
#include "normlab/seednorm_kernel.h"

namespace normlab::opcases::detail {

namespace {

constexpr double kLnEps = 1e-5, kRmsEps = 1e-6;
// s = alpha*a + x in the add+norm cases: DeepNorm's (2L)^(1/4) at L = 4, not exact in float.
constexpr double kAddAlpha = 1.681792830507429;

// x ~ N(mean, std^2) (rows of `x_shape`, the last dimension normalized), gamma ~ N(1, 0.2^2),
// beta ~ N(0, 0.2^2), dy ~ N(0, 1), drawn in this order from the seed. The kernel cases centre
// x at 3 with a spread of 2, so that a variance computed as E[x^2] - mu^2 fails.
Tensors norm_inputs(const Shape& x_shape, uint64_t seed, double x_mean = 3.0, double x_std = 2.0) {
  Draw draw(seed);
  const int64_t d = x_shape.back();
  Tensors t;
  t.set("x", draw.normal(x_shape, x_std, x_mean));
  t.set("gamma", draw.normal({d}, 0.2, 1.0));
  t.set("beta", draw.normal({d}, 0.2));
  t.set("dy", draw.normal(x_shape));
  return t;
}

// The statistics a backward reads: the reference's forward of x as a float32 backend holds it.
void add_saved_statistics(Tensors& t, bool layernorm, int64_t n, int64_t d) {
  const Tensor x = t.at("x").to(DType::f32).to(DType::f64);
  Tensor y = Tensor::zeros({n, d}, DType::f64), mean = Tensor::zeros({n}, DType::f64),
         rstd = Tensor::zeros({n}, DType::f64);
  Backend& ref = backend("reference");
  if (layernorm) {
    run_kernel(ref, LayerNormForward{y, mean, rstd, x, t.at("gamma").to(DType::f32).to(DType::f64),
                                     t.at("beta").to(DType::f32).to(DType::f64), n, d, kLnEps});
    t.set("mean", mean);
  } else {
    run_kernel(ref, RmsNormForward{y, rstd, x, t.at("gamma").to(DType::f32).to(DType::f64), n, d, kRmsEps});
  }
  t.set("rstd", rstd);
}

// Per column j of a case's (n, d) rows, sum_i |term(i, j)|: the magnitude its column sum (dgamma,
// dbeta) passes through, the scale of that output's atol.
template <class Term>
std::vector<double> column_abs_sums(int64_t n, int64_t d, Term term) {
  std::vector<double> sums(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) sums[static_cast<size_t>(j)] += std::fabs(term(i, j));
  return sums;
}

// The row-normalized x of a backward case (its saved statistics; mean 0 for RMSNorm) times dy.
std::vector<double> dy_xhat_sums(const Tensors& in, bool centred) {
  const Tensor& x = in.at("x");
  const int64_t n = x.shape()[0], d = x.shape()[1];
  const double* xv = x.data<double>();
  const double* dy = in.at("dy").data<double>();
  const double* rstd = in.at("rstd").data<double>();
  const double* mean = centred ? in.at("mean").data<double>() : nullptr;
  return column_abs_sums(n, d, [&](int64_t i, int64_t j) {
    return dy[i * d + j] * (xv[i * d + j] - (mean ? mean[i] : 0.0)) * rstd[i];
  });
}

std::vector<double> dy_sums(const Tensors& in) {
  const Tensor& dy = in.at("dy");
  const int64_t d = dy.shape()[1];
  const double* v = dy.data<double>();
  return column_abs_sums(dy.shape()[0], d, [&](int64_t i, int64_t j) { return v[i * d + j]; });
}

// What a 16-bit run of LayerNorm's and RMSNorm's kernels stores in the format: the rows and the
// parameters (the statistics and the parameter gradients stay float32).
const std::vector<std::string> kStoredRows = {"x", "dy", "gamma", "beta", "y", "dx"};

OpCase row_case(const char* op, int64_t n, int64_t d, double eps, uint64_t seed, double flops_per_element) {
  OpCase c;
  c.op = op;
  c.params = Params().add("rows", n).add("d", d).add("eps", eps).add("seed", int64_t(seed)).str();
  c.flops = flops_per_element * double(n * d);
  c.numbers = {{"eps", eps}};
  return c;
}

// mu, (x-mu)^2 summed, (x-mu)*rstd*gamma + beta: 8 per element.
OpCase layernorm_forward_case(int64_t n, int64_t d, uint64_t seed) {
  OpCase c = row_case("layernorm_fwd", n, d, kLnEps, seed, 8);
  c.inputs = [=] {
    Tensors t = norm_inputs({n, d}, seed);
    t.erase("dy");  // drawn for the backward's cases: not read, not counted in the bytes
    return t;
  };
  c.outputs = {{"y", {n, d}, tol::kForward}, {"mean", {n}, tol::kForward}, {"rstd", {n}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, LayerNormForward{t.at("y"), t.at("mean"), t.at("rstd"), t.at("x"), t.at("gamma"), t.at("beta"), n, d,
                                   kLnEps});
  };
  c.stored = kStoredRows;
  return c;
}

// g = dy*gamma, xhat, the two row means, dx, dgamma and dbeta sums: 13 per element.
OpCase layernorm_backward_case(int64_t n, int64_t d, uint64_t seed) {
  OpCase c = row_case("layernorm_bwd", n, d, kLnEps, seed, 13);
  c.inputs = [=] {
    Tensors t = norm_inputs({n, d}, seed);
    add_saved_statistics(t, true, n, d);
    t.erase("beta");
    return t;
  };
  c.outputs = {{"dx", {n, d}, tol::kGradient, true},
               Output("dgamma", {d}, tol::kFullSum, true).per_column([](const Tensors& in) { return dy_xhat_sums(in, true); }),
               Output("dbeta", {d}, tol::kFullSum, true).per_column(dy_sums)};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, LayerNormBackward{t.out("dx"), t.out("dgamma"), t.out("dbeta"), t.at("dy"), t.at("x"), t.at("gamma"),
                                    t.at("mean"), t.at("rstd"), n, d});
  };
  c.stored = kStoredRows;
  return c;
}

// sum x^2, x*rstd*gamma: 4 per element.
OpCase rmsnorm_forward_case(int64_t n, int64_t d, uint64_t seed) {
  OpCase c = row_case("rmsnorm_fwd", n, d, kRmsEps, seed, 4);
  c.inputs = [=] {
    Tensors t = norm_inputs({n, d}, seed);
    t.erase("beta");
    t.erase("dy");
    return t;
  };
  c.outputs = {{"y", {n, d}, tol::kForward}, {"rstd", {n}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, RmsNormForward{t.at("y"), t.at("rstd"), t.at("x"), t.at("gamma"), n, d, kRmsEps});
  };
  c.stored = kStoredRows;
  return c;
}

// g, xhat, the row mean of g*xhat, dx, dgamma: 9 per element.
OpCase rmsnorm_backward_case(int64_t n, int64_t d, uint64_t seed) {
  OpCase c = row_case("rmsnorm_bwd", n, d, kRmsEps, seed, 9);
  c.inputs = [=] {
    Tensors t = norm_inputs({n, d}, seed);
    add_saved_statistics(t, false, n, d);
    t.erase("beta");
    return t;
  };
  c.outputs = {{"dx", {n, d}, tol::kGradient, true},
               Output("dgamma", {d}, tol::kFullSum, true).per_column([](const Tensors& in) { return dy_xhat_sums(in, false); })};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b,
               RmsNormBackward{t.out("dx"), t.out("dgamma"), t.at("dy"), t.at("x"), t.at("gamma"), t.at("rstd"), n, d});
  };
  c.stored = kStoredRows;
  return c;
}

// The add+norm inputs: the norm's (x is the residual branch b) and a ~ N(0, 1) from the seed's
// multiple of 7.
Tensors add_norm_inputs(int64_t n, int64_t d, uint64_t seed, bool layernorm) {
  Tensors t = norm_inputs({n, d}, seed);
  t.erase("dy");
  if (!layernorm) t.erase("beta");
  Draw draw((seed + 1) * 7);
  t.set("a", draw.normal({n, d}));
  return t;
}

OpCase add_norm_case(bool layernorm, int64_t n, int64_t d, uint64_t seed) {
  const double eps = layernorm ? kLnEps : kRmsEps;
  OpCase c = row_case(layernorm ? "add_layernorm_fwd" : "add_rmsnorm_fwd", n, d, eps, seed, layernorm ? 10 : 6);
  c.params = Params().add("rows", n).add("d", d).add("alpha", kAddAlpha).add("eps", eps).add("seed", int64_t(seed)).str();
  c.numbers = {{"alpha", kAddAlpha}, {"eps", eps}};
  c.inputs = [=] { return add_norm_inputs(n, d, seed, layernorm); };
  c.outputs = {{"s", {n, d}, tol::kForward}, {"y", {n, d}, tol::kForward}};
  if (layernorm) c.outputs.push_back({"mean", {n}, tol::kForward});
  c.outputs.push_back({"rstd", {n}, tol::kForward});
  c.call = [=](Backend& b, Tensors& t) {
    if (layernorm)
      run_kernel(b, AddLayerNormForward{t.at("s"), t.at("y"), t.at("mean"), t.at("rstd"), t.at("a"), t.at("x"),
                                        kAddAlpha, t.at("gamma"), t.at("beta"), n, d, eps});
    else
      run_kernel(b, AddRmsNormForward{t.at("s"), t.at("y"), t.at("rstd"), t.at("a"), t.at("x"), kAddAlpha,
                                      t.at("gamma"), n, d, eps});
  };
  return c;
}

// SeeDNorm's inputs: the norm cases' (x, gamma, dy), alpha ~ N(1, 0.2^2) about its init 1, and beta
// ~ N(0, (0.3/sqrt(d))^2) away from its init 0, so that x . beta spans tanh's linear part and its
// bend (a beta of a fixed spread would saturate tanh on the long rows and hide the path through it).
Tensors seednorm_inputs(const Shape& x_shape, uint64_t seed, double x_mean = 3.0, double x_std = 2.0) {
  Tensors t = norm_inputs(x_shape, seed, x_mean, x_std);
  t.erase("beta");
  const int64_t d = x_shape.back();
  Draw draw(seed * 5 + 1);
  t.set("alpha", draw.normal({d}, 0.2, 1.0));
  t.set("beta", draw.normal({d}, 0.3 / std::sqrt(double(d))));
  return t;
}

// x . x and x . beta, tanh, (gamma + alpha*t) * x * rstd: 7 per element.
OpCase seednorm_forward_case(int64_t n, int64_t d, uint64_t seed) {
  OpCase c = row_case("seednorm_fwd", n, d, kRmsEps, seed, 7);
  c.inputs = [=] {
    Tensors t = seednorm_inputs({n, d}, seed);
    t.erase("dy");  // drawn for the backward's cases: not read, not counted in the bytes
    return t;
  };
  c.outputs = {{"y", {n, d}, tol::kForward}, {"rstd", {n}, tol::kForward}, {"t", {n}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, SeedNormForward{t.at("y"), t.at("rstd"), t.at("t"), t.at("x"), t.at("gamma"), t.at("alpha"),
                                  t.at("beta"), n, d, kRmsEps});
  };
  return c;
}

// The saved rstd and t: the reference's forward of x as a float32 backend holds it.
void add_seednorm_statistics(Tensors& t, int64_t n, int64_t d) {
  auto f32 = [&](const char* name) { return t.at(name).to(DType::f32).to(DType::f64); };
  Tensor y = Tensor::zeros({n, d}, DType::f64), rstd = Tensor::zeros({n}, DType::f64), th = Tensor::zeros({n}, DType::f64);
  const Tensor x = f32("x"), gamma = f32("gamma"), alpha = f32("alpha"), beta = f32("beta");
  run_kernel(backend("reference"), SeedNormForward{y, rstd, th, x, gamma, alpha, beta, n, d, kRmsEps});
  t.set("rstd", rstd);
  t.set("t", th);
}

// dbeta[j] = sum_i u_i x_ij with u_i = (1 - t_i^2) sum_k dy alpha xhat over row i: its terms are
// large (u sums a whole row) and cancel across rows; dalpha's are t_i dy xhat.
std::vector<double> seednorm_dbeta_sums(const Tensors& in) {
  const Tensor& x = in.at("x");
  const int64_t n = x.shape()[0], d = x.shape()[1];
  const double *xv = x.data<double>(), *dy = in.at("dy").data<double>(), *alpha = in.at("alpha").data<double>(),
               *rstd = in.at("rstd").data<double>(), *t = in.at("t").data<double>();
  std::vector<double> u(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) u[static_cast<size_t>(i)] += dy[i * d + j] * alpha[j] * xv[i * d + j] * rstd[i];
    u[static_cast<size_t>(i)] *= 1.0 - t[i] * t[i];
  }
  return column_abs_sums(n, d, [&](int64_t i, int64_t j) { return u[static_cast<size_t>(i)] * xv[i * d + j]; });
}

std::vector<double> seednorm_dalpha_sums(const Tensors& in) {
  const Tensor& x = in.at("x");
  const int64_t n = x.shape()[0], d = x.shape()[1];
  const double *xv = x.data<double>(), *dy = in.at("dy").data<double>(), *rstd = in.at("rstd").data<double>(),
               *t = in.at("t").data<double>();
  return column_abs_sums(n, d, [&](int64_t i, int64_t j) { return t[i] * dy[i * d + j] * xv[i * d + j] * rstd[i]; });
}

// The row's two sums, dx, and the three column sums: 14 per element.
OpCase seednorm_backward_case(int64_t n, int64_t d, uint64_t seed) {
  OpCase c = row_case("seednorm_bwd", n, d, kRmsEps, seed, 14);
  c.inputs = [=] {
    Tensors t = seednorm_inputs({n, d}, seed);
    add_seednorm_statistics(t, n, d);
    return t;
  };
  c.outputs = {{"dx", {n, d}, tol::kGradient, true},
               Output("dgamma", {d}, tol::kFullSum, true).per_column([](const Tensors& in) { return dy_xhat_sums(in, false); }),
               Output("dalpha", {d}, tol::kFullSum, true).per_column(seednorm_dalpha_sums),
               Output("dbeta", {d}, tol::kFullSum, true).per_column(seednorm_dbeta_sums)};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, SeedNormBackward{t.out("dx"), t.out("dgamma"), t.out("dalpha"), t.out("dbeta"), t.at("dy"), t.at("x"),
                                   t.at("gamma"), t.at("alpha"), t.at("beta"), t.at("rstd"), t.at("t"), n, d});
  };
  return c;
}

// The grad forms draw x as N(0.5, 3^2): centred enough that a bf16 or fp16 check's storage keeps
// the rows' deviations.
Tensors grad_inputs(const Shape& x_shape, uint64_t seed) { return norm_inputs(x_shape, seed, 0.5, 3.0); }

}  // namespace

void add_norm_cases(std::vector<OpCase>& cases) {
  uint64_t i = 0;
  for (const auto& s : kRowShapes) cases.push_back(layernorm_forward_case(s[0], s[1], 800 + i++));
  i = 0;
  for (const auto& s : kRowShapes) cases.push_back(layernorm_backward_case(s[0], s[1], 800 + i++));
  i = 0;
  for (const auto& s : kRowShapes) cases.push_back(rmsnorm_forward_case(s[0], s[1], 900 + i++));
  i = 0;
  for (const auto& s : kRowShapes) cases.push_back(rmsnorm_backward_case(s[0], s[1], 900 + i++));
  for (const bool ln : {true, false}) {
    i = 0;
    for (const auto& s : kRowShapes) cases.push_back(add_norm_case(ln, s[0], s[1], 1000 + i++));
  }
  i = 0;
  for (const auto& s : kRowShapes) cases.push_back(seednorm_forward_case(s[0], s[1], 1100 + i++));
  i = 0;
  for (const auto& s : kRowShapes) cases.push_back(seednorm_backward_case(s[0], s[1], 1100 + i++));
}

void add_norm_makers(std::vector<SizedMaker>& makers) {
  makers.push_back({"layernorm_fwd", layernorm_forward_case});
  makers.push_back({"layernorm_bwd", layernorm_backward_case});
  makers.push_back({"rmsnorm_fwd", rmsnorm_forward_case});
  makers.push_back({"rmsnorm_bwd", rmsnorm_backward_case});
  for (const bool ln : {true, false})
    makers.push_back({ln ? "add_layernorm_fwd" : "add_rmsnorm_fwd",
                      [ln](int64_t n, int64_t d, uint64_t seed) { return add_norm_case(ln, n, d, seed); }});
  makers.push_back({"seednorm_fwd", seednorm_forward_case});
  makers.push_back({"seednorm_bwd", seednorm_backward_case});
}

void add_norm_grad_forms(std::vector<GradForm>& forms) {
  forms.push_back({"layernorm", "gamma * (x - mean) * rstd + beta, eps 1e-5", [](const Shape& xs, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(grad_inputs(xs, seed), {"x", "gamma", "beta"}, dt), nullptr};
                     const Tensor x = inst.inputs[0].second, g = inst.inputs[1].second, b = inst.inputs[2].second;
                     inst.forward = [=] { return layernorm(x, g, b, kLnEps); };
                     inst.numbers = {{"eps", kLnEps}};
                     return inst;
                   }});
  forms.push_back({"rmsnorm", "gamma * x / sqrt(mean(x^2) + eps), eps 1e-6", [](const Shape& xs, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(grad_inputs(xs, seed), {"x", "gamma"}, dt), nullptr};
                     const Tensor x = inst.inputs[0].second, g = inst.inputs[1].second;
                     inst.forward = [=] { return rmsnorm(x, g, kRmsEps); };
                     inst.numbers = {{"eps", kRmsEps}};
                     return inst;
                   }});
  forms.push_back({"seednorm", "(gamma + alpha * tanh(x . beta)) * x / sqrt(mean(x^2) + eps), eps 1e-6",
                   [](const GradSizes& sizes, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(seednorm_inputs(sizes.x(), seed, 0.5, 3.0), {"x", "gamma", "alpha", "beta"}, dt),
                                       nullptr};
                     const Tensor x = inst.inputs[0].second, g = inst.inputs[1].second, a = inst.inputs[2].second,
                                  b = inst.inputs[3].second;
                     inst.forward = [=] { return apply_norm(NormKind::seednorm, x, {g, a, b}, kRmsEps); };
                     inst.numbers = {{"eps", kRmsEps}};
                     return inst;
                   }});
  // The fused add+norm has two outputs: the checked scalar weighs s by 0.37 beside y.
  for (const bool ln : {true, false}) {
    forms.push_back({ln ? "add_layernorm" : "add_rmsnorm",
                     ln ? "fused s = 1.3a + b, y = LayerNorm(s); checks 0.37 s + y"
                        : "fused s = 1.3a + b, y = RMSNorm(s); checks 0.37 s + y",
                     [ln](const Shape& xs, DType dt, uint64_t seed) {
                       Tensors drawn = grad_inputs(xs, seed);
                       drawn.set("a", Draw(seed + 1).normal(xs));
                       drawn.set("b", drawn.at("x"));
                       std::vector<std::string> names = {"a", "b", "gamma"};
                       if (ln) names.push_back("beta");
                       CaseInstance inst{leaves(drawn, names, dt), nullptr};
                       const Tensor a = inst.inputs[0].second, b = inst.inputs[1].second, g = inst.inputs[2].second;
                       const Tensor be = ln ? inst.inputs[3].second : Tensor();
                       const double eps = ln ? kLnEps : kRmsEps;
                       inst.forward = [=] {
                         auto [sum, y] = ln ? add_layernorm(a, 1.3, b, g, be, eps) : add_rmsnorm(a, 1.3, b, g, eps);
                         return add_scaled(sum, 0.37, y);
                       };
                       inst.numbers = {{"alpha", 1.3}, {"eps", eps}, {"checked_sum_weight", 0.37}};
                       return inst;
                     }});
  }
}

}  // namespace normlab::opcases::detail
