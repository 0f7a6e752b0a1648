// `bench norms`: the registry of norm implementations, and the cpu backend's five kernels
// (include/backend_cpu/normlab/cpu_kernels.h) registered in it, with the unfused add+norm
// baseline. A test registers more (a deliberately wrong one, to see it rejected before timing);
// scripts/torch_bench.py adds PyTorch's rows from its own process.
#include <algorithm>

#include "bench_internal.h"
#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/cpu_backend.h"

namespace normlab::bench {

bool NormImpl::has(Pass p) const { return backend ? !detail::norm_op(norm, p).empty() : static_cast<bool>(fn(p)); }

void NormRegistry::add(NormImpl impl) {
  NL_CHECK(impl.norm == NormKind::layernorm || impl.norm == NormKind::rmsnorm || impl.norm == NormKind::dyt ||
               impl.norm == NormKind::derf || impl.norm == NormKind::seednorm,
           "norm implementation '{}': norm must be layernorm, rmsnorm, dyt, derf or seednorm", impl.name());
  NL_CHECK(!impl.impl.empty() && impl.impl.find_first_of("./ ") == std::string::npos,
           "norm implementation '{}': the implementation name must be non-empty, without '.', '/' or spaces",
           impl.name());
  for (const NormImpl& have : impls_)
    NL_CHECK(have.name() != impl.name(), "norm implementation '{}' is registered twice", impl.name());
  impls_.push_back(std::move(impl));
}

std::vector<const NormImpl*> NormRegistry::select(const std::vector<std::string>& patterns,
                                                  const std::string& flag) const {
  std::vector<const NormImpl*> out;
  auto take = [&](const NormImpl& m) {
    if (std::find(out.begin(), out.end(), &m) == out.end()) out.push_back(&m);
  };
  for (const std::string& p : patterns) {
    bool matched = false;
    for (const NormImpl& m : impls_) {
      if (p == "all" || p == m.name() || p == m.impl || p == to_string(m.norm)) {
        take(m);
        matched = true;
      }
    }
    if (!matched) {
      std::string known;
      for (const NormImpl& m : impls_) known += (known.empty() ? "" : ", ") + m.name();
      throw UsageError(fmt::format("{}: unknown implementation '{}' (known: all, layernorm, rmsnorm, dyt, derf, seednorm, {}; "
                                   "or an implementation such as fused)",
                                   flag, p, known));
    }
  }
  // Registry order, whatever the order of the patterns.
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The fused kernels run the variant measured fastest for the call's shape class on this machine
// (cpu::norm_choice); a row that streams its output is held to memcpy.
RowVariant fused_kernel_variant(NormKind norm, Pass p, const NormArgs& a) {
  using cpu::NormKernel;
  const bool ln = norm == NormKind::layernorm;
  const NormKernel k = p == Pass::fwd   ? (ln ? NormKernel::layernorm_forward : NormKernel::rmsnorm_forward)
                       : p == Pass::bwd ? (ln ? NormKernel::layernorm_backward : NormKernel::rmsnorm_backward)
                                        : (ln ? NormKernel::add_layernorm_forward : NormKernel::add_rmsnorm_forward);
  const cpu::NormChoice& c = cpu::norm_choice(k, a.n, a.d, p != Pass::bwd || a.dx != nullptr);
  RowVariant v;
  v.name = c.own.name();
  v.source = c.source;
  if (!(c.best == c.own)) v.backend = c.best.name();
  v.streams = cpu::variant_streams(c.own, p == Pass::bwd ? a.dx : a.y, a.d);
  return v;
}

}  // namespace

NormRegistry builtin_norm_impls() {
  NormRegistry r;
  const std::string onednn = "oneDNN " + onednn_version();
  // oneDNN 2.6's simple_layer_normalization stores with ordinary (vmovups) stores.
  r.add({NormKind::layernorm, "onednn", onednn, "oneDNN's layer_normalization primitive (variance converted to rstd)", false,
         [](const NormArgs& a) {
           cpu::layernorm_forward_onednn(a.y, a.mean, a.rstd, a.x, a.gamma, a.beta, a.n, a.d, a.eps);
         },
         [](const NormArgs& a) {
           cpu::layernorm_backward_onednn(a.dx, a.dgamma, a.dbeta, a.dy, a.x, a.gamma, a.saved_mean,
                                          a.saved_rstd, a.n, a.d);
         },
         nullptr,
         nullptr});
  r.add({NormKind::layernorm, "multipass", "normlab", "plain loops, one sweep over the tensor per step", false,
         [](const NormArgs& a) {
           cpu::layernorm_forward_multipass(a.y, a.mean, a.rstd, a.x, a.gamma, a.beta, a.n, a.d, a.eps);
         },
         [](const NormArgs& a) {
           cpu::layernorm_backward_multipass(a.dx, a.dgamma, a.dbeta, a.dy, a.x, a.gamma, a.saved_mean,
                                             a.saved_rstd, a.n, a.d);
         },
         nullptr,
         nullptr});
  r.add({NormKind::layernorm, "fused", "normlab", "one pass over memory per row, vectorized (the cpu backend's)", false,
         [](const NormArgs& a) {
           cpu::layernorm_forward_onepass(a.y, a.mean, a.rstd, a.x, a.gamma, a.beta, a.n, a.d, a.eps);
         },
         [](const NormArgs& a) {
           cpu::layernorm_backward_onepass(a.dx, a.dgamma, a.dbeta, a.dy, a.x, a.gamma, a.saved_mean,
                                         a.saved_rstd, a.n, a.d);
         },
         [](const NormArgs& a) {
           cpu::add_layernorm_forward_fused(a.s, a.y, a.mean, a.rstd, a.x, a.branch, a.alpha, a.gamma, a.beta, a.n,
                                            a.d, a.eps);
         },
         [](Pass p, const NormArgs& a) { return fused_kernel_variant(NormKind::layernorm, p, a); }});
  r.add({NormKind::rmsnorm, "multipass", "normlab", "plain loops, one sweep over the tensor per step", false,
         [](const NormArgs& a) { cpu::rmsnorm_forward_multipass(a.y, a.rstd, a.x, a.gamma, a.n, a.d, a.eps); },
         [](const NormArgs& a) {
           cpu::rmsnorm_backward_multipass(a.dx, a.dgamma, a.dy, a.x, a.gamma, a.saved_rstd, a.n, a.d);
         },
         nullptr,
         nullptr});
  r.add({NormKind::rmsnorm, "fused", "normlab", "one pass over memory per row, vectorized (the cpu backend's)", false,
         [](const NormArgs& a) { cpu::rmsnorm_forward_onepass(a.y, a.rstd, a.x, a.gamma, a.n, a.d, a.eps); },
         [](const NormArgs& a) {
           cpu::rmsnorm_backward_onepass(a.dx, a.dgamma, a.dy, a.x, a.gamma, a.saved_rstd, a.n, a.d);
         },
         [](const NormArgs& a) {
           cpu::add_rmsnorm_forward_fused(a.s, a.y, a.rstd, a.x, a.branch, a.alpha, a.gamma, a.n, a.d, a.eps);
         },
         [](Pass p, const NormArgs& a) { return fused_kernel_variant(NormKind::rmsnorm, p, a); }});
  // DyT (Zhu et al. 2025): no statistics, a transcendental per element. The paper's claim that it
  // is faster than RMSNorm is measured against the rows above.
  r.add({NormKind::dyt, "multipass", "normlab", "plain loops: alpha*x, tanh (libm), gamma*t + beta, one pass each", false,
         [](const NormArgs& a) { cpu::dyt_forward_multipass(a.y, a.x, a.dyt_alpha, a.gamma, a.beta, a.n, a.d); },
         [](const NormArgs& a) {
           cpu::dyt_backward_multipass(a.dx, a.dalpha, a.dgamma, a.dbeta, a.dy, a.x, a.dyt_alpha, a.gamma, a.n, a.d);
         },
         nullptr,
         nullptr});
  // The backend's kernels of DyT and Derf (Chen et al. 2025: erf and a learned shift, whose
  // gradient is a second full reduction), and SeeDNorm's (Cai et al. 2025: RMSNorm's passes with
  // a second row sum, x . beta, and three parameter gradients), as the models call them.
  auto backend_impl = [](NormKind norm, const char* description) {
    NormImpl m;
    m.norm = norm;
    m.impl = "fused";
    m.provider = "normlab";
    m.description = description;
    m.backend = true;
    return m;
  };
  r.add(backend_impl(NormKind::dyt, "one pass, vectorized tanh (the backend's DyT/Derf kernel, on its op case)"));
  r.add(backend_impl(NormKind::derf, "one pass, vectorized erf (the backend's DyT/Derf kernel, on its op case)"));
  r.add(backend_impl(NormKind::seednorm, "two row sums and a write per row, vectorized (the backend's kernel, on its op case)"));
  // What the fused add+norm saves: s written by one pass and read back by the next (6ND floats
  // moved against 4ND).
  r.add({NormKind::layernorm, "unfused", "normlab", "add+norm as two kernels: s = alpha*a + b, then layernorm.fused of s",
         false, nullptr, nullptr, [](const NormArgs& a) {
           detail::add_scaled(a.s, a.x, a.branch, a.alpha, a.n * a.d);
           cpu::layernorm_forward_onepass(a.y, a.mean, a.rstd, a.s, a.gamma, a.beta, a.n, a.d, a.eps);
         },
         nullptr});
  r.add({NormKind::rmsnorm, "unfused", "normlab", "add+norm as two kernels: s = alpha*a + b, then rmsnorm.fused of s",
         false, nullptr, nullptr, [](const NormArgs& a) {
           detail::add_scaled(a.s, a.x, a.branch, a.alpha, a.n * a.d);
           cpu::rmsnorm_forward_onepass(a.y, a.rstd, a.s, a.gamma, a.n, a.d, a.eps);
         },
         nullptr});
  return r;
}

}  // namespace normlab::bench
