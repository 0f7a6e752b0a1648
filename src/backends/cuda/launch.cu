// check_launch (launch.h): every launcher's check after its kernels.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "kernels.h"

namespace normlab::cuda {

namespace {

bool sync_each_kernel() {
  static const bool on = [] {
    const char* e = std::getenv("NORMLAB_CUDA_SYNC");
    return e != nullptr && std::strcmp(e, "0") != 0 && e[0] != '\0';
  }();
  return on;
}

}  // namespace

void check_launch(const char* kernel) {
  check(cudaGetLastError(), "kernel launch", kernel);
  if (sync_each_kernel()) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", kernel);
}

}  // namespace normlab::cuda
