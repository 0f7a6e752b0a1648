// LayerNorm on oneDNN 2.6's layer_normalization primitive (forward_training and backward, with
// use_scale | use_shift), converting at the boundary between oneDNN's saved statistic, the
// biased variance, and normlab's, rstd = 1/sqrt(var + eps):
//   forward   oneDNN writes var into the rstd buffer; rstd = 1/sqrt(var + eps) in place.
//   backward  var' = 1/rstd^2 is handed to oneDNN with eps = 0, so the primitive's own
//             1/sqrt(var' + 0) gives back rstd (to rounding) without normlab having to know
//             the eps of the forward.
#include <fmt/format.h>

#include <cmath>

#include "normlab/cpu_kernels.h"
#include "onednn.h"
#include "normlab/error.h"
#include "normlab/tensor.h"

namespace normlab::cpu {

namespace {

constexpr int64_t kKindLayerNormForward = 2;
constexpr int64_t kKindLayerNormBackward = 3;

using dnnl::memory;
using dnnl::normalization_flags;
using dnnl::prop_kind;

memory::desc data_md(int64_t n, int64_t d) {
  return memory::desc({n, d}, memory::data_type::f32, memory::format_tag::ab);
}
memory::desc vec_md(int64_t len) {
  return memory::desc({len}, memory::data_type::f32, memory::format_tag::a);
}

const normalization_flags kScaleShift =
    normalization_flags::use_scale | normalization_flags::use_shift;

dnnl::layer_normalization_forward::primitive_desc forward_pd(int64_t n, int64_t d, float eps,
                                                             const dnnl::engine& eng) {
  dnnl::layer_normalization_forward::desc desc(prop_kind::forward_training, data_md(n, d), eps,
                                               kScaleShift);
  return dnnl::layer_normalization_forward::primitive_desc(desc, eng);
}

}  // namespace

// N rows, D normalized size.
void layernorm_forward_onednn(float* y, float* mean, float* rstd, const float* x,
                              const float* gamma, const float* beta, int64_t n, int64_t d,
                              float eps) {
  if (n <= 0 || d <= 0) return;
  PrimitiveKey key(kKindLayerNormForward);
  key.add(n).add(d).add_float(eps);
  auto describe = [&] {
    return fmt::format("layer_normalization forward {}x{} eps {}", n, d, eps);
  };
  auto make = [&](const dnnl::engine& eng) {
    auto pd = forward_pd(n, d, eps, eng);
    PrimitiveSpec spec;
    spec.primitive = dnnl::layer_normalization_forward(pd);
    spec.args = {{DNNL_ARG_SRC, data_md(n, d)}, {DNNL_ARG_SCALE, vec_md(d)},
                 {DNNL_ARG_SHIFT, vec_md(d)},   {DNNL_ARG_DST, data_md(n, d)},
                 {DNNL_ARG_MEAN, vec_md(n)},    {DNNL_ARG_VARIANCE, vec_md(n)}};
    spec.impl = pd.impl_info_str();
    return spec;
  };
  run_primitive(key, make, describe, {x, gamma, beta, y, mean, rstd});
  // rstd holds the variance now.
  for (int64_t i = 0; i < n; ++i) rstd[i] = 1.0f / std::sqrt(rstd[i] + eps);
}

// N rows, D normalized size. dx, dgamma, dbeta nullable (scratch stands in for oneDNN).
void layernorm_backward_onednn(float* dx, float* dgamma, float* dbeta, const float* dy,
                               const float* x, const float* gamma, const float* mean,
                               const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (n <= 0) {
    for (int64_t j = 0; j < d; ++j) {
      if (dgamma) dgamma[j] = 0.0f;
      if (dbeta) dbeta[j] = 0.0f;
    }
    return;
  }
  if (!dx && !dgamma && !dbeta) return;
  PrimitiveKey key(kKindLayerNormBackward);
  key.add(n).add(d);
  auto describe = [&] { return fmt::format("layer_normalization backward {}x{}", n, d); };
  auto make = [&](const dnnl::engine& eng) {
    // oneDNN 2.6 implements backward_data only without a scale, so the parameter gradients
    // are always computed (into scratch when not wanted).
    auto hint = forward_pd(n, d, 0.0f, eng);
    dnnl::layer_normalization_backward::desc desc(prop_kind::backward, data_md(n, d), data_md(n, d),
                                                  0.0f, kScaleShift);
    dnnl::layer_normalization_backward::primitive_desc pd(desc, eng, hint);
    PrimitiveSpec spec;
    spec.primitive = dnnl::layer_normalization_backward(pd);
    // With use_shift the primitive insists on a SHIFT argument, though beta takes no part in
    // any gradient; gamma's pointer stands in for it (it is not read).
    spec.args = {{DNNL_ARG_SRC, data_md(n, d)},      {DNNL_ARG_MEAN, vec_md(n)},
                 {DNNL_ARG_VARIANCE, vec_md(n)},     {DNNL_ARG_DIFF_DST, data_md(n, d)},
                 {DNNL_ARG_SCALE, vec_md(d)},        {DNNL_ARG_SHIFT, vec_md(d)},
                 {DNNL_ARG_DIFF_SRC, data_md(n, d)}, {DNNL_ARG_DIFF_SCALE, vec_md(d)},
                 {DNNL_ARG_DIFF_SHIFT, vec_md(d)}};
    spec.impl = pd.impl_info_str();
    return spec;
  };

  // Workspace from the arena: the same sizes every step, so no allocation in the steady state.
  Tensor var = Tensor::empty({n});
  float* varp = var.data<float>();
  for (int64_t i = 0; i < n; ++i) varp[i] = 1.0f / (rstd[i] * rstd[i]);
  Tensor dx_scratch, param_scratch;
  if (!dx) {
    dx_scratch = Tensor::empty({n, d});
    dx = dx_scratch.data<float>();
  }
  if (!dgamma || !dbeta) {
    param_scratch = Tensor::empty({2, d});  // two rows: oneDNN's outputs must not alias
    if (!dgamma) dgamma = param_scratch.data<float>();
    if (!dbeta) dbeta = param_scratch.data<float>() + d;
  }
  run_primitive(key, make, describe, {x, mean, varp, dy, gamma, gamma, dx, dgamma, dbeta});
}

}  // namespace normlab::cpu
