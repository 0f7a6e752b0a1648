// Built instead of src/backends/cuda when CUDA is off or no toolkit was found.
#include "normlab/cuda.h"

namespace normlab {

int cuda_device_count() { return 0; }
CudaDeviceInfo cuda_device_info(int) { return {}; }
std::string cuda_summary() { return "not built"; }

}  // namespace normlab
