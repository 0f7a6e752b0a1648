#include "normlab/train_kinds.h"

namespace normlab {

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
                            {Schedule::cosine, "cosine", {}, "cosine from the peak to min_lr (default 0) at the last step"}}};
  return t;
}
template <>
const EnumNames& enum_names<WeightDecayOn>() {
  static const EnumNames t{"weight_decay_on",
                           {{WeightDecayOn::all, "all", {}, "every parameter"},
                            {WeightDecayOn::matrices, "matrices", {},
                             "parameters of 2 or more dimensions: the linear layers' weights and the embeddings, "
                             "not biases, norm parameters or residual scales (nanoGPT's configure_optimizers)"}}};
  return t;
}
template <>
const EnumNames& enum_names<DataKind>() {
  static const EnumNames t{"data",
                           {{DataKind::synthetic, "synthetic", {}, "the synthetic topic/permutation task"},
                            {DataKind::text, "text", {}, "text:PATH, byte-level language modelling on a file"},
                            {DataKind::copy, "copy", {}, "encdec: the target is the source"},
                            {DataKind::reverse, "reverse", {}, "encdec: the target is the source reversed"},
                            {DataKind::translate, "translate", {},
                             "encdec: each window of 3 source tokens reversed, then a fixed random mapping"}}};
  return t;
}
template <>
const EnumNames& enum_names<Tokenizer>() {
  static const EnumNames t{"tokenizer",
                           {{Tokenizer::bytes, "bytes", {}, "one token per byte (vocab 256)"},
                            {Tokenizer::chars, "chars", {},
                             "one token per character (UTF-8 code point), ids in the order of `vocabulary`: by "
                             "default the text's characters sorted (nanoGPT's shakespeare_char)"}}};
  return t;
}
template <>
const EnumNames& enum_names<ResidualDtype>() {
  static const EnumNames t{"residual_dtype",
                           {{ResidualDtype::format, "format", {}, "the residual stream in the run's precision"},
                            {ResidualDtype::fp32, "fp32", {}, "the residual stream in float32 (PyTorch autocast's)"}}};
  return t;
}
template <>
const EnumNames& enum_names<LossScaling>() {
  static const EnumNames t{"loss_scale",
                           {{LossScaling::none, "none", {}, "gradients of the unscaled loss"},
                            {LossScaling::dynamic, "dynamic", {}, "PyTorch GradScaler's dynamic loss scaling"}}};
  return t;
}

}  // namespace normlab
