// The "reference" backend: checks each call's tensors, then dispatches on dtype to the plain
// loops of reference_kernels.h. Being the oracle, it checks more than the contract requires
// (element counts against the sizes, ids in range), so that a wrong op is caught here rather
// than read as a wrong number.
#include "normlab/reference_backend.h"

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

  // ---- matrix products ---------------------------------------------------------
  void matmul_impl(Tensor& c, const Tensor& a, const Tensor& b, const MatmulSpec& s) override {
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

  void linear_forward_impl(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, int64_t m, int64_t k, int64_t n) override {
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

  void linear_backward_input_impl(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gate,
                                  int64_t m, int64_t k, int64_t n) override {
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

  void sum_rows_impl(Tensor& out, const Tensor& x, int64_t rows, int64_t cols) override {
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
  void fill_impl(Tensor& out, double value) override {
    const char* kn = "fill";
    expect(kn, "out", out, out.dtype());
    dispatch(out.dtype(), kn, [&](auto tag) {
      using T = decltype(tag);
      fill_ref(out.data<T>(), value, out.numel());
    });
  }

  void copy_impl(Tensor& out, const Tensor& x) override {
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

  void add_impl(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) override {
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

  void accumulate_impl(Tensor& dst, const Tensor& src) override {
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

  void scale_impl(Tensor& out, const Tensor& x, double alpha) override {
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

  void round_to_format_impl(Tensor& x, Precision format) override {
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

  FormatCensus format_census_impl(const Tensor& x, Precision format) override {
    const char* kn = "format_census";
    expect(kn, "x", x, DType::f32);
    return normlab::format_census(format, x.data<float>(), x.numel());
  }

  void mul_impl(Tensor& out, const Tensor& a, const Tensor& b) override {
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

  void gelu_forward_impl(Tensor& y, Tensor* dydx, const Tensor& x) override {
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

  double sum_squares_impl(const Tensor& x) override {
    const char* kn = "sum_squares";
    expect(kn, "x", x, x.dtype());
    double result = 0.0;
    dispatch(x.dtype(), kn, [&](auto tag) {
      using T = decltype(tag);
      result = sum_squares_ref(x.data<T>(), x.numel());
    });
    return result;
  }

  // ---- normalization -------------------------------------------------------------

  // ---- softmax ---------------------------------------------------------------------
  void softmax_forward_impl(Tensor& y, const Tensor& x, int64_t n, int64_t d) override {
    const char* kn = "softmax_forward";
    DType dt = x.dtype();
    expect(kn, "y", y, dt);
    expect(kn, "x", x, dt);
    dispatch(dt, kn, [&](auto tag) {
      using T = decltype(tag);
      softmax_forward_ref(y.data<T>(), x.data<T>(), n, d);
    });
  }

  void softmax_backward_impl(Tensor& dx, const Tensor& dy, const Tensor& y, int64_t n,
                             int64_t d) override {
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
  void attention_forward_impl(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                              const Tensor& v, int64_t b, int64_t t, int64_t h, int64_t dh,
                              double scale) override {
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

  void attention_backward_impl(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& probs, int64_t b,
                               int64_t t, int64_t h, int64_t dh, double scale) override {
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

  // ---- statistics ------------------------------------------------------------------
  void row_norms_impl(Tensor& norms, const Tensor& x, int64_t n, int64_t d) override {
    const char* kn = "row_norms";
    DType dt = x.dtype();
    expect(kn, "norms", norms, dt);
    expect(kn, "x", x, dt);
    dispatch(dt, kn, [&](auto tag) {
      using T = decltype(tag);
      row_norms_ref(norms.data<T>(), x.data<T>(), n, d);
    });
  }

  void attention_logit_stats_impl(Tensor& max_logit, Tensor& entropy, const Tensor& q, const Tensor& k, int64_t b,
                                  int64_t t, int64_t h, int64_t dh, double scale) override {
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

  // ---- prefix mean -----------------------------------------------------------------
  void prefix_mean_forward_impl(Tensor& y, const Tensor& x, int64_t b, int64_t t, int64_t c) override {
    const char* kn = "prefix_mean_forward";
    DType dt = x.dtype();
    expect(kn, "y", y, dt);
    expect(kn, "x", x, dt);
    dispatch(dt, kn, [&](auto tag) {
      using T = decltype(tag);
      prefix_mean_forward_ref(y.data<T>(), x.data<T>(), b, t, c);
    });
  }

  void prefix_mean_backward_impl(Tensor& dx, const Tensor& dy, int64_t b, int64_t t,
                                 int64_t c) override {
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
  void embedding_forward_impl(Tensor& y, const Tensor& table, const Tensor& ids, int64_t n, int64_t v,
                              int64_t d) override {
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

  void embedding_backward_impl(Tensor& dtable, const Tensor& dy, const Tensor& ids, int64_t n, int64_t v,
                               int64_t d) override {
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
  void cross_entropy_forward_impl(Tensor& loss, Tensor& probs, const Tensor& logits,
                                  const Tensor& targets, int64_t n, int64_t v) override {
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

  void cross_entropy_backward_impl(Tensor& dlogits, const Tensor& dloss, const Tensor& probs,
                                   const Tensor& targets, int64_t n, int64_t v) override {
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
  void transpose_impl(Tensor& out, const Tensor& x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
                      int64_t inner) override {
    const char* kn = "transpose";
    DType dt = x.dtype();
    expect(kn, "out", out, dt);
    expect(kn, "x", x, dt);
    dispatch(dt, kn, [&](auto tag) {
      using T = decltype(tag);
      transpose_ref(out.data<T>(), x.data<T>(), outer, a, mid, bdim, inner);
    });
  }

  // ---- optimizer -----------------------------------------------------------------------
  void adam_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamParams& hp) override {
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
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace normlab
