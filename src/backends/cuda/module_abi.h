// The boundary between the normlab executable and its CUDA backend module (libnormlab_cuda.so):
// the module exports one symbol, normlab_cuda_module, which returns this table; the loader
// (src/backends/cuda_loader) implements include/cuda_loader/normlab/*.h through it. Included by
// the module's entry point (module.cpp) and the loader only.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "cuda_module_id.h"  // generated at configure time: NORMLAB_CUDA_CONFIG_ID
#include "git_commit.h"      // generated at build time: NORMLAB_GIT_COMMIT
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"

// The module runs on the executable's copy of core and the backend interface (Tensor, the
// device memory hooks, Error, Backend's layout), so a module of another build may disagree with
// the executable on any of them: the loader refuses one whose id is not its own. Version, commit
// (with -dirty) and a hash of the build directory: the two files of one build always agree, a
// file copied from another build or checkout does not.
#define NORMLAB_CUDA_BUILD_ID NORMLAB_CUDA_CONFIG_ID "+" NORMLAB_GIT_COMMIT

namespace normlab::cuda {

struct ModuleTable {
  // First, and compared before anything after it is read: a module of another build may lay
  // out the rest differently.
  const char* build_id;
  // The --device it serves ("cuda" or "cuda-sim"): the two modules of one build share the id,
  // and each backend registers the memory hooks of its own device only.
  const char* device;
  int (*device_count)();
  CudaDeviceInfo (*device_info)(int index);
  std::string (*summary)();
  std::unique_ptr<Backend> (*make_backend)();
  void (*set_tf32)(bool on);
  bool (*tf32)();
  // cuda-sim's count of host <-> device copies so far (null in the GPU module).
  CudaTransfers (*transfers)();
};

using ModuleEntry = const ModuleTable* (*)();
constexpr const char* kModuleEntry = "normlab_cuda_module";

}  // namespace normlab::cuda
