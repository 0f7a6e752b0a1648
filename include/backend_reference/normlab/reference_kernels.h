// Reference kernels: plain loops over raw arrays, float32 and float64, the oracle every other
// backend is tested against. Written for clarity, not speed: every reduction accumulates in
// double whatever T is, and every transcendental is evaluated in double, so for float each
// output is (close to) the exact result rounded once. Header-only so that tests and benches can
// call them on raw arrays without a Tensor.
//
// Conventions (the same as include/backend_api/normlab/backend.h; each kernel's header states its contract):
// - outputs first, then inputs, then sizes; all arrays contiguous and row-major;
// - outputs and gradients are WRITTEN (=), unless a kernel says it accumulates;
// - a gradient output passed as nullptr is skipped;
// - norms save rstd (1/sqrt(var+eps), or 1/sqrt(mean(x^2)+eps)), one per row, in T.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "normlab/adam_kernels.h"
#include "normlab/backend.h"
#include "normlab/dropout_kernels.h"
#include "normlab/matmul_kernels.h"
#include "normlab/precision.h"
#include "normlab/squash_kernels.h"
#include "normlab/stats_math.h"

namespace normlab {

// ============================================================================
// matrix products
// ============================================================================

// The products MatmulSpec describes (matmul_kernels.h); accumulate: C += product (the backward of a
// shared weight sums batches).
template <class T>
void matmul_ref(T* c, const T* a, const T* b, const MatmulSpec& s) {
  const int64_t batch = s.batch, m = s.m, n = s.n, k = s.k;
  const bool trans_a = s.trans_a, trans_b = s.trans_b, a_batched = s.a_batched, b_batched = s.b_batched;
  const bool accumulate = s.accumulate;
  for (int64_t bi = 0; bi < batch; ++bi) {
    const T* ab = a + (a_batched ? bi * m * k : 0);
    const T* bb = b + (b_batched ? bi * k * n : 0);
    T* cb = c + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          double aip = trans_a ? ab[p * m + i] : ab[i * k + p];  // op(A)[i,p]
          double bpj = trans_b ? bb[j * k + p] : bb[p * n + j];  // op(B)[p,j]
          acc += aip * bpj;
        }
        // Add in double before rounding once: C += product is then as exact as C = product.
        cb[i * n + j] = static_cast<T>(accumulate ? double(cb[i * n + j]) + acc : acc);
      }
    }
  }
}

// M rows, K inputs, N outputs.
// y[i,j] = sum_p x[i,p] * w[j,p] + bias[j]; w is (N x K) (PyTorch's Linear layout); bias nullable.
// Its backward is three calls of other kernels: dx = dy @ w (matmul), dw = dy^T @ x (matmul with
// trans_a), dbias = sum_rows(dy).
// residual (M x N, nullable) is added to the result.
template <class T>
void linear_forward_ref(T* y, const T* x, const T* w, const T* bias, const T* residual, int64_t m,
                        int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? double(bias[j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(w[j * k + p]);
      if (residual) acc += double(residual[i * n + j]);
      y[i * n + j] = static_cast<T>(acc);
    }
  }
}

// dx[i,p] = (sum_j dy[i,j] * w[j,p]) * gate[i,p]; gate nullable (then 1).
template <class T>
void linear_backward_input_ref(T* dx, const T* dy, const T* w, const T* gate, int64_t m, int64_t k,
                               int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      double acc = 0.0;
      for (int64_t j = 0; j < n; ++j) acc += double(dy[i * n + j]) * double(w[j * k + p]);
      if (gate) acc *= double(gate[i * k + p]);
      dx[i * k + p] = static_cast<T>(acc);
    }
  }
}

// R rows, C cols.
// out[j] = sum_i x[i,j] (the bias gradient: the bias is broadcast over rows in the forward).
template <class T>
void sum_rows_ref(T* out, const T* x, int64_t rows, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) {
    double acc = 0.0;
    for (int64_t i = 0; i < rows; ++i) acc += x[i * cols + j];
    out[j] = static_cast<T>(acc);
  }
}

// ============================================================================
// elementwise over n values
// ============================================================================

template <class T>
void fill_ref(T* out, double value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(value);
}

template <class T>
void copy_ref(T* out, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i];
}

// out = alpha * a + beta * b (out may alias a or b: each element is read before it is written)
template <class T>
void add_ref(T* out, const T* a, const T* b, double alpha, double beta, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(alpha * a[i] + beta * b[i]);
}

// dst += src (accumulate)
template <class T>
void accumulate_ref(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(double(dst[i]) + double(src[i]));
}

// out = alpha * x
// y[i] = x[i] / (1 - rate) where the mask keeps i, else 0 (the scale in double, rounded once to T).
template <class T>
void dropout_ref(T* y, const T* x, int64_t n, const DropoutMask& mask) {
  const double keep = mask.keep_scale();
  for (int64_t i = 0; i < n; ++i) y[i] = mask.keeps(static_cast<uint64_t>(i)) ? static_cast<T>(double(x[i]) * keep) : T(0);
}

// Head (bi, hi)'s P (t x t) with the probabilities' dropout applied: D[t,s] = P[t,s] / (1 - rate)
// where the mask keeps index ((bi*H + hi)*T + t)*T + s, else 0; D = P when the mask is off.
inline std::vector<double> dropped_probs_ref(const std::vector<double>& p, const DropoutMask& mask, int64_t bh) {
  std::vector<double> d = p;
  if (!mask.on()) return d;
  const double keep = mask.keep_scale();
  const int64_t n = static_cast<int64_t>(p.size());
  for (int64_t i = 0; i < n; ++i) d[i] = mask.keeps(static_cast<uint64_t>(bh * n + i)) ? d[i] * keep : 0.0;
  return d;
}

template <class T>
void scale_ref(T* out, const T* x, double alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(alpha * x[i]);
}

// out = a * b
template <class T>
void mul_ref(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(double(a[i]) * double(b[i]));
}

// GELU, exact erf form (PyTorch's default, not the tanh approximation):
// y = x * Phi(x), Phi(x) = 0.5 * (1 + erf(x / sqrt(2))), the standard normal CDF.
// The derivative (dydx, optional):
//   d/dx [x * Phi(x)] = Phi(x) + x * Phi'(x) = Phi(x) + x * phi(x),
//   phi(x) = exp(-x^2/2) / sqrt(2*pi), the standard normal density (Phi' = phi).
template <class T>
void gelu_forward_ref(T* y, T* dydx, const T* x, int64_t n) {
  const double inv_sqrt_2pi = 0.39894228040143267794;  // 1/sqrt(2*pi); M_PI is not standard C++
  for (int64_t i = 0; i < n; ++i) {
    double xi = x[i];
    double cdf = 0.5 * (1.0 + std::erf(xi / std::sqrt(2.0)));
    y[i] = static_cast<T>(xi * cdf);
    if (dydx) dydx[i] = static_cast<T>(cdf + xi * inv_sqrt_2pi * std::exp(-0.5 * xi * xi));
  }
}

// sum_i x_i^2, accumulated in double (norms of activations and gradients for the probes).
template <class T>
double sum_squares_ref(const T* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * double(x[i]);
  return acc;
}

// ============================================================================
// normalization over the last dimension
// ============================================================================

// N rows, D normalized size.
// Per row: mu = mean(x); var = mean((x-mu)^2) (biased, as PyTorch); rstd = 1/sqrt(var+eps);
// xhat = (x-mu)*rstd; y = gamma*xhat + beta. Saves mean and rstd per row for the backward.
// Two passes (mean, then the centred variance) rather than E[x^2]-mu^2, which cancels
// catastrophically when |mu| >> std.
template <class T>
void layernorm_forward_ref(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta,
                           int64_t n, int64_t d, double eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * d;
    double mu = 0.0;
    for (int64_t j = 0; j < d; ++j) mu += xr[j];
    mu /= double(d);
    double var = 0.0;
    for (int64_t j = 0; j < d; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= double(d);
    double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < d; ++j) {
      double xhat = (xr[j] - mu) * rs;
      y[i * d + j] = static_cast<T>(double(gamma[j]) * xhat + double(beta[j]));
    }
    mean[i] = static_cast<T>(mu);
    rstd[i] = static_cast<T>(rs);
  }
}

// N rows, D normalized size. dx, dgamma, dbeta each nullable; all WRITTEN.
// Derivation, per row (drop the row index; sums over j run over the d features):
//   g_j = dL/dxhat_j = dy_j * gamma_j.
//   var = (1/d) sum_j (x_j-mu)^2  =>  dvar/dx_i = (2/d)(x_i-mu)   (the dmu/dx_i term sums to 0)
//   rstd = (var+eps)^(-1/2)       =>  drstd/dx_i = -(1/2) rstd^3 dvar/dx_i = -rstd^2 xhat_i / d
//   xhat_j = (x_j-mu) rstd        =>  dxhat_j/dx_i = rstd (delta_ij - 1/d) + (x_j-mu) drstd/dx_i
//                                                  = rstd (delta_ij - 1/d - xhat_j xhat_i / d)
//   dx_i = sum_j g_j dxhat_j/dx_i = rstd (g_i - mean_j(g_j) - xhat_i mean_j(g_j xhat_j)).
//   y_j = gamma_j xhat_j + beta_j, gamma and beta shared by all rows:
//   dgamma_j = sum_rows dy_j xhat_j;  dbeta_j = sum_rows dy_j.
template <class T>
void layernorm_backward_ref(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma,
                            const T* mean, const T* rstd, int64_t n, int64_t d) {
  if (dx) {
    for (int64_t i = 0; i < n; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      double mu = mean[i], rs = rstd[i];
      double mean_g = 0.0, mean_gxhat = 0.0;
      for (int64_t j = 0; j < d; ++j) {
        double g = double(dyr[j]) * double(gamma[j]);
        double xhat = (xr[j] - mu) * rs;
        mean_g += g;
        mean_gxhat += g * xhat;
      }
      mean_g /= double(d);
      mean_gxhat /= double(d);
      for (int64_t j = 0; j < d; ++j) {
        double g = double(dyr[j]) * double(gamma[j]);
        double xhat = (xr[j] - mu) * rs;
        dx[i * d + j] = static_cast<T>(rs * (g - mean_g - xhat * mean_gxhat));
      }
    }
  }
  // Column by column, so each parameter gradient is one double sum over the rows.
  for (int64_t j = 0; j < d; ++j) {
    double dg = 0.0, db = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double xhat = (x[i * d + j] - double(mean[i])) * double(rstd[i]);
      dg += double(dy[i * d + j]) * xhat;
      db += dy[i * d + j];
    }
    if (dgamma) dgamma[j] = static_cast<T>(dg);
    if (dbeta) dbeta[j] = static_cast<T>(db);
  }
}

// N rows, D normalized size.
// Per row: rstd = 1/sqrt(mean(x^2)+eps) (= 1/r, r the RMS); xhat = x*rstd; y = gamma*xhat.
template <class T>
void rmsnorm_forward_ref(T* y, T* rstd, const T* x, const T* gamma, int64_t n, int64_t d,
                         double eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * d;
    double ms = 0.0;
    for (int64_t j = 0; j < d; ++j) ms += double(xr[j]) * double(xr[j]);
    ms /= double(d);
    double rs = 1.0 / std::sqrt(ms + eps);
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = static_cast<T>(double(gamma[j]) * xr[j] * rs);
    rstd[i] = static_cast<T>(rs);
  }
}

// N rows, D normalized size. dx, dgamma each nullable; both WRITTEN.
// Derivation, per row (as LayerNorm, without the mean):
//   g_j = dy_j * gamma_j.
//   ms = (1/d) sum_j x_j^2        =>  dms/dx_i = (2/d) x_i
//   rstd = (ms+eps)^(-1/2)        =>  drstd/dx_i = -(1/2) rstd^3 (2/d) x_i = -rstd^2 xhat_i / d
//   xhat_j = x_j rstd             =>  dxhat_j/dx_i = rstd delta_ij + x_j drstd/dx_i
//                                                  = rstd (delta_ij - xhat_j xhat_i / d)
//   dx_i = sum_j g_j dxhat_j/dx_i = rstd (g_i - xhat_i mean_j(g_j xhat_j)).
//   dgamma_j = sum_rows dy_j xhat_j.
template <class T>
void rmsnorm_backward_ref(T* dx, T* dgamma, const T* dy, const T* x, const T* gamma, const T* rstd,
                          int64_t n, int64_t d) {
  if (dx) {
    for (int64_t i = 0; i < n; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      double rs = rstd[i];
      double mean_gxhat = 0.0;
      for (int64_t j = 0; j < d; ++j)
        mean_gxhat += double(dyr[j]) * double(gamma[j]) * (xr[j] * rs);
      mean_gxhat /= double(d);
      for (int64_t j = 0; j < d; ++j) {
        double g = double(dyr[j]) * double(gamma[j]);
        double xhat = xr[j] * rs;
        dx[i * d + j] = static_cast<T>(rs * (g - xhat * mean_gxhat));
      }
    }
  }
  if (dgamma) {
    for (int64_t j = 0; j < d; ++j) {
      double dg = 0.0;
      for (int64_t i = 0; i < n; ++i)
        dg += double(dy[i * d + j]) * (x[i * d + j] * double(rstd[i]));
      dgamma[j] = static_cast<T>(dg);
    }
  }
}

// N rows, D normalized size.
// Fused residual add + LayerNorm: s = alpha*a + b (written: the next block and the backward use
// it); y, mean, rstd = LayerNorm(s). The norm reads s as stored in T, so that the backward,
// which gets s, sees exactly the input the statistics were computed from.
// Backward (no kernel of its own): ds = layernorm_backward(dy, s, ...) [+ upstream ds];
// da = alpha*ds; db = ds.
template <class T>
void add_layernorm_forward_ref(T* s, T* y, T* mean, T* rstd, const T* a, const T* b, double alpha,
                               const T* gamma, const T* beta, int64_t n, int64_t d, double eps) {
  add_ref(s, a, b, alpha, 1.0, n * d);
  layernorm_forward_ref(y, mean, rstd, s, gamma, beta, n, d, eps);
}

// Fused residual add + RMSNorm: s = alpha*a + b; y, rstd = RMSNorm(s). Backward as above.
template <class T>
void add_rmsnorm_forward_ref(T* s, T* y, T* rstd, const T* a, const T* b, double alpha,
                             const T* gamma, int64_t n, int64_t d, double eps) {
  add_ref(s, a, b, alpha, 1.0, n * d);
  rmsnorm_forward_ref(y, rstd, s, gamma, n, d, eps);
}

// ============================================================================
// elementwise normalizers (DyT, Derf) and the channel scale
// ============================================================================

// f(u) and f'(u) of an elementwise normalizer: tanh' = 1 - tanh^2, erf' = 2/sqrt(pi) exp(-u^2).
inline double squash_ref(Squash f, double u) { return f == Squash::tanh ? std::tanh(u) : std::erf(u); }
inline double squash_slope_ref(Squash f, double u) {
  if (f == Squash::tanh) {
    const double t = std::tanh(u);
    return 1.0 - t * t;
  }
  return 1.1283791670955126 * std::exp(-u * u);  // 2/sqrt(pi)
}

// N rows, D columns. y = gamma * f(alpha*x + shift) + beta; shift, beta nullable (0).
template <class T>
void squash_forward_ref(T* y, const T* x, const T* alpha, const T* shift, const T* gamma, const T* beta, int64_t n,
                        int64_t d, Squash f) {
  const double a = alpha[0], s = shift ? double(shift[0]) : 0.0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double u = a * double(x[i * d + j]) + s;
      y[i * d + j] = static_cast<T>(double(gamma[j]) * squash_ref(f, u) + (beta ? double(beta[j]) : 0.0));
    }
}

// N rows, D columns; every gradient nullable and WRITTEN. With u = alpha*x + shift and
// h = dy*gamma*f'(u): dx = alpha*h (dy/dx), dalpha = sum x*h, dshift = sum h, dgamma_j = sum_rows
// dy*f(u), dbeta_j = sum_rows dy.
template <class T>
void squash_backward_ref(T* dx, T* dalpha, T* dshift, T* dgamma, T* dbeta, const T* dy, const T* x, const T* alpha,
                         const T* shift, const T* gamma, int64_t n, int64_t d, Squash f) {
  const double a = alpha[0], s = shift ? double(shift[0]) : 0.0;
  double sa = 0.0, ss = 0.0;
  std::vector<double> sg(static_cast<size_t>(d), 0.0), sb(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double xv = x[i * d + j], g = dy[i * d + j], u = a * xv + s;
      const double h = g * double(gamma[j]) * squash_slope_ref(f, u);
      if (dx) dx[i * d + j] = static_cast<T>(a * h);
      sa += xv * h;
      ss += h;
      sg[static_cast<size_t>(j)] += g * squash_ref(f, u);
      sb[static_cast<size_t>(j)] += g;
    }
  if (dalpha) dalpha[0] = static_cast<T>(sa);
  if (dshift) dshift[0] = static_cast<T>(ss);
  for (int64_t j = 0; j < d; ++j) {
    if (dgamma) dgamma[j] = static_cast<T>(sg[static_cast<size_t>(j)]);
    if (dbeta) dbeta[j] = static_cast<T>(sb[static_cast<size_t>(j)]);
  }
}

// N rows, D columns, lambda of C = D or 1 values: y = x * lambda.
template <class T>
void channel_scale_forward_ref(T* y, const T* x, const T* lambda, int64_t n, int64_t d, int64_t c) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = static_cast<T>(double(x[i * d + j]) * double(lambda[c == 1 ? 0 : j]));
}

// dx = dy * lambda; dlambda_j = sum_rows dy*x (C = D) or dlambda = sum of dy*x (C = 1). Nullable, WRITTEN.
template <class T>
void channel_scale_backward_ref(T* dx, T* dlambda, const T* dy, const T* x, const T* lambda, int64_t n, int64_t d,
                                int64_t c) {
  std::vector<double> sl(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const int64_t k = c == 1 ? 0 : j;
      if (dx) dx[i * d + j] = static_cast<T>(double(dy[i * d + j]) * double(lambda[k]));
      sl[static_cast<size_t>(k)] += double(dy[i * d + j]) * double(x[i * d + j]);
    }
  if (dlambda)
    for (int64_t k = 0; k < c; ++k) dlambda[k] = static_cast<T>(sl[static_cast<size_t>(k)]);
}

// ============================================================================
// softmax over the last dimension
// ============================================================================

// One row's max m and sum_j exp(x_j - m): subtracting the row max changes nothing
// mathematically and keeps exp from overflowing. Softmax and cross-entropy share it.
template <class T>
double row_max_sumexp(const T* xr, int64_t d, double& mx) {
  mx = -INFINITY;
  for (int64_t j = 0; j < d; ++j) mx = std::fmax(mx, double(xr[j]));
  double sum = 0.0;
  for (int64_t j = 0; j < d; ++j) sum += std::exp(xr[j] - mx);
  return sum;
}

// N rows, D size. y_j = exp(x_j - max) / sum_k exp(x_k - max).
template <class T>
void softmax_forward_ref(T* y, const T* x, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * d;
    double mx = 0.0;
    const double sum = row_max_sumexp(xr, d, mx);
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = static_cast<T>(std::exp(xr[j] - mx) / sum);
  }
}

// N rows, D size. dx WRITTEN.
// Derivation, per row: y_j = e^{x_j} / Z  =>  dy_j/dx_i = y_j (delta_ij - y_i), so
//   dx_i = sum_j dy_j y_j (delta_ij - y_i) = y_i (dy_i - sum_j dy_j y_j).
template <class T>
void softmax_backward_ref(T* dx, const T* dy, const T* y, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    double dot = 0.0;
    for (int64_t j = 0; j < d; ++j) dot += double(dy[i * d + j]) * double(y[i * d + j]);
    for (int64_t j = 0; j < d; ++j)
      dx[i * d + j] = static_cast<T>(double(y[i * d + j]) * (double(dy[i * d + j]) - dot));
  }
}

// ============================================================================
// multi-head scaled-dot-product attention: causal self-attention, and attention over another
// sequence's keys (an encoder's self-attention, a decoder's cross-attention)
// ============================================================================

// B batch, T query positions, Tk key positions, H heads, Dh head size, C = H*Dh channels.
// q, out: (B, T, C); k, v: (B, Tk, C); head h uses channels [h*Dh, (h+1)*Dh).
// For each (b, h) and query position t, over the keys s it sees (s <= t when causal, where Tk = T;
// every s < Tk otherwise):
//   S[t,s] = scale * q_t . k_s
//   P[t,s] = softmax_s(S[t,:]) over the keys seen (row max subtracted), P[t,s] = 0 for the others
//   out_t  = sum_s P[t,s] v_s

// The keys query row ti sees: the first attention_keys_seen of them.
inline int64_t attention_keys_seen(int64_t ti, int64_t tk, bool causal) { return causal ? std::min(ti + 1, tk) : tk; }

// P (t x tk, row-major, zero where unseen) of head hi of batch bi, in double; each row's max and
// sum to stats[2 * ti], [2 * ti + 1] when stats is not null (the head's T rows of them).
template <class T>
void attention_probs_ref(std::vector<double>& p, T* stats, const T* q, const T* k, int64_t bi, int64_t hi, int64_t t,
                         int64_t tk, bool causal, int64_t h, int64_t dh, double scale) {
  const int64_t c = h * dh;
  p.assign(static_cast<size_t>(t * tk), 0.0);
  for (int64_t ti = 0; ti < t; ++ti) {
    const T* qt = q + (bi * t + ti) * c + hi * dh;
    double* row = p.data() + ti * tk;
    const int64_t seen = attention_keys_seen(ti, tk, causal);
    double mx = -INFINITY;
    for (int64_t si = 0; si < seen; ++si) {
      const T* ks = k + (bi * tk + si) * c + hi * dh;
      double dot = 0.0;
      for (int64_t e = 0; e < dh; ++e) dot += double(qt[e]) * double(ks[e]);
      row[si] = scale * dot;
      mx = std::fmax(mx, row[si]);
    }
    double sum = 0.0;
    for (int64_t si = 0; si < seen; ++si) {
      row[si] = std::exp(row[si] - mx);
      sum += row[si];
    }
    for (int64_t si = 0; si < seen; ++si) row[si] /= sum;
    if (stats) {
      stats[2 * ti] = static_cast<T>(mx);
      stats[2 * ti + 1] = static_cast<T>(sum);
    }
  }
}

// stats: (B, H, T, 2), each query row's softmax max and sum.
template <class T>
void attention_forward_ref(T* out, T* stats, const T* q, const T* k, const T* v, int64_t b, int64_t t, int64_t tk,
                           bool causal, int64_t h, int64_t dh, double scale, const DropoutMask& dropout) {
  const int64_t c = h * dh;
  std::vector<double> probs;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      attention_probs_ref(probs, stats + (bi * h + hi) * t * 2, q, k, bi, hi, t, tk, causal, h, dh, scale);
      const std::vector<double> p = dropped_probs_ref(probs, dropout, bi * h + hi);
      for (int64_t ti = 0; ti < t; ++ti) {
        T* ot = out + (bi * t + ti) * c + hi * dh;
        for (int64_t e = 0; e < dh; ++e) {
          double acc = 0.0;
          for (int64_t si = 0; si < tk; ++si) acc += p[ti * tk + si] * double(v[(bi * tk + si) * c + hi * dh + e]);
          ot[e] = static_cast<T>(acc);
        }
      }
    }
  }
}

// Sizes as attention_forward_ref. dq, dk, dv each nullable; all WRITTEN. P is recomputed from q
// and k alone (the forward's stats, a backend's shortcut, are not needed for the math), and
// rounded to `probs_format` (via float32: the format's grid is a subset of float32's); with
// dropout, D from it is rounded again.
// Derivation, per (b, h), with P zero where unseen and D = P * M / (1 - rate) the probabilities
// after dropout (M the mask; D = P without dropout):
//   out_t = sum_s D[t,s] v_s            =>  dv_s = sum_t D[t,s] dout_t
//                                           dD[t,s] = dout_t . v_s
//   D = P * M / (1 - rate)               =>  dP[t,s] = dD[t,s] * M[t,s] / (1 - rate)
//   P[t,:] = softmax(S[t,:]) (per row)   =>  dS[t,s] = P[t,s] (dP[t,s] - sum_s' dP[t,s'] P[t,s'])
//                                           (softmax backward; unseen entries have P = 0, so dS =
//                                           0)
//   S[t,s] = scale q_t . k_s             =>  dq_t = scale sum_s dS[t,s] k_s
//                                           dk_s = scale sum_t dS[t,s] q_t
// (attention_kernels.h folds `scale` into dS; the same numbers.)
template <class T>
void attention_backward_ref(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, int64_t b,
                            int64_t t, int64_t tk, bool causal, int64_t h, int64_t dh, double scale,
                            Precision probs_format, const DropoutMask& dropout) {
  const int64_t c = h * dh;
  // Offset of (batch bi, position ti of a sequence of n, head hi) in a (B, n, C) array.
  auto at = [&](int64_t bi, int64_t ti, int64_t n, int64_t hi) { return (bi * n + ti) * c + hi * dh; };
  std::vector<double> p, ds(static_cast<size_t>(t * tk));  // P and scale * dS for one (b, h)
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      attention_probs_ref(p, static_cast<T*>(nullptr), q, k, bi, hi, t, tk, causal, h, dh, scale);
      if (probs_format != Precision::fp32)
        for (double& x : p) x = round_to(probs_format, to_float(x));
      const int64_t bh = bi * h + hi;
      std::vector<double> d = dropped_probs_ref(p, dropout, bh);
      // As the unfused form stores dropout's output: rounded to the format again.
      if (dropout.on() && probs_format != Precision::fp32)
        for (double& x : d) x = round_to(probs_format, to_float(x));
      if (dv) {
        for (int64_t si = 0; si < tk; ++si) {
          for (int64_t e = 0; e < dh; ++e) {
            double acc = 0.0;
            for (int64_t ti = 0; ti < t; ++ti) acc += d[ti * tk + si] * double(dout[at(bi, ti, t, hi) + e]);
            dv[at(bi, si, tk, hi) + e] = static_cast<T>(acc);
          }
        }
      }
      if (!dq && !dk) continue;
      for (int64_t ti = 0; ti < t; ++ti) {
        // dP[t,s] for the keys seen, kept in ds until the row sum is known.
        const int64_t seen = attention_keys_seen(ti, tk, causal);
        double rowdot = 0.0;
        for (int64_t si = 0; si < seen; ++si) {
          double dp = 0.0;
          for (int64_t e = 0; e < dh; ++e) dp += double(dout[at(bi, ti, t, hi) + e]) * double(v[at(bi, si, tk, hi) + e]);
          if (dropout.on())
            dp = dropout.keeps(static_cast<uint64_t>((bh * t + ti) * tk + si)) ? dp * dropout.keep_scale() : 0.0;
          ds[ti * tk + si] = dp;
          rowdot += dp * p[ti * tk + si];
        }
        for (int64_t si = 0; si < tk; ++si)
          ds[ti * tk + si] = si < seen ? scale * p[ti * tk + si] * (ds[ti * tk + si] - rowdot) : 0.0;
      }
      if (dq) {
        for (int64_t ti = 0; ti < t; ++ti) {
          for (int64_t e = 0; e < dh; ++e) {
            double acc = 0.0;
            for (int64_t si = 0; si < tk; ++si) acc += ds[ti * tk + si] * double(k[at(bi, si, tk, hi) + e]);
            dq[at(bi, ti, t, hi) + e] = static_cast<T>(acc);
          }
        }
      }
      if (dk) {
        for (int64_t si = 0; si < tk; ++si) {
          for (int64_t e = 0; e < dh; ++e) {
            double acc = 0.0;
            for (int64_t ti = 0; ti < t; ++ti) acc += ds[ti * tk + si] * double(q[at(bi, ti, t, hi) + e]);
            dk[at(bi, si, tk, hi) + e] = static_cast<T>(acc);
          }
        }
      }
    }
  }
}

// ============================================================================
// causal prefix mean (the toy model's token mixing)
// ============================================================================

// B batch, T time, C channels. y[b,t] = (1/(t+1)) sum_{s<=t} x[b,s].
template <class T>
void prefix_mean_forward_ref(T* y, const T* x, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t ci = 0; ci < c; ++ci) {
        double acc = 0.0;
        for (int64_t si = 0; si <= ti; ++si) acc += x[(bi * t + si) * c + ci];
        y[(bi * t + ti) * c + ci] = static_cast<T>(acc / double(ti + 1));
      }
}

// dx WRITTEN. Derivation: dy[t]/dx[s] = 1/(t+1) when s <= t, else 0, so
//   dx[b,s] = sum_{t>=s} dy[b,t] / (t+1).
template <class T>
void prefix_mean_backward_ref(T* dx, const T* dy, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < t; ++si)
      for (int64_t ci = 0; ci < c; ++ci) {
        double acc = 0.0;
        for (int64_t ti = si; ti < t; ++ti) acc += dy[(bi * t + ti) * c + ci] / double(ti + 1);
        dx[(bi * t + si) * c + ci] = static_cast<T>(acc);
      }
}

// ============================================================================
// statistics of a log step (the RowNorms and AttentionLogitStats kernels)
// ============================================================================

// N rows of D: norms[i] = sqrt(sum_j x[i,j]^2), summed in double.
template <class T>
void row_norms_ref(T* norms, const T* x, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (int64_t j = 0; j < d; ++j) s += double(x[i * d + j]) * double(x[i * d + j]);
    norms[i] = static_cast<T>(std::sqrt(s));
  }
}

// q, k (B, T, H*Dh); max_logit, entropy (B, H, T).
template <class T>
void attention_logit_stats_ref(T* max_logit, T* entropy, const T* q, const T* k, int64_t b, int64_t t, int64_t h,
                               int64_t dh, double scale) {
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t ti = 0; ti < t; ++ti) {
        double m, e;
        attention_logit_stats_row(q, k, bi, hi, ti, t, h * dh, dh, scale, m, e);
        max_logit[(bi * h + hi) * t + ti] = static_cast<T>(m);
        entropy[(bi * h + hi) * t + ti] = static_cast<T>(e);
      }
}

// ============================================================================
// embedding
// ============================================================================

// N rows (tokens), V vocabulary, D width. y[i,:] = table[ids[i],:]; ids must lie in [0, V)
// (the backend checks; these loops trust them).
template <class T>
void embedding_forward_ref(T* y, const T* table, const int32_t* ids, int64_t n, int64_t v,
                           int64_t d) {
  (void)v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = table[int64_t(ids[i]) * d + j];
}

// dtable WRITTEN (rows no id hit are zero). Derivation: y_i = table[ids_i], so
//   dtable[r] = sum_{i : ids_i = r} dy_i (a token seen twice gets both gradients).
template <class T>
void embedding_backward_ref(T* dtable, const T* dy, const int32_t* ids, int64_t n, int64_t v,
                            int64_t d) {
  std::vector<double> acc(static_cast<size_t>(v * d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) acc[int64_t(ids[i]) * d + j] += dy[i * d + j];
  for (int64_t r = 0; r < v * d; ++r) dtable[r] = static_cast<T>(acc[r]);
}

// ============================================================================
// cross-entropy, mean over rows
// ============================================================================

// N rows, V classes. Per row i, with m the row max (for stability):
//   lse_i = m + log sum_j exp(logits_ij - m);  probs_ij = exp(logits_ij - lse_i) (saved);
//   loss = (1/N) sum_i (lse_i - logits_i[target_i]), one element.
template <class T>
void cross_entropy_forward_ref(T* loss, T* probs, const T* logits, const int32_t* targets,
                               int64_t n, int64_t v) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const T* lr = logits + i * v;
    double mx = 0.0;
    const double sum = row_max_sumexp(lr, v, mx);
    const double lse = mx + std::log(sum);
    for (int64_t j = 0; j < v; ++j) probs[i * v + j] = static_cast<T>(std::exp(lr[j] - lse));
    total += lse - double(lr[targets[i]]);
  }
  loss[0] = static_cast<T>(total / double(n));
}

// dlogits WRITTEN; dloss is one element. Derivation, per row:
//   d lse_i / d logits_ij = softmax_ij = probs_ij;  d logits_i[target_i] / d logits_ij = [j ==
//   target_i]
//   => dlogits_ij = dloss * (probs_ij - [j == target_i]) / N.
template <class T>
void cross_entropy_backward_ref(T* dlogits, const T* dloss, const T* probs, const int32_t* targets,
                                int64_t n, int64_t v) {
  double s = double(dloss[0]) / double(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < v; ++j) {
      double onehot = j == targets[i] ? 1.0 : 0.0;
      dlogits[i * v + j] = static_cast<T>(s * (double(probs[i * v + j]) - onehot));
    }
}

// ============================================================================
// layout
// ============================================================================

// O outer, A and Bd the swapped axes, M the axis between them, I inner.
// x viewed as (O, A, M, Bd, I) -> out (O, Bd, M, A, I): out[o,bd,m,a,i] = x[o,a,m,bd,i].
// Its backward is the same kernel with a and bdim exchanged.
template <class T>
void transpose_ref(T* out, const T* x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
                   int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t ai = 0; ai < a; ++ai)
      for (int64_t mi = 0; mi < mid; ++mi)
        for (int64_t bi = 0; bi < bdim; ++bi)
          for (int64_t ii = 0; ii < inner; ++ii) {
            int64_t src = (((o * a + ai) * mid + mi) * bdim + bi) * inner + ii;
            int64_t dst = (((o * bdim + bi) * mid + mi) * a + ai) * inner + ii;
            out[dst] = x[src];
          }
}

// ============================================================================
// optimizer
// ============================================================================

// N parameters. One Adam / AdamW step (Kingma & Ba 2015; Loshchilov & Hutter 2019), step >= 1:
//   Adam (L2, decoupled = false): g <- g + wd * p (the decay goes through the moments)
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
//   mhat = m / (1 - b1^step);  vhat = v / (1 - b2^step)   (bias correction: m, v start at 0)
//   p -= lr * (mhat / (sqrt(vhat) + eps) [+ wd * p, AdamW only, with p before the update])
// param, m, v are updated in place; the update of each element is computed in double.
template <class T>
void adam_step_ref(T* param, T* m, T* v, const T* grad, int64_t n, double lr, double beta1,
                   double beta2, double eps, double weight_decay, bool decoupled, int64_t step) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  for (int64_t i = 0; i < n; ++i) {
    double p = param[i];
    double g = grad[i];
    if (!decoupled) g += weight_decay * p;
    double mi = beta1 * double(m[i]) + (1.0 - beta1) * g;
    double vi = beta2 * double(v[i]) + (1.0 - beta2) * g * g;
    double update = (mi / bc1) / (std::sqrt(vi / bc2) + eps);
    if (decoupled) update += weight_decay * p;
    param[i] = static_cast<T>(p - lr * update);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
  }
}

}  // namespace normlab
