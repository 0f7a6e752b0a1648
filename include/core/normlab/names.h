// The one mechanism that spells an enumeration a user names (on a command line,
// in a config file, in a JSON document): each enumeration has ONE name table,
// written in the .cpp of the layer that owns the enumeration, and its printer,
// parser, error message and --help text are all made from it here, so a new
// value is added in one place and every command accepts the same spellings.
//
// Parsing is case-insensitive and accepts the table's aliases ("ln",
// "LayerNorm" and "layernorm" all name NormKind::layernorm); printing gives the
// canonical lower-case name.
//
// The owner declares the table next to the enumeration and defines it in its
// .cpp:
//   enum class Pass { fwd, bwd };
//   template <> const EnumNames& enum_names<Pass>();            // header
//   template <> const EnumNames& enum_names<Pass>() {           // .cpp
//     static const EnumNames t{"pass", {{Pass::fwd, "fwd", {"forward"}, "the
//     forward pass"}, ...}}; return t;
//   }
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace normlab {

struct EnumName {
  int value;
  const char* name;                   // canonical spelling, printed
  std::vector<const char* > aliases;  // other accepted spellings
  const char* help;                   // one phrase for --help and the config key table

  template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
  EnumName(E v, const char* n, std::initializer_list<const char* > a, const char* h)
      : value(static_cast<int>(v)), name(n), aliases(a), help(h) {}
};

struct EnumNames {
  const char* what;  // the thing named, as in the config key: "norm",
                     // "placement", "format"
  std::vector<EnumName> names;
};

// ASCII letters compared without case: the names tables' rule, for the few words a flag accepts
// beside a table's names ("all", "both").
bool same_ignoring_case(const std::string& a, const std::string& b);

// Defined (specialized) once per enumeration, by the layer that owns it.
template <class E>
const EnumNames& enum_names();

namespace names_detail {
const char* name_of(const EnumNames& t, int value);
int parse(const EnumNames& t, const std::string& text);
std::optional<int> find(const EnumNames& t, const std::string& text);
std::string choices(const EnumNames& t, const char* sep);
std::string help(const EnumNames& t);
}  // namespace names_detail

// "layernorm"; "?" for a value outside the table.
template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
const char* to_string(E v) {
  return names_detail::name_of(enum_names<E>(), static_cast<int>(v));
}

// The value named `text` or one of its aliases, in any case; otherwise a
// UsageError: "norm 'x' is not one of none, layernorm, rmsnorm".
template <class E>
E parse_kind(const std::string& text) {
  return static_cast<E>(names_detail::parse(enum_names<E>(), text));
}

// As parse_kind, but empty instead of an error: for a caller that accepts words beyond the table
// ("both") or only part of it, and says so in its own error.
template <class E>
std::optional<E> try_parse_kind(const std::string& text) {
  if (std::optional<int> v = names_detail::find(enum_names<E>(), text)) return static_cast<E>(*v);
  return std::nullopt;
}

// "none, layernorm, rmsnorm"
template <class E>
std::string kind_choices() {
  return names_detail::choices(enum_names<E>(), ", ");
}

// "none | layernorm | rmsnorm (none: ...; layernorm: ...)", for --help and the
// config key table.
template <class E>
std::string kind_help() {
  return names_detail::help(enum_names<E>());
}

// Every value of E, in table order (for --help lists, sweeps over all values,
// tests).
template <class E>
std::vector<E> kind_values() {
  std::vector<E> out;
  for (const EnumName& n : enum_names<E>().names) out.push_back(static_cast<E>(n.value));
  return out;
}

}  // namespace normlab
