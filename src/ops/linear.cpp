// linear and batched matmul. Backward of C = A @ B: dA = dC @ B^T, dB = A^T @ dC.
#include "normlab/elementwise_kernels.h"
#include "normlab/matmul_kernels.h"
#include "op_common.h"

namespace normlab {
using namespace ops_detail;

namespace {

void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual) {
  check_float_same(op, {{"input", &x}, {"weight", &w}, {"bias", &bias}, {"residual", &residual}});
  NL_CHECK(w.dim() == 2, "{}: weight must be 2-D (out_features, in_features), got {}", op, shape_str(w.shape()));
  NL_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1),
           "{}: input {} has last dimension {} but weight {} expects in_features = {}", op, shape_str(x.shape()),
           x.dim() ? x.size(-1) : 0, shape_str(w.shape()), w.size(1));
  NL_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)),
           "{}: bias {} does not match out_features = {} of weight {}", op, shape_str(bias.shape()), w.size(0),
           shape_str(w.shape()));
  NL_CHECK(!residual.defined() || residual.shape() == with_last(x.shape(), w.size(0)),
           "{}: residual {} does not match the output {} of input {} and weight {}", op,
           shape_str(residual.shape()), shape_str(with_last(x.shape(), w.size(0))), shape_str(x.shape()),
           shape_str(w.shape()));
}

// A residual kept wider than the product (a float32 stream): the sum is an op of its own, in
// the stream's format, after the product's output is stored (autocast's "x + proj(h)").
bool stream_wider(const Tensor& residual) {
  return residual.defined() && product_format() != Precision::fp32 && residual.impl().format == Precision::fp32 &&
         residual.impl().op_output;
}

// The differentiable inputs of a linear op, in GradOutputs order: input, weight, [bias], [residual].
std::vector<Tensor> linear_inputs(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual) {
  std::vector<Tensor> inputs{x, w};
  if (bias.defined()) inputs.push_back(bias);
  if (residual.defined()) inputs.push_back(residual);
  return inputs;
}

// dW, dbias and the residual's gradient, shared by linear and gelu_linear; `x` is the product's
// left operand (gelu(h) for gelu_linear).
void linear_param_grads(const Tensor& dy, GradOutputs& g, const Tensor& x, bool has_bias, bool has_residual,
                        int64_t m, int64_t k, int64_t n, Precision operands) {
  Backend& kb = backend_of(dy);
  // dW (N,K) = dy^T (N,M) @ x (M,K)
  if (g[1]) run_kernel(kb, Matmul{*g[1], dy, x, MatmulSpec::of(n, k, m).transposed_a(), operands});
  // dbias (N) = sum over rows of dy
  if (has_bias && g[2]) run_kernel(kb, SumRows{*g[2], dy, m, n});
  if (has_residual) g.pass_through(has_bias ? 3 : 2);
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, const Tensor& residual_in) {
  check_linear("linear", x_in, w_in, bias_in, residual_in);
  if (stream_wider(residual_in)) return add(residual_in, linear(x_in, w_in, bias_in));
  const Tensor x = operand(x_in), w = operand(w_in), bias = operand(bias_in), residual = operand(residual_in);
  const int64_t m = rows_of(x), k = w.size(1), n = w.size(0);
  const Precision pf = product_format();  // the operands' format, and y's
  Tensor y = new_output(with_last(x.shape(), n), pf, x);
  run_kernel(backend_of(x), LinearForward{y, x, w, bias, residual, m, k, n, pf});
  store(y, product_format(), "linear");
  if (needs_grad({&x, &w, &bias, &residual})) {
    const bool has_bias = bias.defined(), has_residual = residual.defined();
    record("linear", y, linear_inputs(x, w, bias, residual),
           [x, w, m, k, n, has_bias, has_residual, pf](const Tensor& dy, GradOutputs& g) {
             // dx (M,K) = dy (M,N) @ W (N,K)
             if (g[0]) run_kernel(backend_of(dy), LinearBackwardInput{*g[0], dy, w, Tensor(), m, k, n, pf});
             linear_param_grads(dy, g, x, has_bias, has_residual, m, k, n, pf);
           });
  }
  return y;
}

Tensor gelu_linear(const Tensor& h_in, const Tensor& w_in, const Tensor& bias_in, const Tensor& residual_in) {
  check_linear("gelu_linear", h_in, w_in, bias_in, residual_in);
  if (stream_wider(residual_in)) return add(residual_in, gelu_linear(h_in, w_in, bias_in));
  const Tensor h = operand(h_in), w = operand(w_in), bias = operand(bias_in), residual = operand(residual_in);
  const int64_t m = rows_of(h), k = w.size(1), n = w.size(0);
  const Precision pf = product_format();  // the operands' format (gelu(h) is stored in it first), and y's
  Tensor a = new_output(h.shape(), product_format(), h);
  Tensor y = new_output(with_last(h.shape(), n), product_format(), h);
  // gelu(h) is stored before the product reads it, as the two unfused ops would store it.
  if (!needs_grad({&h, &w, &bias, &residual})) {
    run_kernel(backend_of(h), GeluForward{a, nullptr, h});
    store(a, product_format(), "gelu");
    run_kernel(backend_of(h), LinearForward{y, a, w, bias, residual, m, k, n, pf});
    store(y, product_format(), "gelu_linear");
    return y;
  }
  Tensor dadh = float_output(h.shape(), h);
  run_kernel(backend_of(h), GeluForward{a, &dadh, h});
  store(a, product_format(), "gelu");
  run_kernel(backend_of(h), LinearForward{y, a, w, bias, residual, m, k, n, pf});
  store(y, product_format(), "gelu_linear");
  const bool has_bias = bias.defined(), has_residual = residual.defined();
  record("gelu_linear", y, linear_inputs(h, w, bias, residual),
         [a, dadh, w, m, k, n, has_bias, has_residual, pf](const Tensor& dy, GradOutputs& g) {
           // dh (M,K) = (dy (M,N) @ W (N,K)) * gelu'(h)
           if (g[0]) run_kernel(backend_of(dy), LinearBackwardInput{*g[0], dy, w, dadh, m, k, n, pf});
           linear_param_grads(dy, g, a, has_bias, has_residual, m, k, n, pf);
         });
  return y;
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  check_float_same("matmul", {{"a", &a_in}, {"b", &b_in}});
  const Tensor a = operand(a_in), b = operand(b_in);
  const Precision pf = product_format();
  NL_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: needs at least 2-D operands, got {} and {}", shape_str(a.shape()),
           shape_str(b.shape()));
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  NL_CHECK(b.size(-2) == k, "matmul: {} @ {}: inner dimensions {} and {} differ", shape_str(a.shape()),
           shape_str(b.shape()), k, b.size(-2));
  const bool b_batched = b.dim() > 2;
  if (b_batched) {
    NL_CHECK(Shape(a.shape().begin(), a.shape().end() - 2) == Shape(b.shape().begin(), b.shape().end() - 2),
             "matmul: batch dimensions of {} and {} differ", shape_str(a.shape()), shape_str(b.shape()));
  }
  const int64_t batch = m * k == 0 ? 0 : a.numel() / (m * k);
  Shape out_shape(a.shape().begin(), a.shape().end() - 1);
  out_shape.push_back(n);
  Tensor c = new_output(out_shape, product_format(), a);
  run_kernel(backend_of(a), Matmul{c, a, b, MatmulSpec::of(m, n, k).batched(batch).shared_b(!b_batched), pf});
  store(c, product_format(), "matmul");
  if (needs_grad({&a, &b})) {
    record("matmul", c, {a, b}, [a, b, batch, m, n, k, b_batched, pf](const Tensor& dc, GradOutputs& g) {
      Backend& kb = backend_of(dc);
      // dA_b (M,K) = dC_b (M,N) @ B_b^T
      if (g[0])
        run_kernel(
            kb, Matmul{*g[0], dc, b, MatmulSpec::of(m, k, n).batched(batch).transposed_b().shared_b(!b_batched), pf});
      if (g[1]) {
        if (b_batched) {  // dB_b (K,N) = A_b^T (K,M) @ dC_b (M,N)
          run_kernel(kb, Matmul{*g[1], a, dc, MatmulSpec::of(k, n, m).batched(batch).transposed_a(), pf});
        } else {  // a shared B sums over the batch: treat A as (batch*M, K)
          run_kernel(kb, Matmul{*g[1], a, dc, MatmulSpec::of(k, n, batch * m).transposed_a(), pf});
        }
      }
    });
  }
  return c;
}

}  // namespace normlab
