#include "normlab/nn_kinds.h"

namespace normlab {

template <>
const EnumNames& enum_names<ModelKind>() {
  static const EnumNames t{"model",
                           {{ModelKind::toy, "toy", {}, "causal prefix-mean mixing + Linear instead of attention"},
                            {ModelKind::gpt, "gpt", {}, "causal multi-head self-attention"},
                            {ModelKind::encdec, "encdec", {},
                             "encoder-decoder Transformer with cross-attention, for data copy, reverse or translate"}}};
  return t;
}
template <>
const EnumNames& enum_names<FinalNorm>() {
  static const EnumNames t{"final_norm",
                           {{FinalNorm::auto_, "auto", {}, "on for pre, sandwich, postsub and mixln; off for post and deepnorm"},
                            {FinalNorm::on, "on", {"true"}, "the blocks' norm before the head"},
                            {FinalNorm::off, "off", {"false"}, "no norm before the head"},
                            {FinalNorm::layernorm, "layernorm", {"ln"}, "a LayerNorm before the head, whatever the blocks use"},
                            {FinalNorm::rmsnorm, "rmsnorm", {"rms"}, "an RMSNorm before the head, whatever the blocks use"}}};
  return t;
}
template <>
const EnumNames& enum_names<InitScheme>() {
  static const EnumNames t{
      "init",
      {{InitScheme::gpt2, "gpt2", {}, "N(0, 0.02), residual projections N(0, 0.02/sqrt(2L))"},
       {InitScheme::xavier, "xavier", {}, "normal Xavier"},
       {InitScheme::torch, "torch", {}, "PyTorch's defaults: Linear U(+-1/sqrt(fan_in)), Embedding N(0, 1)"},
       {InitScheme::fairseq, "fairseq", {}, "Xavier-uniform linears, embeddings N(0, 1/d) times sqrt(d)"}}};
  return t;
}

template <>
const EnumNames& enum_names<ResidualScale>() {
  static const EnumNames t{
      "residual_scale",
      {{ResidualScale::none, "none", {}, "x + F(...)"},
       {ResidualScale::rezero, "rezero", {}, "ReZero: x + a F(x), one scalar a per block, init 0, no norm"},
       {ResidualScale::skipinit, "skipinit", {}, "SkipInit: x + a F(...), one scalar per sublayer, init 0"},
       {ResidualScale::layerscale, "layerscale", {}, "LayerScale: x + diag(lambda) F(...), lambda init layerscale_init"}}};
  return t;
}

}  // namespace normlab
