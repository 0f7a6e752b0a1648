// `probe`: signal propagation at initialization, no training. Per layer: the activation norm of
// the residual stream, the gradient norms of each block's parameters and of the stream, before
// and after the final norm, and the split of dL/dx into the residual identity term and the
// sublayer term. Four presets reproduce the textbook pictures (plain stack vs LayerNorm stack,
// Pre-LN stream growth, Xiong et al. 2020's Post-LN vs Pre-LN gradients, the identity share).
//
// Conventions, everywhere in this module:
// - an activation norm is the mean over the B*T token vectors of the per-token L2 norm ||x_t||
//   (compare it with sqrt(d): a unit-variance vector of d entries has norm ~sqrt(d));
// - a gradient norm is the Frobenius norm of the whole gradient tensor (or of all of a block's
//   parameter gradients together); the loss is the mean cross-entropy over the B*T tokens;
// - layers are numbered from 1; layer l's "output" is the stream after block l, x_l; x_0 is
//   the embedding (token + position) entering block 1;
// - every number is measured once per seed (model init and data both from that seed) and
//   reported as mean and sample standard deviation over the seeds (std = 0 for one seed);
//   ratios are formed per seed, then averaged.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/nn.h"
#include "normlab/train.h"

namespace normlab {

// Mean and sample standard deviation (n - 1) over seeds. NaN when undefined (e.g. the cosine
// between two vectors when one of them is zero).
struct Stat {
  double mean = 0, std = 0;
  int64_t n = 0;
};
Stat summarize(const std::vector<double>& values);

struct ProbeOptions {
  int seeds = 3;          // seeds 0..seeds-1 are added to the config's seed
  int64_t batch = 16;     // sequences per probe batch (tokens = batch * seq_len)
  // Threads for the kernels (0 = all cores). Probe tensors are small (a few hundred tokens):
  // one thread is fastest, and is not slowed down by a busy machine. config.threads is ignored.
  int threads = 1;
};

// ---- one configuration, per layer ------------------------------------------------------
struct LayerProbe {
  Stat act_norm;          // mean_t ||x_l,t||, the stream after block l
  Stat growth;            // ||x_l|| / ||x_{l-1}|| (per seed, then averaged)
  Stat stream_grad_norm;  // ||dL/dx_l||_F, the gradient of the stream after block l
  Stat input_grad_norm;   // ||dL/dx_{l-1}||_F, the gradient of the stream entering block l
  Stat block_grad_norm;   // ||dL/dtheta_l||_F over all of block l's parameters
  Stat fc2_grad_norm;     // ||dL/dW_fc2||_F of block l's second MLP weight (Xiong's W^{2,l})
  // dL/dx_{l-1} = identity term + F term. Identity term: the gradient through the residual
  // additions alone, every sublayer output held constant (= dL/dx_l for pre/sandwich/none;
  // through the norms' Jacobians for post/deepnorm; zero when residual = false). F term: the
  // rest, i.e. every path through at least one sublayer. Both exact, from autograd.
  Stat identity_norm;   // ||identity term||_F
  Stat f_norm;          // ||F term||_F
  Stat identity_share;  // ||identity|| / (||identity|| + ||F||)
  Stat cosine;          // cos(identity term, F term); NaN when one of them is zero
};

struct ConfigProbe {
  std::string label;    // e.g. "gpt post-layernorm L=12 xavier"
  TrainConfig config;   // the resolved config (config.seed is the first seed)
  double sqrt_d = 0;    // sqrt(d_model), the norm of a unit-variance token vector
  bool final_norm_on = false;
  Stat loss;            // cross-entropy at init (log V for a uniform prediction)
  Stat embed_norm;      // mean_t ||x_0,t||
  Stat embed_grad_norm; // ||dL/dx_0||_F
  std::vector<LayerProbe> layers;  // layers[l-1] is layer l
  // Around the final norm (before = the last block's output; after = the head's input; equal
  // when the final norm is off).
  Stat final_in_norm, final_out_norm;
  Stat final_in_grad_norm, final_out_grad_norm;
  // Last layer over first layer, per seed then averaged: the Post-LN vs Pre-LN picture.
  Stat fc2_last_over_first, block_last_over_first;
  // ||x_L|| / ||x_0||: how much the stream grew over the whole depth.
  Stat stream_last_over_embed;
};

// UsageError for a config `probe config` cannot probe (model encdec: its probe is
// `probe xiong2020 --model encdec`); checked before the config's own validation, so that it is the
// first thing said.
void check_probeable(const TrainConfig& config);
// Probes one config: seeds config.seed .. config.seed + seeds - 1; batches from the config's
// data source (synthetic rule task or text), `batch` sequences of seq_len tokens.
ConfigProbe probe_config(const TrainConfig& config, const ProbeOptions& opt, const std::string& label = "");

// ---- preset 1: plain linear stack vs the same stack with LayerNorm ------------------------
// x_0 ~ N(0, 1) of shape (N, d), N = batch * seq_len tokens; x_l = act(W_l x_{l-1}) (plain) or
// x_l = LayerNorm(act(W_l x_{l-1})) (gamma 1, beta 0); W_l (d, d) ~ N(0, (gain/sqrt(d))^2), no
// bias. act is the identity ("linear", the default: E||W x||^2 = gain^2 ||x||^2, so the plain
// stack's norm goes as gain^l) or "gelu". Gradients: dL/dx_L = r / N with r ~ N(0, 1), i.e. the
// loss is the mean over tokens of a random linear read-out of the last layer.
// What sits between a plain stack's layers.
enum class Activation { linear, gelu };
template <>
const EnumNames& enum_names<Activation>();

struct PlainStackOptions {
  int64_t layers = 20;
  int64_t d = 64;
  int64_t seq_len = 16;
  std::vector<double> gains = {0.5, 1.0, 2.0};
  Activation activation = Activation::linear;
};

struct StackProbe {
  std::string label;   // "plain gain=0.5", "layernorm gain=0.5"
  double gain = 1;
  bool layernorm = false;
  std::vector<Stat> act_norm;         // [0] the input, [l] after layer l (layers + 1 entries)
  std::vector<Stat> weight_grad_norm; // [l-1]: ||dL/dW_l||_F
  std::vector<Stat> input_grad_norm;  // [l-1]: ||dL/dx_{l-1}||_F
  Stat last_over_input;               // ||x_L|| / ||x_0||
  double expected_last_over_input = 0;  // plain linear: gain^L; layernorm: ~1; gelu: NaN
};

struct PlainStackResult {
  PlainStackOptions options;
  int64_t tokens = 0;
  double sqrt_d = 0;
  std::vector<StackProbe> stacks;  // plain for each gain, then layernorm for each gain
  // Largest relative deviation |act_norm / sqrt(d) - 1| over layers 1..L of the LayerNorm stacks.
  double layernorm_max_rel_dev = 0;
};
PlainStackResult probe_plain_stack(const PlainStackOptions& stack, const ProbeOptions& opt);

// ---- preset 2: the Pre-LN residual stream grows; the final norm brings it back -------------
// gpt, pre, layernorm, 12 layers; once with init gpt2 and once with xavier.
struct PrelnGrowthResult {
  std::vector<ConfigProbe> runs;
};
PrelnGrowthResult probe_preln_growth(const ProbeOptions& opt, int64_t layers = 12);

// ---- preset 3: Xiong et al. 2020, Figure 3 / Theorem 1 -----------------------------------
// gpt, layernorm, init xavier; Post-LN and Pre-LN at each depth. Xiong et al.: at init the
// gradient norm of W^{2,l} grows with l for Post-LN and is roughly flat for Pre-LN; for the last
// layer, Post-LN's is O(d sqrt(ln d)) whatever the depth, Pre-LN's O(d sqrt(ln d / L)).
struct XiongRun {
  Placement placement = Placement::post;
  int64_t layers = 0;
  ConfigProbe probe;
};

struct XiongResult {
  std::vector<int64_t> depths;
  std::vector<XiongRun> runs;  // for each depth: post, then pre
  // The claims, checked against the measurement (fc2 weight gradients, per-seed means).
  bool post_grows = false;       // Post-LN: last/first > 2 at every depth
  bool pre_flat = false;         // Pre-LN: last/first within [1/2, 2] at every depth
  bool post_above_pre = false;   // at every depth, Post-LN's last/first > Pre-LN's
  // Theorem 1, last layer's ||dL/dW_fc2|| at the deepest depth over the shallowest, against
  // the predicted 1 (Post-LN) and sqrt(L_min / L_max) (Pre-LN).
  double post_last_depth_ratio = 0, pre_last_depth_ratio = 0, pre_predicted_depth_ratio = 0;
  std::string verdict;  // one paragraph: what was measured against what the paper claims
};
XiongResult probe_xiong(const ProbeOptions& opt, const std::vector<int64_t>& depths = {6, 12, 24});

// Xiong et al. 2020, Fig. 3 at the paper's own setting: the encoder-decoder Transformer (d_model
// 512, FFN 1024, 4 heads, Xavier init, N encoder and N decoder layers), gradients at init of the
// mean cross-entropy of a batch of the copy task (random source tokens; the target is the source,
// shifted right behind token 0). Per depth N and placement (Post-LN, Pre-LN): ||dL/dW2|| of each
// FFN layer of both stacks, and per stack the last/first ratio (per seed, then averaged).
struct XiongEncDecRun {
  Placement placement = Placement::post;
  int64_t layers = 0;  // per stack
  Stat loss;
  std::vector<Stat> encoder_fc2, decoder_fc2;  // layer 1 .. N
  Stat encoder_ratio, decoder_ratio;           // last layer's / first layer's
};
struct XiongEncDecResult {
  int64_t d_model = 512, d_hidden = 1024, heads = 4, vocab = 1000, seq_len = 16;
  std::vector<int64_t> depths;
  std::vector<XiongEncDecRun> runs;  // for each depth: post, then pre
  // Theorem 1 for each stack and placement: the last layer's ||dL/dW2|| at each depth over the
  // shallowest depth's, against ~1 (Post-LN) and sqrt(N_min / N) (Pre-LN).
  std::string verdict;  // the claims of Fig. 3 and Theorem 1 against the measurement, per stack
};
XiongEncDecResult probe_xiong_encdec(const ProbeOptions& opt, const std::vector<int64_t>& depths);

// What moves Xiong's ratio: the fc2 last/first ratio of Post-LN and Pre-LN for every init scheme
// (embedding scale and head init come with it: docs/init.md), model width (d_hidden = 2d,
// heads = d/16) and depth. The summary names the spread each factor causes, measured.
struct XiongFactorRow {
  InitScheme init = InitScheme::xavier;
  int64_t d_model = 0, layers = 0;
  Stat post, pre;  // fc2 last/first, over seeds
};
struct XiongFactors {
  std::vector<XiongFactorRow> rows;
  std::string summary;
};
XiongFactors probe_xiong_factors(const ProbeOptions& opt, const std::vector<InitScheme>& inits,
                                 const std::vector<int64_t>& widths, const std::vector<int64_t>& depths);

// ---- preset 4: the identity term's share of dL/dx, with and without the residual ------------
// gpt, layernorm, init xavier, 12 layers: pre and post, residual on and off.
struct IdentityShareResult {
  std::vector<ConfigProbe> runs;
};
IdentityShareResult probe_identity_share(const ProbeOptions& opt, int64_t layers = 12);

// ---- JSON ---------------------------------------------------------------------------------
// Every preset that ran (null pointers are skipped), as one document; Stats as {mean, std}.
// ---- batchnorm: why not BatchNorm in a Transformer --------------------------------------------
// Token vectors are the toy model's embeddings under init torch (token + position, N(0, 1) each,
// d = 64) of synthetic batches of 16 tokens. BatchNorm here is a forward-only reference
// computation (per channel over the batch's positions, biased variance, eps 1e-5, gain 1, bias 0);
// LayerNorm and RMSNorm are normlab's ops on the same vectors. Every "change" is the mean over the
// affected tokens and channels of |y_a - y_b| (the outputs are unit-scale).
struct BatchDependence {
  int64_t batch = 0;
  Stat bn_companions;  // the target sequence's BN output, batch-mates replaced by others
  Stat bn_alone;       // ... against normalizing the target sequence alone (batch 1)
  Stat ln_companions, rms_companions;  // the same for LayerNorm and RMSNorm: exactly 0
};
struct RunningGap {
  int64_t batches = 0;  // training batches the running statistics (momentum 0.1) were updated on
  Stat gap;             // BN with batch statistics vs with the running statistics, on a fresh batch
};
struct BatchNormProbeResult {
  int64_t d = 0, seq_len = 0, batch = 0;
  // Variable-length sequences (lengths uniform in [4, 16]) padded with token 0 to 16.
  Stat pad_fraction;       // of the positions
  Stat pad_mean_shift;     // mean over channels |mean with pads - mean without|
  Stat pad_var_ratio;      // mean over channels var with pads / var without
  Stat pad_output_change;  // the real tokens' BN output, pads counted vs not
  std::vector<BatchDependence> dependence;  // batch 32 and 8
  std::vector<RunningGap> train_vs_eval;    // after 1, 10 and 100 batches
  // Causal leakage: statistics over whole sequences; the last token of one sequence replaced.
  Stat bn_leak, ln_leak, rms_leak;  // change of that sequence's earlier positions
};
BatchNormProbeResult probe_batchnorm(const ProbeOptions& opt);

struct ProbeReport {
  std::string preset;  // plain-stack | preln-growth | xiong2020 | identity-share | all | config
  ProbeOptions options;
  const PlainStackResult* plain_stack = nullptr;
  const PrelnGrowthResult* preln_growth = nullptr;
  const XiongResult* xiong = nullptr;
  const IdentityShareResult* identity_share = nullptr;
  const ConfigProbe* config = nullptr;
  const BatchNormProbeResult* batchnorm = nullptr;
  const XiongFactors* xiong_factors = nullptr;
  const XiongEncDecResult* xiong_encdec = nullptr;
};
std::string probe_report_json(const ProbeReport& report);
// The same report as text for a person: each preset's tables and notes, sections apart.
std::string probe_report_text(const ProbeReport& report);

// The preset names `probe` accepts, in the order `all` runs them (config excluded).
const std::vector<std::string>& probe_presets();

// ---- a preset's run, as `normlab probe PRESET` runs it ---------------------------------------
struct ProbeRequest {
  std::string preset = "config";  // a probe_presets() name, "all" or "config"
  ProbeOptions options;
  TrainConfig config;                            // config: the model probed
  std::vector<int64_t> depths = {6, 12, 24};     // xiong2020
  std::vector<InitScheme> inits;                 // xiong2020: with inits or widths, the factor table too
  std::vector<int64_t> widths;                   //   (xavier and width 64 when one of them is empty)
  bool encdec = false;                           // xiong2020: the encoder-decoder at the paper's setting
  std::vector<double> gains = {0.5, 1.0, 2.0};   // plain-stack
  Activation activation = Activation::linear;    // plain-stack
};
// Every result the preset (or all of them) produced, and the report that points into them: it is
// filled in place and never copied.
struct ProbeResults {
  ProbeResults() = default;
  ProbeResults(const ProbeResults&) = delete;
  ProbeResults& operator=(const ProbeResults&) = delete;
  ConfigProbe config;
  PlainStackResult plain_stack;
  PrelnGrowthResult preln_growth;
  XiongResult xiong;
  XiongFactors xiong_factors;
  XiongEncDecResult xiong_encdec;
  IdentityShareResult identity_share;
  BatchNormProbeResult batchnorm;
  ProbeReport report;
};
// UsageError unless `preset` is a probe_presets() name, "all" or "config".
void check_probe_preset(const std::string& preset);
// Runs req.preset's probes into `out` (UsageError for an unknown preset).
void run_probe_preset(const ProbeRequest& req, ProbeResults& out);
// The per-layer probes a preset has (config, xiong2020, identity-share): what `--plot` draws.
std::vector<const ConfigProbe*> per_layer_probes(const ProbeReport& report);

}  // namespace normlab
