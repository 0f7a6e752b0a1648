// Elementwise kernels of the cpu backend over n contiguous floats: fill, copy, add, accumulate,
// scale, mul, GELU (the erf form, not the tanh one; Phi to 1.5e-7) with its derivative,
// sum of squares (in double) and the Adam step (one pass over all parameters). Vectorized with
// simd.h, threaded in chunks above a size threshold; each element's result does not depend on
// the chunking.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels.h"
#include "parallel.h"
#include "simd.h"

namespace normlab::cpu {

namespace {

using namespace simd;

// f(i, lanes) over [0, n) in vector steps; threads split at cache-line multiples. `cost` is the
// work per element relative to a copy (a transcendental costs more, so threads pay off sooner).
template <class F>
void map_elements(int64_t n, int64_t cost, F&& f) {
  parallel_chunks(
      n, n * cost,
      [&](int64_t lo, int64_t hi) {
        row_for(hi - lo, [&](int64_t j, int64_t w) { f(lo + j, w); });
      },
      16);
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

}  // namespace

// for i: out[i] = value
void fill(float* out, float value, int64_t n) {
  const VF v = set1(value);
  map_elements(n, 1, [&](int64_t i, int64_t w) { store_n(out + i, v, w); });
}

void copy(float* out, const float* x, int64_t n) {
  if (out == x) return;
  parallel_chunks(
      n, n,
      [&](int64_t lo, int64_t hi) {
        std::memcpy(out + lo, x + lo, static_cast<size_t>(hi - lo) * sizeof(float));
      },
      16);
}

// for i: out[i] = alpha*a[i] + beta*b[i]        (out may be a or b)
void add(float* out, const float* a, const float* b, float alpha, float beta, int64_t n) {
  const VF va = set1(alpha), vb = set1(beta);
  map_elements(n, 1, [&](int64_t i, int64_t w) {
    store_n(out + i, fmadd(va, load_n(a + i, w), vb * load_n(b + i, w)), w);
  });
}

// for i: dst[i] += src[i]
void accumulate(float* dst, const float* src, int64_t n) {
  map_elements(n, 1, [&](int64_t i, int64_t w) {
    store_n(dst + i, load_n(dst + i, w) + load_n(src + i, w), w);
  });
}

// for i: out[i] = alpha*x[i]
void scale(float* out, const float* x, float alpha, int64_t n) {
  const VF va = set1(alpha);
  map_elements(n, 1, [&](int64_t i, int64_t w) { store_n(out + i, va * load_n(x + i, w), w); });
}

// One element at a time: the mask's hash is 64-bit integer arithmetic, which the compiler
// vectorizes where the ISA has 64-bit multiplies.
void dropout(float* y, const float* x, int64_t n, const DropoutMask& mask) {
  const float keep = static_cast<float>(mask.keep_scale());
  parallel_chunks(n, 4 * n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = mask.keeps(static_cast<uint64_t>(i)) ? x[i] * keep : 0.0f;
  });
}

void round_to_format(float* x, int64_t n, Precision format) {
  if (format == Precision::fp32) return;
  parallel_chunks(n, n, [&](int64_t lo, int64_t hi) { round_to(format, x + lo, hi - lo); });
}

void composite_norm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t n, int64_t d, double eps, Precision format) {
  parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const CompositeRowStats st = composite_norm_row(beta != nullptr, format, x + i * d, gamma, beta, y + i * d, d, eps);
      if (mean) mean[i] = st.mean;
      rstd[i] = st.rstd;
    }
  });
}

void composite_norm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                             const float* gamma, const float* mean, const float* rstd, int64_t n, int64_t d,
                             Precision format, CompositeBackwardCensus* census) {
  // A chunk's census is added under a lock: counts and maxima do not depend on the order.
  std::mutex merge;
  const bool ln = mean != nullptr;
  parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) {
    CompositeBackwardCensus part;
    std::vector<float> row(dx ? 0 : static_cast<size_t>(d));
    for (int64_t i = lo; i < hi; ++i)
      composite_norm_row_backward(ln, format, dy + i * d, x + i * d, gamma, ln ? mean[i] : 0.0f, rstd[i],
                                  dx ? dx + i * d : row.data(), d, census ? &part : nullptr);
    if (!census) return;
    std::lock_guard<std::mutex> lock(merge);
    census->add(part);
  });
  if (!dgamma && !dbeta) return;
  parallel_chunks(d, n * d, [&](int64_t lo, int64_t hi) {
    CompositeBackwardCensus part;
    for (int64_t j = lo; j < hi; ++j) {
      double sg = 0, sb = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (dgamma)
          sg += composite_gamma_term(ln, format, dy[i * d + j], x[i * d + j], ln ? mean[i] : 0.0f, rstd[i],
                                     census ? &part : nullptr);
        sb += dy[i * d + j];
      }
      if (dgamma) dgamma[j] = to_float(sg);
      if (dbeta) dbeta[j] = to_float(sb);
    }
    if (!census) return;
    std::lock_guard<std::mutex> lock(merge);
    census->add(part);
  });
}

FormatCensus format_census(const float* x, int64_t n, Precision format) {
  // Chunks counted apart, then added in chunk order: the same result for any thread count.
  const int64_t chunk = 1 << 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<FormatCensus> part(static_cast<size_t>(chunks));
  parallel_chunks(chunks, n, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t begin = c * chunk;
      part[static_cast<size_t>(c)] = normlab::format_census(format, x + begin, std::min(chunk, n - begin));
    }
  });
  FormatCensus total;
  for (const FormatCensus& p : part) total.add(p);
  total.count = n;
  return total;
}

// for i: out[i] = a[i]*b[i]
void mul(float* out, const float* a, const float* b, int64_t n) {
  map_elements(n, 1, [&](int64_t i, int64_t w) {
    store_n(out + i, load_n(a + i, w) * load_n(b + i, w), w);
  });
}

// Phi(x), the standard normal CDF, and g = exp(-x^2/2), which the density needs too:
// erfc(z) = t*P(t)*exp(-z^2), z = |x|/sqrt(2), t = 1/(1 + p*z) (Abramowitz & Stegun 7.1.26,
// |error in erf| <= 1.5e-7; PyTorch's vectorized erf is the same formula). One exp serves both
// the CDF and the derivative, where a separate erf (rational, 13 FMAs and a divide) and exp
// cost ~40% more. NaN propagates; x = +-inf gives Phi = 1 or 0 and g = 0.
inline void normal_cdf(VF x, VF& cdf, VF& g) {
  const VF z = max(x, zero() - x) * set1(kInvSqrt2);
  const VF t = set1(1.0f) / fmadd(set1(0.3275911f), z, set1(1.0f));
  VF p = set1(1.061405429f);
  p = fmadd(p, t, set1(-1.453152027f));
  p = fmadd(p, t, set1(1.421413741f));
  p = fmadd(p, t, set1(-0.284496736f));
  p = fmadd(p, t, set1(0.254829592f));
  g = simd::exp(set1(-0.5f) * x * x);
  const VF half_erfc = set1(0.5f) * (p * t) * g;  // 1 - Phi(|x|)
  cdf = select_lt(x, zero(), half_erfc, set1(1.0f) - half_erfc);
}

// for i: y[i] = x[i]*Phi(x[i]); dydx[i] = Phi(x[i]) + x[i]*exp(-x[i]^2/2)/sqrt(2*pi)
// (std::erf is a scalar libm call that would make GELU the slowest op of the MLP.)
void gelu_forward(float* y, float* dydx, const float* x, int64_t n) {
  const VF kpdf = set1(kInvSqrt2Pi);
  if (dydx == nullptr) {
    map_elements(n, 12, [&](int64_t i, int64_t w) {
      VF xv = load_n(x + i, w), cdf, g;
      normal_cdf(xv, cdf, g);
      store_n(y + i, xv * cdf, w);
    });
    return;
  }
  map_elements(n, 12, [&](int64_t i, int64_t w) {
    VF xv = load_n(x + i, w), cdf, g;
    normal_cdf(xv, cdf, g);
    store_n(y + i, xv * cdf, w);
    store_n(dydx + i, fmadd(xv, kpdf * g, cdf), w);
  });
}

// sum_i x[i]^2 in double. Fixed blocks of elements (not per-thread chunks), each summed over 16
// double lanes (16 independent accumulators, kept in registers by the compiler), then the
// blocks in order: the same bits whatever the thread count.
double sum_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks == 0) return 0.0;
  double partial_stack[64];
  std::vector<double> partial_heap;
  double* partial = partial_stack;
  if (blocks > 64) {
    partial_heap.resize(static_cast<size_t>(blocks));
    partial = partial_heap.data();
  }
  parallel_for(blocks, n, [&](int64_t b) {
    const float* p = x + b * kBlock;
    const int64_t len = std::min(kBlock, n - b * kBlock);
    double acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
#pragma omp simd
      for (int j = 0; j < 16; ++j) acc[j] += double(p[i + j]) * double(p[i + j]);
    }
    double s = 0.0;
    for (; i < len; ++i) s += double(p[i]) * double(p[i]);
    for (int j = 0; j < 16; ++j) s += acc[j];
    partial[b] = s;
  });
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += partial[b];
  return total;
}

// One Adam/AdamW step, all parameters in one pass (backend.h):
// for i:
//   g = grad[i] (+ wd*p[i] for Adam with L2)
//   m[i] = b1*m[i] + (1-b1)*g;  v[i] = b2*v[i] + (1-b2)*g*g
//   p[i] -= lr * ((m[i]/bc1) / (sqrt(v[i]/bc2) + eps) (+ wd*p[i] for AdamW, p before the update))
// with the bias corrections bc1 = 1 - b1^step, bc2 = 1 - b2^step computed once in double.
void adam_step(float* param, float* m, float* v, const float* grad, int64_t n,
               const AdamParams& hp) {
  const double step = static_cast<double>(std::max<int64_t>(hp.step, 1));
  const VF b1 = set1(float(hp.beta1)), omb1 = set1(float(1.0 - hp.beta1));
  const VF b2 = set1(float(hp.beta2)), omb2 = set1(float(1.0 - hp.beta2));
  const VF inv_bc1 = set1(float(1.0 / (1.0 - std::pow(hp.beta1, step))));
  const VF inv_bc2 = set1(float(1.0 / (1.0 - std::pow(hp.beta2, step))));
  const VF eps = set1(float(hp.eps)), lr = set1(float(hp.lr));
  const VF wd_l2 = set1(hp.decoupled ? 0.0f : float(hp.weight_decay));
  const VF wd_decoupled = set1(hp.decoupled ? float(hp.weight_decay) : 0.0f);
  map_elements(n, 4, [&](int64_t i, int64_t w) {
    VF p = load_n(param + i, w);
    VF g = fmadd(wd_l2, p, load_n(grad + i, w));
    VF mi = fmadd(b1, load_n(m + i, w), omb1 * g);
    VF vi = fmadd(b2, load_n(v + i, w), omb2 * g * g);
    VF update = fmadd(wd_decoupled, p, (mi * inv_bc1) / (simd::sqrt(vi * inv_bc2) + eps));
    store_n(param + i, fnmadd(lr, update, p), w);
    store_n(m + i, mi, w);
    store_n(v + i, vi, w);
  });
}

}  // namespace normlab::cpu
