// Helpers of the cuda-sim semantics tests (tests/cuda_sim): device buffers, copies, and the
// checks on an error and its detail. These tests compile the simulator's sources into the
// test program (CMakeLists.txt, test_cuda_sim), so <cuda_runtime.h> is cuda-sim's and every
// kernel here is an ordinary C++ function run by cudasim::launch.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_sim_control.h"
#include "launch.h"  // NL_SHARED_ARRAY, NL_DYNAMIC_SHARED (the macros only)

namespace simtest {

// A cudaMalloc'd array of n T, freed at scope exit.
template <class T>
struct DeviceArray {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, count * sizeof(T)), cudaSuccess) << cudasim::last_error_detail();
  }
  DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (p) {
      EXPECT_EQ(cudaFree(p), cudaSuccess) << cudasim::last_error_detail();
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n);
    ASSERT_EQ(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess)
        << cudasim::last_error_detail();
  }
  std::vector<T> download() const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess)
        << cudasim::last_error_detail();
    return host;
  }
  operator T*() const { return p; }
};

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The error a launch returned is also what cudaGetLastError reports (once: it clears it).
#define EXPECT_LAUNCH_ERROR(launch_expr, code)                                              \
  do {                                                                                      \
    (void)cudaGetLastError();                                                               \
    const cudaError_t launch_status_ = (launch_expr);                                       \
    EXPECT_EQ(launch_status_, (code)) << cudaGetErrorName(launch_status_) << ": "          \
                                      << cudasim::last_error_detail();                      \
    EXPECT_EQ(cudaGetLastError(), (code));                                                  \
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaGetLastError must clear the error"; \
  } while (0)

#define EXPECT_LAUNCH_OK(launch_expr)                                                             \
  do {                                                                                            \
    (void)cudaGetLastError();                                                                     \
    const cudaError_t launch_status_ = (launch_expr);                                             \
    EXPECT_EQ(launch_status_, cudaSuccess) << cudaGetErrorName(launch_status_) << ": "           \
                                           << cudasim::last_error_detail();                       \
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);                                                   \
  } while (0)

}  // namespace simtest
