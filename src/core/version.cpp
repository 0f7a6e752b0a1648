// Machine provenance: the CPU and the host (the libraries' versions are asked by the about unit).
#include "normlab/version.h"

#include <unistd.h>

#include <fstream>

namespace normlab {

const CpuInfo& cpu_info() {
  static const CpuInfo info = [] {
    CpuInfo c;
    std::ifstream in("/proc/cpuinfo");
    std::string line, flags;
    auto value = [](const std::string& l) {
      const size_t colon = l.find(':');
      return colon == std::string::npos || colon + 2 > l.size() ? std::string() : l.substr(colon + 2);
    };
    // The first processor's block: a blank line ends it.
    while (std::getline(in, line) && line.find_first_not_of(" \t") != std::string::npos) {
      if (line.rfind("vendor_id", 0) == 0) c.vendor = value(line);
      else if (line.rfind("cpu family", 0) == 0) c.family = value(line);
      else if (line.rfind("model name", 0) == 0) c.name = value(line);
      else if (line.rfind("model", 0) == 0) c.model = value(line);
      else if (line.rfind("stepping", 0) == 0) c.stepping = value(line);
      else if (line.rfind("flags", 0) == 0) flags = " " + value(line) + " ";
    }
    for (const char* f : {"sse4_2", "avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                          "avx512_bf16", "amx_tile", "amx_bf16"})
      if (flags.find(std::string(" ") + f + " ") != std::string::npos) c.isa.push_back(f);
    return c;
  }();
  return info;
}

std::string cpu_model() { return cpu_info().name.empty() ? "unknown" : cpu_info().name; }

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace normlab
