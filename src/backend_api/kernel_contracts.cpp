// Each kernel's size contract, stated once: the Backend's non-virtual entries check the call's
// tensors against the sizes its arguments imply, then call the backend's implementation
// (backend.h); a kernel declared by its op (kernel.h) states its own with the same Contract. A
// tensor that fails names the backend, the kernel and the argument.
#include <fmt/format.h>

#include "normlab/error.h"
#include "normlab/kernel.h"

namespace normlab {

const Contract& Contract::need(const Tensor& t, const char* arg, int64_t numel) const {
  NL_CHECK(t.defined(), "{} {}: {} is an undefined tensor", b_.name(), kernel_, arg);
  NL_CHECK(t.device() == b_.device(), "{} {}: {} is on {}, the backend's device is {}", b_.name(), kernel_, arg,
           device_name(t.device()), device_name(b_.device()));
  NL_CHECK(t.numel() == numel, "{} {}: {} has shape {} ({} elements); the sizes imply {}", b_.name(), kernel_, arg,
           shape_str(t.shape()), t.numel(), numel);
  return *this;
}

const Contract& Contract::maybe(const Tensor& t, const char* arg, int64_t numel) const {
  return t.defined() ? need(t, arg, numel) : *this;
}

const Contract& Contract::maybe(const Tensor* t, const char* arg, int64_t numel) const {
  return t ? need(*t, arg, numel) : *this;
}

void Contract::fail(const std::string& what) const {
  detail::check_failed(__FILE__, __LINE__, fmt::format("{} {}: {}", b_.name(), kernel_, what));
}

namespace {

int64_t batched(bool on, int64_t batch) { return on ? batch : 1; }

}  // namespace

// ---- matrix products ---------------------------------------------------------------------

void Backend::matmul(Tensor& c, const Tensor& a, const Tensor& b, const MatmulSpec& s) {
  Contract(*this, "matmul")
      .need(c, "c", s.batch * s.m * s.n)
      .need(a, "a", batched(s.a_batched, s.batch) * s.m * s.k)
      .need(b, "b", batched(s.b_batched, s.batch) * s.k * s.n);
  matmul_impl(c, a, b, s);
}

void Backend::linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                             int64_t m, int64_t k, int64_t n) {
  Contract(*this, "linear_forward")
      .need(y, "y", m * n)
      .need(x, "x", m * k)
      .need(w, "w", n * k)
      .maybe(bias, "bias", n)
      .maybe(residual, "residual", m * n);
  linear_forward_impl(y, x, w, bias, residual, m, k, n);
}

void Backend::linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gate, int64_t m,
                                    int64_t k, int64_t n) {
  Contract(*this, "linear_backward_input")
      .need(dx, "dx", m * k)
      .need(dy, "dy", m * n)
      .need(w, "w", n * k)
      .maybe(gate, "gate", m * k);
  linear_backward_input_impl(dx, dy, w, gate, m, k, n);
}

void Backend::sum_rows(Tensor& out, const Tensor& x, int64_t rows, int64_t cols) {
  Contract(*this, "sum_rows").need(out, "out", cols).need(x, "x", rows * cols);
  sum_rows_impl(out, x, rows, cols);
}

// ---- elementwise: every tensor of a call holds the first's number of elements ------------------

void Backend::fill(Tensor& out, double value) {
  Contract(*this, "fill").need(out, "out", out.defined() ? out.numel() : 0);
  fill_impl(out, value);
}

void Backend::copy(Tensor& out, const Tensor& x) {
  const int64_t n = out.defined() ? out.numel() : 0;
  Contract(*this, "copy").need(out, "out", n).need(x, "x", n);
  copy_impl(out, x);
}

void Backend::add(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const int64_t n = out.defined() ? out.numel() : 0;
  Contract(*this, "add").need(out, "out", n).need(a, "a", n).need(b, "b", n);
  add_impl(out, a, b, alpha, beta);
}

void Backend::accumulate(Tensor& dst, const Tensor& src) {
  const int64_t n = dst.defined() ? dst.numel() : 0;
  Contract(*this, "accumulate").need(dst, "dst", n).need(src, "src", n);
  accumulate_impl(dst, src);
}

void Backend::scale(Tensor& out, const Tensor& x, double alpha) {
  const int64_t n = out.defined() ? out.numel() : 0;
  Contract(*this, "scale").need(out, "out", n).need(x, "x", n);
  scale_impl(out, x, alpha);
}

void Backend::mul(Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = out.defined() ? out.numel() : 0;
  Contract(*this, "mul").need(out, "out", n).need(a, "a", n).need(b, "b", n);
  mul_impl(out, a, b);
}

void Backend::gelu_forward(Tensor& y, Tensor* dydx, const Tensor& x) {
  const int64_t n = y.defined() ? y.numel() : 0;
  Contract(*this, "gelu_forward").need(y, "y", n).need(x, "x", n).maybe(dydx, "dydx", n);
  gelu_forward_impl(y, dydx, x);
}

double Backend::sum_squares(const Tensor& x) {
  Contract(*this, "sum_squares").need(x, "x", x.defined() ? x.numel() : 0);
  return sum_squares_impl(x);
}

void Backend::round_to_format(Tensor& x, Precision format) {
  Contract(*this, "round_to_format").need(x, "x", x.defined() ? x.numel() : 0);
  round_to_format_impl(x, format);
}

FormatCensus Backend::format_census(const Tensor& x, Precision format) {
  Contract(*this, "format_census").need(x, "x", x.defined() ? x.numel() : 0);
  return format_census_impl(x, format);
}

// ---- normalization over rows of d ----------------------------------------------------------

// LayerNorm when beta (forward) or mean (backward) is defined, RMSNorm otherwise.

// ---- softmax, attention, prefix mean --------------------------------------------------------

void Backend::softmax_forward(Tensor& y, const Tensor& x, int64_t n, int64_t d) {
  Contract(*this, "softmax_forward").need(y, "y", n * d).need(x, "x", n * d);
  softmax_forward_impl(y, x, n, d);
}

void Backend::softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y, int64_t n, int64_t d) {
  Contract(*this, "softmax_backward").need(dx, "dx", n * d).need(dy, "dy", n * d).need(y, "y", n * d);
  softmax_backward_impl(dx, dy, y, n, d);
}

void Backend::attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
                                int64_t b, int64_t t, int64_t h, int64_t dh, double scale) {
  const int64_t btc = b * t * h * dh;
  Contract(*this, "attention_forward")
      .need(out, "out", btc)
      .need(probs, "probs", b * h * t * t)
      .need(q, "q", btc)
      .need(k, "k", btc)
      .need(v, "v", btc);
  attention_forward_impl(out, probs, q, k, v, b, t, h, dh, scale);
}

void Backend::attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                                 const Tensor& k, const Tensor& v, const Tensor& probs, int64_t b, int64_t t,
                                 int64_t h, int64_t dh, double scale) {
  const int64_t btc = b * t * h * dh;
  Contract(*this, "attention_backward")
      .maybe(dq, "dq", btc)
      .maybe(dk, "dk", btc)
      .maybe(dv, "dv", btc)
      .need(dout, "dout", btc)
      .need(q, "q", btc)
      .need(k, "k", btc)
      .need(v, "v", btc)
      .need(probs, "probs", b * h * t * t);
  attention_backward_impl(dq, dk, dv, dout, q, k, v, probs, b, t, h, dh, scale);
}

void Backend::prefix_mean_forward(Tensor& y, const Tensor& x, int64_t b, int64_t t, int64_t c) {
  Contract(*this, "prefix_mean_forward").need(y, "y", b * t * c).need(x, "x", b * t * c);
  prefix_mean_forward_impl(y, x, b, t, c);
}

void Backend::prefix_mean_backward(Tensor& dx, const Tensor& dy, int64_t b, int64_t t, int64_t c) {
  Contract(*this, "prefix_mean_backward").need(dx, "dx", b * t * c).need(dy, "dy", b * t * c);
  prefix_mean_backward_impl(dx, dy, b, t, c);
}

// ---- embedding, loss, layout: ids and targets are n int32 values (their range: each backend's) ---

void Backend::embedding_forward(Tensor& y, const Tensor& table, const Tensor& ids, int64_t n, int64_t v, int64_t d) {
  Contract(*this, "embedding_forward").need(y, "y", n * d).need(table, "table", v * d).need(ids, "ids", n);
  embedding_forward_impl(y, table, ids, n, v, d);
}

void Backend::embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids, int64_t n, int64_t v,
                                 int64_t d) {
  Contract(*this, "embedding_backward").need(dtable, "dtable", v * d).need(dy, "dy", n * d).need(ids, "ids", n);
  embedding_backward_impl(dtable, dy, ids, n, v, d);
}

void Backend::cross_entropy_forward(Tensor& loss, Tensor& probs, const Tensor& logits, const Tensor& targets,
                                    int64_t n, int64_t v) {
  Contract(*this, "cross_entropy_forward")
      .need(loss, "loss", 1)
      .need(probs, "probs", n * v)
      .need(logits, "logits", n * v)
      .need(targets, "targets", n);
  cross_entropy_forward_impl(loss, probs, logits, targets, n, v);
}

void Backend::cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& probs,
                                     const Tensor& targets, int64_t n, int64_t v) {
  Contract(*this, "cross_entropy_backward")
      .need(dlogits, "dlogits", n * v)
      .need(dloss, "dloss", 1)
      .need(probs, "probs", n * v)
      .need(targets, "targets", n);
  cross_entropy_backward_impl(dlogits, dloss, probs, targets, n, v);
}

void Backend::transpose(Tensor& out, const Tensor& x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
                        int64_t inner) {
  const int64_t n = outer * a * mid * bdim * inner;
  Contract(*this, "transpose").need(out, "out", n).need(x, "x", n);
  transpose_impl(out, x, outer, a, mid, bdim, inner);
}

// ---- statistics of a log step, the optimizer -------------------------------------------------

void Backend::row_norms(Tensor& norms, const Tensor& x, int64_t n, int64_t d) {
  Contract(*this, "row_norms").need(norms, "norms", n).need(x, "x", n * d);
  row_norms_impl(norms, x, n, d);
}

void Backend::attention_logit_stats(Tensor& max_logit, Tensor& entropy, const Tensor& q, const Tensor& k, int64_t b,
                                    int64_t t, int64_t h, int64_t dh, double scale) {
  Contract(*this, "attention_logit_stats")
      .need(max_logit, "max_logit", b * h * t)
      .need(entropy, "entropy", b * h * t)
      .need(q, "q", b * t * h * dh)
      .need(k, "k", b * t * h * dh);
  attention_logit_stats_impl(max_logit, entropy, q, k, b, t, h, dh, scale);
}

void Backend::adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& hp) {
  const int64_t n = param.defined() ? param.numel() : 0;
  Contract(*this, "adam_step").need(param, "param", n).need(grad, "grad", n).need(m, "m", n).need(v, "v", n);
  adam_step_impl(param, grad, m, v, hp);
}

}  // namespace normlab
