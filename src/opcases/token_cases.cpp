// The ops indexed by token ids, the model's first and last: the embedding lookup (forward, and its
// scatter-add backward) and the cross-entropy of the logits against target ids (forward, backward);
// their kernels' cases and op-level grad forms. Ids outside the range are rejected
// (tests/opcases/rejects_test.cpp).
#include "cases_internal.h"
#include "normlab/cross_entropy_kernels.h"
#include "normlab/embedding_kernels.h"
#include "normlab/ops.h"

namespace normlab::opcases::detail {

namespace {

// ids uniform in [0, V) of `ids_shape`, then the table (V x D) and dy (the ids' rows of D),
// N(0, 1), in this order.
Tensors embedding_inputs(const Shape& ids_shape, int64_t v, int64_t d, uint64_t seed) {
  Draw draw(seed);
  Shape rows = ids_shape;
  rows.push_back(d);
  Tensors t;
  t.set("ids", draw.ids(ids_shape, v));
  t.set("table", draw.normal({v, d}));
  t.set("dy", draw.normal(rows));
  return t;
}

// Repeated ids among N: several rows of dy summed into one row of the table's gradient.
OpCase embedding_case(bool backward, int64_t n, int64_t v, int64_t d, uint64_t seed) {
  OpCase c;
  c.op = backward ? "embedding_bwd" : "embedding_fwd";
  c.params = Params().add("N", n).add("V", v).add("D", d).add("seed", int64_t(seed)).str();
  if (!backward) {
    c.inputs = [=] { return only(embedding_inputs({n}, v, d, seed), {"ids", "table"}); };
    c.outputs = {{"y", {n, d}, tol::kExact}};  // a gather
    c.call = [=](Backend& b, Tensors& t) {
      run_kernel(b, EmbeddingForward{t.at("y"), t.at("table"), t.at("ids"), n, v, d});
    };
    return c;
  }
  c.inputs = [=] { return only(embedding_inputs({n}, v, d, seed), {"ids", "dy"}); };
  // Up to n/v ~ 8 rows summed per table row in float.
  c.outputs = {{"dtable", {v, d}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, EmbeddingBackward{t.at("dtable"), t.at("dy"), t.at("ids"), n, v, d});
  };
  c.flops = double(n * d);
  return c;
}

// The logits (rows of V) ~ N(mean, std^2), then the targets uniform in [0, V). The kernel cases
// draw N(30, 4^2): logits far from 0, whose max the kernel subtracts.
Tensors logits_inputs(const Shape& rows, int64_t v, uint64_t seed, double mean = 30.0, double std = 4.0) {
  Draw draw(seed);
  Shape logits = rows;
  logits.push_back(v);
  Tensors t;
  t.set("logits", draw.normal(logits, std, mean));
  t.set("targets", draw.ids(rows, v));
  return t;
}

// The probabilities the backward reads, in place of the logits: the reference's forward of the
// logits as a float32 backend holds them; and the loss's gradient, 0.75.
void add_saved_probs(Tensors& t, int64_t n, int64_t v) {
  Tensor loss = Tensor::zeros({1}, DType::f64), probs = Tensor::zeros({n, v}, DType::f64);
  run_kernel(backend("reference"),
             CrossEntropyForward{loss, probs, t.at("logits").to(DType::f32).to(DType::f64), t.at("targets"), n, v});
  t.erase("logits");
  t.set("probs", probs);
  t.set("dloss", Tensor::full({1}, 0.75, DType::f64));
}

OpCase cross_entropy_case(bool backward, int64_t n, int64_t v, uint64_t seed) {
  OpCase c;
  c.op = backward ? "cross_entropy_bwd" : "cross_entropy_fwd";
  c.params = Params().add("rows", n).add("vocab", v).add("seed", int64_t(seed)).str();
  if (!backward) {
    c.inputs = [=] { return logits_inputs({n}, v, seed); };
    // loss ~ log(V) + spread: float rounding of the logits' max (30 * 6e-8) dominates.
    c.outputs = {{"loss", {1}, tol::kForward}, {"probs", {n, v}, tol::kForward}};
    c.call = [=](Backend& b, Tensors& t) {
      run_kernel(b, CrossEntropyForward{t.at("loss"), t.at("probs"), t.at("logits"), t.at("targets"), n, v});
    };
    // the softmax's 5 per element and the log of each row's sum.
    c.flops = 5.0 * double(n * v);
    return c;
  }
  c.inputs = [=] {
    Tensors t = logits_inputs({n}, v, seed);
    add_saved_probs(t, n, v);
    return t;
  };
  c.outputs = {{"dlogits", {n, v}, tol::kForward}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, CrossEntropyBackward{t.at("dlogits"), t.at("dloss"), t.at("probs"), t.at("targets"), n, v});
  };
  c.flops = 2.0 * double(n * v);
  return c;
}

}  // namespace

void add_token_cases(std::vector<OpCase>& cases) {
  const int64_t embedding_shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 10, 65}, {512, 64, 64}};
  for (const bool backward : {false, true}) {
    uint64_t seed = 1800;
    for (const auto& s : embedding_shapes) cases.push_back(embedding_case(backward, s[0], s[1], s[2], seed++));
  }
  const int64_t logits_shapes[][2] = {{1, 1}, {1, 3}, {7, 65}, {64, 512}, {512, 64}};
  for (const bool backward : {false, true}) {
    uint64_t seed = 1500;
    for (const auto& s : logits_shapes) cases.push_back(cross_entropy_case(backward, s[0], s[1], seed++));
  }
}

void add_token_grad_forms(std::vector<GradForm>& forms) {
  forms.push_back({"embedding", "table[ids], repeated ids included", [](const GradSizes& s, DType dt, uint64_t seed) {
                     const Tensors drawn = embedding_inputs({s.batch, s.time}, s.vocab, s.channels, seed);
                     CaseInstance inst{leaves(drawn, {"table"}, dt), nullptr};
                     const Tensor table = inst.inputs[0].second, ids = drawn.at("ids");
                     inst.forward = [=] { return embedding(ids, table); };
                     inst.constants = {{"ids", ids}};
                     return inst;
                   }});
  // Logits ~ N(0, 2^2), not the kernel cases' N(30, 4^2): a shift changes no gradient of the loss,
  // and a bf16 or fp16 check stores the logits, whose ulp around 30 (0.125 in bf16) would be a
  // thirty-second of the spread.
  forms.push_back({"cross_entropy", "mean over tokens of logsumexp(z) - z[target]", [](const GradSizes& s, DType dt, uint64_t seed) {
                     const Tensors drawn = logits_inputs({s.batch, s.time}, s.vocab, seed, 0.0, 2.0);
                     CaseInstance inst{leaves(drawn, {"logits"}, dt), nullptr};
                     const Tensor z = inst.inputs[0].second, targets = drawn.at("targets");
                     inst.forward = [=] { return cross_entropy(z, targets); };
                     inst.constants = {{"targets", targets}};
                     return inst;
                   }});
}

}  // namespace normlab::opcases::detail
