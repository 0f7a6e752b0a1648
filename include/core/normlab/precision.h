// The floating-point formats normlab stores values in, and the one definition of how a float32
// value is rounded into each (docs/precision.md). On the CPU, bfloat16 and binary16 are emulated:
// values live in float32 storage, and every store rounds them to the format's grid exactly as a
// conversion to the real 16-bit type would (round to nearest, ties to even; IEEE overflow to
// infinity; gradual underflow through the subnormals, never flushed to zero). A rounded value is
// therefore exactly the value the 16-bit encoding holds, and to_bits/from_bits convert losslessly.
#pragma once
#include <cstdint>

#include "normlab/names.h"

namespace normlab {

enum class Precision : uint8_t { fp32, bf16, fp16 };
template <>
const EnumNames& enum_names<Precision>();

// How a norm runs when its input is stored in a low-precision format (docs/precision.md has each
// mode's exact sequence of roundings):
//   format: PyTorch's composite at the tensor's dtype (x.pow(2), .mean(-1), + eps, rsqrt, ...):
//           each op computes in float32 from stored values and rounds its result to the format;
//   fp32:   the row upcast, the whole norm in float32, the output rounded once (F.layer_norm and
//           F.rms_norm on a CPU half tensor; LLaMA's upcast RMSNorm);
//   fused:  normlab's own kernels: float32 statistics, reading and writing the format.
enum class NormCompute : uint8_t { format, fp32, fused };
template <>
const EnumNames& enum_names<NormCompute>();

// What a format can hold. Every value is a power of two or a sum of two, exact in a double.
struct FormatInfo {
  int exponent_bits = 0;
  int fraction_bits = 0;     // stored mantissa bits: 23, 7, 10
  double max = 0;            // largest finite value: FLT_MAX, 3.3895e38, 65504
  double min_normal = 0;     // 2^-126, 2^-126, 2^-14
  double min_subnormal = 0;  // 2^-149, 2^-133, 2^-24
  double epsilon = 0;        // 2^-fraction_bits: the spacing just above 1
};
const FormatInfo& format_info(Precision p);

// v rounded to float32 as an IEEE conversion rounds it: to nearest even, and to +-inf from
// FLT_MAX + half an ulp on, where a plain cast would be undefined behaviour.
float to_float(double v);

// x rounded to the format and widened back to float (exact). fp32 returns x unchanged. NaN stays
// NaN (quiet), infinities stay infinite.
float round_to(Precision p, float x);
// The same, in place over n values (a kernel's loop; the backends call it on their outputs).
void round_to(Precision p, float* values, int64_t n);

// The 16-bit encodings of bf16 and fp16 (sign, exponent, fraction): what CUDA and a native bf16
// CPU kernel store. to_bits rounds as round_to; from_bits is exact.
uint16_t to_bits(Precision p, float x);
float from_bits(Precision p, uint16_t bits);

// The spacing of the format's grid at |v| (the ulp of a value of that magnitude): 2^(e - fraction
// bits) for a normal |v| in [2^e, 2^(e+1)), min_subnormal below min_normal.
double ulp_at(Precision p, double v);
// (stored - exact) in units of ulp_at(exact): how far a stored value is from the float64 truth.
// Infinite when exactly one of them is infinite, NaN when either is NaN.
double ulp_error(Precision p, double stored, double exact);

// What rounding a finite float64 value into the format did to it. The order of the checks is
// overflow, underflow, subnormal, then exact or rounded: a stored subnormal is reported as
// `subnormal` even when it is exact, and a value below min_normal that rounds up to min_normal
// as `rounded`.
enum class RoundingEvent : uint8_t {
  exact,       // representable: stored == value
  rounded,     // a normal result, rounded to the nearest grid point
  subnormal,   // below min_normal: stored with fewer significant bits (gradual underflow)
  underflow,   // nonzero, but rounded to (signed) zero
  overflow,    // finite, but rounded to infinity
};
template <>
const EnumNames& enum_names<RoundingEvent>();
RoundingEvent classify_rounding(Precision p, double value, double stored);

// What storing float32 values in a format does to them, counted (the CountFormat kernel): the
// statistic behind train's overflow / underflow shares and its non-finite diagnosis.
struct FormatCensus {
  int64_t count = 0;      // values looked at
  int64_t nonfinite = 0;  // already inf or NaN
  int64_t overflow = 0;   // finite, stored as +-inf (RoundingEvent::overflow)
  int64_t underflow = 0;  // nonzero, stored as zero (RoundingEvent::underflow)
  double max_abs = 0;     // the largest finite |value|, before rounding
  void add(const FormatCensus& other);
};
// The definition the kernels match: each value classified by round_to. fp32: no overflow or
// underflow (the values are float32 already).
FormatCensus format_census(Precision p, const float* x, int64_t n);

// One row of a norm as PyTorch's composite of tensor ops at a bf16 / fp16 dtype (norm_compute
// format), every intermediate rounded to p as the op that makes it stores it:
//   RMSNorm:   s = x.pow(2); ms = s.mean(-1); v = ms + eps; r = torch.rsqrt(v); y = (x * r) * gamma
//   LayerNorm: mu = x.mean(-1); c = x - mu; s = c.pow(2); var = s.mean(-1); v = var + eps;
//              r = torch.rsqrt(v); y = ((c * r) * gamma) + beta
// Each op computes in float32 from stored operands and rounds once: a mean is the float32
// nearest the exact sum, divided by d in float32; eps (a Python scalar) is rounded to p first,
// as PyTorch's CPU add converts a scalar to the tensor's dtype; rsqrt is 1/sqrt in float32
// (PyTorch's vectorized path). x, gamma, beta (LayerNorm only) hold values of p. Writes y;
// returns the stored mean (LayerNorm; 0 for RMSNorm) and r, which the norm's backward reads.
// The one definition: the backends' kernels and handcalc match it.
struct CompositeRowStats {
  float mean = 0, rstd = 0;
};
CompositeRowStats composite_norm_row(bool layernorm, Precision p, const float* x, const float* gamma,
                                     const float* beta, float* y, int64_t d, double eps);

// The composite's backward as PyTorch's autograd runs it at a bf16 / fp16 dtype: each op's
// backward formula (derivatives.yaml) computed in float32 from stored operands, every tensor it
// makes rounded to p. Per row, with c = x - mu (LayerNorm) or x (RMSNorm), xh = c * r:
//   y = yg + beta          dbeta  = sum over rows of dy                 (the kernel's column pass)
//   yg = xh * gamma        dxh = dy * gamma;  dgamma = sum over rows of dy * xh
//   xh = c * r             dc1 = dxh * r;     dr = sum over the row of dxh * c
//   r = torch.rsqrt(v)     dv = (-0.5 * dr) * r.pow(3)   (fp16: r^3 overflows from r = 40.3 on)
//   v = var + eps          dvar = dv
//   var = s.mean(-1)       ds = dvar / d
//   s = c.pow(2)           dc2 = ds * (2 * c);  dc = dc1 + dc2 (autograd sums a reused tensor's grads)
//   c = x - mu             dmu = -(sum over the row of dc)            (LayerNorm only)
//   mu = x.mean(-1)        dx = dc + dmu / d                           (RMSNorm: dx = dc)
// A sum is the float32 nearest the exact sum, then rounded (as the forward's means). r.pow(3) is
// one rounding of r^3 in fp16 and two (r*r, then * r) in bf16, as PyTorch's CPU pow kernels for
// the two types compute it (scripts/torch_precision_check.py checks both on every value).
// The steps, in the order autograd runs them; a census of each (what storing its values did)
// is what names the op where a backward first overflowed.
enum class CompositeBackwardStep : uint8_t { mul_gamma, mul_rstd, rsqrt, mean_var, pow2, sub_mean, mean_mu, count };
// "rmsnorm: torch.rsqrt backward (-0.5 * grad * r.pow(3))", ...: the op a diagnosis names.
const char* composite_backward_step_name(bool layernorm, CompositeBackwardStep step);
struct CompositeBackwardCensus {
  FormatCensus steps[static_cast<int>(CompositeBackwardStep::count)];
  void add(const CompositeBackwardCensus& other);
};
// xh of one element as the composite's forward stores it: round(round(x - mean) * rstd) (LayerNorm)
// or round(x * rstd).
float composite_xhat(bool layernorm, Precision p, float x, float mean, float rstd);
// dx of one row (d values) from the stored dy, x, gamma and the forward's stored mean and rstd;
// `census` (may be null) counts every value each step stores.
void composite_norm_row_backward(bool layernorm, Precision p, const float* dy, const float* x, const float* gamma,
                                 float mean, float rstd, float* dx, int64_t d, CompositeBackwardCensus* census);
// One row's term of dgamma (round(dy * xh)), counted under the `* gamma` step.
float composite_gamma_term(bool layernorm, Precision p, float dy, float x, float mean, float rstd,
                           CompositeBackwardCensus* census);


}  // namespace normlab
