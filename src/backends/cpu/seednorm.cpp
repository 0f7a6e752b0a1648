// SeeDNorm (Cai et al. 2025) on the cpu: y = (gamma + alpha * tanh(x . beta)) * x * rstd, one pass
// over a row for its two sums (x . x, x . beta) and one to write it; the backward one pass per row
// for its two sums and one writing dx and the parameter gradients' partials. Row sums run in
// float lanes over chunks of kChunk values and the chunks meet in double: u = sum g*alpha*xhat
// cancels, and over a row of 49156 whole-row float lanes lost 1e-4 of it. The column sums (dgamma, dalpha, dbeta) add
// fixed blocks of rows in float and then the blocks in order, in double: the same bits for any
// thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "normlab/seednorm_kernel.h"
#include "parallel.h"
#include "simd.h"
#include "tensor_args.h"

namespace normlab::cpu {

namespace {

using namespace simd;

// Rows per block of the backward's column sums: few enough blocks that their partials stay a
// small fraction of dy.
constexpr int64_t kBlockRows = 64;
// Values per chunk of a row sum (a multiple of every vector width).
constexpr int64_t kChunk = 512;

// Two sums over a row, f(j, n, a, b) adding lanes j..j+n into the accumulators a and b: each chunk
// in float lanes (two accumulators per sum, alternate vectors, so that an add need not wait on the
// one before it), the chunks in double.
template <class F>
void row_sums2(int64_t d, double& sa, double& sb, F&& f) {
  sa = sb = 0.0;
  for (int64_t c = 0; c < d; c += kChunk) {
    VF a0 = zero(), b0 = zero(), a1 = zero(), b1 = zero();
    const int64_t end = std::min(d, c + kChunk);
    int64_t j = c;
    for (; j + 2 * kWidth <= end; j += 2 * kWidth) {
      f(j, kWidth, a0, b0);
      f(j + kWidth, kWidth, a1, b1);
    }
    row_for(end - j, [&](int64_t k, int64_t w) { f(j + k, w, a0, b0); });
    sa += reduce_add(a0 + a1);
    sb += reduce_add(b0 + b1);
  }
}

// A row's backward: dx written (when wanted) and its terms added to the block's column partials
// pg, pa, pb (d each; null when no column sum is wanted).
void seednorm_backward_row(float* dx, float* pg, float* pa, float* pb, const float* g, const float* x,
                           const float* gamma, const float* alpha, const float* beta, float r, float th, int64_t d) {
  const VF vr = set1(r), vt = set1(th);
  double cgx = 0.0, gax = 0.0;
  row_sums2(d, cgx, gax, [&](int64_t j, int64_t w, VF& a, VF& b) {
    const VF gx = load_n(g + j, w) * load_n(x + j, w) * vr;
    a = fmadd(fmadd(load_n(alpha + j, w), vt, load_n(gamma + j, w)), gx, a);
    b = fmadd(load_n(alpha + j, w), gx, b);
  });
  const VF mean_cgx = set1(static_cast<float>(cgx / double(d)));
  const VF u = set1(static_cast<float>((1.0 - double(th) * th) * gax));
  row_for(d, [&](int64_t j, int64_t w) {
    const VF xv = load_n(x + j, w), gv = load_n(g + j, w);
    const VF xhat = xv * vr;
    if (dx) {
      const VF c = fmadd(load_n(alpha + j, w), vt, load_n(gamma + j, w));
      store_n(dx + j, fmadd(vr, fnmadd(xhat, mean_cgx, c * gv), u * load_n(beta + j, w)), w);
    }
    if (!pg) return;
    const VF gx = gv * xhat;
    store_n(pg + j, load_n(pg + j, w) + gx, w);
    store_n(pa + j, fmadd(vt, gx, load_n(pa + j, w)), w);
    store_n(pb + j, fmadd(u, xv, load_n(pb + j, w)), w);
  });
}

void seednorm_forward(float* y, float* rstd, float* t, const float* x, const float* gamma, const float* alpha,
                      const float* beta, int64_t n, int64_t d, float eps) {
  parallel_for(n, n * d * 4, [&](int64_t i) {
    const float* xr = x + i * d;
    double ss = 0.0, s = 0.0;
    row_sums2(d, ss, s, [&](int64_t j, int64_t w, VF& a, VF& b) {
      const VF xv = load_n(xr + j, w);
      a = fmadd(xv, xv, a);
      b = fmadd(xv, load_n(beta + j, w), b);
    });
    const float r = 1.0f / std::sqrt(static_cast<float>(ss / double(d)) + eps);
    // tanh in a vector lane (libm's scalar tanhf cost as much as the rest of a 64-value row).
    const float th = first_lane(simd::tanh(set1(static_cast<float>(s))));
    rstd[i] = r;
    t[i] = th;
    const VF vr = set1(r), vt = set1(th);
    row_for(d, [&](int64_t j, int64_t w) {
      const VF c = fmadd(load_n(alpha + j, w), vt, load_n(gamma + j, w));
      store_n(y + i * d + j, c * load_n(xr + j, w) * vr, w);
    });
  });
}

void seednorm_backward(float* dx, float* dgamma, float* dalpha, float* dbeta, const float* dy, const float* x,
                       const float* gamma, const float* alpha, const float* beta, const float* rstd, const float* t,
                       int64_t n, int64_t d) {
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  const bool columns = dgamma || dalpha || dbeta;
  // Per block: the partial sums of dgamma, dalpha and dbeta, d each.
  std::vector<float> partial(columns ? static_cast<size_t>(blocks * 3 * d) : 0, 0.0f);
  parallel_for(blocks, n * d * 12, [&](int64_t b) {
    float* pg = columns ? partial.data() + b * 3 * d : nullptr;
    for (int64_t i = b * kBlockRows; i < std::min(n, (b + 1) * kBlockRows); ++i)
      seednorm_backward_row(dx ? dx + i * d : nullptr, pg, pg ? pg + d : nullptr, pg ? pg + 2 * d : nullptr,
                            dy + i * d, x + i * d, gamma, alpha, beta, rstd[i], t[i], d);
  });
  if (!columns) return;
  for (int64_t j = 0; j < d; ++j) {
    double sg = 0.0, sa = 0.0, sb = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
      const float* pg = partial.data() + b * 3 * d;
      sg += pg[j];
      sa += pg[d + j];
      sb += pg[2 * d + j];
    }
    if (dgamma) dgamma[j] = static_cast<float>(sg);
    if (dalpha) dalpha[j] = static_cast<float>(sa);
    if (dbeta) dbeta[j] = static_cast<float>(sb);
  }
}

void forward(Backend&, const SeedNormForward& a) {
  seednorm_forward(f32(a.y, "seednorm y"), f32(a.rstd, "seednorm rstd"), f32(a.t, "seednorm t"),
                   f32(a.x, "seednorm x"), f32(a.gamma, "seednorm gamma"), f32(a.alpha, "seednorm alpha"),
                   f32(a.beta, "seednorm beta"), a.n, a.d, static_cast<float>(a.eps));
}

void backward(Backend&, const SeedNormBackward& a) {
  seednorm_backward(f32_opt(a.dx, "seednorm dx"), f32_opt(a.dgamma, "seednorm dgamma"),
                    f32_opt(a.dalpha, "seednorm dalpha"), f32_opt(a.dbeta, "seednorm dbeta"), f32(a.dy, "seednorm dy"),
                    f32(a.x, "seednorm x"), f32(a.gamma, "seednorm gamma"), f32(a.alpha, "seednorm alpha"),
                    f32(a.beta, "seednorm beta"), f32(a.rstd, "seednorm rstd"), f32(a.t, "seednorm t"), a.n, a.d);
}

}  // namespace

NORMLAB_KERNEL(SeedNormForward, "cpu", forward);
NORMLAB_KERNEL(SeedNormBackward, "cpu", backward);

}  // namespace normlab::cpu
