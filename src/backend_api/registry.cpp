// The table of backends by name. It names no concrete backend: install_backends()
// (include/backends/normlab/backends.h) registers them.
#include <omp.h>
#include <fmt/format.h>

#include <map>
#include <memory>

#include "normlab/backend.h"

namespace normlab {

namespace {

struct Registry {
  std::map<std::string, std::unique_ptr<Backend>> backends;
  std::string default_cpu = "cpu";
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_backend(const std::string& name, std::unique_ptr<Backend> b) {
  registry().backends[name] = std::move(b);
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (auto& [name, b] : registry().backends) names.push_back(name);
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
  return *it->second;
}

Backend& backend_for(Device device, DType dtype) {
  if (device == Device::cuda) {
    auto& m = registry().backends;
    auto it = m.find("cuda");
    if (it == m.end()) throw UsageError("no CUDA device found (no \"cuda\" backend is registered)");
    NL_CHECK(it->second->supports(dtype), "the cuda backend does not support {} (float32 only)",
             dtype_name(dtype));
    return *it->second;
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
