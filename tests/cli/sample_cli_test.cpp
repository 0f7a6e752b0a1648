// `normlab sample` as a user runs it: text from a run trained on text with the character
// vocabulary, the same text for the same seed, greedy at temperature 0, and --json.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "normlab/text_tokens.h"
#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::fresh_dir;
using normlab::test::run_cli;
using normlab::test::slurp;

namespace {

// A small model of tiny.txt at the character level, trained once per process.
fs::path chars_run() {
  static const fs::path run = [] {
    const fs::path d = fresh_dir("cli_sample") / "chars";
    fs::create_directories(d.parent_path());
    const auto r = run_cli({"train", "--model", "gpt", "--data",
                            "text:" + std::string(NORMLAB_SOURCE_DIR) + "/experiments/data/tiny.txt", "--tokenizer",
                            "chars", "--layers", "2", "--d_model", "32", "--heads", "2", "--d_hidden", "64",
                            "--seq_len", "32", "--batch_size", "8", "--lr", "3e-3", "--steps", "150", "--eval_every",
                            "150", "--threads", "1", "--out", d.string(), "-q"});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    return d;
  }();
  return run;
}

}  // namespace

TEST(SampleCli, TheSameSeedGivesTheSameTextInTheRunsVocabulary) {
  const fs::path run = chars_run();
  const auto cfg = nlohmann::json::parse(slurp(run / "config.json"));
  ASSERT_EQ(cfg["tokenizer"], "chars");
  const std::string vocabulary = cfg["vocabulary"];
  auto sample = [&](const std::vector<std::string>& more) {
    std::vector<std::string> args = {"sample", run.string(), "--prompt", "The ", "--tokens", "80"};
    args.insert(args.end(), more.begin(), more.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.out.rfind("The ", 0), 0u) << r.out;  // the prompt first, then the text drawn
    return r.out;
  };
  const std::string a = sample({"--seed", "5"}), b = sample({"--seed", "5"}), c = sample({"--seed", "6"});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // 4 + 80 characters and the final newline, every one of them in the vocabulary.
  const std::u32string chars = normlab::decode_utf8(a, "out");
  EXPECT_EQ(chars.size(), 4u + 80u + 1u);
  const std::u32string vocab = normlab::decode_utf8(vocabulary, "vocabulary");
  for (size_t i = 4; i + 1 < chars.size(); ++i) EXPECT_NE(vocab.find(chars[i]), std::u32string::npos) << i;
  // Greedy: the seed does not matter.
  EXPECT_EQ(sample({"--temperature", "0", "--seed", "1"}), sample({"--temperature", "0", "--seed", "2"}));
}

TEST(SampleCli, JsonHoldsThePromptTheTextAndTheSettings) {
  const fs::path run = chars_run();
  const auto r = run_cli({"sample", run.string(), "--tokens", "12", "--top_k", "5", "--temperature", "0.8", "--seed",
                          "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt"], "\n");
  EXPECT_EQ(j["tokens"], 12);
  EXPECT_EQ(j["top_k"], 5);
  EXPECT_EQ(j["tokenizer"], "chars");
  EXPECT_EQ(normlab::decode_utf8(j["continuation"].get<std::string>(), "c").size(), 12u);
  // The text without --json is the prompt and the same continuation.
  const auto plain = run_cli({"sample", run.string(), "--tokens", "12", "--top_k", "5", "--temperature", "0.8", "--seed",
                              "3"});
  EXPECT_EQ(plain.out, "\n" + j["continuation"].get<std::string>() + "\n");
}

// An encoder-decoder trained to copy: sample decodes held-out sources greedily, and the copy comes
// out; a source of one's own too; --json says the same.
TEST(SampleCli, AnEncoderDecoderRunDecodesItsSourcesGreedily) {
  const fs::path run = fresh_dir("cli_sample") / "copy";
  fs::create_directories(run.parent_path());
  auto r = run_cli({"train", "--model", "encdec", "--data", "copy", "--noise", "0", "--layers", "2", "--d_model", "32",
                    "--heads", "2", "--d_hidden", "64", "--vocab", "11", "--seq_len", "6", "--batch_size", "16",
                    "--lr", "3e-3", "--warmup_steps", "20", "--steps", "400", "--eval_every", "400", "--threads", "1",
                    "--out", run.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  r = run_cli({"sample", run.string(), "--examples", "3"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3 * 4) << r.out;  // source, target, output, blank
  EXPECT_NE(r.out.find("(6/6 as the target)"), std::string::npos) << r.out;
  r = run_cli({"sample", run.string(), "--source", "3 1 4 1 5 9"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, "source  3 1 4 1 5 9\noutput  3 1 4 1 5 9\n\n");
  // Without --examples: four, or as many as one held-out batch has.
  r = run_cli({"sample", run.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4 * 4) << r.out;
  r = run_cli({"sample", run.string(), "--examples", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["task"], "copy");
  ASSERT_EQ(j["sequences"].size(), 2u);
  for (const auto& s : j["sequences"]) {
    EXPECT_EQ(s["output"], s["source"]);
    EXPECT_EQ(s["matching"], 6);
  }
}

// A run whose held-out batch has fewer than four sequences decodes all of them by default.
TEST(SampleCli, TheDefaultExamplesFitASmallBatch) {
  const fs::path run = fresh_dir("cli_sample") / "copy_small_batch";
  fs::create_directories(run.parent_path());
  auto r = run_cli({"train", "--model", "encdec", "--data", "copy", "--layers", "1", "--d_model", "8", "--heads", "2",
                    "--d_hidden", "8", "--vocab", "7", "--seq_len", "5", "--batch_size", "2", "--steps", "2",
                    "--eval_every", "1", "--threads", "1", "--out", run.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  r = run_cli({"sample", run.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2 * 4) << r.out;
}
