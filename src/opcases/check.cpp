// Test mode: a case on a backend, on tensors resident on its device, against the reference
// backend in float64.
#include <algorithm>
#include <cmath>

#include "cases_internal.h"
#include "normlab/error.h"

namespace normlab::opcases {

namespace {

bool is_stored(const OpCase& c, const std::string& name) {
  return std::find(c.stored.begin(), c.stored.end(), name) != c.stored.end();
}

// The float32 inputs a backend under test gets (integer inputs as they are); with a 16-bit
// storage, the case's stored ones in it (as_stored) or their values rounded to it, in float32.
Tensors float32_inputs(const OpCase& c, const Tensors& in64, DType storage, bool as_stored) {
  Tensors t;
  for (const auto& [name, x] : in64.items()) {
    Tensor v = x.dtype() == DType::f64 ? x.to(DType::f32) : x;
    if (storage != DType::f32 && is_stored(c, name)) v = as_stored ? v.to(storage) : v.to(storage).to(DType::f32);
    t.set(name, v);
  }
  return t;
}

// The reference's outputs, in float64 (or the case's reference_dtype) from the float32 inputs'
// values.
Tensors reference_outputs(const OpCase& c, const Tensors& in32) {
  Tensors t;
  for (const auto& [name, x] : in32.items()) t.set(name, x.dtype() == DType::f32 ? x.to(c.reference_dtype) : x);
  for (const Output& o : c.outputs)
    t.set(o.name, Tensor::zeros(o.shape, o.dtype == DType::f64 ? DType::f64 : c.reference_dtype));
  c.call(backend("reference"), t);
  return t;
}

// The call on b with only the outputs `wanted`, each first filled with NaN on b's device (an
// element the kernel never writes stays NaN); the outputs come back to the host.
Tensors run_on(const OpCase& c, Backend& b, const CaseCall& call, const Tensors& in32,
               const std::vector<const Output*>& wanted, DType storage) {
  const Device dev = b.device();
  Tensors t;
  for (const auto& [name, x] : in32.items()) t.set(name, dev == Device::cpu ? x.clone() : x.to_device(dev));
  for (const Output* o : wanted) {
    Tensor e = Tensor::empty(o->shape, is_stored(c, o->name) ? storage : o->dtype, dev);
    e.fill_(NAN);
    t.set(o->name, e);
  }
  call(b, t);
  Tensors host;
  for (const Output* o : wanted) host.set(o->name, t.at(o->name).to_device(Device::cpu));
  return host;
}

// The same value, NaN equal to NaN and 0 apart from -0.
bool same_bits(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

// A tensor's values as float64 on the host (the same tensor when it is one already): read in
// place, not copied into a std::vector (bench norms checks cases of 10^8 values).
Tensor as_f64(const Tensor& t) {
  const Tensor h = t.device() == Device::cpu ? t : t.to_device(Device::cpu);
  return h.dtype() == DType::f64 ? h : h.to(DType::f64);
}

OutputCheck compare(const Output& o, const Tensor& got_t, const Tensor& want_t, double scale,
                    const std::vector<double>& scales = {}) {
  OutputCheck r;
  r.name = o.name;
  const Tensor got_d = as_f64(got_t), want_d = as_f64(want_t);
  NL_CHECK(got_d.numel() == want_d.numel(), "op case output {}: {} values, the reference has {}", o.name,
           got_d.numel(), want_d.numel());
  const double* got = got_d.data<double>();
  const double* want = want_d.data<double>();
  const double atol = o.tol.atol * scale;
  const bool exact = o.tol.atol == 0 && o.tol.rtol == 0;
  for (int64_t i = 0; i < got_d.numel(); ++i) {
    ++r.checked;
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const double diff = std::isnan(got[i]) != std::isnan(want[i]) ? INFINITY : std::fabs(got[i] - want[i]);
    if (!both_nan && diff > r.max_abs_err) r.max_abs_err = diff;
    const double tol = (scales.empty() ? atol : o.tol.atol * scales[static_cast<size_t>(i)]) + o.tol.rtol * std::fabs(want[i]);
    if (same_bits(got[i], want[i]) || (!exact && diff <= tol)) continue;
    if (++r.bad <= 3)
      r.first_bad += fmt::format(" [{}] got {:.9g} reference {:.9g} diff {:.3g} (tol {:.3g});", i, got[i], want[i],
                                 diff, tol);
  }
  return r;
}

// `got` of a run with fewer outputs wanted against `full`, of the run with all of them: the same
// bits.
OutputCheck compare_bits(const std::string& name, const Tensor& got_t, const Tensor& full_t) {
  OutputCheck r;
  r.name = name;
  const Tensor got_d = as_f64(got_t), full_d = as_f64(full_t);
  const double* got = got_d.data<double>();
  const double* full = full_d.data<double>();
  for (int64_t i = 0; i < got_d.numel(); ++i) {
    ++r.checked;
    if (same_bits(got[i], full[i])) continue;
    if (++r.bad <= 3) r.first_bad += fmt::format(" [{}] {:.9g}, with every output {:.9g};", i, got[i], full[i]);
  }
  return r;
}

void add(CaseCheck& check, OutputCheck o, const Output& spec, double scale) {
  if (o.bad) {
    check.pass = false;
    check.report += fmt::format("\n  {}: {} of {} values outside atol {:g}{} + rtol {:g}*|ref| (max diff {:.3g});{}",
                                o.name, o.bad, o.checked, spec.tol.atol,
                                scale < 0 ? "*sum_rows|term|" : scale != 1.0 ? fmt::format("*{:.4g}", scale) : "",
                                spec.tol.rtol, o.max_abs_err, o.first_bad);
    check.report.pop_back();
  }
  check.outputs.push_back(std::move(o));
}

// The case on b again with only the outputs `wanted`: each of `compared` the same bits as in
// `full`, the run with every output; `label` says what was left out.
void add_same_bits(CaseCheck& check, const OpCase& c, Backend& b, const CaseCall& call, const Tensors& in32,
                   const std::vector<const Output*>& wanted, const std::vector<const Output*>& compared,
                   const Tensors& full, const std::string& label, DType storage) {
  const Tensors got = run_on(c, b, call, in32, wanted, storage);
  for (const Output* o : compared) {
    Output exact = *o;
    exact.tol = tol::kExact;
    add(check, compare_bits(o->name + label, got.at(o->name), full.at(o->name)), exact, 1.0);
  }
}

}  // namespace

CaseCheck check_case(const OpCase& c, Backend& b) { return check_case(c, b, Precision::fp32); }

CaseCheck check_case(const OpCase& c, Backend& b, Precision storage) { return check_case(c, b, storage, c.call); }

CaseCheck check_case(const OpCase& c, Backend& b, Precision storage, const CaseCall& call, bool subsets) {
  const DType sd = storage_dtype(storage);
  NL_CHECK(sd == DType::f32 || !c.stored.empty(), "op case {}: no {} form", c.line(), to_string(storage));
  const Tensors in64 = c.inputs();
  const Tensors in32 = float32_inputs(c, in64, sd, true);
  const Tensors want = reference_outputs(c, float32_inputs(c, in64, sd, false));
  std::vector<const Output*> every, required, optional;
  for (const Output& o : c.outputs) {
    every.push_back(&o);
    (o.optional ? optional : required).push_back(&o);
  }
  const Tensors got = run_on(c, b, call, in32, every, sd);
  CaseCheck check;
  for (const Output& o : c.outputs) {
    const double scale = o.atol_scale ? o.atol_scale(in64) : 1.0;
    const std::vector<double> scales = o.atol_scales ? o.atol_scales(in64) : std::vector<double>();
    Output held = o;
    if (is_stored(c, o.name)) held.tol.rtol += tol::stored_half_ulp(storage);
    add(check, compare(held, got.at(o.name), want.at(o.name), scale, scales), held, scales.empty() ? scale : -1.0);
  }
  // A kernel skips what is not wanted and computes the rest the same way: each optional output
  // alone (beside the required ones), and the required ones with every optional one declined
  // (GELU's y without its derivative).
  if (!subsets) return check;
  if (optional.size() > 1)
    for (const Output* o : optional) {
      std::vector<const Output*> wanted = required;
      wanted.push_back(o);
      add_same_bits(check, c, b, call, in32, wanted, {o}, got, " alone", sd);
    }
  if (!optional.empty() && !required.empty()) {
    std::string without;
    for (const Output* o : optional) without += (without.empty() ? " without " : ", ") + o->name;
    add_same_bits(check, c, b, call, in32, required, required, got, without, sd);
  }
  return check;
}

}  // namespace normlab::opcases
