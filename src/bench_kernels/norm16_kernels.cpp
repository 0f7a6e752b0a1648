// LayerNorm and RMSNorm over 16-bit storage (bf16 or fp16 encodings, bench_kernels.h): the
// norm_compute `fused` kernels as a CPU without native bf16 arithmetic runs them, for `bench norms
// --precision`. x, dy, y, dx and the parameters are read and written as 2-byte elements (half
// the bytes of float32); every statistic and all arithmetic are float32.
//
// A row is decoded once into a float32 row buffer that stays in L1 (the later sweeps read it
// there), its result computed there and encoded on the way out: memory sees one read of x (and
// dy) and one write of y (dx), in the narrow format. With AVX2 and D a multiple of 8, two sweeps
// per row: decode + the statistics' sums (LayerNorm shifted by the row's first values, as the
// float32 kernels, then summed again centred if the shift was too far), and apply + encode;
// otherwise plain vector loops (simd.h) over the decoded row. Decoding is exact; encoding rounds to
// nearest even with IEEE overflow and gradual underflow, the one rounding of core's
// precision.h (round_to, to_bits), with fp16 through the CPU's F16C conversions where it has
// them (the same rounding: the tests compare the two on boundary cases).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "norm_stats.h"
#include "parallel.h"
#include "simd.h"
#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/error.h"
#include "normlab/tensor.h"

namespace normlab::cpu {

namespace {

using namespace simd;

void decode(Precision p, float* out, const uint16_t* in, int64_t n) {
  if (p == Precision::bf16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
      std::memcpy(out + i, &u, sizeof u);
    }
    return;
  }
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
  for (; i < n; ++i) out[i] = from_bits(Precision::fp16, in[i]);
}

// `in` is scratch: rounded in place on the way (bf16).
void encode(Precision p, uint16_t* out, float* in, int64_t n) {
  if (p == Precision::bf16) {
    round_to(p, in, n);  // on bf16's grid, the encoding is the upper half of the float's bits
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, in + i, sizeof u);
      out[i] = static_cast<uint16_t>(u >> 16);
    }
    return;
  }
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) out[i] = to_bits(Precision::fp16, in[i]);
}

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
constexpr bool kAvx2 = true;

inline __m256 load8(Precision p, const uint16_t* in) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  if (p == Precision::fp16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// bf16: round to nearest even by adding 0x7fff plus the kept part's lowest bit (a carry into the
// exponent is the correct rounding up, to inf past the largest finite value); NaN kept NaN
// (quiet), which the addition could otherwise carry into the sign.
inline void store8(Precision p, uint16_t* out, __m256 v) {
  __m128i h;
  if (p == Precision::fp16) {
    h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
}

inline float hsum8(__m256 v) {
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

// Sweep 1 of a forward row: r = decode(x); the sums of (x - c) and (x - c)^2 (RMSNorm: c = 0).
inline void decode_sums8(Precision p, float* r, const uint16_t* x, int64_t d, float c, float& su, float& ss) {
  const __m256 vc = _mm256_set1_ps(c);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, q0 = a0, q1 = a0;
  int64_t j = 0;
  for (; j + 16 <= d; j += 16) {
    const __m256 v0 = load8(p, x + j), v1 = load8(p, x + j + 8);
    _mm256_storeu_ps(r + j, v0);
    _mm256_storeu_ps(r + j + 8, v1);
    const __m256 s0 = _mm256_sub_ps(v0, vc), s1 = _mm256_sub_ps(v1, vc);
    a0 = _mm256_add_ps(a0, s0);
    a1 = _mm256_add_ps(a1, s1);
    q0 = _mm256_fmadd_ps(s0, s0, q0);
    q1 = _mm256_fmadd_ps(s1, s1, q1);
  }
  for (; j < d; j += 8) {
    const __m256 v = load8(p, x + j);
    _mm256_storeu_ps(r + j, v);
    const __m256 s = _mm256_sub_ps(v, vc);
    a0 = _mm256_add_ps(a0, s);
    q0 = _mm256_fmadd_ps(s, s, q0);
  }
  su = hsum8(_mm256_add_ps(a0, a1));
  ss = hsum8(_mm256_add_ps(q0, q1));
}
#else
constexpr bool kAvx2 = false;
#endif

void check_format(Precision p, const char* kernel) {
  NL_CHECK(p == Precision::bf16 || p == Precision::fp16, "{}: the storage must be bf16 or fp16, got {}", kernel,
           to_string(p));
}

// One thread's float32 buffers: rows of d (a row and, in the backward, its dy), kept by the thread
// from call to call: no allocation per call once they have the size.
struct RowBuffers {
  float *a, *b;
  explicit RowBuffers(int64_t d) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(2 * d)) scratch.resize(static_cast<size_t>(2 * d));
    a = scratch.data();
    b = a + d;
  }
};

// The parameters decoded once per call (d floats each; beta may be absent).
struct Params {
  std::vector<float> gamma, beta;
  Params(Precision p, const uint16_t* g, const uint16_t* bt, int64_t d) : gamma(static_cast<size_t>(d)) {
    decode(p, gamma.data(), g, d);
    if (bt) {
      beta.resize(static_cast<size_t>(d));
      decode(p, beta.data(), bt, d);
    }
  }
};

// Forward of rows [lo, hi): statistics in float32 over the decoded row (LayerNorm: the mean,
// then the centred sum of squares; RMSNorm: the sum of squares), y = (x - mean) * rstd * gamma
// (+ beta) encoded.
template <bool kRms>
void forward_rows(Precision p, uint16_t* y, float* mean, float* rstd, const uint16_t* x, const Params& w, int64_t lo,
                  int64_t hi, int64_t d, float eps) {
  RowBuffers buf(d);
  float* r = buf.a;
  const float* g = w.gamma.data();
  const float* bt = w.beta.empty() ? nullptr : w.beta.data();
  const float inv_d = 1.0f / static_cast<float>(d);
  const bool fast = kAvx2 && d % 8 == 0;
  for (int64_t i = lo; i < hi; ++i) {
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
    if (fast) {
      // The shift: the mean of the row's first 8 values (the float32 kernels' row_shift).
      const float c = kRms ? 0.0f : hsum8(load8(p, x + i * d)) * 0.125f;
      float su = 0, ss = 0;
      decode_sums8(p, r, x + i * d, d, c, su, ss);
      float mu = 0, rs = 0;
      if (kRms) {
        rs = rstd_from(ss, inv_d, eps);
      } else {
        const float m = su * inv_d;
        float var = shifted_variance(m, ss, inv_d);
        mu = mean_from(c, su, inv_d);
        if (shift_too_far(m, var)) {  // sum the row again, centred (from L1)
          const __m256 vmu = _mm256_set1_ps(mu);
          __m256 q = _mm256_setzero_ps();
          for (int64_t j = 0; j < d; j += 8) {
            const __m256 t = _mm256_sub_ps(_mm256_loadu_ps(r + j), vmu);
            q = _mm256_fmadd_ps(t, t, q);
          }
          var = hsum8(q) * inv_d;
        }
        rs = rstd_of_variance(var, eps);
      }
      const __m256 vmu = _mm256_set1_ps(mu), vrs = _mm256_set1_ps(rs);
      uint16_t* yr = y + i * d;
      for (int64_t j = 0; j < d; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(r + j), vmu), vrs), _mm256_loadu_ps(g + j));
        if (bt) v = _mm256_add_ps(v, _mm256_loadu_ps(bt + j));
        store8(p, yr + j, v);
      }
      if (mean) mean[i] = mu;
      rstd[i] = rs;
      continue;
    }
#endif
    decode(p, r, x + i * d, d);
    float mu = 0;
    if (!kRms) mu = row_reduce(d, [&](int64_t j, int64_t n) { return load_n(r + j, n); }) * inv_d;
    const VF vmu = set1(mu);
    const float sq = row_reduce(d, [&](int64_t j, int64_t n) {
      const VF c = load_n(r + j, n) - vmu;
      return c * c;
    });
    const float rs = rstd_from(sq, inv_d, eps);
    const VF vrs = set1(rs);
    row_for(d, [&](int64_t j, int64_t n) {
      VF v = (load_n(r + j, n) - vmu) * vrs * load_n(g + j, n);
      if (bt) v = v + load_n(bt + j, n);
      store_n(r + j, v, n);
    });
    encode(p, y + i * d, r, d);
    if (mean) mean[i] = mu;
    rstd[i] = rs;
  }
}

// At most this many blocks of rows for the parameter gradients: each block sums its rows into
// a partial of its own, then the partials are added in block order, so that the bits do not
// depend on the thread count.
constexpr int64_t kGradBlocks = 32;

template <bool kRms>
void backward(Precision p, uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* dy, const uint16_t* x,
              const uint16_t* gamma16, const float* mean, const float* rstd, int64_t n, int64_t d) {
  const Params w(p, gamma16, nullptr, d);
  const int64_t rows_per = std::max<int64_t>(1, (n + kGradBlocks - 1) / kGradBlocks);
  const int64_t blocks = n > 0 ? (n + rows_per - 1) / rows_per : 0;
  // The blocks' partial sums, from the arena (each block zeroes its own): no allocation and no
  // second pass of zeroes in the steady state.
  Tensor pg_buf = dgamma ? Tensor::empty({blocks, d}) : Tensor(), pb_buf = dbeta ? Tensor::empty({blocks, d}) : Tensor();
  float* pg = dgamma ? pg_buf.data<float>() : nullptr;
  float* pb = dbeta ? pb_buf.data<float>() : nullptr;
  const float inv_d = 1.0f / static_cast<float>(d);
  parallel_for(blocks, n * d, [&](int64_t blk) {
    RowBuffers buf(d);
    float* xr = buf.a;
    float* gr = buf.b;
    float* bg = pg ? pg + blk * d : nullptr;
    float* bb = pb ? pb + blk * d : nullptr;
    if (bg) std::fill(bg, bg + d, 0.0f);
    if (bb) std::fill(bb, bb + d, 0.0f);
    const float* g = w.gamma.data();
    const bool fast = kAvx2 && d % 8 == 0;
    for (int64_t i = blk * rows_per, end = std::min(n, i + rows_per); i < end; ++i) {
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
      if (fast) {
        // Sweep 1: xhat and dy kept (L1), the parameter-gradient partials, the sums of g = dy*gamma
        // and g*xhat; sweep 2: dx.
        const __m256 vmu = _mm256_set1_ps(kRms ? 0.0f : mean[i]), vrs = _mm256_set1_ps(rstd[i]);
        __m256 sg = _mm256_setzero_ps(), sgx = sg;
        for (int64_t j = 0; j < d; j += 8) {
          const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(load8(p, x + i * d + j), vmu), vrs);
          const __m256 dyv = load8(p, dy + i * d + j);
          _mm256_storeu_ps(xr + j, xh);
          _mm256_storeu_ps(gr + j, dyv);
          const __m256 gv = _mm256_mul_ps(dyv, _mm256_loadu_ps(g + j));
          sg = _mm256_add_ps(sg, gv);
          sgx = _mm256_fmadd_ps(gv, xh, sgx);
          if (bg) _mm256_storeu_ps(bg + j, _mm256_fmadd_ps(dyv, xh, _mm256_loadu_ps(bg + j)));
          if (bb) _mm256_storeu_ps(bb + j, _mm256_add_ps(_mm256_loadu_ps(bb + j), dyv));
        }
        if (!dx) continue;
        const __m256 vmg = _mm256_set1_ps(kRms ? 0.0f : hsum8(sg) * inv_d), vmgx = _mm256_set1_ps(hsum8(sgx) * inv_d);
        uint16_t* dxr = dx + i * d;
        for (int64_t j = 0; j < d; j += 8) {
          const __m256 gv = _mm256_mul_ps(_mm256_loadu_ps(gr + j), _mm256_loadu_ps(g + j));
          const __m256 t = _mm256_fnmadd_ps(_mm256_loadu_ps(xr + j), vmgx, _mm256_sub_ps(gv, vmg));
          store8(p, dxr + j, _mm256_mul_ps(vrs, t));
        }
        continue;
      }
#endif
      decode(p, xr, x + i * d, d);
      decode(p, gr, dy + i * d, d);
      const VF vmu = set1(kRms ? 0.0f : mean[i]), vrs = set1(rstd[i]);
      // xr <- xhat; the block's parameter gradients; then the row sums of g = dy*gamma and g*xhat
      row_for(d, [&](int64_t j, int64_t m) {
        const VF xh = (load_n(xr + j, m) - vmu) * vrs, dyv = load_n(gr + j, m);
        store_n(xr + j, xh, m);
        if (bg) store_n(bg + j, load_n(bg + j, m) + dyv * xh, m);
        if (bb) store_n(bb + j, load_n(bb + j, m) + dyv, m);
      });
      if (!dx) continue;
      const float sg = kRms ? 0.0f : row_reduce(d, [&](int64_t j, int64_t m) { return load_n(gr + j, m) * load_n(g + j, m); });
      const float sgx = row_reduce(d, [&](int64_t j, int64_t m) {
        return load_n(gr + j, m) * load_n(g + j, m) * load_n(xr + j, m);
      });
      const VF vmg = set1(sg * inv_d), vmgx = set1(sgx * inv_d);
      row_for(d, [&](int64_t j, int64_t m) {
        const VF gv = load_n(gr + j, m) * load_n(g + j, m);
        store_n(gr + j, vrs * (gv - vmg - load_n(xr + j, m) * vmgx), m);
      });
      encode(p, dx + i * d, gr, d);
    }
  });
  for (auto [out, part] : {std::pair{dgamma, pg}, std::pair{dbeta, pb}}) {
    if (!out) continue;
    std::fill(out, out + d, 0.0f);
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t j = 0; j < d; ++j) out[j] += part[b * d + j];
  }
}

template <bool kRms>
void forward(Precision p, uint16_t* y, float* mean, float* rstd, const uint16_t* x, const uint16_t* gamma,
             const uint16_t* beta, int64_t n, int64_t d, float eps) {
  const Params w(p, gamma, beta, d);
  parallel_chunks(n, n * d, [&](int64_t lo, int64_t hi) { forward_rows<kRms>(p, y, mean, rstd, x, w, lo, hi, d, eps); });
}

}  // namespace

void layernorm_forward_16(Precision p, uint16_t* y, float* mean, float* rstd, const uint16_t* x,
                          const uint16_t* gamma, const uint16_t* beta, int64_t n, int64_t d, float eps) {
  check_format(p, "layernorm_forward_16");
  forward<false>(p, y, mean, rstd, x, gamma, beta, n, d, eps);
}

void rmsnorm_forward_16(Precision p, uint16_t* y, float* rstd, const uint16_t* x, const uint16_t* gamma, int64_t n,
                        int64_t d, float eps) {
  check_format(p, "rmsnorm_forward_16");
  forward<true>(p, y, nullptr, rstd, x, gamma, nullptr, n, d, eps);
}

void layernorm_backward_16(Precision p, uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* dy,
                           const uint16_t* x, const uint16_t* gamma, const float* mean, const float* rstd, int64_t n,
                           int64_t d) {
  check_format(p, "layernorm_backward_16");
  backward<false>(p, dx, dgamma, dbeta, dy, x, gamma, mean, rstd, n, d);
}

void rmsnorm_backward_16(Precision p, uint16_t* dx, float* dgamma, const uint16_t* dy, const uint16_t* x,
                         const uint16_t* gamma, const float* rstd, int64_t n, int64_t d) {
  check_format(p, "rmsnorm_backward_16");
  backward<true>(p, dx, dgamma, nullptr, dy, x, gamma, nullptr, rstd, n, d);
}

void decode_16(Precision p, float* out, const uint16_t* in, int64_t n) {
  check_format(p, "decode_16");
  parallel_chunks(n, n, [&](int64_t lo, int64_t hi) { decode(p, out + lo, in + lo, hi - lo); });
}

void encode_16(Precision p, uint16_t* out, const float* in, int64_t n) {
  check_format(p, "encode_16");
  parallel_chunks(n, n, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kBlock = 1024;  // encode rounds its input in place: a copy, a block at a time
    float scratch[kBlock];
    for (int64_t k = lo; k < hi; k += kBlock) {
      const int64_t m = std::min(kBlock, hi - k);
      std::copy(in + k, in + k + m, scratch);
      encode(p, out + k, scratch, m);
    }
  });
}

}  // namespace normlab::cpu
