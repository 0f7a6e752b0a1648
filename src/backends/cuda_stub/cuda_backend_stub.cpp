// Built instead of src/backends/cuda when CUDA is off or no toolkit was found: the backend
// functions exist, and say that this binary has no CUDA.
#include "normlab/cuda_backend.h"

#include "normlab/error.h"

namespace normlab {

bool cuda_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend() {
  throw UsageError("no CUDA device found: this normlab was built without CUDA (NORMLAB_CUDA=OFF or no toolkit)");
}

void cuda_set_tf32(bool) {}
bool cuda_tf32() { return false; }

CudaNormTiming cuda_time_norm(const CudaNormCase&) {
  throw UsageError("no CUDA device found: this normlab was built without CUDA");
}

CudaCopyBandwidth cuda_copy_bandwidth(size_t, int) {
  throw UsageError("no CUDA device found: this normlab was built without CUDA");
}

}  // namespace normlab
