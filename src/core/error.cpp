#include "normlab/error.h"

#include <algorithm>
#include <cstring>

namespace normlab {

std::string shown(const std::string& text, size_t max) {
  std::string out;
  const size_t n = std::min(text.size(), max);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  if (text.size() > max) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace normlab

namespace normlab::detail {

void check_failed(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error(fmt::format("{} [{}:{}]", message, base ? base + 1 : file, line));
}

}  // namespace normlab::detail
