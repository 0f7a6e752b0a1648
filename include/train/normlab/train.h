// Training: data sources, the optimizer and its schedule, the trainer loop with divergence
// detection and per-layer statistics.
#pragma once
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/nn.h"
#include "normlab/rng.h"
#include "normlab/precision.h"
#include "normlab/tensor.h"
#include "normlab/train_kinds.h"

namespace normlab {

// ---- data --------------------------------------------------------------------------
struct Batch {
  // int32 (B, T): a language model's targets are its inputs shifted by one; a sequence-to-sequence
  // task's inputs are the start token and the targets shifted by one (the decoder's input).
  Tensor inputs, targets;
  Tensor sources{};  // int32 (B, S): the encoder's input (sequence-to-sequence tasks only)
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual std::string describe() const = 0;
  virtual int64_t vocab() const = 0;
  virtual Batch train_batch(Rng& rng, int64_t batch, int64_t seq_len) = 0;
  // Held-out batch number i (the same for every call with the same i and seed).
  virtual Batch val_batch(int64_t i, int64_t batch, int64_t seq_len) = 0;
  // Best achievable mean cross-entropy per predicted token, when the rule is known (NaN otherwise).
  virtual double loss_floor(int64_t seq_len) const = 0;
  // Cross-entropy of the unigram distribution of the targets (from the training data).
  virtual double unigram_loss() const = 0;
  // The mean cross-entropy of the Bayes predictor (the one that knows the rule) on this batch's
  // targets; NaN when the rule is not known. A model's loss minus this, on the same tokens, is its
  // excess loss: the noise of which held-out tokens were drawn cancels in the difference.
  virtual double oracle_loss(const Batch& b) const = 0;
};

// The synthetic rule task. Tokens 0..V-K-1 are ordinary, V-K..V-1 are K topic markers.
// A sequence starts with the marker of a topic z (drawn uniformly), then a uniform ordinary
// token; after that each token is pi_z(previous) with probability 1 - noise, else uniform over
// the ordinary tokens (pi_z: a fixed random permutation per topic, drawn from the data seed).
// Predicting token t+1 needs the current token AND the topic marker at position 0: one token of
// context is not enough, so mixing and depth matter. The floor follows from the noise.
struct SyntheticSpec {
  int64_t vocab = 64;
  int64_t topics = 4;
  double noise = 0.1;
  uint64_t seed = 0;
};
std::unique_ptr<DataSource> make_synthetic(const SyntheticSpec& spec);
// Language modelling on a text file, as bytes or characters (text_tokens.h; vocabulary: the
// characters in id order, chars only): the first 90% of its tokens train, the rest validate.
std::unique_ptr<DataSource> make_text(const std::string& path, Tokenizer tokenizer, const std::string& vocabulary,
                                      int64_t seq_len, uint64_t seed);
// The sequence-to-sequence tasks of model encdec. Tokens 0..V-2 are ordinary, V-1 starts the
// decoder's input. A source is seq_len uniform ordinary tokens; its clean target is the source
// (copy), the source reversed (reverse), or each window of 3 source positions reversed and every
// token mapped through a fixed random permutation drawn from the seed (translate); then each
// target token is replaced by a uniform ordinary one with probability `noise`. The floor follows
// from the noise (0 without it).
struct Seq2SeqSpec {
  DataKind task = DataKind::copy;
  int64_t vocab = 64;
  double noise = 0.0;
  uint64_t seed = 0;
};
bool is_seq2seq(DataKind kind);
std::unique_ptr<DataSource> make_seq2seq(const Seq2SeqSpec& spec);
// Text data's vocabulary where the config leaves it unset: tokenizer chars gets the file's
// characters sorted (`vocabulary`) and their count as vocab; bytes gets vocab 256 unless
// vocab_given. Nothing for synthetic data.
struct TrainConfig;
void resolve_text_vocabulary(TrainConfig& cfg, bool vocab_given);
// The data source a config names (its data, vocab, topics, noise, seq_len and seed).
struct TrainConfig;
std::unique_ptr<DataSource> make_data_source(const TrainConfig& cfg);

// Where batches come from: the config key `data`, "synthetic", "text:PATH", or a
// sequence-to-sequence task ("copy", "reverse", "translate").
struct DataSpec {
  DataKind kind = DataKind::synthetic;
  std::string path;  // text only
  std::string str() const;  // "synthetic", "text:PATH", "copy", ...
  static DataSpec parse(const std::string& s);  // UsageError for anything else
};

// ---- loss scaling -------------------------------------------------------------------
// PyTorch's GradScaler (torch.amp.GradScaler, _amp_update_scale_): the loss is multiplied by
// `scale` before the backward, so that small activation gradients stay above fp16's underflow;
// the parameters' gradients are divided by it before clipping and the optimizer. A step whose
// gradients hold an inf or NaN is skipped and the scale multiplied by backoff_factor; after
// growth_interval finite steps in a row it is multiplied by growth_factor. The scale is a
// float32, as PyTorch's.
struct LossScalerSettings {
  double init = 65536.0;  // 2^16
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};
struct LossScalerState {
  double scale = 0;
  int64_t growth_tracker = 0;     // finite steps since the scale last changed
  int64_t skipped = 0;            // steps skipped so far
  int64_t consecutive_skips = 0;  // skipped in a row up to now
};
class LossScaler {
 public:
  explicit LossScaler(const LossScalerSettings& s);
  LossScaler(const LossScalerSettings& s, const LossScalerState& resumed);
  double scale() const { return state_.scale; }
  // After a backward at scale(): whether the step goes ahead (its gradients are finite), and the
  // scale updated as GradScaler.update() does.
  bool update(bool grads_finite);
  const LossScalerState& state() const { return state_; }

 private:
  LossScalerSettings settings_;
  LossScalerState state_;
};
// A scaled run counts as diverged when a step is skipped with the scale below this (2^-16): from
// 2^16 it has backed off by 2^32 and steps still hold an inf or NaN, which no scale fixes (a
// forward that is no longer finite). loss_scale_init may not be below it.
constexpr double kMinLossScale = 1.0 / 65536;

// ---- optimizer ----------------------------------------------------------------------
struct TrainConfig {
  ModelConfig model;
  DataSpec data;
  int64_t topics = 4;              // synthetic only
  double noise = 0.1;              // synthetic only
  // Text only (text_tokens.h): bytes or characters, and the characters in id order (resolved by
  // load_train_config from the text when unset). Written only when set, as data_seed.
  std::optional<Tokenizer> tokenizer;
  std::optional<std::string> vocabulary;
  Tokenizer tokens() const { return tokenizer.value_or(Tokenizer::bytes); }
  OptimizerKind optimizer = OptimizerKind::adamw;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8, weight_decay = 0.0;
  // Unset: all (every parameter, as normlab always did); written only when set, as data_seed.
  std::optional<WeightDecayOn> weight_decay_on;
  int64_t warmup_steps = 0;
  Schedule schedule = Schedule::constant;
  std::optional<double> min_lr;  // cosine's floor (nanoGPT's min_lr); unset: 0. Written only when set.
  double clip = 0.0;                  // global gradient-norm clip; 0 = off
  // Dropout's rate in training (ops.h, DropoutScope): on the embeddings' sum, each sublayer's output
  // and attention's probabilities, as nanoGPT's `dropout`; never at evaluation. Unset: 0. Written
  // only when set.
  std::optional<double> dropout;
  double dropout_rate() const { return dropout.value_or(0.0); }
  int64_t batch_size = 32;
  int64_t steps = 3000;
  int64_t eval_every = 500;
  // 32 x 32 x 16 = 16,384 held-out tokens: the excess loss resolves ~0.002 nats (docs/statistics.md)
  int64_t eval_batches = 32;
  uint64_t seed = 0;  // the model's init and the training batches' order
  // The task: the synthetic rule (its permutations) and the held-out batches, or text's validation
  // windows. Unset: the seed's. Runs that differ only in seed but share data_seed learn the same
  // task and are evaluated on the same tokens.
  std::optional<uint64_t> data_seed;
  uint64_t task_seed() const { return data_seed.value_or(seed); }
  int threads = 0;  // 0 = all cores
  // Low precision (docs/precision.md): activations and their gradients stored in bf16 or fp16,
  // float32 master weights and Adam state (ops.h, StoragePrecisionScope). Unset: fp32, and
  // config.json omits both keys, so every config from before them hashes as it did.
  std::optional<Precision> precision;
  // How a norm runs in that precision: fused / fp32 (float32 statistics, the output stored once;
  // the same arithmetic in this emulation). Only with precision bf16 or fp16.
  std::optional<NormCompute> norm_compute;
  // The residual stream's format in bf16 / fp16 (unset: the activations' format).
  std::optional<ResidualDtype> residual_dtype;
  // Loss scaling (unset: dynamic in fp16, none in bf16 and fp32) and the scaler's settings
  // (unset: GradScaler's defaults); every loss_scale_* key needs loss_scale dynamic.
  std::optional<LossScaling> loss_scale;
  std::optional<double> loss_scale_init, loss_scale_growth_factor, loss_scale_backoff_factor;
  std::optional<int64_t> loss_scale_growth_interval;
  Precision storage() const { return precision.value_or(Precision::fp32); }
  Precision residual_storage() const {
    return residual_dtype == ResidualDtype::fp32 ? Precision::fp32 : storage();
  }
  LossScaling loss_scaling() const {
    return loss_scale.value_or(storage() == Precision::fp16 ? LossScaling::dynamic : LossScaling::none);
  }
  LossScalerSettings loss_scaler_settings() const;
  std::string init_from;  // a safetensors checkpoint the model starts from ("" = its init scheme)
  void validate() const;  // UsageError naming the field

 private:
  void validate_model_for_data() const;
};

// The oracle's mean loss on a config's held-out tokens (what every eval of its runs reports as
// val_oracle_loss); NaN when the rule is not known. The held-out batches are a function of the
// config alone, so runs written before evals reported it get it back from their config.json.
double held_out_oracle_loss(const TrainConfig& cfg);

// lr at a 1-based step: linear warm-up from 0 over warmup_steps, then constant or cosine to min_lr
// (0 unless set) at the last step.
double learning_rate(const TrainConfig& cfg, int64_t step);

// Mean over the rows (tokens) of the per-row L2 norm ||x_t||; x (..., d). The residual-stream
// statistic of train's metrics and of probe.
double mean_token_norm(const Tensor& x);
// ||(dL/dp)_p|| over a set of parameters: the L2 norm of their gradients taken together (those no
// gradient reached count 0). train's grad norms per block and probe's.
double params_grad_norm(const std::vector<Tensor>& params);

// The logits l_ts = q_t . k_s / sqrt(Dh) (s <= t) of one attention layer, over every batch row,
// head and query position: the mean entropy of softmax(l_t.) in nats (log(t+1) for uniform
// attention, 0 for one-hot) and the largest logit. QK-Norm's claim is about these two.
struct AttentionStats {
  double mean_entropy = 0, max_logit = 0;
};
AttentionStats attention_statistics(const AttentionTap& tap);

// ---- the loop ----------------------------------------------------------------------
struct EvalRecord {
  int64_t step = 0;
  double lr = 0, train_loss = 0, val_loss = 0, grad_norm = 0;
  // The resolution of val_loss: its standard error over the eval's batches (sample std of the
  // per-batch means / sqrt(batches); the batches are independent draws). NaN with one batch.
  double val_loss_se = NAN;
  // The oracle's loss on the same held-out tokens (DataSource::oracle_loss), and val_loss minus it
  // with its standard error (from the per-batch differences); NaN when the rule is not known.
  double val_oracle_loss = NAN, excess_loss = NAN, excess_loss_se = NAN;
  std::vector<double> stream_norm;      // mean over tokens of ||x|| after each block (validation batch 0)
  double final_norm_out = 0;            // ||x|| after the final norm
  std::vector<double> block_grad_norm;  // ||dL/dtheta|| of each block's parameters
  // gpt only (validation batch 0), per attention layer: attention_statistics().
  std::vector<double> attn_entropy, attn_max_logit;
  // Low precision only (metrics.jsonl omits them in fp32 runs). The loss scaler's scale after
  // this step (NaN: no scaler) and the steps it has skipped so far.
  double loss_scale = NAN;
  int64_t skipped_steps = 0;
  // Per block, on validation batch 0: max |x| of the residual stream after the block and of the
  // inputs of its norms (inf where one held an inf or NaN; NaN for a block without norms), and the share of the elements its ops stored that overflowed to +-inf
  // or underflowed to zero in the format (values that were finite / nonzero before rounding).
  std::vector<double> stream_max_abs, norm_input_max_abs, overflow_share, underflow_share;
  // timing (not deterministic: kept apart from the other fields)
  double seconds_per_step = 0, tokens_per_second = 0;
};
// Each field of an evaluation record, once: its name and its member. metrics.jsonl's line (run.h,
// eval_to_json_line), the checkpoint's copy of the evals and its reader (checkpoint.h) all walk
// this list, so a new field is one line here.
struct EvalField {
  const char* name;
  double EvalRecord::*number = nullptr;             // a number (NaN: not measured)
  std::vector<double> EvalRecord::*list = nullptr;  // one value per block or attention layer
  int64_t EvalRecord::*count = nullptr;             // a whole number
  // When metrics.jsonl's line has it: always; in a loss-scaled (bf16/fp16) run; when the list has
  // values (low precision's per-block fields, gpt's attention ones); never (timing.jsonl's).
  enum class InMetrics { always, loss_scaled, when_listed, never } in_metrics = InMetrics::always;
  // Checkpoints written before the field existed lack it: read as its default, not an error.
  bool optional_in_state = false;
};
const std::vector<EvalField>& eval_fields();

// The loss table `train` prints as it runs, a line per evaluation (fixed widths: each line is
// printed when its evaluation ends).
std::string loss_table_header();
std::string loss_table_row(const EvalRecord& r);

struct NonFiniteOrigin {
  int64_t step = -1;          // -1: the run never went non-finite
  std::string phase;          // forward | backward
  std::string op, module;     // "linear", "blocks.3" (the op's ModuleScope)
  std::string format;         // what the value was stored in
  // overflow: a finite float32 result beyond the format's largest value, stored as inf;
  // eps_zero: a norm (norm_compute format) whose row had variance 0 while eps rounds to zero;
  // var_underflow: the same with a nonzero variance that underflowed to 0;
  // nonfinite: the float32 arithmetic itself gave an inf or NaN.
  std::string cause;
  double max_abs = NAN;       // the largest finite |value| of that output before it was stored
  std::string str() const;    // one line: "step 312, forward, linear in blocks.3: overflow: ..."
};
struct EpsRounding {
  std::string norm;          // "blocks" (every block norm), "final_norm", "qk_norm"
  double eps = 0, stored = 0;  // as configured, and as the format holds it
  std::string format;
};

// Replays one step (the model as it was when the step diverged, its batch on the model's device) with every stored
// value counted (ops.h, StoreWatchScope): the first op output, or in the backward the first
// gradient, holding an inf or NaN, where and why. Runs in the caller's StoragePrecisionScope.
// `backward_seed`: the backward's seed (the loss scale; 1 without a scaler), when the backward
// is to be searched too. An origin with step -1: nothing found.
class TrainModel;  // train_model.h
NonFiniteOrigin find_nonfinite(TrainModel& model, const Batch& batch, int64_t step, std::optional<double> backward_seed);

// Norms whose eps the arithmetic does not add as configured: rounded to zero, or by more than
// 1%, in the format it is added in (the run's format with norm_compute format, float32
// otherwise). The run goes ahead (it is the experiment); train's CLI warns with the text below.
std::vector<EpsRounding> eps_rounding(const TrainConfig& cfg);
std::string eps_rounding_warning(const EpsRounding& e);

struct TrainResult {
  // ok; diverged (a non-finite loss or gradient, at diverged_step); collapsed (finished, but its
  // validation loss ended within kCollapseMargin of the unigram baseline or above it: it learned
  // nothing, or lost what it learned; collapsed_step is the first eval from which it stayed there).
  std::string status = "ok";
  int64_t diverged_step = -1;
  std::string diverged_reason;
  int64_t collapsed_step = -1;
  int64_t steps_done = 0;
  double final_train_loss = 0, final_val_loss = 0, best_val_loss = 0;
  int64_t best_val_step = 0;
  // Spells of the run at the unigram loss that it left again (a plateau, not a collapse): the first
  // and last eval step of each, in order. A run that ends there is collapsed instead.
  std::vector<std::pair<int64_t, int64_t>> plateaus;
  // Training-loss spikes, judged on every step's loss: steps whose loss exceeds kSpikeFactor times
  // the median of the kSpikeWindow steps before it (none is judged before that many steps).
  int64_t spike_count = 0;
  std::vector<int64_t> spike_steps;  // the first kMaxSpikeSteps of them
  double loss_floor = 0, unigram_loss = 0;
  int64_t parameters = 0;
  double seconds = 0, seconds_per_step = 0, tokens_per_second = 0;
  int threads = 0;  // the thread count the run had (train() restores the caller's afterwards)
  std::vector<EvalRecord> evals;
  // The kernel variants the backend chose for the run's shapes (result.json "kernel_choices"):
  // where variants round differently (cpu: oneDNN's LayerNorm or normlab's), they say which ran.
  std::vector<KernelChoice> kernel_choices;
  // Low precision: the steps the loss scaler skipped and its final scale (NaN: no scaler).
  int64_t skipped_steps = 0;
  double final_loss_scale = NAN;
  // Where a diverged run first went non-finite (empty when it did not), found by replaying the
  // step that diverged with every stored value checked: the op and module whose stored output
  // (or gradient) was the first to hold an inf or NaN, and why.
  NonFiniteOrigin nonfinite;
  // Norms whose eps is not what the arithmetic adds (it rounds to zero, or changes, in the
  // format the norm adds it in): an allowed experiment, recorded and warned about.
  std::vector<EpsRounding> eps_rounding;

  // How far the final validation loss is above the data's floor (result.json "gap_to_floor").
  double gap_to_floor() const { return final_val_loss - loss_floor; }
};
// What `train` prints when a run ends: its status (and why, for diverged and collapsed), the first
// non-finite value, the loss scale, the losses against the baselines, the size and speed, and
// where the run is (`dir`).
std::string train_result_text(const TrainResult& r, const std::string& dir);

// How train counts loss spikes (TrainResult::spike_count).
constexpr double kSpikeFactor = 1.5;
constexpr int64_t kSpikeWindow = 100;
constexpr size_t kMaxSpikeSteps = 100;
// The spikes of a loss sequence (losses[i] is step first_step + i), as TrainResult counts them.
// Non-finite losses are not judged and not counted in later windows.
struct SpikeCount {
  int64_t count = 0;
  std::vector<int64_t> steps;
};
SpikeCount count_spikes(const std::vector<double>& losses, int64_t first_step = 1);
// The counter as the trainer runs it, one step at a time (its state is part of TrainState).
struct SpikeCounter {
  std::vector<double> recent;  // the last kSpikeWindow finite losses, oldest first
  SpikeCount result;
  void add(int64_t step, double loss);
};

// A finished run whose validation loss ends this close to the unigram baseline (nats), or above
// it, has collapsed.
constexpr double kCollapseMargin = 0.05;
// The eval step from which every validation loss is at or above unigram - kCollapseMargin (the run
// ended collapsed), or -1 when the last one is below it.
int64_t collapse_step(const std::vector<EvalRecord>& evals, double unigram_loss);
// The spells at or above unigram - kCollapseMargin that a later eval left (first and last step of
// each): learning that stalled and resumed.
std::vector<std::pair<int64_t, int64_t>> plateau_spells(const std::vector<EvalRecord>& evals, double unigram_loss);

// Called after each eval; the trainer writes nothing itself.
using EvalCallback = std::function<void(const EvalRecord&)>;
using ProgressCallback = std::function<void(int64_t step, double loss)>;

// Everything besides the weights that the loop needs to continue a run exactly where it stopped:
// a run resumed from (weights, TrainState) at step N computes the same numbers, bit for bit, as
// one that never stopped.
struct TrainState {
  int64_t step = 0;       // steps done
  Tensor adam_m, adam_v;  // the optimizer's moments, flat in the order of the parameter buffer
  RngState data_rng;      // where the training batches' stream is
  double train_loss_sum = 0;  // the training losses since the last eval (its train_loss is their mean)
  int64_t train_loss_count = 0;
  std::vector<EvalRecord> evals;  // every eval so far (metrics.jsonl, the best loss, collapse)
  // The spike counter's state: the last kSpikeWindow training losses and what it has counted.
  std::vector<double> recent_losses;
  int64_t spike_count = 0;
  std::vector<int64_t> spike_steps;
  // The loss scaler's state (scale 0: the run has no scaler).
  LossScalerState loss_scaler;
};

// What a caller is told as a run goes. on_checkpoint(step, model, state) is called every
// checkpoint_every steps (0: never), after that step's eval, and once after the last step of a
// finished run.
struct TrainHooks {
  EvalCallback on_eval;
  ProgressCallback on_step;
  std::function<void(int64_t step, TrainModel& model, const TrainState& state)> on_checkpoint;
  int64_t checkpoint_every = 0;
};

// Where a resumed run starts: the weights (a safetensors checkpoint) and the loop's state at
// that step.
struct ResumePoint {
  std::string weights;
  TrainState state;
};

// With `resume`, the run continues from it (steps state.step + 1 ..); on_eval is not called again
// for the evals it already holds.
TrainResult train(const TrainConfig& cfg, const TrainHooks& hooks, const ResumePoint* resume = nullptr);
TrainResult train(const TrainConfig& cfg, const EvalCallback& on_eval = {}, const ProgressCallback& on_step = {});

}  // namespace normlab
