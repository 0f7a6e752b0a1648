// Helpers shared by the op files: boundary checks and kernel lookup.
#pragma once
#include <string>
#include <vector>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/dropout_mask.h"
#include "normlab/ops.h"

namespace normlab::ops_detail {

// The backend of the op's tensors (all must share device and dtype).
inline Backend& backend_of(const Tensor& t) { return backend_for(t.device(), t.dtype()); }

// Floating tensors of one dtype and device; names the op and the offenders.
void check_float_same(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts);
// Inside a DropoutScope of a rate above 0, the next call's mask (each call its own key); else off.
DropoutMask next_dropout_mask();
// Rows of a (..., D) tensor.
inline int64_t rows_of(const Tensor& x) { return x.dim() == 0 ? 1 : x.numel() / x.size(-1); }
// Output shape of x with its last dimension replaced.
Shape with_last(const Shape& s, int64_t last);

// Low-precision storage (ops.h, StoragePrecisionScope). store(y, p): y rounded in place to p's
// grid (nothing for fp32) and tagged with it. An op's output format: a product's (linear,
// matmul, attention, embedding) is the thread's format; any other op's is the widest of its
// inputs' (a float32 residual stream plus a low-precision branch gives float32, as PyTorch
// promotes). stored(t): a leaf (a parameter, an input batch) as the thread's format holds it: a
// rounded copy, recorded as "cast" with the gradient passed through; any other tensor as it is.
// operand(t): a product's operand: stored(t), and a non-leaf in another format also cast.
void store(Tensor& y, Precision p, const char* op, const Tensor* norm_rstd = nullptr);
// An op's output that store(y, p) will tag, where `like` lives: in p's 16-bit storage on a CUDA
// device (native low precision: the kernel rounds at its store, unless a StoreWatch needs to
// see values before their rounding), float32 storage otherwise (store() then rounds it).
Tensor new_output(const Shape& shape, Precision p, const Tensor& like);
DType storage_for(Precision p, const Tensor& like);
// What stays float32 in every precision beside a 16-bit `like`: a norm's statistics, the loss's
// probabilities, GELU's derivative.
Tensor float_output(const Shape& shape, const Tensor& like);
// Whether a norm on x runs as the composite (norm_compute format, x stored in a low-precision format).
bool composite_norm(const Tensor& x);
// Shows a norm's input to the StoreWatch (when one is set).
void watch_norm_input(const Tensor& x, const char* op);
Precision product_format();
Precision widest(std::initializer_list<const Tensor*> inputs);
Tensor stored(const Tensor& t);
Tensor operand(const Tensor& t);
// Whether a StoreWatch is alive on this thread (a kernel then counts what it stores inside).
bool store_watch_active();
// The steps of a composite norm's backward, in the order autograd runs them, shown to the watch
// as gradients with their census (StoreEvent::census); dy stands for their values.
void watch_composite_backward(const CompositeBackwardCensus& census, bool layernorm, Precision p, const Tensor& dy,
                              const char* module);
// The tape's GradientMath::store: g shown to the watch, then rounded to the format of `of`.
void store_gradient(Tensor& g, const TensorImpl& of, const Node& from);

}  // namespace normlab::ops_detail

namespace normlab::ops_detail {
// Backward closures shared by more than one op (the fused forward ops reuse them).
BackwardFn add_scaled_backward(double alpha);
BackwardFn layernorm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                 int64_t n, int64_t d);
BackwardFn rmsnorm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& rstd, int64_t n, int64_t d);
// The composite's (norm_compute format): LayerNorm when mean is defined.
BackwardFn composite_norm_backward_fn(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                     int64_t n, int64_t d);
}  // namespace normlab::ops_detail
