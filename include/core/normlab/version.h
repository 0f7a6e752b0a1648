// Build provenance (this binary) and the machine it runs on; the libraries' versions are the
// about unit's (include/about/normlab/about.h).
#pragma once
#include <string>

namespace normlab {

struct BuildInfo {
  std::string normlab_version;  // project version from CMake
  std::string git_commit;       // `git describe --always --dirty` at build time, or "unknown"
  // SHA-256 (64 hex digits) of the sources the binary was built from: src/, include/, cmake/ and
  // CMakeLists.txt, each file's path and contents (cmake/git_commit.cmake). Names the code of a
  // "-dirty" commit too.
  std::string source_hash;
  std::string compiler;         // e.g. "GCC 12.2.0"
  std::string build_type;       // Release, Debug, ...
  bool cuda_built = false;      // CUDA sources compiled in
  bool sanitizers = false;
};

const BuildInfo& build_info();
std::string cpu_model();        // from /proc/cpuinfo
std::string host_name();

}  // namespace normlab
