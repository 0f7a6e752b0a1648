// Parsers of the small texts users type in flags, one definition each.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace normlab {

// The most bytes a config's string value holds (a path, a character vocabulary).
inline constexpr size_t kMaxConfigStringBytes = 4096;

// "8x256x1024" -> {8, 256, 1024}: exactly three positive whole numbers separated by 'x', each at
// most max_each and their product at most max_product; otherwise a UsageError naming the flag,
// the text, the layout (e.g. "BxTxC") and the first bad part.
std::array<int64_t, 3> parse_shape3(const std::string& text, const std::string& flag, const std::string& layout,
                                     int64_t max_each, int64_t max_product);

// text cut at every sep, empty parts kept: "a,,b" -> {"a", "", "b"}, "" -> {""}. The one splitter
// under every list parser, strict (split_list) or not (each caller says what an empty part means).
std::vector<std::string> split_at(const std::string& text, char sep);

// "a,b,c" -> {"a", "b", "c"}: the one parser of comma-separated flag values. An empty text or an
// empty entry ("1,,2", "fused,", ",x") is a UsageError naming the flag and the entry's position.
std::vector<std::string> split_list(const std::string& text, const std::string& flag);
// split_list, then each entry as a finite number / a whole number in [lo, hi]; UsageError naming the
// flag and the entry otherwise.
std::vector<double> parse_number_list(const std::string& text, const std::string& flag);
std::vector<int64_t> parse_integer_list(const std::string& text, const std::string& flag, int64_t lo, int64_t hi);

// Levenshtein distance (insertions, deletions, substitutions), for "did you mean" suggestions;
// O(|a| |b|): callers bound the lengths they pass.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace normlab
