// The gradcheck engine: central differences (float64, reference backend) and the float32
// backend-vs-reference comparison. The cases themselves are in gradcheck_cases.cpp.
#include "normlab/gradcheck.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <cmath>
#include <nlohmann/json.hpp>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/ops.h"
#include "normlab/config.h"
#include "normlab/parse.h"
#include "normlab/rng.h"
#include "normlab/system.h"

namespace normlab {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The upstream gradient R, drawn in double from its own stream so that it is the same in
// the float64 and float32 runs.
Tensor make_seed(const Tensor& y, uint64_t seed, DType dtype) {
  if (y.numel() == 1) return Tensor::full_on(y.shape(), 1.0, dtype, Device::cpu);
  Rng rng(seed ^ 0x9e3779b97f4a7c15ULL, stream::check);
  std::vector<double> r(static_cast<size_t>(y.numel()));
  for (double& v : r) v = rng.normal();
  return Tensor::from(r, y.shape(), dtype);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The rounding error of f = sum(y*R) itself: about eps * sum|y*R| (eps = 2^-52, times a small
// factor for the depth of the computation). A difference quotient divides it by its step.
double f_rounding_error(const Tensor& y, const Tensor& seed) {
  std::vector<double> a = y.to_vector(), b = seed.to_vector();
  double mag = 0;
  for (size_t i = 0; i < a.size(); ++i) mag += std::fabs(a[i] * b[i]);
  return 64 * 2.220446049250313e-16 * mag;
}

struct Analytic {
  CaseInstance inst;
  Tensor seed;
  std::vector<std::vector<double>> grads;  // per input; zeros where no gradient reached
};

// On `device` the case's inputs and constants are moved there first, so that every op runs on
// that device's backend; the gradients are downloaded.
Analytic analytic_gradients(const GradCase& c, const GradcheckOptions& opt, DType dtype, Device device = Device::cpu) {
  Analytic a;
  a.inst = c.make(opt.shape, dtype, opt.seed);
  for (auto& [name, t] : a.inst.inputs) t.move_to_device_(device);
  for (auto& [name, t] : a.inst.constants) t.move_to_device_(device);
  for (auto& [name, t] : a.inst.inputs) {
    NL_CHECK(t.is_leaf() && t.requires_grad(), "gradcheck case {}: input {} must be a leaf requiring grad", c.name,
             name);
    t.zero_grad();
  }
  Tensor y = a.inst.forward();
  a.seed = make_seed(y, opt.seed, dtype);
  // In low precision R is y's gradient, stored in y's format as every gradient is (as PyTorch's
  // y.backward takes it in y's dtype): rounded in float32 storage (the emulation), or made in the
  // 16-bit dtype itself where a CUDA device stores activations natively.
  Tensor r = a.seed.clone();
  if (is_16bit(y.dtype())) r = make_seed(y, opt.seed, y.dtype());
  else if (y.impl().format != Precision::fp32)
    run_kernel(backend_for(Device::cpu, r.dtype()), RoundToFormat{r, y.impl().format});
  y.backward(device == Device::cpu ? r : r.to_device(device));
  for (auto& [name, t] : a.inst.inputs) {
    Tensor g = t.grad();
    a.grads.push_back(g.defined() ? g.to_vector() : std::vector<double>(static_cast<size_t>(t.numel()), 0.0));
  }
  return a;
}

// Errors are measured against the scale of the input's gradient (its largest |expected|):
// an element-wise relative error is meaningless where a gradient crosses zero, and an absolute
// one alone is meaningless for a tensor whose gradients are all tiny.
// `noise` is an absolute error the expected values themselves carry (finite-difference rounding).
InputCheck compare(const std::string& name, const Tensor& input, const std::vector<double>& analytic,
                   const std::vector<double>& expected, Tolerance tol, double noise = 0) {
  InputCheck ic;
  ic.input = name;
  ic.shape = input.shape();
  double scale = 0;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  const double bound = tol.atol + tol.rtol * scale + noise;
  for (size_t j = 0; j < analytic.size(); ++j) {
    double err = std::fabs(analytic[j] - expected[j]);
    if (!std::isfinite(analytic[j]) || !std::isfinite(expected[j]) || std::isnan(err)) err = INFINITY;
    if (ic.worst_index < 0 || err > ic.max_abs_err) {
      ic.max_abs_err = err;
      ic.worst_index = static_cast<int64_t>(j);
      ic.worst_analytic = analytic[j];
      ic.worst_numeric = expected[j];
    }
  }
  ic.max_rel_err = scale > 0 ? ic.max_abs_err / scale : (ic.max_abs_err > 0 ? INFINITY : 0.0);
  ic.bound = bound;
  ic.pass = ic.max_abs_err <= bound;
  return ic;
}

// One input's central differences at step h, fourth order:
// (8 (f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))) / 12h, truncation error O(h^4 f^(5)).
std::vector<double> differences(CaseInstance& inst, Tensor& t, const std::vector<double>& r, double h) {
  NoGradGuard no_grad;
  double* x = t.data<double>();
  auto f_at = [&](int64_t j, double v) {
    x[j] = v;
    return dot(inst.forward().to_vector(), r);
  };
  std::vector<double> g(static_cast<size_t>(t.numel()));
  for (int64_t j = 0; j < t.numel(); ++j) {
    const double saved = x[j];
    const double near = f_at(j, saved + h) - f_at(j, saved - h);
    const double far = f_at(j, saved + 2 * h) - f_at(j, saved - 2 * h);
    x[j] = saved;
    g[static_cast<size_t>(j)] = (8 * near - far) / (12 * h);
  }
  return g;
}

// The first step tried for a tensor whose gradients reach `scale`: f's rounding error e, divided
// by the step (at most 1.5 e / h), is kStepNoise of the scale; a power of two (x +- h, x +- 2h
// then exact), at most kMaxStep.
double first_step(double f_error, double scale, double h_min) {
  double h = kMaxStep;
  if (scale > 0) h = std::min(kMaxStep, 1.5 * f_error / (kStepNoise * scale));
  return std::exp2(std::ceil(std::log2(std::max(h, h_min))));
}

// Differences at halving steps until two in a row agree within kStepAgreement of the tensor's
// scale (plus `floor`): a curved function (a norm of a near-zero row) needs a small step, a
// tensor of small gradients a large one. Where they never agree that closely, the pair that
// agreed best, once halving makes it worse (rounding then outgrows truncation). The spread of
// the pair measures the error left.
FiniteDifferenceStep numeric_gradient(CaseInstance& inst, Tensor& t, const std::vector<double>& r, double h,
                                      double h_min, double scale, double floor) {
  FiniteDifferenceStep best;
  std::vector<double> prev = differences(inst, t, r, h);
  for (h /= 2; h >= h_min; h /= 2) {
    FiniteDifferenceStep cur{differences(inst, t, r, h), h, 0, 0};
    for (size_t j = 0; j < prev.size(); ++j) cur.spread = std::max(cur.spread, std::fabs(cur.gradient[j] - prev[j]));
    const bool better = best.gradient.empty() || cur.spread < best.spread;
    if (!better) return best;
    prev = cur.gradient;
    best = std::move(cur);
    if (best.spread <= kStepAgreement * scale + floor) return best;
  }
  if (best.gradient.empty()) best = {prev, 2 * h, 0, 0};  // h_min itself: one step, no pair
  return best;
}

std::vector<FiniteDifferenceStep> numeric_gradients(CaseInstance& inst, const Tensor& seed,
                                                    const std::vector<std::vector<double>>& analytic, double h_min) {
  double f_error;
  {
    NoGradGuard no_grad;
    f_error = f_rounding_error(inst.forward(), seed);
  }
  std::vector<double> scales;
  for (const std::vector<double>& g : analytic) {
    double scale = 0;
    for (double v : g) scale = std::max(scale, std::fabs(v));
    scales.push_back(scale);
  }
  // A gradient that is zero in exact arithmetic (the key bias: softmax ignores a shift of a row
  // of scores) comes out as rounding noise: allowed up to kZeroGradientFloor of the case's largest.
  const double floor = kZeroGradientFloor * *std::max_element(scales.begin(), scales.end());
  const std::vector<double> r = seed.to_vector();
  std::vector<FiniteDifferenceStep> out;
  for (size_t i = 0; i < inst.inputs.size(); ++i) {
    out.push_back(numeric_gradient(inst, inst.inputs[i].second, r, first_step(f_error, scales[i], h_min), h_min,
                                   scales[i], floor));
    out.back().noise = 2 * out.back().spread + floor;
  }
  return out;
}

}  // namespace

CaseResult check_finite_differences(const GradCase& c, const GradcheckOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  BackendScope scope("reference");
  CaseResult res{c.name, c.kind, "fd64", {}, true, 0};
  Analytic a = analytic_gradients(c, opt, DType::f64);
  const std::vector<FiniteDifferenceStep> steps = numeric_gradients(a.inst, a.seed, a.grads, opt.h);
  for (size_t i = 0; i < a.inst.inputs.size(); ++i) {
    res.inputs.push_back(compare(a.inst.inputs[i].first, a.inst.inputs[i].second, a.grads[i], steps[i].gradient,
                                 opt.fd_tol, steps[i].noise));
    res.inputs.back().h = steps[i].h;
    res.pass = res.pass && res.inputs.back().pass;
  }
  res.seconds = seconds_since(t0);
  return res;
}

// The gpt model's activations: a dozen (B, T, C) tensors and (B, T, T) attention per head, plus
// (C, 4C) weights.
double gradcheck_memory_bytes(const CaseShape& shape) {
  const double B = double(shape.batch), T = double(shape.time), C = double(shape.channels);
  return 8.0 * 2 * (64 * B * T * C + 16 * C * C + 8 * B * T * T);
}

GradcheckCost estimate_gradcheck_cost(const GradCase& c, const GradcheckOptions& opt) {
  BackendScope scope("reference");
  NoGradGuard no_grad;
  GradcheckCost cost;
  CaseInstance inst = c.make(opt.shape, DType::f64, opt.seed);
  // Two steps at least (kStepAgreement), four forwards each.
  for (const auto& [name, t] : inst.inputs) cost.forwards += 8 * t.numel();
  // Timed on this machine: a few forwards, or one if a single one is already slow.
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  do {
    (void)inst.forward();
    ++n;
  } while (n < 3 && seconds_since(t0) < 0.05);
  cost.forward_seconds = seconds_since(t0) / static_cast<double>(n);
  cost.seconds = static_cast<double>(cost.forwards) * cost.forward_seconds;
  return cost;
}

void check_gradcheck_budget(const std::vector<const GradCase*>& cases, const GradcheckOptions& opt,
                            const std::string& shape_text, double max_seconds) {
  const std::string excess = memory_budget_excess(gradcheck_memory_bytes(opt.shape));
  NL_USAGE(excess.empty(), "--shape {}: the cases {}", shown(shape_text), excess);
  double total = 0;
  for (const GradCase* c : cases) {
    const GradcheckCost cost = estimate_gradcheck_cost(*c, opt);
    total += cost.seconds;
    NL_USAGE(total <= max_seconds,
             "--shape {}: the finite differences of {} alone take {} forward passes of about {:.3g} ms each here, "
             "about {:.0f} s{}, more than the --max-seconds budget of {:.0f} s: use a smaller --shape or raise "
             "--max-seconds",
             shown(shape_text), c->name, cost.forwards, 1e3 * cost.forward_seconds, cost.seconds,
             cases.size() > 1 ? fmt::format(" ({:.0f} s with the cases before it)", total) : std::string(), max_seconds);
  }
}

Tolerance low_precision_tolerance(Precision p) {
  const double eps = format_info(p).epsilon;
  return {0, 16 * eps};
}

CaseResult check_float32_backend(const GradCase& c, const GradcheckOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  const bool narrow = opt.precision != Precision::fp32;
  CaseResult res{c.name, c.kind, opt.f32_backend + "-" + (narrow ? to_string(opt.precision) : "f32"), {}, true, 0};
  const Tolerance tol = narrow ? low_precision_tolerance(opt.precision) : opt.f32_tol;
  Analytic ref;
  {
    BackendScope scope("reference");
    ref = analytic_gradients(c, opt, DType::f64);
  }
  // A device backend (cuda, cuda-sim) gets the case's tensors on its device; a host backend is
  // made the backend of host tensors.
  const Device device = backend(opt.f32_backend).device();
  std::unique_ptr<BackendScope> scope;
  if (device == Device::cpu) scope = std::make_unique<BackendScope>(opt.f32_backend);
  Analytic f32;
  {
    StoragePrecisionScope storage(opt.precision, std::nullopt, opt.norm_compute);
    f32 = analytic_gradients(c, opt, DType::f32, device);
  }
  // In 16 bits, a gradient that is zero in exact arithmetic (the key bias: softmax ignores a
  // shift of a whole row of scores) comes out as the rounding noise of the values it was summed
  // from: up to ~1e-3 of the case's gradient scale in bf16. Such noise is allowed up to a tenth
  // of the rtol bound at the case's largest gradient.
  double floor = 0;
  if (narrow)
    for (const auto& g : ref.grads)
      for (double v : g) floor = std::max(floor, 0.1 * tol.rtol * std::fabs(v));
  for (size_t i = 0; i < f32.inst.inputs.size(); ++i) {
    res.inputs.push_back(compare(f32.inst.inputs[i].first, f32.inst.inputs[i].second, f32.grads[i], ref.grads[i],
                                 tol, floor));
    res.pass = res.pass && res.inputs.back().pass;
  }
  res.seconds = seconds_since(t0);
  return res;
}

std::string gradcheck_dump_json(const GradCase& c, const GradcheckOptions& opt) {
  BackendScope scope("reference");
  Analytic a = analytic_gradients(c, opt, DType::f64);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = a.inst.forward();
  }
  const std::vector<FiniteDifferenceStep> steps = numeric_gradients(a.inst, a.seed, a.grads, opt.h);
  Analytic f32;
  if (!opt.f32_backend.empty()) {
    const Device device = backend(opt.f32_backend).device();
    std::unique_ptr<BackendScope> f32_scope;
    if (device == Device::cpu) f32_scope = std::make_unique<BackendScope>(opt.f32_backend);
    // With --precision, in the format as the backend check runs it (what a PyTorch script
    // compares with its own autograd in that dtype).
    StoragePrecisionScope storage(opt.precision, std::nullopt, opt.norm_compute);
    f32 = analytic_gradients(c, opt, DType::f32, device);
  }
  nlohmann::json j;
  j["case"] = c.name;
  j["description"] = c.description;
  j["dtype"] = to_string(DType::f64);
  j["seed"] = opt.seed;
  j["h"] = opt.h;
  j["checked_scalar"] = "f = sum(output * upstream)";
  j["output"] = {{"shape", y.shape()}, {"values", y.to_vector()}};
  j["upstream"] = {{"shape", a.seed.shape()}, {"values", a.seed.to_vector()}};
  j["hyperparameters"] = nlohmann::json::object();
  for (const auto& [k, v] : a.inst.numbers) j["hyperparameters"][k] = v;
  for (const auto& [k, v] : a.inst.names) j["hyperparameters"][k] = v;
  j["constants"] = nlohmann::json::array();
  for (const auto& [name, t] : a.inst.constants) {
    std::vector<int64_t> ids;
    for (double v : t.to_vector()) ids.push_back(static_cast<int64_t>(v));
    j["constants"].push_back({{"name", name}, {"dtype", to_string(t.dtype())}, {"shape", t.shape()}, {"values", ids}});
  }
  if (!opt.f32_backend.empty()) j["f32_backend"] = opt.f32_backend;
  if (!opt.f32_backend.empty() && opt.precision != Precision::fp32) {
    j["precision"] = to_string(opt.precision);
    j["norm_compute"] = to_string(opt.norm_compute);
  }
  for (size_t i = 0; i < a.inst.inputs.size(); ++i) {
    const auto& [name, t] = a.inst.inputs[i];
    nlohmann::json in{{"name", name},
                      {"shape", t.shape()},
                      {"values", t.to_vector()},
                      {"analytic_grad", a.grads[i]},
                      {"numeric_grad", steps[i].gradient},
                      {"numeric_h", steps[i].h}};
    if (!opt.f32_backend.empty()) in["f32_analytic_grad"] = f32.grads[i];
    j["inputs"].push_back(in);
  }
  return j.dump(1);
}

bool is_gradcheck_dump(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  return j.is_object() && j.contains("case") && j["case"].is_string() && j.contains("inputs") &&
         j["inputs"].is_array() && j.value("checked_scalar", nlohmann::json()) == "f = sum(output * upstream)";
}

int failed_checks(const std::vector<CaseResult>& results) {
  return static_cast<int>(std::count_if(results.begin(), results.end(), [](const CaseResult& r) { return !r.pass; }));
}

std::string gradcheck_results_json(const std::vector<CaseResult>& results, const GradcheckOptions& opt) {
  nlohmann::json j;
  j["seed"] = opt.seed;
  j["h"] = opt.h;
  j["shape"] = {{"batch", opt.shape.batch}, {"time", opt.shape.time}, {"channels", opt.shape.channels},
                {"heads", opt.shape.heads}, {"hidden", opt.shape.hidden}, {"vocab", opt.shape.vocab},
                {"layers", opt.shape.layers}};
  j["tolerance"] = {{"fd64", {{"atol", opt.fd_tol.atol}, {"rtol", opt.fd_tol.rtol}}},
                    {"f32", {{"atol", opt.f32_tol.atol}, {"rtol", opt.f32_tol.rtol}}}};
  if (opt.precision != Precision::fp32) {
    const Tolerance t = low_precision_tolerance(opt.precision);
    j["precision"] = to_string(opt.precision);
    j["norm_compute"] = to_string(opt.norm_compute);
    j["tolerance"][to_string(opt.precision)] = {{"atol", t.atol}, {"rtol", t.rtol}};
  }
  j["results"] = nlohmann::json::array();
  for (const CaseResult& r : results) {
    nlohmann::json cr{{"case", r.name}, {"kind", r.kind}, {"check", r.check}, {"pass", r.pass}, {"seconds", r.seconds}};
    for (const InputCheck& ic : r.inputs) {
      cr["inputs"].push_back({{"input", ic.input},
                              {"shape", ic.shape},
                              {"max_abs_err", ic.max_abs_err},
                              {"max_rel_err", ic.max_rel_err},
                              {"worst_index", ic.worst_index},
                              {"worst_analytic", ic.worst_analytic},
                              {"worst_expected", ic.worst_numeric},
                              {"h", ic.h},
                              {"bound", ic.bound},
                              {"pass", ic.pass}});
    }
    j["results"].push_back(cr);
  }
  j["pass"] = failed_checks(results) == 0;
  return j.dump(2);
}

CaseShape parse_case_shape(const std::string& text) {
  // Finite differences cost two forwards per input element: 4096 per size is already minutes.
  const std::array<int64_t, 3> v = parse_shape3(text, "--shape", "BxTxC", 4096, int64_t{1} << 24);
  CaseShape s;
  s.batch = v[0];
  s.time = v[1];
  s.channels = v[2];
  if (s.channels % s.heads != 0) s.heads = 1;
  return s;
}

}  // namespace normlab
