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

Shape with_last(const Shape& s, int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

}  // namespace normlab::ops_detail
