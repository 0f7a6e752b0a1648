// Modules and the two models (toy and gpt). Only ops are called here: no loops over data.
#include <cmath>

#include "normlab/autograd.h"
#include "normlab/encdec.h"
#include "normlab/nn.h"
#include "normlab/ops.h"

namespace normlab {

// ---- config ---------------------------------------------------------------------

double ModelConfig::eps() const {
  if (norm_eps > 0) return norm_eps;
  // No norm uses no eps; such a model has always reported LayerNorm's (probe's JSON).
  return default_eps(norm == NormKind::none ? NormKind::layernorm : norm);
}

NormKind ModelConfig::final_norm_kind() const {
  switch (final_norm) {
    case FinalNorm::off: return NormKind::none;
    case FinalNorm::on: return norm;
    case FinalNorm::layernorm: return NormKind::layernorm;
    case FinalNorm::rmsnorm: return NormKind::rmsnorm;
    case FinalNorm::auto_: break;
  }
  return placement == Placement::post || placement == Placement::deepnorm ? NormKind::none : norm;
}

double ModelConfig::final_eps() const {
  if (norm_eps > 0) return norm_eps;
  const NormKind k = final_norm_kind();
  return default_eps(k == NormKind::none ? NormKind::layernorm : k);
}

double ModelConfig::deepnorm_alpha() const { return std::pow(2.0 * static_cast<double>(layers), 0.25); }
double ModelConfig::deepnorm_beta() const { return std::pow(8.0 * static_cast<double>(layers), -0.25); }
bool ModelConfig::deepnet() const { return placement == Placement::deepnorm && norm != NormKind::none; }
double ModelConfig::residual_alpha() const { return deepnet() ? deepnorm_alpha() : 1.0; }

double ModelConfig::layerscale_value() const {
  if (layerscale_init) return *layerscale_init;
  return layers <= 18 ? 0.1 : layers <= 24 ? 1e-5 : 1e-6;
}

int64_t ModelConfig::mix_post() const { return mix_post_layers.value_or(layers / 4); }

Placement ModelConfig::block_placement(int64_t l) const {
  if (placement != Placement::mixln) return placement;
  return l < mix_post() ? Placement::post : Placement::pre;
}

void ModelConfig::validate() const {
  NL_USAGE(layers >= 1, "layers must be >= 1, got {}", layers);
  NL_USAGE(d_model >= 1, "d_model must be >= 1, got {}", d_model);
  NL_USAGE(d_hidden >= 1, "d_hidden must be >= 1, got {}", d_hidden);
  NL_USAGE(vocab >= 2, "vocab must be >= 2, got {}", vocab);
  NL_USAGE(seq_len >= 2, "seq_len must be >= 2, got {}", seq_len);
  NL_USAGE(norm_eps >= 0, "norm_eps must be > 0 (or 0 for the norm's default), got {}", norm_eps);
  if (has_attention()) {
    NL_USAGE(heads >= 1 && d_model % heads == 0, "heads = {} does not divide d_model = {}", heads, d_model);
  }
  NL_USAGE(!(qk_norm && !has_attention()), "qk_norm needs model gpt or encdec (the toy model has no queries or keys)");
  for (const auto& [key, set] : {std::pair<const char*, bool>{"encoder_layers", encoder_layers.has_value()},
                                 {"decoder_layers", decoder_layers.has_value()},
                                 {"shared_embeddings", shared_embeddings.has_value()}})
    NL_USAGE(!set || model == ModelKind::encdec, "{} is a key of model encdec, and model is {}", key, to_string(model));
  if (model == ModelKind::encdec) encdec_config(*this).validate();  // the encoder-decoder's own limits
  NL_USAGE(!(final_norm == FinalNorm::on && norm == NormKind::none),
           "final_norm on is the blocks' norm and norm is none: say final_norm layernorm or rmsnorm for a final norm "
           "alone");
  // The variants: each combination that would not mean what it says is refused (docs/variants.md).
  const ResidualScale rs = residual_scale_kind();
  NL_USAGE(!(rs == ResidualScale::rezero && norm != NormKind::none),
           "residual_scale rezero is x + a F(x) without a norm, and norm is {}: set norm none, or use skipinit for a "
           "scalar gate beside a norm",
           to_string(norm));
  NL_USAGE(!(rs != ResidualScale::none && placement == Placement::deepnorm && norm != NormKind::none),
           "residual_scale {} with placement deepnorm: DeepNet already scales the residual (alpha) and the branch "
           "(its init); use one of them",
           to_string(rs));
  NL_USAGE(!(rs != ResidualScale::none && !residual),
           "residual_scale {} scales the branch added to the skip connection, and residual is false", to_string(rs));
  NL_USAGE(!(layerscale_init && rs != ResidualScale::layerscale),
           "layerscale_init is set but residual_scale is {}, not layerscale", to_string(rs));
  if (layerscale_init)
    NL_USAGE(*layerscale_init > 0 && *layerscale_init <= 1e6, "layerscale_init must be in (0, 1e6], got {}",
             *layerscale_init);
  NL_USAGE(!(mix_post_layers && placement != Placement::mixln),
           "mix_post_layers is set but placement is {}, not mixln", to_string(placement));
  if (mix_post_layers)
    NL_USAGE(*mix_post_layers >= 0 && *mix_post_layers <= layers,
             "mix_post_layers = {} must be between 0 and layers = {}", *mix_post_layers, layers);
  if (ln_scaled()) {
    NL_USAGE(placement == Placement::pre && norm != NormKind::none,
             "ln_scaling scales the Pre-LN norms' outputs: it needs placement pre and a norm (got {} with norm {})",
             to_string(placement), to_string(norm));
  }
  const bool squash = norm == NormKind::dyt || norm == NormKind::derf;
  NL_USAGE(!(dyt_alpha && !squash), "dyt_alpha is the alpha of DyT and Derf, and norm is {}", to_string(norm));
  if (dyt_alpha)
    NL_USAGE(*dyt_alpha > 0 && *dyt_alpha <= 1e6, "dyt_alpha must be in (0, 1e6], got {}", *dyt_alpha);
  NL_USAGE(!(norm_eps > 0 && squash && final_norm_kind() != NormKind::layernorm && final_norm_kind() != NormKind::rmsnorm),
           "norm_eps is set, and norm {} has no eps (nor has the final norm)", to_string(norm));
  if (gain_offset()) {
    NL_USAGE(norm == NormKind::rmsnorm || norm == NormKind::layernorm,
             "gemma_norm is Gemma's parametrization of a norm's gain (1 + w): it needs norm rmsnorm or layernorm, got {}",
             to_string(norm));
  }
  NL_USAGE(!(embedding_norm() && norm == NormKind::none), "embed_norm puts the blocks' norm on the embeddings, and norm is none");
}

// ---- parameters -----------------------------------------------------------------

Tensor ParamList::add(const std::string& name, Tensor t) {
  t.requires_grad_(true);
  t.set_name(name);
  params_.push_back(t);
  return t;
}

int64_t ParamList::count() const {
  int64_t n = 0;
  for (const Tensor& p : params_) n += p.numel();
  return n;
}

void ParamList::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

void ParamList::flatten() {
  FlatLeaves flat = flatten_leaves(params_);
  flat_ = flat.values;
  flat_grad_ = flat.grads;
}

void ParamList::flatten(Device device) {
  FlatLeaves flat = flatten_leaves(params_, device);
  flat_ = flat.values;
  flat_grad_ = flat.grads;
}

void ParamList::fill_missing_grads() { zero_unreached_grads(params_); }

// ---- init -----------------------------------------------------------------------

Tensor Init::normal(const Shape& s, double std) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (double& x : v) x = rng.normal(0.0, std);
  return Tensor::from(v, s, dtype);
}

Tensor Init::xavier(int64_t fan_out, int64_t fan_in, double gain) {
  return normal({fan_out, fan_in}, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

Tensor Init::uniform(const Shape& s, double bound) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (double& x : v) x = rng.uniform(-bound, bound);
  return Tensor::from(v, s, dtype);
}

Tensor Init::xavier_uniform(int64_t fan_out, int64_t fan_in) {
  return uniform({fan_out, fan_in}, std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
}

Tensor Init::constant(const Shape& s, double v) { return Tensor::from(std::vector<double>(shape_numel(s), v), s, dtype); }

namespace {

double initial_value(const NormParameter& q, const NormOptions& options) {
  switch (q.init) {
    case NormParameter::Init::one: return 1.0;
    case NormParameter::Init::zero: return 0.0;
    case NormParameter::Init::squash_alpha: return options.dyt_alpha;
  }
  return 0.0;
}

}  // namespace

Norm make_norm(ParamList& p, const std::string& name, NormKind kind, int64_t d, double eps, Init& init,
               const NormOptions& options) {
  Norm n;
  n.kind = kind;
  n.eps = eps;
  n.scale = options.scale;
  n.gain_offset = options.gain_offset;
  for (const NormParameter& q : norm_parameters(kind)) {
    const bool w = options.gain_offset && q.is_gain();  // Gemma's gain 1 + w, w saved and starting at 0
    if (!options.beta && std::string(q.name) == "beta") {
      n.params.emplace_back();  // applied as zeros (Norm::applied); no parameter, no checkpoint entry
      continue;
    }
    const std::string saved = w ? "w" : q.name;
    n.params.push_back(p.add(name + "." + saved, init.constant({q.per_channel ? d : 1}, w ? 0.0 : initial_value(q, options))));
  }
  return n;
}

namespace {

// A Linear(in -> out) with weight w (drawn by the caller, first) and a bias drawn after it, as
// PyTorch's reset_parameters does: U(-1/sqrt(in), 1/sqrt(in)) under the torch scheme, else zeros.
Linear make_linear(ParamList& p, const std::string& name, int64_t out, int64_t in, Tensor w, InitScheme scheme,
                   Init& init, bool bias) {
  Linear l;
  l.w = p.add(name + ".w", std::move(w));
  if (!bias) return l;
  l.b = p.add(name + ".b", scheme == InitScheme::torch ? init.uniform({out}, 1.0 / std::sqrt(static_cast<double>(in)))
                                                       : init.constant({out}, 0.0));
  return l;
}

}  // namespace

Block make_block(ParamList& p, const std::string& prefix, const ModelConfig& cfg, Init& init) {
  return make_block(p, prefix, cfg, init, 0);
}

Linear make_block_linear(ParamList& p, const std::string& name, const ModelConfig& cfg, Init& init, int64_t out,
                         int64_t in, bool residual_proj, double xavier_gain) {
  // DeepNet's own init wins under every scheme: Xavier (normal) with gain beta on the MLP and the
  // value/output (mixing) projections, gain 1 on queries and keys.
  const InitScheme scheme = cfg.deepnet() ? InitScheme::xavier : cfg.init;
  // GPT-2 scales the projections that write into the residual stream by 1/sqrt(2L); LayerNorm
  // Scaling's paper drops that scaled init, and so does normlab with ln_scaling (docs/variants.md).
  const double resid_std = cfg.ln_scaled() ? 0.02 : 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.layers));
  Tensor w;
  switch (scheme) {
    case InitScheme::xavier: w = init.xavier(out, in, xavier_gain); break;
    case InitScheme::torch: w = init.uniform({out, in}, 1.0 / std::sqrt(static_cast<double>(in))); break;
    case InitScheme::fairseq: w = init.xavier_uniform(out, in); break;
    case InitScheme::gpt2: w = init.normal({out, in}, residual_proj ? resid_std : 0.02); break;
  }
  return make_linear(p, name, out, in, std::move(w), scheme, init, cfg.biases());
}

SelfAttention make_attention(ParamList& p, const std::string& prefix, const ModelConfig& cfg, Init& init, double gain) {
  const int64_t d = cfg.d_model;
  SelfAttention a;
  a.heads = cfg.heads;
  a.q = make_block_linear(p, prefix + ".q", cfg, init, d, d, false, 1.0);
  a.k = make_block_linear(p, prefix + ".k", cfg, init, d, d, false, 1.0);
  a.v = make_block_linear(p, prefix + ".v", cfg, init, d, d, false, gain);
  a.o = make_block_linear(p, prefix + ".o", cfg, init, d, d, true, gain);
  a.qk_norm = cfg.qk_norm;
  a.gain_offset = cfg.gain_offset();
  if (cfg.qk_norm) {
    const int64_t dh = d / cfg.heads;
    const char* gain_name = cfg.gain_offset() ? ".w" : ".gamma";
    const double gain_init = cfg.gain_offset() ? 0.0 : 1.0;
    a.q_gamma = p.add(prefix + ".q_norm" + gain_name, init.constant({dh}, gain_init));
    a.k_gamma = p.add(prefix + ".k_norm" + gain_name, init.constant({dh}, gain_init));
  }
  return a;
}

Block make_block(ParamList& p, const std::string& prefix, const ModelConfig& cfg, Init& init, int64_t l) {
  const int64_t d = cfg.d_model, h = cfg.d_hidden;
  const double gain = cfg.deepnet() ? cfg.deepnorm_beta() : 1.0;
  auto linear_of = [&](const std::string& name, int64_t out, int64_t in, bool residual_proj, double xavier_gain) {
    return make_block_linear(p, name, cfg, init, out, in, residual_proj, xavier_gain);
  };

  Block b;
  b.placement = cfg.block_placement(l);
  b.norm_kind = cfg.norm;
  b.residual = cfg.residual;
  b.alpha = cfg.residual_alpha();
  b.attention = cfg.has_attention();
  const NormKind nk = cfg.norm;
  NormOptions opts;
  opts.dyt_alpha = cfg.dyt_alpha_init();
  opts.gain_offset = cfg.gain_offset();
  opts.beta = cfg.biases();
  // LayerNorm Scaling (1-based layer index l + 1).
  if (cfg.ln_scaled()) opts.scale = 1.0 / std::sqrt(static_cast<double>(l + 1));
  b.norm1 = make_norm(p, prefix + ".norm1", nk, d, cfg.eps(), init, opts);
  if (b.attention) {
    b.attn = make_attention(p, prefix + ".attn", cfg, init, gain);
  } else {
    b.mixer.proj = linear_of(prefix + ".mix", d, d, true, gain);
  }
  if (b.placement == Placement::sandwich) b.norm1b = make_norm(p, prefix + ".norm1b", nk, d, cfg.eps(), init, opts);
  b.norm2 = make_norm(p, prefix + ".norm2", nk, d, cfg.eps(), init, opts);
  b.mlp.fc1 = linear_of(prefix + ".mlp.fc1", h, d, false, gain);
  b.mlp.fc2 = linear_of(prefix + ".mlp.fc2", d, h, true, gain);
  if (b.placement == Placement::sandwich) b.norm2b = make_norm(p, prefix + ".norm2b", nk, d, cfg.eps(), init, opts);
  // The branch scales last, so that every other parameter draws what it drew before them.
  switch (cfg.residual_scale_kind()) {
    case ResidualScale::none: break;
    case ResidualScale::rezero:
      b.branch_scale1 = b.branch_scale2 = p.add(prefix + ".rezero.alpha", init.constant({1}, 0.0));
      break;
    case ResidualScale::skipinit:
      b.branch_scale1 = p.add(prefix + ".skip1.alpha", init.constant({1}, 0.0));
      b.branch_scale2 = p.add(prefix + ".skip2.alpha", init.constant({1}, 0.0));
      break;
    case ResidualScale::layerscale:
      b.branch_scale1 = p.add(prefix + ".ls1.lambda", init.constant({d}, cfg.layerscale_value()));
      b.branch_scale2 = p.add(prefix + ".ls2.lambda", init.constant({d}, cfg.layerscale_value()));
      break;
  }
  return b;
}

// ---- forward ----------------------------------------------------------------------

Tensor Linear::operator()(const Tensor& x, const Tensor& residual) const { return linear(x, w, b, residual); }

Tensor Norm::param(const std::string& name) const {
  const std::vector<NormParameter>& names = norm_parameters(kind);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].name == name) return params.at(i);
  return Tensor();
}

std::vector<Tensor> Norm::applied() const {
  const std::vector<NormParameter>& names = norm_parameters(kind);
  NL_CHECK(params.size() == names.size(), "{}: {} learned tensors, the norm takes {}", to_string(kind), params.size(),
           names.size());
  std::vector<Tensor> out = params;
  const Tensor& gain = param("gamma");
  for (size_t i = 0; i < out.size(); ++i) {
    if (gain_offset && names[i].is_gain()) out[i] = add_constant(out[i], 1.0);
    // A missing beta: zeros where the gain lives (its device and dtype), y = gain * xhat + 0.
    if (!out[i].defined()) {
      if (!zero_beta_.defined() || zero_beta_.device() != gain.device() || zero_beta_.dtype() != gain.dtype())
        zero_beta_ = Tensor::zeros(gain.shape(), gain.dtype(), gain.device());
      out[i] = zero_beta_;
    }
  }
  return out;
}

Tensor Norm::operator()(const Tensor& x) const {
  if (kind == NormKind::none) return x;
  const Tensor y = apply_norm(kind, x, applied(), eps);
  return scale == 1.0 ? y : normlab::scale(y, scale);
}

std::pair<Tensor, Tensor> Norm::add_norm(const Tensor& a, double skip_alpha, const Tensor& b) const {
  const bool plain = !gain_offset && scale == 1.0;
  if (plain && kind == NormKind::layernorm) {
    const std::vector<Tensor> p = applied();
    return add_layernorm(a, skip_alpha, b, p[0], p[1], eps);
  }
  if (plain && kind == NormKind::rmsnorm) return add_rmsnorm(a, skip_alpha, b, param("gamma"), eps);
  Tensor s = add_scaled(a, skip_alpha, b);
  return {s, (*this)(s)};
}

namespace {

// residual + dropout(y) for a sublayer's output y while dropout is on (training under a
// DropoutScope): nanoGPT's resid_dropout, the Transformer's "dropout to the output of each
// sub-layer, before it is added to the sub-layer input". The add is then an op of its own, not
// the last product's epilogue.
Tensor dropped_branch(const Tensor& y, const Tensor& residual) {
  const Tensor d = dropout(y);
  return residual.defined() ? residual + d : d;
}

}  // namespace

Tensor MLP::operator()(const Tensor& x, const Tensor& residual) const {
  if (dropout_active()) return dropped_branch(gelu_linear(fc1(x), fc2.w, fc2.b), residual);
  return gelu_linear(fc1(x), fc2.w, fc2.b, residual);
}

Tensor PrefixMixer::operator()(const Tensor& x, const Tensor& residual) const {
  if (dropout_active()) return dropped_branch(proj(prefix_mean(x)), residual);
  return proj(prefix_mean(x), residual);
}

Tensor SelfAttention::operator()(const Tensor& x, const Tensor& residual, AttentionTap* tap) const {
  return attend(x, x, residual, tap);
}

Tensor SelfAttention::attend(const Tensor& x, const Tensor& memory, const Tensor& residual, AttentionTap* tap) const {
  Tensor qx = q(x), kx = k(memory), vx = v(memory);
  if (qk_norm) {
    // QK-Norm: RMSNorm over each head's Dh channels; (B, T, H*Dh) viewed as rows of Dh.
    const int64_t dh = q_gamma.size(0);
    const Tensor qg = gain_offset ? add_constant(q_gamma, 1.0) : q_gamma;
    const Tensor kg = gain_offset ? add_constant(k_gamma, 1.0) : k_gamma;
    qx = reshape(rmsnorm(reshape(qx, {-1, dh}), qg, qk_eps), qx.shape());
    kx = reshape(rmsnorm(reshape(kx, {-1, dh}), kg, qk_eps), kx.shape());
  }
  if (tap) *tap = {qx, kx, heads};
  const Tensor mixed = causal ? causal_attention(qx, kx, vx, heads) : full_attention(qx, kx, vx, heads);
  if (dropout_active()) return dropped_branch(o(mixed), residual);
  return o(mixed, residual);
}

Tensor Block::mix(const Tensor& x, const Tensor& stream, AttentionTap* tap) const {
  return attention ? attn(x, stream, tap) : mixer(x, stream);
}

Tensor Block::operator()(const Tensor& x) const { return block_forward(*this, x, Sublayers::live); }

Tensor Block::gate(int sublayer, const Tensor& y) const {
  const Tensor& s = sublayer == 1 ? branch_scale1 : branch_scale2;
  return s.defined() ? channel_scale(y, s) : y;
}

namespace {

// r + f(r): f(Tensor()) is the sublayer alone; f(r) adds r in the sublayer's last product.
template <class F>
Tensor add_sublayer(Sublayers mode, const Tensor& r, F&& f) {
  if (mode == Sublayers::live) return f(r);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = f(Tensor());
  }
  return r + out;
}

// A sublayer whose output a norm reads (post, deepnorm) or that has no skip connection.
template <class F>
Tensor sublayer(Sublayers mode, F&& f) {
  if (mode == Sublayers::live) return f();
  NoGradGuard no_grad;
  return f();
}

}  // namespace

Tensor block_forward(const Block& b, const Tensor& x, Sublayers mode, AttentionTap* tap) {
  if (!b.residual) {  // the contrast for the identity-path probe: the same block without "x +"
    switch (b.placement) {
      case Placement::pre: {
        Tensor h = sublayer(mode, [&] { return b.mix(b.norm1(x), Tensor(), tap); });
        return sublayer(mode, [&] { return b.mlp(b.norm2(h)); });
      }
      case Placement::sandwich: {
        Tensor h = sublayer(mode, [&] { return b.norm1b(b.mix(b.norm1(x), Tensor(), tap)); });
        return sublayer(mode, [&] { return b.norm2b(b.mlp(b.norm2(h))); });
      }
      case Placement::postsub: {
        Tensor h = sublayer(mode, [&] { return b.norm1(b.mix(x, Tensor(), tap)); });
        return sublayer(mode, [&] { return b.norm2(b.mlp(h)); });
      }
      case Placement::post:
      case Placement::deepnorm:
      case Placement::mixln: {  // a block's placement is never mixln (ModelConfig::block_placement)
        Tensor h = b.norm1(sublayer(mode, [&] { return b.mix(x, Tensor(), tap); }));
        return b.norm2(sublayer(mode, [&] { return b.mlp(h); }));
      }
    }
  }
  // r + gate(branch): with a branch scale the add cannot ride in the sublayer's last product.
  auto gated = [&](int k, const Tensor& r, const Tensor& branch) { return r.defined() ? r + b.gate(k, branch) : b.gate(k, branch); };
  if (b.norm_kind == NormKind::none) {
    if (b.gated()) {
      Tensor h = add_sublayer(mode, x, [&](const Tensor& r) { return gated(1, r, b.mix(x, Tensor(), tap)); });
      return add_sublayer(mode, h, [&](const Tensor& r) { return gated(2, r, b.mlp(h)); });
    }
    Tensor h = add_sublayer(mode, x, [&](const Tensor& r) { return b.mix(x, r, tap); });
    return add_sublayer(mode, h, [&](const Tensor& r) { return b.mlp(h, r); });
  }
  switch (b.placement) {
    case Placement::pre: {
      if (b.gated()) {
        Tensor h = add_sublayer(mode, x, [&](const Tensor& r) { return gated(1, r, b.mix(b.norm1(x), Tensor(), tap)); });
        return add_sublayer(mode, h, [&](const Tensor& r) { return gated(2, r, b.mlp(b.norm2(h))); });
      }
      Tensor h = add_sublayer(mode, x, [&](const Tensor& r) { return b.mix(b.norm1(x), r, tap); });
      return add_sublayer(mode, h, [&](const Tensor& r) { return b.mlp(b.norm2(h), r); });
    }
    case Placement::post:
    case Placement::deepnorm:
    case Placement::mixln: {  // never mixln here (above)
      Tensor h = b.norm1.add_norm(x, b.alpha, sublayer(mode, [&] { return b.gate(1, b.mix(x, Tensor(), tap)); })).second;
      return b.norm2.add_norm(h, b.alpha, sublayer(mode, [&] { return b.gate(2, b.mlp(h)); })).second;
    }
    case Placement::sandwich: {
      Tensor h = x + sublayer(mode, [&] { return b.gate(1, b.norm1b(b.mix(b.norm1(x), Tensor(), tap))); });
      return h + sublayer(mode, [&] { return b.gate(2, b.norm2b(b.mlp(b.norm2(h)))); });
    }
    case Placement::postsub: {
      Tensor h = x + sublayer(mode, [&] { return b.gate(1, b.norm1(b.mix(x, Tensor(), tap))); });
      return h + sublayer(mode, [&] { return b.gate(2, b.norm2(b.mlp(h))); });
    }
  }
  return x;
}

// ---- model ------------------------------------------------------------------------

Model::Model(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg) {
  NL_CHECK(cfg.model != ModelKind::encdec, "Model is decoder-only: an encdec config builds an EncDecModel");
  cfg_.validate();
  Init init{Rng(seed, stream::init), cfg_.dtype};
  const int64_t d = cfg_.d_model;
  // Embeddings: N(0, 0.02) (gpt2, xavier), nn.Embedding's N(0, 1) (torch), N(0, 1/d) (fairseq,
  // whose forward multiplies the token embeddings by sqrt(d)).
  const double emb_std = cfg_.init == InitScheme::torch     ? 1.0
                         : cfg_.init == InitScheme::fairseq ? 1.0 / std::sqrt(static_cast<double>(d))
                                                            : 0.02;
  tok_emb = params_.add("tok_emb", init.normal({cfg_.vocab, d}, emb_std));
  pos_emb = params_.add("pos_emb", init.normal({cfg_.seq_len, d}, emb_std));
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    size_t first = params_.all().size();
    blocks_.push_back(make_block(params_, block_module_name(static_cast<size_t>(l)), cfg_, init, l));
    block_params_.emplace_back(params_.all().begin() + static_cast<std::ptrdiff_t>(first), params_.all().end());
  }
  NormOptions final_opts;
  final_opts.dyt_alpha = cfg_.dyt_alpha_init();
  final_opts.gain_offset = cfg_.gain_offset() && cfg_.final_norm_kind() != NormKind::none;
  final_opts.beta = cfg_.biases();
  final_norm_ = make_norm(params_, "final_norm", cfg_.final_norm_kind(), d, cfg_.final_eps(), init, final_opts);
  // After every other parameter, so that a model without it draws what it drew before.
  if (cfg_.embedding_norm()) {
    NormOptions embed_opts = final_opts;
    embed_opts.gain_offset = cfg_.gain_offset();
    embed_norm_ = make_norm(params_, "embed_norm", cfg_.norm, d, cfg_.eps(), init, embed_opts);
  }
  if (cfg_.tied_head()) {
    // nanoGPT's weight tying: one tensor, which the embedding and the head both read and whose
    // gradient sums both uses; a checkpoint holds it once, as tok_emb.
    head_.w = tok_emb;
    if (cfg_.head_bias) head_.b = params_.add("head.b", init.constant({cfg_.vocab}, 0.0));
    return;
  }
  // The head (no bias): nn.Linear(d, vocab)'s U(-1/sqrt(d), 1/sqrt(d)) (torch), N(0, 1/d) (fairseq).
  Tensor head = cfg_.init == InitScheme::torch     ? init.uniform({cfg_.vocab, d}, 1.0 / std::sqrt(static_cast<double>(d)))
                : cfg_.init == InitScheme::fairseq ? init.normal({cfg_.vocab, d}, 1.0 / std::sqrt(static_cast<double>(d)))
                                                   : init.normal({cfg_.vocab, d}, 0.02);
  head_.w = params_.add("head.w", std::move(head));
  if (cfg_.head_bias) head_.b = params_.add("head.b", init.constant({cfg_.vocab}, 0.0));
}

const Tensor& position_ids(const Tensor& ids, Device device, Tensor& cache) {
  if (cache.defined() && cache.shape() == ids.shape() && cache.device() == device) return cache;
  const int64_t b = ids.size(0), t = ids.size(1);
  std::vector<int32_t> pos(static_cast<size_t>(b * t));
  for (int64_t i = 0; i < b * t; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % t);
  cache = Tensor::from_ids(pos, {b, t}).to_device(device);
  return cache;
}

Tensor Model::forward(const Tensor& ids, ForwardTrace* trace) const {
  NL_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "model input must be int32 (B, T), got {} {}",
           to_string(ids.dtype()), shape_str(ids.shape()));
  const int64_t t = ids.size(1);
  NL_CHECK(t <= cfg_.seq_len, "sequence of length {} exceeds seq_len = {}", t, cfg_.seq_len);
  const Tensor& positions = position_ids(ids, pos_emb.device(), positions_);
  Tensor x;
  {
    ModuleScope module("embedding");
    Tensor tokens = embedding(ids, tok_emb);
    if (cfg_.init == InitScheme::fairseq) tokens = scale(tokens, std::sqrt(static_cast<double>(cfg_.d_model)));
    // In low precision with residual_dtype fp32 the stream starts in float32 here (ops.h).
    x = residual_stream(tokens) + embedding(positions, pos_emb);
    x = embed_norm_(x);  // identity without embed_norm
    x = dropout(x);      // nanoGPT's transformer.drop; the identity outside training's DropoutScope
  }
  if (trace) {
    trace->block_out.clear();
    trace->attention.clear();
    if (trace->retain_grads && x.requires_grad()) x.retain_grad();
    trace->embed = x;
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& block = blocks_[l];
    ModuleScope module(block_module_name(l));
    if (trace && block.attention) {
      trace->attention.emplace_back();
      x = block_forward(block, x, Sublayers::live, &trace->attention.back());
    } else {
      x = block(x);
    }
    if (trace) {
      if (trace->retain_grads && x.requires_grad()) x.retain_grad();
      trace->block_out.push_back(x);
    }
  }
  {
    ModuleScope module("final_norm");
    x = final_norm_(x);
  }
  if (trace) trace->final_out = x;
  ModuleScope module("head");
  return linear(x, head_.w, head_.b);
}

Tensor Model::loss(const Tensor& ids, const Tensor& targets, ForwardTrace* trace) const {
  Tensor logits = forward(ids, trace);
  ModuleScope module("loss");
  return cross_entropy(logits, targets);
}

std::string block_module_name(size_t block) { return fmt::format("blocks.{}", block); }

int64_t block_of_module(const std::string& module) {
  static const std::string prefix = "blocks.";
  if (module.compare(0, prefix.size(), prefix) != 0 || module.size() == prefix.size()) return -1;
  int64_t l = 0;
  for (size_t i = prefix.size(); i < module.size(); ++i) {
    if (module[i] < '0' || module[i] > '9' || l > (int64_t{1} << 40)) return -1;
    l = l * 10 + (module[i] - '0');
  }
  return l;
}

}  // namespace normlab
