// Test mode: a case on a backend, on tensors resident on its device, against the reference
// backend in float64.
#include <algorithm>
#include <cmath>

#include "cases_internal.h"
#include "normlab/error.h"

namespace normlab::opcases {

namespace {

// The float32 inputs a backend under test gets (integer inputs as they are).
Tensors float32_inputs(const Tensors& in64) {
  Tensors t;
  for (const auto& [name, x] : in64.items()) t.set(name, x.dtype() == DType::f64 ? x.to(DType::f32) : x);
  return t;
}

// The reference's outputs, in float64 from the float32 inputs' values.
Tensors reference_outputs(const OpCase& c, const Tensors& in32) {
  Tensors t;
  for (const auto& [name, x] : in32.items()) t.set(name, x.dtype() == DType::f32 ? x.to(DType::f64) : x);
  for (const Output& o : c.outputs) t.set(o.name, Tensor::zeros(o.shape, DType::f64));
  c.call(backend("reference"), t);
  return t;
}

// The call on b with only the outputs `wanted`, each first filled with NaN on b's device (an
// element the kernel never writes stays NaN); the outputs come back to the host.
Tensors run_on(const OpCase& c, Backend& b, const Tensors& in32, const std::vector<const Output*>& wanted) {
  const Device dev = b.device();
  Tensors t;
  for (const auto& [name, x] : in32.items()) t.set(name, dev == Device::cpu ? x.clone() : x.to_device(dev));
  for (const Output* o : wanted) {
    Tensor e = Tensor::empty(o->shape, DType::f32, dev);
    e.fill_(NAN);
    t.set(o->name, e);
  }
  c.call(b, t);
  Tensors host;
  for (const Output* o : wanted) host.set(o->name, t.at(o->name).to_device(Device::cpu));
  return host;
}

OutputCheck compare(const Output& o, const Tensor& got32, const Tensor& want64, double scale) {
  OutputCheck r;
  r.name = o.name;
  const std::vector<double> got = got32.to_vector(), want = want64.to_vector();
  NL_CHECK(got.size() == want.size(), "op case output {}: {} values, the reference has {}", o.name, got.size(),
           want.size());
  const double atol = o.tol.atol * scale;
  for (size_t i = 0; i < got.size(); ++i) {
    ++r.checked;
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const double diff = std::isnan(got[i]) != std::isnan(want[i]) ? INFINITY : std::fabs(got[i] - want[i]);
    if (!both_nan && diff > r.max_abs_err) r.max_abs_err = diff;
    const double tol = atol + o.tol.rtol * std::fabs(want[i]);
    if (both_nan || got[i] == want[i] || diff <= tol) continue;
    if (++r.bad <= 3)
      r.first_bad += fmt::format(" [{}] got {:.9g} reference {:.9g} diff {:.3g} (tol {:.3g});", i, got[i], want[i],
                                 diff, tol);
  }
  return r;
}

// The same bits, NaN equal to NaN.
OutputCheck compare_bits(const std::string& name, const Tensor& alone, const Tensor& full) {
  OutputCheck r;
  r.name = name + " alone";
  const float *a = alone.data<float>(), *f = full.data<float>();
  for (int64_t i = 0; i < alone.numel(); ++i) {
    ++r.checked;
    const bool same = (std::isnan(a[i]) && std::isnan(f[i])) || (a[i] == f[i] && std::signbit(a[i]) == std::signbit(f[i]));
    if (same) continue;
    if (++r.bad <= 3) r.first_bad += fmt::format(" [{}] alone {:.9g} with the others {:.9g};", i, a[i], f[i]);
  }
  return r;
}

void add(CaseCheck& check, OutputCheck o, const Output& spec, double scale) {
  if (o.bad) {
    check.pass = false;
    check.report += fmt::format("\n  {}: {} of {} values outside atol {:g}{} + rtol {:g}*|ref| (max diff {:.3g});{}",
                                o.name, o.bad, o.checked, spec.tol.atol, scale != 1.0 ? fmt::format("*{:.4g}", scale) : "",
                                spec.tol.rtol, o.max_abs_err, o.first_bad);
    check.report.pop_back();
  }
  check.outputs.push_back(std::move(o));
}

}  // namespace

CaseCheck check_case(const OpCase& c, Backend& b) {
  const Tensors in64 = c.inputs();
  const Tensors in32 = float32_inputs(in64);
  const Tensors want = reference_outputs(c, in32);
  std::vector<const Output*> every;
  for (const Output& o : c.outputs) every.push_back(&o);
  const Tensors got = run_on(c, b, in32, every);
  CaseCheck check;
  for (const Output& o : c.outputs) {
    const double scale = o.atol_scale ? o.atol_scale(in64) : 1.0;
    add(check, compare(o, got.at(o.name), want.at(o.name), scale), o, scale);
  }
  // Each gradient alone: the kernel skips what is not wanted and computes the rest the same way.
  const int optional = static_cast<int>(std::count_if(c.outputs.begin(), c.outputs.end(), [](const Output& o) { return o.optional; }));
  if (optional > 1)
    for (const Output& o : c.outputs) {
      if (!o.optional) continue;
      const Tensors alone = run_on(c, b, in32, {&o});
      Output exact = o;
      exact.tol = tol::kExact;
      add(check, compare_bits(o.name, alone.at(o.name), got.at(o.name)), exact, 1.0);
    }
  return check;
}

}  // namespace normlab::opcases
