// Sequence-to-sequence tasks with a known answer (train.h, Seq2SeqSpec): copy, reverse and a
// synthetic translation, for the encoder-decoder.
#include <cmath>
#include <numeric>

#include "normlab/train.h"
#include "rule_noise.h"

namespace normlab {

namespace {

class Seq2Seq final : public DataSource {
 public:
  explicit Seq2Seq(const Seq2SeqSpec& s) : spec_(s), ordinary_(s.vocab - 1) {
    NL_USAGE(ordinary_ >= 2, "data {} needs vocab >= 3 (two ordinary tokens and the start token), got {}",
             to_string(s.task), s.vocab);
    NL_USAGE(s.noise >= 0 && s.noise <= 1, "noise must be in [0, 1], got {}", s.noise);
    mapping_.resize(static_cast<size_t>(ordinary_));
    std::iota(mapping_.begin(), mapping_.end(), 0);
    if (s.task != DataKind::translate) return;
    Rng rng(s.seed, stream::task);  // the rule's own stream, apart from the batches'
    for (int64_t i = ordinary_ - 1; i > 0; --i)  // Fisher-Yates with our portable RNG
      std::swap(mapping_[static_cast<size_t>(i)], mapping_[rng.below(static_cast<uint32_t>(i + 1))]);
  }
  std::string describe() const override {
    return fmt::format("{} (vocab {}: {} ordinary tokens and the start token, noise {})", to_string(spec_.task),
                       spec_.vocab, ordinary_, spec_.noise);
  }
  int64_t vocab() const override { return spec_.vocab; }
  Batch train_batch(Rng& rng, int64_t batch, int64_t seq_len) override { return make(rng, batch, seq_len); }
  Batch val_batch(int64_t i, int64_t batch, int64_t seq_len) override {
    Rng rng(spec_.seed ^ 0x5bd1e995ULL, 1000 + static_cast<uint64_t>(i));  // far from the training stream
    return make(rng, batch, seq_len);
  }
  // Every target is the rule's token with probability q = 1 - p + p/R, each other ordinary token
  // with p/R: the source alone decides it, so the earlier targets add nothing.
  double loss_floor(int64_t) const override { return noise().entropy(); }
  // Targets are uniform over the ordinary tokens (the rule maps a uniform source to a uniform one).
  double unigram_loss() const override { return std::log(static_cast<double>(ordinary_)); }
  double oracle_loss(const Batch& b) const override {
    const int64_t batch = b.targets.size(0), seq_len = b.targets.size(1);
    const int32_t* src = b.sources.data<int32_t>();
    const int32_t* tg = b.targets.data<int32_t>();
    const double on_rule = noise().cost_on_rule(), off_rule = noise().cost_off_rule();
    double total = 0;
    for (int64_t row = 0; row < batch; ++row)
      for (int64_t t = 0; t < seq_len; ++t)
        total += tg[row * seq_len + t] == rule_token(src + row * seq_len, seq_len, t) ? on_rule : off_rule;
    return total / static_cast<double>(batch * seq_len);
  }

 private:
  RuleNoise noise() const { return {static_cast<double>(ordinary_), spec_.noise}; }
  // The clean target at position t of a source of n tokens.
  int32_t rule_token(const int32_t* src, int64_t n, int64_t t) const {
    switch (spec_.task) {
      case DataKind::reverse: return src[n - 1 - t];
      case DataKind::translate: {
        // Each window of kWindow positions reversed (the last one may be shorter), then mapped.
        const int64_t start = t - t % kWindow, end = std::min(start + kWindow, n);
        return mapping_[static_cast<size_t>(src[start + end - 1 - t])];
      }
      default: return src[t];
    }
  }
  Batch make(Rng& rng, int64_t batch, int64_t seq_len) const {
    const auto n = static_cast<size_t>(batch * seq_len);
    std::vector<int32_t> src(n), in(n), tg(n);
    const auto r = static_cast<uint32_t>(ordinary_);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<int32_t>(rng.below(r));
    for (int64_t b = 0; b < batch; ++b) {
      const size_t row = static_cast<size_t>(b * seq_len);
      for (int64_t t = 0; t < seq_len; ++t) {
        const bool noisy = rng.uniform() < spec_.noise;
        const auto uniform_tok = static_cast<int32_t>(rng.below(r));  // drawn always: the stream does not depend on noise
        tg[row + static_cast<size_t>(t)] = noisy ? uniform_tok : rule_token(&src[row], seq_len, t);
      }
      in[row] = static_cast<int32_t>(ordinary_);  // the start token
      for (int64_t t = 1; t < seq_len; ++t) in[row + static_cast<size_t>(t)] = tg[row + static_cast<size_t>(t - 1)];
    }
    Batch out{Tensor::from_ids(in, {batch, seq_len}), Tensor::from_ids(tg, {batch, seq_len})};
    out.sources = Tensor::from_ids(src, {batch, seq_len});
    return out;
  }

  static constexpr int64_t kWindow = 3;
  Seq2SeqSpec spec_;
  int64_t ordinary_;
  std::vector<int32_t> mapping_;  // translate: a permutation of the ordinary tokens; else the identity
};

}  // namespace

bool is_seq2seq(DataKind kind) {
  return kind == DataKind::copy || kind == DataKind::reverse || kind == DataKind::translate;
}

std::unique_ptr<DataSource> make_seq2seq(const Seq2SeqSpec& spec) {
  NL_CHECK(is_seq2seq(spec.task), "make_seq2seq: data {} is not a sequence-to-sequence task", to_string(spec.task));
  return std::make_unique<Seq2Seq>(spec);
}

}  // namespace normlab
