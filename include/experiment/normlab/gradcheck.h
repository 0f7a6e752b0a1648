// Finite-difference checks of every op's backward and of whole blocks and models.
//
// For a case with differentiable inputs x_1..x_k and output y, the checked scalar is
// f = sum(y * R) with a fixed random R (R = 1 for a one-element y). The analytic gradient comes
// from y.backward(R); the numeric one from central differences in float64 on the reference
// backend, of fourth order with a step per input tensor (tolerances.h, tol::kFiniteDifference).
// A second check runs the same case in float32 on another backend (default "cpu") and compares
// its analytic gradients against the float64 reference gradients.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "normlab/opcases.h"
#include "normlab/tensor.h"

namespace normlab {

// Sizes a case is built with. Odd by default so that no size hides a transposed index.
struct CaseShape {
  int64_t batch = 2, time = 5, channels = 8, heads = 2, hidden = 12, vocab = 11, layers = 2;
};
// "BxTxC" (e.g. 2x8x64); throws UsageError.
CaseShape parse_case_shape(const std::string& text);

struct GradCase {
  std::string name;
  std::string kind;  // "op" or "composite"
  std::string description;
  // Same seed and shape -> same values whatever the dtype (values are drawn in double).
  std::function<CaseInstance(const CaseShape&, DType, uint64_t seed)> make;
};

// Every registered case, ops first then composites.
const std::vector<GradCase>& gradcheck_cases();
const GradCase& find_gradcheck_case(const std::string& name);  // UsageError if unknown

// Per input tensor: max_j |analytic_j - expected_j| <= atol + rtol * max_j |expected_j|.
// The scale is the tensor's largest gradient: element-wise relative errors blow up where a
// gradient crosses zero. The bounds and their reasons: tolerances.h (tol::kFiniteDifference, the
// steps below; tol::kFloat32Gradient).
constexpr double kStepNoise = 1e-8, kMaxStep = 1.0 / 64, kStepAgreement = 2e-8;
// A gradient that is zero in exact arithmetic comes out as noise: up to 6.2e-14 of the case's
// largest gradient (the key bias, seeds 0-7), allowed up to kZeroGradientFloor of it.
constexpr double kZeroGradientFloor = 1e-12;
// One input's numeric gradient, the step it was taken at and the noise allowed in it.
struct FiniteDifferenceStep {
  std::vector<double> gradient;
  double h = 0, spread = 0, noise = 0;
};
struct InputCheck {
  std::string input;
  Shape shape;
  double max_abs_err = 0;
  double max_rel_err = 0;  // max_abs_err / max |expected| (the tensor's gradient scale)
  int64_t worst_index = -1;
  double worst_analytic = 0, worst_numeric = 0;
  bool pass = true;
  double h = 0;      // fd64: the step of this input's differences
  double bound = 0;  // the largest max_abs_err that passes
};

struct CaseResult {
  std::string name, kind, check;  // check: "fd64" (finite differences), "<backend>-f32", "<backend>-bf16", ...
  std::vector<InputCheck> inputs;
  bool pass = true;
  double seconds = 0;
};

// The float32 check with activations and gradients stored in bf16 / fp16 (train's precision
// key, ops.h StoragePrecisionScope): each op rounds its output and its gradients once, so a
// gradient carries the roundings of every stored value it passed through, times the ops'
// conditioning. Measured over the cases at seeds 0-5 (fused and format): ops and blocks within
// 5-7 ulps of the format's epsilon (2^-7 bf16, 2^-10 fp16) of their gradient scale, the whole
// models (a dozen stored values deep) up to ~20 on their smallest-gradient tensors, hence rtol 16
// epsilon, those tensors passing by the floor below; and a gradient
// that is zero in exact arithmetic is allowed noise up to a tenth of that at the case's largest
// gradient (gradcheck.cpp). A missing term or a wrong one is off by O(1).
Tolerance low_precision_tolerance(Precision p);

struct GradcheckOptions {
  CaseShape shape;
  uint64_t seed = 0;
  double h = 1e-6;  // the smallest step of the finite differences
  Tolerance fd_tol = tol::kFiniteDifference;
  Tolerance f32_tol = tol::kFloat32Gradient;
  std::string f32_backend = "cpu";  // empty: skip the float32 check
  // The float32 check's storage (fp32: none) and how its norms run there.
  Precision precision = Precision::fp32;
  NormCompute norm_compute = NormCompute::fused;
};

// Central-difference check of one case on the reference backend in float64.
CaseResult check_finite_differences(const GradCase& c, const GradcheckOptions& opt);
// Analytic float32 gradients on opt.f32_backend vs analytic float64 reference gradients.
CaseResult check_float32_backend(const GradCase& c, const GradcheckOptions& opt);
// How many of the checks failed (0: every gradient agrees): the text's count, the JSON's and the
// exit status's "pass".
int failed_checks(const std::vector<CaseResult>& results);

// What the finite differences of a case at opt.shape cost on this machine: 8 forwards per input
// element, each timed here (a few forwards of the case, built at that shape).
struct GradcheckCost {
  int64_t forwards = 0;
  double forward_seconds = 0;
  double seconds = 0;  // forwards x forward_seconds
};
GradcheckCost estimate_gradcheck_cost(const GradCase& c, const GradcheckOptions& opt);
// Roughly the bytes the largest case (the gpt model, float64, with gradients) holds at `shape`.
double gradcheck_memory_bytes(const CaseShape& shape);
// Before any case runs at a --shape the user chose: the cases fit in memory and their finite
// differences together take at most max_seconds (estimated as above); a UsageError naming the
// shape, the case and the estimate otherwise.
void check_gradcheck_budget(const std::vector<const GradCase*>& cases, const GradcheckOptions& opt,
                            const std::string& shape_text, double max_seconds);
// Is this text a gradcheck --dump (for --force: normlab replaces only its own file)? Never throws.
bool is_gradcheck_dump(const std::string& text);

// Everything about one case as JSON text: inputs (and integer constants, hyperparameters), R, the
// float64 analytic and numeric gradients and, unless opt.f32_backend is empty, that backend's
// float32 analytic gradients (with opt.precision bf16 / fp16: stored in the format, the norms by
// opt.norm_compute, as the backend check computes them).
std::string gradcheck_dump_json(const GradCase& c, const GradcheckOptions& opt);
std::string gradcheck_results_json(const std::vector<CaseResult>& results, const GradcheckOptions& opt);
// The same as text for a person: one line per checked input (the worst element under a failed
// one), then the count of failed checks and the tolerances.
std::string gradcheck_results_text(const std::vector<CaseResult>& results, const GradcheckOptions& opt);
// `gradcheck --list`: every case, its kind and what it checks.
std::string gradcheck_cases_text();

}  // namespace normlab
