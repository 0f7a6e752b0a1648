// SHA-256 (FIPS 180-4) of bytes in memory: how normlab recognizes a file it wrote (a report
// site's marker lists each of its files with its size and digest).
#pragma once
#include <string>

namespace normlab {

// The digest as 64 lowercase hex digits.
std::string sha256_hex(const std::string& data);

}  // namespace normlab
