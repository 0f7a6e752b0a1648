// SeeDNorm's reference kernels (normlab/seednorm_kernel.h): plain loops in float32 or float64,
// every sum in double. N rows, D size; c = gamma + alpha * t, t = tanh(x . beta) per row.
#include <cmath>
#include <vector>

#include "normlab/seednorm_kernel.h"
#include "reference_args.h"

namespace normlab {

namespace {

using reference::dispatch;
using reference::expect_all;
using reference::ptr;

//   y_j = c_j * x_j * rstd,   rstd = 1/sqrt(mean(x^2) + eps)
template <class T>
void seednorm_forward_ref(T* y, T* rstd, T* t, const T* x, const T* gamma, const T* alpha, const T* beta, int64_t n,
                          int64_t d, double eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * d;
    double ss = 0.0, s = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      ss += double(xr[j]) * double(xr[j]);
      s += double(xr[j]) * double(beta[j]);
    }
    const double r = 1.0 / std::sqrt(ss / double(d) + eps), th = std::tanh(s);
    rstd[i] = static_cast<T>(r);
    t[i] = static_cast<T>(th);
    for (int64_t j = 0; j < d; ++j)
      y[i * d + j] = static_cast<T>((double(gamma[j]) + double(alpha[j]) * th) * double(xr[j]) * r);
  }
}

// With g = dy, xhat = x * rstd, c = gamma + alpha * t and u = (1 - t^2) * sum_j g_j alpha_j xhat_j (the
// gradient reaching s = x . beta):
//   dx_k = rstd (c_k g_k - xhat_k mean_j(c_j g_j xhat_j)) + u beta_k   (RMSNorm's with gain c, and the path
//          through t);
//   dgamma_j = sum_rows g_j xhat_j;  dalpha_j = sum_rows t g_j xhat_j;  dbeta_j = sum_rows u x_j.
// Every gradient nullable and WRITTEN.
template <class T>
void seednorm_backward_ref(T* dx, T* dgamma, T* dalpha, T* dbeta, const T* dy, const T* x, const T* gamma,
                           const T* alpha, const T* beta, const T* rstd, const T* t, int64_t n, int64_t d) {
  std::vector<double> sg(static_cast<size_t>(d), 0.0), sa(sg), sb(sg);
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * d;
    const T* gr = dy + i * d;
    const double r = rstd[i], th = t[i];
    double mean_cgx = 0.0, galpha = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double xhat = double(xr[j]) * r, c = double(gamma[j]) + double(alpha[j]) * th;
      mean_cgx += c * double(gr[j]) * xhat;
      galpha += double(gr[j]) * double(alpha[j]) * xhat;
    }
    mean_cgx /= double(d);
    const double u = (1.0 - th * th) * galpha;
    for (int64_t j = 0; j < d; ++j) {
      const double xhat = double(xr[j]) * r, c = double(gamma[j]) + double(alpha[j]) * th;
      if (dx) dx[i * d + j] = static_cast<T>(r * (c * double(gr[j]) - xhat * mean_cgx) + u * double(beta[j]));
      const size_t k = static_cast<size_t>(j);
      sg[k] += double(gr[j]) * xhat;
      sa[k] += th * double(gr[j]) * xhat;
      sb[k] += u * double(xr[j]);
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    const size_t k = static_cast<size_t>(j);
    if (dgamma) dgamma[j] = static_cast<T>(sg[k]);
    if (dalpha) dalpha[j] = static_cast<T>(sa[k]);
    if (dbeta) dbeta[j] = static_cast<T>(sb[k]);
  }
}

void forward(Backend&, const SeedNormForward& a) {
  const DType dt = a.x.dtype();
  expect_all(a.kName, dt, {{"y", &a.y}, {"rstd", &a.rstd}, {"t", &a.t}, {"gamma", &a.gamma}, {"alpha", &a.alpha},
                           {"beta", &a.beta}});
  dispatch(dt, a.kName, [&](auto tag) {
    using T = decltype(tag);
    seednorm_forward_ref(a.y.data<T>(), a.rstd.data<T>(), a.t.data<T>(), a.x.data<T>(), a.gamma.data<T>(),
                         a.alpha.data<T>(), a.beta.data<T>(), a.n, a.d, a.eps);
  });
}

void backward(Backend&, const SeedNormBackward& a) {
  const DType dt = a.x.dtype();
  expect_all(a.kName, dt, {{"dy", &a.dy}, {"gamma", &a.gamma}, {"alpha", &a.alpha}, {"beta", &a.beta}, {"rstd", &a.rstd},
                           {"t", &a.t}, {"dx", a.dx}, {"dgamma", a.dgamma}, {"dalpha", a.dalpha}, {"dbeta", a.dbeta}});
  dispatch(dt, a.kName, [&](auto tag) {
    using T = decltype(tag);
    seednorm_backward_ref(ptr<T>(a.dx), ptr<T>(a.dgamma), ptr<T>(a.dalpha), ptr<T>(a.dbeta), a.dy.data<T>(),
                          a.x.data<T>(), a.gamma.data<T>(), a.alpha.data<T>(), a.beta.data<T>(), a.rstd.data<T>(),
                          a.t.data<T>(), a.n, a.d);
  });
}

}  // namespace

NORMLAB_KERNEL(SeedNormForward, "reference", forward);
NORMLAB_KERNEL(SeedNormBackward, "reference", backward);

}  // namespace normlab
