#include "normlab/sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <filesystem>

#include "normlab/autograd.h"
#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/rng.h"
#include "normlab/text_tokens.h"
#include "normlab/train.h"
#include "normlab/train_model.h"

namespace normlab {

namespace fs = std::filesystem;

namespace {

// The run's config; UsageError where it has none.
TrainConfig run_config(const std::string& run) {
  const std::string config = (fs::path(run) / "config.json").string();
  std::error_code ec;
  NL_USAGE(fs::is_regular_file(config, ec), "'{}' is not a run directory: it has no config.json", shown(run, 200));
  return load_train_config(config, {});
}

// The run's config; UsageError where it is not a text run.
TrainConfig text_run_config(const std::string& run) {
  TrainConfig cfg = run_config(run);
  NL_USAGE(cfg.data.kind == DataKind::text,
           "'{}' was trained on {} data: sample writes text, from runs of data text:PATH{}", shown(run, 200),
           cfg.data.str(), is_seq2seq(cfg.data.kind) ? " (an encoder-decoder run decodes with --source or --examples)" : "");
  return cfg;
}

void load_final_weights(TrainModel& model, const std::string& run) {
  const std::string file = (fs::path(run) / "model.safetensors").string();
  std::error_code ec;
  NL_USAGE(fs::is_regular_file(file, ec),
           "'{}' has no model.safetensors (a run that diverged writes no final weights)", shown(run, 200));
  load_model_state(model, load_safetensors(file), file);
}

// The logits of the position after `ids` (its last seq_len tokens, as nanoGPT crops to
// block_size).
std::vector<float> next_logits(const Model& model, const std::vector<int32_t>& ids) {
  const int64_t seq_len = model.config().seq_len;
  const auto from = ids.end() - std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(ids.size()), seq_len);
  const std::vector<int32_t> window(from, ids.end());
  const auto t = static_cast<int64_t>(window.size());
  const Tensor logits = model.forward(Tensor::from_ids(window, {1, t}));
  const std::vector<double> all = logits.to_vector();
  const int64_t v = model.config().vocab;
  return std::vector<float>(all.end() - v, all.end());
}

}  // namespace

int64_t draw_token(const std::vector<float>& logits, double temperature, int64_t top_k, Rng& rng) {
  NL_CHECK(!logits.empty(), "no logits to draw from");
  if (temperature == 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<double> l(logits.begin(), logits.end());
  for (double& x : l) x /= temperature;
  if (top_k > 0 && top_k < static_cast<int64_t>(l.size())) {
    std::vector<double> sorted = l;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<size_t>(top_k - 1)];
    for (double& x : l)
      if (x < kth) x = -INFINITY;
  }
  const double top = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (double& x : l) sum += (x = std::exp(x - top));
  double u = rng.uniform() * sum;
  for (size_t i = 0; i < l.size(); ++i) {
    if (u < l[i]) return static_cast<int64_t>(i);
    u -= l[i];
  }
  // Rounding left u at or above the last weight: the last token that has one.
  for (size_t i = l.size(); i-- > 0;)
    if (l[i] > 0) return static_cast<int64_t>(i);
  return 0;
}

SampleResult sample_run(const SampleRequest& req) {
  NL_USAGE(std::isfinite(req.temperature) && req.temperature >= 0,
           "--temperature must be a finite number >= 0 (0: greedy), got {}", req.temperature);
  NL_USAGE(req.top_k >= 0, "--top_k must be >= 0 (0: every token), got {}", req.top_k);
  NL_USAGE(req.tokens >= 0 && req.tokens <= (int64_t{1} << 24), "--tokens must be in [0, 2^24], got {}", req.tokens);
  const TrainConfig cfg = text_run_config(req.run);
  const TextCodec codec(cfg.tokens(), cfg.vocabulary.value_or(""));
  std::vector<int32_t> ids = codec.encode(req.prompt, "--prompt");
  NL_USAGE(!ids.empty(), "--prompt is empty: the model needs at least one token to start from (nanoGPT's is \"\\n\")");
  check_fits_in_memory(cfg, 1, "sample");
  const std::unique_ptr<TrainModel> trained = make_train_model(cfg.model, cfg.seed);
  load_final_weights(*trained, req.run);
  const Model& model = *trained->decoder_only();

  if (req.on_start) req.on_start();
  NoGradGuard no_grad;
  Rng rng(req.seed, stream::sample);
  SampleResult out;
  out.tokenizer = to_string(cfg.tokens());
  for (int64_t i = 0; i < req.tokens; ++i) {
    const auto next = static_cast<int32_t>(draw_token(next_logits(model, ids), req.temperature, req.top_k, rng));
    ids.push_back(next);
    const std::string piece = codec.decode({next});
    out.continuation += piece;
    if (req.on_text) req.on_text(piece);
  }
  out.tokens = req.tokens;
  return out;
}

// ---- the encoder-decoder's greedy decoding ---------------------------------------------

namespace {

// Each row of `sources` (N, L) decoded greedily: the start token, then L times the most likely
// next token given the source and the output so far.
std::vector<std::vector<int32_t>> greedy_decode(const EncDecModel& model, const Tensor& sources, int32_t start) {
  const int64_t n = sources.size(0), len = sources.size(1), vocab = model.config().model.vocab;
  const Tensor memory = model.encode(sources);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n), std::vector<int32_t>{start});
  for (int64_t t = 0; t < len; ++t) {
    std::vector<int32_t> so_far;
    for (const auto& row : out) so_far.insert(so_far.end(), row.begin(), row.end());
    const std::vector<double> logits = model.decode(Tensor::from_ids(so_far, {n, t + 1}), memory).to_vector();
    for (int64_t i = 0; i < n; ++i) {
      const auto last = logits.begin() + ((i * (t + 1) + t) * vocab);
      out[static_cast<size_t>(i)].push_back(static_cast<int32_t>(std::max_element(last, last + vocab) - last));
    }
  }
  for (auto& row : out) row.erase(row.begin());  // the start token is not output
  return out;
}

std::vector<int32_t> row_of(const Tensor& ids, int64_t row) {
  const int64_t len = ids.size(1);
  const int32_t* p = ids.data<int32_t>() + row * len;
  return std::vector<int32_t>(p, p + len);
}

// The sequences to decode: the given source, or the first `examples` of held-out batch 0 with
// their targets.
std::vector<DecodedSequence> decode_inputs(const DecodeRequest& req, const TrainConfig& cfg) {
  const int64_t ordinary = cfg.model.vocab - 1;
  if (!req.source.empty()) {
    // Every source it trained on had seq_len tokens: the positions past a shorter one were never seen empty.
    NL_USAGE(static_cast<int64_t>(req.source.size()) == cfg.model.seq_len,
             "--source has {} tokens; the run learned sources of seq_len = {} tokens", req.source.size(),
             cfg.model.seq_len);
    for (int32_t id : req.source)
      NL_USAGE(id >= 0 && id < ordinary, "--source token {} is outside the run's ordinary tokens 0..{}", id,
               ordinary - 1);
    return {DecodedSequence{req.source, {}, {}, 0}};
  }
  const int64_t examples = req.examples > 0 ? req.examples : std::min<int64_t>(4, cfg.batch_size);
  NL_USAGE(examples <= cfg.batch_size, "--examples must be in [1, {}] (the run's batch_size: one held-out batch), got {}",
           cfg.batch_size, examples);
  const Batch b = make_data_source(cfg)->val_batch(0, cfg.batch_size, cfg.model.seq_len);
  std::vector<DecodedSequence> out;
  for (int64_t i = 0; i < examples; ++i) out.push_back({row_of(b.sources, i), row_of(b.targets, i), {}, 0});
  return out;
}

}  // namespace

bool is_encoder_decoder_run(const std::string& run) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(run) / "config.json", ec)) return false;
  try {
    return run_config(run).model.model == ModelKind::encdec;
  } catch (const UsageError&) {
    return false;  // not a config this command reads: sample_run says why
  }
}

DecodeResult decode_run(const DecodeRequest& req) {
  const TrainConfig cfg = run_config(req.run);
  NL_USAGE(cfg.model.model == ModelKind::encdec, "'{}' is a {} run: --source and --examples decode an encoder-decoder "
           "run (model encdec)", shown(req.run, 200), to_string(cfg.model.model));
  NL_USAGE(req.source.empty() || req.examples == 0, "--source and --examples are two ways to choose what to decode: give one");
  cfg.validate();  // a config.json edited by hand is refused here, not half-run
  DecodeResult result;
  result.task = cfg.data.str();
  result.sequences = decode_inputs(req, cfg);
  check_fits_in_memory(cfg, static_cast<int64_t>(result.sequences.size()), "sample");
  const std::unique_ptr<TrainModel> trained = make_train_model(cfg.model, cfg.seed);
  load_final_weights(*trained, req.run);
  NoGradGuard no_grad;
  std::vector<int32_t> sources;
  for (const DecodedSequence& s : result.sequences) sources.insert(sources.end(), s.source.begin(), s.source.end());
  const auto n = static_cast<int64_t>(result.sequences.size());
  const auto len = static_cast<int64_t>(result.sequences[0].source.size());
  const auto outputs = greedy_decode(*trained->encoder_decoder(), Tensor::from_ids(sources, {n, len}),
                                     static_cast<int32_t>(cfg.model.vocab - 1));
  for (size_t i = 0; i < outputs.size(); ++i) {
    DecodedSequence& s = result.sequences[i];
    s.output = outputs[i];
    for (size_t t = 0; t < s.target.size(); ++t) s.matching += s.output[t] == s.target[t];
  }
  return result;
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(token.c_str(), &end, 10);
    NL_USAGE(end && *end == '\0' && errno == 0 && v >= 0 && v <= INT32_MAX,
             "{} must be token ids (whole numbers >= 0) separated by spaces or commas; '{}' is not one", what,
             shown(token));
    ids.push_back(static_cast<int32_t>(v));
    token.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\t' || c == '\n') flush();
    else token += c;
  }
  flush();
  NL_USAGE(!ids.empty(), "{} is empty: give at least one token id", what);
  return ids;
}

}  // namespace normlab
