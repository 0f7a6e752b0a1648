// Files normlab writes are never half-written: a temporary name in the same directory, then rename.
#pragma once
#include <string>

namespace normlab {

// Writes `text` to <path>.tmp.<pid> and renames it to path; throws UsageError naming the path.
void write_file_atomic(const std::string& path, const std::string& text);
// The whole file; throws UsageError naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace normlab
