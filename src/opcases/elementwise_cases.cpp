// Elementwise kernels: fill, copy, add (also in place), accumulate, scale, mul, dropout, GELU, the
// sum of squares and one Adam step; their cases and the op-level grad forms of add, add_scaled,
// scale, dropout, mul, GELU and add_constant.
#include <cmath>

#include "cases_internal.h"
#include "normlab/adam_kernels.h"
#include "normlab/dropout_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/ops.h"

namespace normlab::opcases::detail {

namespace {

// Sizes of the elementwise cases: odd ones; the last is threaded.
constexpr int64_t kElementCounts[] = {1, 3, 17, 65, 1000, 100003};

// a and b ~ N(0, 1): the inputs of copy, add, accumulate, scale and mul.
Tensors pair_inputs(const Shape& s, uint64_t seed) {
  Draw draw(seed);
  Tensors t;
  t.set("a", draw.normal(s));
  t.set("b", draw.normal(s));
  return t;
}

// x ~ N(0, 2^2): GELU's curved part and both of its tails.
Tensors gelu_inputs(const Shape& s, uint64_t seed) {
  Tensors t;
  t.set("x", Draw(seed).normal(s, 2.0));
  return t;
}

// One output `out` of n values from the pair's `inputs`, one operation per element.
OpCase pair_case(const char* op, int64_t n, uint64_t seed, std::vector<std::string> inputs, Tolerance tol) {
  OpCase c;
  c.op = op;
  c.params = Params().add("n", n).add("seed", int64_t(seed)).str();
  c.inputs = [=] { return only(pair_inputs({n}, seed), inputs); };
  c.outputs = {{"out", {n}, tol}};
  c.flops = double(n);
  return c;
}

OpCase fill_case(int64_t n) {
  constexpr double kValue = 0.3;  // not exact in float: the fill rounds it
  OpCase c;
  c.op = "fill";
  c.params = Params().add("n", n).add("value", kValue).str();
  c.inputs = [] { return Tensors(); };
  c.outputs = {{"out", {n}, tol::kOneRounding}};
  c.call = [](Backend& b, Tensors& t) { run_kernel(b, Fill{t.at("out"), kValue}); };
  return c;
}

OpCase copy_case(int64_t n, uint64_t seed) {
  OpCase c = pair_case("copy", n, seed, {"a"}, tol::kExact);
  c.call = [](Backend& b, Tensors& t) { run_kernel(b, Copy{t.at("out"), t.at("a")}); };
  c.flops = 0;
  return c;
}

// out = 0.7 a - 1.3 b; in place (out = a): out = 2 out + b, each element read before it is written.
OpCase add_case(int64_t n, uint64_t seed, bool in_place) {
  OpCase c = pair_case("add", n, seed, {"a", "b"}, tol::kForward);
  if (in_place) c.params = Params().add("n", n).add("out", "a").add("seed", int64_t(seed)).str();
  c.call = [in_place](Backend& b, Tensors& t) {
    Tensor& out = t.at("out");
    if (in_place) {
      run_kernel(b, Copy{out, t.at("a")});
      run_kernel(b, Add{out, out, t.at("b"), 2.0, 1.0});
    } else {
      run_kernel(b, Add{out, t.at("a"), t.at("b"), 0.7, -1.3});
    }
  };
  c.flops = 3.0 * double(n);
  return c;
}

// dst = a, then dst += b.
OpCase accumulate_case(int64_t n, uint64_t seed) {
  OpCase c = pair_case("accumulate", n, seed, {"a", "b"}, tol::kForward);
  c.outputs = {{"dst", {n}, tol::kForward}};
  c.call = [](Backend& b, Tensors& t) {
    run_kernel(b, Copy{t.at("dst"), t.at("a")});
    run_kernel(b, Accumulate{t.at("dst"), t.at("b")});
  };
  return c;
}

OpCase scale_case(int64_t n, uint64_t seed) {
  OpCase c = pair_case("scale", n, seed, {"a"}, tol::kForward);
  c.call = [](Backend& b, Tensors& t) { run_kernel(b, Scale{t.at("out"), t.at("a"), -0.37}); };
  return c;
}

// out = a * mask / (1 - rate), the mask keyed by the seed; rate 0.5 drops about half.
OpCase dropout_case(int64_t n, uint64_t seed, double rate) {
  OpCase c = pair_case("dropout", n, seed, {"a"}, tol::kForward);
  c.params = Params().add("n", n).add("rate", rate).add("seed", int64_t(seed)).str();
  const DropoutMask mask = DropoutMask::of(rate, mix64(seed));
  c.call = [mask](Backend& b, Tensors& t) { run_kernel(b, DropoutApply{t.at("out"), t.at("a"), mask}); };
  return c;
}

OpCase mul_case(int64_t n, uint64_t seed) {
  OpCase c = pair_case("mul", n, seed, {"a", "b"}, tol::kForward);
  c.call = [](Backend& b, Tensors& t) { run_kernel(b, Mul{t.at("out"), t.at("a"), t.at("b")}); };
  return c;
}

// y, and dy/dx when wanted: without it, y's bits are the same (inference and training agree).
OpCase gelu_case(int64_t n, uint64_t seed) {
  OpCase c;
  c.op = "gelu";
  c.params = Params().add("n", n).add("seed", int64_t(seed)).str();
  c.inputs = [=] { return gelu_inputs({n}, seed); };
  c.outputs = {{"y", {n}, tol::kGelu}, {"dydx", {n}, tol::kGelu, true}};
  c.call = [](Backend& b, Tensors& t) { run_kernel(b, GeluForward{t.at("y"), t.out("dydx"), t.at("x")}); };
  // erf and exp as one each, Phi, x Phi, the density and dy/dx: 8 per element.
  c.flops = 8.0 * double(n);
  return c;
}

// The sum of x's n squares the kernel returns, written into a float64 output.
OpCase sum_squares_case(int64_t n, const std::string& what, std::function<Tensors()> inputs, Tolerance tol) {
  OpCase c;
  c.op = "sum_squares";
  c.params = Params().add("n", n).str() + " " + what;
  c.inputs = std::move(inputs);
  c.outputs = {{"sum", {1}, tol, false, {}, DType::f64}};
  c.call = [](Backend& b, Tensors& t) { t.at("sum").fill_(sum_squares(b, t.at("x"))); };
  c.flops = 2.0 * double(n);
  return c;
}

// x ~ N(0, 1).
OpCase sum_squares_case(int64_t n, uint64_t seed) {
  const auto inputs = [=] {
    Tensors t;
    t.set("x", Draw(seed).normal({n}));
    return t;
  };
  return sum_squares_case(n, Params().add("seed", int64_t(seed)).str(), inputs, tol::kDoubleSum);
}

// (1e4)^2 + 1 + 1 + 1 = 1e8 + 3, whose 3 a float32 sum would lose; exact in double.
OpCase sum_squares_keeps_small_terms() {
  const auto inputs = [] {
    Tensors t;
    t.set("x", Tensor::from({1e4, 1, 1, 1}, {4}, DType::f64));
    return t;
  };
  return sum_squares_case(4, "values=1e4,1,1,1", inputs, tol::kExact);
}

// p, g ~ N(0, 1), m ~ N(0, 0.1^2) and v = |N(0, 0.01^2)| (a running mean of squares: never
// negative), the state before the step under the names p0, m0, v0.
Tensors adam_inputs(int64_t n, uint64_t seed) {
  Draw draw(seed);
  Tensors t;
  t.set("p0", draw.normal({n}));
  t.set("g", draw.normal({n}));
  t.set("m0", draw.normal({n}, 0.1));
  std::vector<double> v = draw.normal({n}, 0.01).to_vector();
  for (double& x : v) x = std::fabs(x);
  t.set("v0", Tensor::from(v, {n}, DType::f64));
  return t;
}

OpCase adam_case(int64_t n, bool decoupled, int64_t step, uint64_t seed) {
  AdamParams hp;
  hp.lr = 1e-2;
  hp.weight_decay = 0.1;
  hp.decoupled = decoupled;
  hp.step = step;
  OpCase c;
  c.op = "adam";
  c.params = Params()
                 .add("n", n)
                 .add("decoupled", int64_t(decoupled))
                 .add("step", step)
                 .add("lr", hp.lr)
                 .add("wd", hp.weight_decay)
                 .add("seed", int64_t(seed))
                 .str();
  c.inputs = [=] { return adam_inputs(n, seed); };
  // m, v: two float roundings of O(1) values. p moves by lr * O(1): float32 rounding of p itself
  // (~6e-8) dominates.
  c.outputs = {{"p", {n}, tol::kForward}, {"m", {n}, tol::kForward}, {"v", {n}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, Copy{t.at("p"), t.at("p0")});
    run_kernel(b, Copy{t.at("m"), t.at("m0")});
    run_kernel(b, Copy{t.at("v"), t.at("v0")});
    run_kernel(b, AdamStep{t.at("p"), t.at("g"), t.at("m"), t.at("v"), hp});
  };
  // The decay, m, v, their corrections, the step: 16 per element.
  c.flops = 16.0 * double(n);
  return c;
}

void add_adam_cases(std::vector<OpCase>& cases) {
  uint64_t seed = 700;
  for (const int64_t n : {int64_t{1}, int64_t{65}, int64_t{100003}})
    for (const bool decoupled : {false, true})
      for (const int64_t step : {int64_t{1}, int64_t{10}}) cases.push_back(adam_case(n, decoupled, step, seed++));
}

// a and b drawn as the pair cases draw them, named `names`, requiring gradients.
std::vector<std::pair<std::string, Tensor>> pair_leaves(const Shape& s, DType dt, uint64_t seed,
                                                         const std::vector<std::string>& names) {
  Tensors drawn = pair_inputs(s, seed);
  if (names.size() == 1) drawn.set(names[0], drawn.at("a"));
  return leaves(drawn, names, dt);
}

}  // namespace

void add_elementwise_cases(std::vector<OpCase>& cases) {
  for (const int64_t n : kElementCounts) cases.push_back(fill_case(n));
  // Every op of the pair from the same seeds: 400 for n = 1, 401 for n = 3, ...
  const auto by_size = [&](const std::function<OpCase(int64_t n, uint64_t seed)>& make) {
    uint64_t seed = 400;
    for (const int64_t n : kElementCounts) cases.push_back(make(n, seed++));
  };
  by_size(copy_case);
  by_size([](int64_t n, uint64_t seed) { return add_case(n, seed, false); });
  by_size([](int64_t n, uint64_t seed) { return add_case(n, seed, true); });
  by_size(accumulate_case);
  by_size(scale_case);
  by_size(mul_case);
  by_size([](int64_t n, uint64_t seed) { return dropout_case(n, seed, 0.5); });
  cases.push_back(dropout_case(1000, 470, 0.05));
  uint64_t seed = 500;
  for (const int64_t n : kElementCounts) cases.push_back(gelu_case(n, seed++));
  seed = 600;
  for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{65}, int64_t{1000}, int64_t{300007}})
    cases.push_back(sum_squares_case(n, seed++));
  cases.push_back(sum_squares_keeps_small_terms());
  add_adam_cases(cases);
}

void add_elementwise_makers(std::vector<SizedMaker>& makers) {
  makers.push_back({"copy", [](int64_t n, int64_t d, uint64_t seed) { return copy_case(n * d, seed); }});
  makers.push_back({"scale", [](int64_t n, int64_t d, uint64_t seed) { return scale_case(n * d, seed); }});
}

void add_elementwise_grad_forms(std::vector<GradForm>& forms) {
  forms.push_back({"add", "a + b", [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{pair_leaves(s.x(), dt, seed, {"a", "b"}), nullptr};
                     const Tensor a = inst.inputs[0].second, b = inst.inputs[1].second;
                     inst.forward = [=] { return add(a, b); };
                     return inst;
                   }});
  forms.push_back({"add_scaled", "alpha*a + b (DeepNorm residual), alpha = 1.7",
                   [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{pair_leaves(s.x(), dt, seed, {"a", "b"}), nullptr};
                     const Tensor a = inst.inputs[0].second, b = inst.inputs[1].second;
                     inst.forward = [=] { return add_scaled(a, 1.7, b); };
                     inst.numbers = {{"alpha", 1.7}};
                     return inst;
                   }});
  forms.push_back({"scale", "alpha*x, alpha = -0.6", [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{pair_leaves(s.x(), dt, seed, {"x"}), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] { return scale(x, -0.6); };
                     inst.numbers = {{"alpha", -0.6}};
                     return inst;
                   }});
  forms.push_back({"dropout", "x * mask / (1 - p), p = 0.3, one mask (the same in every evaluation)",
                   [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{pair_leaves(s.x(), dt, seed, {"x"}), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] {
                       const DropoutScope drop(0.3, seed);
                       return dropout(x);
                     };
                     inst.numbers = {{"p", 0.3}};
                     return inst;
                   }});
  forms.push_back({"mul", "a * b elementwise", [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{pair_leaves(s.x(), dt, seed, {"a", "b"}), nullptr};
                     const Tensor a = inst.inputs[0].second, b = inst.inputs[1].second;
                     inst.forward = [=] { return mul(a, b); };
                     return inst;
                   }});
  forms.push_back({"gelu", "x * Phi(x), exact erf form", [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(gelu_inputs(s.x(), seed), {"x"}, dt), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] { return gelu(x); };
                     return inst;
                   }});
}

void add_constant_grad_form(std::vector<GradForm>& forms) {
  // x of the channels alone: a norm's gain vector, to which Gemma adds 1.
  forms.push_back({"add_constant", "x + 1 (Gemma's gain 1 + w)", [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{pair_leaves({s.channels}, dt, seed, {"x"}), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] { return add_constant(x, 1.0); };
                     return inst;
                   }});
}

}  // namespace normlab::opcases::detail
