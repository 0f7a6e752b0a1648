#include "normlab/checkpoint.h"

#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "normlab/error.h"
#include "normlab/io.h"

namespace normlab {

using json = nlohmann::json;

namespace {

// A header larger than this is not a checkpoint of these models (theirs are a few KiB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

const char* st_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::bf16:
    case DType::f16: break;  // refused by save_safetensors: checkpoints hold the float32 masters
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::f32;
  else if (s == "F64") out = DType::f64;
  else if (s == "I32") out = DType::i32;
  else return false;
  return true;
}

// What a problem in a file looks like to the user: one line, names the file.
[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError(fmt::format("checkpoint '{}': {}", path, what));
}

std::string clip(const std::string& s) { return s.size() > 80 ? s.substr(0, 77) + "..." : s; }

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    NL_CHECK(t.device() == Device::cpu, "save_safetensors: {} is not on the cpu", name);
    NL_CHECK(!is_16bit(t.dtype()), "save_safetensors: {} is {}; checkpoints hold float32, float64 and int32", name,
             to_string(t.dtype()));
    const uint64_t bytes = t.nbytes();
    header[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  // The format aligns the data to 8 bytes by padding the header with spaces.
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : tensors) out.append(static_cast<const char*>(t.raw()), t.nbytes());
  write_file_atomic(path, out);
}

namespace {

// A safetensors header, read and parsed: the JSON, and where the data section starts and its size.
struct SafetensorsHeader {
  json header;
  uint64_t data_begin = 0, data_size = 0;
};

// The header's JSON, each tensor's name once, nested no deeper than a header needs.
json parse_header_json(const std::string& path, const std::string& header_text) {
  json header;
  std::set<std::string> seen;
  bool duplicate = false;
  std::string duplicate_name;
  try {
    header = json::parse(header_text, [&](int d, json::parse_event_t ev, json& parsed) {
      if (d > 8) throw UsageError("nested too deeply");
      if (ev == json::parse_event_t::key && d == 1) {
        const std::string k = parsed.get<std::string>();
        if (!seen.insert(k).second && !duplicate) {
          duplicate = true;
          duplicate_name = k;
        }
      }
      return true;
    });
  } catch (const UsageError&) {
    bad(path, "the header nests JSON too deeply");
  } catch (const json::exception& e) {
    bad(path, fmt::format("the header is not JSON ({})", clip(e.what())));
  }
  if (duplicate) bad(path, fmt::format("tensor '{}' appears twice in the header", clip(duplicate_name)));
  if (!header.is_object()) bad(path, "the header is not a JSON object");
  return header;
}

SafetensorsHeader read_header(const ReadableFile& in, const std::string& path) {
  const uint64_t size = static_cast<uint64_t>(in.size());
  if (size < 8) bad(path, fmt::format("{} bytes: too short for the 8-byte header length", size));
  unsigned char len_bytes[8];
  if (!in.read_at(0, len_bytes, 8)) bad(path, "cannot read the header length (the file shrank)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes) bad(path, fmt::format("header length {} is not plausible (more than 100 MiB)", header_len));
  if (header_len > size - 8) bad(path, fmt::format("header length {} runs past the end of the file ({} bytes)", header_len, size));
  std::string header_text(header_len, '\0');
  if (!in.read_at(8, header_text.data(), static_cast<int64_t>(header_len))) bad(path, "cannot read the header (the file shrank)");
  return {parse_header_json(path, header_text), 8 + header_len, size - 8 - header_len};
}

// Where a tensor's bytes lie in the data section.
struct Span {
  uint64_t begin, end;
  std::string name;
};

Shape entry_shape(const std::string& path, const std::string& n, const json& entry) {
  if (!entry["shape"].is_array() || entry["shape"].size() > 8) bad(path, fmt::format("tensor '{}' has no valid shape", n));
  Shape shape;
  uint64_t numel = 1;
  for (auto& v : entry["shape"]) {
    if (!v.is_number_unsigned()) bad(path, fmt::format("tensor '{}' has a shape entry {} (not a size)", n, clip(v.dump())));
    const uint64_t s = v.get<uint64_t>();
    if (s > (uint64_t{1} << 40) || (s > 0 && numel > (uint64_t{1} << 40) / s))
      bad(path, fmt::format("tensor '{}' has an implausibly large shape", n));
    numel *= s;
    shape.push_back(static_cast<int64_t>(s));
  }
  return shape;
}

// One tensor's header entry checked: its dtype, shape and data_offsets, which must hold exactly
// its bytes inside the data section. The tensor is allocated, its data not yet read.
Span read_entry(const std::string& path, const std::string& name, const json& entry, uint64_t data_size, Tensor& t) {
  const std::string n = clip(name);
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
    bad(path, fmt::format("tensor '{}' needs dtype, shape and data_offsets", n));
  DType dt;
  if (!entry["dtype"].is_string() || !parse_st_dtype(entry["dtype"].get<std::string>(), dt))
    bad(path, fmt::format("tensor '{}' has dtype {} (normlab reads F32, F64, I32)", n, clip(entry["dtype"].dump())));
  const Shape shape = entry_shape(path, n, entry);
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
  const auto& off = entry["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad(path, fmt::format("tensor '{}' has data_offsets {} (expected [begin, end])", n, clip(off.dump())));
  const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
  if (b > e || e > data_size)
    bad(path, fmt::format("tensor '{}' has data_offsets [{}, {}] outside the {} data bytes", n, b, e, data_size));
  if (e - b != numel * dtype_size(dt))
    bad(path, fmt::format("tensor '{}': data_offsets hold {} bytes but shape {} of {} needs {}", n, e - b,
                          shape_str(shape), to_string(dt), numel * dtype_size(dt)));
  t = Tensor::empty(shape, dt);
  return {b, e, n};
}

void read_metadata(const std::string& path, const json& entry, std::map<std::string, std::string>& metadata) {
  if (!entry.is_object()) bad(path, "__metadata__ is not an object of strings");
  for (auto& [k, v] : entry.items()) {
    if (!v.is_string()) bad(path, fmt::format("__metadata__ '{}' is not a string", clip(k)));
    metadata[k] = v.get<std::string>();
  }
}

// The tensors must tile the data section: no overlap, no gap.
void check_tiling(const std::string& path, std::vector<Span> spans, uint64_t data_size) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b2) { return a.begin < b2.begin; });
  uint64_t at = 0;
  for (const Span& s : spans) {
    if (s.begin != at) bad(path, fmt::format("tensor '{}' starts at byte {} of the data, expected {} (gap or overlap)", s.name, s.begin, at));
    at = s.end;
  }
  if (at != data_size) bad(path, fmt::format("{} data bytes, but the tensors cover {} (truncated or trailing bytes)", data_size, at));
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  const ReadableFile in(path);  // a FIFO, a device or a directory is refused here, never waited on
  const SafetensorsHeader h = read_header(in, path);
  SafetensorsFile file;
  std::vector<Span> spans;
  for (auto& [name, entry] : h.header.items()) {
    if (name == "__metadata__") {
      read_metadata(path, entry, file.metadata);
      continue;
    }
    Tensor t;
    spans.push_back(read_entry(path, name, entry, h.data_size, t));
    file.tensors.push_back({name, t});
  }
  check_tiling(path, spans, h.data_size);
  for (size_t i = 0; i < spans.size(); ++i) {
    Tensor& t = file.tensors[i].second;
    if (t.nbytes() > 0 && !in.read_at(static_cast<int64_t>(h.data_begin + spans[i].begin), t.raw(),
                                      static_cast<int64_t>(t.nbytes())))
      bad(path, fmt::format("cannot read the data of tensor '{}' (the file shrank)", spans[i].name));
  }
  return file;
}

std::string torch_parameter_name(const std::string& name) {
  auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  auto swap_tail = [&](size_t n, const char* to) { return name.substr(0, name.size() - n) + to; };
  if (ends(".gamma")) return swap_tail(6, ".weight");
  if (ends(".beta")) return swap_tail(5, ".bias");
  if (ends(".w")) return swap_tail(2, ".weight");
  if (ends(".b")) return swap_tail(2, ".bias");
  if (name.find('.') == std::string::npos) return name + ".weight";  // tok_emb, pos_emb: nn.Embedding
  return name;
}

std::vector<std::pair<std::string, Tensor>> model_state(const ParamList& params) {
  std::vector<std::pair<std::string, Tensor>> out;
  // Parameters in device memory are downloaded here, at save, and nowhere else.
  for (const Tensor& p : params.all())
    out.push_back({torch_parameter_name(p.name()), p.device() == Device::cpu ? p : p.to_device(Device::cpu)});
  return out;
}

void load_model_state(ParamList& params, const ModelConfig& cfg, const SafetensorsFile& file, const std::string& source) {
  // Gemma's w and a plain gamma share the name `.weight` (PyTorch's), so the tensors alone cannot
  // tell a plain checkpoint from a Gemma one: loaded across, every gain would be off by one. A
  // checkpoint normlab wrote says which in its config; one from elsewhere is taken as it is.
  if (auto meta = file.metadata.find("normlab_config"); meta != file.metadata.end() && cfg.norm != NormKind::none) {
    const json saved = json::parse(meta->second, nullptr, /*allow_exceptions=*/false);
    if (saved.is_object()) {
      const json g = saved.value("gemma_norm", json(false));
      const bool saved_gemma = g.is_boolean() && g.get<bool>();
      if (saved_gemma != cfg.gain_offset())
        throw UsageError(fmt::format(
            "checkpoint '{}' stores its norm gains {} but the config has gemma_norm {}: `normlab convert RUN --gain {}` "
            "maps one form to the other",
            source, saved_gemma ? "as Gemma's w (gain 1 + w)" : "plain (gain gamma)",
            cfg.gain_offset() ? "true" : "false", cfg.gain_offset() ? "gemma" : "plain"));
    }
  }
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : file.tensors) by_name[name] = &t;
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const Tensor& p : params.all()) {
    const std::string name = torch_parameter_name(p.name());
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      problems.push_back(fmt::format("{} missing", name));
      continue;
    }
    used.insert(name);
    const Tensor& t = *it->second;
    if (t.shape() != p.shape() || t.dtype() != p.dtype())
      problems.push_back(fmt::format("{} is {} {} in the checkpoint, {} {} in the model", name, to_string(t.dtype()),
                                     shape_str(t.shape()), to_string(p.dtype()), shape_str(p.shape())));
  }
  for (const auto& [name, t] : file.tensors)
    if (!used.count(name) && by_name.count(name)) {
      bool is_param = false;
      for (const Tensor& p : params.all()) is_param = is_param || torch_parameter_name(p.name()) == name;
      if (!is_param) problems.push_back(fmt::format("{} is not a parameter of this model", name));
    }
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < 4; ++i) list += (i ? "; " : "") + problems[i];
    if (problems.size() > 4) list += fmt::format("; and {} more", problems.size() - 4);
    throw UsageError(fmt::format("checkpoint '{}' does not match the config: {}", source, list));
  }
  for (const Tensor& p : params.all()) {
    Tensor dst = p;
    dst.copy_(*by_name[torch_parameter_name(p.name())]);
  }
}

namespace {

// Exact text for a double, NaN and infinities included ("%a" reads back with strtod).
std::string exact(double v) { return fmt::format("{:a}", v); }

double parse_exact(const std::string& path, const std::string& field, const json& j) {
  if (!j.is_string()) bad(path, fmt::format("state field '{}' is not an exact number", field));
  const std::string text = j.get<std::string>();
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size())
    bad(path, fmt::format("state field '{}' ('{}') is not a number", field, clip(text)));
  return v;
}

json exact_array(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(exact(x));
  return a;
}

std::vector<double> parse_exact_array(const std::string& path, const std::string& field, const json& j) {
  if (!j.is_array()) bad(path, fmt::format("state field '{}' is not an array", field));
  std::vector<double> out;
  for (const json& x : j) out.push_back(parse_exact(path, field, x));
  return out;
}

int64_t parse_count(const std::string& path, const std::string& field, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || v < 0)
    bad(path, fmt::format("state field '{}' ('{}') is not a count", field, clip(text)));
  return v;
}


// An eval as the state keeps it: every field, each number exact (so a resumed run's metrics.jsonl
// is the uninterrupted run's, bit for bit).
json state_eval(const EvalRecord& r) {
  json e{{"step", r.step}};
  for (const EvalField& f : eval_fields()) {
    if (f.number) e[f.name] = exact(r.*f.number);
    if (f.list) e[f.name] = exact_array(r.*f.list);
    if (f.count) e[f.name] = r.*f.count;
  }
  return e;
}

// A state's eval back: every field its writer knew (those older states lack keep their default).
EvalRecord read_state_eval(const std::string& path, const json& e) {
  EvalRecord r;
  r.step = e["step"].get<int64_t>();
  for (const EvalField& f : eval_fields()) {
    if (f.optional_in_state && !e.contains(f.name)) continue;
    const std::string where = std::string("evals.") + f.name;
    if (f.number) r.*f.number = parse_exact(path, where, e.value(f.name, json()));
    if (f.list) r.*f.list = parse_exact_array(path, where, e.value(f.name, json()));
    if (f.count && (!e[f.name].is_number_integer() || e[f.name].get<int64_t>() < 0))
      bad(path, fmt::format("an eval's {} is not a count", f.name));
    if (f.count) r.*f.count = e[f.name].get<int64_t>();
  }
  if (r.attn_entropy.size() != r.attn_max_logit.size()) bad(path, "an eval's attention statistics differ in length");
  return r;
}

}  // namespace

void save_train_state(const std::string& path, const TrainState& st, const std::map<std::string, std::string>& extra) {
  json evals = json::array();
  for (const EvalRecord& r : st.evals) evals.push_back(state_eval(r));
  std::map<std::string, std::string> meta = extra;
  meta["normlab_train_state"] = "1";
  meta["step"] = std::to_string(st.step);
  meta["rng"] = json{std::to_string(st.data_rng.state), std::to_string(st.data_rng.inc), st.data_rng.has_spare,
                     exact(st.data_rng.spare)}.dump();
  meta["train_loss_sum"] = exact(st.train_loss_sum);
  meta["train_loss_count"] = std::to_string(st.train_loss_count);
  meta["evals"] = evals.dump();
  meta["recent_losses"] = exact_array(st.recent_losses).dump();
  meta["spike_count"] = std::to_string(st.spike_count);
  meta["spike_steps"] = json(st.spike_steps).dump();
  if (st.loss_scaler.scale > 0)
    meta["loss_scaler"] = json{exact(st.loss_scaler.scale), st.loss_scaler.growth_tracker, st.loss_scaler.skipped,
                               st.loss_scaler.consecutive_skips}
                              .dump();
  save_safetensors(path, {{"adam.m", st.adam_m}, {"adam.v", st.adam_v}}, meta);
}

TrainState load_train_state(const std::string& path, std::map<std::string, std::string>* extra) {
  SafetensorsFile file = load_safetensors(path);
  auto field = [&](const char* key) -> const std::string& {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) bad(path, fmt::format("not a training state: no '{}' in its metadata", key));
    return it->second;
  };
  if (field("normlab_train_state") != "1")
    bad(path, fmt::format("training state version '{}' is not 1", clip(field("normlab_train_state"))));
  TrainState st;
  st.step = parse_count(path, "step", field("step"));
  st.train_loss_count = parse_count(path, "train_loss_count", field("train_loss_count"));
  st.train_loss_sum = parse_exact(path, "train_loss_sum", json(field("train_loss_sum")));
  for (auto& [name, t] : file.tensors) {
    if (name == "adam.m") st.adam_m = t;
    else if (name == "adam.v") st.adam_v = t;
    else bad(path, fmt::format("'{}' is not part of a training state", clip(name)));
  }
  if (!st.adam_m.defined() || !st.adam_v.defined()) bad(path, "the optimizer moments adam.m and adam.v are not both there");
  if (st.adam_m.dtype() == DType::i32 || st.adam_v.dtype() != st.adam_m.dtype() || st.adam_m.dim() != 1 ||
      st.adam_v.shape() != st.adam_m.shape())
    bad(path, fmt::format("the optimizer moments are {} {} and {} {}, not two equal flat float tensors",
                          to_string(st.adam_m.dtype()), shape_str(st.adam_m.shape()), to_string(st.adam_v.dtype()),
                          shape_str(st.adam_v.shape())));
  try {
    const json rng = json::parse(field("rng"));
    if (!rng.is_array() || rng.size() != 4 || !rng[0].is_string() || !rng[1].is_string() || !rng[2].is_boolean())
      bad(path, "state field 'rng' is not [state, inc, has_spare, spare]");
    st.data_rng.state = std::strtoull(rng[0].get<std::string>().c_str(), nullptr, 10);
    st.data_rng.inc = std::strtoull(rng[1].get<std::string>().c_str(), nullptr, 10);
    st.data_rng.has_spare = rng[2].get<bool>();
    st.data_rng.spare = parse_exact(path, "rng", rng[3]);
    const json evals = json::parse(field("evals"));
    if (!evals.is_array()) bad(path, "state field 'evals' is not an array");
    for (const json& e : evals) {
      if (!e.is_object() || !e.contains("step") || !e["step"].is_number_integer())
        bad(path, "an entry of 'evals' has no integer step");
      EvalRecord r = read_state_eval(path, e);
      if (!st.evals.empty() && r.step <= st.evals.back().step) bad(path, "the evals' steps do not increase");
      if (r.step > st.step) bad(path, fmt::format("an eval at step {} lies after the state's step {}", r.step, st.step));
      st.evals.push_back(std::move(r));
    }
    // The spike counter's state (absent from states written before it existed: counting restarts).
    if (file.metadata.count("recent_losses")) {
      st.recent_losses = parse_exact_array(path, "recent_losses", json::parse(field("recent_losses")));
      st.spike_count = parse_count(path, "spike_count", field("spike_count"));
      const json steps = json::parse(field("spike_steps"));
      if (!steps.is_array()) bad(path, "state field 'spike_steps' is not an array");
      for (const json& x : steps) {
        if (!x.is_number_integer()) bad(path, "state field 'spike_steps' holds a value that is not a step");
        st.spike_steps.push_back(x.get<int64_t>());
      }
    }
    if (file.metadata.count("loss_scaler")) {
      const json ls = json::parse(field("loss_scaler"));
      if (!ls.is_array() || ls.size() != 4 || !ls[1].is_number_integer() || !ls[2].is_number_integer() ||
          !ls[3].is_number_integer())
        bad(path, "state field 'loss_scaler' is not [scale, growth_tracker, skipped, consecutive_skips]");
      st.loss_scaler.scale = parse_exact(path, "loss_scaler", ls[0]);
      st.loss_scaler.growth_tracker = ls[1].get<int64_t>();
      st.loss_scaler.skipped = ls[2].get<int64_t>();
      st.loss_scaler.consecutive_skips = ls[3].get<int64_t>();
      if (!(st.loss_scaler.scale > 0) || !std::isfinite(st.loss_scaler.scale) || st.loss_scaler.growth_tracker < 0 ||
          st.loss_scaler.skipped < 0 || st.loss_scaler.consecutive_skips < 0)
        bad(path, "state field 'loss_scaler' holds a scale that is not positive and finite, or a negative count");
    }
  } catch (const json::exception& e) {
    bad(path, fmt::format("state metadata is not valid JSON: {}", clip(e.what())));
  }
  if (extra) *extra = file.metadata;
  return st;
}

}  // namespace normlab
