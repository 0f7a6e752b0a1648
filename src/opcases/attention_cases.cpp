// Causal attention (forward, backward and its gradient masks), the statistics of a log step (the
// attention logits' max and entropy, the residual stream's row norms) and the toy model's causal
// prefix mean: their kernels' cases and the op-level grad forms of attention and the prefix mean.
#include <algorithm>
#include <cmath>

#include "cases_internal.h"
#include "normlab/attention_kernels.h"
#include "normlab/dropout_kernels.h"
#include "normlab/ops.h"
#include "normlab/prefix_mean_kernels.h"
#include "normlab/statistics_kernels.h"

namespace normlab::opcases::detail {

namespace {

// B batches of T queries, H heads of Dh channels; causal over T keys, or (tk > 0) seeing all tk keys.
struct AttentionShape {
  int64_t b, t, h, dh, tk = 0;
  bool causal() const { return tk == 0; }
  AttentionKeys keys() const { return {tk, causal()}; }
  int64_t key_count() const { return causal() ? t : tk; }
  Shape x() const { return {b, t, h * dh}; }
  Shape kv() const { return {b, key_count(), h * dh}; }
  double scale() const { return 1.0 / std::sqrt(double(dh)); }
  std::string params(uint64_t seed) const {
    Params p;
    p.add("B", b).add("T", t);
    if (!causal()) p.add("Tk", tk);
    return p.add("H", h).add("Dh", dh).add("seed", int64_t(seed)).str();
  }
  // q k^T and probs v over the scores each query sees: half of T x T when causal.
  double flops() const { return (causal() ? 2.0 : 4.0) * double(b * h * t * key_count() * dh); }
};

// q and the output's gradient (B, T, C), k and v (B, Tk, C), ~ N(0, std^2) in the order q, k, v, dout.
Tensors attention_inputs(const AttentionShape& a, uint64_t seed, double std = 1.0) {
  Draw draw(seed);
  Tensors t;
  for (const char* name : {"q", "k", "v", "dout"}) t.set(name, draw.normal(name[0] == 'k' || name[0] == 'v' ? a.kv() : a.x(), std));
  return t;
}

// The stats the backward reads: the reference's forward of q, k, v as a float32 backend holds
// them, so that only the backward is compared.
void add_saved_stats(Tensors& t, const AttentionShape& a) {
  Tensor out = Tensor::zeros(a.x(), DType::f64), stats = Tensor::zeros({a.b, a.h, a.t, 2}, DType::f64);
  const auto held = [&](const char* name) { return t.at(name).to(DType::f32).to(DType::f64); };
  run_kernel(backend("reference"), AttentionForward{out, stats, held("q"), held("k"), held("v"), a.b, a.t, a.h, a.dh,
                                                    a.scale(), DropoutMask{}, a.keys()});
  t.set("stats", stats);
}

// With `rate` above 0, the probabilities' dropout at that rate, keyed by the seed.
DropoutMask case_dropout(double rate, uint64_t seed) { return DropoutMask::of(rate, mix64(seed)); }
std::string with_dropout(std::string params, double rate) {
  return rate > 0 ? params + " " + Params().add("dropout", rate).str() : params;
}

OpCase attention_forward_case(const AttentionShape& a, uint64_t seed, double rate = 0.0) {
  OpCase c;
  c.op = "attention_fwd";
  c.params = with_dropout(a.params(seed), rate);
  c.inputs = [=] { return only(attention_inputs(a, seed), {"q", "k", "v"}); };
  c.outputs = {{"out", a.x(), tol::kForward}, {"stats", {a.b, a.h, a.t, 2}, tol::kForward}};
  const DropoutMask drop = case_dropout(rate, seed);
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, AttentionForward{t.at("out"), t.at("stats"), t.at("q"), t.at("k"), t.at("v"), a.b, a.t, a.h, a.dh,
                                   a.scale(), drop, a.keys()});
  };
  c.flops = a.flops();
  return c;
}

// dq, dk, dv each alone too: the gradient masks.
OpCase attention_backward_case(const AttentionShape& a, uint64_t seed, double rate = 0.0,
                               Precision probs = Precision::fp32) {
  OpCase c;
  c.op = "attention_bwd";
  c.params = with_dropout(a.params(seed), rate);
  if (probs != Precision::fp32) c.params += " " + Params().add("probs", to_string(probs)).str();
  c.inputs = [=] {
    Tensors t = attention_inputs(a, seed);
    add_saved_stats(t, a);
    return t;
  };
  c.outputs.push_back({"dq", a.x(), tol::kGradient, true});
  for (const char* name : {"dk", "dv"}) c.outputs.push_back({name, a.kv(), tol::kGradient, true});
  const DropoutMask drop = case_dropout(rate, seed);
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, AttentionBackward{t.out("dq"), t.out("dk"), t.out("dv"), t.at("dout"), t.at("q"), t.at("k"),
                                    t.at("v"), t.at("stats"), a.b, a.t, a.h, a.dh, a.scale(), probs, drop, a.keys()});
  };
  // The recomputed scores, dP, dv, dq, dk: five products of the forward's size.
  c.flops = 2.5 * a.flops();
  return c;
}

// q, k ~ N(0, 3^2): large logits, whose max must come out exactly and whose entropy nears 0.
OpCase logit_stats_case(const AttentionShape& a, uint64_t seed) {
  OpCase c;
  c.op = "attention_logit_stats";
  c.params = a.params(seed);
  c.inputs = [=] { return only(attention_inputs(a, seed, 3.0), {"q", "k"}); };
  c.outputs = {{"max_logit", {a.b, a.h, a.t}, tol::kSummedInDouble}, {"entropy", {a.b, a.h, a.t}, tol::kSummedInDouble}};
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, AttentionLogitStats{t.at("max_logit"), t.at("entropy"), t.at("q"), t.at("k"), a.b, a.t, a.h, a.dh,
                                      a.scale()});
  };
  c.flops = a.flops() / 2;
  return c;
}

// x ~ N(1, 2^2); with more than two rows, row 1 all zero (its norm 0, not NaN).
OpCase row_norms_case(int64_t n, int64_t d, uint64_t seed) {
  const bool zero_row = n > 2;
  OpCase c;
  c.op = "row_norms";
  c.params = Params().add("rows", n).add("d", d).add("zero_row", int64_t(zero_row)).add("seed", int64_t(seed)).str();
  c.inputs = [=] {
    std::vector<double> x = Draw(seed).normal({n, d}, 2.0, 1.0).to_vector();
    if (zero_row) std::fill(x.begin() + d, x.begin() + 2 * d, 0.0);
    Tensors t;
    t.set("x", Tensor::from(x, {n, d}, DType::f64));
    return t;
  };
  c.outputs = {{"norms", {n}, tol::kSummedInDouble}};
  c.call = [=](Backend& b, Tensors& t) { run_kernel(b, RowNorms{t.at("norms"), t.at("x"), n, d}); };
  c.flops = 2.0 * double(n * d);
  return c;
}

// x, then dy, ~ N(0, 1), (B, T, C).
Tensors prefix_mean_inputs(const Shape& s, uint64_t seed) {
  Draw draw(seed);
  Tensors t;
  t.set("x", draw.normal(s));
  t.set("dy", draw.normal(s));
  return t;
}

OpCase prefix_mean_case(bool backward, int64_t batch, int64_t time, int64_t ch, uint64_t seed) {
  OpCase c;
  c.op = backward ? "prefix_mean_bwd" : "prefix_mean_fwd";
  c.params = Params().add("B", batch).add("T", time).add("C", ch).add("seed", int64_t(seed)).str();
  c.inputs = [=] { return only(prefix_mean_inputs({batch, time, ch}, seed), {backward ? "dy" : "x"}); };
  // A running sum and one division per element.
  c.flops = 2.0 * double(batch * time * ch);
  if (backward) {
    c.outputs = {{"dx", {batch, time, ch}, tol::kSummedInDouble}};
    c.call = [=](Backend& b, Tensors& t) {
      run_kernel(b, PrefixMeanBackward{t.at("dx"), t.at("dy"), batch, time, ch});
    };
  } else {
    c.outputs = {{"y", {batch, time, ch}, tol::kSummedInDouble}};
    c.call = [=](Backend& b, Tensors& t) { run_kernel(b, PrefixMeanForward{t.at("y"), t.at("x"), batch, time, ch}); };
  }
  return c;
}

void add_attention_kernel_cases(std::vector<OpCase>& cases) {
  // The last three: full row blocks with a tail of rows (T 13, 19, 40 against blocks of 8 rows),
  // heads wider than a vector with a tail (Dh 20, 24, 33 against 16 or 8 floats).
  const AttentionShape shapes[] = {{1, 1, 1, 1},  {1, 5, 3, 8},    {2, 16, 4, 16}, {2, 5, 1, 3},  {3, 1, 4, 16},
                                   {1, 16, 2, 1}, {2, 64, 4, 16}, {2, 13, 2, 20}, {1, 19, 3, 24}, {1, 40, 2, 33}};
  uint64_t seed = 1600;
  for (const AttentionShape& a : shapes) cases.push_back(attention_forward_case(a, seed++));
  seed = 1600;
  for (const AttentionShape& a : shapes) cases.push_back(attention_backward_case(a, seed++));
  // The probabilities' dropout: a row block with a tail, a head with a tail, several tiles.
  const AttentionShape dropout_shapes[] = {{1, 5, 3, 8}, {2, 13, 2, 20}, {2, 64, 4, 16}};
  seed = 1620;
  for (const AttentionShape& a : dropout_shapes) {
    cases.push_back(attention_forward_case(a, seed, 0.25));
    cases.push_back(attention_backward_case(a, seed++, 0.25));
  }
  // P and the dropped D as a bf16 run's unfused form stores them.
  cases.push_back(attention_backward_case({2, 13, 2, 20}, 1630, 0.25, Precision::bf16));
  // Seeing every key: an encoder's self-attention (Tk = T) and cross-attention to fewer, more and
  // odd numbers of keys than queries (Tk 1, 7, 9, 13, 40 against blocks of 8 rows and vectors of
  // 8 or 16 floats), heads with a tail; dropout at one of them.
  const AttentionShape full_shapes[] = {{1, 1, 1, 1, 1},   {1, 5, 3, 8, 5},    {2, 16, 4, 16, 16}, {2, 5, 1, 3, 7},
                                        {1, 13, 2, 20, 9}, {2, 19, 3, 24, 40}, {1, 40, 2, 33, 13}, {3, 1, 2, 16, 1}};
  seed = 1635;
  for (const AttentionShape& a : full_shapes) {
    cases.push_back(attention_forward_case(a, seed));
    cases.push_back(attention_backward_case(a, seed++));
  }
  cases.push_back(attention_forward_case({2, 13, 2, 20, 9}, 1645, 0.25));
  cases.push_back(attention_backward_case({2, 13, 2, 20, 9}, 1645, 0.25));
  cases.push_back(attention_backward_case({2, 19, 3, 24, 40}, 1646, 0.25, Precision::bf16));
  // Odd sizes, rows longer than a block, T = 1.
  const AttentionShape stats_shapes[] = {{1, 1, 1, 1}, {1, 5, 3, 8}, {2, 33, 2, 7}, {1, 300, 1, 4}, {2, 16, 4, 16}};
  seed = 1650;
  for (const AttentionShape& a : stats_shapes) cases.push_back(logit_stats_case(a, seed++));
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& cases) {
  add_attention_kernel_cases(cases);
  // Odd sizes and a row longer than a block.
  const int64_t norm_shapes[][2] = {{1, 1}, {3, 5}, {7, 129}, {64, 1000}, {2, 4097}};
  uint64_t seed = 1655;
  for (const auto& s : norm_shapes) cases.push_back(row_norms_case(s[0], s[1], seed++));
  const int64_t prefix_shapes[][3] = {{1, 1, 1}, {1, 5, 3}, {2, 7, 65}, {3, 512, 64}, {2, 16, 200}};
  for (const bool backward : {false, true}) {
    seed = 1700;
    for (const auto& s : prefix_shapes) cases.push_back(prefix_mean_case(backward, s[0], s[1], s[2], seed++));
  }
}

namespace {

// The grad forms' attention of sizes s: heads of C / heads channels over its T keys.
AttentionShape causal_shape(const GradSizes& s) { return {s.batch, s.time, s.heads, s.channels / s.heads}; }

// full_attention of q (B, T, C) over k, v (B, T + 3, C), with dropout `rate` on its probabilities.
CaseInstance full_attention_instance(const GradSizes& s, DType dt, uint64_t seed, double rate) {
  AttentionShape a = causal_shape(s);
  a.tk = s.time + 3;
  CaseInstance inst{leaves(attention_inputs(a, seed), {"q", "k", "v"}, dt), nullptr};
  const Tensor q = inst.inputs[0].second, k = inst.inputs[1].second, v = inst.inputs[2].second;
  const int64_t heads = s.heads;
  inst.forward = [=] {
    const DropoutScope drop(rate, seed);
    return full_attention(q, k, v, heads);
  };
  inst.numbers = {{"heads", double(heads)}, {"Tk", double(a.tk)}};
  if (rate > 0) inst.numbers["p"] = rate;
  return inst;
}

}  // namespace

void add_attention_grad_forms(std::vector<GradForm>& forms) {
  forms.push_back({"causal_attention", "causal multi-head softmax(q k^T / sqrt(Dh)) v",
                   [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(attention_inputs(causal_shape(s), seed), {"q", "k", "v"}, dt), nullptr};
                     const Tensor q = inst.inputs[0].second, k = inst.inputs[1].second, v = inst.inputs[2].second;
                     const int64_t heads = s.heads;
                     inst.forward = [=] { return causal_attention(q, k, v, heads); };
                     inst.numbers = {{"heads", double(heads)}};
                     return inst;
                   }});
  forms.push_back({"attention_dropout",
                   "causal multi-head softmax(q k^T / sqrt(Dh)) v with dropout 0.3 on the probabilities (one mask)",
                   [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(attention_inputs(causal_shape(s), seed), {"q", "k", "v"}, dt), nullptr};
                     const Tensor q = inst.inputs[0].second, k = inst.inputs[1].second, v = inst.inputs[2].second;
                     const int64_t heads = s.heads;
                     inst.forward = [=] {
                       const DropoutScope drop(0.3, seed);
                       return causal_attention(q, k, v, heads);
                     };
                     inst.numbers = {{"heads", double(heads)}, {"p", 0.3}};
                     return inst;
                   }});
  forms.push_back({"cross_attention", "multi-head softmax(q k^T / sqrt(Dh)) v over T + 3 keys of another sequence, none masked",
                   [](const GradSizes& s, DType dt, uint64_t seed) { return full_attention_instance(s, dt, seed, 0.0); }});
  forms.push_back({"cross_attn_dropout",
                   "cross-attention over T + 3 keys with dropout 0.3 on the probabilities (one mask)",
                   [](const GradSizes& s, DType dt, uint64_t seed) { return full_attention_instance(s, dt, seed, 0.3); }});
  forms.push_back({"prefix_mean", "causal prefix mean over time (toy mixing)",
                   [](const GradSizes& s, DType dt, uint64_t seed) {
                     CaseInstance inst{leaves(prefix_mean_inputs(s.x(), seed), {"x"}, dt), nullptr};
                     const Tensor x = inst.inputs[0].second;
                     inst.forward = [=] { return prefix_mean(x); };
                     return inst;
                   }});
}

}  // namespace normlab::opcases::detail
