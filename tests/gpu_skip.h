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

// GPU_SKIP is one statement without an if/else of its own, so that `if (x) GPU_SKIP() << "...";`
// needs no braces under -Wdangling-else: this helper makes it a skip, or with
// NORMLAB_REQUIRE_CUDA=1 a fatal failure, of the current test (what GTEST_SKIP and GTEST_FAIL do).
inline ::testing::internal::AssertHelper gpu_skip_helper(const char* file, int line) {
  return ::testing::internal::AssertHelper(
      require_cuda() ? ::testing::TestPartResult::kFatalFailure : ::testing::TestPartResult::kSkip, file, line,
      require_cuda() ? "Failed" : "Skipped");
}

}  // namespace normlab::test

#define GPU_SKIP()                                                                                          \
  return ::normlab::test::gpu_skip_helper(__FILE__, __LINE__) =                                             \
             ::testing::Message() << (::normlab::test::require_cuda() ? "NORMLAB_REQUIRE_CUDA=1 but no CUDA device ("  \
                                                                      : "no CUDA device found (")          \
                                  << ::normlab::cuda_summary() << "): "
