// The only place that names concrete backends.
#include "normlab/backends.h"

#include "normlab/backend.h"
#include "normlab/cpu_backend.h"
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "normlab/host_adapter.h"
#include "normlab/ops.h"
#include "normlab/reference_backend.h"

namespace normlab {

void install_backends() {
  static const bool installed = [] {
    register_backend("reference", make_reference_backend());
    register_backend("cpu", make_cpu_backend());
    // "cuda" only where a device is usable: the tests and --device cuda ask for it by name and
    // report "no CUDA device found" otherwise.
    // "cuda-host": the same kernels for host tensors (gradcheck, train --device cuda).
    if (cuda_device_count() > 0) {
      register_backend("cuda", make_cuda_backend());
      register_backend("cuda-host", make_host_adapter(backend("cuda")));
    }
    install_gradient_math();
    return true;
  }();
  (void)installed;
}

}  // namespace normlab
