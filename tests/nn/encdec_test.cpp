// The encoder-decoder Transformer (encdec.h): what each position may see (the decoder's own past
// and every source token), the placements of a residual sublayer against their formulas, DeepNet's
// encoder-decoder constants, the parameters each option makes, and the configs it refuses.
// Gradients: gradcheck's encdec_*_loss cases.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "normlab/encdec.h"
#include "normlab/error.h"
#include "normlab/ops.h"

using namespace normlab;

namespace {

EncDecConfig small_encdec(Placement placement = Placement::post) {
  EncDecConfig c;
  c.model.norm = NormKind::layernorm;
  c.model.placement = placement;
  c.model.d_model = 16;
  c.model.d_hidden = 32;
  c.model.heads = 2;
  c.model.vocab = 13;
  c.model.seq_len = 9;
  c.model.init = InitScheme::xavier;
  c.encoder_layers = 2;
  c.decoder_layers = 3;
  return c;
}

Tensor ids(int64_t b, int64_t t, int salt) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < b * t; ++i) v.push_back(static_cast<int32_t>((i * 7 + salt) % 13));
  return Tensor::from_ids(v, {b, t});
}

std::set<std::string> names(EncDecModel& m) {
  std::set<std::string> out;
  for (const Tensor& p : m.params().all()) out.insert(p.name());
  return out;
}

}  // namespace

// Changing the target token at t0 leaves the logits before t0 bit for bit (the decoder's causal
// self-attention) and changes those from t0 on; changing the last source token changes the
// encoder's first position (it is not causal) and every target position's logits (cross-attention
// sees the whole source).
TEST(EncDec, DecoderSeesItsPastAndTheWholeSource) {
  EncDecModel m(small_encdec(), 3);
  const int64_t B = 2, S = 7, T = 6, t0 = 3, V = 13;
  const Tensor src = ids(B, S, 1), tgt = ids(B, T, 5);
  const std::vector<double> base = m.forward(src, tgt).to_vector();
  std::vector<int32_t> changed_tgt;
  for (double x : tgt.to_vector()) changed_tgt.push_back(static_cast<int32_t>(x));
  changed_tgt[t0] = (changed_tgt[t0] + 1) % V;
  const std::vector<double> after = m.forward(src, Tensor::from_ids(changed_tgt, {B, T})).to_vector();
  for (int64_t t = 0; t < T; ++t) {
    bool same = true;
    for (int64_t v = 0; v < V; ++v) same = same && base[static_cast<size_t>(t * V + v)] == after[static_cast<size_t>(t * V + v)];
    EXPECT_EQ(same, t < t0) << "target position " << t;
  }
  std::vector<int32_t> changed_src;
  for (double x : src.to_vector()) changed_src.push_back(static_cast<int32_t>(x));
  changed_src[S - 1] = (changed_src[S - 1] + 1) % V;  // the last source token of sequence 0
  const Tensor src2 = Tensor::from_ids(changed_src, {B, S});
  // The encoder is not causal: its first position sees the last token.
  const std::vector<double> mem = m.encode(src).to_vector(), mem2 = m.encode(src2).to_vector();
  double first = 0;
  for (int64_t c = 0; c < 16; ++c) first += std::abs(mem[static_cast<size_t>(c)] - mem2[static_cast<size_t>(c)]);
  EXPECT_GT(first, 0.0) << "the encoder's first position did not see the last source token";
  const std::vector<double> crossed = m.forward(src2, tgt).to_vector();
  for (int64_t t = 0; t < T; ++t) {
    double diff = 0;
    for (int64_t v = 0; v < V; ++v) diff += std::abs(base[static_cast<size_t>(t * V + v)] - crossed[static_cast<size_t>(t * V + v)]);
    EXPECT_GT(diff, 0.0) << "target position " << t << " did not see the last source token";
  }
}

// Each placement of one sublayer against its formula, with LayerNorm and F(y) = 2y + 1.
TEST(EncDec, ConnectionsAreTheirFormulas) {
  ParamList p;
  Init init{Rng(1, stream::init), DType::f32};
  const Norm n = make_norm(p, "n", NormKind::layernorm, 4, 1e-5, init);
  const Norm nb = make_norm(p, "nb", NormKind::layernorm, 4, 1e-5, init);
  const Tensor x = Tensor::from({0.5, -1.0, 2.0, 3.0, 1.0, 1.5, -2.0, 0.25}, {2, 4}, DType::f32);
  const auto f = [](const Tensor& y) { return add_constant(scale(y, 2.0), 1.0); };
  auto connect = [&](Placement pl, double alpha) {
    Connection c;
    c.placement = pl;
    c.norm = n;
    c.norm_b = nb;
    c.alpha = alpha;
    return c(x, f).to_vector();
  };
  auto same = [](const std::vector<double>& a, const Tensor& b) {
    const std::vector<double> w = b.to_vector();
    ASSERT_EQ(a.size(), w.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], w[i], 1e-6) << i;
  };
  same(connect(Placement::pre, 1.0), x + f(n(x)));
  same(connect(Placement::post, 1.0), n(x + f(x)));
  same(connect(Placement::deepnorm, 1.7), n(add_scaled(x, 1.7, f(x))));
  same(connect(Placement::sandwich, 1.0), x + nb(f(n(x))));
  same(connect(Placement::postsub, 1.0), x + n(f(x)));
}

// DeepNet's Table 1 for N = 2 encoder and M = 3 decoder layers, in the model's connections; 1
// elsewhere.
TEST(EncDec, DeepNetConstantsOfEachStack) {
  EncDecModel m(small_encdec(Placement::deepnorm), 1);
  const double n = 2, mm = 3;
  const double enc_alpha = 0.81 * std::pow(n * n * n * n * mm, 1.0 / 16), enc_beta = 0.87 * std::pow(n * n * n * n * mm, -1.0 / 16);
  EXPECT_NEAR(m.config().encoder_alpha(), enc_alpha, 1e-15);
  EXPECT_NEAR(m.config().encoder_beta(), enc_beta, 1e-15);
  EXPECT_NEAR(m.config().decoder_alpha(), std::pow(9.0, 0.25), 1e-15);
  EXPECT_NEAR(m.config().decoder_beta(), std::pow(36.0, -0.25), 1e-15);
  for (const EncoderLayer& l : m.encoder()) EXPECT_EQ(l.mlp_conn.alpha, enc_alpha);
  for (const DecoderLayer& l : m.decoder()) EXPECT_EQ(l.cross_conn.alpha, std::pow(9.0, 0.25));
  EncDecModel post(small_encdec(Placement::post), 1);
  EXPECT_EQ(post.encoder()[0].attn_conn.alpha, 1.0);
  EXPECT_EQ(post.config().encoder_beta(), 1.0);
}

TEST(EncDec, ParametersOfEachOption) {
  EncDecModel shared(small_encdec(), 1);
  const std::set<std::string> s = names(shared);
  for (const char* want : {"tok_emb", "src_pos_emb", "tgt_pos_emb", "encoder.0.attn.q.w", "encoder.1.mlp.fc2.w",
                           "decoder.2.cross_attn.k.w", "decoder.2.self_attn.o.b", "decoder.0.norm3.gamma", "head.w"})
    EXPECT_TRUE(s.count(want)) << want;
  EXPECT_FALSE(s.count("encoder.final_norm.gamma"));  // Post-LN: no final norms by default
  EncDecConfig c = small_encdec(Placement::sandwich);
  c.shared_embeddings = false;
  c.model.tie_embeddings = true;
  c.model.qk_norm = true;
  c.model.bias = false;
  EncDecModel separate(c, 1);
  const std::set<std::string> t = names(separate);
  for (const char* want : {"src_emb", "tgt_emb", "encoder.0.norm1b.gamma", "decoder.1.cross_attn.q_norm.gamma",
                           "encoder.final_norm.gamma", "decoder.final_norm.gamma"})
    EXPECT_TRUE(t.count(want)) << want;
  for (const char* absent : {"tok_emb", "head.w", "decoder.0.self_attn.q.b", "encoder.0.norm1.beta"})
    EXPECT_FALSE(t.count(absent)) << absent;
}

TEST(EncDec, RefusesWhatItDoesNotHave) {
  EncDecConfig c = small_encdec(Placement::mixln);
  EXPECT_THROW(EncDecModel(c, 1), UsageError);
  c = small_encdec();
  c.encoder_layers = 0;
  EXPECT_THROW(EncDecModel(c, 1), UsageError);
  c = small_encdec();
  c.model.residual_scale = ResidualScale::layerscale;
  EXPECT_THROW(EncDecModel(c, 1), UsageError);
  c = small_encdec();
  c.model.heads = 3;  // does not divide d_model 16
  EXPECT_THROW(EncDecModel(c, 1), UsageError);
}

// At init a model of N(0, 0.02) weights predicts nearly uniformly: its loss is near log V.
TEST(EncDec, LossAtInitIsNearUniform) {
  EncDecConfig c = small_encdec(Placement::pre);
  c.model.init = InitScheme::gpt2;
  EncDecModel m(c, 2);
  const double loss = m.loss(ids(2, 7, 1), ids(2, 6, 5), ids(2, 6, 9)).item();
  EXPECT_NEAR(loss, std::log(13.0), 0.05);
}
