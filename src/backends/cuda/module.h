// What the sources of the CUDA backend module (libnormlab_cuda.so) define for its entry point
// (module.cpp), which hands them to the loader as one table (module_abi.h). Private to
// src/backends/cuda: everything else reaches them through include/cuda_loader/normlab/*.h.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"

namespace normlab::cuda {

// device_query.cu: the same contracts as cuda_device_count / cuda_device_info / cuda_summary.
int device_count();
CudaDeviceInfo device_info(int index);
std::string summary();

// cuda_backend.cpp: make_cuda_backend, cuda_set_tf32 / cuda_tf32; require_device: device 0
// usable, or UsageError("no CUDA device found (<why>)").
std::unique_ptr<Backend> make_backend();
void set_tf32(bool on);
bool tf32();
void require_device();


}  // namespace normlab::cuda
