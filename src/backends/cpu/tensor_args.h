// The cpu backend's view of a call's tensors: float32 pointers, for its kernels in cpu_backend.cpp
// and for those registered in a file of their own (kernel.h).
#pragma once
#include "normlab/error.h"
#include "normlab/tensor.h"

namespace normlab::cpu {

// The pointer of a float32 tensor, or a sentence saying what is wrong (its sizes and device are
// the kernel's contract, checked before the call reaches this backend).
inline float* f32(const Tensor& t, const char* what) {
  NL_CHECK(t.dtype() == DType::f32,
           "cpu backend: {} is {}; the cpu backend is float32 only (float64 runs on the "
           "\"reference\" backend)",
           what, to_string(t.dtype()));
  return static_cast<float*>(t.raw());
}

inline float* f32_opt(Tensor* t, const char* what) {
  return t ? f32(*t, what) : nullptr;
}

}  // namespace normlab::cpu
