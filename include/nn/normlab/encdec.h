// The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al. 2017, §3.1): an
// encoder stack (self-attention over the whole source, MLP) and a decoder stack (causal
// self-attention, cross-attention to the encoder's output, MLP), every sublayer a residual
// connection in the model's placement, as the Annotated Transformer's SublayerConnection.
//   memory = enc_final_norm(encoder(embed(src)))
//   logits = head(dec_final_norm(decoder(embed(tgt_in), memory)))
// Reads like the decoder-only model (nn.h): the same attention, MLP, norms and init.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "normlab/nn.h"

namespace normlab {

struct EncDecConfig {
  // Norm, placement, QK-Norm, widths, heads, vocabulary (source and target share one), seq_len
  // (the longest source or target), init, dtype, final_norm, norm_eps, bias, tie_embeddings (the
  // head reads the target embedding). model and layers are not read; the variants (residual
  // scales, Mix-LN, LayerNorm Scaling, embed_norm) are refused.
  ModelConfig model;
  int64_t encoder_layers = 6;
  int64_t decoder_layers = 6;
  bool shared_embeddings = true;  // one token table for source and target; false: one each

  void validate() const;  // throws UsageError naming the field
  bool deepnet() const { return model.deepnet(); }
  // DeepNet (Wang et al. 2022), encoder-decoder with N encoder and M decoder layers:
  // encoder alpha = 0.81 (N^4 M)^(1/16), beta = 0.87 (N^4 M)^(-1/16); decoder alpha = (3M)^(1/4),
  // beta = (12M)^(-1/4). Without deepnet(): alpha 1, beta 1 (the init scheme's own weights).
  double encoder_alpha() const;
  double encoder_beta() const;
  double decoder_alpha() const;
  double decoder_beta() const;
};

// The encoder-decoder a ModelConfig of model encdec describes: encoder_layers and decoder_layers
// (unset: layers each), shared_embeddings (unset: true); the returned config's model holds neither.
EncDecConfig encdec_config(const ModelConfig& m);

// One residual sublayer F in a placement: pre x + F(N(x)); post N(x + F(x)); deepnorm
// N(alpha x + F(x)); sandwich x + Nb(F(N(x))); postsub x + N(F(x)). With norm none each is
// x + F(x).
struct Connection {
  Placement placement = Placement::pre;
  Norm norm, norm_b;  // norm_b: sandwich's norm on F's output
  double alpha = 1.0;
  Tensor operator()(const Tensor& x, const std::function<Tensor(const Tensor&)>& f) const;
};

struct EncoderLayer {
  SelfAttention attn;  // causal = false
  MLP mlp;
  Connection attn_conn, mlp_conn;
  Tensor operator()(const Tensor& x) const;
};

struct DecoderLayer {
  SelfAttention self_attn, cross_attn;
  MLP mlp;
  Connection self_conn, cross_conn, mlp_conn;
  Tensor operator()(const Tensor& x, const Tensor& memory) const;
};

// The stream after each layer of each stack, for probes and statistics.
struct EncDecTrace {
  std::vector<Tensor> encoder_out, decoder_out;
  Tensor memory;         // the encoder's output, after its final norm
  Tensor decoder_final;  // the decoder's output after its final norm (what the head reads)
};

class EncDecModel {
 public:
  EncDecModel(const EncDecConfig& cfg, uint64_t seed);
  const EncDecConfig& config() const { return cfg_; }
  ParamList& params() { return params_; }
  const std::vector<EncoderLayer>& encoder() const { return encoder_; }
  const std::vector<DecoderLayer>& decoder() const { return decoder_; }
  // src (B, S) int32 -> memory (B, S, C).
  Tensor encode(const Tensor& src, EncDecTrace* trace = nullptr) const;
  // tgt_in (B, T) int32 and memory -> logits (B, T, V).
  Tensor decode(const Tensor& tgt_in, const Tensor& memory, EncDecTrace* trace = nullptr) const;
  Tensor forward(const Tensor& src, const Tensor& tgt_in, EncDecTrace* trace = nullptr) const;
  // Mean cross-entropy of the target tokens tgt_out (B, T) given src and tgt_in.
  Tensor loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, EncDecTrace* trace = nullptr) const;

 private:
  Tensor embed(const Tensor& ids, const Tensor& table, const Tensor& positions_table) const;

  EncDecConfig cfg_;
  ParamList params_;
  Tensor src_emb_, tgt_emb_, src_pos_, tgt_pos_;
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  Norm encoder_norm_, decoder_norm_;
  Linear head_;
  mutable Tensor positions_;  // position ids for the last (B, T), on the parameters' device
};

}  // namespace normlab
