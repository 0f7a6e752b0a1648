// The trainer loop: Adam(W) over one flat parameter buffer, warm-up + schedule, optional
// clipping, evals with per-layer statistics, and divergence as a result (not a crash).
#include <chrono>
#include <cmath>
#include <optional>

#include "normlab/autograd.h"
#include "normlab/adam_kernels.h"
#include "normlab/checkpoint.h"
#include "normlab/backend.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/ops.h"
#include "normlab/statistics_kernels.h"
#include "normlab/stats.h"
#include "normlab/train.h"
#include "normlab/train_model.h"
#include "normlab/text_tokens.h"
#include "precision_train.h"

namespace normlab {

std::string DataSpec::str() const { return kind == DataKind::text ? "text:" + path : to_string(kind); }

DataSpec DataSpec::parse(const std::string& s) {
  DataSpec d;
  if (s.rfind("text:", 0) == 0) {
    NL_USAGE(s.size() > 5, "data 'text:' needs a path, e.g. text:experiments/data/tiny.txt");
    d.kind = DataKind::text;
    d.path = s.substr(5);
    return d;
  }
  const DataKind kinds[] = {DataKind::synthetic, DataKind::copy, DataKind::reverse, DataKind::translate};
  for (DataKind k : kinds)
    if (s == to_string(k)) {
      d.kind = k;
      return d;
    }
  throw UsageError(fmt::format("data '{}' is not synthetic, text:PATH, copy, reverse or translate", shown(s)));
}

std::unique_ptr<DataSource> make_data_source(const TrainConfig& cfg) {
  if (cfg.data.kind == DataKind::synthetic)
    return make_synthetic({cfg.model.vocab, cfg.topics, cfg.noise, cfg.task_seed()});
  if (is_seq2seq(cfg.data.kind)) return make_seq2seq({cfg.data.kind, cfg.model.vocab, cfg.noise, cfg.task_seed()});
  return make_text(cfg.data.path, cfg.tokens(), cfg.vocabulary.value_or(""), cfg.model.seq_len, cfg.task_seed());
}

void TrainConfig::validate() const {
  model.validate();
  NL_USAGE(lr > 0 && std::isfinite(lr), "lr must be > 0, got {}", lr);
  NL_USAGE(beta1 >= 0 && beta1 < 1, "beta1 must be in [0, 1), got {}", beta1);
  NL_USAGE(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1), got {}", beta2);
  NL_USAGE(adam_eps > 0, "adam_eps must be > 0, got {}", adam_eps);
  NL_USAGE(weight_decay >= 0, "weight_decay must be >= 0, got {}", weight_decay);
  NL_USAGE(warmup_steps >= 0, "warmup_steps must be >= 0, got {}", warmup_steps);
  if (min_lr) {
    NL_USAGE(schedule == Schedule::cosine, "min_lr is the floor of schedule cosine; schedule {} has none",
             to_string(schedule));
    NL_USAGE(*min_lr >= 0 && *min_lr <= lr, "min_lr must be in [0, lr = {}], got {}", lr, *min_lr);
  }
  NL_USAGE(clip >= 0, "clip must be >= 0 (0 = off), got {}", clip);
  NL_USAGE(!dropout || (*dropout >= 0 && *dropout < 1), "dropout must be in [0, 1), got {}", dropout.value_or(0));
  NL_USAGE(batch_size >= 1, "batch_size must be >= 1, got {}", batch_size);
  NL_USAGE(steps >= 0, "steps must be >= 0 (0: the initial model, evaluated), got {}", steps);
  NL_USAGE(eval_every >= 1, "eval_every must be >= 1, got {}", eval_every);
  NL_USAGE(eval_batches >= 1, "eval_batches must be >= 1, got {}", eval_batches);
  NL_USAGE(threads >= 0, "threads must be >= 0 (0 = all cores), got {}", threads);
  const bool low = storage() != Precision::fp32;
  NL_USAGE(low || !residual_dtype, "residual_dtype {} needs precision bf16 or fp16 (in fp32 everything is float32)",
           residual_dtype ? to_string(*residual_dtype) : "");
  NL_USAGE(low || !loss_scale, "loss_scale {} needs precision bf16 or fp16 (float32 gradients need no scaling)",
           loss_scale ? to_string(*loss_scale) : "");
  const std::pair<const char*, bool> scaler_keys[] = {
      {"loss_scale_init", loss_scale_init.has_value()},
      {"loss_scale_growth_factor", loss_scale_growth_factor.has_value()},
      {"loss_scale_backoff_factor", loss_scale_backoff_factor.has_value()},
      {"loss_scale_growth_interval", loss_scale_growth_interval.has_value()}};
  for (const auto& [key, set] : scaler_keys) {
    if (!set) continue;
    NL_USAGE(low, "{} needs precision fp16 (or bf16 with loss_scale dynamic): an fp32 run has no loss scaler", key);
    NL_USAGE(loss_scaling() == LossScaling::dynamic,
             "{} needs loss_scale dynamic: this {} run has no loss scaler ({})", key, to_string(storage()),
             loss_scale ? "loss_scale none" : "bf16 runs without one unless asked");
  }
  NL_USAGE(!loss_scale_init || (*loss_scale_init >= kMinLossScale && *loss_scale_init <= 3.4028234663852886e38),
           "loss_scale_init must be in [2^-16, 3.4e38] (a finite float32 the scaler can back off from), got {}",
           loss_scale_init.value_or(0));
  NL_USAGE(!loss_scale_growth_factor || *loss_scale_growth_factor > 1,
           "loss_scale_growth_factor must be > 1, got {}", loss_scale_growth_factor.value_or(0));
  NL_USAGE(!loss_scale_backoff_factor || (*loss_scale_backoff_factor > 0 && *loss_scale_backoff_factor < 1),
           "loss_scale_backoff_factor must be in (0, 1), got {}", loss_scale_backoff_factor.value_or(0));
  NL_USAGE(!loss_scale_growth_interval || *loss_scale_growth_interval >= 1,
           "loss_scale_growth_interval must be >= 1, got {}", loss_scale_growth_interval.value_or(0));
  if (norm_compute) {
    NL_USAGE(low, "norm_compute {} needs precision bf16 or fp16 (in fp32 every norm is float32 arithmetic)",
             to_string(*norm_compute));
  }
  validate_model_for_data();
  if (data.kind == DataKind::synthetic) {
    NL_USAGE(topics >= 1, "topics must be >= 1, got {}", topics);
    NL_USAGE(model.vocab - topics >= 2, "vocab ({}) must exceed topics ({}) by at least 2", model.vocab, topics);
    NL_USAGE(noise >= 0 && noise <= 1, "noise must be in [0, 1], got {}", noise);
  } else if (is_seq2seq(data.kind)) {
    NL_USAGE(model.vocab >= 3, "data {} needs vocab >= 3 (two ordinary tokens and the start token), got {}",
             data.str(), model.vocab);
    NL_USAGE(noise >= 0 && noise <= 1, "noise must be in [0, 1], got {}", noise);
  } else if (tokens() == Tokenizer::bytes) {
    NL_USAGE(model.vocab == 256, "byte-level text needs vocab = 256, got {}", model.vocab);
  } else {
    NL_USAGE(vocabulary.has_value(), "tokenizer chars needs its vocabulary (resolved from the text when the config is "
             "loaded)");
    const int64_t chars = TextCodec(Tokenizer::chars, *vocabulary).size();
    NL_USAGE(model.vocab == chars, "tokenizer chars with a vocabulary of {} characters needs vocab = {}, got {} "
             "(leave vocab unset)", chars, chars, model.vocab);
  }
  if (data.kind != DataKind::text) {
    NL_USAGE(!tokenizer, "tokenizer is for text data (data text:PATH), not {}", data.str());
    NL_USAGE(!vocabulary, "vocabulary is for text data with tokenizer chars, not {}", data.str());
  } else if (tokens() == Tokenizer::bytes) {
    NL_USAGE(!vocabulary, "vocabulary is for tokenizer chars (tokenizer bytes has the 256 byte values)");
  }
}

// The encoder-decoder learns a sequence-to-sequence task and nothing else does.
void TrainConfig::validate_model_for_data() const {
  const bool encdec = model.model == ModelKind::encdec;
  NL_USAGE(encdec == is_seq2seq(data.kind),
           encdec ? "model encdec maps a source to a target: it needs data copy, reverse or translate, not {}"
                  : "data {} maps a source to a target: it needs model encdec",
           data.str());
  // Its per-layer census of stored values is the decoder-only model's (blocks.N) alone.
  NL_USAGE(!encdec || storage() == Precision::fp32, "model encdec trains in fp32 only, not precision {}",
           to_string(storage()));
}

double held_out_oracle_loss(const TrainConfig& cfg) {
  std::unique_ptr<DataSource> data = make_data_source(cfg);
  double oracle = 0;
  for (int64_t i = 0; i < cfg.eval_batches; ++i) oracle += data->oracle_loss(data->val_batch(i, cfg.batch_size, cfg.model.seq_len));
  return oracle / static_cast<double>(cfg.eval_batches);
}

double learning_rate(const TrainConfig& cfg, int64_t step) {
  if (cfg.warmup_steps > 0 && step <= cfg.warmup_steps)
    return cfg.lr * static_cast<double>(step) / static_cast<double>(cfg.warmup_steps);
  if (cfg.schedule == Schedule::cosine) {
    const double span = static_cast<double>(std::max<int64_t>(cfg.steps - cfg.warmup_steps, 1));
    const double progress = static_cast<double>(step - cfg.warmup_steps) / span;
    const double floor = cfg.min_lr.value_or(0.0);
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * std::min(progress, 1.0)));
  }
  return cfg.lr;
}

// Reduced where x lives (the RowNorms kernel): a device-resident run downloads N norms.
double mean_token_norm(const Tensor& x) {
  const int64_t d = x.size(-1), n = x.numel() / d;
  Tensor norms = Tensor::empty({n}, statistics_dtype(x.dtype()), x.device());
  run_kernel(backend_for(x.device(), x.dtype()), RowNorms{norms, x, n, d});
  double total = 0;
  for (double r : norms.to_vector()) total += r;
  return total / static_cast<double>(n);
}

double params_grad_norm(const std::vector<Tensor>& params) {
  double s = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) s += sum_squares(g);
  }
  return std::sqrt(s);
}

// Reduced where q and k live (the AttentionLogitStats kernel): B*H*T maxima and entropies come back.
AttentionStats attention_statistics(const AttentionTap& tap) {
  const int64_t b = tap.q.size(0), t = tap.q.size(1), c = tap.q.size(2), h = tap.heads, dh = c / h;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  Tensor max_logit = Tensor::empty({b, h, t}, statistics_dtype(tap.q.dtype()), tap.q.device());
  Tensor entropy = Tensor::empty({b, h, t}, statistics_dtype(tap.q.dtype()), tap.q.device());
  run_kernel(backend_for(tap.q.device(), tap.q.dtype()),
             AttentionLogitStats{max_logit, entropy, tap.q, tap.k, b, t, h, dh, scale});
  AttentionStats st;
  st.max_logit = -INFINITY;
  for (double m : max_logit.to_vector()) st.max_logit = std::max(st.max_logit, m);
  double entropy_sum = 0;
  for (double e : entropy.to_vector()) entropy_sum += e;
  st.mean_entropy = entropy_sum / static_cast<double>(b * h * t);
  return st;
}

namespace {

// Adam's settings but the two that change every step (lr and step, set by adam_update).
AdamParams adam_params(const TrainConfig& cfg) {
  AdamParams hp;
  hp.beta1 = cfg.beta1;
  hp.beta2 = cfg.beta2;
  hp.eps = cfg.adam_eps;
  hp.weight_decay = cfg.weight_decay;
  hp.decoupled = cfg.optimizer == OptimizerKind::adamw;
  return hp;
}

// The dynamic loss scaler of a run that scales its loss (none otherwise); a resumed run's goes on
// from the state it was saved with.
std::optional<LossScaler> loss_scaler_for(const TrainConfig& cfg, const ResumePoint* resume) {
  std::optional<LossScaler> scaler;
  if (cfg.loss_scaling() != LossScaling::dynamic) return scaler;
  if (resume) {
    NL_USAGE(resume->state.loss_scaler.scale > 0,
             "the state to resume from has no loss scaler's state, but this run scales its loss");
    scaler.emplace(cfg.loss_scaler_settings(), resume->state.loss_scaler);
  } else {
    scaler.emplace(cfg.loss_scaler_settings());
  }
  return scaler;
}

// An eval's figures of the forward it traced: the residual stream's size after each block and
// after the final norm, and each attention's logits.
void add_trace_statistics(EvalRecord& r, const ForwardTrace& trace) {
  for (const Tensor& x : trace.block_out) r.stream_norm.push_back(mean_token_norm(x));
  r.final_norm_out = mean_token_norm(trace.final_out);
  for (const AttentionTap& tap : trace.attention) {
    const AttentionStats a = attention_statistics(tap);
    r.attn_entropy.push_back(a.mean_entropy);
    r.attn_max_logit.push_back(a.max_logit);
  }
}

// The steps since the last eval: the next eval reports their mean training loss and their time
// per step, then starts a new window.
struct EvalWindow {
  double train_loss_sum = 0;
  int64_t train_loss_count = 0;
  int64_t steps = 0;
  std::chrono::steady_clock::time_point start;
};

// One run of train() on a model and data that train() set up, the loop's state in members. The
// steps in the order they happen: the constructor (and a resumed run's state), train_step for each
// step (backward, the loss scaler, Adam, the eval and checkpoint when due), then run's ending
// (the evals a 0-step or diverged run still owes, summarize, the last checkpoint).
class TrainLoop {
 public:
  TrainLoop(const TrainConfig& cfg, const TrainHooks& hooks, DataSource& data, TrainModel& model, Device device,
            const ResumePoint* resume);
  TrainResult run();

 private:
  Tensor on_device(const Tensor& t) const {
    return !t.defined() || t.device() == device_ ? t : t.to_device(device_);
  }
  Batch on_device(const Batch& b) const {
    Batch out{on_device(b.inputs), on_device(b.targets)};
    out.sources = on_device(b.sources);
    return out;
  }
  void resume_optimizer(const TrainState& st);
  void resume_progress(const TrainState& st);
  TrainState snapshot(int64_t step) const;
  bool train_step(int64_t step);
  double backward(const Tensor& loss, double seed);
  bool unscale_or_skip(double& grad_norm, double seed);
  void adam_update(int64_t step, double grad_norm);
  // The flat buffer as runs of neighbouring parameters that weight decay treats alike.
  struct DecayRun {
    int64_t offset = 0, count = 0;
    bool decayed = true;
  };
  static std::vector<DecayRun> decay_runs(const TrainConfig& cfg, const ParamList& params);
  void count_step(int64_t step, double loss_value);
  // dropout: the rate the replayed forward ran under (training's, or 0 for a held-out batch).
  void diverge(int64_t step, std::string reason, const Batch& batch, std::optional<double> backward_seed,
               double dropout);
  void diverge_on_validation(int64_t step);
  void evaluate(int64_t step, double grad_norm, bool grads = true);
  EvalRecord training_record(int64_t step, double grad_norm, bool grads) const;
  void measure_validation(EvalRecord& r);
  double validation_loss(const Batch& b, bool traced, ForwardTrace& trace, EvalRecord& r) const;
  void add_eval(const EvalRecord& r);
  void summarize();

  const TrainConfig& cfg_;
  const TrainHooks& hooks_;
  const bool low_precision_;
  const int64_t tokens_per_step_;
  DataSource& data_;
  TrainModel& model_;
  ParamList& params_;
  const Device device_;
  // The flat parameter buffer, its gradient and Adam's moments, on the compute device.
  Tensor flat_, flat_grad_;
  Backend& kb_;
  Tensor m_, v_;
  AdamParams hp_;
  std::vector<DecayRun> decay_runs_;
  Rng data_rng_;
  std::optional<LossScaler> scaler_;
  TrainResult res_;
  std::chrono::steady_clock::time_point t_start_;
  EvalWindow window_;
  SpikeCounter spikes_;
  int64_t first_step_ = 1;
  // The gradient norm of the last step that got one, which the eval at a divergence reports.
  double last_grad_norm_ = 0;
};

TrainLoop::TrainLoop(const TrainConfig& cfg, const TrainHooks& hooks, DataSource& data, TrainModel& model, Device device,
                     const ResumePoint* resume)
    : cfg_(cfg),
      hooks_(hooks),
      low_precision_(cfg.storage() != Precision::fp32),
      tokens_per_step_(cfg.batch_size * cfg.model.seq_len),
      data_(data),
      model_(model),
      params_(model.params()),
      device_(device),
      flat_(params_.flat()),
      flat_grad_(params_.flat_grad()),
      kb_(backend_for(flat_.device(), flat_.dtype())),
      m_(Tensor::zeros(flat_.shape(), flat_.dtype(), device)),
      v_(Tensor::zeros(flat_.shape(), flat_.dtype(), device)),
      hp_(adam_params(cfg)),
      decay_runs_(decay_runs(cfg, params_)),
      data_rng_(cfg.seed, stream::data) {
  if (resume) resume_optimizer(resume->state);
  scaler_ = loss_scaler_for(cfg, resume);
  res_.parameters = params_.count();
  res_.loss_floor = data_.loss_floor(cfg.model.seq_len);
  res_.unigram_loss = data_.unigram_loss();
  res_.best_val_loss = INFINITY;
  res_.eps_rounding = eps_rounding(cfg);
  t_start_ = std::chrono::steady_clock::now();
  window_.start = t_start_;
  if (resume) resume_progress(resume->state);
}

// Adam's moments and the training batches' stream as the resumed run left them.
void TrainLoop::resume_optimizer(const TrainState& st) {
  NL_USAGE(st.adam_m.defined() && st.adam_v.defined() && st.adam_m.numel() == flat_.numel() &&
               st.adam_v.numel() == flat_.numel() && st.adam_m.dtype() == flat_.dtype() &&
               st.adam_v.dtype() == flat_.dtype(),
           "the optimizer state to resume from has {} / {} values; the model has {} {} parameters",
           st.adam_m.defined() ? st.adam_m.numel() : 0, st.adam_v.defined() ? st.adam_v.numel() : 0, flat_.numel(),
           to_string(flat_.dtype()));
  NL_USAGE(st.step >= 1 && st.step < cfg_.steps, "cannot resume at step {} of a {}-step run", st.step, cfg_.steps);
  m_.copy_(on_device(st.adam_m));
  v_.copy_(on_device(st.adam_v));
  data_rng_.set_state(st.data_rng);
}

// The loop's counts as the resumed run left them: its eval window's losses, the spike counter,
// its steps and evals (the best of them too).
void TrainLoop::resume_progress(const TrainState& st) {
  window_.train_loss_sum = st.train_loss_sum;
  window_.train_loss_count = st.train_loss_count;
  spikes_.recent = st.recent_losses;
  spikes_.result.count = st.spike_count;
  spikes_.result.steps = st.spike_steps;
  first_step_ = st.step + 1;
  res_.steps_done = st.step;
  for (const EvalRecord& r : st.evals) add_eval(r);
}

// What a run resumed after `step` needs besides the weights (TrainState).
TrainState TrainLoop::snapshot(int64_t step) const {
  TrainState st;
  st.step = step;
  st.adam_m = m_.to_device(Device::cpu);  // a copy, on the host, also from the cpu
  st.adam_v = v_.to_device(Device::cpu);
  st.data_rng = data_rng_.state();
  st.train_loss_sum = window_.train_loss_sum;
  st.train_loss_count = window_.train_loss_count;
  st.evals = res_.evals;
  st.recent_losses = spikes_.recent;
  st.spike_count = spikes_.result.count;
  st.spike_steps = spikes_.result.steps;
  if (scaler_) st.loss_scaler = scaler_->state();
  return st;
}

TrainResult TrainLoop::run() {
  for (int64_t step = first_step_; step <= cfg_.steps; ++step)
    if (!train_step(step)) break;
  // No steps: the run is the initial model, evaluated once (and written by on_checkpoint below).
  if (cfg_.steps == 0) {
    res_.final_train_loss = NAN;
    evaluate(0, NAN, false);
  }
  if (res_.status == "diverged" && (res_.evals.empty() || res_.evals.back().step != res_.diverged_step)) {
    // The state at divergence is part of the result: record it (its losses may be NaN/Inf).
    window_.train_loss_sum = NAN;
    window_.train_loss_count = 1;
    evaluate(res_.diverged_step, last_grad_norm_);
  }
  summarize();
  if (hooks_.on_checkpoint && res_.status != "diverged")
    hooks_.on_checkpoint(res_.steps_done, model_, snapshot(res_.steps_done));
  return std::move(res_);
}

// One step: a training batch's loss and gradient, the loss scaler's verdict, Adam's update, then
// the eval and the checkpoint when they are due. False: the run diverged at this step (res_ says
// where and why).
bool TrainLoop::train_step(int64_t step) {
  params_.zero_grad();
  const Batch b = on_device(data_.train_batch(data_rng_, cfg_.batch_size, cfg_.model.seq_len));
  Tensor loss;
  {
    // The step's masks, keyed by (seed, step): a resumed run and a replay draw the same ones.
    const DropoutScope drop(cfg_.dropout_rate(), dropout_step_key(cfg_.seed, step));
    loss = model_.loss(b);
  }
  const double loss_value = loss.item();
  const double seed = scaler_ ? scaler_->scale() : 1.0;
  if (!std::isfinite(loss_value) && !scaler_) {
    diverge(step, "non-finite loss", b, std::nullopt, cfg_.dropout_rate());
    return false;
  }
  // Under a scaler a non-finite loss is a step like any with an inf or NaN gradient (PyTorch's
  // backward would give it those): skipped, and the scale backs off.
  double grad_norm = std::isfinite(loss_value) ? backward(loss, seed) : INFINITY;
  bool step_taken = true;
  if (scaler_) {
    step_taken = unscale_or_skip(grad_norm, seed);
    if (!step_taken && scaler_->scale() < kMinLossScale) {
      const bool loss_finite = std::isfinite(loss_value);
      diverge(step,
              fmt::format("non-finite {} at {} steps in a row under loss scaling (scale now {:g})",
                          loss_finite ? "gradient" : "loss", scaler_->state().consecutive_skips, scaler_->scale()),
              b, loss_finite ? std::optional<double>(seed) : std::nullopt, cfg_.dropout_rate());
      return false;
    }
  }
  last_grad_norm_ = grad_norm;
  if (!scaler_ && !std::isfinite(grad_norm)) {
    diverge(step, "non-finite gradient", b, seed, cfg_.dropout_rate());
    return false;
  }
  if (step_taken) adam_update(step, grad_norm);
  count_step(step, loss_value);
  if (step % cfg_.eval_every == 0 || step == cfg_.steps) {
    evaluate(step, grad_norm);
    if (!std::isfinite(res_.evals.back().val_loss)) {
      diverge_on_validation(step);
      return false;
    }
  }
  // After the eval, so that a run resumed from here does not repeat it.
  if (hooks_.on_checkpoint && hooks_.checkpoint_every > 0 && step % hooks_.checkpoint_every == 0 && step < cfg_.steps)
    hooks_.on_checkpoint(step, model_, snapshot(step));
  return true;
}

// The backward of a finite loss (seeded with the loss scale under a scaler), and the norm of the
// gradient it left in the flat buffer.
double TrainLoop::backward(const Tensor& loss, double seed) {
  if (scaler_) loss.backward(Tensor::full_on(loss.shape(), seed, loss.dtype(), loss.device()));
  else loss.backward();
  params_.fill_missing_grads();
  return std::sqrt(sum_squares(kb_, flat_grad_));
}

// GradScaler: a step whose gradients hold an inf or NaN is skipped and the scale backs off;
// otherwise the gradients are unscaled (1/scale, as unscale_ multiplies) before clipping.
// Whether the step goes ahead.
bool TrainLoop::unscale_or_skip(double& grad_norm, double seed) {
  const bool taken = scaler_->update(std::isfinite(grad_norm));
  if (taken) {
    run_kernel(kb_, Scale{flat_grad_, flat_grad_, 1.0 / seed});
    grad_norm /= seed;
  }
  return taken;
}

void TrainLoop::adam_update(int64_t step, double grad_norm) {
  if (cfg_.clip > 0 && grad_norm > cfg_.clip) run_kernel(kb_, Scale{flat_grad_, flat_grad_, cfg_.clip / grad_norm});
  hp_.lr = learning_rate(cfg_, step);
  // Adam's bias correction counts the updates made: a skipped step is not one (as PyTorch,
  // whose optimizer.step() the scaler does not call).
  hp_.step = step - (scaler_ ? scaler_->state().skipped : 0);
  if (decay_runs_.size() == 1 && decay_runs_[0].decayed) {
    run_kernel(kb_, AdamStep{flat_, flat_grad_, m_, v_, hp_});
    return;
  }
  AdamParams run_hp = hp_;
  for (const DecayRun& r : decay_runs_) {
    run_hp.weight_decay = r.decayed ? hp_.weight_decay : 0.0;
    Tensor p = flat_.view_at(r.offset, {r.count}), m = m_.view_at(r.offset, {r.count}),
           v = v_.view_at(r.offset, {r.count});
    run_kernel(kb_, AdamStep{p, flat_grad_.view_at(r.offset, {r.count}), m, v, run_hp});
  }
}

std::vector<TrainLoop::DecayRun> TrainLoop::decay_runs(const TrainConfig& cfg, const ParamList& params) {
  // Without decay, or with it on every parameter, one pass over the buffer as always.
  const bool matrices_only = cfg.weight_decay_on == WeightDecayOn::matrices && cfg.weight_decay != 0;
  std::vector<DecayRun> runs;
  int64_t offset = 0;
  for (const Tensor& p : params.all()) {
    const bool decayed = !matrices_only || p.dim() >= 2;
    if (runs.empty() || runs.back().decayed != decayed) runs.push_back({offset, 0, decayed});
    runs.back().count += p.numel();
    offset += p.numel();
  }
  if (runs.empty()) runs.push_back({0, 0, true});
  return runs;
}

// A step done (taken or skipped): its loss in the spike counter, the eval window and the result.
void TrainLoop::count_step(int64_t step, double loss_value) {
  spikes_.add(step, loss_value);
  if (std::isfinite(loss_value)) {  // a skipped step's may not be
    window_.train_loss_sum += loss_value;
    ++window_.train_loss_count;
  }
  ++window_.steps;
  res_.steps_done = step;
  res_.final_train_loss = loss_value;
  if (hooks_.on_step) hooks_.on_step(step, loss_value);
}

// A diverged run says where: the step replayed (the model unchanged since it ran) with every
// stored value looked at.
void TrainLoop::diverge(int64_t step, std::string reason, const Batch& batch, std::optional<double> backward_seed,
                        double dropout) {
  res_.status = "diverged";
  res_.diverged_step = step;
  res_.diverged_reason = std::move(reason);
  const DropoutScope replay(dropout, dropout_step_key(cfg_.seed, step));  // the step's masks again
  res_.nonfinite = find_nonfinite(model_, batch, step, backward_seed);
}

// The first held-out batch whose loss is not finite is the one replayed.
void TrainLoop::diverge_on_validation(int64_t step) {
  for (int64_t i = 0; i < cfg_.eval_batches; ++i) {
    const Batch vb = on_device(data_.val_batch(i, cfg_.batch_size, cfg_.model.seq_len));
    diverge(step, "non-finite validation loss", vb, std::nullopt, 0.0);
    if (res_.nonfinite.step >= 0) break;
  }
}

// An eval after `step`: the training side since the last one, the held-out loss, recorded and
// passed to on_eval. grads: whether a backward ran (the initial model of a 0-step run has no
// gradients to report).
void TrainLoop::evaluate(int64_t step, double grad_norm, bool grads) {
  EvalRecord r = training_record(step, grad_norm, grads);
  NoGradGuard no_grad;  // the held-out forwards, and on_eval
  measure_validation(r);
  window_.train_loss_sum = 0;
  window_.train_loss_count = 0;
  window_.steps = 0;
  add_eval(r);
  if (hooks_.on_eval) hooks_.on_eval(r);
  window_.start = std::chrono::steady_clock::now();  // evals do not count as step time
}

// An eval's training side: the lr, the mean training loss and the time per step over the window,
// the last gradient's norm (per block too), the loss scaler's scale and skips.
EvalRecord TrainLoop::training_record(int64_t step, double grad_norm, bool grads) const {
  auto now = std::chrono::steady_clock::now();
  EvalRecord r;
  r.step = step;
  r.lr = learning_rate(cfg_, step);
  r.train_loss = window_.train_loss_count ? window_.train_loss_sum / static_cast<double>(window_.train_loss_count) : NAN;
  r.grad_norm = grad_norm;
  if (grads)
    for (size_t l = 0; l < model_.layer_count(); ++l) r.block_grad_norm.push_back(params_grad_norm(model_.layer_params(l)));
  const double window = std::chrono::duration<double>(now - window_.start).count();
  r.seconds_per_step = window_.steps ? window / static_cast<double>(window_.steps) : 0;
  r.tokens_per_second = r.seconds_per_step > 0 ? static_cast<double>(tokens_per_step_) / r.seconds_per_step : 0;
  if (scaler_) {
    r.loss_scale = scaler_->scale();
    r.skipped_steps = scaler_->state().skipped;
  }
  return r;
}

// The held-out loss over eval_batches batches, its excess over the oracle's and their standard
// errors; the first batch's forward is traced for the per-block figures.
void TrainLoop::measure_validation(EvalRecord& r) {
  std::vector<double> batch_loss, batch_excess;
  double oracle = 0;
  for (int64_t i = 0; i < cfg_.eval_batches; ++i) {
    Batch b = data_.val_batch(i, cfg_.batch_size, cfg_.model.seq_len);
    ForwardTrace trace;
    const double loss = validation_loss(b, i == 0, trace, r);
    const double oracle_batch = data_.oracle_loss(b);
    batch_loss.push_back(loss);
    batch_excess.push_back(loss - oracle_batch);
    oracle += oracle_batch;
    if (i == 0) add_trace_statistics(r, trace);
  }
  // Every batch has equally many tokens: the mean of the batch means is the mean over tokens.
  const double batches = static_cast<double>(cfg_.eval_batches);
  r.val_loss = mean(batch_loss);
  r.val_oracle_loss = oracle / batches;
  if (std::isfinite(r.val_oracle_loss)) r.excess_loss = mean(batch_excess);
  if (cfg_.eval_batches > 1) {
    r.val_loss_se = sample_std(batch_loss) / std::sqrt(batches);
    if (std::isfinite(r.val_oracle_loss)) r.excess_loss_se = sample_std(batch_excess) / std::sqrt(batches);
  }
}

// Batch b's loss, its forward traced when `traced`; a low-precision run's traced forward also
// fills r's per-block statistics of what the format stores.
double TrainLoop::validation_loss(const Batch& b, bool traced, ForwardTrace& trace, EvalRecord& r) const {
  if (traced && low_precision_) {  // what the format does to each block's values
    BlockStorageStats stats(model_.layer_count());
    const double loss = model_.loss(on_device(b), &trace).item();
    stats.fill(r, trace);
    return loss;
  }
  return model_.loss(on_device(b), traced ? &trace : nullptr).item();
}

// An eval in the result, and the best held-out loss so far.
void TrainLoop::add_eval(const EvalRecord& r) {
  res_.evals.push_back(r);
  if (std::isfinite(r.val_loss) && r.val_loss < res_.best_val_loss) {
    res_.best_val_loss = r.val_loss;
    res_.best_val_step = r.step;
  }
}

// The result's figures of the whole run, from its evals and counters: time and speed, the last
// and best held-out loss, collapse and plateaus, spikes, the loss scaler's, what it ran on.
void TrainLoop::summarize() {
  res_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start_).count();
  if (!res_.evals.empty()) res_.final_val_loss = res_.evals.back().val_loss;
  double step_time = 0;
  int64_t counted = 0;
  for (const EvalRecord& r : res_.evals)
    if (r.seconds_per_step > 0) {
      step_time += r.seconds_per_step;
      ++counted;
    }
  res_.seconds_per_step = counted ? step_time / static_cast<double>(counted) : 0;
  res_.tokens_per_second = res_.seconds_per_step > 0 ? static_cast<double>(tokens_per_step_) / res_.seconds_per_step : 0;
  if (!std::isfinite(res_.best_val_loss)) res_.best_val_loss = NAN;
  if (res_.status == "ok" && res_.steps_done > 0) {  // an untrained model has not collapsed: it has not begun
    res_.collapsed_step = collapse_step(res_.evals, res_.unigram_loss);
    if (res_.collapsed_step >= 0) res_.status = "collapsed";
  }
  if (res_.steps_done > 0) res_.plateaus = plateau_spells(res_.evals, res_.unigram_loss);
  res_.spike_count = spikes_.result.count;
  res_.spike_steps = spikes_.result.steps;
  if (scaler_) {
    res_.skipped_steps = scaler_->state().skipped;
    res_.final_loss_scale = scaler_->scale();
  }
  res_.threads = num_threads();
  res_.kernel_choices = backend_for(device_, DType::f32).kernel_choices();
}

}  // namespace

TrainResult train(const TrainConfig& cfg, const EvalCallback& on_eval, const ProgressCallback& on_step) {
  TrainHooks hooks;
  hooks.on_eval = on_eval;
  hooks.on_step = on_step;
  return train(cfg, hooks);
}

TrainResult train(const TrainConfig& cfg, const TrainHooks& hooks, const ResumePoint* resume) {
  cfg.validate();
  ThreadCountScope thread_count(cfg.threads);  // the caller's count again when the run ends, or throws
  // Every op of the run (steps and evals) stores in the run's precision; the optimizer works on
  // the float32 master weights through the backend, outside the ops.
  StoragePrecisionScope storage(cfg.storage(), cfg.residual_storage(), cfg.norm_compute.value_or(NormCompute::fused));
  std::unique_ptr<DataSource> data = make_data_source(cfg);
  std::unique_ptr<TrainModel> model = make_train_model(cfg.model, cfg.seed);
  if (resume) load_model_state(*model, load_safetensors(resume->weights), resume->weights);
  else if (!cfg.init_from.empty()) load_model_state(*model, load_safetensors(cfg.init_from), cfg.init_from);
  // Parameters, gradients and Adam's moments live on the compute device from here on; a step
  // uploads its batch and downloads the loss and the gradient norm.
  const Device device = compute_device();
  model->params().flatten(device);
  TrainLoop loop(cfg, hooks, *data, *model, device, resume);
  return loop.run();
}

std::vector<std::pair<int64_t, int64_t>> plateau_spells(const std::vector<EvalRecord>& evals, double unigram_loss) {
  std::vector<std::pair<int64_t, int64_t>> spells;
  if (!std::isfinite(unigram_loss)) return spells;
  const double threshold = unigram_loss - kCollapseMargin;
  int64_t first = -1, last = -1;
  for (const EvalRecord& r : evals) {
    if (r.step == 0) continue;  // the untrained model sits at the unigram loss by construction
    if (!(r.val_loss < threshold)) {
      if (first < 0) first = r.step;
      last = r.step;
    } else if (first >= 0) {  // left the unigram loss again: a plateau
      spells.emplace_back(first, last);
      first = -1;
    }
  }
  return spells;  // a spell still open at the end is the collapse, not a plateau
}

void SpikeCounter::add(int64_t step, double loss) {
  if (!std::isfinite(loss)) return;
  if (static_cast<int64_t>(recent.size()) == kSpikeWindow) {
    if (loss > kSpikeFactor * median(recent)) {
      ++result.count;
      if (result.steps.size() < kMaxSpikeSteps) result.steps.push_back(step);
    }
    recent.erase(recent.begin());
  }
  recent.push_back(loss);
}

SpikeCount count_spikes(const std::vector<double>& losses, int64_t first_step) {
  SpikeCounter c;
  for (size_t i = 0; i < losses.size(); ++i) c.add(first_step + static_cast<int64_t>(i), losses[i]);
  return c.result;
}

int64_t collapse_step(const std::vector<EvalRecord>& evals, double unigram_loss) {
  if (evals.empty() || !std::isfinite(unigram_loss)) return -1;
  const double threshold = unigram_loss - kCollapseMargin;
  int64_t from = -1;
  for (auto it = evals.rbegin(); it != evals.rend() && !(it->val_loss < threshold); ++it) from = it->step;
  return from;
}

}  // namespace normlab
