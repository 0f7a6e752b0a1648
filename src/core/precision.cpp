// Rounding float32 into bfloat16 and binary16 by integer arithmetic on the bit patterns, so that
// the result does not depend on the CPU's rounding mode, its FTZ/DAZ flags or on F16C being
// present. tests/core/test_precision.cpp checks both against an independent float64 reference on
// every grid point, every midpoint and their neighbours, and fp16 against the compiler's _Float16.
#include "normlab/precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "normlab/error.h"

namespace normlab {

template <>
const EnumNames& enum_names<Precision>() {
  static const EnumNames t{
      "precision",
      {{Precision::fp32, "fp32", {"float32", "f32"}, "IEEE binary32 (no emulation)"},
       {Precision::bf16, "bf16", {"bfloat16"}, "bfloat16: 8 exponent bits, 7 fraction bits"},
       {Precision::fp16, "fp16", {"float16", "half", "f16"}, "IEEE binary16: 5 exponent bits, 10 fraction bits"}}};
  return t;
}

template <>
const EnumNames& enum_names<NormCompute>() {
  static const EnumNames t{
      "norm_compute",
      {{NormCompute::format, "format", {}, "composite ops, each result rounded to the format"},
       {NormCompute::fp32, "fp32", {"float32"}, "whole norm in float32, output rounded once"},
       {NormCompute::fused, "fused", {}, "normlab's kernels: float32 statistics, format in and out"}}};
  return t;
}

template <>
const EnumNames& enum_names<RoundingEvent>() {
  static const EnumNames t{"rounding event",
                           {{RoundingEvent::exact, "exact", {}, "representable"},
                            {RoundingEvent::rounded, "rounded", {}, "rounded to the nearest value"},
                            {RoundingEvent::subnormal, "subnormal", {}, "below the smallest normal"},
                            {RoundingEvent::underflow, "underflow", {}, "nonzero rounded to zero"},
                            {RoundingEvent::overflow, "overflow", {}, "finite rounded to infinity"}}};
  return t;
}

const FormatInfo& format_info(Precision p) {
  static const FormatInfo fp32{8, 23, static_cast<double>(std::numeric_limits<float>::max()),
                               std::ldexp(1.0, -126), std::ldexp(1.0, -149), std::ldexp(1.0, -23)};
  static const FormatInfo bf16{8, 7, std::ldexp(255.0, 120), std::ldexp(1.0, -126),
                               std::ldexp(1.0, -133), std::ldexp(1.0, -7)};
  static const FormatInfo fp16{5, 10, 65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24),
                               std::ldexp(1.0, -10)};
  switch (p) {
    case Precision::fp32: return fp32;
    case Precision::bf16: return bf16;
    case Precision::fp16: return fp16;
  }
  NL_CHECK(false, "precision {} has no format", static_cast<int>(p));
  return fp32;
}

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// q + 1 when the discarded low part `rem` of a value is above half a step, or exactly half and q
// is odd: round to nearest, ties to even.
uint32_t round_half_even(uint32_t q, uint32_t rem, uint32_t half) {
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

uint16_t float_to_bf16_bits(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // bf16 is float32's upper half, so rounding is on the low 16 bits; a carry out of the
  // fraction moves into the exponent, and one out of the largest exponent gives infinity.
  return static_cast<uint16_t>(round_half_even(u >> 16, u & 0xffffu, 0x8000u));
}

uint16_t float_to_fp16_bits(float x) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  // 65520 = 0x477ff000 lies halfway between 65504 (odd fraction) and 2^16: ties go up, to inf.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // a normal fp16: rebias the exponent (127 - 15) and drop 13 bits
    const uint32_t r = a - 0x38000000u;
    return static_cast<uint16_t>(sign | round_half_even(r >> 13, r & 0x1fffu, 0x1000u));
  }
  // Below 2^-14: a multiple of 2^-24. 2^-25 and less rounds to zero (2^-25 itself is a tie,
  // and zero is even).
  if (a <= 0x33000000u) return static_cast<uint16_t>(sign);
  const uint32_t exponent = a >> 23;  // 102..112: the value is m * 2^(exponent - 150)
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  const uint32_t q = round_half_even(m >> shift, m & ((1u << shift) - 1u), 1u << (shift - 1u));
  return static_cast<uint16_t>(sign | q);  // q = 0x400 is the smallest normal: still right
}

float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t fraction = h & 0x3ffu;
  if (exponent == 0x1fu) return float_of(sign | 0x7f800000u | (fraction << 13));
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (fraction << 13));
  const float magnitude = std::ldexp(static_cast<float>(fraction), -24);  // exact
  return sign ? -magnitude : magnitude;
}

// x rounded to fp16's grid and widened back, as float32 bits: the composition of
// float_to_fp16_bits and fp16_bits_to_float, written without branches (every case computed,
// one selected) so that a loop over it vectorizes; integer arithmetic only, as above.
// bf16's round trip of a float32 bit pattern (to_bits then from_bits) without branches, so that a
// loop over it vectorizes: nearest even on the low 16 bits (a carry moves into the exponent, and
// out of the largest one gives infinity), a NaN quieted.
inline uint32_t bf16_rounded_bits(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

inline uint32_t fp16_rounded_bits(uint32_t u) {
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  // A normal fp16: round the 13 low fraction bits away, ties to even; a carry moves into the
  // exponent (at most to 65504's: the overflow case below takes everything from 65520 on).
  const uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;
  // A subnormal fp16: q = the value in units of 2^-24, rounded; q * 2^-24 is exact in float32.
  const uint32_t e = a >> 23;
  const uint32_t shift = (126u - e) & 31u;  // 14..24 where this case applies
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t q0 = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << ((shift - 1u) & 31u);
  const uint32_t q = q0 + ((rem > half) | ((rem == half) & q0 & 1u));
  const float qf = static_cast<float>(static_cast<int32_t>(q)) * 5.9604644775390625e-8f;  // 2^-24
  uint32_t sub;
  std::memcpy(&sub, &qf, sizeof sub);
  const uint32_t nan = (a | 0x400000u) & ~0x1fffu;  // quiet, the fraction cut to fp16's 10 bits
  uint32_t r = a > 0x7f800000u ? nan : a >= 0x477ff000u ? 0x7f800000u : a >= 0x38800000u ? normal
             : a > 0x33000000u ? sub : 0u;
  return sign | r;
}

}  // namespace

uint16_t to_bits(Precision p, float x) {
  switch (p) {
    case Precision::bf16: return float_to_bf16_bits(x);
    case Precision::fp16: return float_to_fp16_bits(x);
    case Precision::fp32: break;
  }
  NL_CHECK(false, "fp32 has no 16-bit encoding");
  return 0;
}

float from_bits(Precision p, uint16_t bits) {
  switch (p) {
    case Precision::bf16: return float_of(static_cast<uint32_t>(bits) << 16);
    case Precision::fp16: return fp16_bits_to_float(bits);
    case Precision::fp32: break;
  }
  NL_CHECK(false, "fp32 has no 16-bit encoding");
  return 0;
}

float to_float(double v) {
  // FLT_MAX + half its ulp = 2^128 - 2^103: from there on the nearest float is infinity.
  const double overflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  if (std::fabs(v) >= overflow) return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

float round_to(Precision p, float x) {
  if (p == Precision::fp32) return x;
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  // the encoding's round trip without its branches
  u = p == Precision::bf16 ? bf16_rounded_bits(u) : fp16_rounded_bits(u);
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void round_to(Precision p, float* values, int64_t n) {
  switch (p) {
    case Precision::fp32: return;
    case Precision::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, values + i, sizeof u);
        u = bf16_rounded_bits(u);
        std::memcpy(values + i, &u, sizeof u);
      }
      return;
    case Precision::fp16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, values + i, sizeof u);
        u = fp16_rounded_bits(u);
        std::memcpy(values + i, &u, sizeof u);
      }
      return;
  }
}

double ulp_at(Precision p, double v) {
  const FormatInfo& f = format_info(p);
  const double a = std::fabs(v);
  if (!(a >= f.min_normal)) return f.min_subnormal;  // also NaN: any positive spacing will do
  if (std::isinf(a)) return std::ldexp(1.0, std::ilogb(f.max) - f.fraction_bits);
  return std::ldexp(1.0, std::ilogb(a) - f.fraction_bits);
}

double ulp_error(Precision p, double stored, double exact) {
  if (std::isnan(stored) || std::isnan(exact)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(stored) || std::isinf(exact)) {
    if (stored == exact) return 0;
    return stored > exact ? std::numeric_limits<double>::infinity()
                          : -std::numeric_limits<double>::infinity();
  }
  return (stored - exact) / ulp_at(p, exact);
}

RoundingEvent classify_rounding(Precision p, double value, double stored) {
  if (std::isfinite(value) && std::isinf(stored)) return RoundingEvent::overflow;
  if (value != 0 && stored == 0) return RoundingEvent::underflow;
  if (stored != 0 && std::fabs(stored) < format_info(p).min_normal) return RoundingEvent::subnormal;
  return stored == value || (std::isnan(value) && std::isnan(stored)) ? RoundingEvent::exact
                                                                      : RoundingEvent::rounded;
}

void FormatCensus::add(const FormatCensus& other) {
  count += other.count;
  nonfinite += other.nonfinite;
  overflow += other.overflow;
  underflow += other.underflow;
  max_abs = std::max(max_abs, other.max_abs);
}

FormatCensus format_census(Precision p, const float* x, int64_t n) {
  FormatCensus c;
  c.count = n;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      ++c.nonfinite;
      continue;
    }
    c.max_abs = std::max(c.max_abs, static_cast<double>(std::fabs(v)));
    if (p == Precision::fp32) continue;
    const float r = round_to(p, v);
    if (std::isinf(r)) ++c.overflow;
    else if (r == 0 && v != 0) ++c.underflow;
  }
  return c;
}

CompositeRowStats composite_norm_row(bool layernorm, Precision p, const float* x, const float* gamma,
                                     const float* beta, float* y, int64_t d, double eps) {
  // A mean is the float32 nearest the exact sum (PyTorch accumulates a half row in float; its
  // order rarely matters at these lengths: docs/precision.md), then divided in float32. eps is a
  // Python scalar: PyTorch's CPU add converts it to the tensor's dtype before adding.
  const float eps_p = round_to(p, to_float(eps)), fd = static_cast<float>(d);
  CompositeRowStats st;
  if (layernorm) {
    double sum = 0;
    for (int64_t j = 0; j < d; ++j) sum += x[j];
    st.mean = round_to(p, to_float(sum) / fd);
  }
  // y holds the centred row (LayerNorm) or x (RMSNorm) until the output overwrites it.
  double sum_sq = 0;
  for (int64_t j = 0; j < d; ++j) {
    y[j] = layernorm ? round_to(p, x[j] - st.mean) : x[j];
    sum_sq += round_to(p, y[j] * y[j]);
  }
  const float var = round_to(p, to_float(sum_sq) / fd);
  const float v = round_to(p, var + eps_p);
  st.rstd = round_to(p, 1.0f / std::sqrt(v));
  for (int64_t j = 0; j < d; ++j) {
    const float xhat = round_to(p, y[j] * st.rstd);
    const float scaled = round_to(p, xhat * gamma[j]);
    y[j] = layernorm ? round_to(p, scaled + beta[j]) : scaled;
  }
  return st;
}

// ---- the composite's backward ---------------------------------------------------------------

const char* composite_backward_step_name(bool layernorm, CompositeBackwardStep step) {
  static const char* const ln[] = {
      "layernorm: * gamma backward (grad * gamma, grad * xhat)",
      "layernorm: * rstd backward (grad * rstd, sum of grad * (x - mean))",
      "layernorm: torch.rsqrt backward (-0.5 * grad * rstd.pow(3))",
      "layernorm: var's .mean(-1) backward (grad / d)",
      "layernorm: .pow(2) backward (grad * 2 * (x - mean), summed with the * rstd path)",
      "layernorm: x - mean backward (-sum of grad)",
      "layernorm: mean's .mean(-1) backward (grad / d, summed with the x - mean path)"};
  static const char* const rms[] = {
      "rmsnorm: * gamma backward (grad * gamma, grad * xhat)",
      "rmsnorm: x * r backward (grad * r, sum of grad * x)",
      "rmsnorm: torch.rsqrt backward (-0.5 * grad * r.pow(3))",
      "rmsnorm: .mean(-1) backward (grad / d)",
      "rmsnorm: x.pow(2) backward (grad * 2 * x, summed with the x * r path)",
      "rmsnorm: (no x - mean)",
      "rmsnorm: (no mean)"};
  return (layernorm ? ln : rms)[static_cast<int>(step)];
}

void CompositeBackwardCensus::add(const CompositeBackwardCensus& other) {
  for (int i = 0; i < static_cast<int>(CompositeBackwardStep::count); ++i) steps[i].add(other.steps[i]);
}

namespace {

// One stored value of a backward step: counted (when a census is kept), then rounded.
class BackwardStore {
 public:
  BackwardStore(Precision p, CompositeBackwardCensus* census) : p_(p), census_(census) {}
  float operator()(CompositeBackwardStep step, float v) const {
    if (census_) census_->steps[static_cast<int>(step)].add(format_census(p_, &v, 1));
    return round_to(p_, v);
  }

 private:
  Precision p_;
  CompositeBackwardCensus* census_;
};

// r.pow(3) as PyTorch's CPU kernels store it: Half computes pow in float and rounds once,
// BFloat16 multiplies in its own type (r * r * r, each product rounded).
float stored_cube(const BackwardStore& st, Precision p, float r) {
  if (p == Precision::bf16) return st(CompositeBackwardStep::rsqrt, st(CompositeBackwardStep::rsqrt, r * r) * r);
  return st(CompositeBackwardStep::rsqrt, to_float(static_cast<double>(r) * r * r));
}

}  // namespace

float composite_xhat(bool layernorm, Precision p, float x, float mean, float rstd) {
  return round_to(p, (layernorm ? round_to(p, x - mean) : x) * rstd);
}

float composite_gamma_term(bool layernorm, Precision p, float dy, float x, float mean, float rstd,
                           CompositeBackwardCensus* census) {
  return BackwardStore(p, census)(CompositeBackwardStep::mul_gamma, dy * composite_xhat(layernorm, p, x, mean, rstd));
}

void composite_norm_row_backward(bool layernorm, Precision p, const float* dy, const float* x, const float* gamma,
                                 float mean, float rstd, float* dx, int64_t d, CompositeBackwardCensus* census) {
  using S = CompositeBackwardStep;
  const BackwardStore st(p, census);
  const float fd = static_cast<float>(d);
  auto centred = [&](int64_t j) { return layernorm ? round_to(p, x[j] - mean) : x[j]; };
  // dx holds dc1 = dxh * r until dc replaces it.
  double dr_sum = 0;
  for (int64_t j = 0; j < d; ++j) {
    const float dxh = st(S::mul_gamma, dy[j] * gamma[j]);
    dx[j] = st(S::mul_rstd, dxh * rstd);
    dr_sum += st(S::mul_rstd, dxh * centred(j));
  }
  const float dr = st(S::mul_rstd, to_float(dr_sum));
  const float dv = st(S::rsqrt, st(S::rsqrt, -0.5f * dr) * stored_cube(st, p, rstd));
  const float ds = st(S::mean_var, dv / fd);
  double dc_sum = 0;
  for (int64_t j = 0; j < d; ++j) {
    const float c = centred(j);
    dx[j] = st(S::pow2, dx[j] + st(S::pow2, ds * st(S::pow2, 2.0f * c)));
    dc_sum += dx[j];
  }
  if (!layernorm) return;
  const float dmu = st(S::sub_mean, -to_float(dc_sum));
  const float dx2 = st(S::mean_mu, dmu / fd);
  for (int64_t j = 0; j < d; ++j) dx[j] = st(S::mean_mu, dx[j] + dx2);
}

}  // namespace normlab
