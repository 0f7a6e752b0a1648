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
// Whether a product whose operands are bf16 values (a bf16 run's) runs as oneDNN's bf16 matmul,
// float32 accumulation: when oneDNN's ISA has bf16 dot products (avx512_core_bf16 or AMX; a lower
// ONEDNN_MAX_CPU_ISA turns it off) and set_native_bf16_products has not turned it off.
bool native_bf16_products();
// Turns the native bf16 products off (false: bf16 runs emulate them in float32, as on a CPU
// without the instructions) or back on where the CPU has them; process-wide.
void set_native_bf16_products(bool allowed);

}  // namespace normlab
