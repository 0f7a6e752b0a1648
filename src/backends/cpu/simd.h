// A thin float-vector type for the cpu backend's kernels: one definition per instruction set
// (AVX-512, AVX2+FMA, and a portable fallback of plain loops over 8 lanes), chosen at compile
// time from the -march flags. Kernels are written once against it; each keeps the plain scalar
// loop it computes in a comment above it.
//
// NaN/Inf must survive every kernel (divergence detection looks for them), so the library is
// built without -ffast-math and:
// - min/max follow the x86 rule "if either operand is NaN, return the second operand"; helpers
//   put the data operand second so that a NaN input stays NaN (clamping would hide it);
// - exp() clamps its argument only after NaN has had its chance to reach the result.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "isa.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// GCC 12's AVX-512 intrinsics (_mm512_max_ps, _mm512_reduce_add_ps, ...) pass
// _mm512_undefined_ps() as an ignored operand and then warn about it under -Wall
// (GCC bug 105593): silence that inside the header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// Per instruction set, in an inline namespace named after it (isa.h).
namespace normlab::cpu::simd {
inline namespace NORMLAB_SIMD_ISA {

#if defined(__AVX512F__)

constexpr int64_t kWidth = 16;
constexpr const char* kIsa = "avx512";
struct VF {
  __m512 v;
};
inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline VF zero() { return {_mm512_setzero_ps()}; }
inline VF set1(float x) { return {_mm512_set1_ps(x)}; }
inline VF load(const float* p) { return {_mm512_loadu_ps(p)}; }
// Lanes [n, kWidth) read as 0 and are never touched in memory (0 <= n < kWidth).
inline VF load_tail(const float* p, int64_t n) { return {_mm512_maskz_loadu_ps(tail_mask(n), p)}; }
inline void store(float* p, VF a) { _mm512_storeu_ps(p, a.v); }
inline void store_tail(float* p, VF a, int64_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), a.v); }
// A non-temporal (streaming) store: past the caches to memory; p aligned to 64 bytes.
inline void stream(float* p, VF a) { _mm512_stream_ps(p, a.v); }
// Lanes [n, kWidth) set to 0 (a tail's contribution to a reduction).
inline VF keep_first(VF a, int64_t n) { return {_mm512_maskz_mov_ps(tail_mask(n), a.v)}; }
inline VF operator+(VF a, VF b) { return {_mm512_add_ps(a.v, b.v)}; }
inline VF operator-(VF a, VF b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline VF operator*(VF a, VF b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline VF operator/(VF a, VF b) { return {_mm512_div_ps(a.v, b.v)}; }
inline VF fmadd(VF a, VF b, VF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }    // a*b + c
inline VF fnmadd(VF a, VF b, VF c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c - a*b
inline VF max(VF a, VF b) { return {_mm512_max_ps(a.v, b.v)}; }  // b when either is NaN
inline VF min(VF a, VF b) { return {_mm512_min_ps(a.v, b.v)}; }  // b when either is NaN
inline VF sqrt(VF a) { return {_mm512_sqrt_ps(a.v)}; }
inline VF round_nearest(VF a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// 2^n for integer-valued n in [-126, 127]: n + 127 goes straight into the exponent bits.
inline VF pow2_int(VF n) {
  __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}
// a < b ? t : f, lane by lane (false when either is NaN).
inline VF select_lt(VF a, VF b, VF t, VF f) {
  return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ), f.v, t.v)};
}
// Bit r set where lane r of a > b (false when either is NaN).
inline uint32_t greater(VF a, VF b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ); }
// The lanes summed in adjacent pairs, then pairs of pairs, ...: ((e0+e1)+(e2+e3))+... , the tree
// reduce_add_rows computes for each of its rows, so that a row summed alone and a row summed
// in a group of rows give the same bits (the tiled and the pipelined norm kernels agree).
// The masked forms with every lane selected: the unmasked ones pass GCC 12's
// _mm512_undefined_ps() as their merge source, which -Wmaybe-uninitialized reports once inlined.
inline float reduce_add(VF a) {
  constexpr __mmask16 all = 0xFFFF;
  __m512 t = _mm512_add_ps(a.v, _mm512_mask_permute_ps(a.v, all, a.v, 0xB1));   // e0+e1 in lanes 0 and 1, ...
  t = _mm512_add_ps(t, _mm512_mask_permute_ps(t, all, t, 0x4E));                 // each 128-bit lane's sum
  t = _mm512_add_ps(t, _mm512_mask_shuffle_f32x4(t, all, t, t, 0xB1));           // 128-bit lanes 0+1, 2+3
  t = _mm512_add_ps(t, _mm512_mask_shuffle_f32x4(t, all, t, t, 0x4E));           // (0+1)+(2+3)
  return _mm512_cvtss_f32(t);
}
inline float reduce_max(VF a) { return _mm512_reduce_max_ps(a.v); }

#elif defined(__AVX2__) && defined(__FMA__)

constexpr int64_t kWidth = 8;
constexpr const char* kIsa = "avx2";
struct VF {
  __m256 v;
};
// Loading 8 ints from kMaskTable + 8 - n gives n all-ones lanes followed by zeros.
alignas(64) inline const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                   0,  0,  0,  0,  0,  0,  0,  0};
inline __m256i tail_mask(int64_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n));
}
inline VF zero() { return {_mm256_setzero_ps()}; }
inline VF set1(float x) { return {_mm256_set1_ps(x)}; }
inline VF load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline VF load_tail(const float* p, int64_t n) { return {_mm256_maskload_ps(p, tail_mask(n))}; }
inline void store(float* p, VF a) { _mm256_storeu_ps(p, a.v); }
inline void store_tail(float* p, VF a, int64_t n) { _mm256_maskstore_ps(p, tail_mask(n), a.v); }
inline void stream(float* p, VF a) { _mm256_stream_ps(p, a.v); }  // p aligned to 32 bytes
inline VF keep_first(VF a, int64_t n) {
  return {_mm256_and_ps(a.v, _mm256_castsi256_ps(tail_mask(n)))};
}
inline VF operator+(VF a, VF b) { return {_mm256_add_ps(a.v, b.v)}; }
inline VF operator-(VF a, VF b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline VF operator*(VF a, VF b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline VF operator/(VF a, VF b) { return {_mm256_div_ps(a.v, b.v)}; }
inline VF fmadd(VF a, VF b, VF c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline VF fnmadd(VF a, VF b, VF c) { return {_mm256_fnmadd_ps(a.v, b.v, c.v)}; }
inline VF max(VF a, VF b) { return {_mm256_max_ps(a.v, b.v)}; }
inline VF min(VF a, VF b) { return {_mm256_min_ps(a.v, b.v)}; }
inline VF sqrt(VF a) { return {_mm256_sqrt_ps(a.v)}; }
inline VF round_nearest(VF a) {
  return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
inline VF pow2_int(VF n) {
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}
inline VF select_lt(VF a, VF b, VF t, VF f) {
  return {_mm256_blendv_ps(f.v, t.v, _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ))};
}
inline uint32_t greater(VF a, VF b) {
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)));
}
// ((e0+e1)+(e2+e3)) + ((e4+e5)+(e6+e7)): reduce_add_rows's tree (see the AVX-512 version).
inline float reduce_add(VF a) {
  __m256 t = _mm256_add_ps(a.v, _mm256_permute_ps(a.v, 0xB1));
  t = _mm256_add_ps(t, _mm256_permute_ps(t, 0x4E));
  __m128 s = _mm_add_ss(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(VF a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#else

// Portable fallback: 8 independent lanes in plain loops, which compilers turn into whatever
// vector instructions the target has (SSE2, NEON), and which keeps 8 accumulators apart.
constexpr int64_t kWidth = 8;
constexpr const char* kIsa = "portable";
struct VF {
  float v[8];
};
#define NORMLAB_SIMD_MAP(expr)                 \
  VF r;                                        \
  for (int i = 0; i < 8; ++i) r.v[i] = (expr); \
  return r
inline VF zero() { NORMLAB_SIMD_MAP(0.0f); }
inline VF set1(float x) { NORMLAB_SIMD_MAP(x); }
inline VF load(const float* p) { NORMLAB_SIMD_MAP(p[i]); }
inline VF load_tail(const float* p, int64_t n) { NORMLAB_SIMD_MAP(i < n ? p[i] : 0.0f); }
inline void store(float* p, VF a) {
  for (int i = 0; i < 8; ++i) p[i] = a.v[i];
}
inline void store_tail(float* p, VF a, int64_t n) {
  for (int i = 0; i < n; ++i) p[i] = a.v[i];
}
inline void stream(float* p, VF a) { store(p, a); }  // no portable non-temporal store
inline VF keep_first(VF a, int64_t n) { NORMLAB_SIMD_MAP(i < n ? a.v[i] : 0.0f); }
inline VF operator+(VF a, VF b) { NORMLAB_SIMD_MAP(a.v[i] + b.v[i]); }
inline VF operator-(VF a, VF b) { NORMLAB_SIMD_MAP(a.v[i] - b.v[i]); }
inline VF operator*(VF a, VF b) { NORMLAB_SIMD_MAP(a.v[i] * b.v[i]); }
inline VF operator/(VF a, VF b) { NORMLAB_SIMD_MAP(a.v[i] / b.v[i]); }
inline VF fmadd(VF a, VF b, VF c) { NORMLAB_SIMD_MAP(std::fma(a.v[i], b.v[i], c.v[i])); }
inline VF fnmadd(VF a, VF b, VF c) { NORMLAB_SIMD_MAP(std::fma(-a.v[i], b.v[i], c.v[i])); }
// The x86 rule, written out: a comparison with NaN is false, so the second operand comes back.
inline VF max(VF a, VF b) { NORMLAB_SIMD_MAP(a.v[i] > b.v[i] ? a.v[i] : b.v[i]); }
inline VF min(VF a, VF b) { NORMLAB_SIMD_MAP(a.v[i] < b.v[i] ? a.v[i] : b.v[i]); }
inline VF sqrt(VF a) { NORMLAB_SIMD_MAP(std::sqrt(a.v[i])); }
inline VF round_nearest(VF a) { NORMLAB_SIMD_MAP(std::nearbyint(a.v[i])); }
inline VF pow2_int(VF n) {
  VF r;
  for (int i = 0; i < 8; ++i) {
    // NaN has no integer value; any bits do, since the caller multiplies by a NaN anyway.
    int32_t e = std::isnan(n.v[i]) ? 0 : static_cast<int32_t>(n.v[i]) + 127;
    uint32_t bits = static_cast<uint32_t>(e) << 23;
    std::memcpy(&r.v[i], &bits, sizeof(float));
  }
  return r;
}
inline VF select_lt(VF a, VF b, VF t, VF f) { NORMLAB_SIMD_MAP(a.v[i] < b.v[i] ? t.v[i] : f.v[i]); }
inline uint32_t greater(VF a, VF b) {
  uint32_t m = 0;
  for (int i = 0; i < 8; ++i) m |= uint32_t(a.v[i] > b.v[i]) << i;
  return m;
}
inline float reduce_add(VF a) {
  // Adjacent pairs, then pairs of pairs: the vector versions' tree.
  return ((a.v[0] + a.v[1]) + (a.v[2] + a.v[3])) + ((a.v[4] + a.v[5]) + (a.v[6] + a.v[7]));
}
inline float reduce_max(VF a) {
  float m = a.v[0];
  for (int i = 1; i < 8; ++i) m = a.v[i] > m ? a.v[i] : m;
  return m;
}
#undef NORMLAB_SIMD_MAP

#endif

// ---- derived operations, written once for every instruction set ----------------------------
// 1/sqrt(v), correctly rounded twice as the scalar 1.0f / std::sqrt(v) is (not an rsqrt estimate).
inline VF reciprocal_sqrt(VF v) { return set1(1.0f) / sqrt(v); }

// n lanes from p (n <= kWidth): a whole vector, or a tail whose other lanes are 0.
inline VF load_n(const float* p, int64_t n) { return n == kWidth ? load(p) : load_tail(p, n); }
inline void store_n(float* p, VF a, int64_t n) {
  if (n == kWidth)
    store(p, a);
  else
    store_tail(p, a, n);
}

// store_n, or for kStream a streaming store of whole vectors (p aligned to kWidth floats).
// Streamed lines bypass the caches, so a kernel that streams calls stream_fence() before its
// output is read by another thread.
template <bool kStream>
inline void put(float* p, VF a, int64_t n) {
  if (kStream && n == kWidth)
    stream(p, a);
  else
    store_n(p, a, n);
}
inline void stream_fence() {
#if defined(__AVX2__) || defined(__AVX512F__)
  _mm_sfence();
#endif
}

// exp(x), Cephes' expf scheme: x = n*ln2 + r with |r| <= ln2/2, exp(r) by a degree-6
// polynomial, times 2^n built in the exponent bits. Max error ~2 ulp on [-87.3, 88.3].
// Below -87.33 (exp < FLT_MIN) the result is 0, above 88.37 it is +inf; NaN stays NaN
// (the clamps put x second, and comparisons with NaN are false).
inline VF exp(VF x) {
  const VF hi = set1(88.3762626647949f), lo = set1(-87.3365447504f);
  VF xc = min(hi, max(lo, x));
  VF n = round_nearest(xc * set1(1.44269504088896341f));
  VF r = fnmadd(n, set1(0.693359375f), xc);  // ln2 in two parts: the first is exact in float
  r = fnmadd(n, set1(-2.12194440e-4f), r);
  VF p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  p = fmadd(p, r * r, r + set1(1.0f));
  VF y = p * pow2_int(n);
  y = select_lt(x, lo, zero(), y);
  return select_lt(hi, x, set1(std::numeric_limits<float>::infinity()), y);
}

// erf(x), the rational approximation Eigen and XLA use for float: x*P(x^2)/Q(x^2) on x clamped
// to [-4, 4] (erf is +-1 in float beyond). Absolute error ~1e-7. NaN stays NaN.
inline VF erf(VF x) {
  VF xc = min(set1(4.0f), max(set1(-4.0f), x));
  VF x2 = xc * xc;
  VF p = set1(-2.72614225801306e-10f);
  p = fmadd(p, x2, set1(2.77068142495902e-08f));
  p = fmadd(p, x2, set1(-2.10102402082508e-06f));
  p = fmadd(p, x2, set1(-5.69250639462346e-05f));
  p = fmadd(p, x2, set1(-7.34990630326855e-04f));
  p = fmadd(p, x2, set1(-2.95459980854025e-03f));
  p = fmadd(p, x2, set1(-1.60960333262415e-02f));
  VF q = set1(-1.45660718464996e-05f);
  q = fmadd(q, x2, set1(-2.13374055278905e-04f));
  q = fmadd(q, x2, set1(-1.68282697438203e-03f));
  q = fmadd(q, x2, set1(-7.37332916720468e-03f));
  q = fmadd(q, x2, set1(-1.42647390514189e-02f));
  return xc * p / q;
}

// Lane 0 of a (one value computed in a vector, as a scalar).
inline float first_lane(VF a) {
  float lanes[kWidth];
  store(lanes, a);
  return lanes[0];
}

// tanh(u) (Cephes' tanhf): |u| < 0.625, u + u^3 P(u^2) (1 - e^{-2|u|} would lose the small
// values to cancellation); beyond, sign(u) (1 - 2/(e^{2|u|} + 1)). ~2 ulp. NaN stays NaN.
inline VF tanh(VF u) {
  const VF a = max(u, zero() - u);
  const VF z = u * u;
  VF p = set1(-5.70498872745e-3f);
  p = fmadd(p, z, set1(2.06390887954e-2f));
  p = fmadd(p, z, set1(-5.37397155531e-2f));
  p = fmadd(p, z, set1(1.33314422036e-1f));
  p = fmadd(p, z, set1(-3.33332819422e-1f));
  const VF small = fmadd(p * z, u, u);
  const VF big_abs = set1(1.0f) - set1(2.0f) / (simd::exp(set1(2.0f) * a) + set1(1.0f));
  const VF big = select_lt(u, zero(), zero() - big_abs, big_abs);
  return select_lt(a, set1(0.625f), small, big);
}

// ---- loops over a row of d floats, whole vectors then one masked tail ---------------------

// f(j, n) for j = 0, kWidth, 2*kWidth, ... with n lanes (kWidth, or fewer for the tail).
template <class F>
inline void row_for(int64_t d, F&& f) {
  int64_t j = 0;
  for (; j + kWidth <= d; j += kWidth) f(j, kWidth);
  if (j < d) f(j, d - j);
}

// sum over the row of the lanes f(j, n) returns, lane by lane (row_reduce sums the lanes too).
// Two independent accumulators: a float add has 3-4 cycles of latency, and one accumulator
// would make the loop wait on each (a plain scalar reduction loop runs at a quarter of copy
// speed, docs/cpu-costs.md); two, as row_accumulate2 has, keep the memory-bound RMSNorm forward
// at the LayerNorm forward's speed (with four, unrolled by four, it ran at 79% of the copy loop
// against 92% at 8x256x1024 on one Zen 4 core, and behind LayerNorm's). The lanes a tail does not
// cover are discarded, whatever f computed there.
template <class F>
inline VF row_accumulate(int64_t d, F&& f) {
  VF a0 = zero(), a1 = zero();
  int64_t j = 0;
  for (; j + 2 * kWidth <= d; j += 2 * kWidth) {
    a0 = a0 + f(j, kWidth);
    a1 = a1 + f(j + kWidth, kWidth);
  }
  for (; j + kWidth <= d; j += kWidth) a0 = a0 + f(j, kWidth);
  if (j < d) a1 = a1 + keep_first(f(j, d - j), d - j);
  return a0 + a1;
}

template <class F>
inline float row_reduce(int64_t d, F&& f) {
  return reduce_add(row_accumulate(d, f));
}

// Lane r of the result: the sum of the lanes of rows[r], for kWidth vectors at once (a
// transposing tree of adds: 15 adds for 16 rows where 16 reduce_add calls take 64 and chain
// their latencies). For the statistics of many short rows, whose horizontal sums would
// otherwise cost as much as the rows.
#if defined(__AVX512F__)
inline VF reduce_add_rows(const VF* rows) {
  // Within each 128-bit lane: pairs of elements (16 -> 8 vectors), then pairs of pairs (-> 4),
  // leaving lane L of vector i with the lane-L partial sums of rows 4i..4i+3; then the four
  // 128-bit lanes (-> 2 -> 1).
  __m512 w[8], x[4], y[2];
  for (int i = 0; i < 8; ++i)
    w[i] = _mm512_add_ps(_mm512_shuffle_ps(rows[2 * i].v, rows[2 * i + 1].v, 0x88),
                         _mm512_shuffle_ps(rows[2 * i].v, rows[2 * i + 1].v, 0xDD));
  for (int i = 0; i < 4; ++i)
    x[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x88), _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xDD));
  return {_mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD))};
}
#elif defined(__AVX2__) && defined(__FMA__)
inline VF reduce_add_rows(const VF* rows) {
  // hadd twice leaves each 128-bit half of x[i] with that half's sums of rows 4i..4i+3.
  __m256 x0 = _mm256_hadd_ps(_mm256_hadd_ps(rows[0].v, rows[1].v), _mm256_hadd_ps(rows[2].v, rows[3].v));
  __m256 x1 = _mm256_hadd_ps(_mm256_hadd_ps(rows[4].v, rows[5].v), _mm256_hadd_ps(rows[6].v, rows[7].v));
  return {_mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31))};
}
#else
inline VF reduce_add_rows(const VF* rows) {
  VF r;
  for (int i = 0; i < 8; ++i) r.v[i] = reduce_add(rows[i]);
  return r;
}
#endif

// row_reduce(d, f), while g(j, n) runs on every vector position of the row as well: g is other
// work over a row of the same length (the output sweep of the previous row, from L1), so that
// loads from memory, loads from L1 and stores interleave as in a copy loop instead of
// alternating in phases. The sum is row_reduce's, bit for bit.
template <class F, class G>
inline float row_reduce_alongside(int64_t d, F&& f, G&& g) {
  VF a0 = zero(), a1 = zero();
  int64_t j = 0;
  for (; j + 2 * kWidth <= d; j += 2 * kWidth) {
    a0 = a0 + f(j, kWidth);
    g(j, kWidth);
    a1 = a1 + f(j + kWidth, kWidth);
    g(j + kWidth, kWidth);
  }
  for (; j + kWidth <= d; j += kWidth) {
    a0 = a0 + f(j, kWidth);
    g(j, kWidth);
  }
  if (j < d) {
    a1 = a1 + keep_first(f(j, d - j), d - j);
    g(j, d - j);
  }
  return reduce_add(a0 + a1);
}

// Two sums in one sweep, lane by lane: f(j, n, u, v) adds its lanes to u and v (tails masked
// as above); row_reduce2 sums the lanes too.
template <class F>
inline void row_accumulate2(int64_t d, VF& u, VF& v, F&& f) {
  VF u0 = zero(), u1 = zero(), v0 = zero(), v1 = zero();
  int64_t j = 0;
  for (; j + 2 * kWidth <= d; j += 2 * kWidth) {
    f(j, kWidth, u0, v0);
    f(j + kWidth, kWidth, u1, v1);
  }
  for (; j + kWidth <= d; j += kWidth) f(j, kWidth, u0, v0);
  if (j < d) {
    VF ut = zero(), vt = zero();
    f(j, d - j, ut, vt);
    u1 = u1 + keep_first(ut, d - j);
    v1 = v1 + keep_first(vt, d - j);
  }
  u = u0 + u1;
  v = v0 + v1;
}

template <class F>
inline void row_reduce2(int64_t d, float& sum_u, float& sum_v, F&& f) {
  VF u, v;
  row_accumulate2(d, u, v, f);
  sum_u = reduce_add(u);
  sum_v = reduce_add(v);
}

// row_reduce2(d, sum_u, sum_v, f) with g(j, n) alongside (see row_reduce_alongside); the same
// sums, bit for bit.
template <class F, class G>
inline void row_reduce2_alongside(int64_t d, float& sum_u, float& sum_v, F&& f, G&& g) {
  VF u0 = zero(), u1 = zero(), v0 = zero(), v1 = zero();
  int64_t j = 0;
  for (; j + 2 * kWidth <= d; j += 2 * kWidth) {
    f(j, kWidth, u0, v0);
    g(j, kWidth);
    f(j + kWidth, kWidth, u1, v1);
    g(j + kWidth, kWidth);
  }
  for (; j + kWidth <= d; j += kWidth) {
    f(j, kWidth, u0, v0);
    g(j, kWidth);
  }
  if (j < d) {
    VF ut = zero(), vt = zero();
    f(j, d - j, ut, vt);
    u1 = u1 + keep_first(ut, d - j);
    v1 = v1 + keep_first(vt, d - j);
    g(j, d - j);
  }
  sum_u = reduce_add(u0 + u1);
  sum_v = reduce_add(v0 + v1);
}

}  // namespace NORMLAB_SIMD_ISA
}  // namespace normlab::cpu::simd
