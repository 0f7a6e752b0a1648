// The elementwise normalizers DyT (tanh) and Derf (erf), y = gamma * f(alpha*x + shift) + beta, and
// the channel scale y = x * lambda (ReZero, SkipInit, LayerScale): one pass over the rows forward,
// one fused pass backward. The backward's reductions (dgamma, dbeta, dalpha, dshift, dlambda) sum
// fixed blocks of rows and then the blocks in order, in double: the same bits for any thread count.
#include <cmath>
#include <vector>

#include "kernels.h"
#include "normlab/channel_scale_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/squash_kernels.h"
#include "parallel.h"
#include "simd.h"
#include "tensor_args.h"

namespace normlab::cpu {

namespace {

using namespace simd;

// Rows per block of the backward's column sums: partial sums of kBlockRows*d values each, few
// enough blocks that their partials stay a small fraction of dy.
constexpr int64_t kBlockRows = 64;

template <Squash F>
inline VF squash(VF u) {
  return F == Squash::tanh ? simd::tanh(u) : simd::erf(u);
}
// f'(u) given f(u) = t: tanh' = 1 - t^2; erf' = 2/sqrt(pi) exp(-u^2).
template <Squash F>
inline VF squash_slope(VF u, VF t) {
  if (F == Squash::tanh) return fnmadd(t, t, set1(1.0f));
  return set1(1.1283791670955126f) * simd::exp(zero() - u * u);
}

template <Squash F>
void squash_forward_t(float* y, const float* x, float alpha, float shift, const float* gamma, const float* beta,
                      int64_t n, int64_t d) {
  const VF a = set1(alpha), s = set1(shift);
  parallel_for(n, n * d * 8, [&](int64_t i) {
    const float* xr = x + i * d;
    float* yr = y + i * d;
    row_for(d, [&](int64_t j, int64_t w) {
      const VF f = squash<F>(fmadd(a, load_n(xr + j, w), s));
      const VF b = beta ? load_n(beta + j, w) : zero();
      store_n(yr + j, fmadd(load_n(gamma + j, w), f, b), w);
    });
  });
}

// Block k of rows: dx written; its column sums of dy*f(u) and dy into pg/pb (d each), and
// sum x*h, sum h (h = dy*gamma*f'(u)) into pa[k], ps[k].
template <Squash F>
void squash_backward_t(float* dx, float* dalpha, float* dshift, float* dgamma, float* dbeta, const float* dy,
                       const float* x, float alpha, float shift, const float* gamma, int64_t n, int64_t d) {
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  const bool cols = dgamma || dbeta;
  std::vector<float> pg(cols ? static_cast<size_t>(blocks * d) : 0), pb(cols ? static_cast<size_t>(blocks * d) : 0);
  std::vector<double> pa(static_cast<size_t>(blocks)), ps(static_cast<size_t>(blocks));
  const VF a = set1(alpha), s = set1(shift);
  parallel_for(blocks, n * d * 10, [&](int64_t k) {
    float* g_col = cols ? pg.data() + k * d : nullptr;
    float* b_col = cols ? pb.data() + k * d : nullptr;
    if (cols)
      for (int64_t j = 0; j < d; ++j) g_col[j] = b_col[j] = 0.0f;
    double sa = 0.0, ss = 0.0;
    const int64_t r1 = std::min(n, (k + 1) * kBlockRows);
    for (int64_t i = k * kBlockRows; i < r1; ++i) {
      const float* xr = x + i * d;
      const float* dyr = dy + i * d;
      VF va = zero(), vs = zero();
      row_for(d, [&](int64_t j, int64_t w) {
        const VF xv = load_n(xr + j, w), g = load_n(dyr + j, w);
        const VF u = fmadd(a, xv, s);
        const VF t = squash<F>(u);
        const VF h = keep_first(g * load_n(gamma + j, w) * squash_slope<F>(u, t), w);
        if (dx) store_n(dx + i * d + j, a * h, w);
        va = fmadd(xv, h, va);
        vs = vs + h;
        if (cols) {
          store_n(g_col + j, fmadd(g, t, load_n(g_col + j, w)), w);
          store_n(b_col + j, load_n(b_col + j, w) + g, w);
        }
      });
      sa += reduce_add(va);
      ss += reduce_add(vs);
    }
    pa[static_cast<size_t>(k)] = sa;
    ps[static_cast<size_t>(k)] = ss;
  });
  double ta = 0.0, ts = 0.0;
  for (int64_t k = 0; k < blocks; ++k) {
    ta += pa[static_cast<size_t>(k)];
    ts += ps[static_cast<size_t>(k)];
  }
  if (dalpha) *dalpha = static_cast<float>(ta);
  if (dshift) *dshift = static_cast<float>(ts);
  if (!cols) return;
  for (int64_t j = 0; j < d; ++j) {
    double tg = 0.0, tb = 0.0;
    for (int64_t k = 0; k < blocks; ++k) {
      tg += pg[static_cast<size_t>(k * d + j)];
      tb += pb[static_cast<size_t>(k * d + j)];
    }
    if (dgamma) dgamma[j] = static_cast<float>(tg);
    if (dbeta) dbeta[j] = static_cast<float>(tb);
  }
}

}  // namespace

void squash_forward(float* y, const float* x, float alpha, float shift, const float* gamma, const float* beta,
                    int64_t n, int64_t d, Squash f) {
  if (f == Squash::tanh)
    squash_forward_t<Squash::tanh>(y, x, alpha, shift, gamma, beta, n, d);
  else
    squash_forward_t<Squash::erf>(y, x, alpha, shift, gamma, beta, n, d);
}

void squash_backward(float* dx, float* dalpha, float* dshift, float* dgamma, float* dbeta, const float* dy,
                     const float* x, float alpha, float shift, const float* gamma, int64_t n, int64_t d, Squash f) {
  if (f == Squash::tanh)
    squash_backward_t<Squash::tanh>(dx, dalpha, dshift, dgamma, dbeta, dy, x, alpha, shift, gamma, n, d);
  else
    squash_backward_t<Squash::erf>(dx, dalpha, dshift, dgamma, dbeta, dy, x, alpha, shift, gamma, n, d);
}

void channel_scale_forward(float* y, const float* x, const float* lambda, int64_t n, int64_t d, int64_t c) {
  parallel_for(n, n * d, [&](int64_t i) {
    const float* xr = x + i * d;
    float* yr = y + i * d;
    row_for(d, [&](int64_t j, int64_t w) {
      store_n(yr + j, load_n(xr + j, w) * (c == 1 ? set1(lambda[0]) : load_n(lambda + j, w)), w);
    });
  });
}

void channel_scale_backward(float* dx, float* dlambda, const float* dy, const float* x, const float* lambda,
                            int64_t n, int64_t d, int64_t c) {
  if (dx) {
    parallel_for(n, n * d, [&](int64_t i) {
      row_for(d, [&](int64_t j, int64_t w) {
        const VF l = c == 1 ? set1(lambda[0]) : load_n(lambda + j, w);
        store_n(dx + i * d + j, load_n(dy + i * d + j, w) * l, w);
      });
    });
  }
  if (!dlambda) return;
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  // Per block: d column sums (c = d), or one total in double (c = 1).
  std::vector<float> pcol(c == 1 ? 0 : static_cast<size_t>(blocks * d));
  std::vector<double> ptot(static_cast<size_t>(blocks));
  parallel_for(blocks, n * d * 2, [&](int64_t k) {
    float* col = c == 1 ? nullptr : pcol.data() + k * d;
    if (col)
      for (int64_t j = 0; j < d; ++j) col[j] = 0.0f;
    double tot = 0.0;
    const int64_t r1 = std::min(n, (k + 1) * kBlockRows);
    for (int64_t i = k * kBlockRows; i < r1; ++i) {
      VF acc = zero();
      row_for(d, [&](int64_t j, int64_t w) {
        const VF p = load_n(dy + i * d + j, w) * load_n(x + i * d + j, w);
        if (col)
          store_n(col + j, load_n(col + j, w) + p, w);
        else
          acc = acc + keep_first(p, w);
      });
      if (!col) tot += reduce_add(acc);
    }
    ptot[static_cast<size_t>(k)] = tot;
  });
  if (c == 1) {
    double t = 0.0;
    for (int64_t k = 0; k < blocks; ++k) t += ptot[static_cast<size_t>(k)];
    dlambda[0] = static_cast<float>(t);
    return;
  }
  for (int64_t j = 0; j < d; ++j) {
    double t = 0.0;
    for (int64_t k = 0; k < blocks; ++k) t += pcol[static_cast<size_t>(k * d + j)];
    dlambda[j] = static_cast<float>(t);
  }
}

// ---- the Backend's kernels (squash_kernels.h, channel_scale_kernels.h) on the cpu: float32 arrays

namespace {

void call_squash_forward(Backend&, const SquashForward& a) {
  squash_forward(f32(a.y, "squash y"), f32(a.x, "squash x"), *f32(a.alpha, "squash alpha"),
                 a.shift.defined() ? *f32(a.shift, "squash shift") : 0.0f, f32(a.gamma, "squash gamma"),
                 a.beta.defined() ? f32(a.beta, "squash beta") : nullptr, a.n, a.d, a.f);
}

void call_squash_backward(Backend&, const SquashBackward& a) {
  squash_backward(f32_opt(a.dx, "squash dx"), f32_opt(a.dalpha, "squash dalpha"),
                  f32_opt(a.dshift, "squash dshift"), f32_opt(a.dgamma, "squash dgamma"),
                  f32_opt(a.dbeta, "squash dbeta"), f32(a.dy, "squash dy"), f32(a.x, "squash x"),
                  *f32(a.alpha, "squash alpha"), a.shift.defined() ? *f32(a.shift, "squash shift") : 0.0f,
                  f32(a.gamma, "squash gamma"), a.n, a.d, a.f);
}

void call_channel_scale_forward(Backend&, const ChannelScaleForward& a) {
  channel_scale_forward(f32(a.y, "channel_scale y"), f32(a.x, "channel_scale x"),
                        f32(a.lambda, "channel_scale lambda"), a.n, a.d, a.c);
}

void call_channel_scale_backward(Backend&, const ChannelScaleBackward& a) {
  channel_scale_backward(f32_opt(a.dx, "channel_scale dx"), f32_opt(a.dlambda, "channel_scale dlambda"),
                         f32(a.dy, "channel_scale dy"), f32(a.x, "channel_scale x"),
                         f32(a.lambda, "channel_scale lambda"), a.n, a.d, a.c);
}

}  // namespace

NORMLAB_KERNEL(SquashForward, "cpu", call_squash_forward);
NORMLAB_KERNEL(SquashBackward, "cpu", call_squash_backward);
NORMLAB_KERNEL(ChannelScaleForward, "cpu", call_channel_scale_forward);
NORMLAB_KERNEL(ChannelScaleBackward, "cpu", call_channel_scale_backward);

}  // namespace normlab::cpu
