// handcalc in low precision: LayerNorm and RMSNorm of one row with every intermediate as a
// format stores it (bf16, fp16, or float32 itself), beside the float64 value of the same
// intermediate computed from the row as given, the error in the stored format's ulps, and what
// the rounding did (subnormal, underflow to zero, overflow to inf). The sequences of roundings
// are those of docs/precision.md:
//
//   norm_compute format (PyTorch's composite at the tensor's dtype, on the CPU):
//     RMSNorm    x.pow(2) -> .mean(-1) -> + eps -> rsqrt -> x * r -> * gamma
//     LayerNorm  .mean(-1) -> x - mu -> .pow(2) -> .mean(-1) -> + eps -> rsqrt -> xc * r
//                -> * gamma -> + beta
//   each op computes in float32 from the stored operands and rounds its result to the format
//   once; a mean sums in float32 and divides by d before rounding (PyTorch's CPU mean for half
//   and bfloat16); eps enters rounded to the format (PyTorch's CPU add converts a Python scalar
//   to the tensor's dtype); torch.rsqrt of the one-element statistic rounds twice, sqrt and then
//   1/sqrt (PyTorch's scalar path).
//   norm_compute fp32 (F.layer_norm / F.rms_norm on a CPU half tensor): x as stored, every
//   statistic in float32 (eps as float32), only the output y rounded to the format.
//
// Sums in float32 here are the float32 value nearest the exact sum (order-free); PyTorch's
// vectorized cascade sum can differ from it by a float32 ulp, which scripts/torch_precision_check.py
// measures.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "normlab/kinds.h"
#include "normlab/precision.h"

namespace normlab::handcalc {

// One stored value beside its float64 truth.
struct StoredValue {
  double stored = 0;   // as the step's format holds it
  double exact = 0;    // float64, from the row as given
  double ulps = 0;     // (stored - exact) in ulps of the step's format at |exact|
  RoundingEvent event = RoundingEvent::exact;  // what rounding the float32 result did
};

struct PrecisionStep {
  std::string name;        // "x^2", "mean(x^2)", ...
  std::string op;          // as written in PyTorch: "x.pow(2)", ".mean(-1)", "+ eps", ...
  Precision stored_in = Precision::fp32;  // the format, or fp32 for an fp32-mode statistic
  bool per_element = false;
  std::vector<StoredValue> values;  // d values, or one for a statistic
};

// Why a norm's output is not finite, named from its first bad step.
enum class Breakdown : uint8_t {
  none,            // every output finite
  overflow,        // a finite float32 result rounded to inf (|v| above the format's max)
  eps_zero,        // var + eps stored as 0 with var computed as 0 (an all-equal row, or inputs
                   // that the format stores as equal): eps vanished in the format
  var_underflow,   // var + eps stored as 0 because the stored variance underflowed to 0
  nonfinite_input, // x itself does not fit the format
  inaccurate,      // every value finite, but y is off by more ulps (normwise) than the chain has
                   // steps: a deliberately loose bound (a rounding moves a value by half an ulp;
                   // the rest tolerates x's rounding amplified by a mean a few standard deviations
                   // from 0), so that what it flags cannot be held by the format at all (a spread
                   // below the spacing of the mean, squares in the subnormals)
};
}  // namespace normlab::handcalc
namespace normlab {
template <>
const EnumNames& enum_names<handcalc::Breakdown>();
}  // namespace normlab
namespace normlab::handcalc {

struct PrecisionNormWorksheet {
  NormKind norm = NormKind::layernorm;  // layernorm or rmsnorm
  Precision precision = Precision::fp16;
  NormCompute compute = NormCompute::format;
  std::vector<double> x, gamma, beta;  // as given (beta empty for RMSNorm)
  double eps = 0;
  double eps_stored = 0;        // eps rounded to the format: what the composite's + eps adds
  bool eps_rounds_to_zero = false;
  std::vector<PrecisionStep> steps;  // in order; the last is y
  bool output_finite = true;
  Breakdown breakdown = Breakdown::none;
  std::optional<std::size_t> first_bad_step;  // index of the first step with a non-finite value
                                              // or an overflow
  std::string diagnosis;        // one sentence naming the step and the cause
  // The largest |stored - exact| over y in ulps of the format at the RMS of exact y (normwise: an
  // output near 0 is not judged by its own tiny ulp); infinite or NaN when y is not finite.
  double max_abs_output_ulps = 0;
  // The mean of squares (RMSNorm) or of centred squares (LayerNorm) with the running sum kept in
  // the format instead of float32: what a kernel that accumulates in bf16/fp16 would get.
  double mean_with_format_accumulator = 0;
};

PrecisionNormWorksheet precision_norm_worksheet(NormKind norm, Precision precision,
                                                NormCompute compute, const std::vector<double>& x,
                                                const std::vector<double>& gamma,
                                                const std::vector<double>& beta, double eps);

// The built-in rows of docs/precision.md (--case), besides the worksheet's [2, -1, 0, 3].
struct PrecisionCase {
  std::string name;
  std::string what;           // one line: what it shows
  std::vector<double> x;
  double eps = 0;
};
const std::vector<PrecisionCase>& precision_cases();

struct PrecisionOptions {
  std::optional<std::string> x, eps, gamma, beta, norm, precision, norm_compute, case_name;
};
struct PrecisionWorksheet {
  std::string case_name;  // a built-in case, or "custom" when --x was given
  std::vector<PrecisionNormWorksheet> norms;  // LayerNorm, RMSNorm, or both
  bool gamma_default = true, beta_default = true;
};
// Errors are UsageErrors naming the option: an unknown --precision or --case, --case with --x,
// --norm-compute with fp32 (there is nothing to choose), --norm-compute fused (a training mode:
// handcalc shows format and fp32).
PrecisionWorksheet precision_worksheet_from_options(const PrecisionOptions& o);

std::string render_text(const PrecisionWorksheet& ws);
std::string render_json(const PrecisionWorksheet& ws);

}  // namespace normlab::handcalc
