// SeeDNorm (Cai et al. 2025) on the cpu: y = (gamma + alpha * tanh(x . beta)) * x * rstd, one pass
// over a row for its two sums (x . x, x . beta) and one to write it; the backward one pass per row
// for its two sums and one writing dx and the parameter gradients' partials. The column sums
// (dgamma, dalpha, dbeta) add fixed blocks of rows and then the blocks in order, in double: the
// same bits for any thread count. Row sums in double as well.
#include <cmath>
#include <vector>

#include "kernels.h"
#include "parallel.h"

namespace normlab::cpu {

namespace {

// Rows per block of the backward's column sums.
constexpr int64_t kBlockRows = 64;

}  // namespace

void seednorm_forward(float* y, float* rstd, float* t, const float* x, const float* gamma, const float* alpha,
                      const float* beta, int64_t n, int64_t d, float eps) {
  parallel_for(n, n * d * 4, [&](int64_t i) {
    const float* xr = x + i * d;
    double ss = 0.0, s = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      ss += double(xr[j]) * xr[j];
      s += double(xr[j]) * beta[j];
    }
    const float r = 1.0f / std::sqrt(static_cast<float>(ss / double(d)) + eps);
    const float th = std::tanh(static_cast<float>(s));
    rstd[i] = r;
    t[i] = th;
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = (gamma[j] + alpha[j] * th) * xr[j] * r;
  });
}

void seednorm_backward(float* dx, float* dgamma, float* dalpha, float* dbeta, const float* dy, const float* x,
                       const float* gamma, const float* alpha, const float* beta, const float* rstd, const float* t,
                       int64_t n, int64_t d) {
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  const bool columns = dgamma || dalpha || dbeta;
  // Per block: the partial sums of dgamma, dalpha and dbeta, d each.
  std::vector<double> partial(columns ? static_cast<size_t>(blocks * 3 * d) : 0, 0.0);
  parallel_for(blocks, n * d * 12, [&](int64_t b) {
    double* pg = columns ? partial.data() + b * 3 * d : nullptr;
    for (int64_t i = b * kBlockRows; i < std::min(n, (b + 1) * kBlockRows); ++i) {
      const float* xr = x + i * d;
      const float* gr = dy + i * d;
      const double r = rstd[i], th = t[i];
      double mean_cgx = 0.0, galpha = 0.0;
      for (int64_t j = 0; j < d; ++j) {
        const double xhat = xr[j] * r, g = gr[j];
        mean_cgx += (gamma[j] + alpha[j] * th) * g * xhat;
        galpha += g * alpha[j] * xhat;
      }
      mean_cgx /= double(d);
      const double u = (1.0 - th * th) * galpha;
      for (int64_t j = 0; j < d; ++j) {
        const double xhat = xr[j] * r, g = gr[j];
        if (dx) dx[i * d + j] = static_cast<float>(r * ((gamma[j] + alpha[j] * th) * g - xhat * mean_cgx) + u * beta[j]);
        if (!pg) continue;
        pg[j] += g * xhat;
        pg[d + j] += th * g * xhat;
        pg[2 * d + j] += u * xr[j];
      }
    }
  });
  if (!columns) return;
  for (int64_t j = 0; j < d; ++j) {
    double sg = 0.0, sa = 0.0, sb = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
      const double* pg = partial.data() + b * 3 * d;
      sg += pg[j];
      sa += pg[d + j];
      sb += pg[2 * d + j];
    }
    if (dgamma) dgamma[j] = static_cast<float>(sg);
    if (dalpha) dalpha[j] = static_cast<float>(sa);
    if (dbeta) dbeta[j] = static_cast<float>(sb);
  }
}

}  // namespace normlab::cpu
