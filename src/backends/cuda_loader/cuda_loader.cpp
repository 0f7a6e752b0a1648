// include/cuda_loader/normlab/{cuda,cuda_backend}.h: the kernels, cuBLAS and the CUDA runtime
// are in a module, libnormlab_cuda.so (src/backends/cuda, when the toolkit is found), that these
// functions dlopen the first time one of them needs the GPU; cuda-sim's module,
// libnormlab_cuda_sim.so (the same sources on the host, always built), is loaded the same way
// for --device cuda-sim. libcudart, libcublas and libcublasLt map
// about 590 MB of address space at start-up; linked into the executable they were mapped by
// every command, --version and CPU training included. Loaded only here, a command that never
// asks for a CUDA device never maps them, and a machine without them runs every CPU command.
#include <dlfcn.h>
#include <sys/stat.h>
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
#include "normlab/kernel.h"
#include "normlab/system.h"

namespace normlab {

namespace {

namespace fs = std::filesystem;

struct Loader {
  Loader(const char* f, const char* e, const char* w, const char* d) : file(f), env(e), what(w), device(d) {}
  const char* file;     // the module's file name, next to the executable
  const char* env;      // the variable that names another file
  const char* what;     // "the CUDA backend module"
  const char* device;   // the --device it loads for
  std::mutex mu;
  bool tried = false;
  const cuda::ModuleTable* table = nullptr;
  std::string error;  // why the module cannot be used, once tried and failed
};

#if defined(NORMLAB_CUDA_MODULE_FILE)
Loader& loader() {
  static Loader l{NORMLAB_CUDA_MODULE_FILE, "NORMLAB_CUDA_MODULE", "the CUDA backend module", "cuda"};
  return l;
}
#endif

Loader& sim_loader() {
  static Loader l{NORMLAB_CUDA_SIM_MODULE_FILE, "NORMLAB_CUDA_SIM_MODULE", "the cuda-sim module", "cuda-sim"};
  return l;
}

// $env (tests; an install that keeps the module elsewhere), else the module's file next to the
// executable, where the build puts it.
std::string module_path(const Loader& l) {
  if (const char* env = std::getenv(l.env); env != nullptr && *env != '\0') {
    const std::string p = env;
    // dlopen would search the library path for a bare name: the variable names a file.
    return p.find('/') == std::string::npos ? "./" + p : p;
  }
  const std::string exe = self_exe();
  return ((exe.empty() ? fs::path(".") : fs::path(exe).parent_path()) / l.file).string();
}

std::string module_name(const Loader& l, const std::string& path) { return std::string(l.what) + " " + shown(path, 512); }

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
  const std::string path = module_path(l);
  // dlopen would wait forever on a FIFO and map whatever a device gives: the module must be a
  // regular file, the rule every input of normlab follows (stat never waits; a missing file is
  // left to dlopen, whose message says so).
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    l.error = module_name(l, path) + " cannot be loaded: " +
              (S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file (a device, FIFO or socket)");
    return nullptr;
  }
  // The kernels the module registers while dlopen runs its constructors enter the registry only
  // once the checks below accept it.
  kernel_registry::ModuleLoad kernels;
  // RTLD_NOW: a missing library or symbol is this one error, not a crash at some later call.
  // RTLD_LOCAL: CUDA's symbols stay out of the way of anything loaded afterwards.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    l.error = module_name(l, path) + " cannot be loaded: " + load_error(path);
    return nullptr;
  }
  void* entry = dlsym(handle, cuda::kModuleEntry);
  if (entry == nullptr) {
    l.error = fmt::format("{} is not a normlab CUDA module (it has no {})", module_name(l, path), cuda::kModuleEntry);
    return nullptr;
  }
  const cuda::ModuleTable* t = reinterpret_cast<cuda::ModuleEntry>(entry)();
  const char* id = t != nullptr && t->build_id != nullptr ? t->build_id : "no build id";
  if (std::strcmp(id, NORMLAB_CUDA_BUILD_ID) != 0) {
    l.error = fmt::format("{} is from another normlab build ({}; this normlab is {}): use the module built with it",
                          module_name(l, path), shown(id, 128), NORMLAB_CUDA_BUILD_ID);
    return nullptr;
  }
  if (t->device == nullptr || std::strcmp(t->device, l.device) != 0) {
    l.error = fmt::format("{} is the module of --device {}, not of --device {}: load {}", module_name(l, path),
                          shown(t->device ? t->device : "(none)", 32), l.device, l.file);
    return nullptr;
  }
  try {
    kernels.commit();
  } catch (const Error& e) {
    l.error = fmt::format("{} cannot be used: {}", module_name(l, path), e.what());
    return nullptr;
  }
  l.table = t;
  return t;
}

const cuda::ModuleTable* load(Loader& l) {
  std::lock_guard<std::mutex> lock(l.mu);
  return load_locked(l);
}

// The table when the module is already loaded; never loads it.
const cuda::ModuleTable* loaded(Loader& l) {
  std::lock_guard<std::mutex> lock(l.mu);
  return l.table;
}

// The module, or UsageError("no CUDA device found: <why the module cannot be used>").
const cuda::ModuleTable& require(Loader& l, const char* none) {
  if (const cuda::ModuleTable* t = load(l)) return *t;
  std::lock_guard<std::mutex> lock(l.mu);
  throw UsageError(std::string(none) + ": " + l.error);
}

// Never loads the module: what could be loaded, or what it found.
std::string summary_of(Loader& l, const std::string& built) {
  const cuda::ModuleTable* t = nullptr;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    if (l.tried && l.table == nullptr) return built + ", not available: " + l.error;
    t = l.table;
  }
  if (t != nullptr) return t->summary();
  const std::string path = module_path(l);
  std::error_code ec;
  if (!fs::exists(path, ec)) return built + ", not available: " + module_name(l, path) + " is missing";
  return built + ", module not loaded (it loads for --device " + l.device +
         "): " + shown(path, 512);
}

}  // namespace

// ---- cuda-sim ---------------------------------------------------------------------------------
std::unique_ptr<Backend> make_cuda_sim_backend() {
  return require(sim_loader(), "cuda-sim is not available").make_backend();
}

std::string cuda_sim_summary() { return summary_of(sim_loader(), "built"); }

CudaTransfers cuda_sim_transfers() { return require(sim_loader(), "cuda-sim is not available").transfers(); }

#if defined(NORMLAB_CUDA_MODULE_FILE)
Loader& gpu() { return loader(); }

bool cuda_built() { return true; }

int cuda_device_count() {
  const cuda::ModuleTable* t = load(gpu());
  return t ? t->device_count() : 0;
}

CudaDeviceInfo cuda_device_info(int index) {
  const cuda::ModuleTable* t = load(gpu());
  return t ? t->device_info(index) : CudaDeviceInfo{};
}

// Never loads the module: --version and every summary of a command that did not ask for a CUDA
// device say what could be loaded; once it is loaded (or failed), what it found.
std::string cuda_summary() { return summary_of(gpu(), "built (toolkit " NORMLAB_CUDA_TOOLKIT ")"); }

std::unique_ptr<Backend> make_cuda_backend() { return require(gpu(), "no CUDA device found").make_backend(); }

void cuda_set_tf32(bool on) {
  if (const cuda::ModuleTable* t = load(gpu())) t->set_tf32(on);
}

bool cuda_tf32() {
  const cuda::ModuleTable* t = loaded(gpu());
  return t != nullptr && t->tf32();
}

#else  // built without the toolkit: the GPU functions exist and say so

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
CudaDeviceInfo cuda_device_info(int) { return {}; }
std::string cuda_summary() { return "not built"; }
std::unique_ptr<Backend> make_cuda_backend() {
  throw UsageError("no CUDA device found: this normlab was built without CUDA (NORMLAB_CUDA=OFF or no toolkit)");
}
void cuda_set_tf32(bool) {}
bool cuda_tf32() { return false; }

#endif


}  // namespace normlab
