// The "reference" backend, and its implementations of the products', elementwise, softmax,
// attention, embedding, loss, layout, statistics and optimizer kernels (registered at the end):
// each checks its call's tensors, then dispatches on dtype to the plain loops of
// reference_kernels.h. Being the oracle, it checks more than the contract requires (element
// counts against the sizes, ids in range), so that a wrong op is caught here rather than read as
// a wrong number.
#include "normlab/reference_backend.h"

#include "normlab/adam_kernels.h"
#include "normlab/attention_kernels.h"
#include "normlab/cross_entropy_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/embedding_kernels.h"
#include "normlab/layout_kernels.h"
#include "normlab/matmul_kernels.h"
#include "normlab/prefix_mean_kernels.h"
#include "normlab/softmax_kernels.h"
#include "normlab/statistics_kernels.h"
#include "normlab/reference_kernels.h"
#include "reference_args.h"

namespace normlab {

namespace {

using reference::cptr;
using reference::dispatch;
using reference::expect;
using reference::expect_all;
using reference::ptr;

// Token ids or targets: int32, n of them, each in [0, v).
void expect_ids(const char* kernel, const char* arg, const Tensor& ids, int64_t n, int64_t v) {
  expect(kernel, arg, ids, DType::i32);
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    NL_CHECK(p[i] >= 0 && p[i] < v, "reference {}: {}[{}] = {} is outside [0, {})", kernel, arg, i,
             p[i], v);
}

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  Device device() const override { return Device::cpu; }
  bool supports(DType dtype) const override { return dtype == DType::f32 || dtype == DType::f64; }
};

// ---- matrix products ---------------------------------------------------------
void matmul(Backend&, const Matmul& call) {
  const char* kn = "matmul";
  DType dt = call.c.dtype();
  expect_all(kn, dt, {{"c", &call.c}, {"a", &call.a}, {"b", &call.b}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    matmul_ref(call.c.data<T>(), call.a.data<T>(), call.b.data<T>(), call.s);
  });
}

void linear_forward(Backend&, const LinearForward& call) {
  const char* kn = "linear_forward";
  DType dt = call.y.dtype();
  expect_all(kn, dt,
             {{"y", &call.y}, {"x", &call.x}, {"w", &call.w}, {"bias", &call.bias}, {"residual", &call.residual}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    linear_forward_ref(call.y.data<T>(), call.x.data<T>(), call.w.data<T>(),
                       call.bias.defined() ? call.bias.data<T>() : nullptr,
                       call.residual.defined() ? call.residual.data<T>() : nullptr, call.m, call.k, call.n);
  });
}

void linear_backward_input(Backend&, const LinearBackwardInput& call) {
  const char* kn = "linear_backward_input";
  DType dt = call.dx.dtype();
  expect_all(kn, dt, {{"dx", &call.dx}, {"dy", &call.dy}, {"w", &call.w}, {"gate", &call.gate}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    linear_backward_input_ref(call.dx.data<T>(), call.dy.data<T>(), call.w.data<T>(),
                              call.gate.defined() ? call.gate.data<T>() : nullptr, call.m, call.k, call.n);
  });
}

void sum_rows(Backend&, const SumRows& call) {
  const char* kn = "sum_rows";
  DType dt = call.out.dtype();
  expect_all(kn, dt, {{"out", &call.out}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    sum_rows_ref(call.out.data<T>(), call.x.data<T>(), call.rows, call.cols);
  });
}

// ---- elementwise ---------------------------------------------------------------
void fill(Backend&, const Fill& call) {
  const char* kn = "fill";
  expect(kn, "out", call.out, call.out.dtype());
  dispatch(call.out.dtype(), kn, [&](auto tag) {
    using T = decltype(tag);
    fill_ref(call.out.data<T>(), call.value, call.out.numel());
  });
}

void copy(Backend&, const Copy& call) {
  const char* kn = "copy";
  DType dt = call.out.dtype();
  int64_t n = call.out.numel();
  expect_all(kn, dt, {{"out", &call.out}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    copy_ref(call.out.data<T>(), call.x.data<T>(), n);
  });
}

void add(Backend&, const Add& call) {
  const char* kn = "add";
  DType dt = call.out.dtype();
  int64_t n = call.out.numel();
  expect_all(kn, dt, {{"out", &call.out}, {"a", &call.a}, {"b", &call.b}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    add_ref(call.out.data<T>(), call.a.data<T>(), call.b.data<T>(), call.alpha, call.beta, n);
  });
}

void accumulate(Backend&, const Accumulate& call) {
  const char* kn = "accumulate";
  DType dt = call.dst.dtype();
  int64_t n = call.dst.numel();
  expect_all(kn, dt, {{"dst", &call.dst}, {"src", &call.src}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    accumulate_ref(call.dst.data<T>(), call.src.data<T>(), n);
  });
}

void scale(Backend&, const Scale& call) {
  const char* kn = "scale";
  DType dt = call.out.dtype();
  int64_t n = call.out.numel();
  expect_all(kn, dt, {{"out", &call.out}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    scale_ref(call.out.data<T>(), call.x.data<T>(), call.alpha, n);
  });
}

void dropout(Backend&, const DropoutApply& call) {
  const char* kn = "dropout";
  DType dt = call.y.dtype();
  expect_all(kn, dt, {{"y", &call.y}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    dropout_ref(call.y.data<T>(), call.x.data<T>(), call.y.numel(), call.mask);
  });
}

void mul(Backend&, const Mul& call) {
  const char* kn = "mul";
  DType dt = call.out.dtype();
  int64_t n = call.out.numel();
  expect_all(kn, dt, {{"out", &call.out}, {"a", &call.a}, {"b", &call.b}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    mul_ref(call.out.data<T>(), call.a.data<T>(), call.b.data<T>(), n);
  });
}

void gelu_forward(Backend&, const GeluForward& call) {
  const char* kn = "gelu_forward";
  DType dt = call.y.dtype();
  int64_t n = call.y.numel();
  expect_all(kn, dt, {{"y", &call.y}, {"x", &call.x}});
  if (call.dydx) expect(kn, "dydx", *call.dydx, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_ref(call.y.data<T>(), call.dydx ? call.dydx->data<T>() : nullptr, call.x.data<T>(), n);
  });
}

void sum_squares(Backend&, const SumSquares& call) {
  const char* kn = "sum_squares";
  expect(kn, "x", call.x, call.x.dtype());
  double result = 0.0;
  dispatch(call.x.dtype(), kn, [&](auto tag) {
    using T = decltype(tag);
    result = sum_squares_ref(call.x.data<T>(), call.x.numel());
  });
  call.result = result;
}

void round_to_format(Backend&, const RoundToFormat& call) {
  const char* kn = "round_to_format";
  const int64_t n = call.x.numel();
  expect(kn, "x", call.x, call.x.dtype());
  if (call.format == Precision::fp32) return;
  if (call.x.dtype() == DType::f32) {
    float* v = call.x.data<float>();
    for (int64_t i = 0; i < n; ++i) v[i] = round_to(call.format, v[i]);
  } else {
    NL_CHECK(call.x.dtype() == DType::f64, "round_to_format: x is {}, not a float tensor", to_string(call.x.dtype()));
    double* v = call.x.data<double>();
    for (int64_t i = 0; i < n; ++i) v[i] = round_to(call.format, to_float(v[i]));
  }
}

void format_census(Backend&, const CountFormat& call) {
  const char* kn = "format_census";
  expect(kn, "x", call.x, DType::f32);
  call.result = normlab::format_census(call.format, call.x.data<float>(), call.x.numel());
}

// ---- softmax ---------------------------------------------------------------------
void softmax_forward(Backend&, const SoftmaxForward& call) {
  const char* kn = "softmax_forward";
  DType dt = call.x.dtype();
  expect_all(kn, dt, {{"y", &call.y}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_ref(call.y.data<T>(), call.x.data<T>(), call.n, call.d);
  });
}

void softmax_backward(Backend&, const SoftmaxBackward& call) {
  const char* kn = "softmax_backward";
  DType dt = call.y.dtype();
  expect_all(kn, dt, {{"dx", &call.dx}, {"dy", &call.dy}, {"y", &call.y}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_ref(call.dx.data<T>(), call.dy.data<T>(), call.y.data<T>(), call.n, call.d);
  });
}

// ---- attention -------------------------------------------------------------------
void attention_forward(Backend&, const AttentionForward& call) {
  const char* kn = "attention_forward";
  DType dt = call.q.dtype();
  expect_all(kn, dt, {{"out", &call.out}, {"stats", &call.stats}, {"q", &call.q}, {"k", &call.k}, {"v", &call.v}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    attention_forward_ref(call.out.data<T>(), call.stats.data<T>(), call.q.data<T>(), call.k.data<T>(), call.v.data<T>(), call.b, call.t,
                          call.keys.of(call.t), call.keys.causal, call.h, call.dh, call.scale, call.dropout);
  });
}

void attention_backward(Backend&, const AttentionBackward& call) {
  const char* kn = "attention_backward";
  DType dt = call.q.dtype();
  expect_all(kn, dt,
             {{"dq", call.dq},
              {"dk", call.dk},
              {"dv", call.dv},
              {"dout", &call.dout},
              {"q", &call.q},
              {"k", &call.k},
              {"v", &call.v},
              {"stats", &call.stats}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    attention_backward_ref(ptr<T>(call.dq), ptr<T>(call.dk), ptr<T>(call.dv), call.dout.data<T>(), call.q.data<T>(),
                           call.k.data<T>(), call.v.data<T>(), call.b, call.t, call.keys.of(call.t),
                           call.keys.causal, call.h, call.dh, call.scale, call.probs_format, call.dropout);
  });
}

// ---- prefix mean -----------------------------------------------------------------
void prefix_mean_forward(Backend&, const PrefixMeanForward& call) {
  const char* kn = "prefix_mean_forward";
  DType dt = call.x.dtype();
  expect_all(kn, dt, {{"y", &call.y}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    prefix_mean_forward_ref(call.y.data<T>(), call.x.data<T>(), call.b, call.t, call.c);
  });
}

void prefix_mean_backward(Backend&, const PrefixMeanBackward& call) {
  const char* kn = "prefix_mean_backward";
  DType dt = call.dy.dtype();
  expect_all(kn, dt, {{"dx", &call.dx}, {"dy", &call.dy}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    prefix_mean_backward_ref(call.dx.data<T>(), call.dy.data<T>(), call.b, call.t, call.c);
  });
}

// ---- embedding -------------------------------------------------------------------
void embedding_forward(Backend&, const EmbeddingForward& call) {
  const char* kn = "embedding_forward";
  DType dt = call.table.dtype();
  expect_all(kn, dt, {{"y", &call.y}, {"table", &call.table}});
  expect_ids(kn, "ids", call.ids, call.n, call.v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_ref(call.y.data<T>(), call.table.data<T>(), call.ids.data<int32_t>(), call.n, call.v, call.d);
  });
}

void embedding_backward(Backend&, const EmbeddingBackward& call) {
  const char* kn = "embedding_backward";
  DType dt = call.dy.dtype();
  expect_all(kn, dt, {{"dtable", &call.dtable}, {"dy", &call.dy}});
  expect_ids(kn, "ids", call.ids, call.n, call.v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_ref(call.dtable.data<T>(), call.dy.data<T>(), call.ids.data<int32_t>(), call.n, call.v, call.d);
  });
}

// ---- cross-entropy -----------------------------------------------------------------
void cross_entropy_forward(Backend&, const CrossEntropyForward& call) {
  const char* kn = "cross_entropy_forward";
  DType dt = call.logits.dtype();
  NL_CHECK(call.n > 0, "reference {}: the mean over N rows needs N > 0 (got {})", kn, call.n);
  expect_all(kn, dt, {{"loss", &call.loss}, {"probs", &call.probs}, {"logits", &call.logits}});
  expect_ids(kn, "targets", call.targets, call.n, call.v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_forward_ref(call.loss.data<T>(), call.probs.data<T>(), call.logits.data<T>(),
                              call.targets.data<int32_t>(), call.n, call.v);
  });
}

void cross_entropy_backward(Backend&, const CrossEntropyBackward& call) {
  const char* kn = "cross_entropy_backward";
  DType dt = call.probs.dtype();
  NL_CHECK(call.n > 0, "reference {}: the mean over N rows needs N > 0 (got {})", kn, call.n);
  expect_all(kn, dt, {{"dlogits", &call.dlogits}, {"dloss", &call.dloss}, {"probs", &call.probs}});
  expect_ids(kn, "targets", call.targets, call.n, call.v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_ref(call.dlogits.data<T>(), call.dloss.data<T>(), call.probs.data<T>(),
                               call.targets.data<int32_t>(), call.n, call.v);
  });
}

// ---- layout ------------------------------------------------------------------------
void transpose(Backend&, const Transpose& call) {
  const char* kn = "transpose";
  DType dt = call.x.dtype();
  expect_all(kn, dt, {{"out", &call.out}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    transpose_ref(call.out.data<T>(), call.x.data<T>(), call.outer, call.a, call.mid, call.bdim, call.inner);
  });
}

// ---- statistics ------------------------------------------------------------------
void row_norms(Backend&, const RowNorms& call) {
  const char* kn = "row_norms";
  DType dt = call.x.dtype();
  expect_all(kn, dt, {{"norms", &call.norms}, {"x", &call.x}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    row_norms_ref(call.norms.data<T>(), call.x.data<T>(), call.n, call.d);
  });
}

void attention_logit_stats(Backend&, const AttentionLogitStats& call) {
  const char* kn = "attention_logit_stats";
  DType dt = call.q.dtype();
  expect_all(kn, dt, {{"max_logit", &call.max_logit}, {"entropy", &call.entropy}, {"q", &call.q}, {"k", &call.k}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    attention_logit_stats_ref(call.max_logit.data<T>(), call.entropy.data<T>(), call.q.data<T>(), call.k.data<T>(),
                              call.b, call.t, call.h, call.dh, call.scale);
  });
}

// ---- optimizer -----------------------------------------------------------------------
void adam_step(Backend&, const AdamStep& call) {
  const char* kn = "adam_step";
  DType dt = call.param.dtype();
  int64_t n = call.param.numel();
  NL_CHECK(call.hp.step >= 1, "reference {}: step is 1-based for the bias correction (got {})", kn, call.hp.step);
  expect_all(kn, dt, {{"param", &call.param}, {"grad", &call.grad}, {"m", &call.m}, {"v", &call.v}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    adam_step_ref(call.param.data<T>(), call.m.data<T>(), call.v.data<T>(), call.grad.data<T>(), n, call.hp.lr,
                  call.hp.beta1, call.hp.beta2, call.hp.eps, call.hp.weight_decay, call.hp.decoupled, call.hp.step);
  });
}

NORMLAB_KERNEL(Matmul, "reference", matmul);
NORMLAB_KERNEL(LinearForward, "reference", linear_forward);
NORMLAB_KERNEL(LinearBackwardInput, "reference", linear_backward_input);
NORMLAB_KERNEL(SumRows, "reference", sum_rows);
NORMLAB_KERNEL(Fill, "reference", fill);
NORMLAB_KERNEL(Copy, "reference", copy);
NORMLAB_KERNEL(Add, "reference", add);
NORMLAB_KERNEL(Accumulate, "reference", accumulate);
NORMLAB_KERNEL(Scale, "reference", scale);
NORMLAB_KERNEL(Mul, "reference", mul);
NORMLAB_KERNEL(DropoutApply, "reference", dropout);
NORMLAB_KERNEL(GeluForward, "reference", gelu_forward);
NORMLAB_KERNEL(SumSquares, "reference", sum_squares);
NORMLAB_KERNEL(RoundToFormat, "reference", round_to_format);
NORMLAB_KERNEL(CountFormat, "reference", format_census);
NORMLAB_KERNEL(SoftmaxForward, "reference", softmax_forward);
NORMLAB_KERNEL(SoftmaxBackward, "reference", softmax_backward);
NORMLAB_KERNEL(AttentionForward, "reference", attention_forward);
NORMLAB_KERNEL(AttentionBackward, "reference", attention_backward);
NORMLAB_KERNEL(PrefixMeanForward, "reference", prefix_mean_forward);
NORMLAB_KERNEL(PrefixMeanBackward, "reference", prefix_mean_backward);
NORMLAB_KERNEL(EmbeddingForward, "reference", embedding_forward);
NORMLAB_KERNEL(EmbeddingBackward, "reference", embedding_backward);
NORMLAB_KERNEL(CrossEntropyForward, "reference", cross_entropy_forward);
NORMLAB_KERNEL(CrossEntropyBackward, "reference", cross_entropy_backward);
NORMLAB_KERNEL(Transpose, "reference", transpose);
NORMLAB_KERNEL(RowNorms, "reference", row_norms);
NORMLAB_KERNEL(AttentionLogitStats, "reference", attention_logit_stats);
NORMLAB_KERNEL(AdamStep, "reference", adam_step);

}  // namespace

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace normlab
