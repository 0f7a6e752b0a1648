// The "reference" backend, and its implementations of the products', elementwise, softmax,
// attention, embedding, loss, layout, statistics and optimizer kernels (registered at the end):
// each checks its call's tensors, then dispatches on dtype to the plain loops of reference_kernels.h. Being the oracle, it checks more than the contract requires
// (element counts against the sizes, ids in range), so that a wrong op is caught here rather
// than read as a wrong number.
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
  Tensor& c = call.c;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const MatmulSpec& s = call.s;
  const char* kn = "matmul";
  DType dt = c.dtype();
  expect(kn, "c", c, dt);
  expect(kn, "a", a, dt);
  expect(kn, "b", b, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    matmul_ref(c.data<T>(), a.data<T>(), b.data<T>(), s);
  });
}

void linear_forward(Backend&, const LinearForward& call) {
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const Tensor& w = call.w;
  const Tensor& bias = call.bias;
  const Tensor& residual = call.residual;
  const int64_t m = call.m;
  const int64_t k = call.k;
  const int64_t n = call.n;
  const char* kn = "linear_forward";
  DType dt = y.dtype();
  expect(kn, "y", y, dt);
  expect(kn, "x", x, dt);
  expect(kn, "w", w, dt);
  if (bias.defined()) expect(kn, "bias", bias, dt);
  if (residual.defined()) expect(kn, "residual", residual, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    linear_forward_ref(y.data<T>(), x.data<T>(), w.data<T>(),
                       bias.defined() ? bias.data<T>() : nullptr,
                       residual.defined() ? residual.data<T>() : nullptr, m, k, n);
  });
}

void linear_backward_input(Backend&, const LinearBackwardInput& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const Tensor& w = call.w;
  const Tensor& gate = call.gate;
  const int64_t m = call.m;
  const int64_t k = call.k;
  const int64_t n = call.n;
  const char* kn = "linear_backward_input";
  DType dt = dx.dtype();
  expect(kn, "dx", dx, dt);
  expect(kn, "dy", dy, dt);
  expect(kn, "w", w, dt);
  if (gate.defined()) expect(kn, "gate", gate, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    linear_backward_input_ref(dx.data<T>(), dy.data<T>(), w.data<T>(),
                              gate.defined() ? gate.data<T>() : nullptr, m, k, n);
  });
}

void sum_rows(Backend&, const SumRows& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const int64_t rows = call.rows;
  const int64_t cols = call.cols;
  const char* kn = "sum_rows";
  DType dt = out.dtype();
  expect(kn, "out", out, dt);
  expect(kn, "x", x, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    sum_rows_ref(out.data<T>(), x.data<T>(), rows, cols);
  });
}

// ---- elementwise ---------------------------------------------------------------
void fill(Backend&, const Fill& call) {
  Tensor& out = call.out;
  const double value = call.value;
  const char* kn = "fill";
  expect(kn, "out", out, out.dtype());
  dispatch(out.dtype(), kn, [&](auto tag) {
    using T = decltype(tag);
    fill_ref(out.data<T>(), value, out.numel());
  });
}

void copy(Backend&, const Copy& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const char* kn = "copy";
  DType dt = out.dtype();
  int64_t n = out.numel();
  expect(kn, "out", out, dt);
  expect(kn, "x", x, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    copy_ref(out.data<T>(), x.data<T>(), n);
  });
}

void add(Backend&, const Add& call) {
  Tensor& out = call.out;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const double alpha = call.alpha;
  const double beta = call.beta;
  const char* kn = "add";
  DType dt = out.dtype();
  int64_t n = out.numel();
  expect(kn, "out", out, dt);
  expect(kn, "a", a, dt);
  expect(kn, "b", b, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    add_ref(out.data<T>(), a.data<T>(), b.data<T>(), alpha, beta, n);
  });
}

void accumulate(Backend&, const Accumulate& call) {
  Tensor& dst = call.dst;
  const Tensor& src = call.src;
  const char* kn = "accumulate";
  DType dt = dst.dtype();
  int64_t n = dst.numel();
  expect(kn, "dst", dst, dt);
  expect(kn, "src", src, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    accumulate_ref(dst.data<T>(), src.data<T>(), n);
  });
}

void scale(Backend&, const Scale& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const double alpha = call.alpha;
  const char* kn = "scale";
  DType dt = out.dtype();
  int64_t n = out.numel();
  expect(kn, "out", out, dt);
  expect(kn, "x", x, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    scale_ref(out.data<T>(), x.data<T>(), alpha, n);
  });
}

void mul(Backend&, const Mul& call) {
  Tensor& out = call.out;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const char* kn = "mul";
  DType dt = out.dtype();
  int64_t n = out.numel();
  expect(kn, "out", out, dt);
  expect(kn, "a", a, dt);
  expect(kn, "b", b, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    mul_ref(out.data<T>(), a.data<T>(), b.data<T>(), n);
  });
}

void gelu_forward(Backend&, const GeluForward& call) {
  Tensor& y = call.y;
  Tensor* dydx = call.dydx;
  const Tensor& x = call.x;
  const char* kn = "gelu_forward";
  DType dt = y.dtype();
  int64_t n = y.numel();
  expect(kn, "y", y, dt);
  expect(kn, "x", x, dt);
  if (dydx) expect(kn, "dydx", *dydx, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_ref(y.data<T>(), dydx ? dydx->data<T>() : nullptr, x.data<T>(), n);
  });
}

void sum_squares(Backend&, const SumSquares& call) {
  const Tensor& x = call.x;
  const char* kn = "sum_squares";
  expect(kn, "x", x, x.dtype());
  double result = 0.0;
  dispatch(x.dtype(), kn, [&](auto tag) {
    using T = decltype(tag);
    result = sum_squares_ref(x.data<T>(), x.numel());
  });
  call.result = result;
}

void round_to_format(Backend&, const RoundToFormat& call) {
  Tensor& x = call.x;
  const Precision format = call.format;
  const char* kn = "round_to_format";
  const int64_t n = x.numel();
  expect(kn, "x", x, x.dtype());
  if (format == Precision::fp32) return;
  if (x.dtype() == DType::f32) {
    float* v = x.data<float>();
    for (int64_t i = 0; i < n; ++i) v[i] = round_to(format, v[i]);
  } else {
    NL_CHECK(x.dtype() == DType::f64, "round_to_format: x is {}, not a float tensor", to_string(x.dtype()));
    double* v = x.data<double>();
    for (int64_t i = 0; i < n; ++i) v[i] = round_to(format, to_float(v[i]));
  }
}

void format_census(Backend&, const CountFormat& call) {
  const Tensor& x = call.x;
  const Precision format = call.format;
  const char* kn = "format_census";
  expect(kn, "x", x, DType::f32);
  call.result = normlab::format_census(format, x.data<float>(), x.numel());
}

// ---- softmax ---------------------------------------------------------------------
void softmax_forward(Backend&, const SoftmaxForward& call) {
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const int64_t n = call.n;
  const int64_t d = call.d;
  const char* kn = "softmax_forward";
  DType dt = x.dtype();
  expect(kn, "y", y, dt);
  expect(kn, "x", x, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_ref(y.data<T>(), x.data<T>(), n, d);
  });
}

void softmax_backward(Backend&, const SoftmaxBackward& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const Tensor& y = call.y;
  const int64_t n = call.n;
  const int64_t d = call.d;
  const char* kn = "softmax_backward";
  DType dt = y.dtype();
  expect(kn, "dx", dx, dt);
  expect(kn, "dy", dy, dt);
  expect(kn, "y", y, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_ref(dx.data<T>(), dy.data<T>(), y.data<T>(), n, d);
  });
}

// ---- attention -------------------------------------------------------------------
void attention_forward(Backend&, const AttentionForward& call) {
  Tensor& out = call.out;
  Tensor& probs = call.probs;
  const Tensor& q = call.q;
  const Tensor& k = call.k;
  const Tensor& v = call.v;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t h = call.h;
  const int64_t dh = call.dh;
  const double scale = call.scale;
  const char* kn = "attention_forward";
  DType dt = q.dtype();
  expect(kn, "out", out, dt);
  expect(kn, "probs", probs, dt);
  expect(kn, "q", q, dt);
  expect(kn, "k", k, dt);
  expect(kn, "v", v, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    attention_forward_ref(out.data<T>(), probs.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(),
                          b, t, h, dh, scale);
  });
}

void attention_backward(Backend&, const AttentionBackward& call) {
  Tensor* dq = call.dq;
  Tensor* dk = call.dk;
  Tensor* dv = call.dv;
  const Tensor& dout = call.dout;
  const Tensor& q = call.q;
  const Tensor& k = call.k;
  const Tensor& v = call.v;
  const Tensor& probs = call.probs;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t h = call.h;
  const int64_t dh = call.dh;
  const double scale = call.scale;
  const char* kn = "attention_backward";
  DType dt = q.dtype();
  expect(kn, "dq", dq, dt);
  expect(kn, "dk", dk, dt);
  expect(kn, "dv", dv, dt);
  expect(kn, "dout", dout, dt);
  expect(kn, "q", q, dt);
  expect(kn, "k", k, dt);
  expect(kn, "v", v, dt);
  expect(kn, "probs", probs, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    attention_backward_ref(ptr<T>(dq), ptr<T>(dk), ptr<T>(dv), dout.data<T>(), q.data<T>(),
                           k.data<T>(), v.data<T>(), probs.data<T>(), b, t, h, dh, scale);
  });
}

// ---- prefix mean -----------------------------------------------------------------
void prefix_mean_forward(Backend&, const PrefixMeanForward& call) {
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t c = call.c;
  const char* kn = "prefix_mean_forward";
  DType dt = x.dtype();
  expect(kn, "y", y, dt);
  expect(kn, "x", x, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    prefix_mean_forward_ref(y.data<T>(), x.data<T>(), b, t, c);
  });
}

void prefix_mean_backward(Backend&, const PrefixMeanBackward& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t c = call.c;
  const char* kn = "prefix_mean_backward";
  DType dt = dy.dtype();
  expect(kn, "dx", dx, dt);
  expect(kn, "dy", dy, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    prefix_mean_backward_ref(dx.data<T>(), dy.data<T>(), b, t, c);
  });
}

// ---- embedding -------------------------------------------------------------------
void embedding_forward(Backend&, const EmbeddingForward& call) {
  Tensor& y = call.y;
  const Tensor& table = call.table;
  const Tensor& ids = call.ids;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int64_t d = call.d;
  const char* kn = "embedding_forward";
  DType dt = table.dtype();
  expect(kn, "y", y, dt);
  expect(kn, "table", table, dt);
  expect_ids(kn, "ids", ids, n, v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_ref(y.data<T>(), table.data<T>(), ids.data<int32_t>(), n, v, d);
  });
}

void embedding_backward(Backend&, const EmbeddingBackward& call) {
  Tensor& dtable = call.dtable;
  const Tensor& dy = call.dy;
  const Tensor& ids = call.ids;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int64_t d = call.d;
  const char* kn = "embedding_backward";
  DType dt = dy.dtype();
  expect(kn, "dtable", dtable, dt);
  expect(kn, "dy", dy, dt);
  expect_ids(kn, "ids", ids, n, v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_ref(dtable.data<T>(), dy.data<T>(), ids.data<int32_t>(), n, v, d);
  });
}

// ---- cross-entropy -----------------------------------------------------------------
void cross_entropy_forward(Backend&, const CrossEntropyForward& call) {
  Tensor& loss = call.loss;
  Tensor& probs = call.probs;
  const Tensor& logits = call.logits;
  const Tensor& targets = call.targets;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const char* kn = "cross_entropy_forward";
  DType dt = logits.dtype();
  NL_CHECK(n > 0, "reference {}: the mean over N rows needs N > 0 (got {})", kn, n);
  expect(kn, "loss", loss, dt);
  expect(kn, "probs", probs, dt);
  expect(kn, "logits", logits, dt);
  expect_ids(kn, "targets", targets, n, v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_forward_ref(loss.data<T>(), probs.data<T>(), logits.data<T>(),
                              targets.data<int32_t>(), n, v);
  });
}

void cross_entropy_backward(Backend&, const CrossEntropyBackward& call) {
  Tensor& dlogits = call.dlogits;
  const Tensor& dloss = call.dloss;
  const Tensor& probs = call.probs;
  const Tensor& targets = call.targets;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const char* kn = "cross_entropy_backward";
  DType dt = probs.dtype();
  NL_CHECK(n > 0, "reference {}: the mean over N rows needs N > 0 (got {})", kn, n);
  expect(kn, "dlogits", dlogits, dt);
  expect(kn, "dloss", dloss, dt);
  expect(kn, "probs", probs, dt);
  expect_ids(kn, "targets", targets, n, v);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_ref(dlogits.data<T>(), dloss.data<T>(), probs.data<T>(),
                               targets.data<int32_t>(), n, v);
  });
}

// ---- layout ------------------------------------------------------------------------
void transpose(Backend&, const Transpose& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const int64_t outer = call.outer;
  const int64_t a = call.a;
  const int64_t mid = call.mid;
  const int64_t bdim = call.bdim;
  const int64_t inner = call.inner;
  const char* kn = "transpose";
  DType dt = x.dtype();
  expect(kn, "out", out, dt);
  expect(kn, "x", x, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    transpose_ref(out.data<T>(), x.data<T>(), outer, a, mid, bdim, inner);
  });
}

// ---- statistics ------------------------------------------------------------------
void row_norms(Backend&, const RowNorms& call) {
  Tensor& norms = call.norms;
  const Tensor& x = call.x;
  const int64_t n = call.n;
  const int64_t d = call.d;
  const char* kn = "row_norms";
  DType dt = x.dtype();
  expect(kn, "norms", norms, dt);
  expect(kn, "x", x, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    row_norms_ref(norms.data<T>(), x.data<T>(), n, d);
  });
}

void attention_logit_stats(Backend&, const AttentionLogitStats& call) {
  Tensor& max_logit = call.max_logit;
  Tensor& entropy = call.entropy;
  const Tensor& q = call.q;
  const Tensor& k = call.k;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t h = call.h;
  const int64_t dh = call.dh;
  const double scale = call.scale;
  const char* kn = "attention_logit_stats";
  DType dt = q.dtype();
  expect(kn, "max_logit", max_logit, dt);
  expect(kn, "entropy", entropy, dt);
  expect(kn, "q", q, dt);
  expect(kn, "k", k, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    attention_logit_stats_ref(max_logit.data<T>(), entropy.data<T>(), q.data<T>(), k.data<T>(), b, t, h, dh, scale);
  });
}

// ---- optimizer -----------------------------------------------------------------------
void adam_step(Backend&, const AdamStep& call) {
  Tensor& param = call.param;
  const Tensor& grad = call.grad;
  Tensor& m = call.m;
  Tensor& v = call.v;
  const AdamParams& hp = call.hp;
  const char* kn = "adam_step";
  DType dt = param.dtype();
  int64_t n = param.numel();
  NL_CHECK(hp.step >= 1, "reference {}: step is 1-based for the bias correction (got {})", kn,
           hp.step);
  expect(kn, "param", param, dt);
  expect(kn, "grad", grad, dt);
  expect(kn, "m", m, dt);
  expect(kn, "v", v, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    adam_step_ref(param.data<T>(), m.data<T>(), v.data<T>(), grad.data<T>(), n, hp.lr, hp.beta1,
                  hp.beta2, hp.eps, hp.weight_decay, hp.decoupled, hp.step);
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
