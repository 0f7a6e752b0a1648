// An op case's tensors as the bench times them: resident on a backend's device, in copies a
// call rotates through (memory-bound figures); and the rows of `bench norms` that call a
// backend's kernel through its op case, the same code on every device.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

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

namespace {

// 64 bits of a tensor's bytes (on the host): equal values give equal keys; two different draws of
// the same shape collide with probability ~2^-64.
uint64_t fingerprint(const Tensor& t) {
  const Tensor h = t.device() == Device::cpu ? t : t.to_device(Device::cpu);
  const auto* p = static_cast<const unsigned char*>(h.raw());
  const size_t n = h.nbytes();
  uint64_t x = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    x = (x ^ w) * 0xff51afd7ed558ccdull;
    x ^= x >> 32;
  }
  for (; i < n; ++i) x = (x ^ p[i]) * 0x100000001b3ull;
  return x;
}

std::string shape_key(const std::string& name, const Shape& shape, DType dtype) {
  std::string k = name + "|" + std::to_string(static_cast<int>(dtype));
  for (const int64_t s : shape) k += "|" + std::to_string(s);
  return k;
}

// Asks for transparent huge pages on a large host tensor not yet touched (a hint: 4 KiB pages
// without it, and the timed sweeps over the sets would miss the TLB every 4 KiB).
void advise_huge_pages(const Tensor& t) {
  constexpr uintptr_t kPage = 4096;
  if (t.device() != Device::cpu || t.nbytes() < (size_t{8} << 20)) return;
  const auto begin = (reinterpret_cast<uintptr_t>(t.raw()) + kPage - 1) / kPage * kPage;
  const auto end = (reinterpret_cast<uintptr_t>(t.raw()) + t.nbytes()) / kPage * kPage;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// Set 0's tensor and copies for sets 1..sets-1 (each made before it is touched).
std::vector<Tensor> copies(const Tensor& first, int64_t sets) {
  std::vector<Tensor> v{first};
  for (int64_t k = 1; k < sets; ++k) {
    Tensor t = Tensor::empty(first.shape(), first.dtype(), first.device());
    advise_huge_pages(t);
    t.copy_(first);
    v.push_back(t);
  }
  return v;
}

}  // namespace

const std::vector<Tensor>& SharedSets::input(const std::string& name, const Tensor& value) {
  const std::string key = "in:" + shape_key(name, value.shape(), value.dtype()) + "|" + std::to_string(fingerprint(value));
  auto it = tensors_.find(key);
  if (it == tensors_.end()) it = tensors_.emplace(key, copies(value, sets_)).first;
  return it->second;
}

const std::vector<Tensor>& SharedSets::output(const std::string& name, const Shape& shape, DType dtype) {
  const std::string key = "out:" + shape_key(name, shape, dtype);
  auto it = tensors_.find(key);
  if (it == tensors_.end()) it = tensors_.emplace(key, copies(Tensor::zeros(shape, dtype, b_.device()), sets_)).first;
  return it->second;
}

CaseSets::CaseSets(const opcases::OpCase& c, Backend& b, int64_t sets, Precision storage, SharedSets* shared)
    : case_(c) {
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
  if (!shared) {
    sets_.push_back(std::move(first));
    for (int64_t k = 1; k < sets; ++k) sets_.push_back(copy_of(sets_.front()));
    return;
  }
  // Each tensor looked up once (an input's key hashes its values), then one per set.
  sets_.resize(static_cast<size_t>(shared->size()));
  for (const auto& [name, x] : first.items()) {
    const bool output = !drawn.has(name);
    const std::vector<Tensor>& per_set = output ? shared->output(name, x.shape(), x.dtype()) : shared->input(name, x);
    for (size_t k = 0; k < sets_.size(); ++k) sets_[k].set(name, per_set[k]);
  }
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

Case checked_case(Backend& b, const opcases::OpCase& c, Precision storage, SharedSets& sets, NormRow row,
                  const NormFn& fn) {
  Case out;
  out.row = std::move(row);
  const opcases::CaseCall call = fn ? opcases::CaseCall([&fn, &c](Backend&, opcases::Tensors& t) { fn(t, c); }) : c.call;
  // One call with every output, as the row's timed calls make it (the subsets of its optional
  // outputs are the test suite's: on 10^8 values each would cost a second or more).
  const opcases::CaseCheck check = opcases::check_case(c, b, storage, call, false);
  // The check's float64 copies of a large case are gigabytes: back to the system before the next
  // row's (the arena would keep them for a tensor of the same size).
  arena_release_cached(Device::cpu);
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
  const auto s = std::make_shared<CaseSets>(c, b, sets.size(), storage, &sets);
  out.sets = s;
  if (fn)
    out.call = [s, fn, &c](int64_t k) { fn(s->at(k), c); };
  else
    out.call = [&b, s](int64_t k) { s->call(b, k); };
  if (b.device() != Device::cpu) out.timed_call = device_timer(b, s);
  return out;
}

}  // namespace normlab::bench::detail
