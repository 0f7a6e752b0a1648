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
using reference::expect_all;
using reference::ptr;

void squash_forward(Backend&, const SquashForward& a) {
  const char* kn = "squash_forward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"y", &a.y}, {"x", &a.x}, {"alpha", &a.alpha}, {"shift", &a.shift}, {"gamma", &a.gamma},
                      {"beta", &a.beta}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    squash_forward_ref(a.y.data<T>(), a.x.data<T>(), a.alpha.data<T>(), cptr<T>(a.shift), a.gamma.data<T>(), cptr<T>(a.beta), a.n,
                       a.d, a.f);
  });
}

void squash_backward(Backend&, const SquashBackward& a) {
  const char* kn = "squash_backward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"dx", a.dx}, {"dalpha", a.dalpha}, {"dshift", a.dshift}, {"dgamma", a.dgamma},
                      {"dbeta", a.dbeta}, {"dy", &a.dy}, {"x", &a.x}, {"alpha", &a.alpha}, {"shift", &a.shift},
                      {"gamma", &a.gamma}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    squash_backward_ref(ptr<T>(a.dx), ptr<T>(a.dalpha), ptr<T>(a.dshift), ptr<T>(a.dgamma), ptr<T>(a.dbeta), a.dy.data<T>(),
                        a.x.data<T>(), a.alpha.data<T>(), cptr<T>(a.shift), a.gamma.data<T>(), a.n, a.d, a.f);
  });
}

void channel_scale_forward(Backend&, const ChannelScaleForward& a) {
  const char* kn = "channel_scale_forward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"y", &a.y}, {"x", &a.x}, {"lambda", &a.lambda}});
  dispatch(dt, kn, [&](auto tag) {
    using T = decltype(tag);
    channel_scale_forward_ref(a.y.data<T>(), a.x.data<T>(), a.lambda.data<T>(), a.n, a.d, a.c);
  });
}

void channel_scale_backward(Backend&, const ChannelScaleBackward& a) {
  const char* kn = "channel_scale_backward";
  DType dt = a.x.dtype();
  expect_all(kn, dt, {{"dx", a.dx}, {"dy", &a.dy}, {"x", &a.x}, {"lambda", &a.lambda}, {"dlambda", a.dlambda}});
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
