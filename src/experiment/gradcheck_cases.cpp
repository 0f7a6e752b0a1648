// The cases gradcheck knows: every op, then blocks in each placement and whole-model losses.
// The ops come from the op-case registry's grad forms (normlab/opcases.h); the blocks and the
// models are declared here.
#include <memory>

#include "normlab/encdec.h"
#include "normlab/gradcheck.h"
#include "normlab/nn.h"
#include "normlab/opcases.h"
#include "normlab/ops.h"
#include "normlab/rng.h"

namespace normlab {

namespace {

// Draws a block's x and a model's ids in double so that a float32 and a float64 instance hold the
// same values.
struct Draw {
  Rng rng;
  DType dtype;
  Tensor normal(const Shape& s, double mean = 0.0, double std = 1.0) {
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    for (double& x : v) x = rng.normal(mean, std);
    return Tensor::from(v, s, dtype).requires_grad_(true);
  }
  Tensor ids(const Shape& s, int64_t bound) {
    std::vector<int32_t> v(static_cast<size_t>(shape_numel(s)));
    for (int32_t& x : v) x = static_cast<int32_t>(rng.below(static_cast<uint32_t>(bound)));
    return Tensor::from_ids(v, s);
  }
};

// The model config a composite case is built with: the case's sizes, float64 or float32.
ModelConfig case_config(const CaseShape& s, DType dtype, ModelKind model, NormKind norm,
                        Placement placement, bool qk_norm) {
  ModelConfig cfg;
  cfg.model = model;
  cfg.norm = norm;
  cfg.placement = placement;
  cfg.qk_norm = qk_norm;
  cfg.layers = s.layers;
  cfg.d_model = s.channels;
  cfg.d_hidden = s.hidden;
  cfg.heads = s.heads;
  cfg.vocab = s.vocab;
  cfg.seq_len = std::max<int64_t>(s.time, 2);
  cfg.dtype = dtype;
  // GPT-2's 0.02 would make each branch tiny next to the identity; xavier exercises every path.
  cfg.init = InitScheme::xavier;
  return cfg;
}

// The hyperparameters of a composite case, for --dump, before any its builder set.
void describe_config(CaseInstance& inst, const ModelConfig& cfg) {
  inst.names = {{"model", to_string(cfg.model)}, {"norm", to_string(cfg.norm)},
                {"placement", to_string(cfg.placement)}, {"init", to_string(cfg.init)}};
  const auto own = inst.numbers;
  inst.numbers = {{"layers", double(cfg.layers)},   {"d_model", double(cfg.d_model)},
                  {"d_hidden", double(cfg.d_hidden)}, {"heads", double(cfg.heads)},
                  {"vocab", double(cfg.vocab)},     {"norm_eps", cfg.eps()},
                  {"qk_norm", cfg.qk_norm ? 1.0 : 0.0}, {"final_norm", cfg.final_norm_on() ? 1.0 : 0.0},
                  {"deepnorm_alpha", cfg.residual_alpha()}};
  inst.numbers.insert(own.begin(), own.end());
}

using CompositeBuilder = std::function<CaseInstance(const ModelConfig&, const CaseShape&, DType, uint64_t seed)>;
// A variant's keys set on the case's config (docs/variants.md).
using Variant = std::function<void(ModelConfig&)>;

// A composite case: the model config of its sizes, norm and placement (and variant), built into
// an instance whose hyperparameters are recorded for --dump.
GradCase composite_case(std::string name, std::string description, ModelKind model, NormKind norm,
                        Placement placement, bool qk_norm, CompositeBuilder build, Variant variant = nullptr) {
  GradCase c;
  c.name = std::move(name);
  c.kind = "composite";
  c.description = std::move(description);
  c.make = [=](const CaseShape& s, DType dtype, uint64_t seed) {
    ModelConfig cfg = case_config(s, dtype, model, norm, placement, qk_norm);
    if (variant) variant(cfg);
    cfg.validate();
    CaseInstance inst = build(cfg, s, dtype, seed);
    describe_config(inst, cfg);
    return inst;
  };
  return c;
}

// A toy or gpt block with the given norm and placement; inputs: x and every block parameter.
GradCase block_case(std::string name, std::string description, ModelKind model, NormKind norm,
                    Placement placement, bool qk_norm, Variant variant = nullptr) {
  return composite_case(std::move(name), std::move(description), model, norm, placement, qk_norm,
                        [](const ModelConfig& cfg, const CaseShape& s, DType dtype, uint64_t seed) {
                          Init init{Rng(seed, stream::init), dtype};
                          auto params = std::make_shared<ParamList>();
                          // The last block: LayerNorm Scaling's 1/sqrt(L), Mix-LN's Pre-LN part.
                          auto block = std::make_shared<Block>(make_block(*params, "block", cfg, init, cfg.layers - 1));
                          // ReZero's and SkipInit's gates start at 0, where F's own gradient is 0:
                          // opened to 0.3 so that the check sees it.
                          if (cfg.residual_scale_kind() == ResidualScale::rezero ||
                              cfg.residual_scale_kind() == ResidualScale::skipinit) {
                            block->branch_scale1.fill_(0.3);
                            block->branch_scale2.fill_(0.3);
                          }
                          Draw d{Rng(seed, stream::check), dtype};
                          Tensor x = d.normal({s.batch, s.time, s.channels});
                          CaseInstance inst({{"x", x}}, [block, params, x] { return (*block)(x); });
                          for (const Tensor& p : params->all()) inst.inputs.push_back({p.name(), p});
                          return inst;
                        },
                        std::move(variant));
}

// The whole model's loss on random ids and targets; inputs: every parameter. With `dropout`, as
// training runs it: every evaluation under a DropoutScope of that rate and one key, so that each
// draws the same masks and the loss is a smooth function of the parameters.
GradCase model_case(std::string name, std::string description, ModelKind model, NormKind norm,
                    Placement placement, bool qk_norm, Variant variant = nullptr, double dropout = 0.0) {
  return composite_case(std::move(name), std::move(description), model, norm, placement, qk_norm,
                        [dropout](const ModelConfig& cfg, const CaseShape& s, DType dtype, uint64_t seed) {
                          auto m = std::make_shared<Model>(cfg, seed);
                          Draw d{Rng(seed, stream::check), dtype};
                          Tensor ids = d.ids({s.batch, s.time}, s.vocab);
                          Tensor targets = d.ids({s.batch, s.time}, s.vocab);
                          CaseInstance inst({}, [m, ids, targets, dropout, seed] {
                            const DropoutScope drop(dropout, seed);
                            return m->loss(ids, targets);
                          });
                          for (const Tensor& p : m->params().all()) inst.inputs.push_back({p.name(), p});
                          inst.constants = {{"ids", ids}, {"targets", targets}};
                          if (dropout > 0) inst.numbers["dropout"] = dropout;
                          return inst;
                        },
                        std::move(variant));
}

// Every op's form of the op-case registry (normlab/opcases.h), in its order, built with the
// case's sizes.
void add_op_cases(std::vector<GradCase>& cs) {
  for (const opcases::GradForm& f : opcases::grad_forms()) {
    GradCase c;
    c.name = f.name;
    c.kind = "op";
    c.description = f.description;
    c.make = [make = f.make](const CaseShape& s, DType dtype, uint64_t seed) {
      return make(opcases::GradSizes{s.batch, s.time, s.channels, s.heads, s.hidden, s.vocab}, dtype, seed);
    };
    cs.push_back(std::move(c));
  }
}

// The encoder-decoder's loss on random sources of T + 2 tokens and targets of T; inputs: every
// parameter. `set` shapes the config beyond the case's sizes; with `dropout`, as model_case.
GradCase encdec_case(std::string name, std::string description, NormKind norm, Placement placement,
                     std::function<void(EncDecConfig&)> set, double dropout = 0.0) {
  GradCase c;
  c.name = std::move(name);
  c.kind = "composite";
  c.description = std::move(description);
  c.make = [=](const CaseShape& s, DType dtype, uint64_t seed) {
    EncDecConfig cfg;
    cfg.model = case_config(s, dtype, ModelKind::gpt, norm, placement, false);
    cfg.model.seq_len = s.time + 2;
    cfg.encoder_layers = cfg.decoder_layers = s.layers;
    if (set) set(cfg);
    auto m = std::make_shared<EncDecModel>(cfg, seed);
    Draw d{Rng(seed, stream::check), dtype};
    const Tensor src = d.ids({s.batch, s.time + 2}, s.vocab), tgt_in = d.ids({s.batch, s.time}, s.vocab);
    const Tensor tgt_out = d.ids({s.batch, s.time}, s.vocab);
    CaseInstance inst({}, [m, src, tgt_in, tgt_out, dropout, seed] {
      const DropoutScope drop(dropout, seed);
      return m->loss(src, tgt_in, tgt_out);
    });
    for (const Tensor& p : m->params().all()) inst.inputs.push_back({p.name(), p});
    inst.constants = {{"src", src}, {"tgt_in", tgt_in}, {"tgt_out", tgt_out}};
    describe_config(inst, cfg.model);
    inst.names["model"] = "encdec";
    inst.numbers.erase("deepnorm_alpha");  // the decoder-only model's; each stack has its own below
    inst.numbers["encoder_layers"] = double(cfg.encoder_layers);
    inst.numbers["decoder_layers"] = double(cfg.decoder_layers);
    inst.numbers["encoder_alpha"] = cfg.encoder_alpha();
    inst.numbers["decoder_alpha"] = cfg.decoder_alpha();
    if (dropout > 0) inst.numbers["dropout"] = dropout;
    return inst;
  };
  return c;
}

// The encoder-decoder's whole-model cases: the original Post-LN, Sandwich with every option, DeepNorm with dropout.
void add_encdec_cases(std::vector<GradCase>& cs) {
  cs.push_back(encdec_case("encdec_post_loss",
                           "encoder-decoder, Post-LN (Vaswani et al.), cross-attention over a longer source, shared "
                           "embeddings + cross-entropy of the targets",
                           NormKind::layernorm, Placement::post, nullptr));
  cs.push_back(encdec_case("encdec_sandwich_loss",
                           "encoder-decoder, Sandwich RMSNorm with QK-Norm on self- and cross-attention, separate "
                           "embeddings, head tied to the target's + cross-entropy",
                           NormKind::rmsnorm, Placement::sandwich, [](EncDecConfig& c) {
                             c.model.qk_norm = true;
                             c.model.tie_embeddings = true;
                             c.shared_embeddings = false;
                           }));
  cs.push_back(encdec_case("encdec_deepnorm_loss",
                           "encoder-decoder, DeepNorm with DeepNet's encoder and decoder constants, dropout 0.3 (one "
                           "mask per call, the same in every evaluation) + cross-entropy",
                           NormKind::layernorm, Placement::deepnorm, nullptr, 0.3));
}

std::vector<GradCase> build_cases() {
  std::vector<GradCase> cs;
  add_op_cases(cs);
  cs.push_back(block_case("block_pre_ln", "toy block, Pre-LN: x + F(LN(x))", ModelKind::toy, NormKind::layernorm,
                          Placement::pre, false));
  cs.push_back(block_case("block_post_ln", "toy block, Post-LN: LN(x + F(x))", ModelKind::toy, NormKind::layernorm,
                          Placement::post, false));
  cs.push_back(block_case("block_sandwich_rms", "toy block, Sandwich RMSNorm: x + N2(F(N1(x)))", ModelKind::toy,
                          NormKind::rmsnorm, Placement::sandwich, false));
  cs.push_back(block_case("block_deepnorm_ln", "toy block, DeepNorm: LN(alpha x + F(x))", ModelKind::toy, NormKind::layernorm,
                          Placement::deepnorm, false));
  cs.push_back(block_case("block_deepnorm_none", "toy block, deepnorm without a norm: x + F(x) (alpha 1)", ModelKind::toy,
                          NormKind::none, Placement::deepnorm, false));
  cs.push_back(block_case("block_post_rms", "toy block, Post-RMSNorm (fused add + RMSNorm)", ModelKind::toy, NormKind::rmsnorm,
                          Placement::post, false));
  cs.push_back(block_case("attn_block_qknorm", "gpt block, Pre-RMSNorm, causal attention with QK-Norm", ModelKind::gpt,
                          NormKind::rmsnorm, Placement::pre, true));
  cs.push_back(block_case("attn_block_post_ln", "gpt block, Post-LN, causal attention", ModelKind::gpt, NormKind::layernorm,
                          Placement::post, false));
  cs.push_back(block_case("block_pre_dyt", "toy block, Pre-DyT: x + F(DyT(x))", ModelKind::toy, NormKind::dyt,
                          Placement::pre, false));
  cs.push_back(block_case("block_post_derf", "toy block, Post-Derf: Derf(x + F(x))", ModelKind::toy, NormKind::derf,
                          Placement::post, false));
  cs.push_back(block_case("block_rezero", "toy block, ReZero: x + a F(x), no norm (a = 0.3, not its init 0)",
                          ModelKind::toy, NormKind::none, Placement::pre, false,
                          [](ModelConfig& c) { c.residual_scale = ResidualScale::rezero; }));
  cs.push_back(block_case("block_skipinit_rms", "toy block, Pre-RMSNorm with SkipInit's scalars (0.3, not their init 0)", ModelKind::toy,
                          NormKind::rmsnorm, Placement::pre, false,
                          [](ModelConfig& c) { c.residual_scale = ResidualScale::skipinit; }));
  cs.push_back(block_case("block_ls_post_ln", "toy block, Post-LN with LayerScale: LN(x + diag(lambda) F(x))",
                          ModelKind::toy, NormKind::layernorm, Placement::post, false, [](ModelConfig& c) {
                            c.residual_scale = ResidualScale::layerscale;
                            c.layerscale_init = 0.5;
                          }));
  cs.push_back(block_case("block_postsub_rms", "toy block, OLMo 2: x + RMSNorm(F(x))", ModelKind::toy, NormKind::rmsnorm,
                          Placement::postsub, false));
  cs.push_back(block_case("block_ln_scaling", "toy block L of L = 2, LayerNorm Scaling: x + F(LN(x) / sqrt(L))",
                          ModelKind::toy, NormKind::layernorm, Placement::pre, false,
                          [](ModelConfig& c) { c.ln_scaling = true; }));
  cs.push_back(block_case("attn_gemma_qknorm", "gpt block, Pre-RMSNorm, Gemma's gains 1 + w, QK-Norm",
                          ModelKind::gpt, NormKind::rmsnorm, Placement::pre, true,
                          [](ModelConfig& c) { c.gemma_norm = true; }));
  cs.push_back(model_case("toy_mixln_loss", "whole toy model, Mix-LN (Post-LN block 1, Pre-LN after) + cross-entropy",
                          ModelKind::toy, NormKind::layernorm, Placement::mixln, false,
                          [](ModelConfig& c) { c.mix_post_layers = 1; }));
  cs.push_back(model_case("toy_peri_dyt_loss", "whole toy model, Peri-DyT with the embedding norm + cross-entropy",
                          ModelKind::toy, NormKind::dyt, Placement::sandwich, false,
                          [](ModelConfig& c) { c.embed_norm = true; }));
  cs.push_back(model_case("toy_model_loss", "whole toy model (Pre-LN, final norm) + cross-entropy", ModelKind::toy,
                          NormKind::layernorm, Placement::pre, false));
  cs.push_back(model_case("gpt_model_loss", "whole gpt model (Pre-RMSNorm, QK-Norm) + cross-entropy", ModelKind::gpt,
                          NormKind::rmsnorm, Placement::pre, true));
  cs.push_back(model_case("gpt_tied_loss",
                          "whole gpt model, Pre-LN, the head tied to the token embedding (nanoGPT) + cross-entropy",
                          ModelKind::gpt, NormKind::layernorm, Placement::pre, false,
                          [](ModelConfig& c) { c.tie_embeddings = true; }));
  cs.push_back(model_case("gpt_nobias_post_loss",
                          "whole gpt model, Post-LN, linears without biases and LayerNorms without beta (nanoGPT's "
                          "bias false) + cross-entropy",
                          ModelKind::gpt, NormKind::layernorm, Placement::post, false,
                          [](ModelConfig& c) { c.bias = false; }));
  cs.push_back(model_case("gpt_dropout_loss",
                          "whole gpt model, Pre-LN, training's dropout 0.3 on the embeddings, the sublayers' outputs "
                          "and attention's probabilities (one mask per call, the same in every evaluation) + "
                          "cross-entropy",
                          ModelKind::gpt, NormKind::layernorm, Placement::pre, false, nullptr, 0.3));
  add_encdec_cases(cs);
  return cs;
}

}  // namespace

const std::vector<GradCase>& gradcheck_cases() {
  static const std::vector<GradCase> cases = build_cases();
  return cases;
}

const GradCase& find_gradcheck_case(const std::string& name) {
  for (const GradCase& c : gradcheck_cases())
    if (c.name == name) return c;
  // The cases that share the name's first word (the family it meant), not all of them: one line.
  const std::string family = name.substr(0, name.find('_'));
  std::string near;
  for (const GradCase& c : gradcheck_cases())
    if (!family.empty() && c.name.compare(0, family.size(), family) == 0) near += (near.empty() ? "" : ", ") + c.name;
  throw UsageError(fmt::format("--op '{}' is not one of the {} gradcheck cases (see `normlab gradcheck --list`){}",
                               shown(name), gradcheck_cases().size(), near.empty() ? "" : "; similar: " + near));
}

}  // namespace normlab
