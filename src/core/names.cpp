#include "normlab/names.h"

#include <fmt/format.h>

#include "normlab/error.h"

namespace normlab {

bool same_ignoring_case(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

namespace names_detail {

const char* name_of(const EnumNames& t, int value) {
  for (const EnumName& n : t.names)
    if (n.value == value) return n.name;
  return "?";
}

std::optional<int> find(const EnumNames& t, const std::string& text) {
  for (const EnumName& n : t.names) {
    if (same_ignoring_case(n.name, text)) return n.value;
    for (const char* alias : n.aliases)
      if (same_ignoring_case(alias, text)) return n.value;
  }
  return std::nullopt;
}

int parse(const EnumNames& t, const std::string& text) {
  if (std::optional<int> v = find(t, text)) return *v;
  throw UsageError(fmt::format("{} '{}' is not one of {}", t.what, shown(text), choices(t, ", ")));
}

std::string choices(const EnumNames& t, const char* sep) {
  std::string s;
  for (const EnumName& n : t.names) s += (s.empty() ? "" : sep) + std::string(n.name);
  return s;
}

std::string help(const EnumNames& t) {
  std::string helps;
  for (const EnumName& n : t.names) {
    // An alias is named beside its value, so that `peri` or `olmo2` in a config can be found in --help.
    std::string also;
    for (const char* alias : n.aliases) also += (also.empty() ? " (or " : ", ") + std::string(alias);
    helps += fmt::format("{}{}{}: {}", helps.empty() ? "" : "; ", n.name, also.empty() ? "" : also + ")", n.help);
  }
  return choices(t, " | ") + " (" + helps + ")";
}

}  // namespace names_detail
}  // namespace normlab
