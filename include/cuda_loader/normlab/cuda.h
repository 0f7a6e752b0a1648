// What CUDA support this binary has and what the machine offers.
#pragma once
#include <string>

namespace normlab {

struct CudaDeviceInfo {
  std::string name;
  int major = 0, minor = 0;      // compute capability
  double memory_gib = 0;
  int multiprocessors = 0;
};

// Number of usable CUDA devices: 0 when CUDA is not built in, its module cannot be loaded, or
// no driver/GPU is present. Loads the CUDA module (docs/cuda.md), as does every function of
// this header and of cuda_backend.h but cuda_summary, cuda_built and cuda_tf32.
int cuda_device_count();
// Empty when index is out of range.
CudaDeviceInfo cuda_device_info(int index);
// Never loads the module. "not built"; before it is loaded "built (toolkit 13.0), module not
// loaded (it loads for --device cuda): <path>" or "built (toolkit 13.0), not available: <why>";
// once loaded "built (runtime 13.0), no device: <reason>" or "built (runtime 13.0), 1 device(s):
// NVIDIA H200 (sm_90)".
std::string cuda_summary();
// The same for cuda-sim (docs/cuda.md): "built, module not loaded (it loads for --device
// cuda-sim): <path>", or once loaded "built (runtime 13.0), 1 device(s): cuda-sim (...)".
std::string cuda_sim_summary();

}  // namespace normlab
