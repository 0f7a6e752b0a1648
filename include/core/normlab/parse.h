// Parsers of the small texts users type in flags, one definition each.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace normlab {

// "8x256x1024" -> {8, 256, 1024}: exactly three positive whole numbers separated by 'x', each at
// most max_each and their product at most max_product; otherwise a UsageError naming the flag,
// the text, the layout (e.g. "BxTxC") and the first bad part.
std::array<int64_t, 3> parse_shape3(const std::string& text, const std::string& flag, const std::string& layout,
                                     int64_t max_each, int64_t max_product);

// Levenshtein distance (insertions, deletions, substitutions), for "did you mean" suggestions;
// O(|a| |b|): callers bound the lengths they pass.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace normlab
