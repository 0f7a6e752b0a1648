// Runtime provenance: the oneDNN library actually loaded, the CPU, the host.
#include "normlab/version.h"

#include <unistd.h>

#include <dnnl.hpp>
#include <fmt/core.h>

#include <fstream>

#include "normlab/cuda.h"

namespace normlab {

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::string version_text() {
  const BuildInfo& b = build_info();
  std::string s = fmt::format("normlab {} (commit {})\n", b.normlab_version, b.git_commit);
  s += fmt::format("oneDNN {}\n", onednn_version());
  s += fmt::format("compiler {} ({} build{})\n", b.compiler, b.build_type, b.sanitizers ? ", ASan+UBSan" : "");
  s += fmt::format("CUDA {}\n", cuda_summary());
  return s;
}

}  // namespace normlab
