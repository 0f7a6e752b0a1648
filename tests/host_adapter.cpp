// make_host_adapter (host_adapter.h): a device backend's kernels for host tensors.
#include "host_adapter.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace normlab {

namespace {


class DeviceAdapter final : public Backend {
 public:
  DeviceAdapter(Backend& device_backend, bool poison) : b_(device_backend), poison_(poison) {}

  std::string name() const override { return b_.name(); }
  Device device() const override { return Device::cpu; }
  bool supports(DType dtype) const override { return b_.supports(dtype); }

  void matmul_impl(Tensor& c, const Tensor& a, const Tensor& b, const MatmulSpec& s) override {
    Call k(*this);
    Tensor da = k.in(a), db = k.in(b);
    Tensor& dc = s.accumulate ? k.inout(c) : k.out(c);
    b_.matmul(dc, da, db, s);
  }
  void linear_forward_impl(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, int64_t m, int64_t k_, int64_t n) override {
    Call k(*this);
    Tensor dx = k.in(x), dw = k.in(w), dbias = k.in(bias), dres = k.in(residual);
    b_.linear_forward(k.out(y), dx, dw, dbias, dres, m, k_, n);
  }
  void linear_backward_input_impl(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gate,
                                  int64_t m, int64_t k_, int64_t n) override {
    Call k(*this);
    Tensor ddy = k.in(dy), dw = k.in(w), dg = k.in(gate);
    b_.linear_backward_input(k.out(dx), ddy, dw, dg, m, k_, n);
  }
  void sum_rows_impl(Tensor& out, const Tensor& x, int64_t rows, int64_t cols) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.sum_rows(k.out(out), dx, rows, cols);
  }
  void fill_impl(Tensor& out, double value) override {
    Call k(*this);
    b_.fill(k.out(out), value);
  }
  void copy_impl(Tensor& out, const Tensor& x) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.copy(k.out(out), dx);
  }
  void add_impl(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) override {
    Call k(*this);
    Tensor da = k.in(a), db = k.in(b);
    b_.add(k.out(out), da, db, alpha, beta);
  }
  void accumulate_impl(Tensor& dst, const Tensor& src) override {
    Call k(*this);
    Tensor ds = k.in(src);
    b_.accumulate(k.inout(dst), ds);
  }
  void scale_impl(Tensor& out, const Tensor& x, double alpha) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.scale(k.out(out), dx, alpha);
  }
  void round_to_format_impl(Tensor& x, Precision format) override {
    Call k(*this);
    b_.round_to_format(k.inout(x), format);
  }
  void mul_impl(Tensor& out, const Tensor& a, const Tensor& b) override {
    Call k(*this);
    Tensor da = k.in(a), db = k.in(b);
    b_.mul(k.out(out), da, db);
  }
  void gelu_forward_impl(Tensor& y, Tensor* dydx, const Tensor& x) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.gelu_forward(k.out(y), k.out(dydx), dx);
  }
  double sum_squares_impl(const Tensor& x) override {
    Call k(*this);
    return b_.sum_squares(k.in(x));
  }
  void composite_norm_forward_impl(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, int64_t n, int64_t d, double eps, Precision format) override {
    Call k(*this);
    Tensor dx = k.in(x), dg = k.in(gamma), db = k.in(beta);
    Tensor dm;
    if (mean.defined()) dm = k.out(mean);
    b_.composite_norm_forward(k.out(y), dm, k.out(rstd), dx, dg, db, n, d, eps, format);
  }
  void composite_norm_backward_impl(Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy, const Tensor& x,
                                    const Tensor& gamma, const Tensor& mean, const Tensor& rstd, int64_t n, int64_t d,
                                    Precision format, CompositeBackwardCensus* census) override {
    Call k(*this);
    Tensor ddy = k.in(dy), dxin = k.in(x), dg = k.in(gamma), dm = k.in(mean), dr = k.in(rstd);
    b_.composite_norm_backward(k.out(dx), k.out(dgamma), k.out(dbeta), ddy, dxin, dg, dm, dr, n, d, format, census);
  }
  FormatCensus format_census_impl(const Tensor& x, Precision format) override {
    Call k(*this);
    return b_.format_census(k.in(x), format);
  }
  void layernorm_forward_impl(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                              const Tensor& gamma, const Tensor& beta, int64_t n, int64_t d,
                              double eps) override {
    Call k(*this);
    Tensor dx = k.in(x), dg = k.in(gamma), dbt = k.in(beta);
    b_.layernorm_forward(k.out(y), k.out(mean), k.out(rstd), dx, dg, dbt, n, d, eps);
  }
  void layernorm_backward_impl(Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                               const Tensor& x, const Tensor& gamma, const Tensor& mean,
                               const Tensor& rstd, int64_t n, int64_t d) override {
    Call k(*this);
    Tensor ddy = k.in(dy), dxin = k.in(x), dg = k.in(gamma), dm = k.in(mean), dr = k.in(rstd);
    b_.layernorm_backward(k.out(dx), k.out(dgamma), k.out(dbeta), ddy, dxin, dg, dm, dr, n, d);
  }
  void rmsnorm_forward_impl(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& gamma, int64_t n,
                            int64_t d, double eps) override {
    Call k(*this);
    Tensor dx = k.in(x), dg = k.in(gamma);
    b_.rmsnorm_forward(k.out(y), k.out(rstd), dx, dg, n, d, eps);
  }
  void rmsnorm_backward_impl(Tensor* dx, Tensor* dgamma, const Tensor& dy, const Tensor& x,
                             const Tensor& gamma, const Tensor& rstd, int64_t n, int64_t d) override {
    Call k(*this);
    Tensor ddy = k.in(dy), dxin = k.in(x), dg = k.in(gamma), dr = k.in(rstd);
    b_.rmsnorm_backward(k.out(dx), k.out(dgamma), ddy, dxin, dg, dr, n, d);
  }
  void squash_forward_impl(Tensor& y, const Tensor& x, const Tensor& alpha, const Tensor& shift, const Tensor& gamma,
                           const Tensor& beta, int64_t n, int64_t d, Squash f) override {
    Call k(*this);
    Tensor dx = k.in(x), da = k.in(alpha), ds = k.in(shift), dg = k.in(gamma), db = k.in(beta);
    b_.squash_forward(k.out(y), dx, da, ds, dg, db, n, d, f);
  }
  void squash_backward_impl(Tensor* dx, Tensor* dalpha, Tensor* dshift, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                            const Tensor& x, const Tensor& alpha, const Tensor& shift, const Tensor& gamma, int64_t n,
                            int64_t d, Squash f) override {
    Call k(*this);
    Tensor ddy = k.in(dy), dxin = k.in(x), da = k.in(alpha), ds = k.in(shift), dg = k.in(gamma);
    b_.squash_backward(k.out(dx), k.out(dalpha), k.out(dshift), k.out(dgamma), k.out(dbeta), ddy, dxin, da, ds, dg, n,
                       d, f);
  }
  void channel_scale_forward_impl(Tensor& y, const Tensor& x, const Tensor& lambda, int64_t n, int64_t d,
                                  int64_t c) override {
    Call k(*this);
    Tensor dx = k.in(x), dl = k.in(lambda);
    b_.channel_scale_forward(k.out(y), dx, dl, n, d, c);
  }
  void channel_scale_backward_impl(Tensor* dx, Tensor* dlambda, const Tensor& dy, const Tensor& x, const Tensor& lambda,
                                   int64_t n, int64_t d, int64_t c) override {
    Call k(*this);
    Tensor ddy = k.in(dy), dxin = k.in(x), dl = k.in(lambda);
    b_.channel_scale_backward(k.out(dx), k.out(dlambda), ddy, dxin, dl, n, d, c);
  }
  void add_layernorm_forward_impl(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& a,
                                  const Tensor& b, double alpha, const Tensor& gamma, const Tensor& beta,
                                  int64_t n, int64_t d, double eps) override {
    Call k(*this);
    Tensor da = k.in(a), db = k.in(b), dg = k.in(gamma), dbt = k.in(beta);
    b_.add_layernorm_forward(k.out(s), k.out(y), k.out(mean), k.out(rstd), da, db, alpha, dg, dbt,
                             n, d, eps);
  }
  void add_rmsnorm_forward_impl(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& a, const Tensor& b,
                                double alpha, const Tensor& gamma, int64_t n, int64_t d,
                                double eps) override {
    Call k(*this);
    Tensor da = k.in(a), db = k.in(b), dg = k.in(gamma);
    b_.add_rmsnorm_forward(k.out(s), k.out(y), k.out(rstd), da, db, alpha, dg, n, d, eps);
  }
  void softmax_forward_impl(Tensor& y, const Tensor& x, int64_t n, int64_t d) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.softmax_forward(k.out(y), dx, n, d);
  }
  void softmax_backward_impl(Tensor& dx, const Tensor& dy, const Tensor& y, int64_t n,
                             int64_t d) override {
    Call k(*this);
    Tensor ddy = k.in(dy), dyv = k.in(y);
    b_.softmax_backward(k.out(dx), ddy, dyv, n, d);
  }
  void attention_forward_impl(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k_,
                              const Tensor& v, int64_t b, int64_t t, int64_t h, int64_t dh,
                              double scale) override {
    Call k(*this);
    Tensor dq = k.in(q), dk = k.in(k_), dv = k.in(v);
    b_.attention_forward(k.out(out), k.out(probs), dq, dk, dv, b, t, h, dh, scale);
  }
  void attention_backward_impl(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                               const Tensor& k_, const Tensor& v, const Tensor& probs, int64_t b,
                               int64_t t, int64_t h, int64_t dh, double scale) override {
    Call k(*this);
    Tensor ddout = k.in(dout), qq = k.in(q), kk = k.in(k_), vv = k.in(v), pp = k.in(probs);
    b_.attention_backward(k.out(dq), k.out(dk), k.out(dv), ddout, qq, kk, vv, pp, b, t, h, dh,
                          scale);
  }
  void row_norms_impl(Tensor& norms, const Tensor& x, int64_t n, int64_t d) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.row_norms(k.out(norms), dx, n, d);
  }
  void attention_logit_stats_impl(Tensor& max_logit, Tensor& entropy, const Tensor& q, const Tensor& k_, int64_t b,
                                  int64_t t, int64_t h, int64_t dh, double scale) override {
    Call k(*this);
    Tensor qq = k.in(q), kk = k.in(k_);
    b_.attention_logit_stats(k.out(max_logit), k.out(entropy), qq, kk, b, t, h, dh, scale);
  }
  void prefix_mean_forward_impl(Tensor& y, const Tensor& x, int64_t b, int64_t t, int64_t c) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.prefix_mean_forward(k.out(y), dx, b, t, c);
  }
  void prefix_mean_backward_impl(Tensor& dx, const Tensor& dy, int64_t b, int64_t t,
                                 int64_t c) override {
    Call k(*this);
    Tensor ddy = k.in(dy);
    b_.prefix_mean_backward(k.out(dx), ddy, b, t, c);
  }
  void embedding_forward_impl(Tensor& y, const Tensor& table, const Tensor& ids, int64_t n, int64_t v,
                              int64_t d) override {
    Call k(*this);
    Tensor dt = k.in(table), di = k.in(ids);
    b_.embedding_forward(k.out(y), dt, di, n, v, d);
  }
  void embedding_backward_impl(Tensor& dtable, const Tensor& dy, const Tensor& ids, int64_t n, int64_t v,
                               int64_t d) override {
    Call k(*this);
    Tensor ddy = k.in(dy), di = k.in(ids);
    b_.embedding_backward(k.out(dtable), ddy, di, n, v, d);
  }
  void cross_entropy_forward_impl(Tensor& loss, Tensor& probs, const Tensor& logits,
                                  const Tensor& targets, int64_t n, int64_t v) override {
    Call k(*this);
    Tensor dl = k.in(logits), dt = k.in(targets);
    b_.cross_entropy_forward(k.out(loss), k.out(probs), dl, dt, n, v);
  }
  void cross_entropy_backward_impl(Tensor& dlogits, const Tensor& dloss, const Tensor& probs,
                                   const Tensor& targets, int64_t n, int64_t v) override {
    Call k(*this);
    Tensor dd = k.in(dloss), dp = k.in(probs), dt = k.in(targets);
    b_.cross_entropy_backward(k.out(dlogits), dd, dp, dt, n, v);
  }
  void transpose_impl(Tensor& out, const Tensor& x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
                      int64_t inner) override {
    Call k(*this);
    Tensor dx = k.in(x);
    b_.transpose(k.out(out), dx, outer, a, mid, bdim, inner);
  }
  void adam_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamParams& hp) override {
    Call k(*this);
    Tensor dg = k.in(grad);
    b_.adam_step(k.inout(param), dg, k.inout(m), k.inout(v), hp);
  }

 private:
  // One kernel call: the device copies of its tensors, by host address, and the outputs to
  // copy back when the call returns (also when it throws: then nothing is copied back).
  class Call {
   public:
    explicit Call(DeviceAdapter& a) : a_(a) {}
    ~Call() noexcept(false) {
      if (std::uncaught_exceptions() > 0) return;
      for (auto& [host, dev] : outs_) {
        Tensor back = dev->to_device(Device::cpu);
        if (back.nbytes()) std::memcpy(host->raw(), back.raw(), back.nbytes());
      }
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    // An input: uploaded (once per host buffer and call). Undefined stays undefined.
    Tensor in(const Tensor& host) {
      if (!host.defined()) return Tensor();
      return *slot(host, /*upload=*/true);
    }
    // An output: a NaN-poisoned device buffer, or the input's buffer when it aliases one.
    Tensor& out(Tensor& host) { return *output(host, /*upload=*/false); }
    Tensor* out(Tensor* host) { return host ? output(*host, false) : nullptr; }
    // Read and written: uploaded, copied back.
    Tensor& inout(Tensor& host) { return *output(host, /*upload=*/true); }

   private:
    struct Key {
      const void* ptr;
      size_t bytes;
      bool operator<(const Key& o) const { return ptr != o.ptr ? ptr < o.ptr : bytes < o.bytes; }
    };
    Tensor* slot(const Tensor& host, bool upload) {
      const Key key{host.raw(), host.nbytes()};
      auto it = dev_.find(key);
      if (it != dev_.end()) return it->second.get();
      auto t = std::make_unique<Tensor>();
      if (upload || host.dtype() == DType::i32) {
        *t = host.to_device(a_.b_.device());
      } else {
        *t = Tensor::empty(host.shape(), host.dtype(), a_.b_.device());
        if (a_.poison_) t->fill_(NAN);
      }
      Tensor* p = t.get();
      dev_.emplace(key, std::move(t));
      return p;
    }
    Tensor* output(Tensor& host, bool upload) {
      Tensor* d = slot(host, upload);
      outs_.emplace_back(&host, d);
      return d;
    }
    DeviceAdapter& a_;
    std::map<Key, std::unique_ptr<Tensor>> dev_;
    std::vector<std::pair<Tensor*, Tensor*>> outs_;
  };

  Backend& b_;
  bool poison_;
};


}  // namespace

std::unique_ptr<Backend> make_host_adapter(Backend& device_backend, bool poison_outputs) {
  NL_CHECK(device_backend.device() != Device::cpu, "make_host_adapter: backend {} is already a cpu backend",
           device_backend.name());
  return std::make_unique<DeviceAdapter>(device_backend, poison_outputs);
}

}  // namespace normlab
