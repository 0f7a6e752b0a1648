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

// `normlab sample` of an encoder-decoder run (model encdec): each source decoded greedily, the
// start token first and then the most likely token each time, as many tokens as the source has.
// The sources: `source` (seq_len token ids, each an ordinary one) or, without it, the first
// `examples` sequences of the run's first held-out batch, each beside its target.
struct DecodeRequest {
  std::string run;
  std::vector<int32_t> source;  // empty: held-out examples
  int64_t examples = 0;         // 0: 4, or the run's batch_size where it is smaller
};
struct DecodedSequence {
  std::vector<int32_t> source, target, output;  // target: the held-out one (noise included); empty for a given source
  int64_t matching = 0;  // positions where output equals target
};
struct DecodeResult {
  std::string task;  // the run's data: copy, reverse, translate
  std::vector<DecodedSequence> sequences;
};
// Whether `run` is a run directory of model encdec (false for any other, or no run at all).
bool is_encoder_decoder_run(const std::string& run);
// UsageError (exit 2) for a run that is not an encoder-decoder's, has no final weights, or a
// source that is not seq_len tokens long, or holds a token outside the ordinary ones.
DecodeResult decode_run(const DecodeRequest& req);
// Token ids from text: whole numbers separated by spaces or commas ("3 14 15"); UsageError
// naming `what` otherwise.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what);

// The index drawn from `logits` (one position's, over the vocabulary) as sample_run draws it:
// argmax at temperature 0 (the first of equal largest), else logits / temperature cut to the
// top_k largest (every logit equal to the k-th kept, as torch.topk's threshold in nanoGPT),
// softmax, one uniform draw of rng.
class Rng;
int64_t draw_token(const std::vector<float>& logits, double temperature, int64_t top_k, Rng& rng);

}  // namespace normlab
