// Helpers shared by the op files: boundary checks and kernel lookup.
#pragma once
#include <string>
#include <vector>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/ops.h"

namespace normlab::ops_detail {

// The backend of the op's tensors (all must share device and dtype).
inline Backend& kernels(const Tensor& t) { return backend_for(t.device(), t.dtype()); }

// Floating tensors of one dtype and device; names the op and the offenders.
void check_float_same(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts);
// Rows of a (..., D) tensor.
inline int64_t rows_of(const Tensor& x) { return x.dim() == 0 ? 1 : x.numel() / x.size(-1); }
// Output shape of x with its last dimension replaced.
Shape with_last(const Shape& s, int64_t last);

// Low-precision storage (ops.h): y rounded in place to the thread's storage format (nothing in
// fp32); and an input as that format holds it: a leaf's rounded copy, recorded as "cast" with
// the gradient passed through, or the tensor itself (an op's output is stored already, an
// undefined or integer tensor has nothing to round).
void store(Tensor& y);
Tensor stored(const Tensor& t);

}  // namespace normlab::ops_detail

namespace normlab::ops_detail {
// Backward closures shared by more than one op (the fused forward ops reuse them).
BackwardFn add_scaled_backward(double alpha);
BackwardFn layernorm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                 int64_t n, int64_t d);
BackwardFn rmsnorm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& rstd, int64_t n, int64_t d);
}  // namespace normlab::ops_detail
