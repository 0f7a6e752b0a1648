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
  NL_CHECK(!detail::norm_op(impl.norm, Pass::fwd).empty(),
           "norm implementation '{}': norm {} has no op cases", impl.name(), to_string(impl.norm));
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
      std::string norms;
      for (const NormImpl& m : impls_)
        if (norms.find(to_string(m.norm)) == std::string::npos) norms += std::string(to_string(m.norm)) + ", ";
      throw UsageError(fmt::format("{}: unknown implementation '{}' (known: all, {}{}; or an implementation such as fused)",
                                   flag, p, norms, known));
    }
  }
  // Registry order, whatever the order of the patterns.
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// A case's tensors as the raw arrays the cpu's own kernels take: x is (rows, d).
using opcases::OpCase;
using opcases::Tensors;
const float* in(Tensors& t, const char* name) { return t.at(name).data<float>(); }
float* out(Tensors& t, const char* name) {  // nullptr: an output the call does not want
  Tensor* o = t.out(name);
  return o ? o->data<float>() : nullptr;
}
int64_t rows(Tensors& t) { return t.at("x").shape()[0]; }
int64_t width(Tensors& t) { return t.at("x").shape()[1]; }
float eps(const OpCase& c) { return static_cast<float>(c.number("eps")); }
float add_alpha(const OpCase& c) { return static_cast<float>(c.number("alpha")); }

// The fused kernels run the variant measured fastest for the call's shape class on this machine
// (cpu::norm_choice); a row that streams its output is held to memcpy.
RowVariant fused_kernel_variant(NormKind norm, Pass p, int64_t n, int64_t d, const float* written) {
  using cpu::NormKernel;
  const bool ln = norm == NormKind::layernorm;
  const NormKernel k = p == Pass::fwd   ? (ln ? NormKernel::layernorm_forward : NormKernel::rmsnorm_forward)
                       : p == Pass::bwd ? (ln ? NormKernel::layernorm_backward : NormKernel::rmsnorm_backward)
                                        : (ln ? NormKernel::add_layernorm_forward : NormKernel::add_rmsnorm_forward);
  const cpu::NormChoice& c = cpu::norm_choice(k, n, d, true);
  RowVariant v;
  v.name = c.own.name();
  v.source = c.source;
  if (!(c.best == c.own)) v.backend = c.best.name();
  v.streams = cpu::variant_streams(c.own, written, d);
  return v;
}

NormImpl raw(NormKind norm, const char* impl, const std::string& provider, const char* description, NormFn fwd,
             NormFn bwd, NormFn addfwd = nullptr) {
  NormImpl m;
  m.norm = norm;
  m.impl = impl;
  m.provider = provider;
  m.description = description;
  m.forward = std::move(fwd);
  m.backward = std::move(bwd);
  m.add_forward = std::move(addfwd);
  return m;
}

void add_layernorm_impls(NormRegistry& r) {
  r.add(raw(NormKind::layernorm, "onednn", "oneDNN " + onednn_version(),
            "oneDNN's layer_normalization primitive (variance converted to rstd)",
            [](Tensors& t, const OpCase& c) {
              cpu::layernorm_forward_onednn(out(t, "y"), out(t, "mean"), out(t, "rstd"), in(t, "x"), in(t, "gamma"),
                                            in(t, "beta"), rows(t), width(t), eps(c));
            },
            [](Tensors& t, const OpCase&) {
              cpu::layernorm_backward_onednn(out(t, "dx"), out(t, "dgamma"), out(t, "dbeta"), in(t, "dy"), in(t, "x"),
                                             in(t, "gamma"), in(t, "mean"), in(t, "rstd"), rows(t), width(t));
            }));
  r.add(raw(NormKind::layernorm, "multipass", "normlab", "plain loops, one sweep over the tensor per step",
            [](Tensors& t, const OpCase& c) {
              cpu::layernorm_forward_multipass(out(t, "y"), out(t, "mean"), out(t, "rstd"), in(t, "x"), in(t, "gamma"),
                                               in(t, "beta"), rows(t), width(t), eps(c));
            },
            [](Tensors& t, const OpCase&) {
              cpu::layernorm_backward_multipass(out(t, "dx"), out(t, "dgamma"), out(t, "dbeta"), in(t, "dy"),
                                                in(t, "x"), in(t, "gamma"), in(t, "mean"), in(t, "rstd"), rows(t),
                                                width(t));
            }));
  NormImpl fused = raw(
      NormKind::layernorm, "fused", "normlab", "one pass over memory per row, vectorized (the cpu backend's)",
      [](Tensors& t, const OpCase& c) {
        cpu::layernorm_forward_onepass(out(t, "y"), out(t, "mean"), out(t, "rstd"), in(t, "x"), in(t, "gamma"),
                                       in(t, "beta"), rows(t), width(t), eps(c));
      },
      [](Tensors& t, const OpCase&) {
        cpu::layernorm_backward_onepass(out(t, "dx"), out(t, "dgamma"), out(t, "dbeta"), in(t, "dy"), in(t, "x"),
                                        in(t, "gamma"), in(t, "mean"), in(t, "rstd"), rows(t), width(t));
      },
      [](Tensors& t, const OpCase& c) {
        cpu::add_layernorm_forward_fused(out(t, "s"), out(t, "y"), out(t, "mean"), out(t, "rstd"), in(t, "a"),
                                         in(t, "x"), add_alpha(c), in(t, "gamma"), in(t, "beta"), rows(t), width(t),
                                         eps(c));
      });
  fused.variant = [](Pass p, int64_t n, int64_t d, const float* written) {
    return fused_kernel_variant(NormKind::layernorm, p, n, d, written);
  };
  r.add(fused);
}

void add_rmsnorm_impls(NormRegistry& r) {
  r.add(raw(NormKind::rmsnorm, "multipass", "normlab", "plain loops, one sweep over the tensor per step",
            [](Tensors& t, const OpCase& c) {
              cpu::rmsnorm_forward_multipass(out(t, "y"), out(t, "rstd"), in(t, "x"), in(t, "gamma"), rows(t),
                                             width(t), eps(c));
            },
            [](Tensors& t, const OpCase&) {
              cpu::rmsnorm_backward_multipass(out(t, "dx"), out(t, "dgamma"), in(t, "dy"), in(t, "x"), in(t, "gamma"),
                                              in(t, "rstd"), rows(t), width(t));
            }));
  NormImpl fused = raw(
      NormKind::rmsnorm, "fused", "normlab", "one pass over memory per row, vectorized (the cpu backend's)",
      [](Tensors& t, const OpCase& c) {
        cpu::rmsnorm_forward_onepass(out(t, "y"), out(t, "rstd"), in(t, "x"), in(t, "gamma"), rows(t), width(t),
                                     eps(c));
      },
      [](Tensors& t, const OpCase&) {
        cpu::rmsnorm_backward_onepass(out(t, "dx"), out(t, "dgamma"), in(t, "dy"), in(t, "x"), in(t, "gamma"),
                                      in(t, "rstd"), rows(t), width(t));
      },
      [](Tensors& t, const OpCase& c) {
        cpu::add_rmsnorm_forward_fused(out(t, "s"), out(t, "y"), out(t, "rstd"), in(t, "a"), in(t, "x"), add_alpha(c),
                                       in(t, "gamma"), rows(t), width(t), eps(c));
      });
  fused.variant = [](Pass p, int64_t n, int64_t d, const float* written) {
    return fused_kernel_variant(NormKind::rmsnorm, p, n, d, written);
  };
  r.add(fused);
}

}  // namespace

NormRegistry builtin_norm_impls() {
  NormRegistry r;
  add_layernorm_impls(r);
  add_rmsnorm_impls(r);
  // DyT (Zhu et al. 2025): no statistics, a transcendental per element. The paper's claim that it
  // is faster than RMSNorm is measured against the rows above.
  r.add(raw(NormKind::dyt, "multipass", "normlab", "plain loops: alpha*x, tanh (libm), gamma*t + beta, one pass each",
            [](Tensors& t, const OpCase&) {
              cpu::dyt_forward_multipass(out(t, "y"), in(t, "x"), in(t, "alpha")[0], in(t, "gamma"), in(t, "beta"),
                                         rows(t), width(t));
            },
            [](Tensors& t, const OpCase&) {
              cpu::dyt_backward_multipass(out(t, "dx"), out(t, "dalpha"), out(t, "dgamma"), out(t, "dbeta"),
                                          in(t, "dy"), in(t, "x"), in(t, "alpha")[0], in(t, "gamma"), rows(t),
                                          width(t));
            }));
  // Every other norm with op cases (DyT, Derf, ...): the backend's kernel as the models
  // call it, on its op case.
  for (const EnumName& n : enum_names<NormKind>().names) {
    const auto norm = static_cast<NormKind>(n.value);
    if (norm == NormKind::layernorm || norm == NormKind::rmsnorm || detail::norm_op(norm, Pass::fwd).empty()) continue;
    NormImpl m;
    m.norm = norm;
    m.impl = "fused";
    m.provider = "normlab";
    m.description = fmt::format("the backend's kernel, on its op case: {}", n.help);
    m.backend = true;
    r.add(m);
  }
  // What the fused add+norm saves: s written by one pass and read back by the next (6ND floats
  // moved against 4ND).
  r.add(raw(NormKind::layernorm, "unfused", "normlab",
            "add+norm as two kernels: s = alpha*a + b, then layernorm.fused of s", nullptr, nullptr,
            [](Tensors& t, const OpCase& c) {
              detail::add_scaled(out(t, "s"), in(t, "a"), in(t, "x"), add_alpha(c), rows(t) * width(t));
              cpu::layernorm_forward_onepass(out(t, "y"), out(t, "mean"), out(t, "rstd"), out(t, "s"), in(t, "gamma"),
                                             in(t, "beta"), rows(t), width(t), eps(c));
            }));
  r.add(raw(NormKind::rmsnorm, "unfused", "normlab",
            "add+norm as two kernels: s = alpha*a + b, then rmsnorm.fused of s", nullptr, nullptr,
            [](Tensors& t, const OpCase& c) {
              detail::add_scaled(out(t, "s"), in(t, "a"), in(t, "x"), add_alpha(c), rows(t) * width(t));
              cpu::rmsnorm_forward_onepass(out(t, "y"), out(t, "rstd"), out(t, "s"), in(t, "gamma"), rows(t), width(t),
                                           eps(c));
            }));
  return r;
}

}  // namespace normlab::bench
