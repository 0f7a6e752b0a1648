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

// Number of usable CUDA devices: 0 when CUDA is not built in or no driver/GPU is present.
int cuda_device_count();
// Empty when index is out of range.
CudaDeviceInfo cuda_device_info(int index);
// "not built", "built (runtime 13.0), no device: <reason>", or "built, 1 device: NVIDIA H200 (sm_90)".
std::string cuda_summary();

}  // namespace normlab
