#include "normlab/parse.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "normlab/error.h"

namespace normlab {

std::vector<std::string> split_at(const std::string& text, char sep) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == sep)
      parts.emplace_back();
    else
      parts.back() += c;
  }
  return parts;
}

std::array<int64_t, 3> parse_shape3(const std::string& text, const std::string& flag, const std::string& layout,
                                     int64_t max_each, int64_t max_product) {
  const std::vector<std::string> parts = split_at(text, 'x');
  NL_USAGE(parts.size() == 3, "{}: shape '{}' is not {} (three positive integers, e.g. 2x5x8)", flag, shown(text), layout);
  std::array<int64_t, 3> v{};
  for (size_t i = 0; i < 3; ++i) {
    const std::string& p = parts[i];
    bool digits = !p.empty() && p.size() <= 18;
    for (char c : p) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    NL_USAGE(digits, "{}: shape '{}': '{}' is not a positive integer", flag, shown(text), shown(p));
    v[i] = std::stoll(p);
    NL_USAGE(v[i] >= 1 && v[i] <= max_each, "{}: shape '{}': {} is out of range 1..{}", flag, shown(text), v[i], max_each);
  }
  // Products checked step by step so that they cannot overflow.
  NL_USAGE(v[0] <= max_product / v[1] && v[0] * v[1] <= max_product / v[2],
           "{}: shape '{}' has more than {} elements: too large", flag, shown(text), max_product);
  return v;
}

std::vector<std::string> split_list(const std::string& text, const std::string& flag) {
  NL_USAGE(!text.empty(), "{}: no value given (expected a comma-separated list)", flag);
  const std::vector<std::string> items = split_at(text, ',');
  for (size_t i = 0; i < items.size(); ++i)
    NL_USAGE(!items[i].empty(), "{} '{}': entry {} is empty (expected values separated by single commas)", flag,
             shown(text), i + 1);
  return items;
}

std::vector<double> parse_number_list(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  for (const std::string& item : split_list(text, flag)) {
    // strtod: a whole token or nothing; "inf", "nan" and out-of-range values (1e400) refused.
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(item.c_str(), &end);
    NL_USAGE(end == item.c_str() + item.size() && !std::isspace(static_cast<unsigned char>(item[0])) && errno == 0 &&
                 std::isfinite(v),
             "{}: '{}' is not a finite number", flag, shown(item));
    out.push_back(v);
  }
  return out;
}

std::vector<int64_t> parse_integer_list(const std::string& text, const std::string& flag, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text, flag)) {
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    NL_USAGE(ec == std::errc() && ptr == item.data() + item.size() && v >= lo && v <= hi,
             "{}: '{}' is not a whole number from {} to {}", flag, shown(item), lo, hi);
    out.push_back(v);
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace normlab
