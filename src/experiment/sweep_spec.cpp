// Sweep specs: parsing (JSON file, Hydra-style axes, --set), validation of every point before anything
// runs, run names and config hashes.
//
// Spec (every key optional):
//   { "base":    {"config": "file.json", "steps": 200, ...},   // train config keys
//     "grid":    {"lr": [1e-4, 1e-3], "placement": ["pre", "post"]},   // full product, in this order
//     "zip":     {"lr": [1e-3, 3e-3], "warmup_steps": [100, 300]},     // varied together (or a list of such)
//                A zip is a list of points: a key may repeat a value as long as no two points are equal,
//                and null leaves the key at the base's value for that point (a key that only some
//                values of another allow, e.g. norm_compute beside precision fp32).
//     "seeds":   [0, 1, 2],
//     "summary": {"rows": "lr", "cols": ["placement"], "metric": "final_val_loss"} }
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/parse.h"
#include "normlab/run.h"
#include "normlab/sweep.h"
#include "sweep_internal.h"

namespace normlab {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// How a zip's null (the key left at the base's value) reads in summaries; left out of run names.
const std::string kUnsetShown = "-";

struct Axis {
  std::string key;
  std::vector<ojson> values;  // canonical JSON values (as config_to_json writes them)
  std::vector<std::string> shown;  // as in run names (see label_axis)
};

const ConfigKey* find_key(const std::string& name) {
  for (const ConfigKey& k : config_keys())
    if (k.name == name) return &k;
  return nullptr;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& where) {
  std::string hint = closest_config_key(key);
  throw UsageError(fmt::format("unknown config key '{}' in {}{}", shown(key), where,
                               hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
}

void check_key(const std::string& key, const std::string& where) {
  if (!find_key(key)) unknown_key(key, where);
  NL_USAGE(key != "threads", "{}: 'threads' cannot be swept or set in a sweep; use --threads (threads per point)", where);
}

// A relative path of the user's spec names a file from the directory the sweep is made in; the
// spec records the absolute path, so that its points run, and the sweep is resumed and reported,
// from anywhere.
std::string absolute_path(const std::string& path) {
  return path.empty() || path[0] == '/' ? path : fs::absolute(path).lexically_normal().string();
}
// A value of a path-valued key (data's text:PATH, init_from) with its path made absolute.
ojson absolute_value(const std::string& key, const ojson& v) {
  if (!v.is_string()) return v;
  if (key == "init_from") return absolute_path(v.get<std::string>());
  if (key != "data") return v;
  const DataSpec d = DataSpec::parse(v.get<std::string>());
  return d.kind == DataKind::text ? ojson("text:" + absolute_path(d.path)) : v;
}

// The base's and the axes' relative paths made absolute (the user's spec, as the sweep is made).
void make_paths_absolute(TrainConfig& base, std::vector<Axis>& grid, std::vector<std::vector<Axis>>& zips) {
  if (base.data.kind == DataKind::text) base.data.path = absolute_path(base.data.path);
  base.init_from = absolute_path(base.init_from);
  auto axis = [](Axis& a) {
    for (ojson& v : a.values) v = absolute_value(a.key, v);
  };
  for (Axis& a : grid) axis(a);
  for (auto& g : zips)
    for (Axis& a : g) axis(a);
}

// The canonical JSON of one value of `key`: applied to a default config (which type-checks it; its
// error names the key and `where`, once) and read back.
ojson canonical(const std::string& key, const ojson& v, const std::string& where) {
  TrainConfig scratch;
  ojson one = ojson::object();
  one[key] = v;
  apply_config_json(scratch, one.dump(), where);
  return ojson::parse(config_to_json(scratch))[key];
}

ojson canonical_text(const std::string& key, const std::string& text, const std::string& where) {
  TrainConfig scratch;
  try {
    apply_config_value(scratch, key, text);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", where, e.what()));
  }
  return ojson::parse(config_to_json(scratch))[key];
}

std::string display(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) return short_number(v.get<double>());
  return v.dump();
}

void number_forms(double v, std::string* plain, std::string* sci);

// The values of an axis as run names show them: floats all in scientific form when any value reads
// shorter that way (lr=1e-4 ... 1e-2, not a mix of 1e-3 and 0.01), else all plain.
void label_axis(Axis& a) {
  a.shown.clear();
  bool floats = true, any_sci = false;
  for (const ojson& v : a.values) {
    if (v.is_null()) continue;
    floats = floats && v.is_number_float();
    if (!v.is_number_float()) continue;
    std::string plain, sci;
    number_forms(v.get<double>(), &plain, &sci);
    any_sci = any_sci || (sci.size() < plain.size());
  }
  for (const ojson& v : a.values) {
    if (v.is_null()) {
      a.shown.push_back(kUnsetShown);
    } else if (floats && v.get<double>() != std::floor(v.get<double>())) {
      std::string plain, sci;
      number_forms(v.get<double>(), &plain, &sci);
      a.shown.push_back(any_sci ? sci : plain);
    } else {
      a.shown.push_back(display(v));
    }
  }
}

// A run name component must be one path segment: '/' and other awkward characters become '_'.
std::string path_safe(const std::string& s) {
  std::string out;
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' || c == '_' || c == '=';
    out += ok ? c : '_';
  }
  if (out == "." || out == "..") out = "_" + out;
  return out;
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<ojson> axis_values(const std::string& key, const ojson& list, const std::string& where) {
  NL_USAGE(list.is_array(), "{} must be a list of values, got {}", where, list.dump());
  NL_USAGE(!list.empty(), "{} is empty: an axis needs at least one value", where);
  std::vector<ojson> out;
  for (size_t i = 0; i < list.size(); ++i) {
    ojson c = canonical(key, list[i], fmt::format("{}[{}]", where, i));
    for (const ojson& prev : out)
      NL_USAGE(prev != c, "{} lists {} twice", where, list[i].dump());
    out.push_back(c);
  }
  return out;
}

// One zip group's values: per key canonical or null (unset at that point); the points (one value of
// each key) must differ, a single key may repeat.
std::vector<Axis> zip_group(const ojson& z, const std::string& where) {
  std::vector<Axis> group;
  for (auto& [key, list] : z.items()) {
    check_key(key, where);
    std::string at = fmt::format("{}.{}", where, key);
    NL_USAGE(list.is_array(), "{} must be a list of values, got {}", at, list.dump());
    NL_USAGE(!list.empty(), "{} is empty: an axis needs at least one value", at);
    Axis a{key, {}, {}};
    for (size_t i = 0; i < list.size(); ++i)
      a.values.push_back(list[i].is_null() ? ojson() : canonical(key, list[i], fmt::format("{}[{}]", at, i)));
    if (!group.empty())
      NL_USAGE(a.values.size() == group.front().values.size(),
               "{}.{} has {} values but {}.{} has {}: zipped axes vary together and need equal lengths", where, key,
               a.values.size(), where, group.front().key, group.front().values.size());
    group.push_back(std::move(a));
  }
  const size_t n = group.front().values.size();
  for (const Axis& a : group) {
    bool all_null = true;
    for (const ojson& v : a.values) all_null = all_null && v.is_null();
    NL_USAGE(!all_null, "{}.{} is null at every point: set it in base or leave it out", where, a.key);
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < i; ++j) {
      bool same = true;
      for (const Axis& a : group) same = same && a.values[i] == a.values[j];
      if (!same) continue;
      std::vector<std::string> kv;
      for (const Axis& a : group) kv.push_back(fmt::format("{}={}", a.key, a.values[i].dump()));
      throw UsageError(fmt::format("{} lists the point {} twice (values {} and {})", where, fmt::join(kv, " "), j + 1, i + 1));
    }
  return group;
}

const std::vector<std::string>& summary_keys() {
  static const std::vector<std::string> k = {"rows", "cols", "metric", "paired"};
  return k;
}

std::string closest_of(const std::string& name, const std::vector<std::string>& known) {
  if (name.size() > 40) return "";  // no spec key is that long; a huge name would cost minutes
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& k : known) {
    size_t d = edit_distance(name, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best_d <= std::max<size_t>(2, name.size() / 2) ? best : "";
}

[[noreturn]] void unknown_spec_key(const std::string& key, const std::string& where, const std::vector<std::string>& known) {
  std::string hint = closest_of(key, known);
  if (hint.empty() && find_key(key)) hint = "base";  // a config key at the top level belongs in base
  throw UsageError(fmt::format("unknown key '{}' in {}{}", shown(key), where,
                               hint.empty() ? fmt::format(" (known: {})", fmt::join(known, ", "))
                                            : fmt::format(" (did you mean '{}'?)", hint)));
}

}  // namespace

const std::vector<std::string>& sweep_spec_keys() {
  static const std::vector<std::string> k = {"base", "grid", "zip", "seeds", "summary"};
  return k;
}

std::string short_number(double v) {
  if (!std::isfinite(v)) return v > 0 ? "inf" : (v < 0 ? "-inf" : "nan");
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
  std::string plain, sci;
  number_forms(v, &plain, &sci);
  return plain.size() <= sci.size() ? plain : sci;
}

namespace {
void number_forms(double v, std::string* plain_out, std::string* sci_out) {
  // The fewest significant digits that read back exactly, then the shorter of the two spellings.
  int digits = 1;
  for (; digits < 17; ++digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  char sci[64], plain[64];
  std::snprintf(sci, sizeof sci, "%.*e", digits - 1, v);
  std::string s = sci;  // "3.0e-04" style: tidy the exponent
  size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  int exp = std::atoi(s.c_str() + e + 1);
  std::string scientific = mant + "e" + std::to_string(exp);
  std::snprintf(plain, sizeof plain, "%.*f", std::max(0, digits - 1 - exp), v);
  std::string p = plain;
  *sci_out = scientific;
  *plain_out = std::strtod(p.c_str(), nullptr) == v ? p : scientific;
}
}  // namespace

std::string config_hash(const TrainConfig& cfg) {
  TrainConfig c = cfg;
  c.threads = 0;  // how many threads a point ran on is not part of what it is
  return fmt::format("{:016x}", fnv1a64(config_to_json(c)));
}

namespace {

// What a spec file and the command line give, before the product of the axes is taken.
struct SpecParts {
  ojson base = ojson::object();  // key -> canonical value, in the order given
  std::string base_file;         // base.config
  std::vector<Axis> grid;
  std::vector<std::vector<Axis>> zips;
  std::vector<ojson> seeds;
  SummaryLayout layout;
  bool rows_given = false, cols_given = false;
  std::string spec_name;  // as messages name the spec: its file, or "the command line"
};

ojson parse_spec_text(const std::string& path, const std::string& file) {
  const std::string text = read_file(path);
  // As strict as a config file: 1e400, a key given twice (which would win?), deep nesting.
  check_json_text(text, file);
  ojson spec;
  try {
    spec = ojson::parse(text);
  } catch (const ojson::parse_error& e) {
    std::string what = e.what();
    throw UsageError(fmt::format("{} is not valid JSON: {}", file, what.substr(what.find(']') + 2)));
  }
  NL_USAGE(spec.is_object(), "{} must hold a JSON object (keys: {})", file, fmt::join(sweep_spec_keys(), ", "));
  for (auto& [key, value] : spec.items()) {
    const auto& known = sweep_spec_keys();
    if (std::find(known.begin(), known.end(), key) == known.end()) unknown_spec_key(key, file, known);
  }
  return spec;
}

// base: config keys, and "config", a file found beside the spec when it is there.
void read_spec_base(const ojson& b, const std::string& spec_path, const std::string& file, SpecParts& parts) {
  NL_USAGE(b.is_object(), "{}: base must be an object of config keys, got {}", file, b.dump());
  for (auto& [key, value] : b.items()) {
    std::string where = fmt::format("{} base.{}", file, key);
    if (key == "config") {
      NL_USAGE(value.is_string(), "{} must be a file name, got {}", where, value.dump());
      fs::path p = value.get<std::string>();
      fs::path beside = fs::path(spec_path).parent_path() / p;
      std::error_code ec;
      parts.base_file = (p.is_relative() && fs::exists(beside, ec)) ? beside.string() : p.string();
      continue;
    }
    check_key(key, fmt::format("{} base", file));
    parts.base[key] = canonical(key, value, where);
  }
}

void read_spec_axes(const ojson& spec, const std::string& file, SpecParts& parts) {
  if (spec.contains("grid")) {
    const ojson& g = spec["grid"];
    NL_USAGE(g.is_object(), "{}: grid must be an object of key -> list of values, got {}", file, g.dump());
    for (auto& [key, value] : g.items()) {
      check_key(key, fmt::format("{} grid", file));
      parts.grid.push_back({key, axis_values(key, value, fmt::format("{} grid.{}", file, key)), {}});
    }
  }
  if (spec.contains("zip")) {
    ojson groups = spec["zip"].is_array() ? spec["zip"] : ojson::array({spec["zip"]});
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const ojson& z = groups[gi];
      std::string zname = spec["zip"].is_array() ? fmt::format("zip[{}]", gi) : "zip";
      NL_USAGE(z.is_object() && !z.empty(), "{}: {} must be an object of key -> list of values (all the same length), got {}",
               file, zname, z.dump());
      parts.zips.push_back(zip_group(z, fmt::format("{} {}", file, zname)));
    }
  }
  if (spec.contains("seeds")) parts.seeds = axis_values("seed", spec["seeds"], fmt::format("{} seeds", file));
}

std::string summary_string(const ojson& s, const char* key, const std::string& where, const char* what) {
  NL_USAGE(s[key].is_string(), "{}.{} must be {}, got {}", where, key, what, s[key].dump());
  return s[key].get<std::string>();
}

void read_spec_summary(const ojson& s, const std::string& file, SpecParts& parts) {
  std::string where = file + " summary";
  NL_USAGE(s.is_object(), "{} must be an object (keys: rows, cols, metric, paired), got {}", where, s.dump());
  for (auto& [key, value] : s.items()) {
    if (std::find(summary_keys().begin(), summary_keys().end(), key) == summary_keys().end())
      unknown_spec_key(key, where, summary_keys());
  }
  if (s.contains("rows")) {
    parts.layout.rows = summary_string(s, "rows", where, "an axis name");
    parts.rows_given = true;
  }
  if (s.contains("cols")) {
    NL_USAGE(s["cols"].is_array(), "{}.cols must be a list of axis names, got {}", where, s["cols"].dump());
    for (const ojson& c : s["cols"]) {
      NL_USAGE(c.is_string(), "{}.cols must be a list of axis names, got {}", where, c.dump());
      parts.layout.cols.push_back(c.get<std::string>());
    }
    parts.cols_given = true;
  }
  if (s.contains("metric")) parts.layout.metric = summary_string(s, "metric", where, "a result.json field name");
  if (s.contains("paired"))
    parts.layout.paired = summary_string(s, "paired", where, "a column's label (\"norm=layernorm\")");
}

void read_spec_file(const std::string& path, SpecParts& parts) {
  const std::string file = shown(path, 200);  // as messages name it
  const ojson spec = parse_spec_text(path, file);
  if (spec.contains("base")) read_spec_base(spec["base"], path, file, parts);
  read_spec_axes(spec, file, parts);
  if (spec.contains("summary")) read_spec_summary(spec["summary"], file, parts);
}

std::pair<std::string, std::string> split_key_value(const std::string& s, const char* what) {
  size_t eq = s.find('=');
  NL_USAGE(eq != std::string::npos && eq > 0, "{} '{}' is not key=value", what, shown(s));
  return {s.substr(0, eq), s.substr(eq + 1)};
}

// A command-line axis "key=v1,v2": its values, canonical, none empty or given twice.
std::vector<ojson> command_line_values(const std::string& s, const std::string& key, const std::string& value) {
  std::vector<std::string> texts = split_at(value, ',');
  std::vector<ojson> values;
  for (size_t i = 0; i < texts.size(); ++i) {
    NL_USAGE(!texts[i].empty(), "axis '{}': value {} is empty", shown(s), i + 1);
    ojson c = canonical_text(key, texts[i], fmt::format("axis {}", key));
    for (const ojson& prev : values) NL_USAGE(prev != c, "axis '{}' lists '{}' twice", shown(s), shown(texts[i]));
    values.push_back(c);
  }
  return values;
}

// The command line wins over the spec (Hydra's overrides): an axis the spec varies (or its seeds)
// takes the values given, even one; a single value of any other key sets the base.
void apply_command_line_axis(const std::string& s, SpecParts& parts) {
  auto [key, value] = split_key_value(s, "axis");
  check_key(key, fmt::format("axis '{}'", shown(s)));
  std::vector<ojson> values = command_line_values(s, key, value);
  if (key == "seed" && (values.size() > 1 || !parts.seeds.empty())) {
    parts.seeds = values;
    return;
  }
  bool replaced = false;
  for (Axis& a : parts.grid)
    if (a.key == key) a.values = values, replaced = true;
  if (replaced) return;
  for (const auto& group : parts.zips)
    for (const Axis& a : group)
      NL_USAGE(a.key != key, "axis '{}': {} varies together with other keys in {}'s zip; change it there",
               shown(s, 80), key, parts.spec_name);
  if (values.size() == 1) parts.base[key] = values[0];
  else parts.grid.push_back({key, values, {}});
}

// --set key=value, then axes key=v1,v2 (one value: a base override).
void apply_command_line(const SweepRequest& req, SpecParts& parts) {
  for (const std::string& s : req.sets) {
    auto [key, value] = split_key_value(s, "--set");
    if (key == "config") {
      parts.base_file = value;
      continue;
    }
    check_key(key, "--set");
    parts.base[key] = canonical_text(key, value, fmt::format("--set {}", key));
  }
  for (const std::string& s : req.axes) apply_command_line_axis(s, parts);
}

// seed in the grid is the seeds list; seeds are whole numbers; no key is varied twice.
void settle_seeds_and_check_axes(SpecParts& parts) {
  for (size_t i = 0; i < parts.grid.size(); ++i) {
    if (parts.grid[i].key != "seed") continue;
    NL_USAGE(parts.seeds.empty(), "{}: seed is both a grid axis and 'seeds': give it once", parts.spec_name);
    parts.seeds = parts.grid[i].values;
    parts.grid.erase(parts.grid.begin() + static_cast<long>(i));
    break;
  }
  for (const ojson& s : parts.seeds)
    NL_USAGE(s.is_number_unsigned() || (s.is_number_integer() && s.get<int64_t>() >= 0), "seeds must be whole numbers >= 0, got {}", s.dump());
  std::set<std::string> seen;
  auto note = [&](const std::string& key) {
    NL_USAGE(seen.insert(key).second, "{}: '{}' is varied twice (grid, zip, seeds or a command-line axis)",
             parts.spec_name, shown(key));
  };
  for (const Axis& a : parts.grid) note(a.key);
  for (const auto& g : parts.zips)
    for (const Axis& a : g) note(a.key);
  if (!parts.seeds.empty()) note("seed");
}

// Defaults, the config file, base keys; text gets its tokenizer's vocabulary.
TrainConfig base_config(const SpecParts& parts) {
  TrainConfig cfg = load_train_config(parts.base_file, {});
  // load_train_config applied the text-vocab rule to the file alone; base keys may change data
  bool vocab_given = parts.base.contains("vocab");
  if (!parts.base_file.empty()) vocab_given = vocab_given || ojson::parse(read_file(parts.base_file)).contains("vocab");
  apply_config_json(cfg, parts.base.dump(), parts.spec_name + " base");
  resolve_text_vocabulary(cfg, vocab_given);
  cfg.threads = 0;
  return cfg;
}

// The product's dimensions: each grid axis, each zip group, seeds; and how many points they make.
std::vector<size_t> product_dims(const SpecParts& parts, size_t max_points, size_t* total) {
  std::vector<size_t> dims;
  for (const Axis& a : parts.grid) dims.push_back(a.values.size());
  for (const auto& g : parts.zips) dims.push_back(g.front().values.size());
  if (!parts.seeds.empty()) dims.push_back(parts.seeds.size());
  *total = 1;
  for (size_t d : dims) {
    NL_USAGE(*total * d <= max_points, "{}: the grid has more than {} points", parts.spec_name, max_points);
    *total *= d;
  }
  return dims;
}

// Point n of the product (a mixed-radix index, the last dimension fastest): its values, config and
// name, not yet validated.
SweepPoint product_point(const SpecParts& parts, const Axis& seed_axis, const std::vector<size_t>& dims,
                         const TrainConfig& base, size_t n) {
  std::vector<size_t> idx(dims.size(), 0);
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = n % dims[d];
    n /= dims[d];
  }
  SweepPoint p;
  ojson values = ojson::object();
  size_t d = 0;
  auto add = [&](const Axis& a, size_t k) {
    if (!a.values[k].is_null()) values[a.key] = a.values[k];
    p.values.emplace_back(a.key, a.shown[k]);
  };
  for (const Axis& a : parts.grid) add(a, idx[d++]);
  for (const auto& g : parts.zips) {
    for (const Axis& a : g) add(a, idx[d]);
    ++d;
  }
  if (!parts.seeds.empty()) add(seed_axis, idx[d++]);
  p.config = base;
  apply_config_json(p.config, values.dump(), "the axes");
  std::vector<std::string> names;
  for (const auto& [k, v] : p.values)
    if (v != kUnsetShown) names.push_back(path_safe(k + "=" + v));
  p.name = names.empty() ? "base" : fmt::format("{}", fmt::join(names, "/"));
  return p;
}

// A point's config is valid (validate_run also reads a text data file: once per distinct file is
// enough); the error names the point.
void validate_point(SweepPoint& p, bool check_inputs, std::set<std::string>& text_checked) {
  try {
    if (check_inputs && p.config.data.kind == DataKind::text && text_checked.insert(p.config.data.str()).second)
      validate_run(p.config);
    else p.config.validate();
  } catch (const UsageError& e) {
    if (p.name == "base") throw UsageError(fmt::format("base config: {}", e.what()));
    throw UsageError(fmt::format("point {}: {}", p.name, e.what()));
  }
  p.hash = config_hash(p.config);
}

std::vector<SweepPoint> product_points(SpecParts& parts, const TrainConfig& base, size_t max_points,
                                       bool check_inputs) {
  size_t total = 0;
  const std::vector<size_t> dims = product_dims(parts, max_points, &total);
  for (Axis& a : parts.grid) label_axis(a);
  for (auto& g : parts.zips)
    for (Axis& a : g) label_axis(a);
  Axis seed_axis{"seed", parts.seeds, {}};
  label_axis(seed_axis);
  std::vector<SweepPoint> points;
  std::set<std::string> names, text_checked;
  for (size_t n = 0; n < total; ++n) {
    SweepPoint p = product_point(parts, seed_axis, dims, base, n);
    NL_USAGE(names.insert(p.name).second, "two points would share the run name '{}' (values that differ only in "
             "characters a directory name cannot hold)", p.name);
    validate_point(p, check_inputs, text_checked);
    points.push_back(std::move(p));
  }
  return points;
}

// The summary layout: as given, else rows lr (or the first varied axis) and every other varied axis
// as columns; checked against the axes.
SummaryLayout summary_layout(const SpecParts& parts, const SweepPlan& plan) {
  std::vector<std::string> varied;
  for (const std::string& k : plan.axes)
    if (k != "seed") varied.push_back(k);
  SummaryLayout layout = parts.layout;
  if (!parts.rows_given)
    layout.rows = std::find(varied.begin(), varied.end(), "lr") != varied.end() ? "lr" : (varied.empty() ? "" : varied.front());
  if (!parts.cols_given) {
    layout.cols.clear();
    for (const std::string& k : varied)
      if (k != layout.rows) layout.cols.push_back(k);
  }
  pair_across_rows_when_alone(layout);
  check_layout(layout, plan.axes, parts.spec_name + " summary", implied_axes(plan.points, layout, plan.axes));
  return layout;
}

// The resolved spec: the base in full, the axes as canonical values.
std::string resolved_spec_json(const SpecParts& parts, const TrainConfig& base, const SummaryLayout& layout) {
  ojson resolved = ojson::object();
  resolved["base"] = ojson::parse(config_to_json(base));
  resolved["base"].erase("threads");
  ojson g = ojson::object();
  for (const Axis& a : parts.grid) g[a.key] = a.values;
  resolved["grid"] = g;
  ojson z = ojson::array();
  for (const auto& group : parts.zips) {
    ojson o = ojson::object();
    for (const Axis& a : group) o[a.key] = a.values;
    z.push_back(o);
  }
  resolved["zip"] = z;
  if (!parts.seeds.empty()) resolved["seeds"] = parts.seeds;
  resolved["summary"] = {{"rows", layout.rows}, {"cols", layout.cols}, {"metric", layout.metric}};
  if (!layout.paired.empty()) resolved["summary"]["paired"] = layout.paired;
  return resolved.dump(2) + "\n";
}

}  // namespace

SweepPlan plan_sweep(const SweepRequest& req) {
  SpecParts parts;
  parts.spec_name = req.spec_file.empty() ? "the command line" : shown(req.spec_file, 200);
  if (!req.spec_file.empty()) read_spec_file(req.spec_file, parts);
  apply_command_line(req, parts);
  settle_seeds_and_check_axes(parts);
  TrainConfig base = base_config(parts);
  SweepPlan plan;
  for (const Axis& a : parts.grid) plan.axes.push_back(a.key);  // the axes in name order
  for (const auto& g : parts.zips)
    for (const Axis& a : g) plan.axes.push_back(a.key);
  if (!parts.seeds.empty()) plan.axes.push_back("seed");
  if (req.absolute_paths) make_paths_absolute(base, parts.grid, parts.zips);
  plan.points = product_points(parts, base, req.max_points, req.check_inputs);
  plan.layout = summary_layout(parts, plan);
  plan.spec_json = resolved_spec_json(parts, base, plan.layout);
  return plan;
}

SweepPlan plan_stored_sweep(const std::string& spec_json) {
  SweepRequest req;
  req.spec_file = spec_json;
  req.check_inputs = false;
  return plan_sweep(req);
}

void pair_across_rows_when_alone(SummaryLayout& layout) {
  if (layout.paired.empty() || !layout.cols.empty() || layout.rows.empty()) return;
  std::istringstream paired(layout.paired);
  std::string word;
  while (paired >> word)
    if (split_at(word, '=')[0] != layout.rows) return;  // check_layout names the stray key
  layout.cols = {layout.rows};
  layout.rows.clear();
}

std::vector<std::string> implied_axes(const std::vector<SweepPoint>& points, const SummaryLayout& layout,
                                      const std::vector<std::string>& axes) {
  auto value_of = [](const SweepPoint& p, const std::string& key) {
    for (const auto& [k, v] : p.values)
      if (k == key) return v;
    return std::string();
  };
  const bool any_place = !layout.rows.empty() || !layout.cols.empty();
  std::vector<std::string> out;
  for (const std::string& a : axes) {
    if (!any_place || a == "seed" || a == layout.rows ||
        std::find(layout.cols.begin(), layout.cols.end(), a) != layout.cols.end())
      continue;
    std::map<std::string, std::string> by_cell;  // the rows' and columns' values -> a's value
    bool determined = true;
    for (const SweepPoint& p : points) {
      std::string cell = layout.rows.empty() ? "" : value_of(p, layout.rows);
      for (const std::string& c : layout.cols) cell += '\x1f' + value_of(p, c);
      auto [it, fresh] = by_cell.emplace(cell, value_of(p, a));
      if (!fresh && it->second != value_of(p, a)) {
        determined = false;
        break;
      }
    }
    if (determined) out.push_back(a);
  }
  return out;
}

void check_layout(const SummaryLayout& layout, const std::vector<std::string>& axes, const std::string& where,
                  const std::vector<std::string>& implied) {
  auto varied = [&](const std::string& k) { return k != "seed" && std::find(axes.begin(), axes.end(), k) != axes.end(); };
  std::vector<std::string> names;
  for (const std::string& a : axes)
    if (a != "seed") names.push_back(a);
  if (names.empty()) return;  // nothing varies but the seed: one cell
  // Empty rows: one row ("all"), every varied axis a column (a one-axis sweep compared by --paired).
  NL_USAGE(layout.rows.empty() || varied(layout.rows), "{}: rows '{}' is not a varied axis (varied: {})", where,
           shown(layout.rows), fmt::join(names, ", "));
  for (const std::string& c : layout.cols) {
    NL_USAGE(varied(c), "{}: column '{}' is not a varied axis (varied: {})", where, shown(c), fmt::join(names, ", "));
    NL_USAGE(c != layout.rows, "{}: '{}' is both the rows and a column", where, shown(c));
  }
  for (const std::string& k : names)
    NL_USAGE(k == layout.rows || std::find(layout.cols.begin(), layout.cols.end(), k) != layout.cols.end() ||
                 std::find(implied.begin(), implied.end(), k) != implied.end(),
             "{}: axis '{}' is neither the rows nor a column (each varied axis but seed must be one of them, unless "
             "the rows and columns determine it, as for an axis zipped with one of them)",
             where, k);
  // paired: key=value words over column axes (the values are checked against the runs' columns when summarized)
  std::istringstream paired(layout.paired);
  std::string word;
  while (paired >> word) {
    const std::vector<std::string> kv = split_at(word, '=');
    NL_USAGE(kv.size() == 2 && !kv[0].empty(), "{}: paired '{}' is not key=value", where, shown(word));
    NL_USAGE(std::find(layout.cols.begin(), layout.cols.end(), kv[0]) != layout.cols.end(),
             "{}: paired names '{}', which is not a column axis (columns: {})", where, shown(kv[0]),
             layout.cols.empty() ? std::string("none") : fmt::format("{}", fmt::join(layout.cols, ", ")));
  }
  const auto& numbers = result_number_fields();
  NL_USAGE(std::find(numbers.begin(), numbers.end(), layout.metric) != numbers.end(),
           "{}: metric '{}' is not a number that result.json holds (one of: {})", where, shown(layout.metric),
           fmt::join(numbers, ", "));
}

Shard parse_shard(const std::string& text) {
  size_t slash = text.find('/');
  Shard s;
  try {
    NL_USAGE(slash != std::string::npos, "--shard '{}' is not K/N", shown(text));
    size_t a = 0, b = 0;
    long k = std::stol(text.substr(0, slash), &a);
    long n = std::stol(text.substr(slash + 1), &b);
    NL_USAGE(a == slash && b == text.size() - slash - 1, "--shard '{}' is not K/N (two whole numbers)", shown(text));
    NL_USAGE(n >= 1, "--shard {}: N must be at least 1", text);
    NL_USAGE(k >= 0 && k < n, "--shard {}: K must be in 0..{} (shards count from 0, as SLURM_ARRAY_TASK_ID does)", text, n - 1);
    s.index = static_cast<int>(k);
    s.count = static_cast<int>(n);
  } catch (const std::logic_error&) {
    throw UsageError(fmt::format("--shard '{}' is not K/N (two whole numbers)", shown(text)));
  }
  return s;
}

Shard shard_from_env() {
  const char* id = std::getenv("SLURM_ARRAY_TASK_ID");
  const char* count = std::getenv("SLURM_ARRAY_TASK_COUNT");
  if (!id || !count || !*id || !*count) return {};
  try {
    return parse_shard(std::string(id) + "/" + count);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT: {} (an array must run 0..N-1)", e.what()));
  }
}

bool in_shard(size_t i, const Shard& s) { return i % static_cast<size_t>(s.count) == static_cast<size_t>(s.index); }

}  // namespace normlab
