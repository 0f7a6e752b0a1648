// nn's vocabulary: the model, its final norm and its init scheme, as a user names them in a
// config or on a command line. One name table each (src/nn/nn_kinds.cpp), spelled through names.h.
#pragma once
#include "normlab/kinds.h"
#include "normlab/names.h"

namespace normlab {

enum class ModelKind { toy, gpt };
// on: the blocks' norm before the head; layernorm / rmsnorm: that norm whatever the blocks use (the
// article's no-norm ToyDeepNet keeps a final LayerNorm).
enum class FinalNorm { auto_, on, off, layernorm, rmsnorm };
enum class InitScheme { gpt2, xavier, torch, fairseq };

template <>
const EnumNames& enum_names<ModelKind>();
template <>
const EnumNames& enum_names<FinalNorm>();
template <>
const EnumNames& enum_names<InitScheme>();

}  // namespace normlab
