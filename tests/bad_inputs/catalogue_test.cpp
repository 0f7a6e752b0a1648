// The bad-input catalogue: every way a user can get a command wrong, as a table. Each
// case runs `normlab` in a scratch directory (with its fixtures: user files, a FIFO, a run
// directory, a symlink) and must end with
//   exit code 2, exactly one line on stderr ("error: ..."), nothing on stdout,
//   and not one file created, changed or removed in the scratch directory or its parent.
// The data-loss cases (--out . --force, a user's directory, symlinks) are here too.
//   ./build/test_bad_inputs --gtest_filter='Catalogue/*'          all of them
//   ./build/test_bad_inputs --gtest_filter='Catalogue/*/train_*'  one family
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::run_cli;
using normlab::test::slurp;
using normlab::test::split_lines;

namespace {

using Setup = std::function<void(const fs::path& work)>;

struct Case {
  std::string name;               // [a-z0-9_] only: the test's name
  std::vector<std::string> args;  // normlab's arguments, run in the scratch directory
  Setup setup;                    // fixtures created in the scratch directory first
  // Environment variables of the run; "{work}" in a value stands for the scratch directory's path.
  std::vector<std::pair<std::string, std::string>> env = {};
};

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A tiny training run's flags: errors are found before any of it runs, but if one were not, the
// case would still end quickly.
std::vector<std::string> tiny(std::vector<std::string> more) {
  std::vector<std::string> a = {"train", "--steps", "2", "--eval_every", "1", "--layers", "1", "--d_model", "8",
                                "--d_hidden", "8", "--batch_size", "2", "--threads", "1"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// A run directory as normlab writes it (the marker, config.json, result.json, ...).
void make_run_dir(const fs::path& d) {
  fs::create_directories(d);
  write(d / ".normlab-run", "a normlab run directory (normlab train)\n");
  write(d / "config.json", "{}\n");
  write(d / "metrics.jsonl", "");
  write(d / "result.json", "{\"status\": \"ok\"}\n");
}

Setup user_dir(const std::string& name) {
  return [name](const fs::path& w) {
    fs::create_directories(w / name / "sub");
    write(w / name / "notes.txt", "a user's file\n");
    write(w / name / "sub" / "data.csv", "1,2,3\n");
  };
}

Setup config(const std::string& text) {
  return [text](const fs::path& w) { write(w / "c.json", text); };
}

// A config file's case: the file decides (no flag overrides a key it sets).
std::vector<std::string> cfg() {
  return {"train", "--config", "c.json", "--steps", "2", "--eval_every", "1", "--batch_size", "2"};
}

// A finished LayerNorm run (config.json + model.safetensors), trained once per process and
// copied into each case that needs one: convert's source.
Setup ln_run(const std::string& name) {
  return [name](const fs::path& w) {
    static const fs::path cached = [] {
      const fs::path d = normlab::test::fresh_dir("catalogue_ln_run");
      fs::create_directories(d);
      const auto r = run_cli({"train", "--steps", "2", "--eval_every", "1", "--layers", "1", "--d_model", "8",
                              "--d_hidden", "8", "--batch_size", "2", "--threads", "1", "--norm", "layernorm",
                              "--placement", "pre", "--out", (d / "ln").string(), "-q", "--json"});
      if (r.exit_code != 0) throw std::runtime_error("the LayerNorm fixture run failed: " + describe(r));
      return d / "ln";
    }();
    fs::copy(cached, w / name, fs::copy_options::recursive);
  };
}

// A finished run on text with the character vocabulary: sample's source.
Setup chars_run(const std::string& name) {
  return [name](const fs::path& w) {
    static const fs::path cached = [] {
      const fs::path d = normlab::test::fresh_dir("catalogue_chars_run");
      fs::create_directories(d);
      const auto r = run_cli({"train", "--model", "gpt", "--data",
                              "text:" + std::string(NORMLAB_SOURCE_DIR) + "/experiments/data/tiny.txt", "--tokenizer", "chars",
                              "--steps", "2", "--eval_every", "1", "--layers", "1", "--d_model", "8", "--heads", "2",
                              "--d_hidden", "8", "--seq_len", "8", "--batch_size", "2", "--threads", "1", "--out",
                              (d / "chars").string(), "-q", "--json"});
      if (r.exit_code != 0) throw std::runtime_error("the text fixture run failed: " + describe(r));
      return d / "chars";
    }();
    fs::copy(cached, w / name, fs::copy_options::recursive);
  };
}

// A finished encoder-decoder run on the copy task: sample's decoding source.
Setup copy_run(const std::string& name) {
  return [name](const fs::path& w) {
    static const fs::path cached = [] {
      const fs::path d = normlab::test::fresh_dir("catalogue_copy_run");
      fs::create_directories(d);
      const auto r = run_cli({"train", "--model", "encdec", "--data", "copy", "--steps", "2", "--eval_every", "1",
                              "--layers", "1", "--d_model", "8", "--heads", "2", "--d_hidden", "8", "--vocab", "7",
                              "--seq_len", "5", "--batch_size", "2", "--threads", "1", "--out", (d / "copy").string(),
                              "-q", "--json"});
      if (r.exit_code != 0) throw std::runtime_error("the copy fixture run failed: " + describe(r));
      return d / "copy";
    }();
    fs::copy(cached, w / name, fs::copy_options::recursive);
  };
}

// A finished two-point sweep (lr 1e-3 and 1e-2, tiny points), made once per process and copied.
Setup sweep_run(const std::string& name) {
  return [name](const fs::path& w) {
    static const fs::path cached = [] {
      const fs::path d = normlab::test::fresh_dir("catalogue_sweep");
      fs::create_directories(d);
      const auto r = run_cli({"sweep", "--out", (d / "sw").string(), "--set", "steps=2", "--set", "eval_every=1", "--set",
                              "layers=1", "--set", "d_model=8", "--set", "d_hidden=8", "--set", "batch_size=2",
                              "lr=1e-3,1e-2", "-q"});
      if (r.exit_code != 0) throw std::runtime_error("the sweep fixture failed: " + describe(r));
      return d / "sw";
    }();
    fs::copy(cached, w / name, fs::copy_options::recursive);
  };
}

// A finished two-point sweep of tiny encoder-decoders on the copy task, made once and copied.
Setup encdec_sweep_run(const std::string& name) {
  return [name](const fs::path& w) {
    static const fs::path cached = [] {
      const fs::path d = normlab::test::fresh_dir("catalogue_encdec_sweep");
      fs::create_directories(d);
      const auto r = run_cli({"sweep", "--out", (d / "sw").string(), "--set", "model=encdec", "--set", "data=copy",
                              "--set", "steps=2", "--set", "eval_every=1", "--set", "layers=1", "--set", "d_model=8",
                              "--set", "heads=2", "--set", "d_hidden=8", "--set", "vocab=7", "--set", "seq_len=5",
                              "--set", "batch_size=2", "lr=1e-3,1e-2", "-q"});
      if (r.exit_code != 0) throw std::runtime_error("the encoder-decoder sweep fixture failed: " + describe(r));
      return d / "sw";
    }();
    fs::copy(cached, w / name, fs::copy_options::recursive);
  };
}

// The cuda-sim module this build made (next to the binary).
std::string cuda_sim_module() { return (fs::path(NORMLAB_BINARY).parent_path() / "libnormlab_cuda_sim.so").string(); }

Setup fifo(const std::string& name) {
  return [name](const fs::path& w) { ::mkfifo((w / name).c_str(), 0600); };
}

// A document whose directive renders the document itself.
Setup self_rendering(const std::string& name) {
  return [name](const fs::path& w) { write(w / name, "# doc\n<!-- normlab: sweep render " + name + " -->\n<!-- normlab: end -->\n"); };
}

// ln's model.safetensors with every weight NaN (the bytes after the header all 0xff).
void poison_weights(const fs::path& run) {
  const fs::path f = run / "model.safetensors";
  std::string bytes = slurp(f);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  for (size_t i = 8 + header; i < bytes.size(); ++i) bytes[i] = '\xff';
  write(f, bytes);
}

// A document `bench norms --out` wrote (the committed reference run).
Setup bench_doc(const std::string& name) {
  return [name](const fs::path& w) {
    fs::copy_file(fs::path(NORMLAB_SOURCE_DIR) / "results" / "bench-runs" / "norms-1.json", w / name);
  };
}

// A gradcheck dump: what `gradcheck --op add --dump` writes.
Setup gradcheck_dump(const std::string& name) {
  return [name](const fs::path& w) {
    write(w / name, "{\"case\": \"add\", \"checked_scalar\": \"f = sum(output * upstream)\", \"inputs\": []}\n");
  };
}

Setup mine(const std::string& name) {
  return [name](const fs::path& w) { write(w / name, "a user's file, not normlab's\n"); };
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::vector<Case> catalogue() {
  const std::string tiny_txt = std::string(NORMLAB_SOURCE_DIR) + "/experiments/data/tiny.txt";
  std::vector<Case> c;
  auto add = [&](std::string name, std::vector<std::string> args, Setup setup = {}) {
    c.push_back({std::move(name), std::move(args), std::move(setup)});
  };
  auto add_env = [&](std::string name, std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> env,
                     Setup setup = {}) { c.push_back({std::move(name), std::move(args), std::move(setup), std::move(env)}); };

  // ---- the command line itself
  add("cli_unknown_command", {"nosuch"});
  add("cli_unknown_flag", {"train", "--nosuch", "1"});
  add("cli_missing_value", {"train", "--lr"});
  add("cli_flag_twice", {"train", "--lr", "0.1", "--lr", "0.2"});
  add("cli_extra_positional", {"gradcheck", "extra"});

  // ---- train: data loss (--out, --force)
  add("train_out_dot_force", tiny({"--out", ".", "--force"}), user_dir("x"));
  add("train_out_dotdot_force", tiny({"--out", "..", "--force"}), user_dir("x"));
  add("train_out_dot_slash_force", tiny({"--out", "./", "--force"}), user_dir("x"));
  add("train_out_sub_dotdot_force", tiny({"--out", "e/..", "--force"}), user_dir("e"));
  add("train_out_root_force", tiny({"--out", "/", "--force"}));
  add("train_out_user_dir_slash_force", tiny({"--out", "e/", "--force"}), user_dir("e"));
  add("train_out_user_dir_force", tiny({"--out", "e", "--force"}), user_dir("e"));
  add("train_out_user_dir", tiny({"--out", "e"}), user_dir("e"));
  add("train_out_empty_dir_force", tiny({"--out", "e", "--force"}), [](const fs::path& w) { fs::create_directory(w / "e"); });
  add("train_out_run_dir_plus_user_file_force", tiny({"--out", "r", "--force"}), [](const fs::path& w) {
    fs::create_directories(w / "r");  // config.json and result.json, but also a user's file, no marker
    write(w / "r" / "config.json", "{}");
    write(w / "r" / "result.json", "{}");
    write(w / "r" / "thesis.tex", "mine");
  });
  add("train_out_run_dir_with_marker_plus_user_file_force", tiny({"--out", "r", "--force"}), [](const fs::path& w) {
    make_run_dir(w / "r");
    write(w / "r" / "my-notes.md", "what I learned from this run");
  });
  add("train_out_existing_run_no_force", tiny({"--out", "r"}), [](const fs::path& w) { make_run_dir(w / "r"); });
  add("train_out_symlink_to_run_force", tiny({"--out", "link", "--force"}), [](const fs::path& w) {
    make_run_dir(w / "r");
    fs::create_directory_symlink("r", w / "link");
  });
  add("train_out_symlink_to_user_dir_force", tiny({"--out", "link", "--force"}), [](const fs::path& w) {
    user_dir("e")(w);
    fs::create_directory_symlink("e", w / "link");
  });
  add("train_out_dangling_symlink", tiny({"--out", "link"}),
      [](const fs::path& w) { fs::create_symlink("nowhere", w / "link"); });
  add("train_out_dangling_symlink_force", tiny({"--out", "link", "--force"}),
      [](const fs::path& w) { fs::create_symlink("nowhere", w / "link"); });
  add("train_out_is_file", tiny({"--out", "f.txt"}), [](const fs::path& w) { write(w / "f.txt", "mine"); });
  add("train_out_is_file_force", tiny({"--out", "f.txt", "--force"}), [](const fs::path& w) { write(w / "f.txt", "mine"); });
  add("train_out_missing_parent", tiny({"--out", "no/such/dir"}));
  add("train_out_parent_is_file", tiny({"--out", "f.txt/run"}), [](const fs::path& w) { write(w / "f.txt", "mine"); });
  add("train_out_empty", tiny({"--out", ""}));
  add("train_resume_nothing_there", {"train", "--resume", "nowhere"});
  add("train_resume_finished_run", {"train", "--resume", "r"}, [](const fs::path& w) { make_run_dir(w / "r"); });
  add("train_resume_with_a_config_key", {"train", "--resume", "r", "--lr", "1"});
  add("train_resume_with_out", {"train", "--resume", "r", "--out", "s"});
  add("train_resume_user_dir", {"train", "--resume", "e.partial.1"}, user_dir("e.partial.1"));
  add("train_resume_partial_without_checkpoint", {"train", "--resume", "r.partial.999999999"},
      [](const fs::path& w) {
        fs::create_directories(w / "r.partial.999999999");
        write(w / "r.partial.999999999" / ".normlab-run", "a normlab run directory (normlab train)\n");
        write(w / "r.partial.999999999" / "config.json", "{}\n");
      });
  add("train_resume_damaged_state", {"train", "--resume", "r"}, [](const fs::path& w) {
    const fs::path p = w / "r.partial.999999999";
    fs::create_directories(p / "checkpoints");
    write(p / ".normlab-run", "a normlab run directory (normlab train)\n");
    write(p / "config.json", "{}\n");
    write(p / "checkpoints" / "step-4.safetensors", "not a checkpoint");
    write(p / "checkpoints" / "step-4.state.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
  });
  add("train_out_cwd_absolute_force", {}, {});  // filled below (needs the scratch path)

  // ---- train: numbers
  // ---- train: the variants' contradictory combinations (docs/variants.md)
  add("train_rezero_with_a_norm", tiny({"--residual_scale", "rezero", "--norm", "layernorm"}));
  add("train_layerscale_with_deepnorm", tiny({"--residual_scale", "layerscale", "--placement", "deepnorm"}));
  add("train_skipinit_without_residual", tiny({"--residual_scale", "skipinit", "--residual", "false"}));
  add("train_layerscale_init_without_layerscale", tiny({"--layerscale_init", "0.1"}));
  add("train_layerscale_init_zero", tiny({"--residual_scale", "layerscale", "--layerscale_init", "0"}));
  add("train_mix_post_layers_without_mixln", tiny({"--mix_post_layers", "1"}));
  add("train_mix_post_layers_above_layers", tiny({"--placement", "mixln", "--layers", "2", "--mix_post_layers", "3"}));
  add("train_mix_post_layers_negative", tiny({"--placement", "mixln", "--mix_post_layers", "-1"}));
  add("train_ln_scaling_with_post", tiny({"--ln_scaling", "true", "--placement", "post"}));
  add("train_ln_scaling_without_a_norm", tiny({"--ln_scaling", "true", "--norm", "none"}));
  add("train_dyt_alpha_with_layernorm", tiny({"--dyt_alpha", "0.5"}));
  add("train_dyt_alpha_negative", tiny({"--norm", "dyt", "--dyt_alpha", "-1"}));
  add("train_norm_eps_with_dyt", tiny({"--norm", "dyt", "--norm_eps", "1e-5"}));
  add("train_gemma_norm_with_dyt", tiny({"--gemma_norm", "true", "--norm", "dyt"}));
  add("train_embed_norm_without_a_norm", tiny({"--embed_norm", "true", "--norm", "none"}));
  add("train_unknown_residual_scale", tiny({"--residual_scale", "rescale"}));
  add("train_seed_negative", tiny({"--seed", "-1"}));
  add("train_seed_2_64", tiny({"--seed", "18446744073709551616"}));
  add("train_seed_huge", tiny({"--seed", "123456789012345678901234567890"}));
  add("train_seed_fraction", tiny({"--seed", "1.5"}));
  add("train_seed_1e400", tiny({"--seed", "1e400"}));
  add("train_layers_wrap_int", tiny({"--layers", "4294967297"}));
  add("train_layers_huge", tiny({"--layers", "99999999999"}));
  add("train_layers_zero", tiny({"--layers", "0"}));
  add("train_layers_negative", tiny({"--layers", "-3"}));
  add("train_threads_wrap", tiny({"--threads", "4294967297"}));
  add("train_threads_huge", tiny({"--threads", "100000"}));
  add("train_threads_negative", tiny({"--threads", "-1"}));
  add("train_lr_1e400", tiny({"--lr", "1e400"}));
  add("train_lr_inf", tiny({"--lr", "inf"}));
  add("train_lr_nan", tiny({"--lr", "nan"}));
  add("train_lr_negative", tiny({"--lr", "-0.1"}));
  add("train_lr_text", tiny({"--lr", "fast"}));
  add("train_lr_empty", tiny({"--lr", ""}));
  add("train_lr_hex", tiny({"--lr", "0x10"}));
  add("train_lr_trailing", tiny({"--lr", "0.1abc"}));
  add("train_adam_eps_inf", tiny({"--adam_eps", "inf"}));
  add("train_adam_eps_1e999", tiny({"--adam_eps", "1e999"}));
  add("train_clip_inf", tiny({"--clip", "1e400"}));
  add("train_norm_eps_inf", tiny({"--norm_eps", "1e309"}));
  add("train_norm_eps_huge", tiny({"--norm_eps", "1e300"}));
  add("train_weight_decay_inf", tiny({"--weight_decay", "1e400"}));
  add("train_weight_decay_negative", tiny({"--weight_decay", "-1"}));
  add("train_lr_underflow", tiny({"--lr", "1e-400"}));
  add("train_beta1_one", tiny({"--beta1", "1"}));
  add("train_noise_two", tiny({"--noise", "2"}));
  add("train_steps_negative", tiny({"--steps", "-1"}));
  add("train_steps_huge", tiny({"--steps", "1e30"}));
  add("train_batch_huge", tiny({"--batch_size", "1e15"}));
  add("train_heads_not_dividing", tiny({"--model", "gpt", "--heads", "3"}));
  add("train_vocab_one", tiny({"--vocab", "1"}));
  add("train_qk_norm_toy", tiny({"--qk_norm", "true"}));
  add("train_bool_maybe", tiny({"--qk_norm", "maybe"}));
  add("train_memory_too_large", tiny({"--d_model", "65536", "--d_hidden", "65536", "--layers", "4096"}));
  add("train_memory_large_batch", tiny({"--d_model", "4096", "--batch_size", "1000000", "--seq_len", "1024"}));
  add("train_memory_vocab", tiny({"--vocab", "16777216", "--d_model", "65536"}));
  add("train_eval_every_zero", tiny({"--eval_every", "0"}));

  // ---- train: strings echoed into errors
  add("train_model_newline", tiny({"--model", "gpt\nsecond line"}));
  add("train_model_huge", tiny({"--model", std::string(100000, 'm')}));
  add("train_norm_escape", tiny({"--norm", "\x1b[31mred"}));
  add("train_placement_unknown", tiny({"--placement", "middle"}));
  add("train_data_unknown", tiny({"--data", "imagenet"}));
  add("train_data_text_empty_path", tiny({"--data", "text:"}));
  add("train_data_huge_value", tiny({"--data", std::string(50000, 'd')}));
  add("train_lr_newline", tiny({"--lr", "0.1\n0.2"}));

  // ---- train: files that are not regular files or do not exist
  add("train_config_missing", tiny({"--config", "nope.json"}));
  add("train_config_directory", tiny({"--config", "."}));
  add("train_config_dev_zero", tiny({"--config", "/dev/zero"}));
  add("train_config_dev_null", tiny({"--config", "/dev/null"}));
  add("train_config_fifo", tiny({"--config", "fifo"}), [](const fs::path& w) { ::mkfifo((w / "fifo").c_str(), 0600); });
  add("train_config_too_big", cfg(), config("{\"lr\": 0.1" + std::string(2 << 20, ' ') + "}"));
  add("train_data_directory", tiny({"--data", "text:."}));
  add("train_data_dev_zero", tiny({"--data", "text:/dev/zero"}));
  add("train_data_fifo", tiny({"--data", "text:fifo"}), [](const fs::path& w) { ::mkfifo((w / "fifo").c_str(), 0600); });
  add("train_data_missing", tiny({"--data", "text:nope.txt"}));
  add("train_data_too_short", tiny({"--data", "text:short.txt"}), [](const fs::path& w) { write(w / "short.txt", "abc"); });
  add("train_data_vocab_wrong", tiny({"--data", "text:" + tiny_txt, "--vocab", "64"}));
  add("train_tokenizer_unknown", tiny({"--data", "text:" + tiny_txt, "--tokenizer", "words"}));
  add("train_tokenizer_synthetic", tiny({"--tokenizer", "chars"}));
  add("train_vocabulary_bytes", tiny({"--data", "text:" + tiny_txt, "--vocabulary", "abc"}));
  add("train_chars_vocab_wrong", tiny({"--data", "text:" + tiny_txt, "--tokenizer", "chars", "--vocab", "64"}));
  add("train_chars_not_utf8", tiny({"--data", "text:latin1.txt", "--tokenizer", "chars"}),
      [](const fs::path& w) { write(w / "latin1.txt", std::string(200, 'a') + "caf\xe9 " + std::string(200, 'b')); });
  add("train_vocabulary_lacks_a_char", tiny({"--data", "text:" + tiny_txt, "--tokenizer", "chars", "--vocabulary", "abc"}));
  add("train_vocabulary_twice", tiny({"--data", "text:" + tiny_txt, "--tokenizer", "chars", "--vocabulary", "aba"}));
  add("train_vocabulary_not_utf8", tiny({"--data", "text:" + tiny_txt, "--tokenizer", "chars", "--vocabulary", "a\xff"}));
  add("train_weight_decay_on_unknown", tiny({"--weight_decay_on", "biases"}));
  add("train_tie_embeddings_maybe", tiny({"--tie_embeddings", "maybe"}));
  add("train_bias_number", cfg(), config(R"({"bias": 0})"));
  add("train_encdec_synthetic", tiny({"--model", "encdec"}));
  add("train_encdec_text", tiny({"--model", "encdec", "--data", "text:" + tiny_txt}));
  add("train_copy_gpt", tiny({"--model", "gpt", "--data", "copy"}));
  add("train_data_unknown_task", tiny({"--model", "encdec", "--data", "sort"}));
  add("train_encdec_mixln", tiny({"--model", "encdec", "--data", "copy", "--placement", "mixln"}));
  add("train_encdec_bf16", tiny({"--model", "encdec", "--data", "copy", "--precision", "bf16"}));
  add("train_encdec_rezero", tiny({"--model", "encdec", "--data", "copy", "--norm", "none", "--residual_scale", "rezero"}));
  add("train_encdec_head_bias", tiny({"--model", "encdec", "--data", "copy", "--head_bias", "true"}));
  add("train_encdec_vocab_two", tiny({"--model", "encdec", "--data", "reverse", "--vocab", "2"}));
  add("train_encdec_heads_not_dividing", tiny({"--model", "encdec", "--data", "copy", "--heads", "3"}));
  add("train_encoder_layers_zero", tiny({"--model", "encdec", "--data", "copy", "--encoder_layers", "0"}));
  add("train_decoder_layers_huge", tiny({"--model", "encdec", "--data", "copy", "--decoder_layers", "100000"}));
  add("train_encoder_layers_gpt", tiny({"--model", "gpt", "--encoder_layers", "2"}));
  add("train_shared_embeddings_toy", tiny({"--shared_embeddings", "false"}));
  add("train_shared_embeddings_maybe", tiny({"--model", "encdec", "--data", "copy", "--shared_embeddings", "maybe"}));
  add("train_encdec_noise_above_one", tiny({"--model", "encdec", "--data", "translate", "--noise", "1.5"}));
  add("train_min_lr_constant", tiny({"--min_lr", "1e-4"}));
  add("train_min_lr_above_lr", tiny({"--schedule", "cosine", "--lr", "1e-3", "--min_lr", "1e-2"}));
  add("train_min_lr_negative", tiny({"--schedule", "cosine", "--min_lr", "-1e-4"}));
  add("train_dropout_one", tiny({"--dropout", "1"}));
  add("train_dropout_negative", tiny({"--dropout", "-0.1"}));
  add("train_dropout_text", cfg(), config(R"({"dropout": "0.1"})"));
  // Every checkpoint read refuses what is not a regular file: reading a FIFO would block forever
  add("train_init_from_fifo", tiny({"--init_from", "fifo"}), [](const fs::path& w) { ::mkfifo((w / "fifo").c_str(), 0600); });
  add("train_init_from_dev_zero", tiny({"--init_from", "/dev/zero"}));
  add("train_init_from_directory", tiny({"--init_from", "."}));
  add("train_init_from_missing", tiny({"--init_from", "nope.safetensors"}));
  add("train_resume_empty", {"train", "--resume", ""});
  add("train_save_every_text", tiny({"--save_every", "x"}));
  add("train_save_every_negative", tiny({"--save_every", "-1"}));

  // ---- train: config files
  add("config_not_json", cfg(), config("lr = 0.1"));
  add("config_empty", cfg(), config(""));
  add("config_array", cfg(), config("[1, 2]"));
  add("config_truncated", cfg(), config("{\"lr\": 0.1,"));
  add("config_duplicate_key", cfg(), config("{\"lr\": 0.1, \"layers\": 2, \"lr\": 0.2}"));
  add("config_duplicate_nested_ok_but_unknown", cfg(), config("{\"x\": {\"a\": 1, \"a\": 2}}"));
  add("config_deep_array", cfg(), config(nested(100000)));
  add("config_deep_value", cfg(), config("{\"lr\": " + nested(100000) + "}"));
  add("config_deep_object", cfg(), [](const fs::path& w) {
    std::string s;
    for (int i = 0; i < 50000; ++i) s += "{\"a\":";
    s += "1" + std::string(50000, '}');
    write(w / "c.json", s);
  });
  add("config_huge_value", cfg(), config("{\"model\": \"" + std::string(900000, 'g') + "\"}"));
  add("config_huge_number_value", cfg(), config("{\"lr\": [" + std::string(200000, '1') + "]}"));
  add("config_huge_key", cfg(), config("{\"" + std::string(500000, 'k') + "\": 1}"));
  add("config_unknown_key", cfg(), config("{\"learning_rate\": 0.1}"));
  add("config_key_newline", cfg(), config("{\"l\\nr\": 0.1}"));
  add("config_lr_1e400", cfg(), config("{\"lr\": 1e400}"));
  add("config_lr_string", cfg(), config("{\"lr\": \"0.1\"}"));
  add("config_lr_null", cfg(), config("{\"lr\": null}"));
  add("config_adam_eps_null", cfg(), config("{\"adam_eps\": null}"));
  add("config_seed_negative", cfg(), config("{\"seed\": -1}"));
  add("config_seed_2_64", cfg(), config("{\"seed\": 18446744073709551616}"));
  add("config_seed_float", cfg(), config("{\"seed\": 1e30}"));
  add("config_layers_wrap", cfg(), config("{\"layers\": 4294967297}"));
  add("config_threads_wrap", cfg(), config("{\"threads\": 4294967297}"));
  add("config_threads_float_huge", cfg(), config("{\"threads\": 1e300}"));
  add("config_layers_fraction", cfg(), config("{\"layers\": 2.5}"));
  add("config_bool_as_number", cfg(), config("{\"qk_norm\": 1}"));
  add("config_invalid_utf8", cfg(), config("{\"model\": \"\xff\xfe\"}"));
  add("config_nul_byte", cfg(), config(std::string("{\"lr\": 0.1}\0junk", 16)));
  add("config_trailing_garbage", cfg(), config("{\"lr\": 0.1} {\"lr\": 0.2}"));

  // ---- probe
  add("probe_unknown_preset", {"probe", "nosuch"});
  add("probe_preset_with_config_key", {"probe", "plain-stack", "--layers", "3"});
  add("probe_seeds_zero", {"probe", "--seeds", "0"});
  add("probe_seeds_huge", {"probe", "--seeds", "99999999999"});
  add("probe_seeds_many", {"probe", "--seeds", "100000"});
  add("probe_batch_zero", {"probe", "--batch", "0"});
  add("probe_batch_huge", {"probe", "--batch", "1000000000"});
  add("probe_threads_huge", {"probe", "--threads", "100000"});
  add("probe_threads_negative", {"probe", "--threads", "-2"});
  add("probe_memory", {"probe", "--layers", "4096", "--d_model", "65536"});
  add("probe_memory_batch", {"probe", "--batch", "1000000", "--d_model", "4096"});
  add("probe_depths_huge", {"probe", "xiong2020", "--depths", "100000"});
  add("probe_depths_one", {"probe", "xiong2020", "--depths", "1"});
  add("probe_xiong_model_toy", {"probe", "xiong2020", "--model", "toy"});
  add("probe_xiong_encdec_plot", {"probe", "xiong2020", "--model", "encdec", "--plot", "p.svg"});
  add("probe_xiong_encdec_depth_one", {"probe", "xiong2020", "--model", "encdec", "--depths", "1"});
  add("probe_encdec_other_preset", {"probe", "plain-stack", "--model", "encdec"});
  add("probe_config_encdec", {"probe", "--model", "encdec", "--data", "copy"});
  add("probe_gains_negative", {"probe", "plain-stack", "--gains", "-1"});
  add("probe_gains_inf", {"probe", "plain-stack", "--gains", "1e400"});
  add("probe_activation_unknown", {"probe", "plain-stack", "--activation", "relu"});
  add("probe_config_deep", {"probe", "--config", "c.json"}, config(nested(100000)));
  add("probe_config_fifo", {"probe", "--config", "fifo"}, [](const fs::path& w) { ::mkfifo((w / "fifo").c_str(), 0600); });
  add("probe_lr_flag", {"probe", "--lr", "0.1"});
  add("probe_seed_negative", {"probe", "--seed", "-1"});
  add("probe_gains_inf_text", {"probe", "plain-stack", "--gains", "1,inf"});
  add("probe_depths_zero", {"probe", "xiong2020", "--depths", "0"});
  add("probe_gains_empty_entry", {"probe", "plain-stack", "--gains", "1,,2"});
  add("probe_depths_empty_entry", {"probe", "xiong2020", "--depths", "6,,12"});
  add("probe_widths_trailing_comma", {"probe", "xiong2020", "--depths", "6", "--widths", "64,"});
  add("probe_config_threads_wrap", {"probe", "--config", "c.json"}, config("{\"threads\": 99999999999}"));
  add("handcalc_eps_underflow", {"handcalc", "--eps", "1e-400"});
  add("train_warmup_huge", tiny({"--warmup_steps", "99999999999999"}));

  // ---- gradcheck
  add("gradcheck_seed_negative", {"gradcheck", "--op", "add", "--seed", "-1"});
  add("gradcheck_seed_text", {"gradcheck", "--op", "add", "--seed", "abc"});
  add("gradcheck_seed_2_64", {"gradcheck", "--op", "add", "--seed", "18446744073709551616"});
  add("gradcheck_unknown_op", {"gradcheck", "--op", "nosuch"});
  add("gradcheck_op_newline", {"gradcheck", "--op", "layer\nnorm"});
  add("gradcheck_shape_two", {"gradcheck", "--shape", "2x5"});
  add("gradcheck_shape_zero", {"gradcheck", "--shape", "0x5x8"});
  add("gradcheck_shape_huge_each", {"gradcheck", "--shape", "99999x5x8"});
  add("gradcheck_shape_memory", {"gradcheck", "--shape", "4096x4096x4096"});
  add("gradcheck_shape_newline", {"gradcheck", "--shape", "\n"});  // fuzz finding (shapes, crash-71853c61)
  add("gradcheck_shape_huge_text", {"gradcheck", "--shape", std::string(100000, '7') + "x"});
  add("bench_norms_shape_newline", {"bench", "norms", "--shapes", "1x\n1x8"});
  add("bench_norms_shape_huge_text", {"bench", "norms", "--shapes", std::string(100000, 'x')});
  add("bench_norms_threads_newline", {"bench", "norms", "--threads", "1\n2", "--shapes", "1x1x8"});
  add("gradcheck_shape_text", {"gradcheck", "--shape", "axbxc"});
  add("gradcheck_shape_overflow", {"gradcheck", "--shape", "99999999999999999999x1x1"});
  add("gradcheck_threads_huge", {"gradcheck", "--op", "add", "--threads", "100000"});
  add("gradcheck_threads_negative", {"gradcheck", "--op", "add", "--threads", "-1"});
  add("gradcheck_backend_unknown", {"gradcheck", "--op", "add", "--backend", "tpu"});
  add("gradcheck_dump_two_ops", {"gradcheck", "--op", "add", "--op", "mul", "--dump", "d.json"});
  add("gradcheck_dump_directory", {"gradcheck", "--op", "add", "--dump", "."});
  add("gradcheck_dump_missing_dir", {"gradcheck", "--op", "add", "--dump", "no/such/d.json"});
  add("gradcheck_dump_trailing_slash", {"gradcheck", "--op", "add", "--dump", "d/"});
  // --dump never replaces a file that is not a gradcheck dump (a person's, not normlab's to lose);
  // --force only one that is
  add("gradcheck_dump_existing_user_file", {"gradcheck", "--op", "add", "--dump", "d.json"}, mine("d.json"));
  add("gradcheck_dump_existing_user_file_force", {"gradcheck", "--op", "add", "--dump", "d.json", "--force"},
      mine("d.json"));
  add("gradcheck_dump_existing_dump_no_force", {"gradcheck", "--op", "add", "--dump", "d.json"}, gradcheck_dump("d.json"));
  add("gradcheck_dump_empty_name", {"gradcheck", "--op", "add", "--dump", ""});
  // --max-seconds 30: about 250-450 s of finite differences on the machines seen, far over it
  // (the default 300 s was within reach of a fast one, and the run then started for real).
  add("gradcheck_shape_over_time_budget", {"gradcheck", "--op", "layernorm", "--shape", "64x64x64", "--max-seconds", "30"});
  add("gradcheck_max_seconds_zero", {"gradcheck", "--op", "add", "--shape", "2x3x4", "--max-seconds", "0"});

  // ---- handcalc
  add("handcalc_x_text", {"handcalc", "--x", "a,b"});
  add("handcalc_precision_unknown", {"handcalc", "--precision", "fp8"});
  add("handcalc_norm_compute_in_fp32", {"handcalc", "--precision", "fp32", "--norm-compute", "format"});
  add("handcalc_norm_compute_fused", {"handcalc", "--precision", "fp16", "--norm-compute", "fused"});
  add("handcalc_norm_compute_unknown", {"handcalc", "--precision", "fp16", "--norm-compute", "fp64"});
  add("handcalc_norm_compute_alone", {"handcalc", "--norm-compute", "fp32"});
  add("handcalc_case_unknown", {"handcalc", "--precision", "fp16", "--case", "nosuch"});
  add("handcalc_case_with_x", {"handcalc", "--precision", "fp16", "--case", "all-equal", "--x", "1,2"});
  add("handcalc_precision_decimals", {"handcalc", "--precision", "fp16", "--decimals", "3"});
  add("handcalc_precision_placement", {"handcalc", "placement", "--precision", "bf16"});
  add("handcalc_x_1e400", {"handcalc", "--x", "1e400"});
  add("handcalc_x_empty", {"handcalc", "--x", ""});
  add("handcalc_x_nan", {"handcalc", "--x", "nan,1"});
  add("handcalc_residual_x_huge_list", {"handcalc", "residual", "--x", [] {
        std::string s = "1";
        for (int i = 0; i < 20000; ++i) s += ",1";
        return s;
      }()});
  add("handcalc_x_huge_invalid", {"handcalc", "--x", std::string(100000, 'x')});
  add("handcalc_decimals_huge_text", {"handcalc", "--decimals", std::string(100000, '9')});
  add("handcalc_eps_newline", {"handcalc", "--eps", "1e-5\nmore"});
  add("handcalc_eps_zero", {"handcalc", "--eps", "0"});
  add("handcalc_eps_negative", {"handcalc", "--eps", "-1"});
  add("handcalc_gamma_length", {"handcalc", "--gamma", "1,2"});
  add("handcalc_decimals_huge", {"handcalc", "--decimals", "99999999999999999999"});
  add("handcalc_decimals_negative", {"handcalc", "--decimals", "-1"});
  add("handcalc_norm_unknown", {"handcalc", "--norm", "batchnorm"});
  add("handcalc_residual_w_size", {"handcalc", "residual", "--x", "1,2", "--w", "1,2,3"});
  add("handcalc_residual_eps", {"handcalc", "residual", "--eps", "1e-5"});
  add("handcalc_placement_norm_both", {"handcalc", "placement", "--norm", "both"});
  add("handcalc_x_twice", {"handcalc", "--x", "1,2", "residual", "--x", "1,2"});

  // ---- sweep
  // Each of these was found only after points had trained, or after DIR had been created (or not
  // at all); a sweep's points are tiny, so a case that slipped through would still end quickly.
  const auto sweep = [](std::vector<std::string> more) {
    std::vector<std::string> a = {"sweep", "--out", "sw", "--set", "steps=2", "--set", "eval_every=1",
                                  "--set", "layers=1", "--set", "d_model=8", "--set", "d_hidden=8", "--set",
                                  "batch_size=2", "lr=1e-3,1e-2"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const auto sweep_spec = [](std::vector<std::string> more) {
    std::vector<std::string> a = {"sweep", "c.json", "--out", "sw", "--jobs", "1"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const std::string tiny_base = R"("base": {"steps": 2, "eval_every": 1, "layers": 1, "d_model": 8, "d_hidden": 8, "batch_size": 2})";
  add("sweep_summary_metric_unknown", sweep_spec({}),
      config("{" + tiny_base + R"(, "grid": {"lr": [0.001, 0.01]}, "summary": {"metric": "foo"}})"));
  add("sweep_summary_metric_not_a_number", sweep_spec({}),
      config("{" + tiny_base + R"(, "grid": {"lr": [0.001, 0.01]}, "summary": {"metric": "status"}})"));
  add("sweep_threads_huge", sweep({"--threads", "100000"}));
  add("sweep_jobs_zero", sweep({"--jobs", "0"}));
  add("sweep_slurm_cpus_zero", sweep({"--slurm", "--slurm-cpus", "0"}));
  add("sweep_slurm_cpus_huge", sweep({"--slurm", "--slurm-cpus", "100000"}));
  add("sweep_slurm_shards_zero", sweep({"--slurm", "--slurm-shards", "0"}));
  add("sweep_slurm_shards_negative", sweep({"--slurm", "--slurm-shards", "-2"}));
  add("sweep_slurm_shards_more_than_points", sweep({"--slurm", "--slurm-shards", "3"}));
  add("sweep_slurm_array_max_negative", sweep({"--slurm", "--slurm-array-max", "-1"}));
  add("sweep_slurm_time_newline_injects_directive", sweep({"--slurm", "--slurm-time", "01:00:00\n#SBATCH --x"}));
  add("sweep_slurm_time_text", sweep({"--slurm", "--slurm-time", "one hour"}));
  add("sweep_slurm_time_trailing_space", sweep({"--slurm", "--slurm-time", "01:00:00 --mem=1T"}));
  add("sweep_slurm_partition_newline", sweep({"--slurm", "--slurm-partition", "cpu\n#SBATCH --x"}));
  add("sweep_slurm_partition_hash", sweep({"--slurm", "--slurm-partition", "cpu#x"}));
  add("sweep_slurm_partition_space", sweep({"--slurm", "--slurm-partition", "cpu --mem=1T"}));
  add("sweep_slurm_out_newline", {"sweep", "--out", "sw\n#SBATCH --x", "lr=1e-3,1e-2", "--slurm"});
  add("sweep_slurm_out_backslash", {"sweep", "--out", "s\\w", "lr=1e-3,1e-2", "--slurm"});
  add("sweep_grid_lr_1e400", sweep_spec({}), config("{" + tiny_base + R"(, "grid": {"lr": [1e400]}})"));
  add("sweep_base_lr_1e400", sweep_spec({}), config(R"({"base": {"lr": 1e400}, "grid": {"layers": [1, 2]}})"));
  add("sweep_grid_key_twice", sweep_spec({}), config("{" + tiny_base + R"(, "grid": {"lr": [0.001], "lr": [0.01]}})"));
  add("sweep_spec_key_twice", sweep_spec({}),
      config("{" + tiny_base + R"(, "grid": {"lr": [0.001]}, "grid": {"lr": [0.01]}})"));
  add("sweep_base_key_twice", sweep_spec({}), config(R"({"base": {"steps": 2, "steps": 3}, "grid": {"lr": [0.001]}})"));
  add("sweep_spec_deep", sweep_spec({}), config("{\"grid\": {\"lr\": " + nested(100000) + "}}"));
  add("sweep_rerun_newline", sweep({"--rerun", "diverged,x\ny"}));  // fuzz finding (sbatch, crash-cce65492)
  add("sweep_shard_newline", sweep({"--shard", "0\n/2"}));
  add("sweep_spec_key_newline", sweep_spec({}), config(R"({"gr\nid": {"lr": [0.001]}})"));
  add("sweep_summarize_format_newline", {"sweep", "summarize", "sw", "--format", "md\ncsv"});
  add("sweep_summarize_metric_unknown", {"sweep", "summarize", "sw", "--metric", "foo"}, [](const fs::path& w) {
    fs::create_directories(w / "sw");
    write(w / "sw" / "spec.json", R"({"grid": {"lr": [0.001, 0.01]}})");
  });

  // ---- bench
  add("bench_norms_shape_text", {"bench", "norms", "--shapes", "big"});
  add("bench_norms_shape_zero", {"bench", "norms", "--shapes", "0x1x8"});
  add("bench_norms_shape_overflow", {"bench", "norms", "--shapes", "99999999999999999999x1x1"});
  add("bench_norms_shape_too_many_elements", {"bench", "norms", "--shapes", "1048576x1048576x1048576"});
  add("bench_norms_shape_memory", {"bench", "norms", "--shapes", "1024x1024x65536", "--threads", "1"});
  add("bench_norms_shapes_empty_entry", {"bench", "norms", "--shapes", "1x1x8,,1x1x8"});
  add("bench_norms_impl_unknown", {"bench", "norms", "--impl", "magic", "--shapes", "1x1x8"});
  add("bench_norms_pass_unknown", {"bench", "norms", "--pass", "sideways"});
  add("bench_norms_pass_empty_entry", {"bench", "norms", "--pass", "fwd,"});
  add("bench_norms_pass_nothing_to_run", {"bench", "norms", "--impl", "onednn", "--pass", "addfwd"});
  add("bench_norms_resident_shape_zero", {"bench", "norms", "--resident-shapes", "1x0x64"});
  add("bench_norms_resident_shape_memory", {"bench", "norms", "--resident-shapes", "1024x1024x65536", "--threads", "1"});
  add("bench_norms_threads_huge", {"bench", "norms", "--threads", "100000", "--shapes", "1x1x8"});
  add("bench_norms_threads_zero", {"bench", "norms", "--threads", "0", "--shapes", "1x1x8"});
  add("bench_norms_seed_negative", {"bench", "norms", "--seed", "-1", "--shapes", "1x1x8"});
  add("bench_norms_footprint_negative", {"bench", "norms", "--footprint-mib", "-1"});
  add("bench_norms_out_missing_dir", {"bench", "norms", "--shapes", "1x1x8", "--threads", "1", "--out", "no/such/r.json"});
  add("bench_norms_out_directory", {"bench", "norms", "--shapes", "1x1x8", "--threads", "1", "--out", "."});
  add("bench_norms_two_formats", {"bench", "norms", "--json", "--csv"});
  add("bench_norms_compare_missing", {"bench", "norms", "--shapes", "1x1x8", "--threads", "1", "--compare", "nope.json"});
  add("bench_norms_compare_fifo", {"bench", "norms", "--shapes", "1x1x8", "--threads", "1", "--compare", "fifo"},
      [](const fs::path& w) { ::mkfifo((w / "fifo").c_str(), 0600); });
  add("bench_norms_footprint_memory", {"bench", "norms", "--footprint-mib", "1000000000", "--shapes", "1x1x8"});
  add("bench_norms_repeats_huge", {"bench", "norms", "--repeats", "99999999999999999999", "--shapes", "1x1x8"});
  add("bench_norms_warmup_huge", {"bench", "norms", "--warmup", "1e12", "--shapes", "1x1x8"});
  add("bench_norms_min_time_inf", {"bench", "norms", "--min-time", "1e400", "--shapes", "1x1x8"});
  add("bench_step_model_encdec", {"bench", "step", "--model", "encdec"});
  add("bench_step_repeats_huge", {"bench", "step", "--repeats", "99999999999999999999"});
  add("bench_step_min_time_inf", {"bench", "step", "--min-time", "inf"});
  add("bench_step_tokens_memory", {"bench", "step", "--batch", "1000000000", "--seq", "1000000000"});
  add("bench_step_layers_memory", {"bench", "step", "--layers", "100000000"});
  add("bench_step_seed_negative", {"bench", "step", "--seed", "-1"});
  add("bench_step_out_directory", {"bench", "step", "--threads", "1", "--out", "."});
  add("bench_step_model_unknown", {"bench", "step", "--model", "rnn"});
  add("bench_step_heads", {"bench", "step", "--model", "gpt", "--heads", "3"});
  add("bench_step_precision_fp16", {"bench", "step", "--precision", "fp32,fp16"});
  add("bench_step_precision_unknown", {"bench", "step", "--precision", "fp8"});
  add("bench_step_precision_twice", {"bench", "step", "--precision", "bf16,fp32,bf16"});
  add("bench_merge_missing", {"bench", "merge", "nope.json"});
  add("bench_merge_not_json", {"bench", "merge", "c.json"}, config("not json"));
  add("bench_merge_deep", {"bench", "merge", "c.json"}, config(nested(100000)));
  add("bench_merge_directory", {"bench", "merge", "."});
  add("bench_merge_dev_zero", {"bench", "merge", "/dev/zero"});
  add("bench_merge_wrong_doc", {"bench", "merge", "c.json"}, config("{\"context\": 1, \"benchmarks\": 2}"));
  add("bench_compare_one_file", {"bench", "--compare", "c.json"}, config("{}"));
  add("bench_compare_not_json", {"bench", "--compare", "c.json", "c.json"}, config("[1,"));
  add("bench_merge_out_missing_dir", {"bench", "merge", "c.json", "--out", "no/such/x.json"}, config("{}"));
  // --out never replaces a person's file (not normlab's to lose); --force only a bench document
  const std::vector<std::string> one = {"bench", "norms", "--shapes", "1x1x8", "--threads", "1", "--impl",
                                        "layernorm.fused", "--pass", "fwd", "--repeats", "1", "--min-time", "0"};
  auto bench_one = [&one](std::vector<std::string> more) {
    std::vector<std::string> a = one;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  add("bench_norms_out_existing_user_file", bench_one({"--out", "f.json"}), mine("f.json"));
  add("bench_norms_out_existing_user_file_force", bench_one({"--out", "f.json", "--force"}), mine("f.json"));
  add("bench_norms_out_existing_bench_doc_no_force", bench_one({"--out", "b.json"}), bench_doc("b.json"));
  add("bench_norms_out_symlink_force", bench_one({"--out", "link.json", "--force"}), [](const fs::path& w) {
    bench_doc("b.json")(w);
    fs::create_symlink("b.json", w / "link.json");
  });
  add("bench_norms_out_empty_name", bench_one({"--out", ""}));
  add("bench_norms_impl_empty_entry", {"bench", "norms", "--impl", "fused,,", "--shapes", "1x1x8"});
  add("bench_norms_impl_leading_comma", {"bench", "norms", "--impl", ",fused", "--shapes", "1x1x8"});
  add("bench_step_out_existing_user_file_force", {"bench", "step", "--threads", "1", "--out", "f.json", "--force"},
      mine("f.json"));
  add("bench_step_model_empty_entry", {"bench", "step", "--model", "toy,"});
  add("bench_step_vocab_2_31", {"bench", "step", "--vocab", "2147483648"});
  add("bench_step_vocab_2e7", {"bench", "step", "--vocab", "20000000"});
  add("bench_step_vocab_2_64", {"bench", "step", "--vocab", "18446744073709551615"});
  add("bench_merge_out_existing_user_file_force", {"bench", "merge", "b.json", "--out", "f.json", "--force"},
      [](const fs::path& w) {
        bench_doc("b.json")(w);
        mine("f.json")(w);
      });
  add("bench_merge_out_own_input_no_force", {"bench", "merge", "b.json", "--out", "b.json"}, bench_doc("b.json"));

  // ---- sample
  add("sample_no_run", {"sample", "nope"});
  add("sample_user_dir", {"sample", "mine"}, user_dir("mine"));
  add("sample_synthetic_run", {"sample", "ln"}, ln_run("ln"));
  add("sample_prompt_empty", {"sample", "chars", "--prompt", ""}, chars_run("chars"));
  add("sample_prompt_not_in_vocabulary", {"sample", "chars", "--prompt", "caf\xc3\xa9"}, chars_run("chars"));
  add("sample_prompt_not_utf8", {"sample", "chars", "--prompt", "a\xff"}, chars_run("chars"));
  add("sample_temperature_negative", {"sample", "chars", "--temperature", "-1"}, chars_run("chars"));
  add("sample_temperature_nan", {"sample", "chars", "--temperature", "nan"}, chars_run("chars"));
  add("sample_top_k_negative", {"sample", "chars", "--top_k", "-3"}, chars_run("chars"));
  add("sample_tokens_huge", {"sample", "chars", "--tokens", "100000000000"}, chars_run("chars"));
  add("sample_no_weights", {"sample", "chars"}, [](const fs::path& w) {
    chars_run("chars")(w);
    fs::remove(w / "chars" / "model.safetensors");
  });

  add("sample_decode_text_run", {"sample", "chars", "--examples", "2"}, chars_run("chars"));
  add("sample_decode_prompt", {"sample", "copy", "--prompt", "ab"}, copy_run("copy"));
  add("sample_decode_temperature", {"sample", "copy", "--temperature", "0.5"}, copy_run("copy"));
  add("sample_decode_source_short", {"sample", "copy", "--source", "1 2"}, copy_run("copy"));
  add("sample_decode_source_start_token", {"sample", "copy", "--source", "1 2 3 4 6"}, copy_run("copy"));
  add("sample_decode_source_not_ids", {"sample", "copy", "--source", "1 two 3 4 5"}, copy_run("copy"));
  add("sample_decode_source_negative", {"sample", "copy", "--source", "1 -2 3 4 5"}, copy_run("copy"));
  add("sample_decode_source_empty", {"sample", "copy", "--source", " , "}, copy_run("copy"));
  add("sample_decode_examples_zero", {"sample", "copy", "--examples", "0"}, copy_run("copy"));
  add("sample_decode_examples_over_batch", {"sample", "copy", "--examples", "3"}, copy_run("copy"));
  add("sample_decode_no_weights", {"sample", "copy"}, [](const fs::path& w) {
    copy_run("copy")(w);
    fs::remove(w / "copy" / "model.safetensors");
  });
  add("sample_decode_source_and_examples", {"sample", "copy", "--source", "1 2 3 4 5", "--examples", "2"},
      copy_run("copy"));
  add("sample_decode_edited_config", {"sample", "copy"}, [](const fs::path& w) {
    copy_run("copy")(w);
    std::string text = normlab::test::slurp(w / "copy" / "config.json");
    text.replace(text.find("\"data\": \"copy\""), 14, "\"data\": \"synthetic\"");
    write(w / "copy" / "config.json", text);
  });
  add("convert_encdec_run", {"convert", "copy", "--to", "rmsnorm", "--out", "c"}, copy_run("copy"));

  // ---- convert
  add("convert_no_to", {"convert", "ln", "--out", "c"}, ln_run("ln"));
  add("convert_to_unknown", {"convert", "ln", "--to", "batchnorm", "--out", "c"}, ln_run("ln"));
  add("convert_method_unknown", {"convert", "ln", "--to", "rmsnorm", "--method", "magic", "--out", "c"}, ln_run("ln"));
  add("convert_out_missing_parents", {"convert", "ln", "--to", "rmsnorm", "--out", "a/b/c"}, ln_run("ln"));
  add("convert_out_exists", {"convert", "ln", "--to", "rmsnorm", "--out", "e"}, [](const fs::path& w) {
    ln_run("ln")(w);
    user_dir("e")(w);
  });
  add("convert_out_empty", {"convert", "ln", "--to", "rmsnorm", "--out", ""}, ln_run("ln"));
  add("convert_out_dot", {"convert", "ln", "--to", "rmsnorm", "--out", "."}, ln_run("ln"));
  add("convert_calibrate_huge", {"convert", "ln", "--to", "rmsnorm", "--calibrate", "1000000000000000", "--out", "c"},
      ln_run("ln"));
  add("convert_calibrate_negative", {"convert", "ln", "--to", "rmsnorm", "--calibrate", "-1", "--out", "c"},
      ln_run("ln"));
  add("convert_calibrate_text", {"convert", "ln", "--to", "rmsnorm", "--calibrate", "x", "--out", "c"}, ln_run("ln"));
  add("convert_source_missing", {"convert", "nope", "--to", "rmsnorm", "--out", "c"});
  add("convert_checkpoint_fifo", {"convert", "ln", "--to", "rmsnorm", "--out", "c"}, [](const fs::path& w) {
    ln_run("ln")(w);
    fs::remove(w / "ln" / "model.safetensors");
    ::mkfifo((w / "ln" / "model.safetensors").c_str(), 0600);
  });
  add("convert_checkpoint_directory", {"convert", "ln", "--to", "rmsnorm", "--out", "c"}, [](const fs::path& w) {
    ln_run("ln")(w);
    fs::remove(w / "ln" / "model.safetensors");
    fs::create_directory(w / "ln" / "model.safetensors");
  });
  add("convert_checkpoint_missing", {"convert", "ln", "--to", "rmsnorm", "--out", "c"}, [](const fs::path& w) {
    ln_run("ln")(w);
    fs::remove(w / "ln" / "model.safetensors");
  });
  add("convert_ln_to_layernorm", {"convert", "ln", "--to", "layernorm", "--out", "c"}, ln_run("ln"));

  // ---- TensorBoard
  add("export_no_format", {"export", "ln"}, ln_run("ln"));
  add("export_tensorboard_missing", {"export", "tensorboard", "nope"});
  add("export_tensorboard_no_runs", {"export", "tensorboard", "d"}, user_dir("d"));
  add("export_tensorboard_file", {"export", "tensorboard", "f"}, mine("f"));
  add("export_tensorboard_out_file", {"export", "tensorboard", "ln", "--out", "f"}, [](const fs::path& w) {
    ln_run("ln")(w);
    mine("f")(w);
  });
  add("export_tensorboard_out_inside_run", {"export", "tensorboard", "ln", "--out", "ln/tb"}, ln_run("ln"));
  add("export_tensorboard_foreign_events", {"export", "tensorboard", "ln", "--out", "tb"}, [](const fs::path& w) {
    ln_run("ln")(w);
    fs::create_directories(w / "tb" / "ln");
    write(w / "tb" / "ln" / "events.out.tfevents.1.someone", "someone's\n");
  });
  add("export_tensorboard_into_the_run_itself", {"export", "tensorboard", "ln", "--out", "."}, ln_run("ln"));
  add("export_tensorboard_torn_metrics", {"export", "tensorboard", "ln", "--out", "tb"}, [](const fs::path& w) {
    ln_run("ln")(w);
    std::ofstream(w / "ln" / "metrics.jsonl", std::ios::app) << "{\"step\": 9, \"val_lo";
  });
  add("train_tensorboard_into_another_run", tiny({"--tensorboard", "ln"}), ln_run("ln"));
  add("sweep_tensorboard_file", {"sweep", "--out", "s", "--tensorboard", "f", "steps=2", "layers=1,2"}, mine("f"));
  add("sweep_tensorboard_empty", {"sweep", "--out", "s", "--tensorboard", "", "steps=2", "layers=1,2"});
  add("sweep_tensorboard_inside_runs", {"sweep", "--out", "s", "--tensorboard", "s/runs/tb", "steps=2", "layers=1,2"});
  add("train_tensorboard_empty", tiny({"--tensorboard", ""}));
  add("train_tensorboard_file", tiny({"--tensorboard", "f"}), mine("f"));
  add("train_tensorboard_inside_run", tiny({"--out", "r", "--tensorboard", "r/tb"}));

  // ---- report
  add("report_missing", {"report", "nope"});
  add("report_no_runs", {"report", "d"}, user_dir("d"));
  add("report_file", {"report", "f"}, mine("f"));
  add("report_out_users_dir", {"report", "ln", "--out", "d"}, [](const fs::path& w) {
    ln_run("ln")(w);
    user_dir("d")(w);
  });
  add("report_out_parent_missing", {"report", "ln", "--out", "a/b/site"}, ln_run("ln"));
  add("report_out_inside_run", {"report", "ln", "--out", "ln/site"}, ln_run("ln"));
  add("report_out_empty", {"report", "ln", "--out", ""}, ln_run("ln"));

  // ---- plot
  add("plot_no_kind", {"plot", "ln", "--out", "p.svg"}, ln_run("ln"));
  add("plot_heatmap_missing_run", {"plot", "heatmap", "nope", "--out", "p.svg"});
  add("plot_heatmap_unknown_field", {"plot", "heatmap", "ln", "--field", "nosuch", "--out", "p.svg"}, ln_run("ln"));
  add("plot_heatmap_out_users_file", {"plot", "heatmap", "ln", "--out", "f.svg"}, [](const fs::path& w) {
    ln_run("ln")(w);
    mine("f.svg")(w);
  });
  add("plot_multiples_encdec_layers", {"plot", "multiples", "esw", "--kind", "layers", "--out", "p.svg"},
      encdec_sweep_run("esw"));
  add("sweep_curves_encdec_layer_field",
      {"sweep", "summarize", "esw", "--curves", "1,2", "--field", "stream_norm"}, encdec_sweep_run("esw"));
  add("plot_multiples_not_a_sweep", {"plot", "multiples", "ln", "--out", "p.svg"}, ln_run("ln"));
  add("plot_multiples_bad_kind", {"plot", "multiples", "ln", "--kind", "pie", "--out", "p.svg"}, ln_run("ln"));
  add("probe_plot_preset_without_layers", {"probe", "batchnorm", "--plot", "p.svg"});
  add("probe_plot_users_file", {"probe", "--layers", "2", "--plot", "f.svg"}, mine("f.svg"));

  // ---- the newest commands: hangs, internal errors, empty figures, escapes, sites and exports
  // Hangs: a FIFO as the CUDA module; a document that renders itself.
  add_env("cuda_sim_module_fifo", tiny({"--device", "cuda-sim", "--out", "r"}), {{"NORMLAB_CUDA_SIM_MODULE", "m.so"}},
          fifo("m.so"));
  add_env("cuda_module_fifo", tiny({"--device", "cuda", "--out", "r"}), {{"NORMLAB_CUDA_MODULE", "m.so"}}, fifo("m.so"));
  add_env("cuda_module_is_the_sim_module", tiny({"--device", "cuda", "--out", "r"}),
          {{"NORMLAB_CUDA_MODULE", cuda_sim_module()}});
  add_env("cuda_module_is_the_sim_module_gradcheck", {"gradcheck", "--device", "cuda", "--op", "gelu"},
          {{"NORMLAB_CUDA_MODULE", cuda_sim_module()}});
  add("render_itself", {"sweep", "render", "doc.md"}, self_rendering("doc.md"));
  add("render_itself_check", {"sweep", "render", "doc.md", "--check"}, self_rendering("doc.md"));
  // A command that exits 2 writes nothing, the kernel tuning cache included.
  add_env("report_reproduction_missing_no_cache", {"report", "ln", "--reproduction", "nope.md", "--out", "site"},
          {{"XDG_CACHE_HOME", "{work}/cache"}, {"NORMLAB_TUNE", "fresh"}}, ln_run("ln"));
  add("convert_all_nan_model", {"convert", "ln", "--to", "rmsnorm", "--out", "c"}, [](const fs::path& w) {
    ln_run("ln")(w);
    poison_weights(w / "ln");
  });
  // Bad input that made an empty figure, or none.
  add("plot_heatmap_field_empty", {"plot", "heatmap", "ln", "--field", "", "--out", "p.svg"}, ln_run("ln"));
  add("plot_profile_field_empty", {"plot", "profile", "ln", "--field", "", "--out", "p.svg"}, ln_run("ln"));
  add("plot_multiples_unknown_field", {"plot", "multiples", "sw", "--kind", "layers", "--field", "nope", "--out", "p.svg"},
      sweep_run("sw"));
  add("plot_multiples_field_with_loss", {"plot", "multiples", "sw", "--field", "stream_norm", "--out", "p.svg"},
      sweep_run("sw"));
  add("probe_plot_empty", {"probe", "--plot", ""});
  add("sweep_tensorboard_below_a_file", {"sweep", "--out", "s", "--tensorboard", "f/tb", "steps=2", "layers=1,2"}, mine("f"));
  // Errors echo what they quote escaped, on one line.
  add("handcalc_case_newline", {"handcalc", "--precision", "fp16", "--case", "all\nequal"});
  add("handcalc_positional_newline", {"handcalc", "resid\nual"});
  add("probe_positional_newline", {"probe", "xiong\n2020"});
  add("gradcheck_threads_newline", {"gradcheck", "--op", "add", "--threads", "1\n2"});
  // Data loss: a site normlab wrote is replaced only as it wrote it; an export never writes
  // through a symbolic link into a user's directory.
  const auto site_of_ln = [](const fs::path& w) {
    ln_run("ln")(w);
    const auto r = run_cli({"report", (w / "ln").string(), "--out", (w / "site").string(), "-q"});
    if (r.exit_code != 0) throw std::runtime_error("the site fixture failed: " + describe(r));
  };
  add("report_site_holds_users_file", {"report", "ln", "--out", "site"}, [site_of_ln](const fs::path& w) {
    site_of_ln(w);
    write(w / "site" / "notes.txt", "mine\n");
  });
  add("report_site_file_changed", {"report", "ln", "--out", "site"}, [site_of_ln](const fs::path& w) {
    site_of_ln(w);
    write(w / "site" / "style.css", "body { color: red }\n");
  });
  add("report_empty_marker", {"report", "ln", "--out", "mine"}, [](const fs::path& w) {
    ln_run("ln")(w);
    user_dir("mine")(w);
    write(w / "mine" / ".normlab-report", "");
  });
  add("report_out_partial_of_a_site", {"report", "ln", "--out", "site.partial.999999999"}, [site_of_ln](const fs::path& w) {
    site_of_ln(w);
    fs::rename(w / "site", w / "site.partial.999999999");
  });
  add("export_name_is_symlink_to_users_dir", {"export", "tensorboard", "ln", "--out", "tb"}, [](const fs::path& w) {
    ln_run("ln")(w);
    user_dir("mine")(w);
    fs::create_directories(w / "tb");
    fs::create_directory_symlink("../mine", w / "tb" / "ln");
  });
  add_env("env_tune_newline", tiny({"--out", "r"}), {{"NORMLAB_TUNE", "fresh\noff"}});
  add_env("env_norm_variant_newline", tiny({"--out", "r"}), {{"NORMLAB_NORM_VARIANT", "tiled\n2048"}});
  add_env("env_streaming_stores_newline", tiny({"--out", "r"}), {{"NORMLAB_STREAMING_STORES", "1\n0"}});
  return c;
}

// Everything under root: path -> type, size and content (files), or link target.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> s;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path& p = it->path();
    const std::string rel = fs::relative(p, root).string();
    const fs::file_status st = it->symlink_status();
    if (fs::is_symlink(st)) {
      s[rel] = "link -> " + fs::read_symlink(p).string();
    } else if (fs::is_directory(st)) {
      s[rel] = "dir";
    } else if (fs::is_regular_file(st)) {
      s[rel] = "file " + std::to_string(fs::file_size(p)) + " " + slurp(p);
    } else {
      s[rel] = "other";
    }
  }
  return s;
}

class Catalogue : public testing::TestWithParam<Case> {};

// gtest prints a failing case's parameter with this (not as a dump of its bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TEST_P(Catalogue, OneLineExitTwoNothingWritten) {
  const Case& cs = GetParam();
  // <tmp>/normlab_bad_<name>/outer/work: the command runs in work; outer and work are compared
  // before and after (so '..' is watched too).
  const fs::path outer = normlab::test::fresh_dir("bad_" + cs.name) / "outer";
  const fs::path work = outer / "work";
  fs::create_directories(work);
  write(outer / "neighbour.txt", "next to the scratch directory\n");
  if (cs.setup) cs.setup(work);
  std::vector<std::string> args = cs.args;
  if (cs.name == "train_out_cwd_absolute_force") {
    make_run_dir(work / "r");  // the current directory, named by its absolute path
    args = tiny({"--out", fs::absolute(work / "r").string(), "--force"});
  }
  const auto before = snapshot(outer);
  normlab::test::RunOptions opt;
  opt.cwd = (cs.name == "train_out_cwd_absolute_force" ? work / "r" : work).string();
  opt.timeout_s = 60;
  for (auto [name, value] : cs.env) {
    for (size_t at = value.find("{work}"); at != std::string::npos; at = value.find("{work}"))
      value.replace(at, 6, work.string());
    opt.env.emplace_back(name, value);
  }
  const auto r = run_cli(args, opt);
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  const auto lines = split_lines(r.err);
  EXPECT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << describe(r);
  EXPECT_LT(r.err.size(), 600u) << "the error echoes too much: " << r.err.substr(0, 600);
  EXPECT_TRUE(before == snapshot(outer)) << "files were created, changed or removed: " << describe(r);
  fs::remove_all(outer.parent_path());
}

INSTANTIATE_TEST_SUITE_P(Catalogue, Catalogue, testing::ValuesIn(catalogue()),
                         [](const testing::TestParamInfo<Case>& i) { return i.param.name; });

// One line is not enough: the error must name the problem. These once said only "cannot be
// opened", gave a range of 394 bytes with DBL_MAX in full, or "too short" for /dev/zero.
TEST(CatalogueMessages, NameTheProblem) {
  struct Expect {
    std::vector<std::string> args;
    std::string says;
    ::Setup setup;
  };
  const std::vector<Expect> cases = {
      {tiny({"--init_from", "nope.safetensors"}), "No such file or directory", {}},
      {tiny({"--init_from", "."}), "it is a directory", {}},
      {tiny({"--init_from", "/dev/zero"}), "not a regular file", {}},
      {tiny({"--save_every", "x"}), "must be a non-negative integer", {}},
      {{"convert", "ln", "--to", "rmsnorm", "--calibrate", "-1", "--out", "c"}, "must be a non-negative integer", ln_run("ln")},
      {{"convert", "ln", "--to", "rmsnorm", "--out", "c"}, "not a regular file", [](const fs::path& w) {
         ln_run("ln")(w);
         fs::remove(w / "ln" / "model.safetensors");
         ::mkfifo((w / "ln" / "model.safetensors").c_str(), 0600);
       }},
      {{"bench", "step", "--vocab", "2147483648"}, "--vocab must be at most 16777216", {}},
      {{"gradcheck", "--op", "layernorm", "--shape", "64x64x64", "--max-seconds", "30"}, "--max-seconds", {}},
  };
  for (const Expect& e : cases) {
    const fs::path work = normlab::test::fresh_dir("messages");
    fs::create_directories(work);
    if (e.setup) e.setup(work);
    normlab::test::RunOptions opt;
    opt.cwd = work.string();
    opt.timeout_s = 60;
    const auto r = run_cli(e.args, opt);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_NE(r.err.find(e.says), std::string::npos) << "expected the error to say '" << e.says << "': " << describe(r);
    EXPECT_LT(r.err.size(), 300u) << describe(r);
    fs::remove_all(work);
  }
}

TEST(CatalogueSize, AtLeastAHundredCasesOverEveryCommand) {
  std::map<std::string, int> per_command;
  for (const Case& c : catalogue()) ++per_command[c.args.empty() ? "train" : c.args[0]];
  EXPECT_GE(catalogue().size(), 100u);
  for (const char* cmd : {"train", "probe", "gradcheck", "handcalc", "bench", "convert"})
    EXPECT_GE(per_command[cmd], 5) << cmd;
}

}  // namespace
