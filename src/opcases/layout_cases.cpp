// Layout: the transpose of two axes (heads split and merged, a plain matrix transpose); its
// kernel's cases and the op-level grad forms of reshape and transpose.
#include "cases_internal.h"
#include "normlab/layout_kernels.h"
#include "normlab/ops.h"

namespace normlab::opcases::detail {

namespace {

// x ~ N(0, 1).
Tensors layout_inputs(const Shape& s, uint64_t seed) {
  Tensors t;
  t.set("x", Draw(seed).normal(s));
  return t;
}

// x viewed as (outer, A, mid, B, inner), swapped to (outer, B, mid, A, inner): bit for bit.
OpCase transpose_case(const int64_t (&dims)[5], uint64_t seed) {
  const int64_t outer = dims[0], a = dims[1], mid = dims[2], bdim = dims[3], inner = dims[4];
  const int64_t total = outer * a * mid * bdim * inner;
  OpCase c;
  c.op = "transpose";
  c.params = Params()
                 .add("outer", outer)
                 .add("A", a)
                 .add("mid", mid)
                 .add("B", bdim)
                 .add("inner", inner)
                 .add("seed", int64_t(seed))
                 .str();
  c.inputs = [=] { return layout_inputs({total}, seed); };
  c.outputs = {{"out", {total}, tol::kExact}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, Transpose{t.at("out"), t.at("x"), outer, a, mid, bdim, inner});
  };
  return c;
}

}  // namespace

void add_layout_cases(std::vector<OpCase>& cases) {
  // (outer, A, mid, B, inner): heads split/merge (B, T, H, Dh) <-> (B, H, T, Dh), a plain matrix
  // transpose, and odd sizes around the 32-wide tiles.
  const int64_t shapes[][5] = {{1, 1, 1, 1, 1},   {2, 5, 1, 3, 8}, {1, 33, 1, 65, 1},
                               {2, 16, 1, 4, 16}, {3, 7, 2, 5, 3}, {1, 100, 3, 70, 1}};
  uint64_t seed = 1900;
  for (const auto& s : shapes) cases.push_back(transpose_case(s, seed++));
}

void add_layout_grad_forms(std::vector<GradForm>& forms) {
  forms.push_back({"reshape", "(B, T, C) viewed as (B*T, C)", [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(layout_inputs(s.x(), seed), {"x"}, dt), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] { return reshape(x, {-1, x.size(-1)}); };
                     return inst;
                   }});
  forms.push_back({"transpose", "(B, T, H, Dh) -> (B, H, T, Dh)", [](const GradSizes& s, DType dt, uint64_t seed) {
                     const Shape heads = {s.batch, s.time, s.heads, s.channels / s.heads};
                     CaseInstance inst{leaves(layout_inputs(heads, seed), {"x"}, dt), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] { return transpose(x, 1, 2); };
                     return inst;
                   }});
}

}  // namespace normlab::opcases::detail
