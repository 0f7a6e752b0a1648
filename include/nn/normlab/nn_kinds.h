// nn's vocabulary: the model, its final norm and its init scheme, as a user names them in a
// config or on a command line. One name table each (src/nn/nn_kinds.cpp), spelled through names.h.
#pragma once
#include "normlab/kinds.h"
#include "normlab/names.h"

namespace normlab {

enum class ModelKind { toy, gpt, encdec };
// on: the blocks' norm before the head; layernorm / rmsnorm: that norm whatever the blocks use (the
// article's no-norm ToyDeepNet keeps a final LayerNorm).
enum class FinalNorm { auto_, on, off, layernorm, rmsnorm };
enum class InitScheme { gpt2, xavier, torch, fairseq };
// A learned scale on each residual branch, x + s * F(...): ReZero (Bachlechner et al. 2020, one
// scalar per block, init 0, no norm), SkipInit (De & Smith 2020, one scalar per sublayer, init 0),
// LayerScale (CaiT, Touvron et al. 2021, a vector per sublayer, init layerscale_init).
enum class ResidualScale { none, rezero, skipinit, layerscale };

template <>
const EnumNames& enum_names<ModelKind>();
template <>
const EnumNames& enum_names<FinalNorm>();
template <>
const EnumNames& enum_names<InitScheme>();
template <>
const EnumNames& enum_names<ResidualScale>();

}  // namespace normlab
