#include "normlab/kinds.h"

#include <fmt/format.h>

#include <vector>

#include "normlab/error.h"

namespace normlab {

namespace {

template <class E>
struct Name {
  E value;
  const char* name;
  const char* alias;  // another accepted spelling, or nullptr
  const char* help;
};

template <class E>
struct Table {
  const char* what;  // the config key
  std::vector<Name<E>> names;
};

// The name tables: the only place a value's spelling is written.
template <class E>
const Table<E>& table();

template <>
const Table<ModelKind>& table() {
  static const Table<ModelKind> t{"model",
                                  {{ModelKind::toy, "toy", nullptr, "causal prefix-mean mixing + Linear instead of attention"},
                                   {ModelKind::gpt, "gpt", nullptr, "causal multi-head self-attention"}}};
  return t;
}
template <>
const Table<NormKind>& table() {
  static const Table<NormKind> t{"norm",
                                 {{NormKind::none, "none", nullptr, "no normalization"},
                                  {NormKind::layernorm, "layernorm", "ln", "LayerNorm: centred, scaled, gain and bias"},
                                  {NormKind::rmsnorm, "rmsnorm", "rms", "RMSNorm: scaled by the root mean square, gain only"}}};
  return t;
}
template <>
const Table<Placement>& table() {
  static const Table<Placement> t{"placement",
                                  {{Placement::pre, "pre", nullptr, "x + F(N(x))"},
                                   {Placement::post, "post", nullptr, "N(x + F(x))"},
                                   {Placement::sandwich, "sandwich", nullptr, "x + N2(F(N1(x)))"},
                                   {Placement::deepnorm, "deepnorm", nullptr, "N(alpha x + F(x)), DeepNet's alpha and init"}}};
  return t;
}
template <>
const Table<FinalNorm>& table() {
  static const Table<FinalNorm> t{"final_norm",
                                  {{FinalNorm::auto_, "auto", nullptr, "on for pre and sandwich, off for post and deepnorm"},
                                   {FinalNorm::on, "on", "true", "a norm before the head"},
                                   {FinalNorm::off, "off", "false", "no norm before the head"}}};
  return t;
}
template <>
const Table<InitScheme>& table() {
  static const Table<InitScheme> t{"init",
                                   {{InitScheme::gpt2, "gpt2", nullptr, "N(0, 0.02), residual projections N(0, 0.02/sqrt(2L))"},
                                    {InitScheme::xavier, "xavier", nullptr, "normal Xavier"},
                                    {InitScheme::torch, "torch", nullptr, "PyTorch's defaults: Linear U(+-1/sqrt(fan_in)), Embedding N(0, 1)"},
                                    {InitScheme::fairseq, "fairseq", nullptr, "Xavier-uniform linears, embeddings N(0, 1/d) times sqrt(d)"}}};
  return t;
}
template <>
const Table<OptimizerKind>& table() {
  static const Table<OptimizerKind> t{"optimizer",
                                      {{OptimizerKind::adam, "adam", nullptr, "Adam, weight decay as L2 on the gradient"},
                                       {OptimizerKind::adamw, "adamw", nullptr, "AdamW, decoupled weight decay"}}};
  return t;
}
template <>
const Table<Schedule>& table() {
  static const Table<Schedule> t{"schedule",
                                 {{Schedule::constant, "constant", nullptr, "the peak lr after warm-up"},
                                  {Schedule::cosine, "cosine", nullptr, "cosine from the peak to 0 at the last step"}}};
  return t;
}
template <>
const Table<DataKind>& table() {
  static const Table<DataKind> t{"data",
                                 {{DataKind::synthetic, "synthetic", nullptr, "the synthetic topic/permutation task"},
                                  {DataKind::text, "text", nullptr, "text:PATH, byte-level language modelling on a file"}}};
  return t;
}

template <class E>
const char* name_of(E v) {
  for (const Name<E>& n : table<E>().names)
    if (n.value == v) return n.name;
  return "?";
}

}  // namespace

const char* to_string(ModelKind v) { return name_of(v); }
const char* to_string(NormKind v) { return name_of(v); }
const char* to_string(Placement v) { return name_of(v); }
const char* to_string(FinalNorm v) { return name_of(v); }
const char* to_string(InitScheme v) { return name_of(v); }
const char* to_string(OptimizerKind v) { return name_of(v); }
const char* to_string(Schedule v) { return name_of(v); }
const char* to_string(DataKind v) { return name_of(v); }

template <class E>
std::string kind_choices() {
  std::string s;
  for (const Name<E>& n : table<E>().names) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

template <class E>
std::string kind_help() {
  std::string names, helps;
  for (const Name<E>& n : table<E>().names) {
    names += (names.empty() ? "" : " | ") + std::string(n.name);
    helps += fmt::format("{}{}: {}", helps.empty() ? "" : "; ", n.name, n.help);
  }
  return names + " (" + helps + ")";
}

template <class E>
E parse_kind(const std::string& text) {
  const Table<E>& t = table<E>();
  for (const Name<E>& n : t.names)
    if (text == n.name || (n.alias != nullptr && text == n.alias)) return n.value;
  throw UsageError(fmt::format("{} '{}' is not one of {}", t.what, shown(text), kind_choices<E>()));
}

#define NL_KIND(E)                                  \
  template E parse_kind<E>(const std::string&);     \
  template std::string kind_choices<E>();           \
  template std::string kind_help<E>();
NL_KIND(ModelKind)
NL_KIND(NormKind)
NL_KIND(Placement)
NL_KIND(FinalNorm)
NL_KIND(InitScheme)
NL_KIND(OptimizerKind)
NL_KIND(Schedule)
NL_KIND(DataKind)
#undef NL_KIND

}  // namespace normlab
