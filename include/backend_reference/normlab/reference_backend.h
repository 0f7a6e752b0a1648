// The "reference" backend: plain loops in float32 and float64 (reference_kernels.h), the oracle
// every other backend is tested against and the backend gradcheck runs on.
#pragma once
#include <memory>

#include "normlab/backend.h"

namespace normlab {

std::unique_ptr<Backend> make_reference_backend();

}  // namespace normlab
