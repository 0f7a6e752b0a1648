// Where a training step's time goes: the step's kernels read in a few parts (step_parts()),
// timed by a KernelClock over steps of their own.
#include <algorithm>
#include <chrono>
#include <map>

#include "bench_internal.h"
#include "normlab/kernel_clock.h"

namespace normlab::bench {

const std::vector<StepPart>& step_parts() {
  static const std::vector<StepPart> parts = {
      {"products", &StepRow::products_s},   {"norms", &StepRow::norms_s},
      {"attention", &StepRow::attention_s}, {"elementwise", &StepRow::elementwise_s},
      {"optimizer", &StepRow::optimizer_s}, {"other", &StepRow::other_s}};
  return parts;
}

std::string step_part_of(const std::string& name) {
  // The linear layer's kernels hold their fused epilogues (bias, residual add, GELU's derivative):
  // product time. "onednn_matmul" is oneDNN's product inside a cpu kernel (the time of the kernel
  // around it is the kernel's). Attention's products are the attention kernels' own loops.
  static const std::map<std::string, std::string> part = {
      {"onednn_matmul", "products"},
      {"matmul", "products"},
      {"linear_forward", "products"},
      {"linear_backward_input", "products"},
      {"layernorm_forward", "norms"},
      {"layernorm_backward", "norms"},
      {"add_layernorm_forward", "norms"},
      {"rmsnorm_forward", "norms"},
      {"rmsnorm_backward", "norms"},
      {"add_rmsnorm_forward", "norms"},
      {"seednorm_forward", "norms"},
      {"seednorm_backward", "norms"},
      {"composite_norm_forward", "norms"},
      {"composite_norm_backward", "norms"},
      {"channel_scale_forward", "norms"},
      {"channel_scale_backward", "norms"},
      {"squash_forward", "norms"},
      {"squash_backward", "norms"},
      {"scale_rows", "norms"},
      {"attention_forward", "attention"},
      {"attention_backward", "attention"},
      {"softmax_forward", "attention"},
      {"softmax_backward", "attention"},
      {"prefix_mean_forward", "attention"},
      {"prefix_mean_backward", "attention"},
      {"fill", "elementwise"},
      {"copy", "elementwise"},
      {"add", "elementwise"},
      {"accumulate", "elementwise"},
      {"scale", "elementwise"},
      {"mul", "elementwise"},
      {"dropout", "elementwise"},
      {"gelu_forward", "elementwise"},
      {"round_to_format", "elementwise"},
      {"transpose", "elementwise"},
      {"sum_rows", "elementwise"},
      {"adam_step", "optimizer"},
      {"sum_squares", "optimizer"},
      {"embedding_forward", "other"},
      {"embedding_backward", "other"},
      {"cross_entropy_forward", "other"},
      {"cross_entropy_backward", "other"},
      {"format_census", "other"},
      {"row_norms", "other"},
      {"attention_logit_stats", "other"},
  };
  const auto it = part.find(name);
  return it == part.end() ? "" : it->second;
}

namespace detail {

void measure_step_parts(const std::function<void()>& step, int64_t steps, StepRow& r) {
  KernelClock clock;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  const double per_step = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  r.clocked_step = per_step;
  for (const StepPart& p : step_parts()) r.*p.seconds = 0;
  r.kernels.clear();
  for (const KernelClock::Entry& e : clock.entries()) {
    std::string part = step_part_of(e.name);
    if (part.empty()) part = "other";
    const double seconds = e.seconds / steps;
    for (const StepPart& p : step_parts())
      if (part == p.name) r.*p.seconds += seconds;
    r.kernels.push_back({e.name, part, static_cast<double>(e.calls) / steps, seconds});
  }
  r.outside_kernels_s = std::max(0.0, per_step - clock.total_seconds() / steps);
  r.other_s += r.outside_kernels_s;
  std::sort(r.kernels.begin(), r.kernels.end(),
            [](const StepRow::Kernel& a, const StepRow::Kernel& b) { return a.seconds > b.seconds; });
}

}  // namespace detail
}  // namespace normlab::bench
