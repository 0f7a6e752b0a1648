#include "op_common.h"

namespace normlab::ops_detail {

void check_float_same(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  const Tensor* first = nullptr;
  const char* first_name = "";
  for (auto& [name, t] : ts) {
    if (!t->defined()) continue;
    NL_CHECK(t->dtype() != DType::i32, "{}: {} must be a floating tensor, got int32", op, name);
    if (!first) {
      first = t;
      first_name = name;
      continue;
    }
    NL_CHECK(t->dtype() == first->dtype(), "{}: {} is {} but {} is {} (mixing dtypes)", op, name,
             to_string(t->dtype()), first_name, to_string(first->dtype()));
    NL_CHECK(t->device() == first->device(), "{}: {} is on {} but {} is on {} (mixing devices)", op, name,
             device_name(t->device()), first_name, device_name(first->device()));
  }
}

namespace {
thread_local Precision t_storage = Precision::fp32;
}  // namespace

void store(Tensor& y) {
  if (t_storage != Precision::fp32 && y.defined()) kernels(y).round_to_format(y, t_storage);
}

Tensor stored(const Tensor& t) {
  if (t_storage == Precision::fp32 || !t.defined() || !t.is_leaf() || t.dtype() == DType::i32) return t;
  Tensor y = t.clone();
  store(y);
  if (needs_grad({&t})) record("cast", y, {t}, [](const Tensor&, GradOutputs& g) { g.pass_through(0); });
  return y;
}

Shape with_last(const Shape& s, int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

}  // namespace normlab::ops_detail

namespace normlab {

StoragePrecisionScope::StoragePrecisionScope(Precision p) : previous_(ops_detail::t_storage) {
  ops_detail::t_storage = p;
}
StoragePrecisionScope::~StoragePrecisionScope() { ops_detail::t_storage = previous_; }
Precision storage_precision() { return ops_detail::t_storage; }

}  // namespace normlab
