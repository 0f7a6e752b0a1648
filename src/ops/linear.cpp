// linear and batched matmul. Backward of C = A @ B: dA = dC @ B^T, dB = A^T @ dC.
#include "ops/op_common.h"

namespace normlab {
using namespace ops_detail;

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_float_same("linear", {{"input", &x}, {"weight", &w}, {"bias", &bias}});
  NL_CHECK(w.dim() == 2, "linear: weight must be 2-D (out_features, in_features), got {}", shape_str(w.shape()));
  NL_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1),
           "linear: input {} has last dimension {} but weight {} expects in_features = {}", shape_str(x.shape()),
           x.dim() ? x.size(-1) : 0, shape_str(w.shape()), w.size(1));
  NL_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)),
           "linear: bias {} does not match out_features = {} of weight {}", shape_str(bias.shape()), w.size(0),
           shape_str(w.shape()));
  const int64_t m = rows_of(x), k = w.size(1), n = w.size(0);
  Tensor y = Tensor::empty(with_last(x.shape(), n), x.dtype(), x.device());
  kernels(x).linear_forward(y, x, w, bias, m, k, n);
  if (needs_grad({&x, &w, &bias})) {
    std::vector<Tensor> inputs{x, w};
    if (bias.defined()) inputs.push_back(bias);
    record("linear", y, inputs, [x, w, m, k, n](const Tensor& dy, GradOutputs& g) {
      Backend& kb = kernels(dy);
      // dx (M,K) = dy (M,N) @ W (N,K)
      if (g[0]) kb.matmul(*g[0], dy, w, 1, m, k, n, false, false, true, true, false);
      // dW (N,K) = dy^T (N,M) @ x (M,K)
      if (g[1]) kb.matmul(*g[1], dy, x, 1, n, k, m, true, false, true, true, false);
      // dbias (N) = sum over rows of dy
      if (g.size() > 2 && g[2]) kb.sum_rows(*g[2], dy, m, n);
    });
  }
  return y;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_float_same("matmul", {{"a", &a}, {"b", &b}});
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
  Tensor c = Tensor::empty(out_shape, a.dtype(), a.device());
  kernels(a).matmul(c, a, b, batch, m, n, k, false, false, true, b_batched, false);
  if (needs_grad({&a, &b})) {
    record("matmul", c, {a, b}, [a, b, batch, m, n, k, b_batched](const Tensor& dc, GradOutputs& g) {
      Backend& kb = kernels(dc);
      // dA_b (M,K) = dC_b (M,N) @ B_b^T
      if (g[0]) kb.matmul(*g[0], dc, b, batch, m, k, n, false, true, true, b_batched, false);
      if (g[1]) {
        if (b_batched) {  // dB_b (K,N) = A_b^T (K,M) @ dC_b (M,N)
          kb.matmul(*g[1], a, dc, batch, k, n, m, true, false, true, true, false);
        } else {  // a shared B sums over the batch: treat A as (batch*M, K)
          kb.matmul(*g[1], a, dc, 1, k, n, batch * m, true, false, true, true, false);
        }
      }
    });
  }
  return c;
}

}  // namespace normlab
