#include "normlab/error.h"

#include <cstring>

namespace normlab::detail {

void check_failed(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error(fmt::format("{} [{}:{}]", message, base ? base + 1 : file, line));
}

}  // namespace normlab::detail
