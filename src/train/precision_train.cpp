#include "precision_train.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/train_model.h"

namespace normlab {

// ---- loss scaling -----------------------------------------------------------------

LossScaler::LossScaler(const LossScalerSettings& s) : settings_(s) {
  state_.scale = static_cast<float>(s.init);
}

LossScaler::LossScaler(const LossScalerSettings& s, const LossScalerState& resumed) : settings_(s), state_(resumed) {}

bool LossScaler::update(bool grads_finite) {
  // torch's _amp_update_scale_: the scale is a float32; a growth that would overflow it is not made.
  if (!grads_finite) {
    state_.scale = static_cast<float>(state_.scale * settings_.backoff_factor);
    state_.growth_tracker = 0;
    ++state_.skipped;
    ++state_.consecutive_skips;
    return false;
  }
  state_.consecutive_skips = 0;
  if (++state_.growth_tracker == settings_.growth_interval) {
    const float grown = static_cast<float>(state_.scale * settings_.growth_factor);
    if (std::isfinite(grown)) state_.scale = grown;
    state_.growth_tracker = 0;
  }
  return true;
}

LossScalerSettings TrainConfig::loss_scaler_settings() const {
  LossScalerSettings s;
  if (loss_scale_init) s.init = *loss_scale_init;
  if (loss_scale_growth_factor) s.growth_factor = *loss_scale_growth_factor;
  if (loss_scale_backoff_factor) s.backoff_factor = *loss_scale_backoff_factor;
  if (loss_scale_growth_interval) s.growth_interval = *loss_scale_growth_interval;
  return s;
}

// ---- per-block statistics -----------------------------------------------------------

BlockStorageStats::BlockStorageStats(size_t blocks)
    : blocks_(blocks), watch_([this](const StoreEvent& v) {
        const int64_t l = block_of_module(v.module);
        if (l < 0 || l >= static_cast<int64_t>(blocks_.size())) return;
        PerBlock& b = blocks_[static_cast<size_t>(l)];
        if (v.kind == StoredKind::norm_input) {
          const FormatCensus c = format_census(backend_for(v.value.device(), v.value.dtype()), v.value, v.format);
          const double m = c.nonfinite ? INFINITY : c.max_abs;
          b.norm_input_max = std::isnan(b.norm_input_max) ? m : std::max(b.norm_input_max, m);
        } else if (v.kind == StoredKind::output) {
          b.stored.add(format_census(backend_for(v.value.device(), v.value.dtype()), v.value, v.format));
        }
      }) {}

void BlockStorageStats::fill(EvalRecord& r, const ForwardTrace& trace) const {
  r.stream_max_abs.clear();
  for (const Tensor& x : trace.block_out) {
    const FormatCensus c = format_census(backend_for(x.device(), x.dtype()), x, Precision::fp32);
    r.stream_max_abs.push_back(c.nonfinite ? INFINITY : c.max_abs);
  }
  r.norm_input_max_abs.clear();
  r.overflow_share.clear();
  r.underflow_share.clear();
  for (const PerBlock& b : blocks_) {
    r.norm_input_max_abs.push_back(b.norm_input_max);
    const double n = static_cast<double>(std::max<int64_t>(1, b.stored.count));
    r.overflow_share.push_back(static_cast<double>(b.stored.overflow) / n);
    r.underflow_share.push_back(static_cast<double>(b.stored.underflow) / n);
  }
}

// ---- where a step went non-finite ------------------------------------------------------

namespace {

// The first stored value that is not finite (or becomes inf by the rounding).
// A norm whose stored rstd is inf divided by a stored var + eps of 0: eps rounded to zero and
// the variance was 0 (a row of equal values; RMSNorm: of zeros), or it was not and underflowed.
std::string norm_cause(const Tensor& x, const Tensor& rstd, bool layernorm) {
  const std::vector<double> r = rstd.to_vector();
  const int64_t d = x.size(-1);
  const std::vector<double> xv = x.to_vector();
  for (size_t i = 0; i < r.size(); ++i) {
    if (!std::isinf(r[i])) continue;
    const double* row = xv.data() + static_cast<int64_t>(i) * d;
    bool flat = true;
    for (int64_t j = 0; j < d && flat; ++j) flat = layernorm ? row[j] == row[0] : row[j] == 0;
    return flat ? "eps_zero" : "var_underflow";
  }
  return "";
}

struct FirstNonFinite {
  NonFiniteOrigin origin;
  bool found = false;
  Tensor norm_input;  // the last norm's input (a norm's output is stored right after it)
  void look(const StoreEvent& v, int64_t step, const char* phase) {
    if (found) return;
    if (v.kind == StoredKind::norm_input) {
      norm_input = v.value;
      return;
    }
    const FormatCensus c =
        v.census ? *v.census : format_census(backend_for(v.value.device(), v.value.dtype()), v.value, v.format);
    if (c.nonfinite == 0 && c.overflow == 0) return;
    found = true;
    origin.step = step;
    origin.phase = phase;
    origin.op = v.op;
    origin.module = *v.module ? v.module : "model";
    origin.format = to_string(v.format);
    origin.max_abs = c.max_abs;
    origin.cause = c.overflow ? "overflow" : "nonfinite";
    if (!c.overflow && v.norm_rstd && norm_input.defined()) {
      const std::string why = norm_cause(norm_input, *v.norm_rstd, origin.op == "layernorm");
      if (!why.empty()) origin.cause = why;
    }
  }
};

}  // namespace

NonFiniteOrigin find_nonfinite(TrainModel& model, const Batch& batch, int64_t step, std::optional<double> backward_seed) {
  FirstNonFinite first;
  Tensor loss;
  {
    StoreWatchScope watch([&](const StoreEvent& v) { first.look(v, step, "forward"); });
    loss = model.loss(batch);
  }
  if (first.found || !backward_seed || !loss.requires_grad()) return first.origin;
  model.params().zero_grad();
  {
    StoreWatchScope watch([&](const StoreEvent& v) { first.look(v, step, "backward"); });
    loss.backward(Tensor::full_on(loss.shape(), *backward_seed, loss.dtype(), loss.device()));
  }
  return first.origin;
}

std::string NonFiniteOrigin::str() const {
  if (step < 0) return "";
  std::string why;
  if (cause == "overflow") {
    why = fmt::format("overflow: a value up to {:.4g} in magnitude, beyond {}'s largest ({:.6g}), stored as inf", max_abs,
                      format, format_info(parse_kind<Precision>(format)).max);
  } else if (cause == "eps_zero") {
    why = fmt::format("a row's variance is 0 and eps rounds to zero in {}: rsqrt(0) = inf", format);
  } else if (cause == "var_underflow") {
    why = fmt::format("a row's variance underflowed to 0 in {} and eps rounds to zero there: rsqrt(0) = inf", format);
  } else {
    why = fmt::format("the float32 arithmetic gave an inf or NaN (finite values up to {:.4g})", max_abs);
  }
  return fmt::format("step {}, {}, {} in {}: {}", step, phase, op, module, why);
}

// ---- eps as the arithmetic adds it -----------------------------------------------------

std::vector<EpsRounding> eps_rounding(const TrainConfig& cfg) {
  // The composite runs on inputs stored in the format: every norm's with the stream in it; with
  // a float32 stream, only those that read a branch (Sandwich's second norms, QK-Norm).
  const bool composite = cfg.norm_compute == NormCompute::format;
  const Precision branch = composite ? cfg.storage() : Precision::fp32;
  const Precision stream = composite ? cfg.residual_storage() : Precision::fp32;
  std::vector<EpsRounding> out;
  auto check = [&](const char* norm, double eps, Precision adds_in) {
    const double stored = round_to(adds_in, to_float(eps));
    if (stored == 0 || std::fabs(stored - eps) > 0.01 * eps) out.push_back({norm, eps, stored, to_string(adds_in)});
  };
  const ModelConfig& m = cfg.model;
  // DyT and Derf add no eps: nothing to round.
  if (has_eps(m.norm)) {
    check("blocks", m.eps(), stream);
    if (m.placement == Placement::sandwich && stream != branch) check("blocks.sandwich_out", m.eps(), branch);
  }
  if (has_eps(m.final_norm_kind())) check("final_norm", m.final_eps(), stream);
  if (m.qk_norm) check("qk_norm", SelfAttention{}.qk_eps, branch);
  return out;
}

std::string eps_rounding_warning(const EpsRounding& e) {
  if (e.stored == 0)
    return fmt::format("{} eps {:g} rounds to zero in {}: a row of equal values divides by zero (allowed: recorded "
                       "in result.json as eps_rounding)",
                       e.norm, e.eps, e.format);
  return fmt::format("{} eps {:g} is {:g} in {} (allowed: recorded in result.json as eps_rounding)", e.norm, e.eps,
                     e.stored, e.format);
}

}  // namespace normlab
