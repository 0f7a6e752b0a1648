#include "normlab/convert.h"

#include <cmath>
#include <map>
#include <optional>

#include "normlab/autograd.h"
#include "normlab/checkpoint.h"
#include "normlab/error.h"
#include "normlab/ops.h"

namespace normlab {

template <>
const EnumNames& enum_names<ConvertMethod>() {
  static const EnumNames t{"method",
                           {{ConvertMethod::naive, "naive", {}, "keep each gain, drop beta"},
                            {ConvertMethod::exact, "exact", {}, "fold beta into the next linear, centre the stream"}}};
  return t;
}

namespace {

using Values = std::map<std::string, std::vector<double>>;  // normlab parameter name -> values

// b += W v for W (out, in) row-major.
void fold(std::vector<double>& b, const std::vector<double>& w, const std::vector<double>& v) {
  const size_t in = v.size(), out = b.size();
  NL_CHECK(w.size() == out * in, "fold: W has {} values, expected {}x{}", w.size(), out, in);
  for (size_t i = 0; i < out; ++i)
    for (size_t j = 0; j < in; ++j) b[i] += w[i * in + j] * v[j];
}

// Every column of a (d x in) W, and a bias of d, made zero-mean over the d outputs.
void centre_outputs(std::vector<double>& w, size_t d) {
  const size_t in = w.size() / d;
  for (size_t j = 0; j < in; ++j) {
    double m = 0;
    for (size_t i = 0; i < d; ++i) m += w[i * in + j];
    m /= double(d);
    for (size_t i = 0; i < d; ++i) w[i * in + j] -= m;
  }
}

// Every row of a (rows x d) table made zero-mean.
void centre_rows(std::vector<double>& t, size_t d) {
  for (size_t r = 0; r < t.size() / d; ++r) {
    double m = 0;
    for (size_t j = 0; j < d; ++j) m += t[r * d + j];
    m /= double(d);
    for (size_t j = 0; j < d; ++j) t[r * d + j] -= m;
  }
}

}  // namespace

namespace {

// The source's values under a new config, by normlab parameter name (parameters the target has and
// the source lacks, such as a LayerNorm's beta, are filled with `missing`; without it, each must exist).
Conversion rebuild(const ModelConfig& config, const Values& v, std::optional<double> missing) {
  Conversion out;
  out.config = config;
  Model converted(out.config, 0);
  for (const Tensor& p : converted.params().all()) {
    auto it = v.find(p.name());
    Tensor dst = p;
    if (it == v.end()) {
      NL_CHECK(missing.has_value(), "convert: no source value for {}", p.name());
      dst.copy_(Tensor::full(p.shape(), *missing, p.dtype()));
      continue;
    }
    dst.copy_(Tensor::from(it->second, p.shape(), p.dtype()));
  }
  out.state = model_state(converted);
  for (auto& [name, t] : out.state) t = t.clone();  // the converted model goes away
  return out;
}

// Largest |mean over the d outputs| of a writer, relative to its largest |value|.
double off_centre(const std::vector<double>& w, size_t d, bool rows) {
  double worst = 0, scale = 0;
  for (double x : w) scale = std::max(scale, std::abs(x));
  if (rows) {
    for (size_t r = 0; r < w.size() / d; ++r) {
      double m = 0;
      for (size_t j = 0; j < d; ++j) m += w[r * d + j];
      worst = std::max(worst, std::abs(m / double(d)));
    }
  } else {
    const size_t in = w.size() / d;
    for (size_t j = 0; j < in; ++j) {
      double m = 0;
      for (size_t i = 0; i < d; ++i) m += w[i * in + j];
      worst = std::max(worst, std::abs(m / double(d)));
    }
  }
  return scale > 0 ? worst / scale : 0;
}

}  // namespace

std::string conversion_refusal(const ModelConfig& cfg, ConvertMethod method) {
  if (cfg.norm != NormKind::layernorm) return fmt::format("the model's norm is {}, not layernorm", to_string(cfg.norm));
  if (method == ConvertMethod::naive) return "";
  if (!cfg.residual) return "without the residual the stream is not written by linear maps only";
  if (cfg.placement != Placement::pre)
    return fmt::format("placement {}: the exact method needs the residual stream to be read only through norms and "
                       "written only by linear maps (Pre-LN); {}",
                       to_string(cfg.placement),
                       cfg.placement == Placement::sandwich ? "sandwich adds a norm's output (with its beta) to the stream"
                                                            : "post/deepnorm put a norm on the stream itself");
  if (!cfg.final_norm_on()) return "the final norm is off: the head reads the stream directly, mean included";
  if (!cfg.biases())
    return "bias false: the exact method moves each LayerNorm's mean into the biases of the linear layers around "
           "it, and they have none";
  if (cfg.tied_head())
    return "the head is the token embedding (tie_embeddings): centring the embedding, as the exact method does, "
           "would change the head";
  return "";
}

Conversion convert_layernorm_to_rmsnorm(Model& source, ConvertMethod method) {
  const ModelConfig& src = source.config();
  const std::string refusal = conversion_refusal(src, method);
  NL_USAGE(refusal.empty(), "cannot convert {}: {}", method == ConvertMethod::exact ? "exactly" : "naively", refusal);
  Values v;
  for (const Tensor& p : source.params().all()) v[p.name()] = p.to_vector();
  const size_t d = size_t(src.d_model);

  Conversion out;
  out.config = src;
  out.config.norm = NormKind::rmsnorm;
  out.config.norm_eps = src.eps();  // the LayerNorm's eps, not RMSNorm's default
  if (method == ConvertMethod::exact) {
    out.config.head_bias = true;
    if (!v.count("head.b")) v["head.b"] = std::vector<double>(size_t(src.vocab), 0.0);
    for (int64_t l = 0; l < src.layers; ++l) {
      const std::string b = fmt::format("blocks.{}.", l);
      const std::vector<double>& beta1 = v.at(b + "norm1.beta");
      const std::vector<double>& beta2 = v.at(b + "norm2.beta");
      if (src.model == ModelKind::gpt) {
        for (const char* proj : {"attn.q", "attn.k", "attn.v"}) fold(v.at(b + proj + ".b"), v.at(b + proj + ".w"), beta1);
      } else {
        fold(v.at(b + "mix.b"), v.at(b + "mix.w"), beta1);  // the prefix mean passes a constant beta through
      }
      fold(v.at(b + "mlp.fc1.b"), v.at(b + "mlp.fc1.w"), beta2);
      for (const char* writer : {src.model == ModelKind::gpt ? "attn.o" : "mix", "mlp.fc2"}) {
        centre_outputs(v.at(b + writer + ".w"), d);
        centre_rows(v.at(b + writer + ".b"), d);
      }
    }
    fold(v.at("head.b"), v.at("head.w"), v.at("final_norm.beta"));
    centre_rows(v.at("tok_emb"), d);
    centre_rows(v.at("pos_emb"), d);
  }
  // The converted model's parameters, by name; every LayerNorm beta is dropped.
  return rebuild(out.config, v, std::nullopt);
}

Conversion convert_rmsnorm_to_layernorm(Model& source) {
  const ModelConfig& src = source.config();
  NL_USAGE(src.norm == NormKind::rmsnorm, "cannot convert to layernorm: the model's norm is {}, not rmsnorm",
           to_string(src.norm));
  Values v;
  for (const Tensor& p : source.params().all()) v[p.name()] = p.to_vector();
  ModelConfig config = src;
  config.norm = NormKind::layernorm;
  config.norm_eps = src.eps();
  return rebuild(config, v, 0.0);  // every beta 0
}

Conversion convert_gain_parametrization(Model& source, bool to_offset) {
  const ModelConfig& src = source.config();
  NL_USAGE(src.norm == NormKind::rmsnorm || src.norm == NormKind::layernorm,
           "cannot convert the gain parametrization: the model's norm is {} (gemma_norm is for rmsnorm and layernorm)",
           to_string(src.norm));
  NL_USAGE(src.gain_offset() != to_offset, "the model's gains are already {}",
           to_offset ? "Gemma's 1 + w (gemma_norm true)" : "plain (gemma_norm unset)");
  Values v;
  for (const Tensor& p : source.params().all()) v[p.name()] = p.to_vector();
  ModelConfig config = src;
  if (to_offset)
    config.gemma_norm = true;
  else
    config.gemma_norm.reset();
  // A norm's gain is named <norm>.gamma (plain) or <norm>.w (Gemma): renamed and shifted by 1.
  const std::string from = to_offset ? ".gamma" : ".w", to = to_offset ? ".w" : ".gamma";
  const double shift = to_offset ? -1.0 : 1.0;
  Model target(config, 0);
  Values out;
  for (const Tensor& p : target.params().all()) {
    const std::string& n = p.name();
    if (v.count(n)) {
      out[n] = v.at(n);
      continue;
    }
    NL_CHECK(n.size() > to.size() && n.compare(n.size() - to.size(), to.size(), to) == 0,
             "convert: no source value for {}", n);
    std::vector<double> g = v.at(n.substr(0, n.size() - to.size()) + from);
    for (double& x : g) x = static_cast<double>(static_cast<float>(x + shift));
    out[n] = std::move(g);
  }
  return rebuild(config, out, std::nullopt);
}

bool stream_centred(Model& model, double tolerance) {
  const ModelConfig& c = model.config();
  const size_t d = size_t(c.d_model);
  std::map<std::string, Tensor> by_name;
  for (const Tensor& p : model.params().all()) by_name[p.name()] = p;
  auto centred = [&](const std::string& name, bool rows) {
    auto it = by_name.find(name);
    return it == by_name.end() || off_centre(it->second.to_vector(), d, rows) <= tolerance;
  };
  if (!centred("tok_emb", true) || !centred("pos_emb", true)) return false;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = fmt::format("blocks.{}.", l);
    for (const char* writer : {c.model == ModelKind::gpt ? "attn.o" : "mix", "mlp.fc2"})
      if (!centred(b + writer + ".w", false) || !centred(b + writer + ".b", true)) return false;
  }
  return true;
}

double validation_loss(const TrainConfig& cfg, Model& model) {
  std::unique_ptr<DataSource> data = make_data_source(cfg);
  NoGradGuard no_grad;
  double total = 0;
  for (int64_t i = 0; i < cfg.eval_batches; ++i) {
    Batch b = data->val_batch(i, cfg.batch_size, cfg.model.seq_len);
    total += model.loss(b.inputs, b.targets).item();
  }
  return total / double(cfg.eval_batches);
}

}  // namespace normlab
