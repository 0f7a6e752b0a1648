// Op cases: each kernel case declared once, read by three modes (ggml's test-backend-ops is the
// model):
//   test  every case on every backend that has the op (reference, cpu, cuda-sim, cuda), on
//         tensors resident on the backend's device, outputs NaN-poisoned first, against the
//         reference backend in float64 (check_case; tests/opcases runs them all);
//   grad  gradcheck's op cases (grad_forms: the op-level forward whose backward gradcheck checks
//         by finite differences);
//   perf  `normlab bench ops` times any case on any device through the Backend interface, each
//         verified by check_case before it is timed.
// A case is its line ("rmsnorm_fwd rows=7 d=65 eps=1e-06 seed=904": the op, then what makes its
// inputs), its inputs drawn from the seed, the Backend call, and each output's tolerance with its
// reason (tolerances.h). The line alone reproduces a case: find_case(line).
//
// Adding an op: its kernels (one per backend, and the reference), its cases and its grad form in
// one file of src/opcases (norm_cases.cpp is the pattern), and the layer that uses it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "normlab/backend.h"
#include "normlab/tensor.h"
#include "normlab/tolerances.h"

namespace normlab {

// One op-level instance of gradcheck: its differentiable leaves and the forward that recomputes
// the checked output from them.
struct CaseInstance {
  CaseInstance() = default;
  CaseInstance(std::vector<std::pair<std::string, Tensor>> in, std::function<Tensor()> fwd)
      : inputs(std::move(in)), forward(std::move(fwd)) {}

  std::vector<std::pair<std::string, Tensor>> inputs;  // differentiable leaves, named
  std::function<Tensor()> forward;                     // recomputes the output from the inputs
  // What else an outside program needs to recompute the case (gradcheck --dump writes it all):
  std::vector<std::pair<std::string, Tensor>> constants;  // integer inputs: token ids, targets
  std::map<std::string, double> numbers;                  // eps, alpha, heads, sizes
  std::map<std::string, std::string> names;               // model, norm, placement, init
};

namespace opcases {

// The tensors of one call, by name, in the order they were set: the inputs, then the outputs.
class Tensors {
 public:
  void set(const std::string& name, Tensor t);
  bool has(const std::string& name) const;
  Tensor& at(const std::string& name);  // throws Error naming a tensor the case does not have
  const Tensor& at(const std::string& name) const;
  // An optional input: undefined when absent (a DyT has no shift).
  Tensor get(const std::string& name) const;
  // An optional output: nullptr when absent (a gradient not wanted).
  Tensor* out(const std::string& name);
  void erase(const std::string& name);
  std::vector<std::pair<std::string, Tensor>>& items() { return items_; }
  const std::vector<std::pair<std::string, Tensor>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, Tensor>> items_;
};

struct Output {
  Output(std::string name_, Shape shape_, Tolerance tol_, bool optional_ = false,
         std::function<double(const Tensors& in64)> atol_scale_ = {}, DType dtype_ = DType::f32)
      : name(std::move(name_)), shape(std::move(shape_)), tol(tol_), optional(optional_), atol_scale(std::move(atol_scale_)),
        dtype(dtype_) {}
  std::string name;
  Shape shape;
  Tolerance tol;
  // A gradient a caller may decline (nullptr): the test mode also asks for it alone and wants the
  // same bits.
  bool optional = false;
  // What tol.atol is relative to, from the float64 inputs: the magnitude a full sum passes
  // through (sum |terms|), where the result cancels. Unset: 1.
  std::function<double(const Tensors& in64)> atol_scale;
  // The same per element, for a column sum over rows (dgamma over N rows): each column's sum of
  // |terms|, from the float64 inputs; unset: atol_scale. Set with per_column().
  std::function<std::vector<double>(const Tensors& in64)> atol_scales;
  Output& per_column(std::function<std::vector<double>(const Tensors& in64)> scales) {
    atol_scales = std::move(scales);
    return *this;
  }
  // What the backend under test writes: float32, or float64 for what a kernel returns rather than
  // writes (sum_squares' double, format_census' counts), which the call stores with fill_.
  DType dtype = DType::f32;
};

struct OpCase {
  std::string op;      // "rmsnorm_fwd": the kernel it calls; a test and a bench row are named by it
  std::string params;  // "rows=7 d=65 eps=1e-06 seed=904"
  std::string line() const { return op + " " + params; }
  // The inputs, drawn in double from the case's seed (float64 tensors; every mode converts them).
  std::function<Tensors()> inputs;
  std::vector<Output> outputs;
  // The Backend call on `t` (inputs and the outputs present; an absent optional output is
  // nullptr). Integer inputs stay int32.
  std::function<void(Backend&, Tensors& t)> call;
  // The dtype the reference runs the case in: float64, or float32 for a kernel defined by float32
  // arithmetic (the composite norm emulating a 16-bit format, the census of float32 values), whose
  // float32 reference every backend matches bit for bit.
  DType reference_dtype = DType::f64;
  // Floating-point operations of one call, counted as the reference's arithmetic (a tanh or an
  // erf as one): what bench ops divides by the time.
  double flops = 0;
  // The scalars the call passes besides its tensors ("eps", the add+norm's "alpha"): what another
  // implementation of the same op (a bench baseline) needs to make the same call.
  std::vector<std::pair<std::string, double>> numbers;
  double number(const std::string& name) const;  // throws Error naming a scalar the case does not have
  // The tensors (inputs and outputs) a backend holds in a 16-bit storage format when a call runs
  // at one (bench norms --dtypes bf16 on a device): the row arrays and the parameters, not the
  // float32 statistics and parameter gradients. Empty: the op has no 16-bit form.
  std::vector<std::string> stored;
};

// Every case, ops in registry order.
const std::vector<OpCase>& all_cases();
// The ops (each case's `op`), in registry order, each once.
std::vector<std::string> op_names();
// The case whose line is `line`; throws UsageError naming the op's first cases when none is.
// For an op of rows x d (the norms and add+norm), a line of any size is made to
// order: "rmsnorm_fwd rows=16384 d=1024" (seed 0 unless given; any other word, such as eps,
// must be the one the op's cases write); copy and scale take n= (or rows= and d=); a product takes
// its shape: "matmul m=768 n=384 k=128 tb=1" (batch 1, ab=1 bb=1, the other flags and seed 0
// unless given).
const OpCase& find_case(const std::string& line);
// The ops a case of any rows x d can be made for.
std::vector<std::string> sized_ops();
// Cases selected by patterns: "all", an op ("rmsnorm_fwd"), an op family prefix ("rmsnorm"), or a
// whole line (of any size for sized_ops(), of any shape for matmul, as find_case makes them). Throws UsageError for a
// pattern that selects nothing.
std::vector<const OpCase*> select_cases(const std::vector<std::string>& patterns);

// Bytes one call moves at `dtype` storage: every input read once and every output written once
// (index tensors at 4 bytes).
int64_t case_bytes(const OpCase& c, DType dtype = DType::f32);

// ---- test mode ---------------------------------------------------------------------------
struct OutputCheck {
  std::string name;
  int64_t checked = 0, bad = 0;
  double max_abs_err = 0;
  std::string first_bad;  // "[3] got 1.5 reference 1.25 diff 0.25 (tol 1e-05)", at most a few
};
struct CaseCheck {
  bool pass = true;
  std::vector<OutputCheck> outputs;
  // One line per failing output, after the case's line: what a test prints.
  std::string report;
};
// The case on `b` (its tensors resident on b's device, float32 inputs, outputs poisoned with
// NaN) against the reference backend in float64 (its reference_dtype) on the same float32 inputs;
// each optional output also alone, and the required outputs with every optional one declined (the
// same bits wanted). A kExact output matches bit for bit, the sign of a zero included.
CaseCheck check_case(const OpCase& c, Backend& b);
// The same with c.stored held in `storage` (bf16 or fp16) on b: the reference computes from the
// values rounded to it, and an output stored in it may differ by half its ulp more.
CaseCheck check_case(const OpCase& c, Backend& b, Precision storage);
// The same with `call` in place of c.call on b: another implementation of the op (a bench
// baseline on the cpu's arrays) checked as the backends are.
// subsets false: the call with every output only (bench norms' check of a row before it is timed,
// on cases of 10^8 values: the subsets of the optional outputs are the test mode's business).
using CaseCall = std::function<void(Backend&, Tensors&)>;
CaseCheck check_case(const OpCase& c, Backend& b, Precision storage, const CaseCall& call, bool subsets = true);

// ---- grad mode ---------------------------------------------------------------------------
// The sizes a grad form is built with: gradcheck's (CaseShape) less its layers. x is (batch, time,
// channels), the last dimension normalized; a form that needs no other size takes x's shape alone
// (the conversion).
struct GradSizes {
  int64_t batch = 0, time = 0, channels = 0, heads = 0, hidden = 0, vocab = 0;
  Shape x() const { return {batch, time, channels}; }
  operator Shape() const { return x(); }
};

// An op-level form of an op family, as gradcheck checks it: its inputs of `sizes` as its cases
// draw them, in `dtype`, requiring gradients.
struct GradForm {
  std::string name;         // gradcheck's --op name: "layernorm"
  std::string description;  // one line
  std::function<CaseInstance(const GradSizes& sizes, DType dtype, uint64_t seed)> make;
};
const std::vector<GradForm>& grad_forms();

}  // namespace opcases
}  // namespace normlab
