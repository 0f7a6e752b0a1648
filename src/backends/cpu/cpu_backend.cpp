// The "cpu" Backend: checks each tensor is float32 (the sizes are the Backend entries' contract) and
// hands raw pointers to the kernels in kernels.h / normlab/cpu_kernels.h. No math here.
#include "normlab/cpu_backend.h"

#include <mutex>

#include "kernels.h"
#include "normlab/cpu_kernels.h"
#include "onednn.h"
#include "tensor_args.h"

namespace normlab {

namespace {

using cpu::f32;
using cpu::f32_opt;

// int32 ids (or targets) of n elements, each checked to lie in [0, limit).
const int32_t* ids_in_range(const Tensor& t, const char* what, int64_t n, int64_t limit) {
  NL_CHECK(t.dtype() == DType::i32, "cpu backend: {} must be an int32 tensor", what);
  const int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    NL_CHECK(p[i] >= 0 && p[i] < limit, "cpu backend: {}[{}] = {} is outside [0, {})", what, i,
             p[i], limit);
  return p;
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu; }
  bool supports(DType dtype) const override { return dtype == DType::f32; }
  std::vector<KernelChoice> kernel_choices() const override {
    std::vector<KernelChoice> out;
    for (const cpu::NormChoice& c : cpu::norm_choices_made()) out.push_back({c.shape.key(), c.best.name(), c.source});
    return out;
  }
  uint64_t primitives_created() const override {
    cpu::OneDnn& o = cpu::OneDnn::get();
    std::lock_guard<std::mutex> lock(o.mutex());
    return o.created();
  }

  // ---- matrix products ----------------------------------------------------------------
  void matmul_impl(Tensor& c, const Tensor& a, const Tensor& b, const MatmulSpec& s) override {
    cpu::matmul(f32(c, "matmul C"), f32(a, "matmul A"),
                f32(b, "matmul B"), s);
  }
  void linear_forward_impl(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, int64_t m, int64_t k, int64_t n) override {
    const float* bp = bias.defined() ? f32(bias, "linear bias") : nullptr;
    const float* rp = residual.defined() ? f32(residual, "linear residual") : nullptr;
    cpu::linear_forward(f32(y, "linear y"), f32(x, "linear x"),
                        f32(w, "linear w"), bp, rp, m, k, n);
  }
  void linear_backward_input_impl(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gate,
                                  int64_t m, int64_t k, int64_t n) override {
    const float* gp = gate.defined() ? f32(gate, "linear gate") : nullptr;
    cpu::linear_backward_input(f32(dx, "linear dx"), f32(dy, "linear dy"),
                               f32(w, "linear w"), gp, m, k, n);
  }
  void sum_rows_impl(Tensor& out, const Tensor& x, int64_t rows, int64_t cols) override {
    cpu::sum_rows(f32(out, "sum_rows out"), f32(x, "sum_rows x"), rows, cols);
  }

  // ---- elementwise ----------------------------------------------------------------------
  void fill_impl(Tensor& out, double value) override {
    cpu::fill(f32(out, "fill out"), static_cast<float>(value), out.numel());
  }
  void copy_impl(Tensor& out, const Tensor& x) override {
    cpu::copy(f32(out, "copy out"), f32(x, "copy x"), x.numel());
  }
  void add_impl(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) override {
    const int64_t n = out.numel();
    cpu::add(f32(out, "add out"), f32(a, "add a"), f32(b, "add b"),
             static_cast<float>(alpha), static_cast<float>(beta), n);
  }
  void accumulate_impl(Tensor& dst, const Tensor& src) override {
    const int64_t n = dst.numel();
    cpu::accumulate(f32(dst, "accumulate dst"), f32(src, "accumulate src"), n);
  }
  void scale_impl(Tensor& out, const Tensor& x, double alpha) override {
    const int64_t n = out.numel();
    cpu::scale(f32(out, "scale out"), f32(x, "scale x"), static_cast<float>(alpha), n);
  }
  void round_to_format_impl(Tensor& x, Precision format) override {
    const int64_t n = x.numel();
    cpu::round_to_format(f32(x, "round_to_format x"), n, format);
  }
  FormatCensus format_census_impl(const Tensor& x, Precision format) override {
    const int64_t n = x.numel();
    return cpu::format_census(f32(x, "format_census x"), n, format);
  }
  void mul_impl(Tensor& out, const Tensor& a, const Tensor& b) override {
    const int64_t n = out.numel();
    cpu::mul(f32(out, "mul out"), f32(a, "mul a"), f32(b, "mul b"), n);
  }
  void gelu_forward_impl(Tensor& y, Tensor* dydx, const Tensor& x) override {
    const int64_t n = y.numel();
    cpu::gelu_forward(f32(y, "gelu y"), f32_opt(dydx, "gelu dydx"), f32(x, "gelu x"), n);
  }
  double sum_squares_impl(const Tensor& x) override {
    return cpu::sum_squares(f32(x, "sum_squares x"), x.numel());
  }

  // ---- normalization ----------------------------------------------------------------------

  // ---- softmax ---------------------------------------------------------------------------
  void softmax_forward_impl(Tensor& y, const Tensor& x, int64_t n, int64_t d) override {
    cpu::softmax_forward(f32(y, "softmax y"), f32(x, "softmax x"), n, d);
  }
  void softmax_backward_impl(Tensor& dx, const Tensor& dy, const Tensor& y, int64_t n,
                             int64_t d) override {
    cpu::softmax_backward(f32(dx, "softmax dx"), f32(dy, "softmax dy"),
                          f32(y, "softmax y"), n, d);
  }

  // ---- attention -------------------------------------------------------------------------
  void attention_forward_impl(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                              const Tensor& v, int64_t b, int64_t t, int64_t h, int64_t dh,
                              double scale) override {
    cpu::attention_forward(f32(out, "attention out"),
                           f32(probs, "attention probs"), f32(q, "attention q"),
                           f32(k, "attention k"), f32(v, "attention v"), b, t, h, dh,
                           static_cast<float>(scale));
  }
  void attention_backward_impl(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& probs, int64_t b,
                               int64_t t, int64_t h, int64_t dh, double scale) override {
    Tensor scratch;  // dP, (B, H, T, T), from the arena: no allocation in the steady state
    if (dq || dk) scratch = Tensor::empty({b, h, t, t});
    cpu::attention_backward(
        f32_opt(dq, "attention dq"), f32_opt(dk, "attention dk"),
        f32_opt(dv, "attention dv"), scratch.defined() ? scratch.data<float>() : nullptr,
        f32(dout, "attention dout"), f32(q, "attention q"), f32(k, "attention k"),
        f32(v, "attention v"), f32(probs, "attention probs"), b, t, h, dh,
        static_cast<float>(scale));
  }

  void row_norms_impl(Tensor& norms, const Tensor& x, int64_t n, int64_t d) override {
    cpu::row_norms(f32(norms, "row_norms norms"), f32(x, "row_norms x"), n, d);
  }
  void attention_logit_stats_impl(Tensor& max_logit, Tensor& entropy, const Tensor& q, const Tensor& k, int64_t b,
                                  int64_t t, int64_t h, int64_t dh, double scale) override {
    cpu::attention_logit_stats(f32(max_logit, "attention_logit_stats max_logit"),
                               f32(entropy, "attention_logit_stats entropy"),
                               f32(q, "attention_logit_stats q"),
                               f32(k, "attention_logit_stats k"), b, t, h, dh, scale);
  }

  void prefix_mean_forward_impl(Tensor& y, const Tensor& x, int64_t b, int64_t t, int64_t c) override {
    cpu::prefix_mean_forward(f32(y, "prefix_mean y"), f32(x, "prefix_mean x"),
                             b, t, c);
  }
  void prefix_mean_backward_impl(Tensor& dx, const Tensor& dy, int64_t b, int64_t t,
                                 int64_t c) override {
    cpu::prefix_mean_backward(f32(dx, "prefix_mean dx"),
                              f32(dy, "prefix_mean dy"), b, t, c);
  }

  // ---- embedding -------------------------------------------------------------------------
  void embedding_forward_impl(Tensor& y, const Tensor& table, const Tensor& ids, int64_t n, int64_t v,
                              int64_t d) override {
    const int32_t* id = ids_in_range(ids, "embedding ids", n, v);
    cpu::embedding_forward(f32(y, "embedding y"), f32(table, "embedding table"), id,
                           n, d);
  }
  void embedding_backward_impl(Tensor& dtable, const Tensor& dy, const Tensor& ids, int64_t n, int64_t v,
                               int64_t d) override {
    const int32_t* id = ids_in_range(ids, "embedding ids", n, v);
    cpu::embedding_backward(f32(dtable, "embedding dtable"), f32(dy, "embedding dy"),
                            id, n, v, d);
  }

  // ---- loss ------------------------------------------------------------------------------
  void cross_entropy_forward_impl(Tensor& loss, Tensor& probs, const Tensor& logits,
                                  const Tensor& targets, int64_t n, int64_t v) override {
    const int32_t* tg = ids_in_range(targets, "cross_entropy targets", n, v);
    cpu::cross_entropy_forward(f32(loss, "cross_entropy loss"),
                               f32(probs, "cross_entropy probs"),
                               f32(logits, "cross_entropy logits"), tg, n, v);
  }
  void cross_entropy_backward_impl(Tensor& dlogits, const Tensor& dloss, const Tensor& probs,
                                   const Tensor& targets, int64_t n, int64_t v) override {
    const int32_t* tg = ids_in_range(targets, "cross_entropy targets", n, v);
    cpu::cross_entropy_backward(f32(dlogits, "cross_entropy dlogits"),
                                *f32(dloss, "cross_entropy dloss"),
                                f32(probs, "cross_entropy probs"), tg, n, v);
  }

  // ---- layout ----------------------------------------------------------------------------
  void transpose_impl(Tensor& out, const Tensor& x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
                      int64_t inner) override {
    cpu::transpose(f32(out, "transpose out"), f32(x, "transpose x"), outer, a, mid, bdim,
                   inner);
  }

  // ---- optimizer -------------------------------------------------------------------------
  void adam_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamParams& hp) override {
    const int64_t n = param.numel();
    cpu::adam_step(f32(param, "adam param"), f32(m, "adam m"), f32(v, "adam v"),
                   f32(grad, "adam grad"), n, hp);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace normlab
