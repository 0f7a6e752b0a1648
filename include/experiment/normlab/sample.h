// `normlab sample`: text from a trained run (a model of data text:PATH), one token at a time, as
// nanoGPT's sample.py draws it: the run's model on the last seq_len tokens, the last position's
// logits divided by the temperature, cut to the top_k largest, a draw from their softmax.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace normlab {

struct SampleRequest {
  std::string run;             // a run directory (config.json, model.safetensors)
  std::string prompt = "\n";   // encoded with the run's tokenizer; nanoGPT's default start
  int64_t tokens = 200;        // tokens drawn after the prompt
  double temperature = 1.0;    // 0: the most likely token each time (greedy, no draw)
  int64_t top_k = 0;           // 0: every token of the vocabulary
  uint64_t seed = 0;           // of the draws: the same request gives the same text
  // Once the run, its weights and the prompt are checked, before the first draw.
  std::function<void()> on_start;
  // Each token's text as it is drawn (bytes: one byte each, which may be part of a character).
  std::function<void(const std::string&)> on_text;
};

struct SampleResult {
  std::string continuation;   // the text drawn after the prompt
  int64_t tokens = 0;
  std::string tokenizer;       // "bytes" or "chars"
};

// UsageError (exit 2) for a run that is not a text run, has no final weights, or a prompt the
// vocabulary cannot encode.
SampleResult sample_run(const SampleRequest& req);

// The index drawn from `logits` (one position's, over the vocabulary) as sample_run draws it:
// argmax at temperature 0 (the first of equal largest), else logits / temperature cut to the
// top_k largest (every logit equal to the k-th kept, as torch.topk's threshold in nanoGPT),
// softmax, one uniform draw of rng.
class Rng;
int64_t draw_token(const std::vector<float>& logits, double temperature, int64_t top_k, Rng& rng);

}  // namespace normlab
