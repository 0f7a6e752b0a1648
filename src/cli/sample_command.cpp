// `normlab sample`: text from a trained run. The workflow is sample_run
// (src/experiment/sample.cpp); this file parses and prints.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "cli_common.h"
#include "normlab/error.h"
#include "normlab/sample.h"

namespace normlab::cli {

namespace {

int run_sample(SampleRequest req, const GlobalOptions& g) {
  if (!g.json) {
    // The prompt, then each token as it is drawn, so that a long sample shows as it goes.
    req.on_start = [&req] {
      std::fwrite(req.prompt.data(), 1, req.prompt.size(), stdout);
      std::fflush(stdout);
    };
    req.on_text = [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  }
  const SampleResult r = sample_run(req);
  if (!g.json) {
    std::fputc('\n', stdout);
    return 0;
  }
  const nlohmann::json j{{"run", req.run},         {"prompt", req.prompt},           {"continuation", r.continuation},
                         {"tokens", r.tokens},     {"tokenizer", r.tokenizer},       {"temperature", req.temperature},
                         {"top_k", req.top_k},     {"seed", req.seed}};
  // A bytes run may draw bytes that are not UTF-8: JSON shows them as U+FFFD.
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

// What an encoder-decoder run's greedy decoding prints: each source, its target and the output.
int run_decode(const DecodeRequest& req, const GlobalOptions& g) {
  const DecodeResult r = decode_run(req);
  if (g.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const DecodedSequence& s : r.sequences) {
      nlohmann::json row{{"source", s.source}, {"output", s.output}};
      if (!s.target.empty()) {
        row["target"] = s.target;
        row["matching"] = s.matching;
      }
      rows.push_back(row);
    }
    std::cout << nlohmann::json{{"run", req.run}, {"task", r.task}, {"decoding", "greedy"}, {"sequences", rows}}.dump(2)
              << "\n";
    return 0;
  }
  for (const DecodedSequence& s : r.sequences) {
    std::cout << "source  " << ids_text(s.source) << "\n";
    if (!s.target.empty()) std::cout << "target  " << ids_text(s.target) << "\n";
    std::cout << "output  " << ids_text(s.output);
    if (!s.target.empty()) std::cout << "   (" << s.matching << "/" << s.target.size() << " as the target)";
    std::cout << "\n\n";
  }
  return 0;
}

}  // namespace

Runner add_sample(CLI::App& app, GlobalOptions& g) {
  auto req = std::make_shared<SampleRequest>();
  CLI::App* sub = app.add_subcommand("sample", "Text from a trained run (data text:PATH), as nanoGPT's sample.py draws it");
  sub->add_option("run_dir", req->run, "A run directory (config.json + model.safetensors)")->required();
  sub->add_option("--prompt", req->prompt, "The text to continue, in the run's vocabulary (default \"\\n\")");
  sub->add_option("--tokens", req->tokens, "Tokens to draw after the prompt (default 200)")->check(whole_count);
  sub->add_option("--temperature", req->temperature,
                  "Logits divided by this before the softmax (default 1; 0: the most likely token each time)");
  sub->add_option("--top_k,--top-k", req->top_k, "Draw only among the k most likely tokens (default 0: all)")
      ->check(whole_count);
  sub->add_option("--seed", req->seed, "Seed of the draws (default 0): the same seed gives the same text");
  auto source = std::make_shared<std::string>();
  auto decode = std::make_shared<DecodeRequest>();
  CLI::Option* source_opt = sub->add_option("--source", *source,
                                            "Encoder-decoder runs: token ids to decode, e.g. \"3 14 15\"");
  CLI::Option* examples_opt = sub->add_option("--examples", decode->examples,
                                              "Encoder-decoder runs: held-out sequences to decode (default 4)")
                                  ->check(CLI::PositiveNumber);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab train --data text:data/kjv.txt --tokenizer chars --model gpt --out runs/kjv
  normlab sample runs/kjv --prompt "And God said" --tokens 300 --temperature 0.8 --top_k 20
  normlab sample runs/kjv --temperature 0 --json        greedy, one JSON document
  normlab sample runs/copy --examples 3                  an encoder-decoder run: held-out sources decoded
  normlab sample runs/copy --source "5 17 42 8 1 9"      ... or a source of your own (seq_len ids)

The model reads the last seq_len tokens (nanoGPT's block_size) and runs in float32 on the cpu,
whatever precision it trained in. Without --json, stdout is the prompt and then the text as it is
drawn, and a newline. An encoder-decoder run (model encdec) is decoded greedily instead: each
source, its held-out target and the output, as token ids.)");
  return [req, &g, sub, source, decode, source_opt, examples_opt] {
    const bool text_options = sub->count("--prompt") + sub->count("--tokens") + sub->count("--temperature") +
                                  sub->count("--top_k") + sub->count("--seed") >
                              0;
    if (!is_encoder_decoder_run(req->run)) {
      if (source_opt->count() + examples_opt->count() > 0)
        throw UsageError(fmt::format("--source and --examples decode an encoder-decoder run (model encdec); '{}' is "
                                     "not one",
                                     shown(req->run, 200)));
      return run_sample(*req, g);
    }
    if (text_options)
      throw UsageError("an encoder-decoder run is decoded greedily from --source or --examples: --prompt, --tokens, "
                       "--temperature, --top_k and --seed are for text runs");
    decode->run = req->run;
    if (source_opt->count()) decode->source = parse_token_ids(*source, "--source");
    return run_decode(*decode, g);
  };
}

}  // namespace normlab::cli
