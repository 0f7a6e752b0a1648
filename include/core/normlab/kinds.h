// The vocabulary of a configuration: every enumeration a user names on a
// command line or in a config file (model, norm, placement, final norm, init,
// optimizer, schedule, data source). Each has ONE name table (kinds.cpp),
// spelled through names.h.
#pragma once
#include <string>

#include "normlab/names.h"

namespace normlab {

enum class ModelKind { toy, gpt };
enum class NormKind { none, layernorm, rmsnorm };
enum class Placement { pre, post, sandwich, deepnorm };
enum class FinalNorm { auto_, on, off };
enum class InitScheme { gpt2, xavier, torch, fairseq };
enum class OptimizerKind { adam, adamw };
enum class Schedule { constant, cosine };
enum class DataKind { synthetic, text };

template <>
const EnumNames& enum_names<ModelKind>();
template <>
const EnumNames& enum_names<NormKind>();
template <>
const EnumNames& enum_names<Placement>();
template <>
const EnumNames& enum_names<FinalNorm>();
template <>
const EnumNames& enum_names<InitScheme>();
template <>
const EnumNames& enum_names<OptimizerKind>();
template <>
const EnumNames& enum_names<Schedule>();
template <>
const EnumNames& enum_names<DataKind>();

}  // namespace normlab
