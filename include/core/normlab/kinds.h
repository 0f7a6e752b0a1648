// The vocabulary of a configuration: every enumeration a user names on a command line or in a
// config file (model, norm, placement, final norm, init, optimizer, schedule, data source). Each
// has ONE name table (kinds.cpp) from which its printer, its parser, its error message and its
// --help text are made, so a new value is added in one place.
#pragma once
#include <string>

namespace normlab {

enum class ModelKind { toy, gpt };
enum class NormKind { none, layernorm, rmsnorm };
enum class Placement { pre, post, sandwich, deepnorm };
enum class FinalNorm { auto_, on, off };
enum class InitScheme { gpt2, xavier };
enum class OptimizerKind { adam, adamw };
enum class Schedule { constant, cosine };
enum class DataKind { synthetic, text };

const char* to_string(ModelKind v);
const char* to_string(NormKind v);
const char* to_string(Placement v);
const char* to_string(FinalNorm v);
const char* to_string(InitScheme v);
const char* to_string(OptimizerKind v);
const char* to_string(Schedule v);
const char* to_string(DataKind v);

// The value named `text` (or one of its aliases, such as "ln" for layernorm); otherwise a
// UsageError: "norm 'x' is not one of none, layernorm, rmsnorm".
template <class E>
E parse_kind(const std::string& text);
// "none, layernorm, rmsnorm"
template <class E>
std::string kind_choices();
// "none | layernorm | rmsnorm: <what each is>", for --help and the config key table.
template <class E>
std::string kind_help();

}  // namespace normlab
