// The only place that names concrete backends.
#include "normlab/install_backends.h"

#include "normlab/backend.h"
#include "normlab/cpu_backend.h"
#include "normlab/cpu_kernels.h"
#include "normlab/cuda_backend.h"
#include "normlab/ops.h"
#include "normlab/reference_backend.h"

namespace normlab {

void install_backends() {
  static const bool installed = [] {
    register_backend("reference", make_reference_backend());
    register_backend("cpu", make_cpu_backend());
    // "cuda" made at its first lookup, which loads the CUDA module: only a command that asks for
    // a CUDA device maps the CUDA libraries; where none is usable the lookup throws "no CUDA
    // device found" and backend_names() leaves it out.
    if (cuda_built()) register_backend_factory("cuda", make_cuda_backend);
    // "cuda-sim": the CUDA kernels on the host (docs/cuda.md), made at its first lookup, which
    // loads the cuda-sim module.
    register_backend_factory("cuda-sim", make_cuda_sim_backend);
    install_gradient_math();
    return true;
  }();
  (void)installed;
}

void check_backend_environment() { cpu::check_tuning_environment(); }

}  // namespace normlab
