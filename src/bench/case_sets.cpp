// An op case's tensors as the bench times them: resident on a backend's device, in copies a
// call rotates through (memory-bound figures); and the rows of `bench norms` that call a
// backend's kernel through its op case, the same code on every device.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench_internal.h"
#include "normlab/error.h"

namespace normlab::bench::detail {

namespace {

using Clock = std::chrono::steady_clock;

bool is_stored(const opcases::OpCase& c, const std::string& name) {
  return std::find(c.stored.begin(), c.stored.end(), name) != c.stored.end();
}

opcases::Tensors copy_of(const opcases::Tensors& from) {
  opcases::Tensors to;
  for (const auto& [name, x] : from.items()) {
    Tensor t = Tensor::empty(x.shape(), x.dtype(), x.device());
    t.copy_(x);
    to.set(name, t);
  }
  return to;
}

}  // namespace

CaseSets::CaseSets(const opcases::OpCase& c, Backend& b, int64_t sets, Precision storage) : case_(c) {
  const Device dev = b.device();
  const DType stored = storage_dtype(storage);
  opcases::Tensors first;
  const opcases::Tensors drawn = c.inputs();
  for (const auto& [name, x] : drawn.items()) {
    Tensor v = x.dtype() == DType::f64 ? x.to(DType::f32) : x;
    if (stored != DType::f32 && is_stored(c, name)) v = v.to(stored);
    first.set(name, dev == Device::cpu ? v : v.to_device(dev));
  }
  for (const opcases::Output& o : c.outputs)
    first.set(o.name, Tensor::zeros(o.shape, is_stored(c, o.name) ? stored : o.dtype, dev));
  sets_.push_back(std::move(first));
  for (int64_t k = 1; k < sets; ++k) sets_.push_back(copy_of(sets_.front()));
}

int64_t CaseSets::count_for(const opcases::OpCase& c, int64_t footprint) {
  const int64_t per_set = std::max<int64_t>(1, opcases::case_bytes(c));
  return footprint > 0 ? std::max<int64_t>(1, (footprint + per_set - 1) / per_set) : 1;
}

void CaseSets::call(Backend& b, int64_t k) { case_.call(b, at(k)); }

void CaseSets::drain(Backend& b, int64_t k) {
  if (b.device() != Device::cpu) (void)at(k).at(case_.outputs.front().name).view_at(0, {1}).to_device(Device::cpu);
}

double CaseSets::time_calls(Backend& b, int64_t first, int64_t calls) {
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < calls; ++i) call(b, first + i);
  drain(b, first + calls - 1);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string norm_op(NormKind norm, Pass p) {
  const std::string name = to_string(norm);
  const std::string op = p == Pass::fwd ? name + "_fwd" : p == Pass::bwd ? name + "_bwd" : "add_" + name + "_fwd";
  const std::vector<std::string> ops = opcases::sized_ops();
  return std::find(ops.begin(), ops.end(), op) != ops.end() ? op : "";
}

namespace {

// A device's sample is a batch of calls on successive sets timed by the host's clock to the
// completion of the last (the queue drained), about this long, so that the drain's own cost (a
// synchronization and a 4-byte download) stays a small share of it.
constexpr double kDeviceSample = 2e-3;

std::function<double(int64_t)> device_timer(Backend& b, const std::shared_ptr<CaseSets>& sets) {
  auto batch = std::make_shared<int64_t>(0);
  return [&b, sets, batch](int64_t k) {
    if (*batch == 0)
      *batch = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kDeviceSample / sets->time_calls(b, k, 1))), 1, 10000);
    return sets->time_calls(b, k, *batch) / static_cast<double>(*batch);
  };
}

}  // namespace

std::string verified_summary(const opcases::CaseCheck& check) {
  const opcases::OutputCheck* worst = nullptr;
  for (const opcases::OutputCheck& o : check.outputs)
    if (!worst || o.max_abs_err > worst->max_abs_err) worst = &o;
  return worst ? fmt::format("max |diff| {:.2g} in {}", worst->max_abs_err, worst->name) : "no outputs";
}

Case backend_case(Backend& b, const opcases::OpCase& c, Precision storage, int64_t sets, NormRow row) {
  Case out;
  out.row = std::move(row);
  const opcases::CaseCheck check = opcases::check_case(c, b, storage);
  out.row.verify.pass = check.pass;
  for (const opcases::OutputCheck& o : check.outputs)
    if (o.max_abs_err >= out.row.verify.max_abs_err && !std::isnan(o.max_abs_err)) {
      out.row.verify.max_abs_err = o.max_abs_err;
      out.row.verify.worst_output = o.name;
    }
  if (!check.pass) {
    out.row.status = "rejected";
    out.row.verify.report = c.line() + check.report;
    return out;
  }
  const auto s = std::make_shared<CaseSets>(c, b, sets, storage);
  out.call = [&b, s](int64_t k) { s->call(b, k); };
  if (b.device() != Device::cpu) out.timed_call = device_timer(b, s);
  return out;
}

}  // namespace normlab::bench::detail
