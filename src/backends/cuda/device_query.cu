// CUDA device query: compiled whenever the toolkit is found, also on machines with no GPU.
#include <cuda_runtime.h>

#include <string>

#include "module.h"

namespace normlab::cuda {

namespace {
// With no driver cudaGetDeviceCount returns an error and leaves the count untouched.
int query_count(cudaError_t* status) {
  int count = 0;
  *status = cudaGetDeviceCount(&count);
  return *status == cudaSuccess ? count : 0;
}
}  // namespace

int device_count() {
  cudaError_t status;
  return query_count(&status);
}

CudaDeviceInfo device_info(int index) {
  CudaDeviceInfo info;
  if (index < 0 || index >= device_count()) return info;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return info;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.memory_gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  info.multiprocessors = prop.multiProcessorCount;
  return info;
}

std::string summary() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string rt = std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
  cudaError_t status;
  int n = query_count(&status);
  if (status != cudaSuccess) return "built (runtime " + rt + "), no device: " + cudaGetErrorString(status);
  if (n == 0) return "built (runtime " + rt + "), no device";
  CudaDeviceInfo d = device_info(0);
  return "built (runtime " + rt + "), " + std::to_string(n) + " device(s): " + d.name + " (sm_" +
         std::to_string(d.major) + std::to_string(d.minor) + ")";
}

}  // namespace normlab::cuda
