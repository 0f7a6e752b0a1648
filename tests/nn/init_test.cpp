// Every init scheme's table (docs/init.md), checked on the parameters a model actually gets: the
// empirical mean and standard deviation of each parameter group against what the table says.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "normlab/autograd.h"
#include "normlab/nn.h"

using namespace normlab;

namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
bool ends(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The standard deviation the scheme gives parameter `name` of shape (out, in) or (n); NaN: a
// constant (gains 1, norm biases 0), checked separately.
double expected_std(InitScheme scheme, const std::string& name, const Shape& shape, const ModelConfig& c) {
  const double d = double(c.d_model);
  if (has(name, "norm") && (ends(name, ".gamma") || ends(name, ".beta"))) return NAN;
  const bool emb = name == "tok_emb" || name == "pos_emb", head = name == "head.w";
  const bool bias = ends(name, ".b");
  const double fan_in = shape.size() == 2 ? double(shape[1]) : 0, fan_out = shape.size() == 2 ? double(shape[0]) : 0;
  const bool resid = has(name, ".mix.") || has(name, ".attn.o.") || has(name, ".mlp.fc2.");
  switch (scheme) {
    case InitScheme::gpt2:
      if (bias) return 0;
      return resid ? 0.02 / std::sqrt(2.0 * double(c.layers)) : 0.02;
    case InitScheme::xavier:
      if (bias) return 0;
      if (emb || head) return 0.02;
      return std::sqrt(2.0 / (fan_in + fan_out));
    case InitScheme::torch:
      if (emb) return 1.0;
      if (head) return 1.0 / std::sqrt(3.0 * d);  // U(+-1/sqrt(d))
      return NAN;                                 // weights and biases: per fan_in, below
    case InitScheme::fairseq:
      if (bias) return 0;
      if (emb || head) return 1.0 / std::sqrt(d);
      return std::sqrt(2.0 / (fan_in + fan_out));  // U(+-sqrt(6/(in+out)))
  }
  return NAN;
}

double mean_row_norm(const Tensor& x) {
  const std::vector<double> v = x.to_vector();
  const size_t d = size_t(x.size(-1)), n = v.size() / d;
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t j = 0; j < d; ++j) s += v[i * d + j] * v[i * d + j];
    total += std::sqrt(s);
  }
  return total / double(n);
}

void moments(const std::vector<double>& v, double& mean, double& stdev) {
  mean = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  stdev = std::sqrt(ss / double(v.size()));
}

}  // namespace

TEST(InitSchemes, EveryParameterGroupMatchesItsTable) {
  for (ModelKind model : {ModelKind::toy, ModelKind::gpt}) {
    for (InitScheme scheme : {InitScheme::gpt2, InitScheme::xavier, InitScheme::torch, InitScheme::fairseq}) {
      ModelConfig c;
      c.model = model;
      c.init = scheme;
      c.layers = 3;
      c.d_model = 128;
      c.d_hidden = 256;
      c.vocab = 256;
      c.seq_len = 64;
      c.heads = 4;
      Model m(c, 5);
      // torch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for a Linear's weight and bias alike; the bias is
      // checked by its bound (only fan_out values).
      std::vector<double> torch_bias_scaled;
      for (const Tensor& p : m.params().all()) {
        const std::string& name = p.name();
        const std::vector<double> v = p.to_vector();
        double mean = 0, sd = 0;
        moments(v, mean, sd);
        SCOPED_TRACE(std::string(to_string(model)) + " " + to_string(scheme) + " " + name);
        if (has(name, "norm") && ends(name, ".gamma")) {
          EXPECT_EQ(mean, 1.0);
          EXPECT_EQ(sd, 0.0);
          continue;
        }
        if (has(name, "norm") && ends(name, ".beta")) {
          EXPECT_EQ(mean, 0.0);
          EXPECT_EQ(sd, 0.0);
          continue;
        }
        double want = expected_std(scheme, name, p.shape(), c);
        if (scheme == InitScheme::torch && std::isnan(want)) {
          const double fan_in = ends(name, ".b") ? NAN : double(p.shape()[1]);
          if (ends(name, ".b")) {
            // The bias's fan_in is its weight's: bounded by 1/sqrt(fan_in) <= 1/sqrt(d_model).
            for (double x : v) EXPECT_LE(std::abs(x), 1.0 / std::sqrt(double(c.d_model)) + 1e-7);
            EXPECT_GT(sd, 0.0);
            continue;
          }
          want = 1.0 / std::sqrt(3.0 * fan_in);
        }
        if (want == 0) {
          EXPECT_EQ(sd, 0.0);
          EXPECT_EQ(mean, 0.0);
          continue;
        }
        // Sampling error of a std over n values is about want / sqrt(2n); the smallest tensors
        // here have 8192 values (~0.8%), so 6% is far outside noise yet far inside any wrong scale.
        EXPECT_NEAR(sd, want, 0.06 * want);
        EXPECT_NEAR(mean, 0.0, 4.0 * want / std::sqrt(double(v.size())));
      }
    }
  }
}

// fairseq multiplies the token embeddings (N(0, 1/d)) by sqrt(d) in the forward: the stream
// enters at norm ~sqrt(d) (plus the positions' ~1), not at the table's ~1.
TEST(InitSchemes, FairseqScalesTokenEmbeddingsBySqrtD) {
  ModelConfig c;
  c.init = InitScheme::fairseq;
  c.d_model = 64;
  c.layers = 1;
  Model m(c, 3);
  std::vector<int32_t> ids(4 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % 64);
  ForwardTrace trace;
  NoGradGuard no_grad;
  m.forward(Tensor::from_ids(ids, {4, 16}), &trace);
  EXPECT_NEAR(mean_row_norm(trace.embed), std::sqrt(65.0), 1.0);
  c.init = InitScheme::gpt2;
  Model g(c, 3);
  g.forward(Tensor::from_ids(ids, {4, 16}), &trace);
  EXPECT_LT(mean_row_norm(trace.embed), 0.5);
}

// Whether DeepNet's alpha and init apply had three answers (make_block, gradcheck's record of a
// case, the Python mirror): ModelConfig::deepnet() is the one. It holds for placement deepnorm
// with a norm, and then for alpha and every block Linear's init together; without a norm every
// placement is x + F(x) with the scheme's own init.
TEST(InitSchemes, DeepNetAppliesExactlyToDeepnormWithANorm) {
  auto std_of = [](const Tensor& t) {
    const std::vector<double> v = t.to_vector();
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / double(v.size()));
  };
  for (NormKind norm : kind_values<NormKind>()) {
    for (Placement placement : kind_values<Placement>()) {
      ModelConfig c;
      c.norm = norm;
      c.placement = placement;
      c.layers = 4;  // alpha = 8^(1/4) = 1.68, beta = 32^(-1/4) = 0.42
      const std::string what = std::string(to_string(norm)) + "/" + to_string(placement);
      const bool want = placement == Placement::deepnorm && norm != NormKind::none;
      EXPECT_EQ(c.deepnet(), want) << what;
      EXPECT_EQ(c.residual_alpha(), want ? std::pow(8.0, 0.25) : 1.0) << what;
      const Model m(c, 5);
      for (const Block& b : m.blocks()) EXPECT_EQ(b.alpha, c.residual_alpha()) << what;
      // fc1 (128 x 64): DeepNet's Xavier with gain beta, std 0.42 * sqrt(2/192) = 0.044, else gpt2's 0.02.
      const double want_std = want ? c.deepnorm_beta() * std::sqrt(2.0 / 192.0) : 0.02;
      EXPECT_NEAR(std_of(m.blocks()[0].mlp.fc1.w), want_std, 0.06 * want_std) << what;
    }
  }
}
