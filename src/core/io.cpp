// Atomic writes and whole-file reads.
#include "normlab/io.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "normlab/error.h"

namespace normlab {

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    NL_USAGE(out.good(), "cannot write '{}' (does the directory exist?)", path);
    out << text;
    out.flush();
    NL_USAGE(out.good(), "writing '{}' failed", path);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw UsageError(fmt::format("cannot write '{}'", path));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NL_USAGE(in.good(), "cannot read '{}': no such file or not readable", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  NL_USAGE(!in.bad(), "reading '{}' failed", path);
  return text;
}

}  // namespace normlab
