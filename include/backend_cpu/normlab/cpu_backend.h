// The "cpu" backend: oneDNN 2.6 primitives for matrix products and LayerNorm, normlab's own
// vectorized kernels for everything else; float32 only (float64 goes to "reference").
// The norm kernels are also callable one by one on raw arrays: see cpu_kernels.h.
#pragma once
#include <memory>
#include <string>

#include "normlab/backend.h"

namespace normlab {

std::unique_ptr<Backend> make_cpu_backend();
// The version of the oneDNN library loaded at run time, "2.6.3".
std::string onednn_version();
// The ISA oneDNN's kernels use on this CPU (dnnl::get_effective_cpu_isa: avx2, avx512_core, ...).
std::string onednn_isa();

}  // namespace normlab
