// The gradcheck engine: central differences (float64, reference backend) and the float32
// backend-vs-reference comparison. The cases themselves are in gradcheck_cases.cpp.
#include "normlab/gradcheck.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/rng.h"

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

// Rounding noise of a central difference: f = sum(y*R) is computed with an error of about
// eps * sum|y*R| (eps = 2^-52, times a small factor for the depth of the computation), and the
// difference divides that by 2h. Gradients that are exactly zero (a key bias: softmax ignores a
// shift of a whole row of scores) come out as this noise, so it is part of the bound.
double finite_difference_noise(const Tensor& y, const Tensor& seed, double h) {
  std::vector<double> a = y.to_vector(), b = seed.to_vector();
  double mag = 0;
  for (size_t i = 0; i < a.size(); ++i) mag += std::fabs(a[i] * b[i]);
  return 64 * 2.220446049250313e-16 * mag / (2 * h);
}

struct Analytic {
  CaseInstance inst;
  Tensor seed;
  std::vector<std::vector<double>> grads;  // per input; zeros where no gradient reached
};

Analytic analytic_gradients(const GradCase& c, const GradcheckOptions& opt, DType dtype) {
  Analytic a;
  a.inst = c.make(opt.shape, dtype, opt.seed);
  for (auto& [name, t] : a.inst.inputs) {
    NL_CHECK(t.is_leaf() && t.requires_grad(), "gradcheck case {}: input {} must be a leaf requiring grad", c.name,
             name);
    t.zero_grad();
  }
  Tensor y = a.inst.forward();
  a.seed = make_seed(y, opt.seed, dtype);
  y.backward(a.seed);
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
  ic.pass = ic.max_abs_err <= bound;
  return ic;
}

std::vector<std::vector<double>> numeric_gradients(CaseInstance& inst, const Tensor& seed, double h) {
  NoGradGuard no_grad;
  const std::vector<double> r = seed.to_vector();
  std::vector<std::vector<double>> out;
  for (auto& [name, t] : inst.inputs) {
    double* x = t.data<double>();
    std::vector<double> g(static_cast<size_t>(t.numel()));
    for (int64_t j = 0; j < t.numel(); ++j) {
      const double saved = x[j];
      x[j] = saved + h;
      const double fp = dot(inst.forward().to_vector(), r);
      x[j] = saved - h;
      const double fm = dot(inst.forward().to_vector(), r);
      x[j] = saved;
      g[static_cast<size_t>(j)] = (fp - fm) / (2 * h);
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

CaseResult check_finite_differences(const GradCase& c, const GradcheckOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  BackendScope scope("reference");
  CaseResult res{c.name, c.kind, "fd64", {}, true, 0};
  Analytic a = analytic_gradients(c, opt, DType::f64);
  auto numeric = numeric_gradients(a.inst, a.seed, opt.h);
  double noise;
  {
    NoGradGuard no_grad;
    noise = finite_difference_noise(a.inst.forward(), a.seed, opt.h);
  }
  for (size_t i = 0; i < a.inst.inputs.size(); ++i) {
    res.inputs.push_back(
        compare(a.inst.inputs[i].first, a.inst.inputs[i].second, a.grads[i], numeric[i], opt.fd_tol, noise));
    res.pass = res.pass && res.inputs.back().pass;
  }
  res.seconds = seconds_since(t0);
  return res;
}

CaseResult check_float32_backend(const GradCase& c, const GradcheckOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  CaseResult res{c.name, c.kind, opt.f32_backend + "-f32", {}, true, 0};
  Analytic ref;
  {
    BackendScope scope("reference");
    ref = analytic_gradients(c, opt, DType::f64);
  }
  BackendScope scope(opt.f32_backend);
  Analytic f32 = analytic_gradients(c, opt, DType::f32);
  for (size_t i = 0; i < f32.inst.inputs.size(); ++i) {
    res.inputs.push_back(compare(f32.inst.inputs[i].first, f32.inst.inputs[i].second, f32.grads[i], ref.grads[i],
                                 opt.f32_tol));
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
  auto numeric = numeric_gradients(a.inst, a.seed, opt.h);
  nlohmann::json j;
  j["case"] = c.name;
  j["description"] = c.description;
  j["dtype"] = "float64";
  j["seed"] = opt.seed;
  j["h"] = opt.h;
  j["checked_scalar"] = "f = sum(output * upstream)";
  j["output"] = {{"shape", y.shape()}, {"values", y.to_vector()}};
  j["upstream"] = {{"shape", a.seed.shape()}, {"values", a.seed.to_vector()}};
  for (size_t i = 0; i < a.inst.inputs.size(); ++i) {
    const auto& [name, t] = a.inst.inputs[i];
    j["inputs"].push_back({{"name", name},
                           {"shape", t.shape()},
                           {"values", t.to_vector()},
                           {"analytic_grad", a.grads[i]},
                           {"numeric_grad", numeric[i]}});
  }
  return j.dump(1);
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
  bool all = true;
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
                              {"pass", ic.pass}});
    }
    all = all && r.pass;
    j["results"].push_back(cr);
  }
  j["pass"] = all;
  return j.dump(2);
}

CaseShape parse_case_shape(const std::string& text) {
  CaseShape s;
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t x = text.find('x', pos);
    std::string tok = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    char* end = nullptr;
    long long val = std::strtoll(tok.c_str(), &end, 10);
    NL_USAGE(!tok.empty() && end && *end == '\0', "--shape '{}': '{}' is not a whole number (expected BxTxC, e.g. 2x5x8)",
             shown(text), shown(tok));
    NL_USAGE(val >= 1 && val <= 4096, "--shape '{}': {} is out of range 1..4096", shown(text), val);
    v.push_back(val);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  NL_USAGE(v.size() == 3, "--shape '{}' must have three sizes BxTxC (e.g. 2x5x8)", shown(text));
  s.batch = v[0];
  s.time = v[1];
  s.channels = v[2];
  if (s.channels % s.heads != 0) s.heads = 1;
  return s;
}

}  // namespace normlab
