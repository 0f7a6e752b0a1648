// The "cpu" backend: oneDNN 2.6 primitives for matrix products and LayerNorm, normlab's own
// vectorized kernels for everything else; float32 only (float64 goes to "reference").
// The norm kernels are also callable one by one on raw arrays: see norm_kernels.h.
#pragma once
#include <memory>

#include "normlab/backend.h"

namespace normlab {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace normlab
