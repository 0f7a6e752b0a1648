// LayerNorm, RMSNorm and SeeDNorm over the last dimension, the fused residual-add forms, and the
// table of every norm a model holds (its learned tensors and its op).
// Saved for backward: the input, gamma and one rstd per row (LayerNorm also the mean). As the
// composite (norm_compute format) the backward is the composite's own, op by op in the format.
#include "normlab/composite_norm_kernels.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/rmsnorm_kernels.h"
#include "normlab/seednorm_kernel.h"
#include "op_common.h"

namespace normlab {
using namespace ops_detail;

namespace {

void check_norm(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  check_float_same(op, {{"input", &x}, {"gamma", &gamma}, {"beta", &beta}});
  NL_CHECK(x.dim() >= 1 && x.size(-1) >= 1, "{}: input {} has no last dimension to normalize", op,
           shape_str(x.shape()));
  const int64_t d = x.size(-1);
  NL_CHECK(gamma.dim() == 1 && gamma.size(0) == d, "{}: gamma {} does not match the normalized size {} of input {}",
           op, shape_str(gamma.shape()), d, shape_str(x.shape()));
  NL_CHECK(!beta.defined() || (beta.dim() == 1 && beta.size(0) == d),
           "{}: beta {} does not match the normalized size {} of input {}", op, shape_str(beta.shape()), d,
           shape_str(x.shape()));
  NL_CHECK(eps > 0, "{}: eps must be > 0, got {}", op, eps);
}

Tensor row_stat(const Tensor& x) { return float_output({rows_of(x)}, x); }

}  // namespace

namespace ops_detail {

BackwardFn layernorm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                 int64_t n, int64_t d) {
  return [x = x.detach(), gamma, mean, rstd, n, d](const Tensor& dy, GradOutputs& g) {
    run_kernel(backend_of(dy), LayerNormBackward{g[0], g[1], g[2], dy, x, gamma, mean, rstd, n, d});
  };
}

BackwardFn rmsnorm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& rstd, int64_t n, int64_t d) {
  return [x = x.detach(), gamma, rstd, n, d](const Tensor& dy, GradOutputs& g) {
    run_kernel(backend_of(dy), RmsNormBackward{g[0], g[1], dy, x, gamma, rstd, n, d});
  };
}

BackwardFn composite_norm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                     int64_t n, int64_t d) {
  const Precision p = x.impl().format;
  const char* module = current_module();
  return [x = x.detach(), gamma, mean, rstd, n, d, p, module](const Tensor& dy, GradOutputs& g) {
    const bool ln = mean.defined();
    CompositeBackwardCensus census;
    const bool watched = store_watch_active();
    run_kernel(backend_of(dy), CompositeNormBackward{g[0], g[1], ln ? g[2] : nullptr, dy, x, gamma, mean, rstd, n, d, p,
                                                     watched ? &census : nullptr});
    if (watched) watch_composite_backward(census, ln, p, dy, module);
  };
}

}  // namespace ops_detail

Tensor layernorm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in, double eps) {
  NL_CHECK(beta_in.defined(), "layernorm: beta is required (pass zeros for none)");
  check_norm("layernorm", x_in, gamma_in, beta_in, eps);
  const Tensor x = stored(x_in), gamma = stored(gamma_in), beta = stored(beta_in);
  const int64_t n = rows_of(x), d = x.size(-1);
  const Precision p = widest({&x, &gamma, &beta});
  Tensor y = new_output(x.shape(), p, x);
  Tensor mean = row_stat(x), rstd = row_stat(x);
  watch_norm_input(x, "layernorm");
  const bool composite = composite_norm(x);
  if (composite) {
    run_kernel(backend_of(x), CompositeNormForward{y, mean, rstd, x, gamma, beta, n, d, eps, x.impl().format});
  } else {
    run_kernel(backend_of(x), LayerNormForward{y, mean, rstd, x, gamma, beta, n, d, eps});
  }
  store(y, p, "layernorm", &rstd);
  if (needs_grad({&x, &gamma, &beta}))
    record("layernorm", y, {x, gamma, beta},
           composite ? composite_norm_backward_fn(x, gamma, mean, rstd, n, d)
                     : layernorm_backward_fn(x, gamma, mean, rstd, n, d));
  return y;
}

Tensor rmsnorm(const Tensor& x_in, const Tensor& gamma_in, double eps) {
  check_norm("rmsnorm", x_in, gamma_in, Tensor(), eps);
  const Tensor x = stored(x_in), gamma = stored(gamma_in);
  const int64_t n = rows_of(x), d = x.size(-1);
  const Precision p = widest({&x, &gamma});
  Tensor y = new_output(x.shape(), p, x);
  Tensor rstd = row_stat(x);
  watch_norm_input(x, "rmsnorm");
  const bool composite = composite_norm(x);
  Tensor no_mean;
  if (composite) {
    run_kernel(backend_of(x), CompositeNormForward{y, no_mean, rstd, x, gamma, Tensor(), n, d, eps, x.impl().format});
  } else {
    run_kernel(backend_of(x), RmsNormForward{y, rstd, x, gamma, n, d, eps});
  }
  store(y, p, "rmsnorm", &rstd);
  if (needs_grad({&x, &gamma}))
    record("rmsnorm", y, {x, gamma},
           composite ? composite_norm_backward_fn(x, gamma, no_mean, rstd, n, d)
                     : rmsnorm_backward_fn(x, gamma, rstd, n, d));
  return y;
}

std::pair<Tensor, Tensor> add_layernorm(const Tensor& a, double alpha, const Tensor& b, const Tensor& gamma,
                                        const Tensor& beta, double eps) {
  // In low precision the sum is stored before the norm reads it: the two ops, not the fused
  // kernel (which normalizes the unrounded sum).
  if (storage_precision() != Precision::fp32) {
    Tensor s = add_scaled(a, alpha, b);
    return {s, layernorm(s, gamma, beta, eps)};
  }
  NL_CHECK(a.shape() == b.shape(), "add_layernorm: residual {} and branch {} differ in shape", shape_str(a.shape()),
           shape_str(b.shape()));
  check_float_same("add_layernorm", {{"residual", &a}, {"branch", &b}});
  check_norm("add_layernorm", a, gamma, beta, eps);
  const int64_t n = rows_of(a), d = a.size(-1);
  Tensor s = Tensor::empty(a.shape(), a.dtype(), a.device());
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  Tensor mean = row_stat(a), rstd = row_stat(a);
  run_kernel(backend_of(a), AddLayerNormForward{s, y, mean, rstd, a, b, alpha, gamma, beta, n, d, eps});
  // float32 here (low precision takes the two ops above): tagged, and shown to a watch.
  store(s, Precision::fp32, "add");
  watch_norm_input(s, "layernorm");
  store(y, Precision::fp32, "layernorm");
  // Recorded as the two ops it fuses, so the backward is theirs.
  if (needs_grad({&a, &b})) record("add", s, {a, b}, add_scaled_backward(alpha));
  if (needs_grad({&s, &gamma, &beta}))
    record("layernorm", y, {s, gamma, beta}, layernorm_backward_fn(s, gamma, mean, rstd, n, d));
  return {s, y};
}

std::pair<Tensor, Tensor> add_rmsnorm(const Tensor& a, double alpha, const Tensor& b, const Tensor& gamma,
                                      double eps) {
  if (storage_precision() != Precision::fp32) {  // as add_layernorm
    Tensor s = add_scaled(a, alpha, b);
    return {s, rmsnorm(s, gamma, eps)};
  }
  NL_CHECK(a.shape() == b.shape(), "add_rmsnorm: residual {} and branch {} differ in shape", shape_str(a.shape()),
           shape_str(b.shape()));
  check_float_same("add_rmsnorm", {{"residual", &a}, {"branch", &b}});
  check_norm("add_rmsnorm", a, gamma, Tensor(), eps);
  const int64_t n = rows_of(a), d = a.size(-1);
  Tensor s = Tensor::empty(a.shape(), a.dtype(), a.device());
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  Tensor rstd = row_stat(a);
  run_kernel(backend_of(a), AddRmsNormForward{s, y, rstd, a, b, alpha, gamma, n, d, eps});
  store(s, Precision::fp32, "add");  // as add_layernorm
  watch_norm_input(s, "rmsnorm");
  store(y, Precision::fp32, "rmsnorm");
  if (needs_grad({&a, &b})) record("add", s, {a, b}, add_scaled_backward(alpha));
  if (needs_grad({&s, &gamma})) record("rmsnorm", y, {s, gamma}, rmsnorm_backward_fn(s, gamma, rstd, n, d));
  return {s, y};
}

namespace {

// SeeDNorm (Cai et al. 2025): (gamma + alpha * tanh(x . beta)) * x / RMS(x) over the last
// dimension; gamma, alpha, beta of its size. Its fused kernel in every precision (no composite).
Tensor seednorm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& alpha_in, const Tensor& beta_in, double eps) {
  check_norm("seednorm", x_in, gamma_in, beta_in, eps);
  check_norm("seednorm", x_in, alpha_in, Tensor(), eps);
  const Tensor x = stored(x_in), gamma = stored(gamma_in), alpha = stored(alpha_in), beta = stored(beta_in);
  const int64_t n = rows_of(x), d = x.size(-1);
  const Precision p = widest({&x, &gamma, &alpha, &beta});
  Tensor y = new_output(x.shape(), p, x);
  Tensor rstd = row_stat(x), t = row_stat(x);
  watch_norm_input(x, "seednorm");
  run_kernel(backend_of(x), SeedNormForward{y, rstd, t, x, gamma, alpha, beta, n, d, eps});
  store(y, p, "seednorm", &rstd);
  if (needs_grad({&x, &gamma, &alpha, &beta}))
    record("seednorm", y, {x, gamma, alpha, beta},
           [x = x.detach(), gamma, alpha, beta, rstd, t, n, d](const Tensor& dy, GradOutputs& g) {
             run_kernel(backend_of(dy),
                        SeedNormBackward{g[0], g[1], g[2], g[3], dy, x, gamma, alpha, beta, rstd, t, n, d});
           });
  return y;
}

using Init = NormParameter::Init;

// A norm as a model holds it: its learned tensors and its op over them.
struct NormRow {
  NormKind kind;
  std::vector<NormParameter> parameters;
  Tensor (*op)(const Tensor& x, const std::vector<Tensor>& p, double eps);
};

const std::vector<NormRow>& norm_table() {
  static const std::vector<NormRow> table = {
      {NormKind::none, {}, [](const Tensor& x, const std::vector<Tensor>&, double) { return x; }},
      {NormKind::layernorm,
       {{"gamma", true, Init::one}, {"beta", true, Init::zero}},
       [](const Tensor& x, const std::vector<Tensor>& p, double eps) { return layernorm(x, p[0], p[1], eps); }},
      {NormKind::rmsnorm,
       {{"gamma", true, Init::one}},
       [](const Tensor& x, const std::vector<Tensor>& p, double eps) { return rmsnorm(x, p[0], eps); }},
      // The DyT paper's module order: alpha, then the per-channel weight and bias.
      {NormKind::dyt,
       {{"alpha", false, Init::squash_alpha}, {"gamma", true, Init::one}, {"beta", true, Init::zero}},
       [](const Tensor& x, const std::vector<Tensor>& p, double) { return dyt(x, p[0], p[1], p[2]); }},
      {NormKind::derf,
       {{"alpha", false, Init::squash_alpha}, {"shift", false, Init::zero}, {"gamma", true, Init::one},
        {"beta", true, Init::zero}},
       [](const Tensor& x, const std::vector<Tensor>& p, double) { return derf(x, p[0], p[1], p[2], p[3]); }},
      // The paper's initialisation: gamma 1, alpha 1, beta 0: RMSNorm at the start, beta's gradient
      // alpha * (1 - t^2) * ... nonzero. beta is saved as `direction`: the vector x is projected on
      // (a `beta` would read as a bias).
      {NormKind::seednorm,
       {{"gamma", true, Init::one}, {"alpha", true, Init::one}, {"direction", true, Init::zero}},
       [](const Tensor& x, const std::vector<Tensor>& p, double eps) { return seednorm(x, p[0], p[1], p[2], eps); }},
  };
  return table;
}

const NormRow& norm_row(NormKind kind) {
  for (const NormRow& r : norm_table())
    if (r.kind == kind) return r;
  detail::check_failed(__FILE__, __LINE__, fmt::format("norm {} has no row in the norm table", to_string(kind)));
}

}  // namespace

const std::vector<NormParameter>& norm_parameters(NormKind kind) { return norm_row(kind).parameters; }

Tensor apply_norm(NormKind kind, const Tensor& x, const std::vector<Tensor>& params, double eps) {
  const NormRow& row = norm_row(kind);
  NL_CHECK(params.size() == row.parameters.size(), "{}: {} learned tensors given, the norm takes {}", to_string(kind),
           params.size(), row.parameters.size());
  return row.op(x, params, eps);
}

}  // namespace normlab
