// `bench norms --device cuda | cuda-sim`: the device backend's norm kernels (LayerNorm, RMSNorm,
// their add+norm, and every other norm with op cases) called through the Backend interface, as the models call
// them, on tensors resident on the device: each row is its op case made at the row's shape,
// checked by check_case against the float64 reference, then timed on copies of its tensors that
// rotate through the footprint (case_sets.cpp, the code the cpu's backend rows and bench ops run),
// with the cpu rows' timing loop, statistics, byte counts and report.
//
//   normlab bench norms --device cuda --precision fp32,bf16,fp16
//   normlab bench norms --device cuda --pass both          every norm beside RMSNorm
//   normlab bench norms --device cuda-sim --shapes 1x8x64 --footprint-mib 1 --min-time 0
#include <algorithm>
#include <string>
#include <vector>

#include "bench_internal.h"
#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/cuda.h"
#include "normlab/error.h"

namespace normlab::bench::detail {

namespace {

std::string device_provider(const std::string& device) {
  return device == "cuda-sim" ? "normlab (cuda-sim)" : "normlab (CUDA)";
}

std::vector<Pass> passes_of(const NormBenchOptions& opt) {
  std::vector<Pass> passes;
  if (opt.fwd) passes.push_back(Pass::fwd);
  if (opt.bwd) passes.push_back(Pass::bwd);
  if (opt.addfwd) passes.push_back(Pass::addfwd);
  return passes;
}

// The norms whose kernels a device run times: those with a "fused" implementation among the
// selected ones (--impl), registry order.
std::vector<NormKind> device_norms(const NormBenchOptions& opt, const NormRegistry& registry) {
  std::vector<NormKind> norms;
  for (const NormImpl* m : registry.select(opt.impls))
    if (m->impl == "fused" && std::find(norms.begin(), norms.end(), m->norm) == norms.end()) norms.push_back(m->norm);
  return norms;
}

// One (shape, storage) group's op cases: the copy baselines (first dtype only), then each norm's
// passes that have a case (a 16-bit storage: those whose case stores in it).
struct GroupCase {
  const opcases::OpCase* c;
  std::string norm, impl, provider, pass;
};

std::vector<GroupCase> group_cases(const NormBenchOptions& opt, const std::vector<NormKind>& norms,
                                   const NormShape& shape, Precision storage, bool copies) {
  const std::string provider = device_provider(opt.device);
  auto made = [&](const std::string& op) {
    return &opcases::find_case(fmt::format("{} rows={} d={} seed={}", op, shape.rows(), shape.d, opt.seed));
  };
  std::vector<GroupCase> out;
  if (copies) {
    out.push_back({made("scale"), "copy", "loop", "normlab (the backend's elementwise scale kernel)", "copy"});
    out.push_back({made("copy"), "copy", "memcpy", "the backend's copy (cudaMemcpy)", "copy"});
  }
  for (const NormKind norm : norms)
    for (const Pass p : passes_of(opt)) {
      const std::string op = norm_op(norm, p);
      if (op.empty()) continue;
      const opcases::OpCase* c = made(op);
      if (storage != Precision::fp32 && c->stored.empty()) continue;  // no 16-bit form (DyT, add+norm, ...)
      out.push_back({c, to_string(norm), "fused", provider, to_string(p)});
    }
  return out;
}

}  // namespace

int64_t device_footprint(const NormBenchOptions& opt) {
  return opt.footprint > 0 ? opt.footprint : int64_t{1} << 30;
}

NormReport run_device_norm_bench(const NormBenchOptions& opt, const NormRegistry& registry) {
  validate(opt);
  NormReport report;
  report.context = collect_context();
  Backend& b = backend(opt.device);
  const int64_t footprint = device_footprint(opt);
  const int64_t resident_below = device_footprint(NormBenchOptions{});
  report.context.footprint_target = footprint;
  report.context.device = opt.device + ": " + (opt.device == "cuda-sim" ? cuda_sim_summary() : cuda_summary());
  const std::vector<NormKind> norms = device_norms(opt, registry);
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };

  for (const NormShape& shape : opt.shapes) {
    bool copies = opt.copy_baselines;  // timed once per shape, with its first dtype
    for (const std::string& dtype : opt.dtypes) {
      const Precision storage = storage_of(dtype);
      const int64_t sets = sets_for(shape, footprint, storage == Precision::fp32 ? 4 : 2);
      const std::vector<GroupCase> group = group_cases(opt, norms, shape, storage, copies);
      copies = false;
      // The cases share their tensors where they can (x and dy, the outputs), and each call takes
      // the next of `sets` sets of them.
      SharedSets shared(b, sets);
      log(fmt::format("{} {} on {}: {} case(s), {} buffer set(s)", shape.str(), dtype, opt.device, group.size(), sets));
      RowPlace place;
      place.device = opt.device;
      place.dtype = dtype;
      std::vector<Case> cases;
      for (const GroupCase& g : group) {
        const bool copy = g.norm == "copy";  // in float32, whatever the group's storage
        RowPlace where = place;
        if (copy) where.dtype = "f32";
        NormRow row = case_row(g.norm, g.impl, g.provider, g.pass, shape, where, sets, resident_below);
        const Precision s = copy ? Precision::fp32 : storage;
        Case c = checked_case(b, *g.c, s, shared, std::move(row));
        if (c.row.status == "rejected") {
          c.row.verify.report += fmt::format(" (rerun: normlab bench ops '{}' --device {})", g.c->line(), opt.device);
          log(fmt::format("REJECTED {}: {}", c.row.name(), c.row.verify.report));
        } else {
          log(fmt::format("verified {} (max |diff| {:.2g} in {})", c.row.name(), c.row.verify.max_abs_err,
                          c.row.verify.worst_output));
        }
        cases.push_back(std::move(c));
      }
      time_cases(cases, sets, false, opt, report);
    }
  }
  derive(report);
  add_row_warnings(report, resident_below);
  return report;
}

}  // namespace normlab::bench::detail
