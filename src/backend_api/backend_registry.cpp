// The table of backends by name. It names no concrete backend: install_backends()
// (include/backends/normlab/install_backends.h) registers them.
#include <omp.h>
#include <fmt/format.h>

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>

#include "normlab/backend.h"
#include "normlab/kernel.h"

namespace normlab {

namespace {

// A backend, or how to make it at its first lookup.
struct Entry {
  std::unique_ptr<Backend> owned;
  // owned.get() once made: every op looks its backend up, and reads this without the lock.
  std::atomic<Backend*> ready{nullptr};
  std::function<std::unique_ptr<Backend>()> make;  // until it has run
  std::exception_ptr failed;                       // what it threw
};

struct Registry {
  std::map<std::string, Entry> backends;
  std::string default_cpu = "cpu";
  // Held while a factory runs; recursive because a factory may look up another backend
  // (a backend made on first use may look another up).
  std::recursive_mutex making;
};

Registry& registry() {
  static Registry r;
  return r;
}

Backend& made(Entry& e) {
  if (Backend* b = e.ready.load(std::memory_order_acquire)) return *b;
  std::lock_guard<std::recursive_mutex> lock(registry().making);
  if (Backend* b = e.ready.load(std::memory_order_acquire)) return *b;
  if (!e.failed) {
    try {
      std::unique_ptr<Backend> b = e.make();
      NL_CHECK(b != nullptr, "a backend factory returned no backend");
      e.owned = std::move(b);
      e.make = nullptr;
      e.ready.store(e.owned.get(), std::memory_order_release);
      return *e.owned;
    } catch (...) {
      e.failed = std::current_exception();
      e.make = nullptr;
    }
  }
  std::rethrow_exception(e.failed);
}

Entry& fresh_entry(const std::string& name) {
  Entry& e = registry().backends[name];
  e.ready.store(nullptr);
  e.owned.reset();
  // A backend made later may take the freed one's address: what run_kernel remembers is stale.
  kernel_registry::invalidate();
  e.make = nullptr;
  e.failed = nullptr;
  return e;
}

}  // namespace

void register_backend(const std::string& name, std::unique_ptr<Backend> b) {
  NL_CHECK(b != nullptr, "register_backend('{}'): no backend", name);
  Entry& e = fresh_entry(name);
  e.owned = std::move(b);
  e.ready.store(e.owned.get(), std::memory_order_release);
}

void register_backend_factory(const std::string& name, std::function<std::unique_ptr<Backend>()> make) {
  NL_CHECK(make != nullptr, "register_backend_factory('{}'): no factory", name);
  fresh_entry(name).make = std::move(make);
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (auto& [name, e] : registry().backends) {
    try {
      made(e);
      names.push_back(name);
    } catch (...) {
      // Not usable here (no device, no CUDA libraries): not a name to offer.
    }
  }
  return names;
}

Backend& backend(const std::string& name) {
  auto& m = registry().backends;
  NL_CHECK(!m.empty(), "no backend is registered: call install_backends() first");
  auto it = m.find(name);
  if (it == m.end()) {
    std::string known;
    for (auto& [n, b] : m) known += (known.empty() ? "" : ", ") + n;
    throw UsageError(fmt::format("unknown backend '{}' (known: {})", name, known));
  }
  return made(it->second);
}

Backend& backend_for(Device device, DType dtype) {
  if (is_cuda_device(device)) {
    const char* name = device == Device::cuda ? "cuda" : "cuda-sim";
    auto& m = registry().backends;
    auto it = m.find(name);
    if (it == m.end()) throw UsageError(fmt::format("no CUDA device found (no \"{}\" backend is registered)", name));
    Backend& b = made(it->second);
    NL_CHECK(b.supports(dtype), "the {} backend does not support {} (float32, bfloat16 and float16 storage)", name,
             to_string(dtype));
    return b;
  }
  Backend& b = backend(registry().default_cpu);
  if (b.supports(dtype)) return b;
  // float64 exists for checking: the plain-loop backend is the one that has it.
  return backend("reference");
}

void set_default_cpu_backend(const std::string& name) {
  backend(name);  // validates
  registry().default_cpu = name;
}

const std::string& default_cpu_backend() { return registry().default_cpu; }

namespace {
Device g_compute_device = Device::cpu;
}
void set_compute_device(Device device) {
  // The device's backend installs its memory hooks when it is made: before any tensor goes there.
  if (is_cuda_device(device)) (void)backend_for(device, DType::f32);
  g_compute_device = device;
}
Device compute_device() { return g_compute_device; }

BackendScope::BackendScope(const std::string& name) : previous_(default_cpu_backend()) {
  set_default_cpu_backend(name);
}

BackendScope::~BackendScope() { registry().default_cpu = previous_; }

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace normlab
