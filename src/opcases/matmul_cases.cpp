// Matrix products: the batched matmul (every transpose, shared operand and accumulate), the linear
// layer's forward with its bias and residual epilogue, its input gradient with the GELU gate, and
// the column sums of the bias gradient; their kernels' cases and op-level grad forms.
#include "cases_internal.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/matmul_kernels.h"
#include "normlab/ops.h"

namespace normlab::opcases::detail {

namespace {

struct MatmulShape {
  int64_t batch, m, n, k;
  bool ta, tb, ab, bb, acc;
  MatmulSpec spec() const { return MatmulSpec{batch, m, n, k, ta, tb, ab, bb, acc}; }
};

// A and B as stored (transposed, or one for the whole batch, as the shape says), then C's initial
// value when the product accumulates into it, N(0, 1) in this order.
Tensors matmul_inputs(const MatmulShape& s, uint64_t seed) {
  Draw draw(seed);
  const auto stored = [&](bool batched, bool trans, int64_t rows, int64_t cols) {
    const Shape one = trans ? Shape{cols, rows} : Shape{rows, cols};
    return batched ? Shape{s.batch, one[0], one[1]} : one;
  };
  Tensors t;
  t.set("a", draw.normal(stored(s.ab, s.ta, s.m, s.k)));
  t.set("b", draw.normal(stored(s.bb, s.tb, s.k, s.n)));
  if (s.acc) t.set("c0", draw.normal({s.batch, s.m, s.n}));
  return t;
}

OpCase matmul_case(const MatmulShape& s, uint64_t seed) {
  OpCase c;
  c.op = "matmul";
  c.params = Params()
                 .add("batch", s.batch)
                 .add("m", s.m)
                 .add("n", s.n)
                 .add("k", s.k)
                 .add("ta", int64_t(s.ta))
                 .add("tb", int64_t(s.tb))
                 .add("ab", int64_t(s.ab))
                 .add("bb", int64_t(s.bb))
                 .add("acc", int64_t(s.acc))
                 .add("seed", int64_t(seed))
                 .str();
  c.inputs = [=] { return matmul_inputs(s, seed); };
  // Dot products of K float32 terms ~N(0,1): kForward up to K = 65; the K = 1000 cases get the
  // reduction tolerance (measured 2.4e-5). A longer contraction (a product made to order) errs
  // more, an output near zero beside partial sums of O(sqrt(K)): the absolute bound grows with K
  // (measured max |diff| 1.8e-4, 2.5e-4, 3.1e-4 at K = 3072, 8192, 32768 against 2e-4 K / 1000).
  // Without a contraction C is zero, or kept, exactly.
  Tolerance tol = s.k == 0 ? tol::kExact : s.k > 100 ? tol::kReduction : tol::kForward;
  if (s.k > 1000) tol.atol *= static_cast<double>(s.k) / 1000.0;
  c.outputs = {{"c", {s.batch, s.m, s.n}, tol}};
  c.call = [spec = s.spec()](Backend& b, Tensors& t) {
    if (spec.accumulate) run_kernel(b, Copy{t.at("c"), t.at("c0")});
    run_kernel(b, Matmul{t.at("c"), t.at("a"), t.at("b"), spec});
  };
  c.flops = 2.0 * double(s.batch * s.m * s.n * s.k);
  return c;
}

// x (rows of K), w (N x K), bias (N), the residual r and dy (rows of N), the gate (rows of K),
// N(0, 1) in this order (x: N(0, x_std^2)): the linear cases of a seed share their w.
Tensors linear_inputs(const Shape& x_shape, int64_t n, uint64_t seed, double x_std = 1.0) {
  Draw draw(seed);
  Shape y_shape = x_shape;
  y_shape.back() = n;
  Tensors t;
  t.set("x", draw.normal(x_shape, x_std));
  t.set("w", draw.normal({n, x_shape.back()}));
  t.set("bias", draw.normal({n}));
  t.set("r", draw.normal(y_shape));
  t.set("dy", draw.normal(y_shape));
  t.set("gate", draw.normal(x_shape));
  return t;
}

// m rows of k into n outputs; `flags` (bias, gated) say which optional input the case takes.
OpCase linear_case(const char* op, int64_t m, int64_t k, int64_t n, Params flags, std::vector<std::string> inputs,
                   uint64_t seed) {
  OpCase c;
  c.op = op;
  c.params = Params().add("m", m).add("k", k).add("n", n).str() + " " + flags.add("seed", int64_t(seed)).str();
  c.inputs = [=] { return only(linear_inputs({m, k}, n, seed), inputs); };
  c.flops = 2.0 * double(m * k * n);
  return c;
}

OpCase linear_forward_case(int64_t m, int64_t k, int64_t n, bool bias, uint64_t seed) {
  std::vector<std::string> inputs = {"x", "w"};
  if (bias) inputs.push_back("bias");
  OpCase c = linear_case("linear_fwd", m, k, n, Params().add("bias", int64_t(bias)), inputs, seed);
  c.outputs = {{"y", {m, n}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, LinearForward{t.at("y"), t.at("x"), t.at("w"), t.get("bias"), Tensor(), m, k, n});
  };
  return c;
}

OpCase linear_residual_case(int64_t m, int64_t k, int64_t n, uint64_t seed) {
  OpCase c = linear_case("linear_fwd_residual", m, k, n, Params(), {"x", "w", "bias", "r"}, seed);
  c.outputs = {{"y", {m, n}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, LinearForward{t.at("y"), t.at("x"), t.at("w"), t.at("bias"), t.at("r"), m, k, n});
  };
  return c;
}

OpCase linear_backward_input_case(int64_t m, int64_t k, int64_t n, bool gated, uint64_t seed) {
  std::vector<std::string> inputs = {"w", "dy"};
  if (gated) inputs.push_back("gate");
  OpCase c = linear_case("linear_bwd_input", m, k, n, Params().add("gated", int64_t(gated)), inputs, seed);
  c.outputs = {{"dx", {m, k}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, LinearBackwardInput{t.at("dx"), t.at("dy"), t.at("w"), t.get("gate"), m, k, n});
  };
  return c;
}

OpCase sum_rows_case(int64_t rows, int64_t d, uint64_t seed) {
  OpCase c;
  c.op = "sum_rows";
  c.params = Params().add("rows", rows).add("d", d).add("seed", int64_t(seed)).str();
  c.inputs = [=] {
    Tensors t;
    t.set("x", Draw(seed).normal({rows, d}));
    return t;
  };
  // Up to 512 rows summed in float32 per column.
  c.outputs = {{"out", {d}, tol::kReduction}};
  c.call = [=](Backend& b, Tensors& t) { run_kernel(b, SumRows{t.at("out"), t.at("x"), rows, d}); };
  c.flops = double(rows * d);
  return c;
}

void add_matmul_shapes(std::vector<OpCase>& cases) {
  // Every transpose, shared operand and accumulate combination on small shapes; then larger ones,
  // a long contraction, and none.
  const int64_t shapes[][4] = {{1, 1, 1, 1},  {1, 7, 5, 3},  {3, 7, 5, 3}, {2, 33, 17, 65},
                               {4, 1, 9, 16}, {2, 16, 1, 8}, {5, 8, 8, 1}};
  uint64_t seed = 1;
  for (const auto& s : shapes)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const bool ab : {false, true})
          for (const bool bb : {false, true})
            for (const bool acc : {false, true})
              cases.push_back(matmul_case({s[0], s[1], s[2], s[3], ta, tb, ab, bb, acc}, seed++));
  cases.push_back(matmul_case({1, 64, 512, 64, false, true, true, true, false}, 101));
  cases.push_back(matmul_case({1, 64, 48, 1000, true, false, true, true, true}, 102));
  cases.push_back(matmul_case({8, 31, 29, 37, false, false, true, false, false}, 103));  // folded into one GEMM
  cases.push_back(matmul_case({8, 31, 29, 37, true, false, true, false, true}, 104));    // shared weights
  cases.push_back(matmul_case({6, 31, 29, 37, false, true, false, true, false}, 105));   // shared A
  cases.push_back(matmul_case({1, 2, 3, 0, false, false, true, true, false}, 106));      // C becomes zero
  cases.push_back(matmul_case({1, 2, 3, 0, false, false, true, true, true}, 107));       // C kept
}

}  // namespace

OpCase matmul_case_of(const MatmulSpec& s, uint64_t seed) {
  return matmul_case({s.batch, s.m, s.n, s.k, s.trans_a, s.trans_b, s.a_batched, s.b_batched, s.accumulate}, seed);
}

void add_matmul_cases(std::vector<OpCase>& cases) {
  add_matmul_shapes(cases);
  const int64_t linear_shapes[][3] = {{1, 1, 1}, {7, 3, 5}, {64, 65, 1}, {33, 64, 128}, {512, 64, 64}};
  uint64_t seed = 200;
  for (const auto& s : linear_shapes) {
    for (const bool bias : {false, true}) cases.push_back(linear_forward_case(s[0], s[1], s[2], bias, seed));
    ++seed;
  }
  // The epilogues: a residual added to the product, a gate multiplying the input gradient.
  const int64_t epilogue_shapes[][3] = {{1, 1, 1}, {7, 3, 5}, {64, 65, 1}, {33, 64, 128}, {512, 128, 64}};
  seed = 250;
  for (const auto& s : epilogue_shapes) cases.push_back(linear_residual_case(s[0], s[1], s[2], seed++));
  seed = 250;
  for (const auto& s : epilogue_shapes) {
    for (const bool gated : {false, true}) cases.push_back(linear_backward_input_case(s[0], s[1], s[2], gated, seed));
    ++seed;
  }
  const int64_t sum_shapes[][2] = {{1, 1}, {7, 3}, {7, 65}, {1, 1000}, {512, 64}, {64, 513}};
  seed = 300;
  for (const auto& s : sum_shapes) cases.push_back(sum_rows_case(s[0], s[1], seed++));
}

void add_matmul_grad_forms(std::vector<GradForm>& forms) {
  // x (batch, time, channels) into `hidden` outputs; its bias named b.
  const auto linear_leaves = [](const GradSizes& s, DType dt, uint64_t seed, std::vector<std::string> names) {
    Tensors drawn = linear_inputs(s.x(), s.hidden, seed);
    drawn.set("b", drawn.at("bias"));
    return leaves(drawn, names, dt);
  };
  forms.push_back({"linear", "y = x W^T + b", [=](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{linear_leaves(s, dt, seed, {"x", "w", "b"}), nullptr};
                     const Tensor x = inst.inputs[0].second, w = inst.inputs[1].second, b = inst.inputs[2].second;
                     inst.forward = [=] { return linear(x, w, b); };
                     return inst;
                   }});
  forms.push_back({"linear_residual", "y = r + x W^T + b (the add in the product's epilogue)",
                   [=](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{linear_leaves(s, dt, seed, {"x", "w", "b", "r"}), nullptr};
                     const Tensor x = inst.inputs[0].second, w = inst.inputs[1].second, b = inst.inputs[2].second,
                                  r = inst.inputs[3].second;
                     inst.forward = [=] { return linear(x, w, b, r); };
                     return inst;
                   }});
  // h ~ N(0, 2^2) as the gelu cases draw x: across GELU's curved part.
  forms.push_back({"gelu_linear", "y = r + gelu(h) W^T + b (GELU's derivative in the dh product's epilogue)",
                   [](const GradSizes& s, DType dt, uint64_t seed) {
                     Tensors drawn = linear_inputs({s.batch, s.time, s.hidden}, s.channels, seed, 2.0);
                     drawn.set("h", drawn.at("x"));
                     drawn.set("b", drawn.at("bias"));
                     CaseInstance inst{leaves(drawn, {"h", "w", "b", "r"}, dt), nullptr};
                     const Tensor h = inst.inputs[0].second, w = inst.inputs[1].second, b = inst.inputs[2].second,
                                  r = inst.inputs[3].second;
                     inst.forward = [=] { return gelu_linear(h, w, b, r); };
                     return inst;
                   }});
  for (const bool shared : {false, true}) {
    forms.push_back({shared ? "matmul_shared" : "matmul",
                     shared ? "C_b = A_b B with B shared across the batch" : "batched C_b = A_b B_b",
                     [shared](const GradSizes& s, DType dt, uint64_t seed) {
                       const MatmulShape m{s.batch, s.time, s.hidden, s.channels, false, false, true, !shared, false};
                       CaseInstance inst{leaves(matmul_inputs(m, seed), {"a", "b"}, dt), nullptr};
                       const Tensor a = inst.inputs[0].second, b = inst.inputs[1].second;
                       inst.forward = [=] { return matmul(a, b); };
                       return inst;
                     }});
  }
}

}  // namespace normlab::opcases::detail
