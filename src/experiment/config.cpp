// The config schema as one table: each key knows how to read itself from JSON and write itself back.
#include "normlab/config.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "normlab/io.h"

namespace normlab {

using json = nlohmann::json;

namespace {

struct Field {
  ConfigKey key;
  std::function<void(TrainConfig&, const json&)> set;
  std::function<json(const TrainConfig&)> get;
};

template <class T>
T typed(const json& v, const ConfigKey& k) {
  if constexpr (std::is_same_v<T, bool>) {
    NL_USAGE(v.is_boolean(), "config key '{}' must be true or false, got {}", k.name, v.dump());
  } else if constexpr (std::is_integral_v<T>) {
    NL_USAGE(v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))),
             "config key '{}' must be a whole number, got {}", k.name, v.dump());
    return static_cast<T>(v.get<double>());
  } else if constexpr (std::is_floating_point_v<T>) {
    NL_USAGE(v.is_number(), "config key '{}' must be a number, got {}", k.name, v.dump());
  } else {
    NL_USAGE(v.is_string(), "config key '{}' must be a string, got {}", k.name, v.dump());
  }
  return v.get<T>();
}

#define NL_FIELD(NAME, TYPE, MEMBER, HELP)                                                     \
  Field {                                                                                      \
    {NAME, type_name<TYPE>(), HELP}, [](TrainConfig& c, const json& v) {                       \
      c.MEMBER = typed<TYPE>(v, {NAME, type_name<TYPE>(), HELP});                             \
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
  return Field{k, [k, set](TrainConfig& c, const json& v) { set(c, typed<std::string>(v, k)); },
               [get](const TrainConfig& c) { return json(get(c)); }};
}

// A key whose values are an enumeration's names (kinds.h): help, parser and error come from its table.
#define NL_KIND_FIELD(NAME, TYPE, MEMBER)                                                          \
  text_field(NAME, kind_help<TYPE>(), [](TrainConfig& c, const std::string& s) { c.MEMBER = parse_kind<TYPE>(s); }, \
             [](const TrainConfig& c) { return std::string(to_string(c.MEMBER)); })

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
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
      NL_FIELD("vocab", int64_t, model.vocab, "vocabulary size (256 for text)"),
      NL_FIELD("seq_len", int64_t, model.seq_len, "tokens per sequence"),
      NL_KIND_FIELD("init", InitScheme, model.init),
      NL_FIELD("norm_eps", double, model.norm_eps, "norm epsilon; 0 = the norm's default (LN 1e-5, RMS 1e-6)"),
      text_field("data", kind_help<DataKind>(), [](TrainConfig& c, const std::string& v) { c.data = DataSpec::parse(v); },
                 [](const TrainConfig& c) { return c.data.str(); }),
      NL_FIELD("topics", int64_t, topics, "synthetic: number of topics"),
      NL_FIELD("noise", double, noise, "synthetic: probability a token is replaced by a uniform one"),
      NL_KIND_FIELD("optimizer", OptimizerKind, optimizer),
      NL_FIELD("lr", double, lr, "peak learning rate"),
      NL_FIELD("beta1", double, beta1, "Adam beta1"),
      NL_FIELD("beta2", double, beta2, "Adam beta2"),
      NL_FIELD("adam_eps", double, adam_eps, "Adam epsilon"),
      NL_FIELD("weight_decay", double, weight_decay, "decoupled (adamw) or L2 (adam) weight decay, all parameters"),
      NL_FIELD("warmup_steps", int64_t, warmup_steps, "linear warm-up from 0"),
      NL_KIND_FIELD("schedule", Schedule, schedule),
      NL_FIELD("clip", double, clip, "global gradient-norm clip; 0 = off"),
      NL_FIELD("batch_size", int64_t, batch_size, "sequences per step"),
      NL_FIELD("steps", int64_t, steps, "training steps"),
      NL_FIELD("eval_every", int64_t, eval_every, "steps between evaluations"),
      NL_FIELD("eval_batches", int64_t, eval_batches, "held-out batches per evaluation"),
      NL_FIELD("seed", uint64_t, seed, "seed of init and data"),
      NL_FIELD("threads", int, threads, "threads (0 = all cores)"),
      NL_FIELD("init_from", std::string, init_from, "a model.safetensors to start from (\"\" = the init scheme)"),
  };
  return f;
}

const Field* find_field(const std::string& name) {
  for (const Field& f : fields())
    if (f.key.name == name) return &f;
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

[[noreturn]] void unknown_key(const std::string& name, const std::string& source) {
  std::string hint = closest_config_key(name);
  throw UsageError(fmt::format("unknown config key '{}' in {}{}", name, source,
                               hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
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

void apply_config_json(TrainConfig& cfg, const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    throw UsageError(fmt::format("{} is not valid JSON: {}", source, what.substr(what.find(']') + 2)));
  }
  NL_USAGE(j.is_object(), "{} must hold a JSON object of config keys", source);
  for (auto& [key, value] : j.items()) {
    const Field* f = find_field(key);
    if (!f) unknown_key(key, source);
    f->set(cfg, value);
  }
}

void apply_config_value(TrainConfig& cfg, const std::string& key, const std::string& value) {
  const Field* f = find_field(key);
  if (!f) unknown_key(key, "the flags");
  json v;
  const std::string& t = f->key.type;
  if (t == "string") {
    v = value;
  } else if (t == "bool") {
    NL_USAGE(value == "true" || value == "false" || value == "1" || value == "0" || value == "on" || value == "off",
             "--{} must be true or false, got '{}'", key, value);
    v = value == "true" || value == "1" || value == "on";
  } else {
    try {
      size_t used = 0;
      double d = std::stod(value, &used);
      NL_USAGE(used == value.size(), "--{} must be a number, got '{}'", key, value);
      if (t == "int") {
        NL_USAGE(d == static_cast<double>(static_cast<int64_t>(d)), "--{} must be a whole number, got '{}'", key, value);
        v = static_cast<int64_t>(d);
      } else {
        v = d;
      }
    } catch (const std::logic_error&) {
      throw UsageError(fmt::format("--{} must be a number, got '{}'", key, value));
    }
  }
  f->set(cfg, v);
}

TrainConfig load_train_config(const std::string& config_file, const std::map<std::string, std::string>& flags) {
  TrainConfig cfg;
  bool vocab_given = false;
  if (!config_file.empty()) {
    const std::string text = read_file(config_file);
    apply_config_json(cfg, text, config_file);
    vocab_given = json::parse(text).contains("vocab");
  }
  for (const auto& [key, value] : flags) apply_config_value(cfg, key, value);
  vocab_given = vocab_given || flags.count("vocab") > 0;
  if (cfg.data.kind == DataKind::text && !vocab_given) cfg.model.vocab = 256;
  return cfg;
}

std::string config_to_json(const TrainConfig& cfg) {
  json j = json::object();
  for (const Field& f : fields()) j[f.key.name] = f.get(cfg);
  return j.dump(2);
}

}  // namespace normlab
