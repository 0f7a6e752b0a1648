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
  if (norm_compute) {
    NL_USAGE(storage() != Precision::fp32,
             "norm_compute {} needs precision bf16 or fp16 (in fp32 every norm is float32 arithmetic)",
             to_string(*norm_compute));
    NL_USAGE(*norm_compute != NormCompute::format,
             "norm_compute format (the norm as PyTorch's composite ops, each rounded) is not built into "
             "train yet; fused and fp32 are (normlab handcalc --precision shows format row by row)");
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
  Tensor norms = Tensor::empty({n}, x.dtype(), x.device());
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
  Tensor max_logit = Tensor::empty({b, h, t}, tap.q.dtype(), tap.q.device());
  Tensor entropy = Tensor::empty({b, h, t}, tap.q.dtype(), tap.q.device());
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
  StoragePrecisionScope storage(cfg.storage());
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

  TrainResult res;
  res.parameters = params.count();
  res.loss_floor = data->loss_floor(cfg.model.seq_len);
  res.unigram_loss = data->unigram_loss();
  res.best_val_loss = INFINITY;
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
    NoGradGuard no_grad;
    std::vector<double> batch_loss, batch_excess;
    double oracle = 0;
    for (int64_t i = 0; i < cfg.eval_batches; ++i) {
      Batch b = data->val_batch(i, cfg.batch_size, cfg.model.seq_len);
      ForwardTrace trace;
      double loss = model.loss(on_device(b.inputs), on_device(b.targets), i == 0 ? &trace : nullptr).item();
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
    Tensor loss = model.loss(on_device(b.inputs), on_device(b.targets));
    const double loss_value = loss.item();
    if (!std::isfinite(loss_value)) {
      res.status = "diverged";
      res.diverged_step = step;
      res.diverged_reason = "non-finite loss";
      break;
    }
    loss.backward();
    params.fill_missing_grads();
    const double grad_norm = std::sqrt(kb.sum_squares(flat_grad));
    last_grad_norm = grad_norm;
    if (!std::isfinite(grad_norm)) {
      res.status = "diverged";
      res.diverged_step = step;
      res.diverged_reason = "non-finite gradient";
      break;
    }
    if (cfg.clip > 0 && grad_norm > cfg.clip) kb.scale(flat_grad, flat_grad, cfg.clip / grad_norm);
    hp.lr = learning_rate(cfg, step);
    hp.step = step;
    kb.adam_step(flat, flat_grad, m, v, hp);
    spikes.add(step, loss_value);
    train_loss_sum += loss_value;
    ++train_loss_count;
    ++window_steps;
    res.steps_done = step;
    res.final_train_loss = loss_value;
    if (on_step) on_step(step, loss_value);
    if (step % cfg.eval_every == 0 || step == cfg.steps) {
      evaluate(step, grad_norm);
      if (!std::isfinite(res.evals.back().val_loss)) {
        res.status = "diverged";
        res.diverged_step = step;
        res.diverged_reason = "non-finite validation loss";
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
