#include "normlab/sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "normlab/autograd.h"
#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/rng.h"
#include "normlab/text_tokens.h"
#include "normlab/train.h"

namespace normlab {

namespace fs = std::filesystem;

namespace {

// The run's config and final weights; UsageError where either is missing or not a text run.
TrainConfig text_run_config(const std::string& run) {
  const std::string config = (fs::path(run) / "config.json").string();
  std::error_code ec;
  NL_USAGE(fs::is_regular_file(config, ec), "'{}' is not a run directory: it has no config.json", shown(run, 200));
  TrainConfig cfg = load_train_config(config, {});
  NL_USAGE(cfg.data.kind == DataKind::text,
           "'{}' was trained on {} data: sample writes text, from runs of data text:PATH", shown(run, 200),
           cfg.data.str());
  return cfg;
}

void load_final_weights(Model& model, const std::string& run) {
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
  Model model(cfg.model, cfg.seed);
  load_final_weights(model, req.run);

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

}  // namespace normlab
