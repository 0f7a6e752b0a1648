// `bench norms --precision bf16,fp16` on the cpu: the rows of the 16-bit storage kernels
// (cpu_kernels.h's *_16: x, dy, y, dx and the parameters as 2-byte encodings, float32
// statistics), timed beside the float32 rows of the same shape and thread count and held to the
// same copy loop (GB/s counts 2 bytes per stored element).
#include <memory>

#include "bench_internal.h"
#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/error.h"

namespace normlab::bench::detail {

namespace {

float round_bf16(float v) { return round_to(Precision::bf16, v); }
float round_fp16(float v) { return round_to(Precision::fp16, v); }

}  // namespace

Precision storage_of(const std::string& dtype) {
  if (dtype == "bf16") return Precision::bf16;
  if (dtype == "fp16") return Precision::fp16;
  NL_CHECK(dtype == "f32", "unknown storage dtype '{}'", dtype);
  return Precision::fp32;
}

Pool16::Pool16(Precision p, const NormShape& shape, int64_t sets, uint64_t seed, float ln_eps, float rms_eps)
    : p_(p), n_(shape.rows()), d_(shape.d), host_(static_cast<size_t>(Pool::floats_needed(shape, 1, false))),
      src_(host_.data(), shape, 1, false, seed, ln_eps, rms_eps) {
  src_.round_inputs(p == Precision::bf16 ? round_bf16 : round_fp16);
  const size_t nd = static_cast<size_t>(n_ * d_), n = static_cast<size_t>(n_);
  // Sets one after the other, each array on its own cache lines (plus one, as Pool's: x, dy and
  // out at different offsets modulo 4 KiB).
  const size_t stride16 = (nd + 31) / 32 * 32 + 32, stride32 = (n + 15) / 16 * 16 + 16;
  bits_.resize(static_cast<size_t>(sets) * 3 * stride16);
  stats_.resize(static_cast<size_t>(sets) * 2 * stride32);
  const BufferSet& s0 = src_.set(0);
  for (int64_t k = 0; k < sets; ++k) {
    Set s;
    s.x = bits_.data() + static_cast<size_t>(k) * 3 * stride16;
    s.dy = s.x + stride16;
    s.out = s.dy + stride16;
    s.mean = stats_.data() + static_cast<size_t>(k) * 2 * stride32;
    s.rstd = s.mean + stride32;
    // Every set holds set 0's inputs (the values the check ran on); outputs written once (no
    // page faults while timing).
    cpu::encode_16(p, s.x, s0.x, n_ * d_);
    cpu::encode_16(p, s.dy, s0.dy, n_ * d_);
    std::fill(s.out, s.out + nd, uint16_t{0});
    sets_.push_back(s);
  }
  gamma_.resize(static_cast<size_t>(d_));
  beta_.resize(static_cast<size_t>(d_));
  cpu::encode_16(p, gamma_.data(), src_.gamma(), d_);
  cpu::encode_16(p, beta_.data(), src_.beta(), d_);
  dgamma_.resize(static_cast<size_t>(d_));
  dbeta_.resize(static_cast<size_t>(d_));
}

void Pool16::run(NormKind norm, Pass pass, int64_t k, float eps) {
  const Set& s = sets_[static_cast<size_t>(k % size())];
  const BufferSet& saved = src_.set(0);  // the saved statistics of the inputs every set holds
  const bool ln = norm == NormKind::layernorm;
  if (pass == Pass::fwd) {
    if (ln)
      cpu::layernorm_forward_16(p_, s.out, s.mean, s.rstd, s.x, gamma_.data(), beta_.data(), n_, d_, eps);
    else
      cpu::rmsnorm_forward_16(p_, s.out, s.rstd, s.x, gamma_.data(), n_, d_, eps);
  } else if (ln) {
    cpu::layernorm_backward_16(p_, s.out, dgamma_.data(), dbeta_.data(), s.dy, s.x, gamma_.data(), saved.ln_mean,
                               saved.ln_rstd, n_, d_);
  } else {
    cpu::rmsnorm_backward_16(p_, s.out, dgamma_.data(), s.dy, s.x, gamma_.data(), saved.rms_rstd, n_, d_);
  }
}

// verify_norm's view: the float32 arguments (the rounded pool's) encoded into set 0, the kernel
// run there, its 16-bit outputs decoded back; statistics and parameter gradients are float32 and
// written where the arguments point.
NormImpl Pool16::impl(NormKind norm) {
  NormImpl m;
  m.norm = norm;
  m.impl = "fused";
  m.provider = "normlab";
  m.dtype = to_string(p_);
  const bool ln = norm == NormKind::layernorm;
  m.forward = [this, ln](const NormArgs& a) {
    const Set& s = sets_[0];
    cpu::encode_16(p_, s.x, a.x, a.n * a.d);
    if (ln)
      cpu::layernorm_forward_16(p_, s.out, a.mean, a.rstd, s.x, gamma_.data(), beta_.data(), a.n, a.d, a.eps);
    else
      cpu::rmsnorm_forward_16(p_, s.out, a.rstd, s.x, gamma_.data(), a.n, a.d, a.eps);
    cpu::decode_16(p_, a.y, s.out, a.n * a.d);
  };
  m.backward = [this, ln](const NormArgs& a) {
    const Set& s = sets_[0];
    cpu::encode_16(p_, s.x, a.x, a.n * a.d);
    cpu::encode_16(p_, s.dy, a.dy, a.n * a.d);
    if (ln)
      cpu::layernorm_backward_16(p_, s.out, a.dgamma, a.dbeta, s.dy, s.x, gamma_.data(), a.saved_mean, a.saved_rstd,
                                 a.n, a.d);
    else
      cpu::rmsnorm_backward_16(p_, s.out, a.dgamma, s.dy, s.x, gamma_.data(), a.saved_rstd, a.n, a.d);
    cpu::decode_16(p_, a.dx, s.out, a.n * a.d);
  };
  return m;
}

int64_t Pool16::bytes(const NormShape& s, int64_t sets) {
  return sets * (3 * s.numel() * 2 + 2 * s.rows() * 4) + Pool::floats_needed(s, 1, false) * 4;
}

}  // namespace normlab::bench::detail
