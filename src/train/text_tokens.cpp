#include "normlab/text_tokens.h"

#include <fmt/format.h>

#include <algorithm>

#include "normlab/error.h"
#include "normlab/parse.h"

namespace normlab {

namespace {

// "'a' (U+0061)", or the code point alone where the character would not print.
std::string char_name(char32_t c) {
  const std::string code = fmt::format("U+{:04X}", static_cast<uint32_t>(c));
  if (c < 0x20 || c == 0x7F) return code;
  return fmt::format("'{}' ({})", encode_utf8(std::u32string(1, c)), code);
}

// The code point starting at text[i] (advancing i), or -1 where the bytes are not UTF-8.
int64_t next_code_point(const std::string& text, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const int extra = b0 >= 0xF0 && b0 <= 0xF4 ? 3 : b0 >= 0xE0 && b0 <= 0xEF ? 2 : b0 >= 0xC2 && b0 <= 0xDF ? 1 : -1;
  if (extra < 0 || i + static_cast<size_t>(extra) >= text.size()) return -1;
  uint32_t c = b0 & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    const unsigned char b = byte(i + static_cast<size_t>(k));
    if ((b & 0xC0) != 0x80) return -1;
    c = (c << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kLeast[] = {0, 0x80, 0x800, 0x10000};
  if (c < kLeast[extra] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
  i += static_cast<size_t>(extra) + 1;
  return c;
}

}  // namespace

std::u32string decode_utf8(const std::string& text, const std::string& what) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    const int64_t c = next_code_point(text, i);
    NL_USAGE(c >= 0, "{} is not UTF-8 text: byte {} (0x{:02X}) starts no valid character (the character "
             "vocabulary reads UTF-8)", what, at, static_cast<unsigned char>(text[at]));
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

std::string encode_utf8(const std::u32string& chars) {
  std::string out;
  out.reserve(chars.size());
  for (char32_t c : chars) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

std::string char_vocabulary(const std::string& text, const std::string& what) {
  std::u32string chars = decode_utf8(text, what);
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return encode_utf8(chars);
}

TextCodec::TextCodec(Tokenizer kind, const std::string& vocabulary) : kind_(kind) {
  if (kind == Tokenizer::bytes) {
    NL_USAGE(vocabulary.empty(), "vocabulary is for tokenizer chars (tokenizer bytes has the 256 byte values)");
    return;
  }
  chars_ = decode_utf8(vocabulary, "vocabulary");
  NL_USAGE(!chars_.empty(), "vocabulary is empty: tokenizer chars needs at least one character");
  std::u32string sorted = chars_;
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  NL_USAGE(dup == sorted.end(), "vocabulary lists the character {} twice: each id needs its own character",
           char_name(dup == sorted.end() ? 0 : *dup));
  ascii_ids_.assign(128, -1);
  for (size_t id = 0; id < chars_.size(); ++id) {
    if (chars_[id] < 128) ascii_ids_[chars_[id]] = static_cast<int32_t>(id);
    else by_code_.emplace_back(chars_[id], static_cast<int32_t>(id));
  }
  std::sort(by_code_.begin(), by_code_.end());
}

int32_t TextCodec::id_of(char32_t c) const {
  if (c < 128) return ascii_ids_[c];
  const auto it = std::lower_bound(by_code_.begin(), by_code_.end(), std::make_pair(c, int32_t{-1}));
  return it != by_code_.end() && it->first == c ? it->second : -1;
}

int64_t TextCodec::size() const { return kind_ == Tokenizer::bytes ? 256 : static_cast<int64_t>(chars_.size()); }

std::vector<int32_t> TextCodec::encode(const std::string& text, const std::string& what) const {
  std::vector<int32_t> ids;
  if (kind_ == Tokenizer::bytes) {
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  const std::u32string chars = decode_utf8(text, what);
  ids.reserve(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    const char32_t c = chars[i];
    const int32_t id = id_of(c);
    NL_USAGE(id >= 0, "{} holds {} at character {}, which is not in the vocabulary of {} characters", what,
             char_name(c), i, chars_.size());
    ids.push_back(id);
  }
  return ids;
}

std::string TextCodec::decode(const std::vector<int32_t>& ids) const {
  const int64_t n = size();
  for (int32_t id : ids) NL_CHECK(id >= 0 && id < n, "token id {} is outside the vocabulary of {}", id, n);
  if (kind_ == Tokenizer::bytes) {
    std::string bytes;
    bytes.reserve(ids.size());
    for (int32_t id : ids) bytes.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    return bytes;
  }
  std::u32string chars;
  chars.reserve(ids.size());
  for (int32_t id : ids) chars.push_back(chars_[static_cast<size_t>(id)]);
  return encode_utf8(chars);
}

}  // namespace normlab
