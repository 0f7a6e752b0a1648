// The tests' builds of norm_kernels.cpp for every instruction set (CMakeLists.txt:
// normlab_norm_kernels_isa), declared: each build's functions live in the namespace its
// NORMLAB_KERNEL_ISA_NS names, normlab::cpu::kernels_avx512 (-march=x86-64-v4),
// kernels_avx2 (x86-64-v3) and kernels_portable (x86-64), beside the library's own build of the
// same functions in normlab::cpu. Only the tests link them; each build may run only on a CPU with
// its instruction set (tests/backends/norm_isa_test.cpp asks the CPU first).
//
// The functions the tests call, once: X(return type, name, parameters), as in cpu_kernels.h.
#pragma once
#include <cstdint>

#include "normlab/cpu_kernels.h"

#define NORMLAB_NORM_KERNELS_ISA_FUNCTIONS(X)                                                                       \
  X(const char*, norm_kernels_isa, ())                                                                              \
  X(bool, variant_streams, (const NormVariant& v, const float* out, int64_t d))                                     \
  X(void, layernorm_forward_with,                                                                                   \
    (const NormVariant& v, float* y, float* mean, float* rstd, const float* x, const float* gamma,                  \
     const float* beta, int64_t n, int64_t d, float eps))                                                           \
  X(void, layernorm_backward_with,                                                                                  \
    (const NormVariant& v, float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,                 \
     const float* gamma, const float* mean, const float* rstd, int64_t n, int64_t d))                               \
  X(void, rmsnorm_forward_with,                                                                                     \
    (const NormVariant& v, float* y, float* rstd, const float* x, const float* gamma, int64_t n, int64_t d,         \
     float eps))                                                                                                    \
  X(void, rmsnorm_backward_with,                                                                                    \
    (const NormVariant& v, float* dx, float* dgamma, const float* dy, const float* x, const float* gamma,           \
     const float* rstd, int64_t n, int64_t d))                                                                      \
  X(void, add_layernorm_forward_with,                                                                               \
    (const NormVariant& v, float* s, float* y, float* mean, float* rstd, const float* a, const float* b,            \
     float alpha, const float* gamma, const float* beta, int64_t n, int64_t d, float eps))                          \
  X(void, add_rmsnorm_forward_with,                                                                                 \
    (const NormVariant& v, float* s, float* y, float* rstd, const float* a, const float* b, float alpha,            \
     const float* gamma, int64_t n, int64_t d, float eps))

namespace normlab::cpu {

// One build's functions, as pointers, so that a test body is written once for all of them.
struct NormKernelsIsa {
#define NORMLAB_NORM_KERNELS_ISA_POINTER(ret, name, params) ret(*name) params;
  NORMLAB_NORM_KERNELS_ISA_FUNCTIONS(NORMLAB_NORM_KERNELS_ISA_POINTER)
#undef NORMLAB_NORM_KERNELS_ISA_POINTER
};

}  // namespace normlab::cpu

// The declarations in namespace normlab::cpu::ns, and ns::kNormKernels, the table of them.
#define NORMLAB_NORM_KERNELS_ISA_DECLARATION(ret, name, params) ret name params;
#define NORMLAB_NORM_KERNELS_ISA_ADDRESS(ret, name, params) &name,
#define NORMLAB_NORM_KERNELS_ISA_DECLARE(ns)                                    \
  namespace normlab::cpu::ns {                                                  \
  NORMLAB_NORM_KERNELS_ISA_FUNCTIONS(NORMLAB_NORM_KERNELS_ISA_DECLARATION)      \
  inline constexpr NormKernelsIsa kNormKernels = {                              \
      NORMLAB_NORM_KERNELS_ISA_FUNCTIONS(NORMLAB_NORM_KERNELS_ISA_ADDRESS)};    \
  }

NORMLAB_NORM_KERNELS_ISA_DECLARE(kernels_avx512)
NORMLAB_NORM_KERNELS_ISA_DECLARE(kernels_avx2)
NORMLAB_NORM_KERNELS_ISA_DECLARE(kernels_portable)

#undef NORMLAB_NORM_KERNELS_ISA_DECLARE
#undef NORMLAB_NORM_KERNELS_ISA_ADDRESS
#undef NORMLAB_NORM_KERNELS_ISA_DECLARATION
