// include/backend_cuda/normlab/{cuda,cuda_backend}.h when CUDA is built: the kernels, cuBLAS and
// the CUDA runtime are in a module, libnormlab_cuda.so (src/backends/cuda), that these functions
// dlopen the first time one of them needs the GPU. libcudart, libcublas and libcublasLt map
// about 590 MB of address space at start-up; linked into the executable they were mapped by
// every command, --version and CPU training included. Loaded only here, a command that never
// asks for a CUDA device never maps them, and a machine without them runs every CPU command.
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>

#include "module_abi.h"
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "normlab/error.h"

namespace normlab {

namespace {

namespace fs = std::filesystem;

struct Loader {
  std::mutex mu;
  bool tried = false;
  const cuda::ModuleTable* table = nullptr;
  std::string error;  // why the module cannot be used, once tried and failed
};

Loader& loader() {
  static Loader l;
  return l;
}

// NORMLAB_CUDA_MODULE (tests; an install that keeps the module elsewhere), else the module's
// file next to the executable, where the build puts it.
std::string module_path() {
  if (const char* env = std::getenv("NORMLAB_CUDA_MODULE"); env != nullptr && *env != '\0') {
    const std::string p = env;
    // dlopen would search the library path for a bare name: the variable names a file.
    return p.find('/') == std::string::npos ? "./" + p : p;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ((ec ? fs::path(".") : exe.parent_path()) / NORMLAB_CUDA_MODULE_FILE).string();
}

std::string module_name(const std::string& path) { return "the CUDA backend module " + shown(path, 512); }

// dlerror() starts with the path when the module itself is the problem; the message names it
// once already.
std::string load_error(const std::string& path) {
  const char* e = dlerror();
  std::string s = e ? e : "unknown dlopen error";
  if (s.compare(0, path.size() + 2, path + ": ") == 0) s.erase(0, path.size() + 2);
  return shown(s, 512);
}

// The handle is never closed: the CUDA runtime tears itself down at exit, and a backend made by
// the module may live in the registry until then. A refused module is left open too: its
// static constructors have run, and running its destructors early buys nothing.
const cuda::ModuleTable* load_locked(Loader& l) {
  if (l.tried) return l.table;
  l.tried = true;
  const std::string path = module_path();
  // RTLD_NOW: a missing library or symbol is this one error, not a crash at some later call.
  // RTLD_LOCAL: CUDA's symbols stay out of the way of anything loaded afterwards.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    l.error = module_name(path) + " cannot be loaded: " + load_error(path);
    return nullptr;
  }
  void* entry = dlsym(handle, cuda::kModuleEntry);
  if (entry == nullptr) {
    l.error = fmt::format("{} is not a normlab CUDA module (it has no {})", module_name(path), cuda::kModuleEntry);
    return nullptr;
  }
  const cuda::ModuleTable* t = reinterpret_cast<cuda::ModuleEntry>(entry)();
  const char* id = t != nullptr && t->build_id != nullptr ? t->build_id : "no build id";
  if (std::strcmp(id, NORMLAB_CUDA_BUILD_ID) != 0) {
    l.error = fmt::format("{} is from another normlab build ({}; this normlab is {}): use the module built with it",
                          module_name(path), shown(id, 128), NORMLAB_CUDA_BUILD_ID);
    return nullptr;
  }
  l.table = t;
  return t;
}

const cuda::ModuleTable* load() {
  Loader& l = loader();
  std::lock_guard<std::mutex> lock(l.mu);
  return load_locked(l);
}

// The table when the module is already loaded; never loads it.
const cuda::ModuleTable* loaded() {
  Loader& l = loader();
  std::lock_guard<std::mutex> lock(l.mu);
  return l.table;
}

// The module, or UsageError("no CUDA device found: <why the module cannot be used>").
const cuda::ModuleTable& require() {
  if (const cuda::ModuleTable* t = load()) return *t;
  std::lock_guard<std::mutex> lock(loader().mu);
  throw UsageError("no CUDA device found: " + loader().error);
}

}  // namespace

bool cuda_built() { return true; }

int cuda_device_count() {
  const cuda::ModuleTable* t = load();
  return t ? t->device_count() : 0;
}

CudaDeviceInfo cuda_device_info(int index) {
  const cuda::ModuleTable* t = load();
  return t ? t->device_info(index) : CudaDeviceInfo{};
}

// Never loads the module: --version and every summary of a command that did not ask for a CUDA
// device say what could be loaded; once it is loaded (or failed), what it found.
std::string cuda_summary() {
  const std::string built = "built (toolkit " NORMLAB_CUDA_TOOLKIT ")";
  Loader& l = loader();
  const cuda::ModuleTable* t = nullptr;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    if (l.tried && l.table == nullptr) return built + ", not available: " + l.error;
    t = l.table;
  }
  if (t != nullptr) return t->summary();
  const std::string path = module_path();
  std::error_code ec;
  if (!fs::exists(path, ec)) return built + ", not available: " + module_name(path) + " is missing";
  return built + ", module not loaded (it loads for --device cuda): " + shown(path, 512);
}

std::unique_ptr<Backend> make_cuda_backend() { return require().make_backend(); }

void cuda_set_tf32(bool on) {
  if (const cuda::ModuleTable* t = load()) t->set_tf32(on);
}

bool cuda_tf32() {
  const cuda::ModuleTable* t = loaded();
  return t != nullptr && t->tf32();
}

CudaNormTiming cuda_time_norm(const CudaNormCase& c) { return require().time_norm(c); }

CudaCopyBandwidth cuda_copy_bandwidth(size_t bytes, int repeats) { return require().copy_bandwidth(bytes, repeats); }

}  // namespace normlab
