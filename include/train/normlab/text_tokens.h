// Text as token ids, and back: bytes (one id per byte, vocab 256) or characters (one id per
// Unicode code point of UTF-8 text, in the order of a vocabulary string: nanoGPT's
// shakespeare_char builds it as the text's characters sorted, and so does char_vocabulary).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "normlab/train_kinds.h"

namespace normlab {

// The code points of UTF-8 text; a UsageError names `what` and the byte offset of the first
// malformed sequence (overlong forms, surrogates and values above U+10FFFF included).
std::u32string decode_utf8(const std::string& text, const std::string& what);
std::string encode_utf8(const std::u32string& chars);

// The distinct characters of UTF-8 text, sorted by code point, as UTF-8.
std::string char_vocabulary(const std::string& text, const std::string& what);

class TextCodec {
 public:
  // chars: `vocabulary` (UTF-8) lists the characters in id order, each once (UsageError
  // otherwise); bytes: it must be empty.
  TextCodec(Tokenizer kind, const std::string& vocabulary);
  Tokenizer kind() const { return kind_; }
  int64_t size() const;
  // UsageError naming `what`, the character and its position when one is not in the vocabulary.
  std::vector<int32_t> encode(const std::string& text, const std::string& what) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // ids must be below size()

 private:
  int32_t id_of(char32_t c) const;  // -1: not in the vocabulary

  Tokenizer kind_;
  std::u32string chars_;                                // chars: id -> code point
  std::vector<int32_t> ascii_ids_;                      // chars: code point < 128 -> id (-1: none)
  std::vector<std::pair<char32_t, int32_t>> by_code_;  // chars: the others, sorted by code point
};

}  // namespace normlab
