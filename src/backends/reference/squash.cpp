// The elementwise normalizers' (DyT, Derf) and the channel scale's reference kernels
// (normlab/squash_kernels.h, normlab/channel_scale_kernels.h): the loops of reference_kernels.h in
// the call's dtype, float32 or float64.
#include "normlab/channel_scale_kernels.h"
#include "normlab/reference_kernels.h"
#include "normlab/squash_kernels.h"
#include "reference_args.h"

namespace normlab {

namespace {

using reference::cptr;
using reference::dispatch;
using reference::expect;
using reference::ptr;

void squash_forward(Backend&, const SquashForward& a) {
  const char* kn = "squash_forward";
  DType dt = a.x.dtype();
  expect(kn, "y", a.y, dt);
  expect(kn, "x", a.x, dt);
  expect(kn, "alpha", a.alpha, dt);
  if (a.shift.defined()) expect(kn, "shift", a.shift, dt);
  expect(kn, "gamma", a.gamma, dt);
  if (a.beta.defined()) expect(kn, "beta", a.beta, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    squash_forward_ref(a.y.data<T>(), a.x.data<T>(), a.alpha.data<T>(), cptr<T>(a.shift), a.gamma.data<T>(), cptr<T>(a.beta), a.n,
                       a.d, a.f);
  });
}

void squash_backward(Backend&, const SquashBackward& a) {
  const char* kn = "squash_backward";
  DType dt = a.x.dtype();
  expect(kn, "dx", a.dx, dt);
  expect(kn, "dalpha", a.dalpha, dt);
  expect(kn, "dshift", a.dshift, dt);
  expect(kn, "dgamma", a.dgamma, dt);
  expect(kn, "dbeta", a.dbeta, dt);
  expect(kn, "dy", a.dy, dt);
  expect(kn, "x", a.x, dt);
  expect(kn, "alpha", a.alpha, dt);
  if (a.shift.defined()) expect(kn, "shift", a.shift, dt);
  expect(kn, "gamma", a.gamma, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    squash_backward_ref(ptr<T>(a.dx), ptr<T>(a.dalpha), ptr<T>(a.dshift), ptr<T>(a.dgamma), ptr<T>(a.dbeta), a.dy.data<T>(),
                        a.x.data<T>(), a.alpha.data<T>(), cptr<T>(a.shift), a.gamma.data<T>(), a.n, a.d, a.f);
  });
}

void channel_scale_forward(Backend&, const ChannelScaleForward& a) {
  const char* kn = "channel_scale_forward";
  DType dt = a.x.dtype();
  expect(kn, "y", a.y, dt);
  expect(kn, "x", a.x, dt);
  expect(kn, "lambda", a.lambda, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    channel_scale_forward_ref(a.y.data<T>(), a.x.data<T>(), a.lambda.data<T>(), a.n, a.d, a.c);
  });
}

void channel_scale_backward(Backend&, const ChannelScaleBackward& a) {
  const char* kn = "channel_scale_backward";
  DType dt = a.x.dtype();
  expect(kn, "dx", a.dx, dt);
  expect(kn, "dy", a.dy, dt);
  expect(kn, "x", a.x, dt);
  expect(kn, "lambda", a.lambda, dt);
  expect(kn, "dlambda", a.dlambda, dt);
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    channel_scale_backward_ref(ptr<T>(a.dx), ptr<T>(a.dlambda), a.dy.data<T>(), a.x.data<T>(), a.lambda.data<T>(), a.n, a.d, a.c);
  });
}

}  // namespace

NORMLAB_KERNEL(SquashForward, "reference", squash_forward);
NORMLAB_KERNEL(SquashBackward, "reference", squash_backward);
NORMLAB_KERNEL(ChannelScaleForward, "reference", channel_scale_forward);
NORMLAB_KERNEL(ChannelScaleBackward, "reference", channel_scale_backward);

}  // namespace normlab
