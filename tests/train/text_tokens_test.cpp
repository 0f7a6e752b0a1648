// Text as token ids: UTF-8 decoding (every malformed form refused), the character vocabulary
// (nanoGPT's sorted set), and the codec's round trip; the data source and config keys built on it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "normlab/error.h"
#include "normlab/text_tokens.h"
#include "normlab/train.h"
#include "test_util.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

std::string tiny_txt() { return std::string(NORMLAB_SOURCE_DIR) + "/experiments/data/tiny.txt"; }

// The message of the UsageError f throws ("" when it throws none).
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TextTokens, Utf8DecodesEveryLengthAndRoundTrips) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  const std::u32string chars = decode_utf8(text, "t");
  EXPECT_EQ(chars, (std::u32string{U'a', 0xE9, 0x20AC, 0x1F600, U'z'}));
  EXPECT_EQ(encode_utf8(chars), text);
  // The edges of each length.
  const std::u32string edges = {0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF, 0xD7FF, 0xE000};
  EXPECT_EQ(decode_utf8(encode_utf8(edges), "t"), edges);
}

TEST(TextTokens, Utf8RefusesEveryMalformedFormNamingTheByte) {
  const std::vector<std::pair<std::string, size_t>> bad = {
      {"ab\x80", 2},              // a continuation byte alone
      {"\xC3", 0},                // truncated two-byte form
      {"x\xE2\x82", 1},           // truncated three-byte form
      {"\xC0\xAF", 0},            // overlong '/'
      {"\xE0\x80\xAF", 0},        // overlong, three bytes
      {"\xED\xA0\x80", 0},        // a UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},    // above U+10FFFF
      {"\xFF", 0},                // never in UTF-8
      {"\xC3\x28", 0},            // a lead byte without its continuation
  };
  for (const auto& [text, at] : bad) {
    const std::string e = usage_error([&] { decode_utf8(text, "the text"); });
    EXPECT_NE(e.find("the text is not UTF-8 text: byte " + std::to_string(at)), std::string::npos) << e;
  }
}

TEST(TextTokens, CharVocabularyIsTheSortedSetOfCharacters) {
  EXPECT_EQ(char_vocabulary("hello, world\n", "t"), "\n ,dehlorw");
  EXPECT_EQ(char_vocabulary("\xC3\xA9" "ba\xC3\xA9", "t"), "ab\xC3\xA9");  // by code point: ASCII first
  EXPECT_EQ(char_vocabulary("", "t"), "");
}

TEST(TextCodecTest, CharsEncodeInVocabularyOrderAndDecodeBack) {
  const TextCodec codec(Tokenizer::chars, "ba\xC3\xA9\n");
  EXPECT_EQ(codec.size(), 4);
  const std::vector<int32_t> ids = codec.encode("ab\xC3\xA9\na", "p");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0, 2, 3, 1}));
  EXPECT_EQ(codec.decode(ids), "ab\xC3\xA9\na");
  const std::string e = usage_error([&] { codec.encode("abc", "--prompt"); });
  EXPECT_NE(e.find("--prompt holds 'c' (U+0063) at character 2"), std::string::npos) << e;
  EXPECT_NE(usage_error([] { TextCodec(Tokenizer::chars, "abca"); }).find("lists the character 'a' (U+0061) twice"),
            std::string::npos);
  EXPECT_NE(usage_error([] { TextCodec(Tokenizer::chars, ""); }).find("vocabulary is empty"), std::string::npos);
}

TEST(TextCodecTest, BytesAreTheirOwnIdsWhateverTheEncoding) {
  const TextCodec codec(Tokenizer::bytes, "");
  EXPECT_EQ(codec.size(), 256);
  const std::string all("\xFF\x00\xC3\xA9z", 5);
  const std::vector<int32_t> ids = codec.encode(all, "p");
  EXPECT_EQ(ids, (std::vector<int32_t>{255, 0, 0xC3, 0xA9, 'z'}));
  EXPECT_EQ(codec.decode(ids), all);
  EXPECT_THROW(TextCodec(Tokenizer::bytes, "abc"), UsageError);
}

// tokenizer chars resolves the vocabulary from the file once, and the data source's ids are the
// text's characters in that order: every window decodes back to a piece of the text.
TEST(TextTokens, TheCharacterDataSourceGivesTheTextsCharacters) {
  const auto text_config = [](std::optional<Tokenizer> tokenizer, std::optional<std::string> vocabulary) {
    TrainConfig c;
    c.data = DataSpec::parse("text:" + tiny_txt());
    c.tokenizer = tokenizer;
    c.vocabulary = vocabulary;
    resolve_text_vocabulary(c, false);
    return c;
  };
  const TrainConfig cfg = text_config(Tokenizer::chars, std::nullopt);
  ASSERT_TRUE(cfg.vocabulary.has_value());
  const std::string text = normlab::test::slurp(tiny_txt());
  EXPECT_EQ(*cfg.vocabulary, char_vocabulary(text, "t"));
  EXPECT_EQ(cfg.model.vocab, static_cast<int64_t>(cfg.vocabulary->size()));  // tiny.txt is ASCII
  cfg.validate();
  auto data = make_data_source(cfg);
  EXPECT_EQ(data->vocab(), cfg.model.vocab);
  const TextCodec codec(Tokenizer::chars, *cfg.vocabulary);
  Rng rng(3, stream::data);
  const Batch b = data->train_batch(rng, 4, 16);
  const std::vector<double> in = b.inputs.to_vector(), tg = b.targets.to_vector();
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < 16; ++t) ids.push_back(static_cast<int32_t>(in[static_cast<size_t>(r * 16 + t)]));
    ids.push_back(static_cast<int32_t>(tg[static_cast<size_t>(r * 16 + 15)]));
    EXPECT_NE(text.find(codec.decode(ids)), std::string::npos) << codec.decode(ids);
  }
  // A given vocabulary is used as it is (ids in its order), and bytes keep vocab 256.
  const TrainConfig given = text_config(Tokenizer::chars, *cfg.vocabulary + "#");
  EXPECT_EQ(given.model.vocab, cfg.model.vocab + 1);
  EXPECT_EQ(text_config(std::nullopt, std::nullopt).model.vocab, 256);
}

// min_lr is cosine's floor, as nanoGPT's get_lr: lr at the end of warm-up, min_lr at the last step;
// unset it is 0, the schedule of before the key.
TEST(TextTokens, CosineDecaysToMinLr) {
  TrainConfig cfg;
  cfg.lr = 1e-3;
  cfg.steps = 100;
  cfg.warmup_steps = 10;
  cfg.schedule = Schedule::cosine;
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 10), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 100), 0.0);
  const double mid = learning_rate(cfg, 55);
  cfg.min_lr = 1e-4;
  cfg.validate();
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 10), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 100), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 55), 1e-4 + (1e-3 - 1e-4) * 0.5);
  EXPECT_DOUBLE_EQ(mid, 1e-3 * 0.5);
  cfg.schedule = Schedule::constant;
  EXPECT_THROW(cfg.validate(), UsageError);
}
