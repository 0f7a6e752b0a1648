// Every kernel is declared by its op, not by Backend: a kernel is a struct of its arguments with
// its size contract (`check`), declared once in a header of backend_api of its op family
// (docs/ops.md names the pattern), and each backend registers its implementation in the file that
// holds the kernel's code (NORMLAB_KERNEL). A new op then touches its own files
// only: no shared interface, no list of kernels per backend.
//
//   struct ScaleRows {                          // the kernel: its arguments and their contract
//     static constexpr const char* kName = "scale_rows";
//     Tensor& y; const Tensor& x; int64_t n, d;
//     void check(const Contract& c) const { c.need(y, "y", n * d).need(x, "x", n * d); }
//   };
//   run_kernel(backend_of(x), ScaleRows{y, x, n, d});            // the op's call
//   NORMLAB_KERNEL(ScaleRows, "cpu", [](Backend&, const ScaleRows& a) { ... });  // a backend's
//
// run_kernel checks the contract, then calls the implementation registered under the backend's
// name(); a backend without one is an Error naming both. Implementations register while the
// program (or a CUDA module) is loaded; the backends' static libraries are linked whole for it
// (CMakeLists.txt), so that a kernel file nothing else names is not left out.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "normlab/backend.h"
#include "normlab/kernel_clock.h"

namespace normlab {

// One call's tensors, each against the number of elements the sizes imply. A tensor that fails
// names the backend, the kernel and the argument.
class Contract {
 public:
  Contract(const Backend& b, const char* kernel) : b_(b), kernel_(kernel) {}
  // A tensor the kernel reads or writes: defined, on the backend's device, numel elements.
  const Contract& need(const Tensor& t, const char* arg, int64_t numel) const;
  // An optional input (undefined: none).
  const Contract& maybe(const Tensor& t, const char* arg, int64_t numel) const;
  // A gradient output the caller may decline (nullptr: not wanted).
  const Contract& maybe(const Tensor* t, const char* arg, int64_t numel) const;
  // A condition on the size arguments themselves; the message is formatted only when it fails.
  template <class... Args>
  const Contract& holds(bool ok, fmt::format_string<Args...> what, Args&&... args) const {
    if (!ok) fail(fmt::format(what, std::forward<Args>(args)...));
    return *this;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const;

  const Backend& b_;
  const char* kernel_;
};

namespace kernel_registry {
// An implementation with its type erased: void (*)(Backend&, const K&) for its kernel K.
using Erased = void (*)();
// Throws Error when `backend` already has an implementation of `kernel`.
void add(const char* kernel, const char* backend, Erased impl);
// Throws Error naming the backend and the kernel when there is none.
Erased find(const char* kernel, const Backend& b);
// Counts the registrations of implementations and of backends: what a caller remembers of find()
// is stale once it moves (a backend registered anew may take a freed backend's address).
uint64_t generation();
void invalidate();

// While one lives, registrations are held instead of added: a CUDA module's static constructors
// register its kernels inside dlopen, before the loader has read its build id and device. commit()
// adds them once the loader accepts the module (throwing Error, outside dlopen, for a kernel a
// backend already has); a ModuleLoad destroyed uncommitted drops them, so a refused module leaves
// nothing behind. One at a time (the loaders hold their lock while they load).
class ModuleLoad {
 public:
  ModuleLoad();
  ~ModuleLoad();
  ModuleLoad(const ModuleLoad&) = delete;
  ModuleLoad& operator=(const ModuleLoad&) = delete;
  void commit();
};
}  // namespace kernel_registry

// Whether backend `b` implements kernel K.
bool has_kernel(const char* kernel, const Backend& b);
// The kernels backend `b` implements, by name, in order.
std::vector<std::string> kernels_of(const Backend& b);

template <class K>
void run_kernel(Backend& b, const K& call) {
  call.check(Contract(b, K::kName));
  // The implementation last found for this kernel, per thread: find() (a map of names, a lock) took
  // 60 ns, a fifth of a norm's forward over 4 rows of 64.
  struct Found {
    const Backend* backend = nullptr;
    uint64_t generation = 0;
    kernel_registry::Erased impl = nullptr;
  };
  thread_local Found found;
  const uint64_t generation = kernel_registry::generation();
  if (found.backend != &b || found.generation != generation) found = {&b, generation, kernel_registry::find(K::kName, b)};
  using Impl = void (*)(Backend&, const K&);
  const KernelClock::Region timed(K::kName);
  reinterpret_cast<Impl>(found.impl)(b, call);
}

// Registers `impl` as backend `backend`'s implementation of K when constructed (a static object:
// NORMLAB_KERNEL).
template <class K>
struct KernelRegistration {
  KernelRegistration(const char* backend, void (*impl)(Backend&, const K&)) {
    kernel_registry::add(K::kName, backend, reinterpret_cast<kernel_registry::Erased>(impl));
  }
};

#define NORMLAB_KERNEL_CAT2(a, b) a##b
#define NORMLAB_KERNEL_CAT(a, b) NORMLAB_KERNEL_CAT2(a, b)
// Kernel K's implementation on the backend named `backend`: a function or a lambda without
// captures taking (Backend&, const K&).
#define NORMLAB_KERNEL(K, backend, impl)                                                          \
  static const ::normlab::KernelRegistration<K> NORMLAB_KERNEL_CAT(normlab_kernel_, __LINE__)( \
      backend, impl)

}  // namespace normlab
