// train's vocabulary: the optimizer, its learning-rate schedule and the data source, as a user
// names them in a config or on a command line. One name table each (src/train/train_kinds.cpp),
// spelled through names.h.
#pragma once
#include "normlab/names.h"

namespace normlab {

enum class OptimizerKind { adam, adamw };
enum class Schedule { constant, cosine };
// Which parameters weight decay applies to.
enum class WeightDecayOn { all, matrices };
// copy, reverse, translate: the sequence-to-sequence tasks of model encdec (Seq2SeqSpec).
enum class DataKind { synthetic, text, copy, reverse, translate };
// How text becomes token ids (text_tokens.h).
enum class Tokenizer { bytes, chars };
// Low precision: the residual stream's format, and whether the loss is scaled (docs/precision.md).
enum class ResidualDtype { format, fp32 };
enum class LossScaling { none, dynamic };

template <>
const EnumNames& enum_names<OptimizerKind>();
template <>
const EnumNames& enum_names<Schedule>();
template <>
const EnumNames& enum_names<WeightDecayOn>();
template <>
const EnumNames& enum_names<DataKind>();
template <>
const EnumNames& enum_names<Tokenizer>();
template <>
const EnumNames& enum_names<ResidualDtype>();
template <>
const EnumNames& enum_names<LossScaling>();

}  // namespace normlab
