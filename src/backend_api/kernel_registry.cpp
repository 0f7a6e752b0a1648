// The implementations of the kernels that ops declare (kernel.h), by kernel and backend name.
#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "normlab/error.h"
#include "normlab/kernel.h"

namespace normlab {

namespace {

using Key = std::pair<std::string, std::string>;  // (kernel, backend)

struct Implementations {
  // Written while the program or a CUDA module loads, read by every call: a CUDA module may be
  // loaded (by its backend's first lookup) while another thread runs kernels.
  std::mutex mutex;
  std::map<Key, kernel_registry::Erased> by_kernel_and_backend;
  // A module's registrations while its loader has not yet accepted it (ModuleLoad).
  bool holding = false;
  std::vector<std::pair<Key, kernel_registry::Erased>> held;
};

Implementations& implementations() {
  static Implementations r;
  return r;
}

std::atomic<uint64_t> g_generation{1};

}  // namespace

void kernel_registry::add(const char* kernel, const char* backend, Erased impl) {
  Implementations& r = implementations();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.holding) {  // inside dlopen: nothing may throw here (ModuleLoad::commit checks)
    r.held.emplace_back(Key(kernel, backend), impl);
    return;
  }
  const bool fresh = r.by_kernel_and_backend.emplace(Key(kernel, backend), impl).second;
  NL_CHECK(fresh, "kernel {} has two implementations on backend {}", kernel, backend);
  invalidate();
}

kernel_registry::ModuleLoad::ModuleLoad() {
  Implementations& r = implementations();
  std::lock_guard<std::mutex> lock(r.mutex);
  NL_CHECK(!r.holding, "a module's kernels are loaded while another's are held");
  r.holding = true;
  r.held.clear();
}

kernel_registry::ModuleLoad::~ModuleLoad() {
  Implementations& r = implementations();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.holding = false;
  r.held.clear();
}

void kernel_registry::ModuleLoad::commit() {
  Implementations& r = implementations();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.holding = false;
  std::vector<std::pair<Key, Erased>> held;
  held.swap(r.held);
  std::map<Key, Erased> fresh;
  for (const auto& [key, impl] : held)  // all or none
    NL_CHECK(!r.by_kernel_and_backend.count(key) && fresh.emplace(key, impl).second,
             "kernel {} has two implementations on backend {}", key.first, key.second);
  r.by_kernel_and_backend.insert(fresh.begin(), fresh.end());
  invalidate();
}

uint64_t kernel_registry::generation() { return g_generation.load(std::memory_order_acquire); }

void kernel_registry::invalidate() { g_generation.fetch_add(1, std::memory_order_acq_rel); }

kernel_registry::Erased kernel_registry::find(const char* kernel, const Backend& b) {
  Implementations& r = implementations();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_kernel_and_backend.find({kernel, b.name()});
  NL_CHECK(it != r.by_kernel_and_backend.end(), "{} {}: the backend has no implementation of this kernel", b.name(),
           kernel);
  return it->second;
}

std::vector<std::string> kernels_of(const Backend& b) {
  Implementations& r = implementations();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [key, impl] : r.by_kernel_and_backend)
    if (key.second == b.name()) names.push_back(key.first);
  return names;
}

bool has_kernel(const char* kernel, const Backend& b) {
  Implementations& r = implementations();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.by_kernel_and_backend.count({kernel, b.name()}) > 0;
}

}  // namespace normlab
