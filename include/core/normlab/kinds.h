// The vocabulary core itself shares with handcalc (which links only core): which norm and where
// it sits in a block. nn's and train's enumerations live with them (nn_kinds.h, train_kinds.h).
// Each has ONE name table (kinds.cpp), spelled through names.h.
#pragma once
#include <string>

#include "normlab/names.h"

namespace normlab {

// dyt, derf: the elementwise normalizers of 2025 (no statistics: gamma * f(alpha*x [+ s]) + beta).
enum class NormKind { none, layernorm, rmsnorm, dyt, derf, seednorm };
// postsub: OLMo 2's x + N(F(x)); mixln: Mix-LN, post in the first blocks and pre after.
enum class Placement { pre, post, sandwich, deepnorm, postsub, mixln };

template <>
const EnumNames& enum_names<NormKind>();
template <>
const EnumNames& enum_names<Placement>();

// The eps a norm uses when none is given: LayerNorm 1e-5, as PyTorch's nn.LayerNorm, and RMSNorm
// (and SeeDNorm, an RMSNorm whose gain depends on the input) 1e-6, as LLaMA's, so that a run
// compares with those implementations at their defaults. 0 for none, DyT and Derf (no statistics).
double default_eps(NormKind kind);
// Whether the norm adds an eps to a statistic (LayerNorm, RMSNorm, SeeDNorm); none, DyT and Derf
// have none.
bool has_eps(NormKind kind);

}  // namespace normlab
