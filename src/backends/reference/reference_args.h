// The reference backend's checks and dispatch of a call's tensors, for its kernels in
// reference_backend.cpp and for those registered in a file of their own (kernel.h).
#pragma once
#include <initializer_list>
#include <utility>

#include "normlab/error.h"
#include "normlab/tensor.h"

namespace normlab::reference {

// Calls f(T{}) with T the C++ type of a floating dtype, so that each kernel is dispatched in one
// line: dispatch(x.dtype(), "kernel", [&](auto tag) { using T = decltype(tag); ... }).
template <class F>
void dispatch(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::f64:
      f(double{});
      return;
    case DType::i32:
    case DType::bf16:
    case DType::f16:
      break;
  }
  NL_CHECK(false, "reference {}: dtype {} is not supported (f32 or f64)", kernel,
           to_string(dtype));
}

// One tensor argument of a call: of the call's dtype (its sizes and device are the
// kernel's contract, checked before the call reaches this backend).
inline void expect(const char* kernel, const char* arg, const Tensor& t, DType dtype) {
  NL_CHECK(t.dtype() == dtype, "reference {}: {} is {} but the call's dtype is {}", kernel, arg,
           to_string(t.dtype()), to_string(dtype));
}

// A nullable gradient output: checked when present.
inline void expect(const char* kernel, const char* arg, const Tensor* t, DType dtype) {
  if (t) expect(kernel, arg, *t, dtype);
}

// Every tensor of a call in the call's dtype; an absent one (a gradient not wanted: nullptr, an
// optional input: undefined) is skipped.
inline void expect_all(const char* kernel, DType dtype,
                       std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  for (const auto& [arg, t] : args)
    if (t && t->defined()) expect(kernel, arg, *t, dtype);
}

template <class T>
T* ptr(Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

// An optional input (undefined: nullptr).
template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace normlab::reference
