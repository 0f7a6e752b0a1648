// The encoder-decoder Transformer (encdec.h). Only ops are called here: no loops over data.
#include "normlab/encdec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "normlab/autograd.h"
#include "normlab/error.h"
#include "normlab/ops.h"

namespace normlab {

// ---- config ---------------------------------------------------------------------

EncDecConfig encdec_config(const ModelConfig& m) {
  EncDecConfig c;
  c.model = m;
  c.encoder_layers = m.encoder_layers.value_or(m.layers);
  c.decoder_layers = m.decoder_layers.value_or(m.layers);
  c.shared_embeddings = m.shared_embeddings.value_or(true);
  c.model.encoder_layers.reset();
  c.model.decoder_layers.reset();
  c.model.shared_embeddings.reset();
  return c;
}

void EncDecConfig::validate() const {
  NL_USAGE(encoder_layers >= 1, "encoder_layers must be >= 1, got {}", encoder_layers);
  NL_USAGE(decoder_layers >= 1, "decoder_layers must be >= 1, got {}", decoder_layers);
  const Placement p = model.placement;
  NL_USAGE(p != Placement::mixln, "placement mixln is a decoder-only model's (its first blocks Post-LN): the "
                                  "encoder-decoder takes none, pre, post, sandwich, postsub or deepnorm");
  NL_USAGE(!model.residual_scale && !model.ln_scaled() && !model.embedding_norm() && model.residual,
           "the encoder-decoder has no residual scales, LayerNorm Scaling, embed_norm or residual false");
  NL_USAGE(!model.head_bias, "head_bias is the bias an exact LayerNorm -> RMSNorm conversion of a decoder-only model "
                             "folds beta into; the encoder-decoder's head has none");
  ModelConfig m = model;
  m.model = ModelKind::gpt;
  m.layers = std::max(encoder_layers, decoder_layers);
  m.validate();
}

double EncDecConfig::encoder_alpha() const {
  const double n = static_cast<double>(encoder_layers), m = static_cast<double>(decoder_layers);
  return deepnet() ? 0.81 * std::pow(n * n * n * n * m, 1.0 / 16.0) : 1.0;
}
double EncDecConfig::encoder_beta() const {
  const double n = static_cast<double>(encoder_layers), m = static_cast<double>(decoder_layers);
  return deepnet() ? 0.87 * std::pow(n * n * n * n * m, -1.0 / 16.0) : 1.0;
}
double EncDecConfig::decoder_alpha() const {
  return deepnet() ? std::pow(3.0 * static_cast<double>(decoder_layers), 0.25) : 1.0;
}
double EncDecConfig::decoder_beta() const {
  return deepnet() ? std::pow(12.0 * static_cast<double>(decoder_layers), -0.25) : 1.0;
}

// ---- layers ---------------------------------------------------------------------

Tensor Connection::operator()(const Tensor& x, const std::function<Tensor(const Tensor&)>& f) const {
  switch (placement) {
    case Placement::pre: return x + f(norm(x));
    case Placement::post:
    case Placement::deepnorm: return norm.add_norm(x, alpha, f(x)).second;
    case Placement::sandwich: return x + norm_b(f(norm(x)));
    case Placement::postsub: return x + norm(f(x));
    case Placement::mixln: break;  // refused by EncDecConfig::validate
  }
  throw Error("an encoder-decoder connection in placement mixln");
}

Tensor EncoderLayer::operator()(const Tensor& x) const {
  const Tensor h = attn_conn(x, [&](const Tensor& y) { return attn(y); });
  return mlp_conn(h, [&](const Tensor& y) { return mlp(y); });
}

Tensor DecoderLayer::operator()(const Tensor& x, const Tensor& memory) const {
  const Tensor h = self_conn(x, [&](const Tensor& y) { return self_attn(y); });
  const Tensor c = cross_conn(h, [&](const Tensor& y) { return cross_attn.attend(y, memory); });
  return mlp_conn(c, [&](const Tensor& y) { return mlp(y); });
}

namespace {

// The per-stack config the shared builders read: its depth (GPT-2's 1/sqrt(2L)).
ModelConfig stack_config(const EncDecConfig& cfg, int64_t layers) {
  ModelConfig m = cfg.model;
  m.model = ModelKind::gpt;
  m.layers = layers;
  return m;
}

NormOptions norm_options(const ModelConfig& m) {
  NormOptions o;
  o.dyt_alpha = m.dyt_alpha_init();
  o.gain_offset = m.gain_offset();
  o.beta = m.biases();
  return o;
}

Connection make_connection(ParamList& p, const std::string& name, const ModelConfig& m, Init& init, double alpha) {
  Connection c;
  c.placement = m.norm == NormKind::none ? Placement::pre : m.placement;
  c.alpha = m.deepnet() ? alpha : 1.0;
  c.norm = make_norm(p, name, m.norm, m.d_model, m.eps(), init, norm_options(m));
  if (c.placement == Placement::sandwich) c.norm_b = make_norm(p, name + "b", m.norm, m.d_model, m.eps(), init, norm_options(m));
  return c;
}

MLP make_mlp(ParamList& p, const std::string& prefix, const ModelConfig& m, Init& init, double gain) {
  MLP mlp;
  mlp.fc1 = make_block_linear(p, prefix + ".fc1", m, init, m.d_hidden, m.d_model, false, gain);
  mlp.fc2 = make_block_linear(p, prefix + ".fc2", m, init, m.d_model, m.d_hidden, true, gain);
  return mlp;
}

EncoderLayer make_encoder_layer(ParamList& p, const std::string& prefix, const EncDecConfig& cfg, Init& init) {
  const ModelConfig m = stack_config(cfg, cfg.encoder_layers);
  EncoderLayer l;
  l.attn_conn = make_connection(p, prefix + ".norm1", m, init, cfg.encoder_alpha());
  l.attn = make_attention(p, prefix + ".attn", m, init, cfg.encoder_beta());
  l.attn.causal = false;
  l.mlp_conn = make_connection(p, prefix + ".norm2", m, init, cfg.encoder_alpha());
  l.mlp = make_mlp(p, prefix + ".mlp", m, init, cfg.encoder_beta());
  return l;
}

DecoderLayer make_decoder_layer(ParamList& p, const std::string& prefix, const EncDecConfig& cfg, Init& init) {
  const ModelConfig m = stack_config(cfg, cfg.decoder_layers);
  DecoderLayer l;
  l.self_conn = make_connection(p, prefix + ".norm1", m, init, cfg.decoder_alpha());
  l.self_attn = make_attention(p, prefix + ".self_attn", m, init, cfg.decoder_beta());
  l.cross_conn = make_connection(p, prefix + ".norm2", m, init, cfg.decoder_alpha());
  l.cross_attn = make_attention(p, prefix + ".cross_attn", m, init, cfg.decoder_beta());
  l.cross_attn.causal = false;
  l.mlp_conn = make_connection(p, prefix + ".norm3", m, init, cfg.decoder_alpha());
  l.mlp = make_mlp(p, prefix + ".mlp", m, init, cfg.decoder_beta());
  return l;
}

Norm make_final_norm(ParamList& p, const std::string& name, const ModelConfig& m, Init& init) {
  NormOptions o = norm_options(m);
  o.gain_offset = m.gain_offset() && m.final_norm_kind() != NormKind::none;
  return make_norm(p, name, m.final_norm_kind(), m.d_model, m.final_eps(), init, o);
}

}  // namespace

// ---- model ------------------------------------------------------------------------

EncDecModel::EncDecModel(const EncDecConfig& cfg, uint64_t seed) : cfg_(cfg) {
  cfg_.validate();
  const ModelConfig& m = cfg_.model;
  Init init{Rng(seed, stream::init), m.dtype};
  const int64_t d = m.d_model;
  // The decoder-only model's embeddings (nn.h): N(0, 0.02), N(0, 1) under torch, N(0, 1/d) under fairseq.
  const double emb_std = m.init == InitScheme::torch     ? 1.0
                         : m.init == InitScheme::fairseq ? 1.0 / std::sqrt(static_cast<double>(d))
                                                         : 0.02;
  src_emb_ = params_.add(cfg_.shared_embeddings ? "tok_emb" : "src_emb", init.normal({m.vocab, d}, emb_std));
  tgt_emb_ = cfg_.shared_embeddings ? src_emb_ : params_.add("tgt_emb", init.normal({m.vocab, d}, emb_std));
  src_pos_ = params_.add("src_pos_emb", init.normal({m.seq_len, d}, emb_std));
  tgt_pos_ = params_.add("tgt_pos_emb", init.normal({m.seq_len, d}, emb_std));
  for (int64_t l = 0; l < cfg_.encoder_layers; ++l)
    encoder_.push_back(make_encoder_layer(params_, fmt::format("encoder.{}", l), cfg_, init));
  encoder_norm_ = make_final_norm(params_, "encoder.final_norm", m, init);
  for (int64_t l = 0; l < cfg_.decoder_layers; ++l)
    decoder_.push_back(make_decoder_layer(params_, fmt::format("decoder.{}", l), cfg_, init));
  decoder_norm_ = make_final_norm(params_, "decoder.final_norm", m, init);
  if (m.tied_head()) {
    head_.w = tgt_emb_;  // one tensor: the target embedding and the head (checkpoints hold it once)
    return;
  }
  Tensor head = m.init == InitScheme::torch     ? init.uniform({m.vocab, d}, 1.0 / std::sqrt(static_cast<double>(d)))
                : m.init == InitScheme::fairseq ? init.normal({m.vocab, d}, 1.0 / std::sqrt(static_cast<double>(d)))
                                                : init.normal({m.vocab, d}, 0.02);
  head_.w = params_.add("head.w", std::move(head));
}

Tensor EncDecModel::embed(const Tensor& ids, const Tensor& table, const Tensor& positions_table) const {
  NL_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "encoder-decoder input must be int32 (B, T), got {} {}",
           to_string(ids.dtype()), shape_str(ids.shape()));
  const int64_t t = ids.size(1);
  NL_CHECK(t >= 1 && t <= cfg_.model.seq_len, "sequence of length {} outside 1 .. seq_len = {}", t, cfg_.model.seq_len);
  const Tensor& positions = position_ids(ids, positions_table.device(), positions_);
  Tensor tokens = embedding(ids, table);
  if (cfg_.model.init == InitScheme::fairseq) tokens = scale(tokens, std::sqrt(static_cast<double>(cfg_.model.d_model)));
  return dropout(residual_stream(tokens) + embedding(positions, positions_table));
}

Tensor EncDecModel::encode(const Tensor& src, EncDecTrace* trace) const {
  Tensor x;
  {
    ModuleScope module("encoder.embedding");
    x = embed(src, src_emb_, src_pos_);
  }
  if (trace) trace->encoder_out.clear();
  for (size_t l = 0; l < encoder_.size(); ++l) {
    ModuleScope module(fmt::format("encoder.{}", l));
    x = encoder_[l](x);
    if (trace) trace->encoder_out.push_back(x);
  }
  ModuleScope module("encoder.final_norm");
  x = encoder_norm_(x);
  if (trace) trace->memory = x;
  return x;
}

Tensor EncDecModel::decode(const Tensor& tgt_in, const Tensor& memory, EncDecTrace* trace) const {
  Tensor x;
  {
    ModuleScope module("decoder.embedding");
    x = embed(tgt_in, tgt_emb_, tgt_pos_);
  }
  NL_CHECK(memory.dim() == 3 && memory.size(0) == x.size(0) && memory.size(2) == x.size(2),
           "decoder: memory {} is not (B, S, C) for targets {}", shape_str(memory.shape()), shape_str(tgt_in.shape()));
  if (trace) trace->decoder_out.clear();
  for (size_t l = 0; l < decoder_.size(); ++l) {
    ModuleScope module(fmt::format("decoder.{}", l));
    x = decoder_[l](x, memory);
    if (trace) trace->decoder_out.push_back(x);
  }
  {
    ModuleScope module("decoder.final_norm");
    x = decoder_norm_(x);
  }
  if (trace) trace->decoder_final = x;
  ModuleScope module("head");
  return linear(x, head_.w, head_.b);
}

Tensor EncDecModel::forward(const Tensor& src, const Tensor& tgt_in, EncDecTrace* trace) const {
  return decode(tgt_in, encode(src, trace), trace);
}

Tensor EncDecModel::loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, EncDecTrace* trace) const {
  Tensor logits = forward(src, tgt_in, trace);
  ModuleScope module("loss");
  return cross_entropy(logits, tgt_out);
}

}  // namespace normlab
