// Which device the CUDA backend's sources are compiled for: a GPU through the CUDA runtime
// (libnormlab_cuda.so, nvcc), or cuda-sim on the host (libnormlab_cuda_sim.so, the host
// compiler, NORMLAB_CUDA_SIM): the same sources, another device and backend name.
#pragma once
#include <string>

#include "normlab/tensor.h"

#if defined(NORMLAB_CUDA_SIM)
#include "cuda_sim_control.h"
#endif

namespace normlab::cuda {

#if defined(NORMLAB_CUDA_SIM)
inline constexpr Device kDevice = Device::cuda_sim;
inline constexpr const char* kBackendName = "cuda-sim";
// What cuda-sim knows beyond the error code: the kernel, block and what went wrong.
inline std::string error_detail() { return cudasim::last_error_detail(); }
#else
inline constexpr Device kDevice = Device::cuda;
inline constexpr const char* kBackendName = "cuda";
inline std::string error_detail() { return {}; }
#endif

}  // namespace normlab::cuda
