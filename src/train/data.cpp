// Data sources: the synthetic topic-permutation task and byte-level text.
#include <cmath>
#include <numeric>

#include "normlab/io.h"
#include "normlab/parse.h"
#include "normlab/text_tokens.h"
#include "normlab/train.h"
#include "rule_noise.h"

namespace normlab {

namespace {

class Synthetic final : public DataSource {
 public:
  explicit Synthetic(const SyntheticSpec& s) : spec_(s), ordinary_(s.vocab - s.topics) {
    NL_USAGE(s.topics >= 1, "topics must be >= 1, got {}", s.topics);
    NL_USAGE(ordinary_ >= 2, "vocab ({}) must exceed topics ({}) by at least 2", s.vocab, s.topics);
    NL_USAGE(s.noise >= 0 && s.noise <= 1, "noise must be in [0, 1], got {}", s.noise);
    // The task's rule has a stream of its own: the batches draw from stream::data, and sharing it
    // would make the first batch replay the permutations' draws.
    Rng rng(s.seed, stream::task);
    perms_.resize(static_cast<size_t>(s.topics));
    for (auto& p : perms_) {
      p.resize(static_cast<size_t>(ordinary_));
      std::iota(p.begin(), p.end(), 0);
      for (int64_t i = ordinary_ - 1; i > 0; --i)  // Fisher-Yates with our portable RNG
        std::swap(p[static_cast<size_t>(i)], p[rng.below(static_cast<uint32_t>(i + 1))]);
    }
  }
  std::string describe() const override {
    return fmt::format("synthetic (vocab {}, {} topics, noise {})", spec_.vocab, spec_.topics, spec_.noise);
  }
  int64_t vocab() const override { return spec_.vocab; }

  Batch train_batch(Rng& rng, int64_t batch, int64_t seq_len) override { return make(rng, batch, seq_len); }

  Batch val_batch(int64_t i, int64_t batch, int64_t seq_len) override {
    // A stream of its own, far from the training stream.
    Rng rng(spec_.seed ^ 0x5bd1e995ULL, 1000 + static_cast<uint64_t>(i));
    return make(rng, batch, seq_len);
  }

  double loss_floor(int64_t seq_len) const override {
    // Target 0 (the token after the marker) is uniform over R ordinary tokens; every later one is
    // the rule's token with probability q = 1 - p + p/R, each other token with p/R.
    const RuleNoise noise{static_cast<double>(ordinary_), spec_.noise};
    return (std::log(noise.r) + static_cast<double>(seq_len - 1) * noise.entropy()) / static_cast<double>(seq_len);
  }

  // Targets are uniform over the ordinary tokens (a permutation of a uniform token is uniform).
  double unigram_loss() const override { return std::log(static_cast<double>(ordinary_)); }

  // The rule's prediction per target, as loss_floor averages it: log R for the token after the
  // marker, then -log q where the target is the rule's token and -log(p / R) where it is not.
  double oracle_loss(const Batch& b) const override {
    const int64_t batch = b.inputs.size(0), seq_len = b.inputs.size(1);
    const int32_t* in = b.inputs.data<int32_t>();
    const int32_t* tg = b.targets.data<int32_t>();
    const RuleNoise noise{static_cast<double>(ordinary_), spec_.noise};
    const double r = noise.r, on_rule = noise.cost_on_rule(), off_rule = noise.cost_off_rule();
    double total = 0;
    for (int64_t row = 0; row < batch; ++row) {
      const int32_t* x = in + row * seq_len;
      const int32_t* y = tg + row * seq_len;
      const auto& perm = perms_[static_cast<size_t>(x[0] - ordinary_)];
      total += std::log(r);
      for (int64_t t = 1; t < seq_len; ++t) total += y[t] == perm[static_cast<size_t>(x[t])] ? on_rule : off_rule;
    }
    return total / static_cast<double>(batch * seq_len);
  }

 private:
  Batch make(Rng& rng, int64_t batch, int64_t seq_len) {
    std::vector<int32_t> seq(static_cast<size_t>(seq_len + 1));
    std::vector<int32_t> in(static_cast<size_t>(batch * seq_len)), tg(in.size());
    const auto r = static_cast<uint32_t>(ordinary_);
    for (int64_t b = 0; b < batch; ++b) {
      uint32_t z = rng.below(static_cast<uint32_t>(spec_.topics));
      seq[0] = static_cast<int32_t>(ordinary_ + z);
      seq[1] = static_cast<int32_t>(rng.below(r));
      for (int64_t t = 2; t <= seq_len; ++t) {
        bool noisy = rng.uniform() < spec_.noise;
        uint32_t uniform_tok = rng.below(r);  // drawn always, so the stream does not depend on noise
        seq[t] = noisy ? static_cast<int32_t>(uniform_tok) : perms_[z][static_cast<size_t>(seq[t - 1])];
      }
      for (int64_t t = 0; t < seq_len; ++t) {
        in[static_cast<size_t>(b * seq_len + t)] = seq[static_cast<size_t>(t)];
        tg[static_cast<size_t>(b * seq_len + t)] = seq[static_cast<size_t>(t + 1)];
      }
    }
    return {Tensor::from_ids(in, {batch, seq_len}), Tensor::from_ids(tg, {batch, seq_len})};
  }

  SyntheticSpec spec_;
  int64_t ordinary_;
  std::vector<std::vector<int32_t>> perms_;
};

class Text final : public DataSource {
 public:
  Text(const std::string& path, Tokenizer tokenizer, const std::string& vocabulary, int64_t seq_len, uint64_t seed)
      : path_(path), seed_(seed), codec_(tokenizer, vocabulary) {
    std::vector<int32_t> ids = codec_.encode(read_file(path), fmt::format("text file '{}'", path));
    const size_t split = ids.size() * 9 / 10;
    val_.assign(ids.begin() + static_cast<std::ptrdiff_t>(split), ids.end());
    ids.resize(split);
    train_ = std::move(ids);
    const size_t need = static_cast<size_t>(seq_len) + 1;
    NL_USAGE(val_.size() >= need && train_.size() >= need,
             "text file '{}' is too short: {} {} give a validation split of {}, and seq_len {} needs {} in each split",
             path, train_.size() + val_.size(), unit(), val_.size(), seq_len, need);
    std::vector<double> count(static_cast<size_t>(codec_.size()), 0.0);
    for (int32_t c : train_) count[static_cast<size_t>(c)] += 1;
    for (double c : count)
      if (c > 0) unigram_ -= c / static_cast<double>(train_.size()) * std::log(c / static_cast<double>(train_.size()));
  }
  std::string describe() const override {
    return fmt::format("text {} ({} + {} {})", path_, train_.size(), val_.size(), unit());
  }
  int64_t vocab() const override { return codec_.size(); }
  Batch train_batch(Rng& rng, int64_t batch, int64_t seq_len) override { return windows(train_, rng, batch, seq_len); }
  Batch val_batch(int64_t i, int64_t batch, int64_t seq_len) override {
    Rng rng(seed_ ^ 0x5bd1e995ULL, 1000 + static_cast<uint64_t>(i));
    return windows(val_, rng, batch, seq_len);
  }
  double loss_floor(int64_t) const override { return std::nan(""); }
  double unigram_loss() const override { return unigram_; }
  double oracle_loss(const Batch&) const override { return std::nan(""); }

 private:
  const char* unit() const { return codec_.kind() == Tokenizer::bytes ? "bytes" : "characters"; }
  static Batch windows(const std::vector<int32_t>& src, Rng& rng, int64_t batch, int64_t seq_len) {
    std::vector<int32_t> in(static_cast<size_t>(batch * seq_len)), tg(in.size());
    const auto starts = static_cast<uint32_t>(src.size() - static_cast<size_t>(seq_len));
    for (int64_t b = 0; b < batch; ++b) {
      size_t s = rng.below(starts);
      for (int64_t t = 0; t < seq_len; ++t) {
        in[static_cast<size_t>(b * seq_len + t)] = src[s + static_cast<size_t>(t)];
        tg[static_cast<size_t>(b * seq_len + t)] = src[s + static_cast<size_t>(t) + 1];
      }
    }
    return {Tensor::from_ids(in, {batch, seq_len}), Tensor::from_ids(tg, {batch, seq_len})};
  }
  std::string path_;
  uint64_t seed_;
  TextCodec codec_;
  std::vector<int32_t> train_, val_;
  double unigram_ = 0;
};

}  // namespace

std::unique_ptr<DataSource> make_synthetic(const SyntheticSpec& spec) { return std::make_unique<Synthetic>(spec); }

std::unique_ptr<DataSource> make_text(const std::string& path, Tokenizer tokenizer, const std::string& vocabulary,
                                      int64_t seq_len, uint64_t seed) {
  return std::make_unique<Text>(path, tokenizer, vocabulary, seq_len, seed);
}

void resolve_text_vocabulary(TrainConfig& cfg, bool vocab_given) {
  if (cfg.data.kind != DataKind::text) return;
  if (cfg.tokens() == Tokenizer::bytes) {
    if (!vocab_given) cfg.model.vocab = 256;
    return;
  }
  if (!cfg.vocabulary) {
    cfg.vocabulary = char_vocabulary(read_file(cfg.data.path), fmt::format("text file '{}'", cfg.data.path));
    NL_USAGE(cfg.vocabulary->size() <= kMaxConfigStringBytes,
             "text file '{}' has {} distinct characters ({} bytes of UTF-8), more than the vocabulary key holds ({} "
             "bytes): use tokenizer bytes", cfg.data.path, TextCodec(Tokenizer::chars, *cfg.vocabulary).size(),
             cfg.vocabulary->size(), kMaxConfigStringBytes);
  }
  if (!vocab_given) cfg.model.vocab = TextCodec(Tokenizer::chars, *cfg.vocabulary).size();
}

}  // namespace normlab
