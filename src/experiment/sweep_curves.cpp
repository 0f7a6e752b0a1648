// `normlab sweep summarize DIR --curves STEPS`: a metrics.jsonl field at chosen steps, per point,
// mean ± std over the seeds (sweep.h).
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/stats.h"
#include "normlab/parse.h"
#include "normlab/sweep.h"
#include "sweep_internal.h"

namespace normlab {

using json = nlohmann::json;

template <>
const EnumNames& enum_names<LayerReduce>() {
  static const EnumNames t{"layers",
                           {{LayerReduce::max, "max", {}, "the largest layer's value"},
                            {LayerReduce::min, "min", {}, "the smallest layer's value"},
                            {LayerReduce::mean, "mean", {}, "the mean over the layers"},
                            {LayerReduce::first, "first", {}, "the first layer's value"},
                            {LayerReduce::last, "last", {}, "the last layer's value"}}};
  return t;
}

namespace {

double number_or_nan(const json& v) { return v.is_number() ? v.get<double>() : NAN; }

// metrics.jsonl's fields that hold a list per layer.
bool is_layer_field(const std::string& field) {
  static const char* per_layer[] = {"stream_norm",       "block_grad_norm",    "attn_entropy",   "attn_max_logit",
                                    "stream_max_abs",    "norm_input_max_abs", "overflow_share", "underflow_share"};
  return std::find(std::begin(per_layer), std::end(per_layer), field) != std::end(per_layer);
}

// A per-layer field (a list) reduced to one number; a scalar as it is. NaN when not finite.
double reduce_layers(const json& v, LayerReduce how) {
  if (!v.is_array()) return number_or_nan(v);
  if (v.empty()) return NAN;
  if (how == LayerReduce::first) return number_or_nan(v.front());
  if (how == LayerReduce::last) return number_or_nan(v.back());
  double acc = how == LayerReduce::max ? -INFINITY : how == LayerReduce::min ? INFINITY : 0;
  for (const json& x : v) {
    const double d = number_or_nan(x);
    if (std::isnan(d)) return NAN;
    acc = how == LayerReduce::max ? std::max(acc, d) : how == LayerReduce::min ? std::min(acc, d) : acc + d;
  }
  return how == LayerReduce::mean ? acc / static_cast<double>(v.size()) : acc;
}

// f(step, record) for each record of a metrics.jsonl that has `field` and an integer step.
template <class F>
void for_each_record(const RunDir& run, const std::string& field, F&& f) {
  for_each_metrics_record(run, [&](int64_t step, const json& rec) {
    if (rec.contains(field)) f(step, rec);
  });
}

struct Group {
  std::string name;                            // "placement=post warmup_steps=0" ("all": no axes)
  int runs = 0;                                // finished seeds
  std::map<int64_t, std::vector<double>> at;   // step -> one value per seed that has it
};

std::string cell(const Group& g, int64_t step, int digits) {
  const auto it = g.at.find(step);
  if (it == g.at.end() || it->second.empty()) return "—";
  const std::vector<double>& v = it->second;
  if (std::any_of(v.begin(), v.end(), [](double x) { return !std::isfinite(x); })) return "nan";
  std::string text = fmt::format("{:.{}f}", mean(v), digits);
  if (v.size() > 1) text += fmt::format(" ± {:.{}f}", sample_std(v), digits);
  if (static_cast<int>(v.size()) < g.runs) text += fmt::format(" (n={}/{})", v.size(), g.runs);
  return text;
}

}  // namespace

namespace {
bool same_value(const std::string& a, const std::string& b) {
  char *ea = nullptr, *eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  if (!a.empty() && !b.empty() && *ea == '\0' && *eb == '\0')
    return std::fabs(x - y) <= 1e-9 * std::max(std::fabs(x), std::fabs(y));
  return a == b;
}
}  // namespace

bool point_matches(const SweepPoint& p, const std::vector<std::string>& where) {
  for (const std::string& cond : where) {
    const size_t eq = cond.find('=');
    const std::string key = cond.substr(0, eq);
    const auto it = std::find_if(p.values.begin(), p.values.end(), [&](const auto& kv) { return kv.first == key; });
    if (it == p.values.end()) return false;
    if (eq == std::string::npos) return false;
    bool any = false;
    for (const std::string& v : split_at(cond.substr(eq + 1), ',')) any = any || same_value(it->second, v);
    if (!any) return false;
  }
  return true;
}

std::string sweep_curves_markdown(const std::string& dir, const CurveOptions& opt) {
  NL_USAGE(!opt.steps.empty(), "--curves: no step given");
  NL_USAGE(opt.digits >= 0 && opt.digits <= 17, "--digits must be 0..17, got {}", opt.digits);
  for (const std::string& w : opt.where)
    NL_USAGE(w.find('=') != std::string::npos && w.find('=') > 0, "--where '{}' is not key=v1,v2", shown(w));
  const SweepPlan plan = plan_stored_sweep(dir + "/spec.json");  // its points in the spec's order
  std::vector<Group> groups;
  std::map<std::string, size_t> index;
  for (const SweepPoint& p : plan.points) {
    if (!point_matches(p, opt.where)) continue;
    const RunDir run(run_dir(dir, p));
    if (!run.finished()) continue;  // not run (yet)
    NL_USAGE(!(is_layer_field(opt.field) && run.encoder_layers() > 0),
             "--field {}: an encoder-decoder's per-layer figures are two stacks, which --layers would reduce as one; "
             "`normlab plot profile RUN` draws a run's as two panels", shown(opt.field));
    std::string name;
    for (const auto& [k, v] : p.values)
      if (k != "seed") name += (name.empty() ? "" : " ") + k + "=" + v;
    if (name.empty()) name = "all";
    auto [it, added] = index.emplace(name, groups.size());
    if (added) groups.push_back({name, 0, {}});
    Group& g = groups[it->second];
    ++g.runs;
    for_each_record(run, opt.field, [&](int64_t step, const json& rec) {
      if (std::find(opt.steps.begin(), opt.steps.end(), step) != opt.steps.end())
        g.at[step].push_back(reduce_layers(rec[opt.field], opt.layers));
    });
  }
  NL_USAGE(!groups.empty(), "no finished run under {}/runs matches", shown(dir, 200));
  const bool layered = is_layer_field(opt.field);
  std::string out = fmt::format("{}{}: mean ± std over seeds ({})\n\n", opt.field,
                                layered ? fmt::format(" ({} over layers)", to_string(opt.layers)) : "", dir);
  if (opt.transpose) {
    out += "| point |";
    for (int64_t s : opt.steps) out += fmt::format(" step {} |", s);
    out += "\n|---|";
    for (size_t i = 0; i < opt.steps.size(); ++i) out += "---:|";
    out += "\n";
    for (const Group& g : groups) {
      out += "| " + g.name + " |";
      for (int64_t s : opt.steps) out += " " + cell(g, s, opt.digits) + " |";
      out += "\n";
    }
    return out;
  }
  out += "| step |";
  for (const Group& g : groups) out += " " + g.name + " |";
  out += "\n|---:|";
  for (size_t i = 0; i < groups.size(); ++i) out += "---|";
  out += "\n";
  for (int64_t s : opt.steps) {
    out += fmt::format("| {} |", s);
    for (const Group& g : groups) out += " " + cell(g, s, opt.digits) + " |";
    out += "\n";
  }
  return out;
}

std::vector<LayerProfile> sweep_layer_profiles(const std::string& dir, const ProfileOptions& opt) {
  NL_USAGE(opt.digits >= 0 && opt.digits <= 17, "--digits must be 0..17, got {}", opt.digits);
  for (const std::string& w : opt.where)
    NL_USAGE(w.find('=') != std::string::npos && w.find('=') > 0, "--where '{}' is not key=v1,v2", shown(w));
  const SweepPlan plan = plan_stored_sweep(dir + "/spec.json");
  std::vector<LayerProfile> out;
  std::vector<std::vector<std::vector<double>>> values;  // per profile, per layer, per seed
  std::map<std::string, size_t> index;
  bool field_seen = false, listed = true;
  for (const SweepPoint& p : plan.points) {
    if (!point_matches(p, opt.where)) continue;
    const RunDir run(run_dir(dir, p));
    if (!run.finished()) continue;
    json at;  // the record at the step (or the last one with the field)
    for_each_record(run, opt.field, [&](int64_t step, const json& rec) {
      field_seen = true;
      if (opt.step < 0 || step == opt.step) at = rec;
    });
    if (at.is_null()) continue;
    const json& v = at[opt.field];
    if (!v.is_array()) {
      listed = false;
      continue;
    }
    std::string name;
    for (const auto& [k, val] : p.values)
      if (k != "seed" && val != "-") name += (name.empty() ? "" : " ") + k + "=" + val;
    if (name.empty()) name = "all";
    auto [it, added] = index.emplace(name, out.size());
    if (added) {
      out.push_back({name, "", 0, {}, {}});
      values.emplace_back();
    }
    ++out[it->second].runs;
    auto& per_layer = values[it->second];
    if (per_layer.size() < v.size()) per_layer.resize(v.size());
    for (size_t l = 0; l < v.size(); ++l) per_layer[l].push_back(number_or_nan(v[l]));
  }
  NL_USAGE(listed, "--profile: {} is not a per-layer field of metrics.jsonl (a list per block)", shown(opt.field));
  NL_USAGE(field_seen, "--profile: no run under {}/runs has the field '{}' in its metrics.jsonl", shown(dir, 200),
           shown(opt.field));
  NL_USAGE(!out.empty(), "--profile: no matching run under {}/runs has a record at step {}", shown(dir, 200), opt.step);
  // Axes every profile has alike go to the title, not to each name.
  std::vector<std::vector<std::string>> parts;
  for (const LayerProfile& p : out) parts.push_back(split_at(p.name, ' '));
  std::vector<std::string> shared;
  for (const std::string& t : parts[0])
    if (out.size() > 1 && std::all_of(parts.begin(), parts.end(), [&](const auto& ps) {
          return std::find(ps.begin(), ps.end(), t) != ps.end();
        }))
      shared.push_back(t);
  for (size_t i = 0; i < out.size(); ++i) {
    std::string name;
    for (const std::string& t : parts[i])
      if (std::find(shared.begin(), shared.end(), t) == shared.end()) name += (name.empty() ? "" : " ") + t;
    out[i].name = name.empty() ? "all" : name;
    out[i].shared = fmt::format("{}", fmt::join(shared, " "));
  }
  for (size_t i = 0; i < out.size(); ++i)
    for (const std::vector<double>& seeds : values[i]) {
      out[i].mean.push_back(mean(seeds));
      out[i].std.push_back(seeds.size() > 1 ? sample_std(seeds) : NAN);
    }
  return out;
}

std::string layer_profiles_markdown(const std::string& dir, const ProfileOptions& opt,
                                    const std::vector<LayerProfile>& profiles) {
  size_t layers = 0;
  for (const LayerProfile& p : profiles) layers = std::max(layers, p.mean.size());
  std::string out = fmt::format("{} by layer at {}: mean ± std over seeds ({}{})\n\n", opt.field,
                                opt.step < 0 ? "each run's last record" : fmt::format("step {}", opt.step), dir,
                                profiles.empty() || profiles[0].shared.empty() ? "" : "; " + profiles[0].shared);
  out += "| layer |";
  for (const LayerProfile& p : profiles) out += " " + p.name + " |";
  out += "\n|---:|";
  for (size_t i = 0; i < profiles.size(); ++i) out += "---:|";
  out += "\n";
  for (size_t l = 0; l < layers; ++l) {
    out += fmt::format("| {} |", l + 1);
    for (const LayerProfile& p : profiles) {
      if (l >= p.mean.size()) {
        out += " — |";
      } else if (!std::isfinite(p.mean[l])) {
        out += " nan |";
      } else {
        out += fmt::format(" {:.{}g}", p.mean[l], std::max(opt.digits, 1));
        if (std::isfinite(p.std[l])) out += fmt::format(" ± {:.2g}", p.std[l]);
        out += " |";
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace normlab
