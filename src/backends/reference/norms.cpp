// The norms' reference kernels (normlab/layernorm_kernels.h, rmsnorm_kernels.h,
// composite_norm_kernels.h): the loops of reference_kernels.h in the call's dtype, float32 or
// float64; the composite norm in float32, as precision.h defines it.
#include <vector>

#include "normlab/composite_norm_kernels.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/precision.h"
#include "normlab/reference_kernels.h"
#include "normlab/rmsnorm_kernels.h"
#include "reference_args.h"

namespace normlab {

namespace {

using reference::dispatch;
using reference::expect_all;
using reference::ptr;

void call_layernorm_forward(Backend&, const LayerNormForward& a) {
  const char* kn = "layernorm_forward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"y", &a.y}, {"mean", &a.mean}, {"rstd", &a.rstd}, {"x", &a.x}, {"gamma", &a.gamma},
                      {"beta", &a.beta}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_ref(a.y.data<T>(), a.mean.data<T>(), a.rstd.data<T>(), a.x.data<T>(),
                          a.gamma.data<T>(), a.beta.data<T>(), a.n, a.d, a.eps);
  });
}

void call_layernorm_backward(Backend&, const LayerNormBackward& a) {
  const char* kn = "layernorm_backward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"dx", a.dx}, {"dgamma", a.dgamma}, {"dbeta", a.dbeta}, {"dy", &a.dy}, {"x", &a.x},
                      {"gamma", &a.gamma}, {"mean", &a.mean}, {"rstd", &a.rstd}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    layernorm_backward_ref(ptr<T>(a.dx), ptr<T>(a.dgamma), ptr<T>(a.dbeta), a.dy.data<T>(), a.x.data<T>(),
                           a.gamma.data<T>(), a.mean.data<T>(), a.rstd.data<T>(), a.n, a.d);
  });
}

void call_add_layernorm_forward(Backend&, const AddLayerNormForward& a) {
  const char* kn = "add_layernorm_forward";
  DType dt = a.a.dtype();
  expect_all(kn, dt, {{"s", &a.s}, {"y", &a.y}, {"mean", &a.mean}, {"rstd", &a.rstd}, {"a", &a.a}, {"b", &a.b},
                      {"gamma", &a.gamma}, {"beta", &a.beta}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    add_layernorm_forward_ref(a.s.data<T>(), a.y.data<T>(), a.mean.data<T>(), a.rstd.data<T>(),
                              a.a.data<T>(), a.b.data<T>(), a.alpha, a.gamma.data<T>(), a.beta.data<T>(), a.n,
                              a.d, a.eps);
  });
}

void call_rmsnorm_forward(Backend&, const RmsNormForward& a) {
  const char* kn = "rmsnorm_forward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"y", &a.y}, {"rstd", &a.rstd}, {"x", &a.x}, {"gamma", &a.gamma}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_forward_ref(a.y.data<T>(), a.rstd.data<T>(), a.x.data<T>(), a.gamma.data<T>(), a.n, a.d, a.eps);
  });
}

void call_rmsnorm_backward(Backend&, const RmsNormBackward& a) {
  const char* kn = "rmsnorm_backward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"dx", a.dx}, {"dgamma", a.dgamma}, {"dy", &a.dy}, {"x", &a.x}, {"gamma", &a.gamma},
                      {"rstd", &a.rstd}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_backward_ref(ptr<T>(a.dx), ptr<T>(a.dgamma), a.dy.data<T>(), a.x.data<T>(), a.gamma.data<T>(),
                         a.rstd.data<T>(), a.n, a.d);
  });
}

void call_add_rmsnorm_forward(Backend&, const AddRmsNormForward& a) {
  const char* kn = "add_rmsnorm_forward";
  DType dt = a.a.dtype();
  expect_all(kn, dt, {{"s", &a.s}, {"y", &a.y}, {"rstd", &a.rstd}, {"a", &a.a}, {"b", &a.b}, {"gamma", &a.gamma}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    add_rmsnorm_forward_ref(a.s.data<T>(), a.y.data<T>(), a.rstd.data<T>(), a.a.data<T>(), a.b.data<T>(),
                            a.alpha, a.gamma.data<T>(), a.n, a.d, a.eps);
  });
}

void call_composite_norm_forward(Backend&, const CompositeNormForward& a) {
  const char* kn = "composite_norm_forward";
  const bool ln = a.beta.defined();
  expect_all(kn, DType::f32,
             {{"y", &a.y}, {"x", &a.x}, {"gamma", &a.gamma}, {"beta", &a.beta}, {"mean", &a.mean}, {"rstd", &a.rstd}});
  for (int64_t i = 0; i < a.n; ++i) {
    const CompositeRowStats st = composite_norm_row(ln, a.format, a.x.data<float>() + i * a.d, a.gamma.data<float>(),
                                                    ln ? a.beta.data<float>() : nullptr, a.y.data<float>() + i * a.d,
                                                    a.d, a.eps);
    if (ln) a.mean.data<float>()[i] = st.mean;
    a.rstd.data<float>()[i] = st.rstd;
  }
}

void call_composite_norm_backward(Backend&, const CompositeNormBackward& a) {
  const char* kn = "composite_norm_backward";
  const bool ln = a.mean.defined();
  expect_all(kn, DType::f32, {{"dx", a.dx}, {"dgamma", a.dgamma}, {"dbeta", a.dbeta}, {"dy", &a.dy}, {"x", &a.x},
                              {"gamma", &a.gamma}, {"mean", &a.mean}, {"rstd", &a.rstd}});
  const float *pdy = a.dy.data<float>(), *px = a.x.data<float>(), *pr = a.rstd.data<float>();
  const float* pm = ln ? a.mean.data<float>() : nullptr;
  std::vector<float> row(static_cast<size_t>(a.d));
  for (int64_t i = 0; i < a.n; ++i) {
    composite_norm_row_backward(ln, a.format, pdy + i * a.d, px + i * a.d, a.gamma.data<float>(), ln ? pm[i] : 0.0f,
                                pr[i], a.dx ? a.dx->data<float>() + i * a.d : row.data(), a.d, a.census);
  }
  for (int64_t j = 0; j < a.d; ++j) {  // column sums, rows in order
    double sg = 0, sb = 0;
    for (int64_t i = 0; i < a.n; ++i) {
      const float m = ln ? pm[i] : 0.0f;
      if (a.dgamma) sg += composite_gamma_term(ln, a.format, pdy[i * a.d + j], px[i * a.d + j], m, pr[i], a.census);
      sb += pdy[i * a.d + j];
    }
    if (a.dgamma) a.dgamma->data<float>()[j] = to_float(sg);
    if (a.dbeta) a.dbeta->data<float>()[j] = to_float(sb);
  }
}

}  // namespace

NORMLAB_KERNEL(LayerNormForward, "reference", call_layernorm_forward);
NORMLAB_KERNEL(LayerNormBackward, "reference", call_layernorm_backward);
NORMLAB_KERNEL(AddLayerNormForward, "reference", call_add_layernorm_forward);
NORMLAB_KERNEL(RmsNormForward, "reference", call_rmsnorm_forward);
NORMLAB_KERNEL(RmsNormBackward, "reference", call_rmsnorm_backward);
NORMLAB_KERNEL(AddRmsNormForward, "reference", call_add_rmsnorm_forward);
NORMLAB_KERNEL(CompositeNormForward, "reference", call_composite_norm_forward);
NORMLAB_KERNEL(CompositeNormBackward, "reference", call_composite_norm_backward);

}  // namespace normlab
