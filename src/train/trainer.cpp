// The trainer loop: Adam(W) over one flat parameter buffer, warm-up + schedule, optional
// clipping, evals with per-layer statistics, and divergence as a result (not a crash).
#include <chrono>
#include <cmath>

#include "normlab/autograd.h"
#include "normlab/checkpoint.h"
#include "normlab/backend.h"
#include "normlab/ops.h"
#include "normlab/stats.h"
#include "normlab/train.h"
#include "precision_train.h"

namespace normlab {

std::string DataSpec::str() const { return kind == DataKind::text ? "text:" + path : to_string(kind); }

DataSpec DataSpec::parse(const std::string& s) {
  DataSpec d;
  if (s.rfind("text:", 0) == 0) {
    NL_USAGE(s.size() > 5, "data 'text:' needs a path, e.g. text:data/tiny.txt");
    d.kind = DataKind::text;
    d.path = s.substr(5);
    return d;
  }
  NL_USAGE(s == to_string(DataKind::synthetic), "data '{}' is not synthetic or text:PATH", shown(s));
  return d;
}

std::unique_ptr<DataSource> make_data_source(const TrainConfig& cfg) {
  if (cfg.data.kind == DataKind::synthetic)
    return make_synthetic({cfg.model.vocab, cfg.topics, cfg.noise, cfg.task_seed()});
  return make_text(cfg.data.path, cfg.model.seq_len, cfg.task_seed());
}

void TrainConfig::validate() const {
  model.validate();
  NL_USAGE(lr > 0 && std::isfinite(lr), "lr must be > 0, got {}", lr);
  NL_USAGE(beta1 >= 0 && beta1 < 1, "beta1 must be in [0, 1), got {}", beta1);
  NL_USAGE(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1), got {}", beta2);
  NL_USAGE(adam_eps > 0, "adam_eps must be > 0, got {}", adam_eps);
  NL_USAGE(weight_decay >= 0, "weight_decay must be >= 0, got {}", weight_decay);
  NL_USAGE(warmup_steps >= 0, "warmup_steps must be >= 0, got {}", warmup_steps);
  NL_USAGE(clip >= 0, "clip must be >= 0 (0 = off), got {}", clip);
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
  if (data.kind == DataKind::synthetic) {
    NL_USAGE(topics >= 1, "topics must be >= 1, got {}", topics);
    NL_USAGE(model.vocab - topics >= 2, "vocab ({}) must exceed topics ({}) by at least 2", model.vocab, topics);
    NL_USAGE(noise >= 0 && noise <= 1, "noise must be in [0, 1], got {}", noise);
  } else {
    NL_USAGE(model.vocab == 256, "byte-level text needs vocab = 256, got {}", model.vocab);
  }
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
    return cfg.lr * 0.5 * (1.0 + std::cos(M_PI * std::min(progress, 1.0)));
  }
  return cfg.lr;
}

// Reduced where x lives (Backend::row_norms): a device-resident run downloads N norms.
double mean_token_norm(const Tensor& x) {
  const int64_t d = x.size(-1), n = x.numel() / d;
  Tensor norms = Tensor::empty({n}, statistics_dtype(x.dtype()), x.device());
  backend_for(x.device(), x.dtype()).row_norms(norms, x, n, d);
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

// Reduced where q and k live (Backend::attention_logit_stats): B*H*T maxima and entropies come back.
AttentionStats attention_statistics(const AttentionTap& tap) {
  const int64_t b = tap.q.size(0), t = tap.q.size(1), c = tap.q.size(2), h = tap.heads, dh = c / h;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  Tensor max_logit = Tensor::empty({b, h, t}, statistics_dtype(tap.q.dtype()), tap.q.device());
  Tensor entropy = Tensor::empty({b, h, t}, statistics_dtype(tap.q.dtype()), tap.q.device());
  backend_for(tap.q.device(), tap.q.dtype()).attention_logit_stats(max_logit, entropy, tap.q, tap.k, b, t, h, dh, scale);
  AttentionStats st;
  st.max_logit = -INFINITY;
  for (double m : max_logit.to_vector()) st.max_logit = std::max(st.max_logit, m);
  double entropy_sum = 0;
  for (double e : entropy.to_vector()) entropy_sum += e;
  st.mean_entropy = entropy_sum / static_cast<double>(b * h * t);
  return st;
}

TrainResult train(const TrainConfig& cfg, const EvalCallback& on_eval, const ProgressCallback& on_step) {
  TrainHooks hooks;
  hooks.on_eval = on_eval;
  hooks.on_step = on_step;
  return train(cfg, hooks);
}

TrainResult train(const TrainConfig& cfg, const TrainHooks& hooks, const ResumePoint* resume) {
  const EvalCallback& on_eval = hooks.on_eval;
  const ProgressCallback& on_step = hooks.on_step;
  cfg.validate();
  ThreadCountScope thread_count(cfg.threads);  // the caller's count again when the run ends, or throws
  // Every op of the run (steps and evals) stores in the run's precision; the optimizer works on
  // the float32 master weights through the backend, outside the ops.
  StoragePrecisionScope storage(cfg.storage(), cfg.residual_storage(), cfg.norm_compute.value_or(NormCompute::fused));
  const bool low_precision = cfg.storage() != Precision::fp32;
  std::unique_ptr<DataSource> data = make_data_source(cfg);
  Model model(cfg.model, cfg.seed);
  if (resume) load_model_state(model, load_safetensors(resume->weights), resume->weights);
  else if (!cfg.init_from.empty()) load_model_state(model, load_safetensors(cfg.init_from), cfg.init_from);
  ParamList& params = model.params();
  // Parameters, gradients and Adam's moments live on the compute device from here on; a step
  // uploads its batch and downloads the loss and the gradient norm.
  const Device device = compute_device();
  params.flatten(device);
  Tensor flat = params.flat(), flat_grad = params.flat_grad();
  Backend& kb = backend_for(flat.device(), flat.dtype());
  Tensor m = Tensor::zeros(flat.shape(), flat.dtype(), device), v = Tensor::zeros(flat.shape(), flat.dtype(), device);
  auto on_device = [device](const Tensor& t) { return t.device() == device ? t : t.to_device(device); };
  Rng data_rng(cfg.seed, stream::data);
  if (resume) {
    const TrainState& st = resume->state;
    NL_USAGE(st.adam_m.defined() && st.adam_v.defined() && st.adam_m.numel() == flat.numel() &&
                 st.adam_v.numel() == flat.numel() && st.adam_m.dtype() == flat.dtype() &&
                 st.adam_v.dtype() == flat.dtype(),
             "the optimizer state to resume from has {} / {} values; the model has {} {} parameters",
             st.adam_m.defined() ? st.adam_m.numel() : 0, st.adam_v.defined() ? st.adam_v.numel() : 0, flat.numel(),
             to_string(flat.dtype()));
    NL_USAGE(st.step >= 1 && st.step < cfg.steps, "cannot resume at step {} of a {}-step run", st.step, cfg.steps);
    m.copy_(on_device(st.adam_m));
    v.copy_(on_device(st.adam_v));
    data_rng.set_state(st.data_rng);
  }
  std::optional<LossScaler> scaler;
  if (cfg.loss_scaling() == LossScaling::dynamic) {
    if (resume) {
      NL_USAGE(resume->state.loss_scaler.scale > 0,
               "the state to resume from has no loss scaler's state, but this run scales its loss");
      scaler.emplace(cfg.loss_scaler_settings(), resume->state.loss_scaler);
    } else {
      scaler.emplace(cfg.loss_scaler_settings());
    }
  }

  TrainResult res;
  res.parameters = params.count();
  res.loss_floor = data->loss_floor(cfg.model.seq_len);
  res.unigram_loss = data->unigram_loss();
  res.best_val_loss = INFINITY;
  res.eps_rounding = eps_rounding(cfg);
  const int64_t tokens_per_step = cfg.batch_size * cfg.model.seq_len;

  auto t_start = std::chrono::steady_clock::now();
  auto t_window = t_start;
  int64_t window_steps = 0;
  double train_loss_sum = 0;
  int64_t train_loss_count = 0;
  int64_t first_step = 1;
  SpikeCounter spikes;
  if (resume) {
    const TrainState& st = resume->state;
    train_loss_sum = st.train_loss_sum;
    train_loss_count = st.train_loss_count;
    spikes.recent = st.recent_losses;
    spikes.result.count = st.spike_count;
    spikes.result.steps = st.spike_steps;
    first_step = st.step + 1;
    res.steps_done = st.step;
    for (const EvalRecord& r : st.evals) {
      res.evals.push_back(r);
      if (std::isfinite(r.val_loss) && r.val_loss < res.best_val_loss) {
        res.best_val_loss = r.val_loss;
        res.best_val_step = r.step;
      }
    }
  }
  auto snapshot = [&](int64_t step) {
    TrainState st;
    st.step = step;
    st.adam_m = m.to_device(Device::cpu);  // a copy, on the host, also from the cpu
    st.adam_v = v.to_device(Device::cpu);
    st.data_rng = data_rng.state();
    st.train_loss_sum = train_loss_sum;
    st.train_loss_count = train_loss_count;
    st.evals = res.evals;
    st.recent_losses = spikes.recent;
    st.spike_count = spikes.result.count;
    st.spike_steps = spikes.result.steps;
    if (scaler) st.loss_scaler = scaler->state();
    return st;
  };

  // grads: whether a backward ran (the initial model of a 0-step run has no gradients to report).
  auto evaluate = [&](int64_t step, double grad_norm, bool grads = true) {
    auto now = std::chrono::steady_clock::now();
    EvalRecord r;
    r.step = step;
    r.lr = learning_rate(cfg, step);
    r.train_loss = train_loss_count ? train_loss_sum / static_cast<double>(train_loss_count) : NAN;
    r.grad_norm = grad_norm;
    if (grads)
      for (size_t l = 0; l < model.blocks().size(); ++l) r.block_grad_norm.push_back(params_grad_norm(model.block_params(l)));
    const double window = std::chrono::duration<double>(now - t_window).count();
    r.seconds_per_step = window_steps ? window / static_cast<double>(window_steps) : 0;
    r.tokens_per_second = r.seconds_per_step > 0 ? static_cast<double>(tokens_per_step) / r.seconds_per_step : 0;
    if (scaler) {
      r.loss_scale = scaler->scale();
      r.skipped_steps = scaler->state().skipped;
    }
    NoGradGuard no_grad;
    std::vector<double> batch_loss, batch_excess;
    double oracle = 0;
    for (int64_t i = 0; i < cfg.eval_batches; ++i) {
      Batch b = data->val_batch(i, cfg.batch_size, cfg.model.seq_len);
      ForwardTrace trace;
      double loss = 0;
      if (i == 0 && low_precision) {  // what the format does to each block's values
        BlockStorageStats stats(model.blocks().size());
        loss = model.loss(on_device(b.inputs), on_device(b.targets), &trace).item();
        stats.fill(r, trace);
      } else {
        loss = model.loss(on_device(b.inputs), on_device(b.targets), i == 0 ? &trace : nullptr).item();
      }
      const double oracle_batch = data->oracle_loss(b);
      batch_loss.push_back(loss);
      batch_excess.push_back(loss - oracle_batch);
      oracle += oracle_batch;
      if (i == 0) {
        for (const Tensor& x : trace.block_out) r.stream_norm.push_back(mean_token_norm(x));
        r.final_norm_out = mean_token_norm(trace.final_out);
        for (const AttentionTap& tap : trace.attention) {
          const AttentionStats a = attention_statistics(tap);
          r.attn_entropy.push_back(a.mean_entropy);
          r.attn_max_logit.push_back(a.max_logit);
        }
      }
    }
    // Every batch has equally many tokens: the mean of the batch means is the mean over tokens.
    const double batches = static_cast<double>(cfg.eval_batches);
    r.val_loss = mean(batch_loss);
    r.val_oracle_loss = oracle / batches;
    if (std::isfinite(r.val_oracle_loss)) r.excess_loss = mean(batch_excess);
    if (cfg.eval_batches > 1) {
      r.val_loss_se = sample_std(batch_loss) / std::sqrt(batches);
      if (std::isfinite(r.val_oracle_loss)) r.excess_loss_se = sample_std(batch_excess) / std::sqrt(batches);
    }
    train_loss_sum = 0;
    train_loss_count = 0;
    window_steps = 0;
    res.evals.push_back(r);
    if (std::isfinite(r.val_loss) && r.val_loss < res.best_val_loss) {
      res.best_val_loss = r.val_loss;
      res.best_val_step = step;
    }
    if (on_eval) on_eval(r);
    t_window = std::chrono::steady_clock::now();  // evals do not count as step time
  };

  AdamParams hp;
  hp.beta1 = cfg.beta1;
  hp.beta2 = cfg.beta2;
  hp.eps = cfg.adam_eps;
  hp.weight_decay = cfg.weight_decay;
  hp.decoupled = cfg.optimizer == OptimizerKind::adamw;

  double last_grad_norm = 0;
  for (int64_t step = first_step; step <= cfg.steps; ++step) {
    params.zero_grad();
    Batch b = data->train_batch(data_rng, cfg.batch_size, cfg.model.seq_len);
    const Tensor inputs = on_device(b.inputs), targets = on_device(b.targets);
    Tensor loss = model.loss(inputs, targets);
    const double loss_value = loss.item();
    const double seed = scaler ? scaler->scale() : 1.0;
    // A diverged run says where: the step replayed (the model unchanged since it ran) with
    // every stored value looked at.
    auto diverge = [&](std::string reason, const Tensor& in, const Tensor& tg, std::optional<double> backward_seed) {
      res.status = "diverged";
      res.diverged_step = step;
      res.diverged_reason = std::move(reason);
      res.nonfinite = find_nonfinite(model, in, tg, step, backward_seed);
    };
    if (!std::isfinite(loss_value) && !scaler) {
      diverge("non-finite loss", inputs, targets, std::nullopt);
      break;
    }
    // Under a scaler a non-finite loss is a step like any with an inf or NaN gradient (PyTorch's
    // backward would give it those): skipped, and the scale backs off.
    double grad_norm = INFINITY;
    if (std::isfinite(loss_value)) {
      if (scaler) loss.backward(Tensor::full_on(loss.shape(), seed, loss.dtype(), loss.device()));
      else loss.backward();
      params.fill_missing_grads();
      grad_norm = std::sqrt(kb.sum_squares(flat_grad));
    }
    bool step_taken = true;
    if (scaler) {
      // GradScaler: a step whose gradients hold an inf or NaN is skipped and the scale backs off;
      // otherwise the gradients are unscaled (1/scale, as unscale_ multiplies) before clipping.
      step_taken = scaler->update(std::isfinite(grad_norm));
      if (step_taken) {
        kb.scale(flat_grad, flat_grad, 1.0 / seed);
        grad_norm /= seed;
      } else if (scaler->scale() < kMinLossScale) {
        const bool loss_finite = std::isfinite(loss_value);
        diverge(fmt::format("non-finite {} at {} steps in a row under loss scaling (scale now {:g})",
                            loss_finite ? "gradient" : "loss", scaler->state().consecutive_skips, scaler->scale()),
                inputs, targets, loss_finite ? std::optional<double>(seed) : std::nullopt);
        break;
      }
    }
    last_grad_norm = grad_norm;
    if (!scaler && !std::isfinite(grad_norm)) {
      diverge("non-finite gradient", inputs, targets, seed);
      break;
    }
    if (step_taken) {
      if (cfg.clip > 0 && grad_norm > cfg.clip) kb.scale(flat_grad, flat_grad, cfg.clip / grad_norm);
      hp.lr = learning_rate(cfg, step);
      // Adam's bias correction counts the updates made: a skipped step is not one (as PyTorch,
      // whose optimizer.step() the scaler does not call).
      hp.step = step - (scaler ? scaler->state().skipped : 0);
      kb.adam_step(flat, flat_grad, m, v, hp);
    }
    spikes.add(step, loss_value);
    if (std::isfinite(loss_value)) {  // a skipped step's may not be
      train_loss_sum += loss_value;
      ++train_loss_count;
    }
    ++window_steps;
    res.steps_done = step;
    res.final_train_loss = loss_value;
    if (on_step) on_step(step, loss_value);
    if (step % cfg.eval_every == 0 || step == cfg.steps) {
      evaluate(step, grad_norm);
      if (!std::isfinite(res.evals.back().val_loss)) {
        // The first held-out batch whose loss is not finite is the one replayed.
        for (int64_t i = 0; i < cfg.eval_batches; ++i) {
          Batch vb = data->val_batch(i, cfg.batch_size, cfg.model.seq_len);
          diverge("non-finite validation loss", on_device(vb.inputs), on_device(vb.targets), std::nullopt);
          if (res.nonfinite.step >= 0) break;
        }
        break;
      }
    }
    // After the eval, so that a run resumed from here does not repeat it.
    if (hooks.on_checkpoint && hooks.checkpoint_every > 0 && step % hooks.checkpoint_every == 0 && step < cfg.steps)
      hooks.on_checkpoint(step, model, snapshot(step));
  }
  (void)last_grad_norm;
  // No steps: the run is the initial model, evaluated once (and written by on_checkpoint below).
  if (cfg.steps == 0) {
    res.final_train_loss = NAN;
    evaluate(0, NAN, false);
  }
  if (res.status == "diverged" && (res.evals.empty() || res.evals.back().step != res.diverged_step)) {
    // The state at divergence is part of the result: record it (its losses may be NaN/Inf).
    train_loss_sum = NAN;
    train_loss_count = 1;
    evaluate(res.diverged_step, last_grad_norm);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (!res.evals.empty()) res.final_val_loss = res.evals.back().val_loss;
  double step_time = 0;
  int64_t counted = 0;
  for (const EvalRecord& r : res.evals)
    if (r.seconds_per_step > 0) {
      step_time += r.seconds_per_step;
      ++counted;
    }
  res.seconds_per_step = counted ? step_time / static_cast<double>(counted) : 0;
  res.tokens_per_second = res.seconds_per_step > 0 ? static_cast<double>(tokens_per_step) / res.seconds_per_step : 0;
  if (!std::isfinite(res.best_val_loss)) res.best_val_loss = NAN;
  if (res.status == "ok" && res.steps_done > 0) {  // an untrained model has not collapsed: it has not begun
    res.collapsed_step = collapse_step(res.evals, res.unigram_loss);
    if (res.collapsed_step >= 0) res.status = "collapsed";
  }
  if (res.steps_done > 0) res.plateaus = plateau_spells(res.evals, res.unigram_loss);
  res.spike_count = spikes.result.count;
  res.spike_steps = spikes.result.steps;
  if (scaler) {
    res.skipped_steps = scaler->state().skipped;
    res.final_loss_scale = scaler->scale();
  }
  res.threads = num_threads();
  res.kernel_choices = backend_for(device, DType::f32).kernel_choices();
  if (hooks.on_checkpoint && res.status != "diverged") hooks.on_checkpoint(res.steps_done, model, snapshot(res.steps_done));
  return res;
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
