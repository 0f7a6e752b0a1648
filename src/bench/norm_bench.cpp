// `bench norms` on the cpu: the registry's implementations on buffer sets that rotate through
// more memory than the caches hold (or, for the resident shapes, one set that stays in them), at
// each thread count; a device run is device_norm_bench.cpp's. Both use the pool (norm_pool.cpp),
// the check (norm_check.cpp), the timing loop (norm_timing.cpp) and the derived figures
// (norm_derive.cpp).
//
//   normlab bench norms                               the default shapes, 1 and all threads
//   normlab bench norms --shapes 8x256x1024 --impl fused --pass fwd --threads 1
//   normlab bench norms --resident-shapes 1x512x64 --pass addfwd
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "normlab/reference_kernels.h"
#include "bench_internal.h"
#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/cpu_kernels.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/system.h"
#include "normlab/tolerances.h"


namespace normlab::bench {

namespace {

using detail::BufferSet;
using detail::Case;
using detail::args_for;
using detail::Pool;
using detail::footprint_of;
using detail::mib;
using detail::pool_bytes;
using detail::sets_for;

// ============================================================================
// memory: 2 MiB-aligned blocks, transparent huge pages asked for, touched when filled
// ============================================================================

constexpr size_t kHugePage = size_t{2} << 20;

class Block {
 public:
  explicit Block(size_t floats) {
    bytes_ = std::max<size_t>(kHugePage, (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage);
    p_ = static_cast<float*>(std::aligned_alloc(kHugePage, bytes_));
    NL_CHECK(p_ != nullptr, "bench: cannot allocate {} MiB", bytes_ >> 20);
    madvise(p_, bytes_, MADV_HUGEPAGE);  // a hint; without it the timings see 4 KiB pages' TLB misses
  }
  ~Block() { std::free(p_); }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
  size_t bytes_ = 0;
};


// One (shape, kind) of the run: memory-bound shapes rotate through `sets` buffer sets, resident
// ones reuse one.
struct ShapeGroup {
  NormShape shape;
  bool resident = false;
  int64_t sets = 1;
};

// A registry row on the pool's buffer sets: checked by verify_norm on set 0 first (a wrong kernel
// is reported and never timed; its first call is also where a fused kernel's shape class chooses
// its variant, measuring if it must), then called on set k.
Case pool_row(const NormImpl& m, Pass p, const Pool& pool, const NormBenchOptions& opt, NormRow row,
              const std::function<void(const std::string&)>& log) {
  const float eps = m.norm == NormKind::layernorm ? opt.ln_eps : opt.rms_eps;
  const NormKind norm = m.norm;
  Case c;
  c.row = std::move(row);
  c.call = [&pool, fn = m.fn(p), norm, p, eps, alpha = opt.add_alpha](int64_t k) {
    fn(args_for(pool, k, norm, p, eps, alpha));
  };
  c.row.verify = verify_norm(m, p, args_for(pool, 0, norm, p, eps, opt.add_alpha));
  c.row.streaming_stores = m.streaming_stores;
  if (m.variant) {
    const RowVariant v = m.variant(p, args_for(pool, 0, norm, p, eps, opt.add_alpha));
    c.row.variant = v.name;
    c.row.variant_source = v.source;
    c.row.backend_variant = v.backend;
    c.row.streaming_stores = v.streams;
    log(fmt::format("{} {} {}: variant {} ({}){}", c.row.name(), to_string(p), pool.shape().str(), v.name, v.source,
                    v.backend.empty() ? "" : "; the backend runs " + v.backend));
  }
  return c;
}

// A backend row: its op case at the group's shape on the cpu backend, on its own share of the
// group's sets (the cases run in turn, so a buffer is reused after all of their traffic).
Case backend_row(const NormImpl& m, Pass p, const NormShape& shape, int64_t sets, int64_t backend_cases,
                 const NormBenchOptions& opt, NormRow row) {
  const std::string line = fmt::format("{} rows={} d={} seed={}", detail::norm_op(m.norm, p), shape.rows(), shape.d, opt.seed);
  const int64_t own = std::max<int64_t>(1, sets / std::max<int64_t>(1, backend_cases));
  return detail::backend_case(backend("cpu"), opcases::find_case(line), Precision::fp32, own, std::move(row));
}

}  // namespace

NormReport run_norm_bench(const NormBenchOptions& opt, const NormRegistry& registry) {
  if (opt.device != "cpu") return detail::run_device_norm_bench(opt, registry);
  validate(opt);
  NormReport report;
  report.context = collect_context();
  const int64_t footprint = footprint_of(opt, report.context.llc_bytes);
  report.context.footprint_target = footprint;
  const int64_t resident_below = detail::cache_resident_below(report.context.llc_bytes);
  const std::vector<const NormImpl*> impls = registry.select(opt.impls);
  std::vector<int> threads = opt.threads;
  if (threads.empty()) threads = parse_threads("1,all");
  std::vector<Pass> passes;
  if (opt.fwd) passes.push_back(Pass::fwd);
  if (opt.bwd) passes.push_back(Pass::bwd);
  bool with_sum = false;  // the pools need s only when an add+norm forward runs
  if (opt.addfwd) {
    passes.push_back(Pass::addfwd);
    for (const NormImpl* m : impls) with_sum = with_sum || static_cast<bool>(m->add_forward);
  }
  // The backend's rows (on their op cases' own tensors) share each group's rotation: per case
  // passes that run, and whether any does (their sets then count against the memory budget too).
  int64_t backend_cases = 0;
  for (const NormImpl* m : impls)
    for (Pass p : passes) backend_cases += m->backend && m->has(p) ? 1 : 0;
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };
  detail::RunFrame frame(report.context, threads);
  const int64_t budget = memory_budget_bytes();

  // Buffer sets per shape, and one block of memory for the largest pool, reused by all shapes.
  std::vector<ShapeGroup> groups;
  int64_t most = 0;
  for (const NormShape& shape : opt.shapes) {
    int64_t sets = sets_for(shape, footprint);
    // Less rotation rather than swapping: keep the pool within the memory budget.
    while (sets > 1 && budget > 0 && pool_bytes(shape, sets, with_sum) * (backend_cases > 0 ? 2 : 1) > budget) --sets;
    groups.push_back({shape, false, sets});
  }
  for (const NormShape& shape : opt.resident_shapes) groups.push_back({shape, true, 1});
  for (const ShapeGroup& g : groups) most = std::max(most, pool_bytes(g.shape, g.sets, with_sum));
  Block memory(static_cast<size_t>(most / 4));

  for (const ShapeGroup& group : groups) {
    const NormShape& shape = group.shape;
    const int64_t sets = group.sets;
    log(fmt::format("{}{}: {} buffer set(s), {} in all", shape.str(), group.resident ? " (resident)" : "", sets,
                    mib(pool_bytes(shape, sets, with_sum))));
    Pool pool(memory.get(), shape, sets, with_sum, opt.seed, opt.ln_eps, opt.rms_eps);
    const int64_t nd = shape.numel();
    // The 16-bit rows' own sets: as many as give them the same footprint in bytes.
    std::vector<std::unique_ptr<detail::Pool16>> pools16;
    for (const std::string& dtype : opt.dtypes) {
      if (dtype == "f32" || !(opt.fwd || opt.bwd)) continue;
      int64_t sets16 = group.resident ? 1 : sets_for(shape, footprint, 2);
      while (sets16 > 1 && budget > 0 && detail::Pool16::bytes(shape, sets16) > budget) --sets16;
      log(fmt::format("{} {}: {} buffer set(s), {} in all", shape.str(), dtype, sets16,
                      mib(detail::Pool16::bytes(shape, sets16))));
      pools16.push_back(std::make_unique<detail::Pool16>(detail::storage_of(dtype), shape, sets16, opt.seed, opt.ln_eps,
                                                         opt.rms_eps));
    }

    for (int t : threads) {
      set_num_threads(t);
      std::vector<Case> cases;
      detail::RowPlace place;
      place.threads = t;
      place.resident = group.resident;
      auto base_row = [&](const std::string& norm, const std::string& impl, const std::string& provider,
                          const std::string& pass) {
        return detail::case_row(norm, impl, provider, pass, shape, place, sets, resident_below);
      };
      if (opt.copy_baselines) {
        for (const char* which : {"loop", "memcpy"}) {
          Case c;
          c.row = base_row("copy", which, std::string(which) == "loop" ? "normlab" : "libc", "copy");
          const bool loop = std::string(which) == "loop";
          c.call = [&pool, nd, loop](int64_t k) {
            const BufferSet& b = pool.set(k);
            loop ? detail::copy_loop(b.out, b.x, nd) : detail::copy_memcpy(b.out, b.x, nd);
          };
          // Checked as every case is: the copy must reproduce its source bit for bit.
          detail::fill_nan(pool.set(0).out, nd);
          c.call(0);
          c.row.verify.pass = std::memcmp(pool.set(0).out, pool.set(0).x, static_cast<size_t>(nd) * 4) == 0;
          if (!c.row.verify.pass) {
            c.row.status = "rejected";
            c.row.verify.report = c.row.name() + ": the copy differs from its source";
          }
          cases.push_back(std::move(c));
        }
      }
      const bool f32_rows = std::find(opt.dtypes.begin(), opt.dtypes.end(), "f32") != opt.dtypes.end();
      for (const NormImpl* m : impls) {
        for (Pass p : passes) {
          if (!f32_rows || !m->has(p)) continue;
          NormRow row = base_row(to_string(m->norm), m->impl, m->provider, to_string(p));
          Case c = m->backend ? backend_row(*m, p, shape, sets, backend_cases, opt, std::move(row))
                              : pool_row(*m, p, pool, opt, std::move(row), log);
          if (!c.row.verify.pass) {
            c.row.status = "rejected";
            c.row.verify.report += fmt::format(" (rerun: normlab bench norms --impl {} --pass {} --{}shapes {} --threads {})",
                                               m->name(), to_string(p), group.resident ? "resident-" : "", shape.str(), t);
            log(fmt::format("REJECTED {}: {}", c.row.name(), c.row.verify.report));
          } else {
            log(fmt::format("verified {} (max |diff| {:.2g} in {})", c.row.name(), c.row.verify.max_abs_err,
                            c.row.verify.worst_output));
          }
          cases.push_back(std::move(c));
        }
      }
      // The fused kernels over 16-bit storage, where the fused float32 kernel of the norm is
      // selected. Each case rotates through its own sets (twice as many: the same bytes).
      for (auto& p16 : pools16) {
        detail::RowPlace place16 = place;
        place16.dtype = to_string(p16->format());
        for (const NormImpl* m : impls) {
          // the backend rows (DyT, Derf, SeeDNorm) have no 16-bit kernel here
          if (m->impl != "fused" || m->backend) continue;
          const NormImpl m16 = p16->impl(m->norm);
          const float eps = m->norm == NormKind::layernorm ? opt.ln_eps : opt.rms_eps;
          for (Pass p : passes) {
            if (!m16.fn(p)) continue;
            Case c;
            c.row = detail::case_row(to_string(m->norm), m16.impl, m16.provider, to_string(p), shape, place16,
                                     p16->size(), resident_below);
            c.row.verify = verify_norm(m16, p, args_for(p16->source(), 0, m->norm, p, eps, opt.add_alpha));
            if (!c.row.verify.pass) {
              c.row.status = "rejected";
              c.row.verify.report += fmt::format(" (rerun: normlab bench norms --impl {} --precision {} --pass {} --{}shapes {} --threads {})",
                                                 m->name(), place16.dtype, to_string(p), group.resident ? "resident-" : "",
                                                 shape.str(), t);
              log(fmt::format("REJECTED {}: {}", c.row.name(), c.row.verify.report));
            }
            detail::Pool16* pool16 = p16.get();
            c.call = [pool16, norm = m->norm, p, eps, next = std::make_shared<int64_t>(0)](int64_t) {
              pool16->run(norm, p, (*next)++, eps);
            };
            cases.push_back(std::move(c));
          }
        }
      }

      detail::time_cases(cases, sets, group.resident, opt, report);
    }
  }
  frame.finish(report);
  detail::add_row_warnings(report, resident_below);
  return report;
}

}  // namespace normlab::bench
