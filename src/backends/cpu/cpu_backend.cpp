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
#include "normlab/dropout_kernels.h"
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
  cpu::matmul(f32(call.c, "matmul C"), f32(call.a, "matmul A"), f32(call.b, "matmul B"), call.s,
              call.operands == Precision::bf16);
}

void linear_forward(Backend&, const LinearForward& call) {
  const float* bp = call.bias.defined() ? f32(call.bias, "linear bias") : nullptr;
  const float* rp = call.residual.defined() ? f32(call.residual, "linear residual") : nullptr;
  cpu::linear_forward(f32(call.y, "linear y"), f32(call.x, "linear x"), f32(call.w, "linear w"), bp, rp, call.m, call.k,
                      call.n, call.operands == Precision::bf16);
}

void linear_backward_input(Backend&, const LinearBackwardInput& call) {
  const float* gp = call.gate.defined() ? f32(call.gate, "linear gate") : nullptr;
  cpu::linear_backward_input(f32(call.dx, "linear dx"), f32(call.dy, "linear dy"), f32(call.w, "linear w"), gp, call.m,
                             call.k, call.n, call.operands == Precision::bf16);
}

void sum_rows(Backend&, const SumRows& call) {
  cpu::sum_rows(f32(call.out, "sum_rows out"), f32(call.x, "sum_rows x"), call.rows, call.cols);
}

// ---- elementwise ----------------------------------------------------------------------
void fill(Backend&, const Fill& call) {
  cpu::fill(f32(call.out, "fill out"), static_cast<float>(call.value), call.out.numel());
}

void copy(Backend&, const Copy& call) {
  cpu::copy(f32(call.out, "copy out"), f32(call.x, "copy x"), call.x.numel());
}

void add(Backend&, const Add& call) {
  const int64_t n = call.out.numel();
  cpu::add(f32(call.out, "add out"), f32(call.a, "add a"), f32(call.b, "add b"),
           static_cast<float>(call.alpha), static_cast<float>(call.beta), n);
}

void accumulate(Backend&, const Accumulate& call) {
  const int64_t n = call.dst.numel();
  cpu::accumulate(f32(call.dst, "accumulate dst"), f32(call.src, "accumulate src"), n);
}

void scale(Backend&, const Scale& call) {
  const int64_t n = call.out.numel();
  cpu::scale(f32(call.out, "scale out"), f32(call.x, "scale x"), static_cast<float>(call.alpha), n);
}

void dropout(Backend&, const DropoutApply& call) {
  cpu::dropout(f32(call.y, "dropout y"), f32(call.x, "dropout x"), call.y.numel(), call.mask);
}

void mul(Backend&, const Mul& call) {
  const int64_t n = call.out.numel();
  cpu::mul(f32(call.out, "mul out"), f32(call.a, "mul a"), f32(call.b, "mul b"), n);
}

void gelu_forward(Backend&, const GeluForward& call) {
  const int64_t n = call.y.numel();
  cpu::gelu_forward(f32(call.y, "gelu y"), f32_opt(call.dydx, "gelu dydx"), f32(call.x, "gelu x"), n);
}

void sum_squares(Backend&, const SumSquares& call) {
  call.result = cpu::sum_squares(f32(call.x, "sum_squares x"), call.x.numel());
}

void round_to_format(Backend&, const RoundToFormat& call) {
  const int64_t n = call.x.numel();
  cpu::round_to_format(f32(call.x, "round_to_format x"), n, call.format);
}

void format_census(Backend&, const CountFormat& call) {
  const int64_t n = call.x.numel();
  call.result = cpu::format_census(f32(call.x, "format_census x"), n, call.format);
}

// ---- softmax ---------------------------------------------------------------------------
void softmax_forward(Backend&, const SoftmaxForward& call) {
  cpu::softmax_forward(f32(call.y, "softmax y"), f32(call.x, "softmax x"), call.n, call.d);
}

void softmax_backward(Backend&, const SoftmaxBackward& call) {
  cpu::softmax_backward(f32(call.dx, "softmax dx"), f32(call.dy, "softmax dy"),
                        f32(call.y, "softmax y"), call.n, call.d);
}

// ---- attention -------------------------------------------------------------------------
cpu::AttentionSizes sizes_of(int64_t b, int64_t t, const AttentionKeys& keys, int64_t h, int64_t dh) {
  return {b, t, keys.of(t), h, dh, keys.causal};
}

void attention_forward(Backend&, const AttentionForward& call) {
  cpu::attention_forward(f32(call.out, "attention out"), f32(call.stats, "attention stats"),
                         f32(call.q, "attention q"), f32(call.k, "attention k"), f32(call.v, "attention v"),
                         sizes_of(call.b, call.t, call.keys, call.h, call.dh), static_cast<float>(call.scale),
                         call.dropout);
}

void attention_backward(Backend&, const AttentionBackward& call) {
  cpu::attention_backward(f32_opt(call.dq, "attention dq"), f32_opt(call.dk, "attention dk"),
                          f32_opt(call.dv, "attention dv"), f32(call.dout, "attention dout"),
                          f32(call.q, "attention q"), f32(call.k, "attention k"), f32(call.v, "attention v"),
                          f32(call.stats, "attention stats"), sizes_of(call.b, call.t, call.keys, call.h, call.dh),
                          static_cast<float>(call.scale), call.probs_format, call.dropout);
}

void prefix_mean_forward(Backend&, const PrefixMeanForward& call) {
  cpu::prefix_mean_forward(f32(call.y, "prefix_mean y"), f32(call.x, "prefix_mean x"),
                           call.b, call.t, call.c);
}

void prefix_mean_backward(Backend&, const PrefixMeanBackward& call) {
  cpu::prefix_mean_backward(f32(call.dx, "prefix_mean dx"),
                            f32(call.dy, "prefix_mean dy"), call.b, call.t, call.c);
}

// ---- embedding -------------------------------------------------------------------------
void embedding_forward(Backend&, const EmbeddingForward& call) {
  const int32_t* id = ids_in_range(call.ids, "embedding ids", call.n, call.v);
  cpu::embedding_forward(f32(call.y, "embedding y"), f32(call.table, "embedding table"), id,
                         call.n, call.d);
}

void embedding_backward(Backend&, const EmbeddingBackward& call) {
  const int32_t* id = ids_in_range(call.ids, "embedding ids", call.n, call.v);
  cpu::embedding_backward(f32(call.dtable, "embedding dtable"), f32(call.dy, "embedding dy"),
                          id, call.n, call.v, call.d);
}

// ---- loss ------------------------------------------------------------------------------
void cross_entropy_forward(Backend&, const CrossEntropyForward& call) {
  const int32_t* tg = ids_in_range(call.targets, "cross_entropy targets", call.n, call.v);
  cpu::cross_entropy_forward(f32(call.loss, "cross_entropy loss"),
                             f32(call.probs, "cross_entropy probs"),
                             f32(call.logits, "cross_entropy logits"), tg, call.n, call.v);
}

void cross_entropy_backward(Backend&, const CrossEntropyBackward& call) {
  const int32_t* tg = ids_in_range(call.targets, "cross_entropy targets", call.n, call.v);
  cpu::cross_entropy_backward(f32(call.dlogits, "cross_entropy dlogits"),
                              *f32(call.dloss, "cross_entropy dloss"),
                              f32(call.probs, "cross_entropy probs"), tg, call.n, call.v);
}

// ---- layout ----------------------------------------------------------------------------
void transpose(Backend&, const Transpose& call) {
  cpu::transpose(f32(call.out, "transpose out"), f32(call.x, "transpose x"), call.outer, call.a, call.mid, call.bdim,
                 call.inner);
}

void row_norms(Backend&, const RowNorms& call) {
  cpu::row_norms(f32(call.norms, "row_norms norms"), f32(call.x, "row_norms x"), call.n, call.d);
}

void attention_logit_stats(Backend&, const AttentionLogitStats& call) {
  cpu::attention_logit_stats(f32(call.max_logit, "attention_logit_stats max_logit"),
                             f32(call.entropy, "attention_logit_stats entropy"),
                             f32(call.q, "attention_logit_stats q"),
                             f32(call.k, "attention_logit_stats k"), call.b, call.t, call.h, call.dh, call.scale);
}

// ---- optimizer -------------------------------------------------------------------------
void adam_step(Backend&, const AdamStep& call) {
  const int64_t n = call.param.numel();
  cpu::adam_step(f32(call.param, "adam param"), f32(call.m, "adam m"), f32(call.v, "adam v"),
                 f32(call.grad, "adam grad"), n, call.hp);
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
NORMLAB_KERNEL(DropoutApply, "cpu", dropout);
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
