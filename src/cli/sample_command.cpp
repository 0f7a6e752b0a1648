// `normlab sample`: text from a trained run. The workflow is sample_run
// (src/experiment/sample.cpp); this file parses and prints.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "cli_common.h"
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
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab train --data text:data/kjv.txt --tokenizer chars --model gpt --out runs/kjv
  normlab sample runs/kjv --prompt "And God said" --tokens 300 --temperature 0.8 --top_k 20
  normlab sample runs/kjv --temperature 0 --json        greedy, one JSON document

The model reads the last seq_len tokens (nanoGPT's block_size) and runs in float32 on the cpu,
whatever precision it trained in. Without --json, stdout is the prompt and then the text as it is
drawn, and a newline.)");
  return [req, &g] { return run_sample(*req, g); };
}

}  // namespace normlab::cli
