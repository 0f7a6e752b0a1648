// The elementwise normalizers (DyT, Derf), the channel scale (ReZero, SkipInit, LayerScale) and the
// constant shift (Gemma's gain 1 + w). Saved for backward: the input and the parameters.
#include "normlab/channel_scale_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/squash_kernels.h"
#include "op_common.h"

namespace normlab {
using namespace ops_detail;

namespace {

void check_scalar(const char* op, const char* what, const Tensor& t) {
  NL_CHECK(t.numel() == 1, "{}: {} must hold one value, got {}", op, what, shape_str(t.shape()));
}

void check_channels(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  NL_CHECK(t.dim() == 1 && t.size(0) == x.size(-1), "{}: {} {} does not match the last dimension {} of input {}", op,
           what, shape_str(t.shape()), x.size(-1), shape_str(x.shape()));
}

// y = gamma * f(alpha*x + shift) + beta; shift and beta may be undefined (DyT has no shift).
Tensor squash_op(const char* op, Squash f, const Tensor& x_in, const Tensor& alpha_in, const Tensor& shift_in,
                 const Tensor& gamma_in, const Tensor& beta_in) {
  check_float_same(op, {{"input", &x_in}, {"alpha", &alpha_in}, {"shift", &shift_in}, {"gamma", &gamma_in},
                        {"beta", &beta_in}});
  NL_CHECK(x_in.dim() >= 1 && x_in.size(-1) >= 1, "{}: input {} has no last dimension", op, shape_str(x_in.shape()));
  check_scalar(op, "alpha", alpha_in);
  if (shift_in.defined()) check_scalar(op, "shift", shift_in);
  check_channels(op, "gamma", gamma_in, x_in);
  if (beta_in.defined()) check_channels(op, "beta", beta_in, x_in);
  const Tensor x = stored(x_in), alpha = stored(alpha_in), shift = stored(shift_in), gamma = stored(gamma_in),
               beta = stored(beta_in);
  const int64_t n = rows_of(x), d = x.size(-1);
  const Precision p = widest({&x, &alpha, &gamma});
  Tensor y = new_output(x.shape(), p, x);
  watch_norm_input(x, op);
  run_kernel(backend_of(x), SquashForward{y, x, alpha, shift, gamma, beta, n, d, f});
  store(y, p, op);
  if (!needs_grad({&x, &alpha, &shift, &gamma, &beta})) return y;
  // The inputs that exist, in order, and where each gradient goes.
  std::vector<Tensor> inputs{x, alpha};
  const int at_shift = shift.defined() ? static_cast<int>(inputs.size()) : -1;
  if (shift.defined()) inputs.push_back(shift);
  const int at_gamma = static_cast<int>(inputs.size());
  inputs.push_back(gamma);
  const int at_beta = beta.defined() ? static_cast<int>(inputs.size()) : -1;
  if (beta.defined()) inputs.push_back(beta);
  record(op, y, inputs,
         [x = x.detach(), alpha, shift, gamma, n, d, f, at_shift, at_gamma, at_beta](const Tensor& dy, GradOutputs& g) {
           Tensor* none = nullptr;
           Tensor* shift_grad = at_shift >= 0 ? g[static_cast<size_t>(at_shift)] : none;
           Tensor* beta_grad = at_beta >= 0 ? g[static_cast<size_t>(at_beta)] : none;
           run_kernel(backend_of(dy), SquashBackward{g[0], g[1], shift_grad, g[static_cast<size_t>(at_gamma)],
                                                     beta_grad, dy, x, alpha, shift, gamma, n, d, f});
         });
  return y;
}

}  // namespace

Tensor dyt(const Tensor& x, const Tensor& alpha, const Tensor& gamma, const Tensor& beta) {
  return squash_op("dyt", Squash::tanh, x, alpha, Tensor(), gamma, beta);
}

Tensor derf(const Tensor& x, const Tensor& alpha, const Tensor& shift, const Tensor& gamma, const Tensor& beta) {
  NL_CHECK(shift.defined(), "derf: shift is required (pass a zero for none)");
  return squash_op("derf", Squash::erf, x, alpha, shift, gamma, beta);
}

Tensor channel_scale(const Tensor& x_in, const Tensor& lambda_in) {
  const char* op = "channel_scale";
  check_float_same(op, {{"input", &x_in}, {"lambda", &lambda_in}});
  NL_CHECK(x_in.dim() >= 1 && x_in.size(-1) >= 1, "{}: input {} has no last dimension", op, shape_str(x_in.shape()));
  NL_CHECK(lambda_in.dim() == 1 && (lambda_in.size(0) == x_in.size(-1) || lambda_in.size(0) == 1),
           "{}: lambda {} must have the last dimension {} of input {} or one value", op, shape_str(lambda_in.shape()),
           x_in.size(-1), shape_str(x_in.shape()));
  const Tensor x = stored(x_in), lambda = stored(lambda_in);
  const int64_t n = rows_of(x), d = x.size(-1), c = lambda.numel();
  const Precision p = widest({&x, &lambda});
  Tensor y = new_output(x.shape(), p, x);
  run_kernel(backend_of(x), ChannelScaleForward{y, x, lambda, n, d, c});
  store(y, p, op);
  if (needs_grad({&x, &lambda})) {
    record(op, y, {x, lambda}, [x = x.detach(), lambda, n, d, c](const Tensor& dy, GradOutputs& g) {
      run_kernel(backend_of(dy), ChannelScaleBackward{g[0], g[1], dy, x, lambda, n, d, c});
    });
  }
  return y;
}

Tensor add_constant(const Tensor& x_in, double c) {
  check_float_same("add_constant", {{"x", &x_in}});
  const Tensor x = stored(x_in);
  const Precision p = widest({&x});
  Tensor y = new_output(x.shape(), p, x);
  Backend& kb = backend_of(x);
  run_kernel(kb, Fill{y, c});
  run_kernel(kb, Add{y, x, y, 1.0, 1.0});
  store(y, p, "add_constant");
  if (needs_grad({&x})) record("add_constant", y, {x}, [](const Tensor&, GradOutputs& g) { g.pass_through(0); });
  return y;
}

}  // namespace normlab
