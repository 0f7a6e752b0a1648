// The one table of tolerances: how far a kernel may be from its reference, each with its reason.
// The op cases (test mode, bench ops), bench norms' check, gradcheck and the ISA tests read it.
//
// A value passes when |got - want| <= atol * scale + rtol * |want|: scale is 1 unless the output
// names a magnitude (a full sum's terms, opcases.h Output::atol_scale). A wrong kernel (a missing
// term, a wrong row, an output not written) is off by O(1) relative: every bound below is far from
// that.
#pragma once
#include "normlab/precision.h"

namespace normlab {

struct Tolerance {
  double atol = 0, rtol = 0;
};

namespace tol {

// ---- a float32 kernel against the float64 reference, on the op cases' inputs --------------------

// Bit for bit, the sign of a zero included: a copy, a gather, a transpose, the 16-bit formats'
// emulation (defined bit for bit: rounding, the census, the composite norm), or the same kernel
// asked for fewer outputs.
inline constexpr Tolerance kExact{0, 0};
// Outputs of a few float32 operations on O(1) values: each rounding is ~6e-8 relative, and sums
// over up to 1000 terms in several accumulators add up to ~1e-6 (measured: norms, softmax,
// attention <= 1e-6); float32 GEMMs of K = 64 reach ~1e-5 absolute on O(8) sums (measured 1.2e-5).
inline constexpr Tolerance kForward{1e-5, 1e-5};
// Gradients: more operations in a chain and a cancellation (g - mean(g) - xhat*mean(g*xhat)) whose
// terms are larger than the result, times rstd, which is 316 on a d = 1 row (variance 0):
// measured 1.7e-5 there, <= 7e-6 elsewhere.
inline constexpr Tolerance kGradient{5e-5, 5e-5};
// Sums over many rows or a long contraction (dgamma over 512 rows, K = 1000): float32 error grows
// like sqrt(count) * eps * sum|terms|; measured <= 3.2e-5 on O(10..30) results.
inline constexpr Tolerance kReduction{2e-4, 5e-5};
// A full sum over every element (DyT's dalpha, Derf's dshift, a scalar scale's gradient), or a
// column's over every row (dgamma, dbeta over 32768 rows in bench norms): its terms cancel and a
// float32 sum errs by a share of sum |terms|, so the bound is relative to that (atol_scale,
// per_column); measured <= 2e-7 of it for the full sums, 2.7e-7 for a plain sequential column sum
// over 32768 rows (the multipass and oneDNN LayerNorm backward).
inline constexpr Tolerance kFullSum{2e-6, 0};
// A constant rounded once to float32 (a fill of 0.3): half an ulp, 6e-8 relative.
inline constexpr Tolerance kOneRounding{0, 1e-7};
// GELU's y = x Phi(x): Phi from A&S 7.1.26 (|error in erf| <= 1.5e-7, so <= 7.5e-8 in Phi) plus
// float rounding, times |x| up to ~8 on N(0, 2^2) inputs: ~1e-6 at worst, 3e-6 leaves a margin.
// Its dy/dx: the same error in Phi plus exp's 2 ulp in the density term.
inline constexpr Tolerance kGelu{3e-6, 1e-5};
// Summed in double, one rounding to float32 at the end (the prefix mean, the row norms, the
// attention logits' max and entropy): half an ulp, 6e-8 relative; 1e-6 leaves a margin.
inline constexpr Tolerance kSummedInDouble{1e-6, 1e-6};
// The squares of float32 values summed in double by backend and reference alike (sum_squares):
// the same exact terms, only the order of the additions differs, ~1e-16 relative per addition;
// 1e-12 of the sum (of O(1) terms: 1e-12 per term) over up to 3e5 of them.
inline constexpr Tolerance kDoubleSum{0, 1e-12};

// An output stored as bf16 or fp16 is rounded once more, to 8 (11) significant bits: half an ulp,
// at most 2^-8 (2^-11) of the value, is added to its rtol (0 for float32; check_case at a 16-bit
// storage).
inline double stored_half_ulp(Precision storage) {
  return storage == Precision::fp32 ? 0.0 : 0.5 * format_info(storage).epsilon;
}

// ---- gradcheck ----------------------------------------------------------------------------------
// float64 central differences of fourth order, with a step of each input tensor's own: halved from
// a first step (f's rounding error 64 eps sum|y R|, divided by it, at kStepNoise of the tensor's
// gradient scale) until two steps in a row agree within kStepAgreement of that scale. What they
// still differ by, twice, is the tensor's noise in the bound, so that the bound follows each
// tensor's gradients and no absolute floor lets a small one through: an error of 1e-6 of a
// tensor's scale fails. Measured over every case at seeds 0-7 (3040 tensors): a correct backward
// lands at a median 1e-10 of its tensor's scale and at most 2.5e-7 (a DyT alpha two blocks deep,
// its steps agreeing to 1.3e-7), hence rtol 1e-7 plus that noise; the bound itself stays at most
// 8.5e-7 of the scale on every tensor, below the 1e-6 to catch.
inline constexpr Tolerance kFiniteDifference{0, 1e-7};
// float32 kernels vs float64 reference gradients, per tensor relative to its largest gradient:
// float32 rounding (6e-8) grows with reduction length and depth: ~1e-6 of scale on the default
// cases, 2e-4 on a Post-RMSNorm block at d = 1 (RMSNorm of one value is ~sign(x): its derivative
// is eps/|x|^3, badly conditioned), hence 1e-3. Gradients that are exactly zero in exact
// arithmetic (the key bias: softmax ignores a shift of a whole row of scores) come out as float32
// noise up to ~4e-7, hence atol 1e-6.
inline constexpr Tolerance kFloat32Gradient{1e-6, 1e-3};

}  // namespace tol
}  // namespace normlab
