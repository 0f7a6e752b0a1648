// Softmax over the last dimension: its forward and backward kernels' cases and its op-level grad
// form.
#include "cases_internal.h"
#include "normlab/ops.h"
#include "normlab/softmax_kernels.h"

namespace normlab::opcases::detail {

namespace {

constexpr int64_t kSoftmaxShapes[][2] = {{1, 1}, {1, 3}, {7, 1}, {7, 3}, {7, 65}, {7, 1000}, {64, 512}};

// x ~ N(mean, std^2), then dy ~ N(0, 1). The kernel cases draw large logits, N(50, 3^2): the
// kernel's stability.
Tensors softmax_inputs(const Shape& x_shape, uint64_t seed, double mean = 50.0, double std = 3.0) {
  Draw draw(seed);
  Tensors t;
  t.set("x", draw.normal(x_shape, std, mean));
  t.set("dy", draw.normal(x_shape));
  return t;
}

// The output the backward reads, in place of x: the reference's forward of x as a float32
// backend holds it.
void add_saved_output(Tensors& t, int64_t n, int64_t d) {
  Tensor y = Tensor::zeros({n, d}, DType::f64);
  run_kernel(backend("reference"), SoftmaxForward{y, t.at("x").to(DType::f32).to(DType::f64), n, d});
  t.erase("x");
  t.set("y", y);
}

OpCase softmax_case(bool backward, int64_t n, int64_t d, uint64_t seed) {
  OpCase c;
  c.op = backward ? "softmax_bwd" : "softmax_fwd";
  c.params = Params().add("rows", n).add("d", d).add("seed", int64_t(seed)).str();
  if (!backward) {
    c.inputs = [=] { return only(softmax_inputs({n, d}, seed), {"x"}); };
    // exp to 2 ulp of arguments up to |x - max| ~ 20: relative 1e-6 of each probability.
    c.outputs = {{"y", {n, d}, tol::kForward}};
    c.call = [=](Backend& b, Tensors& t) { run_kernel(b, SoftmaxForward{t.at("y"), t.at("x"), n, d}); };
    // the max, x - max, exp, the sum, the division: 5 per element.
    c.flops = 5.0 * double(n * d);
    return c;
  }
  c.inputs = [=] {
    Tensors t = softmax_inputs({n, d}, seed);
    add_saved_output(t, n, d);
    return t;
  };
  c.outputs = {{"dx", {n, d}, tol::kGradient}};
  c.call = [=](Backend& b, Tensors& t) { run_kernel(b, SoftmaxBackward{t.at("dx"), t.at("dy"), t.at("y"), n, d}); };
  // dy*y summed, dy - sum, times y: 4 per element.
  c.flops = 4.0 * double(n * d);
  return c;
}

}  // namespace

void add_softmax_cases(std::vector<OpCase>& cases) {
  for (const bool backward : {false, true}) {
    uint64_t seed = 1400;
    for (const auto& s : kSoftmaxShapes) cases.push_back(softmax_case(backward, s[0], s[1], seed++));
  }
}

void add_softmax_grad_forms(std::vector<GradForm>& forms) {
  // x ~ N(0, 2^2), not the kernel cases' N(50, 3^2): a shift changes no gradient of a softmax, and
  // a bf16 or fp16 check stores x, whose ulp around 50 (0.25 in bf16) would be a twelfth of the
  // spread.
  forms.push_back({"softmax", "softmax over the last dimension", [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(softmax_inputs(s.x(), seed, 0.0, 2.0), {"x"}, dt), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] { return softmax(x); };
                     return inst;
                   }});
}

}  // namespace normlab::opcases::detail
