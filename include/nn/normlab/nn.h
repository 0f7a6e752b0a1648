// Modules: Linear, Norm (LayerNorm / RMSNorm / none), MLP, the toy mixer, causal self-attention
// (+QK-Norm), Block (placement none/pre/post/sandwich/deepnorm) and the two models.
// Model code reads like the formulas: x = x + attn(norm1(x)).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "normlab/nn_kinds.h"
#include "normlab/rng.h"
#include "normlab/tensor.h"

namespace normlab {

struct ModelConfig {
  // toy: prefix-mean mixing + Linear; gpt: causal multi-head attention; encdec: the encoder-decoder
  // of encdec.h (EncDecModel, built from this config by encdec_config)
  ModelKind model = ModelKind::toy;
  NormKind norm = NormKind::layernorm;
  Placement placement = Placement::pre;
  FinalNorm final_norm = FinalNorm::auto_;
  bool qk_norm = false;      // gpt and encdec: RMSNorm over each head's Dh on q and k
  bool head_bias = false;    // a bias on the head (what an exact LayerNorm -> RMSNorm conversion folds beta into)
  bool residual = true;      // false drops the identity path (probe's contrast)
  int64_t layers = 6;
  int64_t d_model = 64;
  int64_t d_hidden = 128;
  int64_t heads = 4;
  int64_t vocab = 64;
  int64_t seq_len = 16;
  InitScheme init = InitScheme::gpt2;  // what each parameter gets: docs/init.md
  double norm_eps = 0;        // 0: the norm's default_eps (kinds.h)
  DType dtype = DType::f32;
  // The variants after the article (docs/variants.md). Each is unset by default, and a config
  // holds it only when set, so every config from before them reads and hashes as it did.
  std::optional<ResidualScale> residual_scale;  // unset: none
  std::optional<double> layerscale_init;        // unset: CaiT's rule by depth (layerscale_value)
  std::optional<int64_t> mix_post_layers;       // mixln: unset = layers / 4 (Mix-LN's 25%)
  std::optional<bool> ln_scaling;               // LayerNorm Scaling: block l's norms times 1/sqrt(l)
  std::optional<double> dyt_alpha;              // DyT's and Derf's alpha at init; unset: 0.5
  std::optional<bool> gemma_norm;               // every norm's gain is 1 + w, w initialised to 0
  std::optional<bool> embed_norm;               // the blocks' norm on the embeddings' sum
  std::optional<bool> tie_embeddings;           // the head's weight is the token embedding (nanoGPT)
  std::optional<bool> bias;                     // false: no linear's bias, no norm's beta (nanoGPT's bias)
  // encdec only: each stack's depth (unset: layers) and one token table for source and target
  // (unset: true).
  std::optional<int64_t> encoder_layers, decoder_layers;
  std::optional<bool> shared_embeddings;

  double eps() const;
  // The norm before the head (none: the head reads the stream). auto: the blocks' norm for pre and
  // sandwich, postsub and mixln, none for post and deepnorm; on: the blocks' norm; layernorm / rmsnorm: that one.
  NormKind final_norm_kind() const;
  bool final_norm_on() const { return final_norm_kind() != NormKind::none; }
  double final_eps() const;  // norm_eps, or the final norm's default
  // DeepNet (Wang et al. 2022), decoder-only with L layers: alpha = (2L)^(1/4), beta = (8L)^(-1/4).
  double deepnorm_alpha() const;
  double deepnorm_beta() const;
  // Whether DeepNet's alpha and init apply: placement deepnorm with a norm. Without a norm every
  // placement is the plain residual x + F(x) (nothing to place), so alpha is 1 and the weights are
  // the init scheme's own.
  bool deepnet() const;
  double residual_alpha() const;  // the alpha of alpha*x + F(x): deepnorm_alpha() where deepnet(), else 1
  ResidualScale residual_scale_kind() const { return residual_scale.value_or(ResidualScale::none); }
  // LayerScale's lambda at init: layerscale_init, or CaiT's rule: 0.1 up to 18 layers, 1e-5 up to
  // 24, 1e-6 beyond.
  double layerscale_value() const;
  int64_t mix_post() const;  // Mix-LN's post-norm blocks: mix_post_layers, or layers / 4
  // Block l's (0-based) placement: mixln's post or pre by l, every other placement as it is.
  Placement block_placement(int64_t l) const;
  bool ln_scaled() const { return ln_scaling.value_or(false); }
  double dyt_alpha_init() const { return dyt_alpha.value_or(0.5); }
  bool gain_offset() const { return gemma_norm.value_or(false); }
  bool embedding_norm() const { return embed_norm.value_or(false); }
  bool tied_head() const { return tie_embeddings.value_or(false); }
  bool biases() const { return bias.value_or(true); }
  bool has_attention() const { return model != ModelKind::toy; }
  void validate() const;  // throws UsageError naming the field
};

// Every parameter of a model, in creation order, with its dotted name.
class ParamList {
 public:
  Tensor add(const std::string& name, Tensor t);  // marks it requires_grad
  const std::vector<Tensor>& all() const { return params_; }
  int64_t count() const;  // number of scalars
  void zero_grad();
  // Moves every parameter into one contiguous buffer (and their gradients into another), so
  // the optimizer makes one pass over all of them. Tensors handed out stay valid. With a
  // device, the buffers live there (the parameters are uploaded once).
  void flatten();
  void flatten(Device device);
  // After backward: zero the (flattened) gradient of each parameter no path reached, so the
  // one-pass optimizer does not read a stale buffer.
  void fill_missing_grads();
  const Tensor& flat() const { return flat_; }
  const Tensor& flat_grad() const { return flat_grad_; }

 private:
  std::vector<Tensor> params_;
  Tensor flat_, flat_grad_;
};

// The sublayers take an optional residual r and return r + f(x), the add fused into their last
// product (see ops.h linear): a pre-norm block is x + f(norm(x)) without a pass for the "+".
struct Linear {
  Tensor w, b;  // w (out, in); b (out) or undefined
  Tensor operator()(const Tensor& x, const Tensor& residual = Tensor()) const;
};

// How a norm is parametrized beyond its kind (make_norm).
struct NormOptions {
  double dyt_alpha = 0.5;    // DyT's and Derf's alpha at init
  bool gain_offset = false;  // Gemma: the gain is 1 + w, w (saved as `.w`) initialised to 0
  double scale = 1.0;        // LayerNorm Scaling: the output times this constant (1/sqrt(l))
  bool beta = true;          // false: no learned shift (the table's "beta"), as nanoGPT's LayerNorm(bias=False)
};

// A norm of any kind: its learned tensors are the norm table's (ops.h, norm_parameters), so that a
// new norm needs no code here.
struct Norm {
  NormKind kind = NormKind::none;
  // norm_parameters(kind)'s, in its order; the gain holds w when gain_offset; undefined where the
  // norm has no beta (NormOptions::beta), which it applies as zeros.
  std::vector<Tensor> params;
  double eps = default_eps(NormKind::layernorm);
  bool gain_offset = false;
  double scale = 1.0;
  // A learned tensor by its name in the norm table ("gamma": the stored w under gain_offset);
  // undefined when the kind has none of that name.
  Tensor param(const std::string& name) const;
  Tensor operator()(const Tensor& x) const;  // identity for none
  // s = skip_alpha*a + b, y = norm(s), one pass per row where a kernel fuses them; returns {s, y}.
  std::pair<Tensor, Tensor> add_norm(const Tensor& a, double skip_alpha, const Tensor& b) const;

 private:
  std::vector<Tensor> applied() const;  // params as the op takes them: 1 + w, zeros for a missing beta
  // The zeros a norm without beta applies, made once where the gain lives (a step then allocates
  // nothing for them, on a device either).
  mutable Tensor zero_beta_;
};

struct MLP {
  Linear fc1, fc2;  // d -> hidden -> d, GELU between
  Tensor operator()(const Tensor& x, const Tensor& residual = Tensor()) const;
};

// The toy model's stand-in for attention: causal prefix mean, then Linear d -> d.
struct PrefixMixer {
  Linear proj;
  Tensor operator()(const Tensor& x, const Tensor& residual = Tensor()) const;
};

// The queries and keys an attention layer used (after QK-Norm), kept for statistics of its
// logits (train's per-layer attention entropy and largest logit).
struct AttentionTap {
  Tensor q, k;  // (B, T, H*Dh)
  int64_t heads = 0;
};

// Multi-head attention with its projections: self-attention (causal, a decoder's; or not, an
// encoder's) and, through attend, cross-attention to another sequence (the encoder's output).
struct SelfAttention {
  Linear q, k, v, o;
  int64_t heads = 1;
  bool causal = true;  // query t sees keys s <= t; false: every key
  bool qk_norm = false;
  Tensor q_gamma, k_gamma;  // (Dh), QK-Norm only (w of 1 + w under gain_offset)
  bool gain_offset = false;
  double qk_eps = default_eps(NormKind::rmsnorm);  // QK-Norm is an RMSNorm
  Tensor operator()(const Tensor& x, const Tensor& residual = Tensor(), AttentionTap* tap = nullptr) const;  // x (B, T, C)
  // Queries from x (B, T, C), keys and values from memory (B, Tk, C); causal needs Tk = T.
  Tensor attend(const Tensor& x, const Tensor& memory, const Tensor& residual = Tensor(),
                AttentionTap* tap = nullptr) const;
};

struct Block {
  bool attention = false;  // gpt: attention; toy: prefix mixer
  PrefixMixer mixer;
  SelfAttention attn;
  MLP mlp;
  Norm norm1, norm2;    // pre/post/deepnorm norms; sandwich: the input norms
  Norm norm1b, norm2b;  // sandwich: the norms on the sublayer outputs
  Placement placement = Placement::pre;
  NormKind norm_kind = NormKind::layernorm;
  bool residual = true;  // false: no "x +" (probe's contrast); the config key of the same name
  double alpha = 1.0;    // DeepNorm's residual scale
  // The learned scale on each sublayer's branch (residual_scale): undefined for none; ReZero's
  // one scalar is both.
  Tensor branch_scale1, branch_scale2;
  // F's output times its branch scale (identity when there is none); sublayer 1 or 2.
  Tensor gate(int sublayer, const Tensor& y) const;
  bool gated() const { return branch_scale1.defined(); }
  // The first sublayer, `stream` added in its last product; `tap` (attention only) receives its
  // queries and keys.
  Tensor mix(const Tensor& x, const Tensor& stream = Tensor(), AttentionTap* tap = nullptr) const;
  Tensor operator()(const Tensor& x) const;  // block_forward(*this, x, Sublayers::live)
};

// How block_forward evaluates a block's sublayers (mixing/attention and MLP):
//   live  as the model runs them: the residual add fused into the sublayer's last product where
//         the placement allows it;
//   held  each sublayer's output computed without a graph, so that d(output)/dx is the Jacobian
//         of the residual additions and norms alone: the identity path of dL/dx that probe
//         reports. Without a skip connection the held output does not depend on x at all.
enum class Sublayers { live, held };
// The one definition of every placement: none `x + F(x)` (norm none), pre `x + F(N(x))`, post
// `N(x + F(x))`, sandwich `x + N2(F(N1(x)))`, deepnorm `N(alpha x + F(x))`, and each without its
// skip connection. The values do not depend on the mode.
Tensor block_forward(const Block& b, const Tensor& x, Sublayers mode, AttentionTap* tap = nullptr);

// What a forward pass can leave behind for probes and per-layer statistics.
struct ForwardTrace {
  bool retain_grads = false;  // keep dL/d(stream) of each block output
  Tensor embed;               // the residual stream entering block 0
  std::vector<Tensor> block_out;  // the residual stream after each block
  Tensor final_out;           // after the final norm (== last block output when off)
  std::vector<AttentionTap> attention;  // each attention block's queries and keys (gpt only)
};

// "blocks.3": block 3's parameter prefix and the ModuleScope its ops run in; block_of_module
// is the inverse (-1 for any other module: embedding, final_norm, head, loss).
std::string block_module_name(size_t block);
int64_t block_of_module(const std::string& module);

class Model {
 public:
  Model(const ModelConfig& cfg, uint64_t seed);
  const ModelConfig& config() const { return cfg_; }
  ParamList& params() { return params_; }
  const std::vector<Block>& blocks() const { return blocks_; }
  // ids (B, T) int32 -> logits (B, T, V)
  Tensor forward(const Tensor& ids, ForwardTrace* trace = nullptr) const;
  Tensor loss(const Tensor& ids, const Tensor& targets, ForwardTrace* trace = nullptr) const;
  // Parameters of block l (for per-layer gradient norms).
  const std::vector<Tensor>& block_params(size_t l) const { return block_params_[l]; }
  const Norm& final_norm() const { return final_norm_; }
  const Linear& head() const { return head_; }

 private:
  ModelConfig cfg_;
  ParamList params_;
  Tensor tok_emb, pos_emb;
  std::vector<Block> blocks_;
  std::vector<std::vector<Tensor>> block_params_;
  Norm embed_norm_;  // embed_norm: the blocks' norm on the embeddings' sum
  Norm final_norm_;
  Linear head_;
  mutable Tensor positions_;  // position ids for the last (B, T), on the parameters' device
};

// Position ids 0..T-1 in each row of ids (B, T), on `device`. `cache` holds the last ones made and
// is reused while the shape and device stay: made and uploaded once, not every step.
const Tensor& position_ids(const Tensor& ids, Device device, Tensor& cache);

// Builders shared by the model and by gradcheck's composites.
struct Init {
  Rng rng;
  DType dtype;
  Tensor normal(const Shape& s, double std);
  Tensor uniform(const Shape& s, double bound);                  // U(-bound, bound)
  Tensor xavier(int64_t fan_out, int64_t fan_in, double gain);  // normal, std = gain*sqrt(2/(in+out))
  Tensor xavier_uniform(int64_t fan_out, int64_t fan_in);       // U(-a, a), a = sqrt(6/(in+out))
  Tensor constant(const Shape& s, double v);
};
Norm make_norm(ParamList& p, const std::string& name, NormKind kind, int64_t d, double eps, Init& init,
               const NormOptions& options = NormOptions());
// A Linear(in -> out) as make_block draws a block's: the init scheme's weight (DeepNet's Xavier
// with gain `xavier_gain` where cfg.deepnet()), GPT-2's 1/sqrt(2L) on a projection into the stream
// (residual_proj), then its bias.
Linear make_block_linear(ParamList& p, const std::string& name, const ModelConfig& cfg, Init& init, int64_t out,
                         int64_t in, bool residual_proj, double xavier_gain);
// An attention layer's projections `prefix`.{q,k,v,o} (and QK-Norm's gains): DeepNet's gain on v
// and o, 1 on q and k. Causal; an encoder sets causal = false.
SelfAttention make_attention(ParamList& p, const std::string& prefix, const ModelConfig& cfg, Init& init, double gain);
// Block l (0-based) of the model `cfg` describes.
Block make_block(ParamList& p, const std::string& prefix, const ModelConfig& cfg, Init& init, int64_t l);
Block make_block(ParamList& p, const std::string& prefix, const ModelConfig& cfg, Init& init);

}  // namespace normlab
