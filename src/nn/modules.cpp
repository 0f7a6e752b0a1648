// Modules and the two models (toy and gpt). Only ops are called here: no loops over data.
#include <cmath>

#include "normlab/autograd.h"
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
  return placement == Placement::pre || placement == Placement::sandwich ? norm : NormKind::none;
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

void ModelConfig::validate() const {
  NL_USAGE(layers >= 1, "layers must be >= 1, got {}", layers);
  NL_USAGE(d_model >= 1, "d_model must be >= 1, got {}", d_model);
  NL_USAGE(d_hidden >= 1, "d_hidden must be >= 1, got {}", d_hidden);
  NL_USAGE(vocab >= 2, "vocab must be >= 2, got {}", vocab);
  NL_USAGE(seq_len >= 2, "seq_len must be >= 2, got {}", seq_len);
  NL_USAGE(norm_eps >= 0, "norm_eps must be > 0 (or 0 for the norm's default), got {}", norm_eps);
  if (model == ModelKind::gpt) {
    NL_USAGE(heads >= 1 && d_model % heads == 0, "heads = {} does not divide d_model = {}", heads, d_model);
  }
  NL_USAGE(!(qk_norm && model != ModelKind::gpt), "qk_norm needs model = gpt (the toy model has no queries or keys)");
  NL_USAGE(!(final_norm == FinalNorm::on && norm == NormKind::none),
           "final_norm on is the blocks' norm and norm is none: say final_norm layernorm or rmsnorm for a final norm "
           "alone");
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

Norm make_norm(ParamList& p, const std::string& name, NormKind kind, int64_t d, double eps, Init& init) {
  Norm n;
  n.kind = kind;
  n.eps = eps;
  if (kind == NormKind::none) return n;
  n.gamma = p.add(name + ".gamma", init.constant({d}, 1.0));
  if (kind == NormKind::layernorm) n.beta = p.add(name + ".beta", init.constant({d}, 0.0));
  return n;
}

namespace {

// A Linear(in -> out) with weight w (drawn by the caller, first) and a bias drawn after it, as
// PyTorch's reset_parameters does: U(-1/sqrt(in), 1/sqrt(in)) under the torch scheme, else zeros.
Linear make_linear(ParamList& p, const std::string& name, int64_t out, int64_t in, Tensor w, InitScheme scheme,
                   Init& init) {
  Linear l;
  l.w = p.add(name + ".w", std::move(w));
  l.b = p.add(name + ".b", scheme == InitScheme::torch ? init.uniform({out}, 1.0 / std::sqrt(static_cast<double>(in)))
                                                       : init.constant({out}, 0.0));
  return l;
}

}  // namespace

Block make_block(ParamList& p, const std::string& prefix, const ModelConfig& cfg, Init& init) {
  const int64_t d = cfg.d_model, h = cfg.d_hidden;
  const bool deepnet = cfg.deepnet();
  // DeepNet's own init wins under every scheme: Xavier (normal) with gain beta on the MLP and the
  // value/output (mixing) projections, gain 1 on queries and keys.
  const InitScheme scheme = deepnet ? InitScheme::xavier : cfg.init;
  // GPT-2 scales the projections that write into the residual stream by 1/sqrt(2L).
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.layers));
  const double gain = deepnet ? cfg.deepnorm_beta() : 1.0;
  auto weight = [&](int64_t out, int64_t in, bool residual_proj, double xavier_gain) {
    switch (scheme) {
      case InitScheme::xavier: return init.xavier(out, in, xavier_gain);
      case InitScheme::torch: return init.uniform({out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
      case InitScheme::fairseq: return init.xavier_uniform(out, in);
      case InitScheme::gpt2: break;
    }
    return init.normal({out, in}, residual_proj ? resid_std : 0.02);
  };
  auto linear_of = [&](const std::string& name, int64_t out, int64_t in, bool residual_proj, double xavier_gain) {
    Tensor w = weight(out, in, residual_proj, xavier_gain);
    return make_linear(p, name, out, in, std::move(w), scheme, init);
  };

  Block b;
  b.placement = cfg.placement;
  b.norm_kind = cfg.norm;
  b.residual = cfg.residual;
  b.alpha = cfg.residual_alpha();
  b.attention = cfg.model == ModelKind::gpt;
  const NormKind nk = cfg.norm;
  b.norm1 = make_norm(p, prefix + ".norm1", nk, d, cfg.eps(), init);
  if (b.attention) {
    SelfAttention& a = b.attn;
    a.heads = cfg.heads;
    a.q = linear_of(prefix + ".attn.q", d, d, false, 1.0);
    a.k = linear_of(prefix + ".attn.k", d, d, false, 1.0);
    a.v = linear_of(prefix + ".attn.v", d, d, false, gain);
    a.o = linear_of(prefix + ".attn.o", d, d, true, gain);
    a.qk_norm = cfg.qk_norm;
    if (cfg.qk_norm) {
      const int64_t dh = d / cfg.heads;
      a.q_gamma = p.add(prefix + ".attn.q_norm.gamma", init.constant({dh}, 1.0));
      a.k_gamma = p.add(prefix + ".attn.k_norm.gamma", init.constant({dh}, 1.0));
    }
  } else {
    b.mixer.proj = linear_of(prefix + ".mix", d, d, true, gain);
  }
  if (cfg.placement == Placement::sandwich) b.norm1b = make_norm(p, prefix + ".norm1b", nk, d, cfg.eps(), init);
  b.norm2 = make_norm(p, prefix + ".norm2", nk, d, cfg.eps(), init);
  b.mlp.fc1 = linear_of(prefix + ".mlp.fc1", h, d, false, gain);
  b.mlp.fc2 = linear_of(prefix + ".mlp.fc2", d, h, true, gain);
  if (cfg.placement == Placement::sandwich) b.norm2b = make_norm(p, prefix + ".norm2b", nk, d, cfg.eps(), init);
  return b;
}

// ---- forward ----------------------------------------------------------------------

Tensor Linear::operator()(const Tensor& x, const Tensor& residual) const { return linear(x, w, b, residual); }

Tensor Norm::operator()(const Tensor& x) const {
  switch (kind) {
    case NormKind::none: return x;
    case NormKind::layernorm: return layernorm(x, gamma, beta, eps);
    case NormKind::rmsnorm: return rmsnorm(x, gamma, eps);
  }
  return x;
}

std::pair<Tensor, Tensor> Norm::add_norm(const Tensor& a, double alpha, const Tensor& b) const {
  switch (kind) {
    case NormKind::layernorm: return add_layernorm(a, alpha, b, gamma, beta, eps);
    case NormKind::rmsnorm: return add_rmsnorm(a, alpha, b, gamma, eps);
    case NormKind::none: break;
  }
  Tensor s = add_scaled(a, alpha, b);
  return {s, s};
}

Tensor MLP::operator()(const Tensor& x, const Tensor& residual) const {
  return gelu_linear(fc1(x), fc2.w, fc2.b, residual);
}

Tensor PrefixMixer::operator()(const Tensor& x, const Tensor& residual) const {
  return proj(prefix_mean(x), residual);
}

Tensor SelfAttention::operator()(const Tensor& x, const Tensor& residual, AttentionTap* tap) const {
  Tensor qx = q(x), kx = k(x), vx = v(x);
  if (qk_norm) {
    // QK-Norm: RMSNorm over each head's Dh channels; (B, T, H*Dh) viewed as rows of Dh.
    const Shape s = qx.shape();
    const int64_t dh = q_gamma.size(0);
    qx = reshape(rmsnorm(reshape(qx, {-1, dh}), q_gamma, qk_eps), s);
    kx = reshape(rmsnorm(reshape(kx, {-1, dh}), k_gamma, qk_eps), s);
  }
  if (tap) *tap = {qx, kx, heads};
  return o(causal_attention(qx, kx, vx, heads), residual);
}

Tensor Block::mix(const Tensor& x, const Tensor& stream, AttentionTap* tap) const {
  return attention ? attn(x, stream, tap) : mixer(x, stream);
}

Tensor Block::operator()(const Tensor& x) const { return block_forward(*this, x, Sublayers::live); }

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
      case Placement::post:
      case Placement::deepnorm: {
        Tensor h = b.norm1(sublayer(mode, [&] { return b.mix(x, Tensor(), tap); }));
        return b.norm2(sublayer(mode, [&] { return b.mlp(h); }));
      }
    }
  }
  if (b.norm_kind == NormKind::none) {
    Tensor h = add_sublayer(mode, x, [&](const Tensor& r) { return b.mix(x, r, tap); });
    return add_sublayer(mode, h, [&](const Tensor& r) { return b.mlp(h, r); });
  }
  switch (b.placement) {
    case Placement::pre: {
      Tensor h = add_sublayer(mode, x, [&](const Tensor& r) { return b.mix(b.norm1(x), r, tap); });
      return add_sublayer(mode, h, [&](const Tensor& r) { return b.mlp(b.norm2(h), r); });
    }
    case Placement::post:
    case Placement::deepnorm: {
      Tensor h = b.norm1.add_norm(x, b.alpha, sublayer(mode, [&] { return b.mix(x, Tensor(), tap); })).second;
      return b.norm2.add_norm(h, b.alpha, sublayer(mode, [&] { return b.mlp(h); })).second;
    }
    case Placement::sandwich: {
      Tensor h = x + sublayer(mode, [&] { return b.norm1b(b.mix(b.norm1(x), Tensor(), tap)); });
      return h + sublayer(mode, [&] { return b.norm2b(b.mlp(b.norm2(h))); });
    }
  }
  return x;
}

// ---- model ------------------------------------------------------------------------

Model::Model(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg) {
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
    blocks_.push_back(make_block(params_, block_module_name(static_cast<size_t>(l)), cfg_, init));
    block_params_.emplace_back(params_.all().begin() + static_cast<std::ptrdiff_t>(first), params_.all().end());
  }
  final_norm_ = make_norm(params_, "final_norm", cfg_.final_norm_kind(), d, cfg_.final_eps(), init);
  // The head (no bias): nn.Linear(d, vocab)'s U(-1/sqrt(d), 1/sqrt(d)) (torch), N(0, 1/d) (fairseq).
  Tensor head = cfg_.init == InitScheme::torch     ? init.uniform({cfg_.vocab, d}, 1.0 / std::sqrt(static_cast<double>(d)))
                : cfg_.init == InitScheme::fairseq ? init.normal({cfg_.vocab, d}, 1.0 / std::sqrt(static_cast<double>(d)))
                                                   : init.normal({cfg_.vocab, d}, 0.02);
  head_.w = params_.add("head.w", std::move(head));
  if (cfg_.head_bias) head_.b = params_.add("head.b", init.constant({cfg_.vocab}, 0.0));
}

Tensor Model::forward(const Tensor& ids, ForwardTrace* trace) const {
  NL_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "model input must be int32 (B, T), got {} {}",
           to_string(ids.dtype()), shape_str(ids.shape()));
  const int64_t b = ids.size(0), t = ids.size(1);
  NL_CHECK(t <= cfg_.seq_len, "sequence of length {} exceeds seq_len = {}", t, cfg_.seq_len);
  // Made (and uploaded) once per (B, T) and device, not every step.
  if (!positions_.defined() || positions_.shape() != ids.shape() || positions_.device() != pos_emb.device()) {
    std::vector<int32_t> pos(static_cast<size_t>(b * t));
    for (int64_t i = 0; i < b * t; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % t);
    positions_ = Tensor::from_ids(pos, {b, t}).to_device(pos_emb.device());
  }
  Tensor x;
  {
    ModuleScope module("embedding");
    Tensor tokens = embedding(ids, tok_emb);
    if (cfg_.init == InitScheme::fairseq) tokens = scale(tokens, std::sqrt(static_cast<double>(cfg_.d_model)));
    // In low precision with residual_dtype fp32 the stream starts in float32 here (ops.h).
    x = residual_stream(tokens) + embedding(positions_, pos_emb);
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
