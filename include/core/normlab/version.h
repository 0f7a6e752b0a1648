// Build provenance (this binary) and the machine it runs on; the libraries' versions are the
// about unit's (include/about/normlab/about.h).
#pragma once
#include <string>
#include <vector>

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
// The CPU as /proc/cpuinfo names it (its first processor): what a result must record for a
// reader to know which kernels could have run, since rounding differs between ISA paths.
struct CpuInfo {
  std::string vendor, family, model, stepping, name;  // vendor_id, cpu family, model, stepping, model name
  // The flags that decide a kernel path, of those the CPU has: sse4_2 avx avx2 fma avx_vnni avx512f
  // avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile amx_bf16.
  std::vector<std::string> isa;
};
const CpuInfo& cpu_info();
std::string cpu_model();        // cpu_info().name, or "unknown"
std::string host_name();

}  // namespace normlab
