#include "normlab/kinds.h"

namespace normlab {

template <>
const EnumNames& enum_names<ModelKind>() {
  static const EnumNames t{"model",
                           {{ModelKind::toy, "toy", {}, "causal prefix-mean mixing + Linear instead of attention"},
                            {ModelKind::gpt, "gpt", {}, "causal multi-head self-attention"}}};
  return t;
}
template <>
const EnumNames& enum_names<NormKind>() {
  static const EnumNames t{
      "norm",
      {{NormKind::none, "none", {}, "no normalization"},
       {NormKind::layernorm, "layernorm", {"ln"}, "LayerNorm: centred, scaled, gain and bias"},
       {NormKind::rmsnorm, "rmsnorm", {"rms"}, "RMSNorm: scaled by the root mean square, gain only"}}};
  return t;
}
template <>
const EnumNames& enum_names<Placement>() {
  static const EnumNames t{"placement",
                           {{Placement::pre, "pre", {}, "x + F(N(x))"},
                            {Placement::post, "post", {}, "N(x + F(x))"},
                            {Placement::sandwich, "sandwich", {}, "x + N2(F(N1(x)))"},
                            {Placement::deepnorm, "deepnorm", {}, "N(alpha x + F(x)), DeepNet's alpha and init"}}};
  return t;
}
template <>
const EnumNames& enum_names<FinalNorm>() {
  static const EnumNames t{"final_norm",
                           {{FinalNorm::auto_, "auto", {}, "on for pre and sandwich, off for post and deepnorm"},
                            {FinalNorm::on, "on", {"true"}, "a norm before the head"},
                            {FinalNorm::off, "off", {"false"}, "no norm before the head"}}};
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
const EnumNames& enum_names<OptimizerKind>() {
  static const EnumNames t{"optimizer",
                           {{OptimizerKind::adam, "adam", {}, "Adam, weight decay as L2 on the gradient"},
                            {OptimizerKind::adamw, "adamw", {}, "AdamW, decoupled weight decay"}}};
  return t;
}
template <>
const EnumNames& enum_names<Schedule>() {
  static const EnumNames t{"schedule",
                           {{Schedule::constant, "constant", {}, "the peak lr after warm-up"},
                            {Schedule::cosine, "cosine", {}, "cosine from the peak to 0 at the last step"}}};
  return t;
}
template <>
const EnumNames& enum_names<DataKind>() {
  static const EnumNames t{"data",
                           {{DataKind::synthetic, "synthetic", {}, "the synthetic topic/permutation task"},
                            {DataKind::text, "text", {}, "text:PATH, byte-level language modelling on a file"}}};
  return t;
}

}  // namespace normlab
