#include "normlab/about.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "normlab/cpu_backend.h"
#include "normlab/cpu_kernels.h"
#include "normlab/cuda.h"
#include "normlab/version.h"

namespace normlab {

namespace {

std::string bf16_products_text() {
  if (native_bf16_products())
    return fmt::format("native (oneDNN bf16 matmul, float32 accumulation, subnormals flushed to zero; {})",
                       onednn_isa());
  return fmt::format("emulated (float32 products of bf16 values; oneDNN's ISA here: {})", onednn_isa());
}

}  // namespace

std::string version_text() {
  const BuildInfo& b = build_info();
  std::string s = fmt::format("normlab {} (commit {})\n", b.normlab_version, b.git_commit);
  s += fmt::format("sources sha256 {}\n", b.source_hash);
  s += fmt::format("oneDNN {}\n", onednn_version());
  s += fmt::format("compiler {} ({} build{})\n", b.compiler, b.build_type, b.sanitizers ? ", ASan+UBSan" : "");
  s += fmt::format("CUDA {}\n", cuda_summary());
  // What --precision bf16/fp16 means on each device (docs/precision.md).
  s += "bf16/fp16 on the CPU: emulated (float32 storage rounded to the format, nearest even, gradual "
       "underflow)\n";
  s += fmt::format("bf16 products on the CPU: {}\n", bf16_products_text());
  s += "bf16/fp16 on CUDA (cuda, cuda-sim): native 2-byte storage of activations and gradients (float32 "
       "arithmetic, one rounding per store)\n";
  return s;
}

std::map<std::string, std::string> provenance() {
  const BuildInfo& b = build_info();
  const CpuInfo& c = cpu_info();
  return {{"normlab", b.normlab_version}, {"git_commit", b.git_commit}, {"source_hash", b.source_hash},
          {"onednn", onednn_version()},
          {"compiler", b.compiler},       {"build_type", b.build_type}, {"cpu", cpu_model()},
          {"cpu_vendor", c.vendor},       {"cpu_family", c.family},     {"cpu_model_number", c.model},
          {"cpu_stepping", c.stepping},   {"cpu_isa", fmt::format("{}", fmt::join(c.isa, " "))},
          {"onednn_isa", onednn_isa()},   {"norm_kernels_isa", cpu::norm_kernels_isa()},
          {"bf16_products", native_bf16_products() ? "native" : "emulated"},
          {"host", host_name()}};
}

}  // namespace normlab
