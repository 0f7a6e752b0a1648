// `bench norms --device cuda | cuda-sim`: normlab's CUDA norm kernels (the launchers the cuda
// backend calls: LayerNorm, RMSNorm, and DyT and Derf in float32) on device buffers, with
// everything else the cpu rows have: the same inputs (a Pool of one buffer set in host memory,
// the source of every device set), the same check (verify_norm against the reference kernels, on
// the outputs downloaded from the device), the same timing loop, statistics, byte counts and
// report. The device half, buffers and CUDA events, is the CUDA module's (CudaNormBench,
// normlab/cuda_backend.h).
//
//   normlab bench norms --device cuda --precision fp32,bf16,fp16
//   normlab bench norms --device cuda --pass both          DyT and Derf beside RMSNorm on the GPU
//   normlab bench norms --device cuda-sim --shapes 1x8x64 --footprint-mib 1 --min-time 0
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "normlab/error.h"

namespace normlab::bench::detail {

namespace {

using A = CudaBenchArray;

// The host's side of the 16-bit storage: core's encodings (precision.h), which round as the
// GPU's __float2bfloat16_rn / __float2half_rn do.
float round_bf16(float f) { return round_to(Precision::bf16, f); }
float round_fp16(float f) { return round_to(Precision::fp16, f); }

// The arrays stored in the bench's storage format; the rest (statistics, dgamma, dbeta, DyT's and
// Derf's scalars) are float32 on the device too.
bool stored(A a) { return a == A::x || a == A::b || a == A::out || a == A::s || a == A::gamma || a == A::beta; }

// The device's buffer sets of one shape and dtype (CudaNormBench), seen from the host as float32.
class DeviceSets {
 public:
  DeviceSets(const std::string& device, const CudaNormBenchShape& shape)
      : shape_(shape), bench_(make_cuda_norm_bench(device == "cuda-sim" ? Device::cuda_sim : Device::cuda, shape)) {}
  CudaNormBench& bench() { return *bench_; }
  Precision storage() const { return shape_.storage; }
  bool narrow() const { return shape_.storage != Precision::fp32; }

  // Set 0's array `a` from `host` (float32; encoded when stored in 16 bits); nothing for nullptr.
  void put(A a, const float* host) {
    if (!host) return;
    if (!narrow() || !stored(a)) return bench_->upload(a, host);
    std::vector<uint16_t> bits(cuda_bench_array_bytes(shape_, a) / 2);
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = to_bits(storage(), host[i]);
    bench_->upload(a, bits.data());
  }
  // Set 0's array `a` into `host` as float32; nothing for nullptr.
  void get(A a, float* host) {
    if (!host) return;
    if (!narrow() || !stored(a)) return bench_->download(a, host);
    std::vector<uint16_t> bits(cuda_bench_array_bytes(shape_, a) / 2);
    bench_->download(a, bits.data());
    for (size_t i = 0; i < bits.size(); ++i) host[i] = from_bits(storage(), bits[i]);
  }

 private:
  CudaNormBenchShape shape_;
  std::unique_ptr<CudaNormBench> bench_;
};

CudaBenchOp op_of(NormKind norm, Pass pass) {
  if (norm == NormKind::dyt) return pass == Pass::bwd ? CudaBenchOp::dyt_backward : CudaBenchOp::dyt_forward;
  if (norm == NormKind::derf) return pass == Pass::bwd ? CudaBenchOp::derf_backward : CudaBenchOp::derf_forward;
  const bool ln = norm == NormKind::layernorm;
  switch (pass) {
    case Pass::fwd: return ln ? CudaBenchOp::layernorm_forward : CudaBenchOp::rmsnorm_forward;
    case Pass::addfwd: return ln ? CudaBenchOp::add_layernorm_forward : CudaBenchOp::add_rmsnorm_forward;
    case Pass::bwd: break;
  }
  return ln ? CudaBenchOp::layernorm_backward : CudaBenchOp::rmsnorm_backward;
}

// The device's kernels of `norm` as an implementation verify_norm can check: each pass uploads
// the call's arrays to set 0 (its outputs too, as verify_norm poisoned them: an output the
// kernel never writes stays NaN), runs the kernel and downloads the outputs. DyT and Derf take
// their alpha and shift from the arguments too, so that the device runs with the values the
// check assumes. The implementation keeps `dev` alive (device_norm_impl hands it no other owner).
NormImpl device_impl(const std::shared_ptr<DeviceSets>& dev, NormKind norm, const std::string& provider) {
  NormImpl m;
  m.norm = norm;
  m.impl = "fused";
  m.provider = provider;
  m.dtype = dev->narrow() ? to_string(dev->storage()) : "f32";
  auto pass_fn = [&dev, norm](Pass pass) {
    return [dev, norm, pass](const NormArgs& a) {
      const bool ln = norm == NormKind::layernorm, bwd = pass == Pass::bwd, sq = is_squash(norm);
      const std::pair<A, const float*> inputs[] = {
          {A::x, a.x},           {A::gamma, a.gamma},
          {A::beta, a.beta},     {A::b, bwd ? a.dy : a.branch},
          {A::ln_mean, a.saved_mean}, {A::ln_rstd, ln ? a.saved_rstd : nullptr},
          {A::rms_rstd, ln ? nullptr : a.saved_rstd},
          {A::alpha, sq ? &a.dyt_alpha : nullptr}, {A::shift, sq ? &a.derf_shift : nullptr}};
      const std::pair<A, float*> outputs[] = {{A::out, bwd ? a.dx : a.y}, {A::s, a.s},           {A::mean, a.mean},
                                              {A::rstd, a.rstd},          {A::dgamma, a.dgamma}, {A::dbeta, a.dbeta},
                                              {A::dalpha, a.dalpha},      {A::dshift, a.dshift}};
      for (const auto& [array, host] : inputs) dev->put(array, host);
      for (const auto& [array, host] : outputs) dev->put(array, host);
      dev->bench().run(op_of(norm, pass), 0, a.eps, a.alpha);
      for (const auto& [array, host] : outputs) dev->get(array, host);
    };
  };
  m.forward = pass_fn(Pass::fwd);
  m.backward = pass_fn(Pass::bwd);
  if (!dev->narrow() && !is_squash(norm)) m.add_forward = pass_fn(Pass::addfwd);
  return m;
}

std::string device_provider(const std::string& device) {
  return device == "cuda-sim" ? "normlab (cuda-sim)" : "normlab (CUDA)";
}

// The copy baselines, checked as the cpu's are: the copy must reproduce its source bit for bit.
VerifyResult verify_copy(DeviceSets& dev, CudaBenchOp op, const CudaNormBenchShape& shape, const std::string& name) {
  const size_t bytes = cuda_bench_array_bytes(shape, A::x);
  std::vector<unsigned char> src(bytes), poison(bytes, 0xff), got(bytes);
  dev.bench().download(A::x, src.data());
  dev.bench().upload(A::out, poison.data());
  dev.bench().run(op, 0, 0.0f, 1.0f);
  dev.bench().download(A::out, got.data());
  VerifyResult v;
  v.pass = got == src;
  if (!v.pass) v.report = name + ": the copy differs from its source";
  return v;
}

}  // namespace

NormImpl device_norm_impl(const std::string& device, const NormShape& shape, Precision storage, NormKind norm) {
  CudaNormBenchShape ds;
  ds.rows = shape.rows();
  ds.d = shape.d;
  ds.storage = storage;
  return device_impl(std::make_shared<DeviceSets>(device, ds), norm, device_provider(device));
}

int64_t device_footprint(const NormBenchOptions& opt) {
  return opt.footprint > 0 ? opt.footprint : int64_t{1} << 30;
}

NormReport run_device_norm_bench(const NormBenchOptions& opt) {
  validate(opt);
  NormReport report;
  report.context = collect_context();
  const bool sim = opt.device == "cuda-sim";
  const std::string provider = device_provider(opt.device);
  const int64_t footprint = device_footprint(opt);
  const int64_t resident_below = device_footprint(NormBenchOptions{});
  report.context.footprint_target = footprint;
  std::vector<Pass> passes;
  if (opt.fwd) passes.push_back(Pass::fwd);
  if (opt.bwd) passes.push_back(Pass::bwd);
  if (opt.addfwd) passes.push_back(Pass::addfwd);
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };

  for (const NormShape& shape : opt.shapes) {
    bool copies = opt.copy_baselines;  // timed once per shape, with its first dtype
    for (const std::string& dtype : opt.dtypes) {
      const Precision storage = storage_of(dtype);
      const bool narrow = storage != Precision::fp32;
      const int64_t stored_bytes = narrow ? 2 : 4;
      const bool with_sum = opt.addfwd && !narrow;
      // The host's one set: the inputs every device set gets, and where the checked call's
      // outputs come back to. bf16: the values the device will hold.
      std::vector<float> memory(static_cast<size_t>(Pool::floats_needed(shape, 1, with_sum)));
      Pool pool(memory.data(), shape, 1, with_sum, opt.seed, opt.ln_eps, opt.rms_eps);
      if (narrow) pool.round_inputs(storage == Precision::bf16 ? round_bf16 : round_fp16);
      CudaNormBenchShape ds;
      ds.rows = shape.rows();
      ds.d = shape.d;
      ds.sets = sets_for(shape, footprint, stored_bytes);
      ds.storage = storage;
      log(fmt::format("{} {} on {}: {} buffer set(s)", shape.str(), dtype, opt.device, ds.sets));
      const auto dev = std::make_shared<DeviceSets>(opt.device, ds);
      if (report.context.device.empty())
        report.context.device = opt.device + ": " + (sim ? cuda_sim_summary() : cuda_summary());

      RowPlace place;
      place.device = opt.device;
      place.dtype = dtype;
      auto base_row = [&](const std::string& norm, const std::string& impl, const std::string& prov,
                          const std::string& pass) {
        return case_row(norm, impl, prov, pass, shape, place, ds.sets, resident_below);
      };
      std::vector<Case> cases;
      auto add_case = [&](NormRow row, CudaBenchOp op, float eps, float alpha) {
        Case c;
        c.row = std::move(row);
        CudaNormBench* b = &dev->bench();
        c.call = [b, op, eps, alpha](int64_t k) { b->run(op, k, eps, alpha); };
        c.timed_call = [b, op, eps, alpha](int64_t k) { return b->time(op, k, eps, alpha); };
        cases.push_back(std::move(c));
      };

      // Correctness first, on set 0: a wrong kernel is reported and never timed.
      const BufferSet& set0 = pool.set(0);
      if (copies) {
        dev->put(A::x, set0.x);
        for (const auto& [impl, prov, op] :
             {std::tuple{"loop", "normlab (16-byte copy kernel)", CudaBenchOp::copy_kernel},
              std::tuple{"memcpy", "CUDA (cudaMemcpy)", CudaBenchOp::copy_memcpy}}) {
          NormRow row = base_row("copy", impl, prov, "copy");
          row.verify = verify_copy(*dev, op, ds, row.name());
          if (!row.verify.pass) row.status = "rejected";
          add_case(std::move(row), op, 0.0f, 1.0f);
        }
      }
      for (const NormKind norm : {NormKind::layernorm, NormKind::rmsnorm, NormKind::dyt, NormKind::derf}) {
        if (narrow && is_squash(norm)) continue;  // DyT and Derf in float32 only, as the cpu's rows
        const NormImpl m = device_impl(dev, norm, provider);
        const float eps = norm == NormKind::layernorm ? opt.ln_eps : opt.rms_eps;  // DyT and Derf have none
        for (const Pass p : passes) {
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
          add_case(std::move(row), op_of(norm, p), eps, opt.add_alpha);
        }
      }
      copies = false;

      // Every set gets set 0's inputs (x, dy as b, the saved statistics), the parameters are the
      // checked calls' (DyT's alpha and Derf's shift as args_for gives them); then the timing.
      const NormArgs checked = args_for(pool, 0, NormKind::derf, Pass::fwd, opt.rms_eps, opt.add_alpha);
      dev->put(A::x, set0.x);
      dev->put(A::b, set0.dy);
      dev->put(A::ln_mean, set0.ln_mean);
      dev->put(A::ln_rstd, set0.ln_rstd);
      dev->put(A::rms_rstd, set0.rms_rstd);
      dev->put(A::gamma, pool.gamma());
      dev->put(A::beta, pool.beta());
      dev->put(A::alpha, &checked.dyt_alpha);
      dev->put(A::shift, &checked.derf_shift);
      dev->bench().replicate();
      time_cases(cases, ds.sets, false, opt, report);
    }
  }
  derive(report);
  add_row_warnings(report, resident_below);
  return report;
}

}  // namespace normlab::bench::detail
