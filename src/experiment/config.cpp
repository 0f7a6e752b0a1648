// The config schema as one table: each key knows how to read itself from JSON and write itself back.
#include "normlab/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <thread>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "normlab/encdec.h"
#include "normlab/io.h"
#include "normlab/system.h"
#include "normlab/parse.h"

namespace normlab {

using json = nlohmann::json;

namespace {

struct Field {
  ConfigKey key;
  // label: how the error names the value ("config key 'lr' in FILE" or "--lr").
  std::function<void(TrainConfig&, const json&, const std::string& label)> set;
  std::function<json(const TrainConfig&)> get;
};

// A value as it may appear in a one-line error (dumped, control characters escaped, cut).
std::string shown_json(const json& v) {
  return shown(v.dump(-1, ' ', false, json::error_handler_t::replace));
}

// An integer key's value, checked against T's range: never wrapped (-1 as an unsigned seed),
// never narrowed (2^40 layers as an int), never a float cast out of range.
template <class T>
T whole_number(const json& v, const std::string& label) {
  using L = std::numeric_limits<T>;
  const std::string range = fmt::format("a whole number from {} to {}", L::min(), L::max());
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    NL_USAGE(u <= static_cast<uint64_t>(L::max()), "{} must be {}, got {}", label, range, u);
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {  // negative
    const int64_t i = v.get<int64_t>();
    bool ok = i >= 0 && static_cast<uint64_t>(i) <= static_cast<uint64_t>(L::max());
    if constexpr (L::is_signed) ok = i >= static_cast<int64_t>(L::min()) && i <= static_cast<int64_t>(L::max());
    NL_USAGE(ok, "{} must be {}, got {}", label, range, i);
    return static_cast<T>(i);
  }
  // The range is worth quoting only to a number outside it; "two" is simply not a number.
  NL_USAGE(v.is_number_float(), "{} must be a whole number, got {}", label, shown_json(v));
  const double d = v.get<double>();
  // [min, max] of T as doubles: -2^digits .. 2^digits (exclusive), exact powers of two.
  const double hi = std::ldexp(1.0, L::digits), lo = L::is_signed ? -hi : 0.0;
  NL_USAGE(std::isfinite(d) && d == std::floor(d) && d >= lo && d < hi, "{} must be {}, got {}", label, range,
           std::isfinite(d) ? fmt::format("{}", d) : std::string("a number out of range"));
  return static_cast<T>(d);
}

template <class T>
T typed(const json& v, const std::string& label) {
  if constexpr (std::is_same_v<T, bool>) {
    NL_USAGE(v.is_boolean(), "{} must be true or false, got {}", label, shown_json(v));
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    return whole_number<T>(v, label);
  } else if constexpr (std::is_floating_point_v<T>) {
    NL_USAGE(v.is_number(), "{} must be a number, got {}", label, shown_json(v));
    // No key means anything when infinite or NaN, and JSON could not write it back.
    NL_USAGE(std::isfinite(v.get<double>()), "{} must be a finite number, got a number out of range", label);
    return v.get<T>();
  } else {
    NL_USAGE(v.is_string(), "{} must be a string, got {}", label, shown_json(v));
    const std::string& s = v.get_ref<const std::string&>();
    NL_USAGE(s.size() <= kMaxConfigStringBytes, "{} is too long ({} bytes; at most {})", label, s.size(),
             kMaxConfigStringBytes);
    return s;
  }
}

#define NL_FIELD(NAME, TYPE, MEMBER, HELP)                                                     \
  Field {                                                                                      \
    {NAME, type_name<TYPE>(), HELP}, [](TrainConfig& c, const json& v, const std::string& label) { \
      c.MEMBER = typed<TYPE>(v, label);                                                        \
    },                                                                                         \
        [](const TrainConfig& c) { return json(c.MEMBER); }                                    \
  }

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else return "string";
}

Field text_field(const char* name, const std::string& help, std::function<void(TrainConfig&, const std::string&)> set,
                 std::function<std::string(const TrainConfig&)> get) {
  ConfigKey k{name, "string", help};
  return Field{k, [set](TrainConfig& c, const json& v, const std::string& label) { set(c, typed<std::string>(v, label)); },
               [get](const TrainConfig& c) { return json(get(c)); }};
}

// A key whose values are an enumeration's names (names.h): help, parser and error come from its table.
#define NL_KIND_FIELD(NAME, TYPE, MEMBER)                                                          \
  text_field(NAME, kind_help<TYPE>(), [](TrainConfig& c, const std::string& s) { c.MEMBER = parse_kind<TYPE>(s); }, \
             [](const TrainConfig& c) { return std::string(to_string(c.MEMBER)); })

// A key that config.json holds only when it is set (its member is a std::optional).
#define NL_OPTIONAL_FIELD(NAME, TYPE, MEMBER, HELP)                                                   \
  Field {                                                                                            \
    {NAME, type_name<TYPE>(), HELP}, [](TrainConfig& c, const json& v, const std::string& label) {   \
      if (v.is_null()) c.MEMBER.reset();                                                             \
      else c.MEMBER = typed<TYPE>(v, label);                                                         \
    },                                                                                               \
        [](const TrainConfig& c) { return c.MEMBER ? json(*c.MEMBER) : json(nullptr); }              \
  }
#define NL_OPTIONAL_KIND_FIELD(NAME, TYPE, MEMBER, HELP_TAIL)                                         \
  Field {                                                                                            \
    {NAME, "string", kind_help<TYPE>() + HELP_TAIL},                                                 \
        [](TrainConfig& c, const json& v, const std::string& label) {                                \
          if (v.is_null()) c.MEMBER.reset();                                                         \
          else c.MEMBER = parse_kind<TYPE>(typed<std::string>(v, label));                            \
        },                                                                                           \
        [](const TrainConfig& c) { return c.MEMBER ? json(to_string(*c.MEMBER)) : json(nullptr); }   \
  }

// The model's keys (ModelConfig), in the order --help lists them.
std::vector<Field> model_fields() {
  return {
      NL_KIND_FIELD("model", ModelKind, model.model),
      NL_KIND_FIELD("norm", NormKind, model.norm),
      NL_KIND_FIELD("placement", Placement, model.placement),
      NL_KIND_FIELD("final_norm", FinalNorm, model.final_norm),
      NL_FIELD("qk_norm", bool, model.qk_norm, "RMSNorm on each head's q and k (gpt only)"),
      NL_FIELD("head_bias", bool, model.head_bias, "a bias on the head (exact LayerNorm -> RMSNorm conversions add one)"),
      NL_FIELD("residual", bool, model.residual, "false drops the identity path \"x +\" of every block (a probe contrast)"),
      NL_FIELD("layers", int64_t, model.layers, "number of blocks"),
      NL_FIELD("d_model", int64_t, model.d_model, "residual stream width"),
      NL_FIELD("d_hidden", int64_t, model.d_hidden, "MLP hidden width"),
      NL_FIELD("heads", int64_t, model.heads, "attention heads (gpt)"),
      NL_FIELD("vocab", int64_t, model.vocab, "vocabulary size (text: the tokenizer's, 256 for bytes)"),
      NL_FIELD("seq_len", int64_t, model.seq_len, "tokens per sequence"),
      NL_KIND_FIELD("init", InitScheme, model.init),
      NL_FIELD("norm_eps", double, model.norm_eps,
               fmt::format("norm epsilon; 0 = the norm's default (LN {}, RMS {})", default_eps(NormKind::layernorm),
                           default_eps(NormKind::rmsnorm))),
      // The variants of docs/variants.md: written only when set, as data_seed.
      NL_OPTIONAL_KIND_FIELD("residual_scale", ResidualScale, model.residual_scale, "; unset: none"),
      NL_OPTIONAL_FIELD("layerscale_init", double, model.layerscale_init,
                        "LayerScale's lambda at init (unset: CaiT's 0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond)"),
      NL_OPTIONAL_FIELD("mix_post_layers", int64_t, model.mix_post_layers,
                        "mixln: the first blocks that are Post-LN (unset: layers / 4)"),
      NL_OPTIONAL_FIELD("ln_scaling", bool, model.ln_scaling,
                        "LayerNorm Scaling: block l's Pre-LN norm outputs times 1/sqrt(l) (unset: false)"),
      NL_OPTIONAL_FIELD("dyt_alpha", double, model.dyt_alpha, "DyT's and Derf's alpha at init (unset: 0.5)"),
      NL_OPTIONAL_FIELD("gemma_norm", bool, model.gemma_norm,
                        "Gemma's norm gain 1 + w, w initialised to 0 (unset: false)"),
      NL_OPTIONAL_FIELD("embed_norm", bool, model.embed_norm, "the blocks' norm on the embeddings' sum (unset: false)"),
      NL_OPTIONAL_FIELD("bias", bool, model.bias,
                        "false: the linear layers without biases and the norms without beta (nanoGPT's bias=False; "
                        "unset: true)"),
      NL_OPTIONAL_FIELD("tie_embeddings", bool, model.tie_embeddings,
                        "the head's weight is the token embedding, one tensor (nanoGPT's weight tying; unset: false)"),
      NL_OPTIONAL_FIELD("encoder_layers", int64_t, model.encoder_layers, "encdec: the encoder's layers (unset: layers)"),
      NL_OPTIONAL_FIELD("decoder_layers", int64_t, model.decoder_layers, "encdec: the decoder's layers (unset: layers)"),
      NL_OPTIONAL_FIELD("shared_embeddings", bool, model.shared_embeddings,
                        "encdec: one token table for source and target (unset: true)"),
  };
}

// The data's, the optimizer's and the run's keys, after the model's.
std::vector<Field> run_fields() {
  return {
      text_field("data", kind_help<DataKind>(), [](TrainConfig& c, const std::string& v) { c.data = DataSpec::parse(v); },
                 [](const TrainConfig& c) { return c.data.str(); }),
      NL_OPTIONAL_KIND_FIELD("tokenizer", Tokenizer, tokenizer, "; text only; unset: bytes"),
      NL_OPTIONAL_FIELD("vocabulary", std::string, vocabulary,
                        "tokenizer chars: the characters in id order, as one UTF-8 string (unset: the text's "
                        "characters sorted, written into config.json when resolved)"),
      NL_FIELD("topics", int64_t, topics, "synthetic: number of topics"),
      NL_FIELD("noise", double, noise,
               "synthetic, copy, reverse, translate: probability a token is replaced by a uniform one"),
      NL_KIND_FIELD("optimizer", OptimizerKind, optimizer),
      NL_FIELD("lr", double, lr, "peak learning rate"),
      NL_FIELD("beta1", double, beta1, "Adam beta1"),
      NL_FIELD("beta2", double, beta2, "Adam beta2"),
      NL_FIELD("adam_eps", double, adam_eps, "Adam epsilon"),
      NL_FIELD("weight_decay", double, weight_decay, "decoupled (adamw) or L2 (adam) weight decay"),
      NL_OPTIONAL_KIND_FIELD("weight_decay_on", WeightDecayOn, weight_decay_on, "; unset: all"),
      NL_FIELD("warmup_steps", int64_t, warmup_steps, "linear warm-up from 0"),
      NL_KIND_FIELD("schedule", Schedule, schedule),
      NL_OPTIONAL_FIELD("min_lr", double, min_lr, "schedule cosine: the lr it decays to at the last step (unset: 0)"),
      NL_FIELD("clip", double, clip, "global gradient-norm clip; 0 = off"),
      NL_OPTIONAL_FIELD("dropout", double, dropout,
                        "training's dropout in [0, 1) on the embeddings, each sublayer's output and attention's "
                        "probabilities (nanoGPT's dropout; never at evaluation; unset: 0)"),
      NL_FIELD("batch_size", int64_t, batch_size, "sequences per step"),
      NL_FIELD("steps", int64_t, steps, "training steps (0: the initial model, evaluated and written)"),
      NL_FIELD("eval_every", int64_t, eval_every, "steps between evaluations"),
      NL_FIELD("eval_batches", int64_t, eval_batches, "held-out batches per evaluation"),
      NL_FIELD("seed", uint64_t, seed, "seed of the init and the training batches' order (and of the task, unless data_seed)"),
      // Written only when set, so that every config from before the key hashes (and reads) as it did.
      Field{{"data_seed", "int", "seed of the task (synthetic rule, held-out batches, text's validation windows); unset: seed"},
            [](TrainConfig& c, const json& v, const std::string& label) {
              if (v.is_null()) c.data_seed.reset();
              else c.data_seed = typed<uint64_t>(v, label);
            },
            [](const TrainConfig& c) { return c.data_seed ? json(*c.data_seed) : json(nullptr); }},
      // Written only when set, as data_seed: configs from before them hash as they did.
      NL_OPTIONAL_KIND_FIELD("precision", Precision, precision, "; unset: fp32"),
      NL_OPTIONAL_KIND_FIELD("norm_compute", NormCompute, norm_compute, "; only with precision bf16 or fp16"),
      NL_OPTIONAL_KIND_FIELD("residual_dtype", ResidualDtype, residual_dtype,
                             "; only with precision bf16 or fp16; unset: format"),
      NL_OPTIONAL_KIND_FIELD("loss_scale", LossScaling, loss_scale,
                             "; only with precision bf16 or fp16; unset: dynamic in fp16, none in bf16"),
      NL_OPTIONAL_FIELD("loss_scale_init", double, loss_scale_init, "the scaler's initial scale (unset: 65536)"),
      NL_OPTIONAL_FIELD("loss_scale_growth_factor", double, loss_scale_growth_factor,
                        "the scale's factor after growth_interval finite steps (unset: 2)"),
      NL_OPTIONAL_FIELD("loss_scale_backoff_factor", double, loss_scale_backoff_factor,
                        "the scale's factor after a step with an inf/NaN gradient (unset: 0.5)"),
      NL_OPTIONAL_FIELD("loss_scale_growth_interval", int64_t, loss_scale_growth_interval,
                        "finite steps in a row before the scale grows (unset: 2000)"),
      NL_FIELD("threads", int, threads, "threads (0 = all cores)"),
      NL_FIELD("init_from", std::string, init_from, "a model.safetensors to start from (\"\" = the init scheme)"),
  };
}

const std::vector<Field>& fields() {
  static const std::vector<Field> f = [] {
    std::vector<Field> all = model_fields(), run = run_fields();
    all.insert(all.end(), run.begin(), run.end());
    return all;
  }();
  return f;
}

const Field* find_field(const std::string& name) {
  for (const Field& f : fields())
    if (f.key.name == name) return &f;
  return nullptr;
}

[[noreturn]] void unknown_key(const std::string& name, const std::string& source) {
  std::string hint = closest_config_key(name);
  throw UsageError(fmt::format("unknown config key '{}' in {}{}", shown(name), source,
                               hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
}

// A config file is a flat object of keys: anything nested deeper than this is refused while it
// is parsed (a 100,000-deep array would otherwise overflow the stack when it is printed).
constexpr int kMaxDepth = 16;
constexpr int64_t kMaxConfigBytes = int64_t{1} << 20;

// A config file's JSON; UsageError on invalid JSON, nesting deeper than kMaxDepth and a key
// given twice in one object (JSON allows it; which one would win is a guess).
json parse_checked_json(const std::string& text, const std::string& source) {
  std::vector<std::set<std::string>> keys;  // the keys seen in each open object
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        NL_USAGE(depth < kMaxDepth, "{} nests arrays or objects more than {} deep", source, kMaxDepth);
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          throw UsageError(fmt::format("{} has the key '{}' twice", source, shown(parsed.get<std::string>())));
        break;
      default:
        break;
    }
    return true;
  };
  NL_USAGE(text.find('\0') == std::string::npos, "{} is not valid JSON: it holds a NUL byte", source);
  json j;
  try {
    j = json::parse(text, check);
  } catch (const json::exception& e) {  // parse_error, out_of_range (number overflow: 1e400)
    std::string what = e.what();
    const size_t at = what.find(']');
    throw UsageError(fmt::format("{} is not valid JSON: {}", source,
                                 shown(at == std::string::npos ? what : what.substr(at + 2), 200)));
  }
  return j;
}

json parse_config_object(const std::string& text, const std::string& source) {
  json j = parse_checked_json(text, source);
  NL_USAGE(j.is_object(), "{} must hold a JSON object of config keys", source);
  return j;
}

// A flag's number as JSON would hold it: a whole number (signed or unsigned, exactly, when it has
// no point or exponent) or a double; anything else, or a value out of a double's range, is refused.
json number_from_text(const std::string& text, const std::string& label) {
  const std::string bad = fmt::format("{} must be a number, got '{}'", label, shown(text));
  NL_USAGE(!text.empty() && text.size() <= 400, "{}", bad);
  for (char c : text) NL_USAGE(std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E', "{}", bad);
  const bool whole = text.find_first_of(".eE") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  if (whole && text[0] == '-') {
    const long long i = std::strtoll(text.c_str(), &end, 10);
    NL_USAGE(end == text.c_str() + text.size(), "{}", bad);
    NL_USAGE(errno != ERANGE, "{} must be a whole number from {} to {}, got '{}' (out of range)", label,
             std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), shown(text));
    return json(static_cast<int64_t>(i));
  }
  if (whole) {
    const unsigned long long u = std::strtoull(text.c_str(), &end, 10);
    NL_USAGE(end == text.c_str() + text.size(), "{}", bad);
    NL_USAGE(errno != ERANGE, "{} must be a whole number from 0 to {}, got '{}' (more than 64 bits)", label,
             std::numeric_limits<uint64_t>::max(), shown(text));
    return json(static_cast<uint64_t>(u));
  }
  const double d = std::strtod(text.c_str(), &end);
  NL_USAGE(end == text.c_str() + text.size(), "{}", bad);
  // ERANGE: an overflow (refused), an underflow to 0 (refused: the value written is not 0) or a
  // subnormal result (kept: it is the nearest double).
  const bool underflow_to_zero = errno == ERANGE && d == 0;
  NL_USAGE(std::isfinite(d) && !underflow_to_zero, "{} must be a finite number, got '{}' (out of range)", label,
           shown(text));
  return json(d);
}

void apply_object(TrainConfig& cfg, const json& j, const std::string& source) {
  for (auto& [key, value] : j.items()) {
    const Field* f = find_field(key);
    if (!f) unknown_key(key, source);
    f->set(cfg, value, fmt::format("config key '{}' in {}", key, source));
  }
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> k;
    for (const Field& f : fields()) k.push_back(f.key);
    return k;
  }();
  return keys;
}

std::string closest_config_key(const std::string& name) {
  // What nanoGPT and PyTorch users type for normlab's keys: a near-miss of these suggests the key.
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"learning_rate", "lr"},   {"n_layer", "layers"},     {"num_layers", "layers"}, {"n_embd", "d_model"},
      {"n_head", "heads"},       {"num_heads", "heads"},    {"block_size", "seq_len"}, {"vocab_size", "vocab"},
      {"batch", "batch_size"},   {"max_iters", "steps"},    {"warmup", "warmup_steps"}, {"grad_clip", "clip"},
      {"eps", "norm_eps"},       {"dataset", "data"},       {"eval_interval", "eval_every"},
      {"eval_iters", "eval_batches"}};
  // No key is longer than 20 characters: a longer name cannot be within max(2, n/3) edits of one
  // (and a huge name would cost minutes of edit distance).
  if (name.size() > 40) return "";
  std::string best;
  size_t best_d = SIZE_MAX;
  auto consider = [&](const std::string& candidate, const std::string& key) {
    size_t d = edit_distance(name, candidate);
    if (d < best_d) {
      best_d = d;
      best = key;
    }
  };
  for (const Field& f : fields()) consider(f.key.name, f.key.name);
  for (const auto& [alias, key] : aliases) consider(alias, key);
  return best_d <= std::max<size_t>(2, name.size() / 3) ? best : "";
}

void check_json_text(const std::string& text, const std::string& source) { (void)parse_checked_json(text, source); }

void apply_config_json(TrainConfig& cfg, const std::string& json_text, const std::string& source) {
  apply_object(cfg, parse_config_object(json_text, source), source);
}

void apply_config_value(TrainConfig& cfg, const std::string& key, const std::string& value) {
  const Field* f = find_field(key);
  if (!f) unknown_key(key, "the flags");
  const std::string label = "--" + key;
  json v;
  const std::string& t = f->key.type;
  if (t == "string") {
    v = value;
  } else if (t == "bool") {
    NL_USAGE(value == "true" || value == "false" || value == "1" || value == "0" || value == "on" || value == "off",
             "--{} must be true or false, got '{}'", key, shown(value));
    v = value == "true" || value == "1" || value == "on";
  } else {
    v = number_from_text(value, label);
  }
  f->set(cfg, v, label);
}

TrainConfig load_train_config(const std::string& config_file, const std::map<std::string, std::string>& flags) {
  TrainConfig cfg;
  bool vocab_given = false;
  if (!config_file.empty()) {
    const std::string source = shown(config_file, 200);
    const json j = parse_config_object(read_file(config_file, kMaxConfigBytes), source);
    apply_object(cfg, j, source);
    vocab_given = j.contains("vocab");
  }
  for (const auto& [key, value] : flags) apply_config_value(cfg, key, value);
  vocab_given = vocab_given || flags.count("vocab") > 0;
  resolve_text_vocabulary(cfg, vocab_given);
  return cfg;
}

void validate_config(const TrainConfig& cfg) {
  cfg.validate();
  const ModelConfig& m = cfg.model;
  auto at_most = [](const char* key, int64_t v, int64_t most) {
    NL_USAGE(v <= most, "{} must be at most {}, got {}", key, most, v);
  };
  at_most("layers", m.layers, 4096);
  at_most("encoder_layers", m.encoder_layers.value_or(0), 4096);
  at_most("decoder_layers", m.decoder_layers.value_or(0), 4096);
  at_most("d_model", m.d_model, 65536);
  at_most("d_hidden", m.d_hidden, 262144);
  at_most("heads", m.heads, 4096);
  at_most("vocab", m.vocab, int64_t{1} << 24);
  at_most("seq_len", m.seq_len, int64_t{1} << 20);
  at_most("batch_size", cfg.batch_size, int64_t{1} << 20);
  at_most("eval_batches", cfg.eval_batches, int64_t{1} << 20);
  at_most("topics", cfg.topics, int64_t{1} << 24);
  at_most("steps", cfg.steps, int64_t{1} << 40);
  at_most("warmup_steps", cfg.warmup_steps, int64_t{1} << 40);
  at_most("eval_every", cfg.eval_every, int64_t{1} << 40);
  NL_USAGE(cfg.threads <= kMaxThreads, "threads must be at most {}, got {}", kMaxThreads, cfg.threads);
  NL_USAGE(std::isfinite(m.norm_eps) && m.norm_eps < 1e30, "norm_eps must be a finite number below 1e30, got {}",
           m.norm_eps);
  for (const auto& [key, v] : {std::pair<const char*, double>{"lr", cfg.lr}, {"adam_eps", cfg.adam_eps},
                               {"weight_decay", cfg.weight_decay}, {"clip", cfg.clip}, {"noise", cfg.noise}})
    NL_USAGE(std::isfinite(v), "{} must be a finite number, got {}", key, v);
  // What a run writes as config.json must load back as this config (a value JSON cannot hold,
  // such as inf, would be written as null and refused when the run is repeated).
  TrainConfig back;
  apply_config_json(back, config_to_json(cfg), "the resolved config");
  NL_CHECK(config_to_json(back) == config_to_json(cfg), "the resolved config does not read back as itself");
}

double estimate_memory_bytes(const TrainConfig& cfg, int64_t batch, double data_bytes) {
  const ModelConfig& m = cfg.model;
  const bool encdec = m.model == ModelKind::encdec;
  const EncDecConfig stacks = encdec_config(m);  // read only for an encoder-decoder
  // An encoder-decoder's decoder layer has two attentions: one and a half of an encoder's.
  const double L = encdec ? static_cast<double>(stacks.encoder_layers) + 1.5 * static_cast<double>(stacks.decoder_layers)
                          : static_cast<double>(m.layers),
               d = static_cast<double>(m.d_model),
               h = static_cast<double>(m.d_hidden), V = static_cast<double>(m.vocab),
               T = static_cast<double>(m.seq_len), B = static_cast<double>(batch);
  // Token tables and the head (an encoder-decoder: a source and a target table unless shared),
  // position tables (the encoder-decoder's two).
  const double tables = (encdec && !stacks.shared_embeddings ? 2 : 1) + (m.tied_head() ? 0 : 1);
  const double params = L * (4 * d * d + 2 * d * h + 8 * d) + tables * V * d + (encdec ? 2 : 1) * T * d;
  double acts = L * B * T * (16 * d + 3 * h) + 3 * B * T * V;
  // Attention saves two floats per head and query row (its softmax's max and sum); its backward
  // recomputes the probabilities into two T x T buffers per thread.
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  if (m.has_attention()) acts += L * B * static_cast<double>(m.heads) * T * 2 + 2 * T * T * threads;
  // float32: parameters, gradients and two moments; activations and their gradients.
  return 4.0 * (4 * params + 2 * acts) + data_bytes;
}

void check_fits_in_memory(const TrainConfig& cfg, int64_t batch, const std::string& what, double data_bytes) {
  const std::string excess = memory_budget_excess(estimate_memory_bytes(cfg, batch, data_bytes));
  NL_USAGE(excess.empty(), "{}: this model ({} layers, d_model {}, d_hidden {}, vocab {}, {} x {} tokens) {}", what,
           cfg.model.layers, cfg.model.d_model, cfg.model.d_hidden, cfg.model.vocab, batch, cfg.model.seq_len, excess);
}

std::string config_to_json(const TrainConfig& cfg) {
  json j = json::object();
  for (const Field& f : fields()) {
    json v = f.get(cfg);
    if (!v.is_null()) j[f.key.name] = std::move(v);  // null: an optional key left unset
  }
  return j.dump(2);
}

}  // namespace normlab
