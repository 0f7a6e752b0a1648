// The Backend's norm kernels on the cpu (normlab/layernorm_kernels.h, rmsnorm_kernels.h,
// composite_norm_kernels.h): float32 arrays to the kernels of norm_kernels.cpp (the variant measured
// fastest for the call's shape class) and elementwise_kernels.cpp.
#include "kernels.h"
#include "normlab/composite_norm_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/rmsnorm_kernels.h"
#include "tensor_args.h"

namespace normlab::cpu {

namespace {

void call_layernorm_forward(Backend&, const LayerNormForward& a) {
  layernorm_forward(f32(a.y, "layernorm y"), f32(a.mean, "layernorm mean"),
                    f32(a.rstd, "layernorm rstd"), f32(a.x, "layernorm x"),
                    f32(a.gamma, "layernorm gamma"), f32(a.beta, "layernorm beta"), a.n, a.d,
                    static_cast<float>(a.eps));
}

void call_layernorm_backward(Backend&, const LayerNormBackward& a) {
  layernorm_backward(f32_opt(a.dx, "layernorm dx"),
                     f32_opt(a.dgamma, "layernorm dgamma"),
                     f32_opt(a.dbeta, "layernorm dbeta"), f32(a.dy, "layernorm dy"),
                     f32(a.x, "layernorm x"), f32(a.gamma, "layernorm gamma"),
                     f32(a.mean, "layernorm mean"), f32(a.rstd, "layernorm rstd"), a.n, a.d);
}

void call_add_layernorm_forward(Backend&, const AddLayerNormForward& a) {
  add_layernorm_forward_fused(
      f32(a.s, "add_layernorm s"), f32(a.y, "add_layernorm y"),
      f32(a.mean, "add_layernorm mean"), f32(a.rstd, "add_layernorm rstd"),
      f32(a.a, "add_layernorm a"), f32(a.b, "add_layernorm b"),
      static_cast<float>(a.alpha), f32(a.gamma, "add_layernorm gamma"),
      f32(a.beta, "add_layernorm beta"), a.n, a.d, static_cast<float>(a.eps));
}

void call_rmsnorm_forward(Backend&, const RmsNormForward& a) {
  rmsnorm_forward_onepass(f32(a.y, "rmsnorm y"), f32(a.rstd, "rmsnorm rstd"),
                          f32(a.x, "rmsnorm x"), f32(a.gamma, "rmsnorm gamma"), a.n, a.d,
                          static_cast<float>(a.eps));
}

void call_rmsnorm_backward(Backend&, const RmsNormBackward& a) {
  rmsnorm_backward_onepass(f32_opt(a.dx, "rmsnorm dx"), f32_opt(a.dgamma, "rmsnorm dgamma"),
                           f32(a.dy, "rmsnorm dy"), f32(a.x, "rmsnorm x"),
                           f32(a.gamma, "rmsnorm gamma"), f32(a.rstd, "rmsnorm rstd"), a.n, a.d);
}

void call_add_rmsnorm_forward(Backend&, const AddRmsNormForward& a) {
  add_rmsnorm_forward_fused(f32(a.s, "add_rmsnorm s"), f32(a.y, "add_rmsnorm y"),
                            f32(a.rstd, "add_rmsnorm rstd"), f32(a.a, "add_rmsnorm a"),
                            f32(a.b, "add_rmsnorm b"), static_cast<float>(a.alpha),
                            f32(a.gamma, "add_rmsnorm gamma"), a.n, a.d,
                            static_cast<float>(a.eps));
}

void call_composite_norm_forward(Backend&, const CompositeNormForward& a) {
  const bool ln = a.beta.defined();
  composite_norm_forward(f32(a.y, "composite_norm y"), ln ? f32(a.mean, "composite_norm mean") : nullptr,
                         f32(a.rstd, "composite_norm rstd"), f32(a.x, "composite_norm x"),
                         f32(a.gamma, "composite_norm gamma"), ln ? f32(a.beta, "composite_norm beta") : nullptr,
                         a.n, a.d, a.eps, a.format);
}

void call_composite_norm_backward(Backend&, const CompositeNormBackward& a) {
  const bool ln = a.mean.defined();
  composite_norm_backward(f32_opt(a.dx, "composite_norm dx"), f32_opt(a.dgamma, "composite_norm dgamma"),
                          f32_opt(a.dbeta, "composite_norm dbeta"), f32(a.dy, "composite_norm dy"),
                          f32(a.x, "composite_norm x"), f32(a.gamma, "composite_norm gamma"),
                          ln ? f32(a.mean, "composite_norm mean") : nullptr,
                          f32(a.rstd, "composite_norm rstd"), a.n, a.d, a.format, a.census);
}

}  // namespace

NORMLAB_KERNEL(LayerNormForward, "cpu", call_layernorm_forward);
NORMLAB_KERNEL(LayerNormBackward, "cpu", call_layernorm_backward);
NORMLAB_KERNEL(AddLayerNormForward, "cpu", call_add_layernorm_forward);
NORMLAB_KERNEL(RmsNormForward, "cpu", call_rmsnorm_forward);
NORMLAB_KERNEL(RmsNormBackward, "cpu", call_rmsnorm_backward);
NORMLAB_KERNEL(AddRmsNormForward, "cpu", call_add_rmsnorm_forward);
NORMLAB_KERNEL(CompositeNormForward, "cpu", call_composite_norm_forward);
NORMLAB_KERNEL(CompositeNormBackward, "cpu", call_composite_norm_backward);

}  // namespace normlab::cpu
