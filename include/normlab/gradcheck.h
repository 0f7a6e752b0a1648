// Finite-difference checks of every op's backward and of whole blocks and models.
//
// For a case with differentiable inputs x_1..x_k and output y, the checked scalar is
// f = sum(y * R) with a fixed random R (R = 1 for a one-element y). The analytic gradient comes
// from y.backward(R); the numeric one from central differences in float64 on the reference
// backend: (f(x + h e_j) - f(x - h e_j)) / 2h, h = 1e-6.
// A second check runs the same case in float32 on another backend (default "cpu") and compares
// its analytic gradients against the float64 reference gradients.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "normlab/tensor.h"

namespace normlab {

// Sizes a case is built with. Odd by default so that no size hides a transposed index.
struct CaseShape {
  int64_t batch = 2, time = 5, channels = 8, heads = 2, hidden = 12, vocab = 11, layers = 2;
};
// "BxTxC" (e.g. 2x8x64); throws UsageError.
CaseShape parse_case_shape(const std::string& text);

struct CaseInstance {
  std::vector<std::pair<std::string, Tensor>> inputs;  // differentiable leaves, named
  std::function<Tensor()> forward;                     // recomputes the output from the inputs
};

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

struct Tolerance {
  double atol, rtol;  // |analytic - numeric| <= atol + rtol*|numeric|, per element
};
// Documented in README: f64 central differences with h = 1e-6 have truncation error O(h^2) ~1e-12
// and rounding error ~1e-16*|f|/h ~1e-10*|f|.
constexpr Tolerance kFiniteDifferenceTol{1e-6, 1e-5};
// float32 kernels vs float64: float32 rounding (6e-8) grows with the reduction length and with the
// depth of the composite.
constexpr Tolerance kFloat32Tol{2e-4, 2e-3};

struct InputCheck {
  std::string input;
  Shape shape;
  double max_abs_err = 0, max_rel_err = 0;
  int64_t worst_index = -1;
  double worst_analytic = 0, worst_numeric = 0;
  bool pass = true;
};

struct CaseResult {
  std::string name, kind, check;  // check: "fd64" (finite differences) or "<backend>-f32"
  std::vector<InputCheck> inputs;
  bool pass = true;
  double seconds = 0;
};

struct GradcheckOptions {
  CaseShape shape;
  uint64_t seed = 0;
  double h = 1e-6;
  Tolerance fd_tol = kFiniteDifferenceTol;
  Tolerance f32_tol = kFloat32Tol;
  std::string f32_backend = "cpu";  // empty: skip the float32 check
};

// Central-difference check of one case on the reference backend in float64.
CaseResult check_finite_differences(const GradCase& c, const GradcheckOptions& opt);
// Analytic float32 gradients on opt.f32_backend vs analytic float64 reference gradients.
CaseResult check_float32_backend(const GradCase& c, const GradcheckOptions& opt);

// Everything about one case as JSON text: inputs, R, analytic and numeric gradients.
std::string gradcheck_dump_json(const GradCase& c, const GradcheckOptions& opt);
std::string gradcheck_results_json(const std::vector<CaseResult>& results, const GradcheckOptions& opt);

}  // namespace normlab
