// `bench norms` on the cpu: the registry's implementations, each on its op case made at the row's
// shape (checked by check_case, normlab/opcases.h), on buffer sets that rotate through more memory
// than the caches hold (or, for the resident shapes, one set that stays in them), at each thread
// count; a device run is device_norm_bench.cpp's. Both use the case sets (case_sets.cpp), the
// timing loop (norm_timing.cpp) and the derived figures (norm_derive.cpp).
//
//   normlab bench norms                               the default shapes, 1 and all threads
//   normlab bench norms --shapes 8x256x1024 --impl fused --pass fwd --threads 1
//   normlab bench norms --resident-shapes 1x512x64 --pass addfwd
#include <omp.h>

#include <algorithm>
#include <memory>

#include "bench_internal.h"
#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/system.h"


namespace normlab::bench {

namespace {

using detail::Case;
using detail::footprint_of;
using detail::mib;
using detail::sets_for;

// One (shape, kind) of the run: memory-bound shapes rotate through `sets` buffer sets, resident
// ones reuse one.
struct ShapeGroup {
  NormShape shape;
  bool resident = false;
  int64_t sets = 1;
};

// One row to check and time: an implementation (nullptr: a copy baseline), its pass and storage,
// and the op case it runs on, made at the group's shape.
struct RowPlan {
  const NormImpl* impl = nullptr;
  NormImpl own;  // a 16-bit row's implementation (impl points here)
  Pass pass = Pass::fwd;
  std::string dtype = "f32";
  const opcases::OpCase* c = nullptr;
  bool copy_loop = false;
};

const opcases::OpCase& made_case(const std::string& op, const NormShape& shape, uint64_t seed) {
  return opcases::find_case(fmt::format("{} rows={} d={} seed={}", op, shape.rows(), shape.d, seed));
}

// The group's rows: the copy baselines, each selected implementation's passes in float32, and the
// 16-bit kernels of LayerNorm and RMSNorm where their fused float32 kernel is selected.
std::vector<RowPlan> plan_rows(const NormBenchOptions& opt, const std::vector<const NormImpl*>& impls,
                               const std::vector<Pass>& passes, const NormShape& shape) {
  std::vector<RowPlan> rows;
  if (opt.copy_baselines)
    for (const bool loop : {true, false}) {
      RowPlan r;
      r.c = &made_case("copy", shape, opt.seed);
      r.copy_loop = loop;
      rows.push_back(r);
    }
  const bool f32 = std::find(opt.dtypes.begin(), opt.dtypes.end(), "f32") != opt.dtypes.end();
  for (const NormImpl* m : impls)
    for (const Pass p : passes)
      if (f32 && m->has(p)) rows.push_back({m, {}, p, "f32", &made_case(detail::norm_op(m->norm, p), shape, opt.seed)});
  for (const std::string& dtype : opt.dtypes) {
    if (dtype == "f32") continue;
    for (const NormImpl* m : impls) {
      if (m->impl != "fused" || m->backend) continue;  // the backend's rows have no 16-bit kernel here
      for (const Pass p : passes) {
        if (p == Pass::addfwd) continue;
        RowPlan r{nullptr, detail::norm16_impl(m->norm, detail::storage_of(dtype)), p, dtype,
                  &made_case(detail::norm_op(m->norm, p), shape, opt.seed)};
        rows.push_back(std::move(r));
      }
    }
  }
  for (RowPlan& r : rows)
    if (!r.impl && !r.own.impl.empty()) r.impl = &r.own;
  return rows;
}

// Bytes the group's rows take in `sets` shared buffer sets, from above: per set the N x D arrays
// in float32 (x, dy, y, dx, the add+norm's a and s, the copy rows' two), and in 16 bits for their
// rows (x, dy, y, dx); statistics and parameters are a fraction of one array.
int64_t group_bytes(const std::vector<RowPlan>& rows, const NormShape& shape, int64_t sets) {
  bool copy = false, add = false, narrow = false;
  for (const RowPlan& r : rows) {
    copy = copy || !r.impl;
    add = add || (r.impl && r.pass == Pass::addfwd);
    narrow = narrow || r.dtype != "f32";
  }
  const int64_t arrays32 = 4 + (add ? 2 : 0) + (copy ? 2 : 0) + 1;  // + 1: the statistics and parameters, generously
  return sets * shape.numel() * (4 * arrays32 + (narrow ? 2 * 4 : 0));
}

// The variant a fused row's kernel runs for its shape class (the check's call chose it, measuring
// if it must), on the row.
void add_variant(NormRow& row, const NormImpl& m, Pass p, const NormShape& shape, const float* written,
                 const std::function<void(const std::string&)>& log) {
  const RowVariant v = m.variant(p, shape.rows(), shape.d, written);
  row.variant = v.name;
  row.variant_source = v.source;
  row.backend_variant = v.backend;
  row.streaming_stores = v.streams;
  log(fmt::format("{} {} {}: variant {} ({}){}", row.name(), to_string(p), shape.str(), v.name, v.source,
                  v.backend.empty() ? "" : "; the backend runs " + v.backend));
}

// One planned row made a case: its row of the report, its check, its share of the rotation.
Case row_case(const RowPlan& r, const detail::RowPlace& place, const ShapeGroup& g, detail::SharedSets& sets,
              int64_t resident_below, const std::function<void(const std::string&)>& log) {
  detail::RowPlace where = place;
  where.dtype = r.dtype;
  Backend& cpu = backend("cpu");
  if (!r.impl) {  // a copy baseline: the case's out = a, bit for bit
    NormRow row = detail::case_row("copy", r.copy_loop ? "loop" : "memcpy", r.copy_loop ? "normlab" : "libc", "copy",
                                   g.shape, where, g.sets, resident_below);
    const bool loop = r.copy_loop;
    return detail::checked_case(cpu, *r.c, Precision::fp32, sets, std::move(row),
                                [loop](opcases::Tensors& t, const opcases::OpCase&) {
                                  const Tensor& a = t.at("a");
                                  float* out = t.at("out").data<float>();
                                  loop ? detail::copy_loop(out, a.data<float>(), a.numel())
                                       : detail::copy_memcpy(out, a.data<float>(), a.numel());
                                });
  }
  const NormImpl& m = *r.impl;
  NormRow row = detail::case_row(to_string(m.norm), m.impl, m.provider, to_string(r.pass), g.shape, where, g.sets,
                                 resident_below);
  row.streaming_stores = m.streaming_stores;
  Case c = detail::checked_case(cpu, *r.c, detail::storage_of(r.dtype), sets, std::move(row),
                                m.backend ? NormFn() : m.fn(r.pass));
  if (m.variant && r.dtype == "f32" && c.sets)
    add_variant(c.row, m, r.pass, g.shape, c.sets->at(0).at(r.pass == Pass::bwd ? "dx" : "y").data<float>(), log);
  return c;
}

// A norm row's own copy: what its kernel must at least move (fwd: x read, y written; bwd: x and dy
// read, dx written; addfwd: a and x read, s and y written; statistics and parameters left out) on
// its own buffer sets, so the same bytes from the same footprint in the same rotation, with the
// same kind of stores as its kernel's variant, timed beside it. No kernel moving those bytes can
// beat it in the same cache regime: derive() flags a row above it as a measurement error.
Case own_copy_case(const Case& norm, Pass pass) {
  Case c;
  c.row = norm.row;  // shape, place, bytes, working set, store kind
  c.row.norm = "copy";
  c.row.impl = own_copy_impl(norm.row);
  c.row.provider = "normlab";
  c.row.parameters = 0;
  c.row.variant = c.row.variant_source = c.row.backend_variant = "";
  c.row.verify = {};
  c.row.verify.pass = true;  // what it stores is no one's result: nothing to check
  c.sets = norm.sets;
  using Names = std::vector<std::string>;
  const Names ins = pass == Pass::bwd ? Names{"x", "dy"} : pass == Pass::addfwd ? Names{"a", "x"} : Names{"x"};
  const Names outs = pass == Pass::bwd ? Names{"dx"} : pass == Pass::addfwd ? Names{"s", "y"} : Names{"y"};
  // Each set's pointers found once: a call is only the copy (tiny resident shapes take ~100 ns).
  auto arrays = std::make_shared<std::vector<detail::OwnCopyArrays>>();
  for (int64_t k = 0; k < norm.sets->size(); ++k) {
    opcases::Tensors& t = norm.sets->at(k);
    detail::OwnCopyArrays a;
    for (const std::string& n : outs) a.outs[a.n_out++] = t.at(n).raw();
    for (const std::string& n : ins) a.ins[a.n_in++] = t.at(n).raw();
    a.bytes = static_cast<int64_t>(t.at(outs[0]).nbytes());
    a.elements = t.at(outs[0]).numel();
    a.streaming = norm.row.streaming_stores;
    arrays->push_back(a);
  }
  c.call = [arrays](int64_t k) { detail::own_copy((*arrays)[static_cast<size_t>(k) % arrays->size()]); };
  return c;
}

// Each cpu norm row that passed its check, followed by its own copy.
std::vector<Case> with_own_copies(std::vector<Case> cases, const std::vector<RowPlan>& rows) {
  std::vector<Case> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    const bool norm = rows[i].impl != nullptr && cases[i].row.status == "ok" && cases[i].sets;
    out.push_back(std::move(cases[i]));
    if (norm) out.push_back(own_copy_case(out.back(), rows[i].pass));
  }
  return out;
}

// What every group of a cpu run shares: the options, the implementations and passes they select,
// the thread counts, the size below which a shape stays in the caches, and the log.
struct CpuRun {
  const NormBenchOptions& opt;
  std::vector<const NormImpl*> impls;
  std::vector<int> threads;
  std::vector<Pass> passes;
  int64_t resident_below = 0;
  std::function<void(const std::string&)> log;
};

CpuRun plan_run(const NormBenchOptions& opt, const NormRegistry& registry, int64_t llc_bytes) {
  CpuRun run{opt, {}, {}, {}, 0, {}};
  run.resident_below = detail::cache_resident_below(llc_bytes);
  run.impls = registry.select(opt.impls);
  run.threads = opt.threads;
  if (run.threads.empty()) run.threads = parse_threads("1,all");
  if (opt.fwd) run.passes.push_back(Pass::fwd);
  if (opt.bwd) run.passes.push_back(Pass::bwd);
  if (opt.addfwd) run.passes.push_back(Pass::addfwd);
  run.log = [&opt](const std::string& s) {
    if (opt.log) opt.log(s);
  };
  return run;
}

// The run's groups: each memory-bound shape with as many buffer sets as fill the footprint, then
// each resident shape with one.
std::vector<ShapeGroup> shape_groups(const NormBenchOptions& opt, int64_t footprint) {
  std::vector<ShapeGroup> groups;
  for (const NormShape& shape : opt.shapes) groups.push_back({shape, false, sets_for(shape, footprint)});
  for (const NormShape& shape : opt.resident_shapes) groups.push_back({shape, true, 1});
  return groups;
}

// A row's check in the log: the largest difference, or why it was rejected, with the command that
// reruns the row alone (added to the row's report too).
void log_check(Case& c, const RowPlan& r, const ShapeGroup& g, int threads, const CpuRun& run) {
  if (!c.row.verify.pass) {
    c.row.verify.report += fmt::format(
        " (rerun: normlab bench norms --impl {} --precision {} --pass {} --{}shapes {} --threads {})",
        r.impl ? r.impl->name() : "copy", r.dtype == "f32" ? "fp32" : r.dtype, to_string(r.pass),
        g.resident ? "resident-" : "", g.shape.str(), threads);
    run.log(fmt::format("REJECTED {}: {}", c.row.name(), c.row.verify.report));
  } else {
    run.log(fmt::format("verified {} (max |diff| {:.2g} in {})", c.row.name(), c.row.verify.max_abs_err,
                        c.row.verify.worst_output));
  }
}

// One group's rows at every thread count: each row checked (a rejected one is not timed), then the
// checked rows timed together.
void bench_group(ShapeGroup& group, const CpuRun& run, int64_t budget, NormReport& report) {
  const std::vector<RowPlan> rows = plan_rows(run.opt, run.impls, run.passes, group.shape);
  // Less rotation rather than swapping: keep the rows' sets and a row's check within the memory
  // budget (a machine that reports a large LLC asks for a large rotation).
  while (group.sets > 1 && budget > 0 && group_bytes(rows, group.shape, group.sets) + detail::check_bytes(group.shape) > budget)
    --group.sets;
  // The rows share their tensors where they can (x and dy, the outputs), and each call takes the
  // next of the group's sets: a buffer comes back after every row's traffic through them.
  detail::SharedSets shared(backend("cpu"), group.sets);
  run.log(fmt::format("{}{}: {} row(s), {} buffer set(s), {} in all", group.shape.str(), group.resident ? " (resident)" : "",
                      rows.size(), group.sets, mib(group_bytes(rows, group.shape, group.sets))));
  for (int t : run.threads) {
    set_num_threads(t);
    detail::RowPlace place;
    place.threads = t;
    place.resident = group.resident;
    std::vector<Case> cases;
    for (const RowPlan& r : rows) {
      Case c = row_case(r, place, group, shared, run.resident_below, run.log);
      log_check(c, r, group, t, run);
      cases.push_back(std::move(c));
    }
    if (run.opt.copy_baselines) cases = with_own_copies(std::move(cases), rows);
    detail::time_cases(cases, group.sets, group.resident, run.opt, report);
  }
}

}  // namespace

NormReport run_norm_bench(const NormBenchOptions& given, const NormRegistry& registry) {
  if (given.device != "cpu") return detail::run_device_norm_bench(given, registry);
  std::vector<std::string> left_out;
  const NormBenchOptions opt = fitted_to_memory(given, left_out);
  validate(opt);
  NormReport report;
  report.context = collect_context();
  const int64_t footprint = footprint_of(opt, report.context.llc_bytes);
  report.context.footprint_target = footprint;
  const CpuRun run = plan_run(opt, registry, report.context.llc_bytes);
  detail::RunFrame frame(report.context, run.threads);
  const int64_t budget = memory_budget_bytes();
  for (ShapeGroup& group : shape_groups(opt, footprint)) {
    bench_group(group, run, budget, report);
    arena_release_cached();  // the next shape's tensors are of other sizes
  }
  frame.finish(report);
  report.warnings.insert(report.warnings.end(), left_out.begin(), left_out.end());
  detail::add_row_warnings(report, run.resident_below);
  return report;
}

}  // namespace normlab::bench
