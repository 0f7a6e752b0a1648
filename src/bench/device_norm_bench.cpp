// `bench norms --device cuda | cuda-sim`: the device backend's norm kernels (LayerNorm, RMSNorm,
// and DyT and Derf in float32) called through the Backend interface, as the models call them, on
// tensors resident on the device, with everything else the cpu rows have: the same inputs (a Pool
// of one buffer set in host memory, the source of every device set), the same check (verify_norm
// against the reference kernels, on the outputs downloaded from the device), the same timing loop,
// statistics, byte counts and report.
//
//   normlab bench norms --device cuda --precision fp32,bf16,fp16
//   normlab bench norms --device cuda --pass both          DyT and Derf beside RMSNorm on the GPU
//   normlab bench norms --device cuda-sim --shapes 1x8x64 --footprint-mib 1 --min-time 0
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_internal.h"
#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/cuda.h"
#include "normlab/error.h"

namespace normlab::bench::detail {

namespace {

using Clock = std::chrono::steady_clock;

// The arrays of one call that have N rows: per buffer set. x is the forward's input and the
// add+norm's a; b is the backward's dy and the add+norm's branch; out is y or dx.
struct DeviceSet {
  Tensor x, b, out, s, mean, rstd, ln_mean, ln_rstd, rms_rstd;
};

// A host float32 array as a tensor of `dtype` on `device` (16-bit dtypes: the values encoded).
Tensor put(const float* host, const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::memcpy(t.raw(), host, static_cast<size_t>(t.numel()) * sizeof(float));
  return (dtype == DType::f32 ? t : t.to(dtype)).to_device(device);
}

// A device tensor's values into a host float32 array.
void get(const Tensor& t, float* host) {
  const Tensor h = t.to_device(Device::cpu);
  const Tensor f = h.dtype() == DType::f32 ? h : h.to(DType::f32);
  std::memcpy(host, f.raw(), static_cast<size_t>(f.numel()) * sizeof(float));
}

// The device's buffer sets of one shape and storage, and the calls on them.
class DeviceSets {
 public:
  DeviceSets(Backend& b, const NormShape& shape, Precision storage, int64_t sets)
      : b_(b), n_(shape.rows()), d_(shape.d), stored_(storage_dtype(storage)) {
    // Uninitialized: fill() writes every input, the calls every output (on cuda-sim, a fill is a
    // kernel launch, and a rotation has hundreds of sets).
    const Device dev = b.device();
    auto rows = [&](DType t) { return Tensor::empty({n_, d_}, t, dev); };
    auto col = [&] { return Tensor::empty({n_}, DType::f32, dev); };
    for (int64_t k = 0; k < sets; ++k)
      sets_.push_back({rows(stored_), rows(stored_), rows(stored_), rows(stored_), col(), col(), col(), col(), col()});
    gamma_ = Tensor::zeros({d_}, stored_, dev);
    beta_ = Tensor::zeros({d_}, stored_, dev);
    dgamma_ = Tensor::zeros({d_}, DType::f32, dev);
    dbeta_ = Tensor::zeros({d_}, DType::f32, dev);
    for (Tensor* t : {&alpha_, &shift_, &dalpha_, &dshift_}) *t = Tensor::zeros({1}, DType::f32, dev);
  }

  bool narrow() const { return stored_ != DType::f32; }
  int64_t size() const { return static_cast<int64_t>(sets_.size()); }

  // Every set's inputs (x, dy as b, the saved statistics) from the host pool's set 0: uploaded
  // once, copied on the device into the other sets; the parameters as `a` (args_for: DyT's
  // alpha, Derf's shift) gives them.
  void fill(const Pool& pool, const NormArgs& a) {
    const BufferSet& h = pool.set(0);
    const Device dev = b_.device();
    const Shape rows{n_, d_}, col{n_};
    DeviceSet& first = sets_[0];
    first.x = put(h.x, rows, stored_, dev);
    first.b = put(h.dy, rows, stored_, dev);
    first.ln_mean = put(h.ln_mean, col, DType::f32, dev);
    first.ln_rstd = put(h.ln_rstd, col, DType::f32, dev);
    first.rms_rstd = put(h.rms_rstd, col, DType::f32, dev);
    for (size_t k = 1; k < sets_.size(); ++k) {
      DeviceSet& s = sets_[k];
      for (auto [to, from] : {std::pair{&s.x, &first.x}, {&s.b, &first.b}, {&s.ln_mean, &first.ln_mean},
                              {&s.ln_rstd, &first.ln_rstd}, {&s.rms_rstd, &first.rms_rstd}})
        to->copy_(*from);
    }
    set_parameters(a);
  }

  // gamma, beta, DyT's alpha and Derf's shift as `a` gives them.
  void set_parameters(const NormArgs& a) {
    const Device dev = b_.device();
    gamma_ = put(a.gamma, {d_}, stored_, dev);
    if (a.beta) beta_ = put(a.beta, {d_}, stored_, dev);
    alpha_ = put(&a.dyt_alpha, {1}, DType::f32, dev);
    shift_ = put(&a.derf_shift, {1}, DType::f32, dev);
  }

  // The arguments' inputs and (NaN-poisoned) outputs into set 0, the call, its outputs back:
  // the device's kernels as verify_norm checks them.
  void run_on_host_arrays(NormKind norm, Pass pass, const NormArgs& a) {
    DeviceSet& s = sets_[0];
    upload_inputs(a, s);
    set_parameters(a);
    const bool bwd = pass == Pass::bwd;
    for (auto [host, t] : outputs(a, s, bwd))
      if (host) *t = put(host, t->shape(), t->dtype(), b_.device());
    call(norm, pass, 0, a.eps, a.alpha);
    for (auto [host, t] : outputs(a, s, bwd))
      if (host) get(*t, host);
  }

  // One kernel call on set k, through the Backend interface.
  void call(NormKind norm, Pass pass, int64_t k, float eps, float alpha) {
    DeviceSet& s = sets_[static_cast<size_t>(k % size())];
    const bool ln = norm == NormKind::layernorm;
    if (norm == NormKind::dyt || norm == NormKind::derf) return squash(norm, pass, s);
    switch (pass) {
      case Pass::fwd:
        if (ln) return b_.layernorm_forward(s.out, s.mean, s.rstd, s.x, gamma_, beta_, n_, d_, eps);
        return b_.rmsnorm_forward(s.out, s.rstd, s.x, gamma_, n_, d_, eps);
      case Pass::bwd:
        if (ln) return b_.layernorm_backward(&s.out, &dgamma_, &dbeta_, s.b, s.x, gamma_, s.ln_mean, s.ln_rstd, n_, d_);
        return b_.rmsnorm_backward(&s.out, &dgamma_, s.b, s.x, gamma_, s.rms_rstd, n_, d_);
      case Pass::addfwd:
        if (ln) return b_.add_layernorm_forward(s.s, s.out, s.mean, s.rstd, s.x, s.b, alpha, gamma_, beta_, n_, d_, eps);
        return b_.add_rmsnorm_forward(s.s, s.out, s.rstd, s.x, s.b, alpha, gamma_, n_, d_, eps);
    }
  }

  // The copy baselines: the backend's copy (cudaMemcpy on a CUDA device) and its elementwise
  // kernel as a copy (x times 1, exact).
  void copy(bool kernel, int64_t k) {
    DeviceSet& s = sets_[static_cast<size_t>(k % size())];
    kernel ? b_.scale(s.out, s.x, 1.0) : b_.copy(s.out, s.x);
  }
  // Whether set 0's out holds x's bits after a copy (out poisoned first).
  bool copy_is_exact(bool kernel) {
    DeviceSet& s = sets_[0];
    s.out.fill_(NAN);
    copy(kernel, 0);
    const Tensor got = s.out.to_device(Device::cpu), want = s.x.to_device(Device::cpu);
    return std::memcmp(got.raw(), want.raw(), got.nbytes()) == 0;
  }

  // Waits for the device's queue: one element of set 0's output downloaded.
  void drain() { (void)sets_[0].out.view_at(0, {1}).to_device(Device::cpu); }

 private:
  void squash(NormKind norm, Pass pass, DeviceSet& s) {
    const bool derf = norm == NormKind::derf;
    const Squash f = derf ? Squash::erf : Squash::tanh;
    const Tensor shift = derf ? shift_ : Tensor();
    if (pass == Pass::bwd)
      return b_.squash_backward(&s.out, &dalpha_, derf ? &dshift_ : nullptr, &dgamma_, &dbeta_, s.b, s.x, alpha_,
                                shift, gamma_, n_, d_, f);
    b_.squash_forward(s.out, s.x, alpha_, shift, gamma_, beta_, n_, d_, f);
  }

  void upload_inputs(const NormArgs& a, DeviceSet& s) {
    const Device dev = b_.device();
    const Shape rows{n_, d_}, col{n_};
    s.x = put(a.x, rows, stored_, dev);
    if (const float* b = a.dy ? a.dy : a.branch) s.b = put(b, rows, stored_, dev);
    if (a.saved_mean) s.ln_mean = put(a.saved_mean, col, DType::f32, dev);
    if (a.saved_rstd) (a.saved_mean ? s.ln_rstd : s.rms_rstd) = put(a.saved_rstd, col, DType::f32, dev);
  }

  std::vector<std::pair<float*, Tensor*>> outputs(const NormArgs& a, DeviceSet& s, bool bwd) {
    return {{bwd ? a.dx : a.y, &s.out}, {a.s, &s.s},           {a.mean, &s.mean},     {a.rstd, &s.rstd},
            {a.dgamma, &dgamma_},       {a.dbeta, &dbeta_},   {a.dalpha, &dalpha_},  {a.dshift, &dshift_}};
  }

  Backend& b_;
  int64_t n_, d_;
  DType stored_;
  std::vector<DeviceSet> sets_;
  Tensor gamma_, beta_, dgamma_, dbeta_, alpha_, shift_, dalpha_, dshift_;
};

// A sample on the device is a batch of calls on successive sets, timed by the host's clock to the
// completion of the last (the queue drained), about this long, so that the drain's own cost (a
// synchronization and a 4-byte download) stays a small share of it.
constexpr double kDeviceSample = 2e-3;

// The timed_call of a case: batches of calls, sized from the first.
std::function<double(int64_t)> device_timer(const std::shared_ptr<DeviceSets>& dev, std::function<void(int64_t)> call) {
  auto batch = std::make_shared<int64_t>(0);
  return [dev, call = std::move(call), batch](int64_t k) {
    auto run = [&](int64_t calls) {
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < calls; ++i) call(k + i);
      dev->drain();
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    if (*batch == 0) *batch = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kDeviceSample / run(1))), 1, 10000);
    return run(*batch) / static_cast<double>(*batch);
  };
}

std::string device_provider(const std::string& device) {
  return device == "cuda-sim" ? "normlab (cuda-sim)" : "normlab (CUDA)";
}

// The device's kernels of `norm` as an implementation verify_norm can check.
NormImpl device_impl(const std::shared_ptr<DeviceSets>& dev, NormKind norm, const std::string& provider,
                     const std::string& dtype) {
  NormImpl m;
  m.norm = norm;
  m.impl = "fused";
  m.provider = provider;
  m.dtype = dtype;
  auto pass_fn = [dev, norm](Pass pass) {
    return [dev, norm, pass](const NormArgs& a) { dev->run_on_host_arrays(norm, pass, a); };
  };
  m.forward = pass_fn(Pass::fwd);
  m.backward = pass_fn(Pass::bwd);
  if (!dev->narrow() && !is_squash(norm)) m.add_forward = pass_fn(Pass::addfwd);
  return m;
}

std::vector<Pass> passes_of(const NormBenchOptions& opt) {
  std::vector<Pass> passes;
  if (opt.fwd) passes.push_back(Pass::fwd);
  if (opt.bwd) passes.push_back(Pass::bwd);
  if (opt.addfwd) passes.push_back(Pass::addfwd);
  return passes;
}

}  // namespace

NormImpl device_norm_impl(const std::string& device, const NormShape& shape, Precision storage, NormKind norm) {
  const auto dev = std::make_shared<DeviceSets>(backend(device), shape, storage, 1);
  return device_impl(dev, norm, device_provider(device), storage == Precision::fp32 ? "f32" : to_string(storage));
}

int64_t device_footprint(const NormBenchOptions& opt) {
  return opt.footprint > 0 ? opt.footprint : int64_t{1} << 30;
}

NormReport run_device_norm_bench(const NormBenchOptions& opt) {
  validate(opt);
  NormReport report;
  report.context = collect_context();
  Backend& b = backend(opt.device);
  const std::string provider = device_provider(opt.device);
  const int64_t footprint = device_footprint(opt);
  const int64_t resident_below = device_footprint(NormBenchOptions{});
  report.context.footprint_target = footprint;
  report.context.device = opt.device + ": " + (opt.device == "cuda-sim" ? cuda_sim_summary() : cuda_summary());
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };

  for (const NormShape& shape : opt.shapes) {
    bool copies = opt.copy_baselines;  // timed once per shape, with its first dtype
    for (const std::string& dtype : opt.dtypes) {
      const Precision storage = storage_of(dtype);
      const bool narrow = storage != Precision::fp32;
      // The host's one set: the inputs every device set gets, and the values the check reads.
      std::vector<float> memory(static_cast<size_t>(Pool::floats_needed(shape, 1, opt.addfwd && !narrow)));
      Pool pool(memory.data(), shape, 1, opt.addfwd && !narrow, opt.seed, opt.ln_eps, opt.rms_eps);
      if (storage == Precision::bf16) pool.round_inputs([](float f) { return round_to(Precision::bf16, f); });
      if (storage == Precision::fp16) pool.round_inputs([](float f) { return round_to(Precision::fp16, f); });
      const int64_t sets = sets_for(shape, footprint, narrow ? 2 : 4);
      log(fmt::format("{} {} on {}: {} buffer set(s)", shape.str(), dtype, opt.device, sets));
      const auto dev = std::make_shared<DeviceSets>(b, shape, storage, sets);

      RowPlace place;
      place.device = opt.device;
      place.dtype = dtype;
      auto base_row = [&](const std::string& norm, const std::string& impl, const std::string& prov,
                          const std::string& pass) {
        return case_row(norm, impl, prov, pass, shape, place, sets, resident_below);
      };
      std::vector<Case> cases;
      auto add_case = [&](NormRow row, std::function<void(int64_t)> call) {
        Case c;
        c.row = std::move(row);
        c.call = call;
        c.timed_call = device_timer(dev, std::move(call));
        cases.push_back(std::move(c));
      };

      // Correctness first, on set 0: a wrong kernel is reported and never timed.
      const NormArgs parameters = args_for(pool, 0, NormKind::derf, Pass::fwd, opt.rms_eps, opt.add_alpha);
      dev->fill(pool, parameters);
      if (copies) {
        for (const bool kernel : {true, false}) {
          NormRow row = base_row("copy", kernel ? "loop" : "memcpy",
                                 kernel ? "normlab (the backend's scale kernel, x1)" : "the backend's copy (cudaMemcpy)",
                                 "copy");
          row.verify.pass = dev->copy_is_exact(kernel);
          if (!row.verify.pass) {
            row.status = "rejected";
            row.verify.report = row.name() + ": the copy differs from its source";
          }
          add_case(std::move(row), [dev, kernel](int64_t k) { dev->copy(kernel, k); });
        }
      }
      for (const NormKind norm : {NormKind::layernorm, NormKind::rmsnorm, NormKind::dyt, NormKind::derf}) {
        if (narrow && is_squash(norm)) continue;  // DyT and Derf in float32 only, as the cpu's rows
        const NormImpl m = device_impl(dev, norm, provider, dtype);
        const float eps = norm == NormKind::layernorm ? opt.ln_eps : opt.rms_eps;  // DyT and Derf have none
        for (const Pass p : passes_of(opt)) {
          if (!m.fn(p)) continue;
          NormRow row = base_row(to_string(norm), m.impl, m.provider, to_string(p));
          row.verify = verify_norm(m, p, args_for(pool, 0, norm, p, eps, opt.add_alpha));
          if (!row.verify.pass) {
            row.status = "rejected";
            row.verify.report +=
                fmt::format(" (rerun: normlab bench norms --device {} --dtypes {} --pass {} --shapes {})", opt.device,
                            dtype, to_string(p), shape.str());
            log(fmt::format("REJECTED {}: {}", row.name(), row.verify.report));
          } else {
            log(fmt::format("verified {} (max |diff| {:.2g} in {})", row.name(), row.verify.max_abs_err,
                            row.verify.worst_output));
          }
          const float alpha = opt.add_alpha;
          add_case(std::move(row), [dev, norm, p, eps, alpha](int64_t k) { dev->call(norm, p, k, eps, alpha); });
        }
      }
      copies = false;
      // The checks set the parameters of each norm's arguments: the timing runs on the first ones.
      dev->set_parameters(parameters);
      time_cases(cases, sets, false, opt, report);
    }
  }
  derive(report);
  add_row_warnings(report, resident_below);
  return report;
}

}  // namespace normlab::bench::detail
