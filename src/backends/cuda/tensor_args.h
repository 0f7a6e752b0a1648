// The cuda backend's view of a call's tensors (their storage checked, their device arrays as the
// kernels take them), for its kernels in cuda_backend.cpp and for those registered beside their
// .cu code (kernel.h). Host code only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <initializer_list>
#include <utility>

#include "kernels.h"
#include "normlab/backend.h"
#include "normlab/error.h"
#include "normlab/tensor.h"

namespace normlab::cuda {

// ---- argument checks ----------------------------------------------------------------------------
// A data array: float32, bf16 or fp16 storage (its sizes and device are the kernel's
// contract, checked before the call reaches this backend).
inline void expect(const char* kernel, const char* arg, const Tensor& t) {
  NL_CHECK(t.dtype() == DType::f32 || is_16bit(t.dtype()),
           "cuda {}: {} is {}; the cuda backend takes float32, bfloat16 and float16", kernel, arg,
           to_string(t.dtype()));
}
inline void expect(const char* kernel, const char* arg, const Tensor* t) {
  if (t) expect(kernel, arg, *t);
}
// Every data array of a call; an absent one (nullptr, or an undefined optional input) is skipped.
inline void expect_all(const char* kernel, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  for (const auto& [arg, t] : args)
    if (t && t->defined()) expect(kernel, arg, *t);
}
// An array that is float32 in every precision: statistics, probabilities, parameters.
inline void expect_f32(const char* kernel, const char* arg, const Tensor& t) {
  NL_CHECK(t.dtype() == DType::f32, "cuda {}: {} is {}; it is float32 in every precision", kernel, arg,
           to_string(t.dtype()));
}
// Every float32 array of a call (absent ones skipped, as expect_all).
inline void expect_all_f32(const char* kernel, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  for (const auto& [arg, t] : args)
    if (t && t->defined()) expect_f32(kernel, arg, *t);
}
inline void expect_f32(const char* kernel, const char* arg, const Tensor* t) {
  if (t) expect_f32(kernel, arg, *t);
}
// Arrays a kernel reads and writes in one storage type (a norm's x, y, dy, dx).
inline void expect_same_storage(const char* kernel, const char* arg, const Tensor* t, const char* ref_arg, const Tensor& ref) {
  NL_CHECK(!t || t->dtype() == ref.dtype(), "cuda {}: {} is {} but {} is {}", kernel, arg,
           to_string(t ? t->dtype() : ref.dtype()), ref_arg, to_string(ref.dtype()));
}
inline float* fp(const Tensor& t) { return static_cast<float*>(t.raw()); }
inline float* fp(Tensor* t) { return t ? static_cast<float*>(t->raw()) : nullptr; }
inline const float* fp_or_null(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw()) : nullptr; }

inline In arr_in(const Tensor& t) { return t.defined() ? In(t.raw(), format_of_dtype(t.dtype())) : In(); }
inline Out arr_out(const Tensor& t) { return t.defined() ? Out(t.raw(), format_of_dtype(t.dtype())) : Out(); }
inline Out arr_out(Tensor* t) { return t ? arr_out(*t) : Out(); }
template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw()) : nullptr;
}
template <class T>
T* ptr(Tensor* t) {
  return t ? static_cast<T*>(t->raw()) : nullptr;
}

// The kernel template for x's storage type: f(float{}), f(__nv_bfloat16{}) or f(__half{}).
template <class F>
void with_storage(DType t, F&& f) {
  if (t == DType::bf16) f(__nv_bfloat16{});
  else if (t == DType::f16) f(__half{});
  else f(float{});
}

// t in `dtype`'s storage: t itself, or a float32 copy of a 16-bit t from the device arena (a bf16
// gamma cast from its parameter beside a float32 residual stream's row: exact). Narrowing would
// round: the ops never ask for it.
inline Tensor in_storage(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() == dtype) return t;
  NL_CHECK(dtype == DType::f32 && is_16bit(t.dtype()), "cuda: a {} parameter beside {} rows", to_string(t.dtype()),
           to_string(dtype));
  Tensor c = Tensor::empty(t.shape(), dtype, t.device());
  convert(arr_out(c), arr_in(t), t.numel());
  return c;
}

// A float32 output of a kernel (dgamma, dbias): the tensor itself, or a float32 stand-in from
// the device arena converted into it by finish() (rounded once, as the gradient's store would).
class F32Out {
 public:
  explicit F32Out(Tensor* t) : target_(t) {
    if (t && t->dtype() != DType::f32) stand_in_ = Tensor::empty(t->shape(), DType::f32, t->device());
  }
  float* get() const { return stand_in_.defined() ? fp(stand_in_) : fp(target_); }
  void finish() {
    if (stand_in_.defined()) convert(arr_out(target_), In(fp(stand_in_)), target_->numel());
  }

 private:
  Tensor* target_;
  Tensor stand_in_;
};

// The cuda backend's workspace (grown, never shrunk; kernels on its one stream use it one call at a
// time), as `count` floats; b is the cuda backend a registered kernel was called with.
float* work_floats(Backend& b, int64_t count, const char* kernel);

}  // namespace normlab::cuda
