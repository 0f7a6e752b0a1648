// The "cpu" Backend, and its implementations of the products', elementwise, softmax, attention,
// embedding, loss, layout, statistics and optimizer kernels (registered at the end): each checks
// its tensors are float32 (the sizes are the kernel's contract, kernel.h) and hands raw pointers to
// the kernels in kernels.h / normlab/cpu_kernels.h. No math here.
#include "normlab/cpu_backend.h"

#include <mutex>

#include "kernels.h"
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
};

// ---- matrix products ----------------------------------------------------------------
void matmul(Backend&, const Matmul& call) {
  Tensor& c = call.c;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const MatmulSpec& s = call.s;
  cpu::matmul(f32(c, "matmul C"), f32(a, "matmul A"), f32(b, "matmul B"), s, call.operands == Precision::bf16);
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
  const float* bp = bias.defined() ? f32(bias, "linear bias") : nullptr;
  const float* rp = residual.defined() ? f32(residual, "linear residual") : nullptr;
  cpu::linear_forward(f32(y, "linear y"), f32(x, "linear x"), f32(w, "linear w"), bp, rp, m, k, n,
                      call.operands == Precision::bf16);
}

void linear_backward_input(Backend&, const LinearBackwardInput& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const Tensor& w = call.w;
  const Tensor& gate = call.gate;
  const int64_t m = call.m;
  const int64_t k = call.k;
  const int64_t n = call.n;
  const float* gp = gate.defined() ? f32(gate, "linear gate") : nullptr;
  cpu::linear_backward_input(f32(dx, "linear dx"), f32(dy, "linear dy"), f32(w, "linear w"), gp, m, k, n,
                             call.operands == Precision::bf16);
}

void sum_rows(Backend&, const SumRows& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const int64_t rows = call.rows;
  const int64_t cols = call.cols;
  cpu::sum_rows(f32(out, "sum_rows out"), f32(x, "sum_rows x"), rows, cols);
}

// ---- elementwise ----------------------------------------------------------------------
void fill(Backend&, const Fill& call) {
  Tensor& out = call.out;
  const double value = call.value;
  cpu::fill(f32(out, "fill out"), static_cast<float>(value), out.numel());
}

void copy(Backend&, const Copy& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  cpu::copy(f32(out, "copy out"), f32(x, "copy x"), x.numel());
}

void add(Backend&, const Add& call) {
  Tensor& out = call.out;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const double alpha = call.alpha;
  const double beta = call.beta;
  const int64_t n = out.numel();
  cpu::add(f32(out, "add out"), f32(a, "add a"), f32(b, "add b"),
           static_cast<float>(alpha), static_cast<float>(beta), n);
}

void accumulate(Backend&, const Accumulate& call) {
  Tensor& dst = call.dst;
  const Tensor& src = call.src;
  const int64_t n = dst.numel();
  cpu::accumulate(f32(dst, "accumulate dst"), f32(src, "accumulate src"), n);
}

void scale(Backend&, const Scale& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const double alpha = call.alpha;
  const int64_t n = out.numel();
  cpu::scale(f32(out, "scale out"), f32(x, "scale x"), static_cast<float>(alpha), n);
}

void mul(Backend&, const Mul& call) {
  Tensor& out = call.out;
  const Tensor& a = call.a;
  const Tensor& b = call.b;
  const int64_t n = out.numel();
  cpu::mul(f32(out, "mul out"), f32(a, "mul a"), f32(b, "mul b"), n);
}

void gelu_forward(Backend&, const GeluForward& call) {
  Tensor& y = call.y;
  Tensor* dydx = call.dydx;
  const Tensor& x = call.x;
  const int64_t n = y.numel();
  cpu::gelu_forward(f32(y, "gelu y"), f32_opt(dydx, "gelu dydx"), f32(x, "gelu x"), n);
}

void sum_squares(Backend&, const SumSquares& call) {
  const Tensor& x = call.x;
  call.result = cpu::sum_squares(f32(x, "sum_squares x"), x.numel());
}

void round_to_format(Backend&, const RoundToFormat& call) {
  Tensor& x = call.x;
  const Precision format = call.format;
  const int64_t n = x.numel();
  cpu::round_to_format(f32(x, "round_to_format x"), n, format);
}

void format_census(Backend&, const CountFormat& call) {
  const Tensor& x = call.x;
  const Precision format = call.format;
  const int64_t n = x.numel();
  call.result = cpu::format_census(f32(x, "format_census x"), n, format);
}

// ---- softmax ---------------------------------------------------------------------------
void softmax_forward(Backend&, const SoftmaxForward& call) {
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const int64_t n = call.n;
  const int64_t d = call.d;
  cpu::softmax_forward(f32(y, "softmax y"), f32(x, "softmax x"), n, d);
}

void softmax_backward(Backend&, const SoftmaxBackward& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const Tensor& y = call.y;
  const int64_t n = call.n;
  const int64_t d = call.d;
  cpu::softmax_backward(f32(dx, "softmax dx"), f32(dy, "softmax dy"),
                        f32(y, "softmax y"), n, d);
}

// ---- attention -------------------------------------------------------------------------
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
  cpu::attention_forward(f32(out, "attention out"),
                         f32(probs, "attention probs"), f32(q, "attention q"),
                         f32(k, "attention k"), f32(v, "attention v"), b, t, h, dh,
                         static_cast<float>(scale));
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
  Tensor scratch;  // dP, (B, H, T, T), from the arena: no allocation in the steady state
  if (dq || dk) scratch = Tensor::empty({b, h, t, t});
  cpu::attention_backward(
      f32_opt(dq, "attention dq"), f32_opt(dk, "attention dk"),
      f32_opt(dv, "attention dv"), scratch.defined() ? scratch.data<float>() : nullptr,
      f32(dout, "attention dout"), f32(q, "attention q"), f32(k, "attention k"),
      f32(v, "attention v"), f32(probs, "attention probs"), b, t, h, dh,
      static_cast<float>(scale));
}

void prefix_mean_forward(Backend&, const PrefixMeanForward& call) {
  Tensor& y = call.y;
  const Tensor& x = call.x;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t c = call.c;
  cpu::prefix_mean_forward(f32(y, "prefix_mean y"), f32(x, "prefix_mean x"),
                           b, t, c);
}

void prefix_mean_backward(Backend&, const PrefixMeanBackward& call) {
  Tensor& dx = call.dx;
  const Tensor& dy = call.dy;
  const int64_t b = call.b;
  const int64_t t = call.t;
  const int64_t c = call.c;
  cpu::prefix_mean_backward(f32(dx, "prefix_mean dx"),
                            f32(dy, "prefix_mean dy"), b, t, c);
}

// ---- embedding -------------------------------------------------------------------------
void embedding_forward(Backend&, const EmbeddingForward& call) {
  Tensor& y = call.y;
  const Tensor& table = call.table;
  const Tensor& ids = call.ids;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int64_t d = call.d;
  const int32_t* id = ids_in_range(ids, "embedding ids", n, v);
  cpu::embedding_forward(f32(y, "embedding y"), f32(table, "embedding table"), id,
                         n, d);
}

void embedding_backward(Backend&, const EmbeddingBackward& call) {
  Tensor& dtable = call.dtable;
  const Tensor& dy = call.dy;
  const Tensor& ids = call.ids;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int64_t d = call.d;
  const int32_t* id = ids_in_range(ids, "embedding ids", n, v);
  cpu::embedding_backward(f32(dtable, "embedding dtable"), f32(dy, "embedding dy"),
                          id, n, v, d);
}

// ---- loss ------------------------------------------------------------------------------
void cross_entropy_forward(Backend&, const CrossEntropyForward& call) {
  Tensor& loss = call.loss;
  Tensor& probs = call.probs;
  const Tensor& logits = call.logits;
  const Tensor& targets = call.targets;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int32_t* tg = ids_in_range(targets, "cross_entropy targets", n, v);
  cpu::cross_entropy_forward(f32(loss, "cross_entropy loss"),
                             f32(probs, "cross_entropy probs"),
                             f32(logits, "cross_entropy logits"), tg, n, v);
}

void cross_entropy_backward(Backend&, const CrossEntropyBackward& call) {
  Tensor& dlogits = call.dlogits;
  const Tensor& dloss = call.dloss;
  const Tensor& probs = call.probs;
  const Tensor& targets = call.targets;
  const int64_t n = call.n;
  const int64_t v = call.v;
  const int32_t* tg = ids_in_range(targets, "cross_entropy targets", n, v);
  cpu::cross_entropy_backward(f32(dlogits, "cross_entropy dlogits"),
                              *f32(dloss, "cross_entropy dloss"),
                              f32(probs, "cross_entropy probs"), tg, n, v);
}

// ---- layout ----------------------------------------------------------------------------
void transpose(Backend&, const Transpose& call) {
  Tensor& out = call.out;
  const Tensor& x = call.x;
  const int64_t outer = call.outer;
  const int64_t a = call.a;
  const int64_t mid = call.mid;
  const int64_t bdim = call.bdim;
  const int64_t inner = call.inner;
  cpu::transpose(f32(out, "transpose out"), f32(x, "transpose x"), outer, a, mid, bdim,
                 inner);
}

void row_norms(Backend&, const RowNorms& call) {
  Tensor& norms = call.norms;
  const Tensor& x = call.x;
  const int64_t n = call.n;
  const int64_t d = call.d;
  cpu::row_norms(f32(norms, "row_norms norms"), f32(x, "row_norms x"), n, d);
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
  cpu::attention_logit_stats(f32(max_logit, "attention_logit_stats max_logit"),
                             f32(entropy, "attention_logit_stats entropy"),
                             f32(q, "attention_logit_stats q"),
                             f32(k, "attention_logit_stats k"), b, t, h, dh, scale);
}

// ---- optimizer -------------------------------------------------------------------------
void adam_step(Backend&, const AdamStep& call) {
  Tensor& param = call.param;
  const Tensor& grad = call.grad;
  Tensor& m = call.m;
  Tensor& v = call.v;
  const AdamParams& hp = call.hp;
  const int64_t n = param.numel();
  cpu::adam_step(f32(param, "adam param"), f32(m, "adam m"), f32(v, "adam v"),
                 f32(grad, "adam grad"), n, hp);
}

NORMLAB_KERNEL(Matmul, "cpu", matmul);
NORMLAB_KERNEL(LinearForward, "cpu", linear_forward);
NORMLAB_KERNEL(LinearBackwardInput, "cpu", linear_backward_input);
NORMLAB_KERNEL(SumRows, "cpu", sum_rows);
NORMLAB_KERNEL(Fill, "cpu", fill);
NORMLAB_KERNEL(Copy, "cpu", copy);
NORMLAB_KERNEL(Add, "cpu", add);
NORMLAB_KERNEL(Accumulate, "cpu", accumulate);
NORMLAB_KERNEL(Scale, "cpu", scale);
NORMLAB_KERNEL(Mul, "cpu", mul);
NORMLAB_KERNEL(GeluForward, "cpu", gelu_forward);
NORMLAB_KERNEL(SumSquares, "cpu", sum_squares);
NORMLAB_KERNEL(RoundToFormat, "cpu", round_to_format);
NORMLAB_KERNEL(CountFormat, "cpu", format_census);
NORMLAB_KERNEL(SoftmaxForward, "cpu", softmax_forward);
NORMLAB_KERNEL(SoftmaxBackward, "cpu", softmax_backward);
NORMLAB_KERNEL(AttentionForward, "cpu", attention_forward);
NORMLAB_KERNEL(AttentionBackward, "cpu", attention_backward);
NORMLAB_KERNEL(PrefixMeanForward, "cpu", prefix_mean_forward);
NORMLAB_KERNEL(PrefixMeanBackward, "cpu", prefix_mean_backward);
NORMLAB_KERNEL(EmbeddingForward, "cpu", embedding_forward);
NORMLAB_KERNEL(EmbeddingBackward, "cpu", embedding_backward);
NORMLAB_KERNEL(CrossEntropyForward, "cpu", cross_entropy_forward);
NORMLAB_KERNEL(CrossEntropyBackward, "cpu", cross_entropy_backward);
NORMLAB_KERNEL(Transpose, "cpu", transpose);
NORMLAB_KERNEL(RowNorms, "cpu", row_norms);
NORMLAB_KERNEL(AttentionLogitStats, "cpu", attention_logit_stats);
NORMLAB_KERNEL(AdamStep, "cpu", adam_step);

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace normlab
