// What this binary is and runs with: normlab's build, the libraries it loaded (oneDNN, CUDA),
// the machine. The one unit that may ask every layer, so that no layer asks its neighbours.
#pragma once
#include <map>
#include <string>

namespace normlab {

// One line per fact, for --version.
std::string version_text();
// Provenance for results: normlab, git_commit, source_hash, onednn, compiler, build_type, cpu, host.
std::map<std::string, std::string> provenance();

}  // namespace normlab
