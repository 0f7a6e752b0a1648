// softmax, multi-head attention (causal, and seeing every key), and the toy model's causal prefix mean.
#include <cmath>

#include "normlab/attention_kernels.h"
#include "normlab/prefix_mean_kernels.h"
#include "normlab/softmax_kernels.h"
#include "op_common.h"

namespace normlab {
using namespace ops_detail;

Tensor softmax(const Tensor& x_in) {
  check_float_same("softmax", {{"x", &x_in}});
  const Tensor x = stored(x_in);
  NL_CHECK(x.dim() >= 1 && x.size(-1) >= 1, "softmax: input {} has an empty last dimension", shape_str(x.shape()));
  const int64_t n = rows_of(x), d = x.size(-1);
  const Precision p = widest({&x});
  Tensor y = new_output(x.shape(), p, x);
  run_kernel(backend_of(x), SoftmaxForward{y, x, n, d});
  store(y, p, "softmax");
  if (needs_grad({&x})) {
    // The output is saved detached: a node must not own the tensor that owns it.
    record("softmax", y, {x}, [y = y.detach(), n, d](const Tensor& dy, GradOutputs& g) {
      if (g[0]) run_kernel(backend_of(dy), SoftmaxBackward{*g[0], dy, y, n, d});
    });
  }
  return y;
}

namespace {

// Both attentions: q (B, T, C); k and v (B, Tk, C), Tk = T when causal.
Tensor attention(const char* name, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, int64_t heads,
                 bool causal) {
  check_float_same(name, {{"q", &q_in}, {"k", &k_in}, {"v", &v_in}});
  const Tensor q = operand(q_in), k = operand(k_in), v = operand(v_in);
  NL_CHECK(q.dim() == 3, "{}: q must be (B, T, C), got {}", name, shape_str(q.shape()));
  if (causal)
    NL_CHECK(k.shape() == q.shape() && v.shape() == q.shape(), "{}: q {}, k {} and v {} must have one shape", name,
             shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  NL_CHECK(k.dim() == 3 && k.size(0) == q.size(0) && k.size(2) == q.size(2) && k.size(1) >= 1 && v.shape() == k.shape(),
           "{}: k {} and v {} must be one (B, Tk, C) with q's B and C, q {}", name, shape_str(k.shape()),
           shape_str(v.shape()), shape_str(q.shape()));
  const int64_t b = q.size(0), t = q.size(1), c = q.size(2);
  NL_CHECK(heads >= 1 && c % heads == 0, "{}: {} heads do not divide the model width C = {}", name, heads, c);
  const int64_t dh = c / heads;
  const AttentionKeys keys{k.size(1), causal};
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  const Precision pf = product_format();
  Tensor out = new_output(q.shape(), pf, q), stats = float_output({b, heads, t, 2}, q);
  const DropoutMask drop = next_dropout_mask();
  run_kernel(backend_of(q), AttentionForward{out, stats, q, k, v, b, t, heads, dh, scale, drop, keys});
  // The fused kernel weights v by the float32 probabilities and stores its output and each row's
  // softmax statistics; the backward recomputes the probabilities and rounds them to the format
  // the unfused form would have stored them in, so a bf16 / fp16 run's gradients see them as
  // that form saves them.
  store(out, pf, name);
  if (needs_grad({&q, &k, &v})) {
    record(name, out, {q, k, v}, [q, k, v, stats, b, t, heads, dh, scale, pf, drop, keys](const Tensor& dout, GradOutputs& g) {
      run_kernel(backend_of(dout),
                 AttentionBackward{g[0], g[1], g[2], dout, q, k, v, stats, b, t, heads, dh, scale, pf, drop, keys});
    });
  }
  return out;
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  return attention("causal_attention", q, k, v, heads, true);
}

Tensor full_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  return attention("full_attention", q, k, v, heads, false);
}

Tensor prefix_mean(const Tensor& x_in) {
  check_float_same("prefix_mean", {{"x", &x_in}});
  const Tensor x = stored(x_in);
  NL_CHECK(x.dim() == 3, "prefix_mean: input must be (B, T, C), got {}", shape_str(x.shape()));
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  const Precision p = widest({&x});
  Tensor y = new_output(x.shape(), p, x);
  run_kernel(backend_of(x), PrefixMeanForward{y, x, b, t, c});
  store(y, p, "prefix_mean");
  if (needs_grad({&x})) {
    record("prefix_mean", y, {x}, [b, t, c](const Tensor& dy, GradOutputs& g) {
      if (g[0]) run_kernel(backend_of(dy), PrefixMeanBackward{*g[0], dy, b, t, c});
    });
  }
  return y;
}

}  // namespace normlab
