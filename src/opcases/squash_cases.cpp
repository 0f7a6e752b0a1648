// The elementwise normalizers DyT (tanh) and Derf (erf, with a learned shift), and the channel
// scale of ReZero, SkipInit and LayerScale: their kernels' cases and op-level grad forms.
#include <cmath>

#include "cases_internal.h"
#include "normlab/channel_scale_kernels.h"
#include "normlab/ops.h"
#include "normlab/reference_kernels.h"
#include "normlab/squash_kernels.h"

namespace normlab::opcases::detail {

namespace {

// alpha 0.5 (DyT's default) on x ~ N(3, 2^2): u = alpha*x (+ shift) spans the squash's linear
// part and its saturation. Derf's shift away from its init (0), so that a kernel dropping it fails.
constexpr double kAlpha = 0.5, kShift = -0.3;

struct SquashVariant {
  Squash f;
  bool beta;
};

const char* op_of(Squash f, bool backward) {
  if (f == Squash::tanh) return backward ? "dyt_bwd" : "dyt_fwd";
  return backward ? "derf_bwd" : "derf_fwd";
}

// The norm cases' draws (x, gamma, beta, dy), alpha and Derf's shift.
Tensors squash_inputs(const Shape& x_shape, uint64_t seed, Squash f, bool beta) {
  Draw draw(seed);
  const int64_t d = x_shape.back();
  Tensors t;
  t.set("x", draw.normal(x_shape, 2.0, 3.0));
  t.set("gamma", draw.normal({d}, 0.2, 1.0));
  Tensor b = draw.normal({d}, 0.2);
  if (beta) t.set("beta", b);
  t.set("dy", draw.normal(x_shape));
  t.set("alpha", Tensor::full({1}, kAlpha, DType::f64));
  if (f == Squash::erf) t.set("shift", Tensor::full({1}, kShift, DType::f64));
  return t;
}

// sum over every element of |x*h| (of_x) or |h|, h = dy*gamma*f'(u): the magnitude dalpha's
// (dshift's) terms pass through, cancelling.
double squash_terms(const Tensors& in, Squash f, bool of_x) {
  const std::vector<double> x = in.at("x").to_vector(), dy = in.at("dy").to_vector(), g = in.at("gamma").to_vector();
  const double s = in.has("shift") ? in.at("shift").to_vector()[0] : 0.0;
  const size_t d = g.size();
  double t = 0;
  for (size_t i = 0; i < x.size(); ++i)
    t += std::fabs((of_x ? x[i] : 1.0) * dy[i] * g[i % d] * squash_slope_ref(f, kAlpha * x[i] + s));
  return t;
}

// Per column, sum over the rows of |dy f(u)| (dgamma's terms, of_f) or |dy| (dbeta's): the scale of
// their atol (column sums over every row).
std::vector<double> squash_column_sums(const Tensors& in, Squash f, bool of_f) {
  const Tensor& x = in.at("x");
  const int64_t n = x.shape()[0], d = x.shape()[1];
  const double *xv = x.data<double>(), *dy = in.at("dy").data<double>();
  const double a = in.at("alpha").to_vector()[0], s = in.has("shift") ? in.at("shift").to_vector()[0] : 0.0;
  std::vector<double> sums(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j)
      sums[static_cast<size_t>(j)] += std::fabs(dy[i * d + j] * (of_f ? squash_ref(f, a * xv[i * d + j] + s) : 1.0));
  return sums;
}

OpCase squash_case(SquashVariant v, bool backward, int64_t n, int64_t d, uint64_t seed) {
  OpCase c;
  c.op = op_of(v.f, backward);
  c.params = Params().add("beta", int64_t(v.beta)).add("rows", n).add("d", d).add("seed", int64_t(seed)).str();
  // What the call reads, no more (bench ops counts each input's bytes): the forward no dy, the
  // backward no beta.
  c.inputs = [=] {
    Tensors t = squash_inputs({n, d}, seed, v.f, v.beta);
    t.erase(backward ? "beta" : "dy");
    return t;
  };
  const Squash f = v.f;
  if (!backward) {
    // alpha*x + shift, f, gamma*f + beta: 5 per element.
    c.flops = 5.0 * double(n * d);
    c.outputs = {{"y", {n, d}, tol::kForward}};
    c.call = [=](Backend& b, Tensors& t) {
      run_kernel(b, SquashForward{t.at("y"), t.at("x"), t.at("alpha"), t.get("shift"), t.at("gamma"), t.get("beta"), n,
                                  d, f});
    };
    return c;
  }
  // u, f'(u), h, dx, the dalpha and dshift sums, dgamma (f and its sum), dbeta: 13 per element.
  c.flops = 13.0 * double(n * d);
  c.outputs = {{"dx", {n, d}, tol::kGradient, true},
               {"dalpha", {1}, tol::kFullSum, true, [f](const Tensors& in) { return squash_terms(in, f, true); }}};
  if (f == Squash::erf)
    c.outputs.push_back({"dshift", {1}, tol::kFullSum, true, [f](const Tensors& in) { return squash_terms(in, f, false); }});
  c.outputs.push_back(Output("dgamma", {d}, tol::kFullSum, true).per_column([f](const Tensors& in) {
    return squash_column_sums(in, f, true);
  }));
  if (v.beta)
    c.outputs.push_back(Output("dbeta", {d}, tol::kFullSum, true).per_column([f](const Tensors& in) {
      return squash_column_sums(in, f, false);
    }));
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, SquashBackward{t.out("dx"), t.out("dalpha"), t.out("dshift"), t.out("dgamma"), t.out("dbeta"),
                                 t.at("dy"), t.at("x"), t.at("alpha"), t.get("shift"), t.at("gamma"), n, d, f});
  };
  return c;
}

// x and dy as the norms draw them, lambda ~ N(0, 0.1^2) of C = d or 1 values from the seed's
// multiple of 3.
Tensors channel_scale_inputs(const Shape& x_shape, uint64_t seed, int64_t c) {
  Draw draw(seed);
  Tensors t;
  t.set("x", draw.normal(x_shape, 2.0, 3.0));
  const int64_t d = x_shape.back();
  draw.normal({d});  // gamma and beta of the norms' draws: x and dy stay those of the same seed
  draw.normal({d});
  t.set("dy", draw.normal(x_shape));
  t.set("lambda", Draw(seed * 3).normal({c}, 0.1));
  return t;
}

double channel_scale_terms(const Tensors& in) {
  const std::vector<double> x = in.at("x").to_vector(), dy = in.at("dy").to_vector();
  double terms = 0;
  for (size_t i = 0; i < x.size(); ++i) terms += std::fabs(x[i] * dy[i]);
  return terms;
}

OpCase channel_scale_case(bool backward, int64_t c, int64_t n, int64_t d, uint64_t seed) {
  OpCase k;
  k.op = backward ? "channel_scale_bwd" : "channel_scale_fwd";
  k.params = Params().add("c", c).add("rows", n).add("d", d).add("seed", int64_t(seed)).str();
  k.inputs = [=] {
    Tensors t = channel_scale_inputs({n, d}, seed, c);
    if (!backward) t.erase("dy");  // drawn for the backward: not read, not counted in the bytes
    return t;
  };
  if (!backward) {
    k.flops = double(n * d);
    k.outputs = {{"y", {n, d}, tol::kForward}};
    k.call = [=](Backend& b, Tensors& t) {
      run_kernel(b, ChannelScaleForward{t.at("y"), t.at("x"), t.at("lambda"), n, d, c});
    };
    return k;
  }
  k.flops = 3.0 * double(n * d);
  k.outputs = {{"dx", {n, d}, tol::kForward, true}};
  if (c == 1)
    k.outputs.push_back({"dlambda", {1}, tol::kFullSum, true, channel_scale_terms});
  else
    k.outputs.push_back({"dlambda", {c}, tol::kReduction, true});
  k.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, ChannelScaleBackward{t.out("dx"), t.out("dlambda"), t.at("dy"), t.at("x"), t.at("lambda"), n, d, c});
  };
  return k;
}

}  // namespace

void add_squash_cases(std::vector<OpCase>& cases) {
  const SquashVariant variants[] = {{Squash::tanh, true}, {Squash::erf, true}, {Squash::tanh, false}};
  for (const bool backward : {false, true}) {
    uint64_t seed = backward ? 1400 : 1300;
    for (const SquashVariant& v : variants)
      for (const auto& s : kRowShapes) cases.push_back(squash_case(v, backward, s[0], s[1], seed++));
  }
  for (const bool backward : {false, true}) {
    uint64_t seed = 1500;
    for (const bool scalar : {false, true})
      for (const auto& s : kRowShapes) cases.push_back(channel_scale_case(backward, scalar ? 1 : s[1], s[0], s[1], seed++));
  }
}

void add_squash_makers(std::vector<SizedMaker>& makers) {
  for (const Squash f : {Squash::tanh, Squash::erf})
    for (const bool backward : {false, true})
      makers.push_back({op_of(f, backward), [f, backward](int64_t n, int64_t d, uint64_t seed) {
                          return squash_case({f, true}, backward, n, d, seed);
                        }});
}

void add_squash_grad_forms(std::vector<GradForm>& forms) {
  // x drawn as N(3, 2^2) like the kernel cases: alpha*x + shift spans the linear part and saturation.
  forms.push_back({"dyt", "DyT: gamma * tanh(alpha x) + beta, alpha a learned scalar", [](const Shape& xs, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(squash_inputs(xs, seed, Squash::tanh, true), {"x", "alpha", "gamma", "beta"}, dt),
                                       nullptr};
                     const Tensor x = inst.inputs[0].second, a = inst.inputs[1].second, g = inst.inputs[2].second,
                                  b = inst.inputs[3].second;
                     inst.forward = [=] { return dyt(x, a, g, b); };
                     return inst;
                   }});
  forms.push_back({"derf", "Derf: gamma * erf(alpha x + s) + beta, alpha and s learned scalars",
                   [](const Shape& xs, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(squash_inputs(xs, seed, Squash::erf, true), {"x", "alpha", "shift", "gamma", "beta"}, dt),
                                       nullptr};
                     const Tensor x = inst.inputs[0].second, a = inst.inputs[1].second, s = inst.inputs[2].second,
                                  g = inst.inputs[3].second, b = inst.inputs[4].second;
                     inst.forward = [=] { return derf(x, a, s, g, b); };
                     return inst;
                   }});
  for (const bool scalar : {false, true}) {
    forms.push_back({scalar ? "scalar_scale" : "channel_scale",
                     scalar ? "x * a, a one learned scalar (ReZero, SkipInit)" : "x * lambda over the last dimension (LayerScale)",
                     [scalar](const Shape& xs, DType dt, uint64_t seed) {
                       Tensors drawn = channel_scale_inputs(xs, seed, scalar ? 1 : xs.back());
                       const char* name = scalar ? "a" : "lambda";
                       drawn.set(name, drawn.at("lambda"));
                       CaseInstance inst{leaves(drawn, {"x", name}, dt), nullptr};
                       const Tensor x = inst.inputs[0].second, l = inst.inputs[1].second;
                       inst.forward = [=] { return channel_scale(x, l); };
                       return inst;
                     }});
  }
}

}  // namespace normlab::opcases::detail
