// A test that needs a real GPU skips where there is none, unless NORMLAB_REQUIRE_CUDA=1 (set by
// scripts/gpu_check.sh on a GPU machine), where a skip would hide that the GPU was not used:
// there it fails.
//   if (!normlab::test::gpu_available()) GPU_SKIP() << "the cuda kernels are not tested here";
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "normlab/cuda.h"

namespace normlab::test {

inline bool require_cuda() {
  const char* e = std::getenv("NORMLAB_REQUIRE_CUDA");
  return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
}
inline bool gpu_available() { return cuda_device_count() > 0; }

}  // namespace normlab::test

#define GPU_SKIP()                                                                                     \
  if (::normlab::test::require_cuda())                                                               \
    GTEST_FAIL() << "NORMLAB_REQUIRE_CUDA=1 but no CUDA device (" << ::normlab::cuda_summary() << "): "; \
  else                                                                                                 \
    GTEST_SKIP() << "no CUDA device found (" << ::normlab::cuda_summary() << "): "
