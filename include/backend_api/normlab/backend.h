// The backend interface: a device and the kernels that run on it. Ops (src/ops) check shapes,
// allocate outputs and call the kernels (run_kernel, kernel.h; each declared in a header of its op
// family, *_kernels.h); backends implement them and never see the tape.
//
// Conventions (every kernel, all backends):
// - Every tensor argument is contiguous, row-major, and already has the right shape and
//   dtype; outputs are allocated by the caller. Size letters: B batch, T time, C channels
//   (C = H * Dh), H heads, Dh head size, N rows (= B*T), D or d normalized size, V vocabulary,
//   M/K/N for matrix products.
// - Outputs and gradients are WRITTEN (=), never accumulated, unless a kernel's comment says
//   `accumulate`. The tape accumulates when a tensor feeds several consumers.
// - A gradient output passed as nullptr is not wanted: skip its work (ATen's gradient mask).
// - Norms save rstd = 1/sqrt(var + eps) (LayerNorm) or 1/sqrt(mean(x^2) + eps) (RMSNorm), one
//   per row, in the input's dtype; backends that use oneDNN convert its variance at the boundary.
// - `eps`, `alpha`, `scale`, `lr`... are passed as double and used in the tensor's dtype.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "normlab/precision.h"
#include "normlab/tensor.h"

namespace normlab {

// A kernel variant a backend chose on this machine for a shape class (the cpu backend: its norm
// kernels' measured choices, cpu_kernels.h norm_choice), recorded in every run's result.json.
struct KernelChoice {
  std::string kernel;   // the shape class: "layernorm_forward d=64 l2 t=2"
  std::string variant;  // what ran: "pipelined-pf2", "onednn"
  std::string source;   // "measured", "cached", "forced (...)", "rule (...)"
};

// A device and what runs on it: its name, its device and the dtypes its kernels take. The kernels
// themselves are declared by their ops, each with its size contract, and each backend registers
// its implementations beside their code (kernel.h); a backend checks only what is its own: the
// dtypes it supports, values such as ids in range.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual bool supports(DType dtype) const = 0;
  // Expensive objects (oneDNN primitives) created so far; a steady-state step adds none.
  virtual uint64_t primitives_created() const { return 0; }
  // The variants chosen so far in this process, in the order their shape classes were first used.
  virtual std::vector<KernelChoice> kernel_choices() const { return {}; }
};

// ---- registry -----------------------------------------------------------------
// Names: "reference" (plain loops, f32/f64: the oracle), "cpu" (oneDNN + normlab's vectorized
// kernels, f32), "cuda" (when built and a GPU is present).
// Adds (or replaces) a backend under `name`; install_backends() does it for the built-in ones.
void register_backend(const std::string& name, std::unique_ptr<Backend> b);
// Adds (or replaces) a backend made on first use: `make` runs once, at the first lookup of
// `name`, and what it throws is thrown again by every lookup. The CUDA backends are registered
// so: a command that never asks for them never loads the CUDA libraries.
void register_backend_factory(const std::string& name, std::function<std::unique_ptr<Backend>()> make);
// The backends that are usable: a backend made on first use is made here (a name whose
// factory throws is left out).
std::vector<std::string> backend_names();
Backend& backend(const std::string& name);  // throws UsageError for an unknown name
// The backend ops use for CPU tensors (default "cpu"); CUDA tensors always use "cuda".
Backend& backend_for(Device device, DType dtype);
void set_default_cpu_backend(const std::string& name);
const std::string& default_cpu_backend();
// Where train, sweep and probe put a model's parameters, optimizer state and batches: the cpu
// (default) or a CUDA device (--device cuda / cuda-sim), whose backend then runs every op on
// tensors that stay there (docs/cuda.md, device residency).
void set_compute_device(Device device);
Device compute_device();

// RAII: use another CPU backend inside a scope (gradcheck runs on "reference").
class BackendScope {
 public:
  explicit BackendScope(const std::string& name);
  ~BackendScope();
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  std::string previous_;
};

// Threads the CPU kernels and oneDNN may use (OpenMP); 0 = all cores.
void set_num_threads(int n);
int num_threads();

// The thread count is process-wide: a scope that sets it restores the previous count when it
// ends, by an exception too. set() changes it again within the scope (a bench over 1, 2, all threads),
// restore() puts the previous count back early.
class ThreadCountScope {
 public:
  ThreadCountScope() : previous_(num_threads()) {}
  explicit ThreadCountScope(int n) : ThreadCountScope() { set_num_threads(n); }
  ~ThreadCountScope() { set_num_threads(previous_); }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;
  void set(int n) { set_num_threads(n); }
  void restore() { set_num_threads(previous_); }

 private:
  int previous_;
};

}  // namespace normlab
