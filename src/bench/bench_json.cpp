// `bench`: the JSON documents (Google Benchmark's layout: a "context" block and a "benchmarks"
// array, one entry per benchmark with its aggregates and counters; docs/bench.md has the
// schema), reading them back, merging several runs, and comparing two runs.
// The only file of src/bench that includes nlohmann/json (it costs seconds per translation unit).
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/stats.h"

namespace normlab::bench {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr const char* kSchema = "normlab-bench/1";

// NaN and infinities are written as null, and null reads back as NaN.
constexpr auto num = json_number<json>;
double get_num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null() || !it->is_number()) return NAN;
  return it->get<double>();
}
int64_t get_int(const json& j, const char* key, int64_t dflt = 0) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return dflt;
  if (it->is_number_float()) {  // a double out of int64's range must not be cast (undefined)
    const double d = it->get<double>();
    return std::isfinite(d) && std::fabs(d) < 9.2e18 ? static_cast<int64_t>(d) : dflt;
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return dflt;
  return it->get<int64_t>();
}
bool get_flag(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}
std::string get_str(const json& j, const char* key, const std::string& dflt = "") {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return dflt;
  return it->get<std::string>();
}

// Seconds per unit of time_unit.
double unit_seconds(const std::string& u) {
  if (u == "ns") return 1e-9;
  if (u == "us") return 1e-6;
  if (u == "ms") return 1e-3;
  if (u == "s") return 1.0;
  throw UsageError(fmt::format("time_unit '{}' is not one of ns, us, ms, s", u));
}

ordered_json aggregates_json(const Stats& s, double unit) {
  ordered_json a;
  a["samples"] = s.samples;
  a["median"] = num(s.median / unit);
  a["min"] = num(s.min / unit);
  a["max"] = num(s.max / unit);
  a["mean"] = num(s.mean / unit);
  a["stddev"] = num(s.stddev / unit);
  a["cv"] = num(s.cv());
  a["spread"] = num(s.spread());
  return a;
}

Stats aggregates_from(const json& a, double unit) {
  Stats s;
  s.samples = get_int(a, "samples");
  s.median = get_num(a, "median") * unit;
  s.min = get_num(a, "min") * unit;
  s.max = get_num(a, "max") * unit;
  s.mean = get_num(a, "mean") * unit;
  s.stddev = get_num(a, "stddev") * unit;
  return s;
}

ordered_json context_json(const Context& c, const char* kind, const std::vector<std::string>& warnings) {
  ordered_json j;
  j["date"] = c.date;
  j["host_name"] = c.host_name;
  j["executable"] = c.executable;
  j["num_cpus"] = c.num_cpus;
  j["cpus_online"] = c.cpus_online;
  j["mhz_per_cpu"] = static_cast<int64_t>(c.mhz_per_cpu);
  j["cpu_model"] = c.cpu_model;
  j["cpu_family"] = c.cpu_family;
  j["cpu_model_number"] = c.cpu_model_number;
  j["cpu_isa"] = c.cpu_isa;
  ordered_json caches = ordered_json::array();
  for (const CacheInfo& ci : c.caches)
    caches.push_back({{"type", ci.type}, {"level", ci.level}, {"size", ci.size}, {"num_sharing", ci.num_sharing}});
  j["caches"] = caches;
  j["load_avg"] = c.load_avg;
  std::string bt = c.build_type;
  std::transform(bt.begin(), bt.end(), bt.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  j["library_build_type"] = bt;
  j["normlab_version"] = c.normlab_version;
  j["normlab_commit"] = c.git_commit;
  j["normlab_source_hash"] = c.source_hash;
  j["compiler"] = c.compiler;
  ordered_json libs = ordered_json::object();
  for (const auto& [k, v] : c.libraries) libs[k] = v;
  j["library_versions"] = libs;
  j["omp_proc_bind"] = c.omp_proc_bind;
  j["omp_wait_policy"] = c.omp_wait_policy;
  j["threads_pinned"] = c.threads_pinned;
  j["llc_bytes"] = c.llc_bytes;
  j["footprint_target_bytes"] = c.footprint_target;
  j["others_cpu"] = num(c.others_cpu);
  j["steal"] = num(c.steal);
  ordered_json peaks = ordered_json::array();
  for (const FmaPeak& p : c.fma_peaks) {
    ordered_json e = {{"threads", p.threads}, {"gflop_per_s", num(p.gflop_per_s)}, {"isa", p.isa}, {"lanes", p.lanes}};
    if (std::isfinite(p.run_range.first)) e["run_range"] = {num(p.run_range.first), num(p.run_range.second)};
    peaks.push_back(e);
  }
  j["fma_peak"] = peaks;
  ordered_json trips = ordered_json::array();
  for (double ns : c.thread_round_trip_ns) trips.push_back(json_number<ordered_json>(ns));
  j["thread_round_trip_ns"] = trips;
  if (!c.streaming_stores.empty()) j["streaming_stores"] = c.streaming_stores;
  if (!c.tune_mode.empty()) {
    j["tune"] = {{"mode", c.tune_mode}, {"cache", c.tune_cache}};
    ordered_json choices = ordered_json::array();
    for (const KernelChoiceRecord& k : c.kernel_choices) {
      ordered_json secs = ordered_json::object();
      for (const auto& [v, t] : k.seconds) secs[v] = num(t);
      choices.push_back({{"shape_class", k.shape_class}, {"fused", k.fused}, {"backend", k.backend},
                         {"source", k.source}, {"timed_rows", k.timed_rows}, {"seconds", secs}});
    }
    j["kernel_choices"] = choices;
  }
  if (!c.device.empty()) j["device"] = c.device;
  j["normlab_bench"] = kind;
  j["schema"] = kSchema;
  j["warnings"] = warnings;
  return j;
}

Context context_from(const json& j) {
  Context c;
  c.date = get_str(j, "date");
  c.host_name = get_str(j, "host_name");
  c.executable = get_str(j, "executable");
  c.num_cpus = static_cast<int>(get_int(j, "num_cpus"));
  c.cpus_online = static_cast<int>(get_int(j, "cpus_online"));
  c.mhz_per_cpu = get_num(j, "mhz_per_cpu");
  c.cpu_model = get_str(j, "cpu_model");
  c.cpu_family = get_str(j, "cpu_family");
  c.cpu_model_number = get_str(j, "cpu_model_number");
  c.cpu_isa = get_str(j, "cpu_isa");
  if (j.contains("caches") && j["caches"].is_array())
    for (const json& ci : j["caches"])
      c.caches.push_back({get_str(ci, "type"), static_cast<int>(get_int(ci, "level")), get_int(ci, "size"),
                          static_cast<int>(get_int(ci, "num_sharing"))});
  if (j.contains("load_avg") && j["load_avg"].is_array())
    for (const json& v : j["load_avg"])
      if (v.is_number()) c.load_avg.push_back(v.get<double>());
  c.build_type = get_str(j, "library_build_type");
  c.normlab_version = get_str(j, "normlab_version");
  c.git_commit = get_str(j, "normlab_commit");
  c.source_hash = get_str(j, "normlab_source_hash");
  c.compiler = get_str(j, "compiler");
  if (j.contains("library_versions") && j["library_versions"].is_object())
    for (auto it = j["library_versions"].begin(); it != j["library_versions"].end(); ++it)
      if (it->is_string()) c.libraries[it.key()] = it->get<std::string>();
  c.omp_proc_bind = get_str(j, "omp_proc_bind");
  c.omp_wait_policy = get_str(j, "omp_wait_policy");
  c.threads_pinned = get_flag(j, "threads_pinned");
  c.llc_bytes = get_int(j, "llc_bytes");
  c.footprint_target = get_int(j, "footprint_target_bytes");
  c.others_cpu = get_num(j, "others_cpu");
  c.steal = get_num(j, "steal");
  if (j.contains("fma_peak") && j["fma_peak"].is_array())
    for (const json& p : j["fma_peak"]) {
      FmaPeak f;
      f.threads = static_cast<int>(get_int(p, "threads", 1));
      f.gflop_per_s = get_num(p, "gflop_per_s");
      f.isa = get_str(p, "isa");
      f.lanes = static_cast<int>(get_int(p, "lanes", 1));
      if (p.contains("run_range") && p["run_range"].is_array() && p["run_range"].size() == 2)
        for (size_t i = 0; i < 2; ++i)
          (i ? f.run_range.second : f.run_range.first) = p["run_range"][i].is_number() ? p["run_range"][i].get<double>() : NAN;
      c.fma_peaks.push_back(f);
    }
  if (j.contains("thread_round_trip_ns") && j["thread_round_trip_ns"].is_array())
    for (const json& ns : j["thread_round_trip_ns"]) c.thread_round_trip_ns.push_back(ns.is_number() ? ns.get<double>() : NAN);
  c.streaming_stores = get_str(j, "streaming_stores");
  if (j.contains("tune") && j["tune"].is_object()) {
    c.tune_mode = get_str(j["tune"], "mode");
    c.tune_cache = get_str(j["tune"], "cache");
  }
  if (j.contains("kernel_choices") && j["kernel_choices"].is_array())
    for (const json& k : j["kernel_choices"]) {
      if (!k.is_object()) continue;
      KernelChoiceRecord r{get_str(k, "shape_class"), get_str(k, "fused"), get_str(k, "backend"),
                           get_str(k, "source"), get_int(k, "timed_rows"), {}};
      if (k.contains("seconds") && k["seconds"].is_object())
        for (auto it = k["seconds"].begin(); it != k["seconds"].end(); ++it)
          r.seconds.emplace_back(it.key(), it->is_number() ? it->get<double>() : NAN);
      c.kernel_choices.push_back(std::move(r));
    }
  c.device = get_str(j, "device");
  return c;
}

ordered_json range_json(const std::map<std::string, std::pair<double, double>>& r) {
  ordered_json j = ordered_json::object();
  for (const auto& [k, v] : r) j[k] = {num(v.first), num(v.second)};
  return j;
}

std::map<std::string, std::pair<double, double>> range_from(const json& j, const char* key) {
  std::map<std::string, std::pair<double, double>> r;
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return r;
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (!e->is_array() || e->size() != 2) continue;
    auto v = [](const json& x) { return x.is_number() ? x.get<double>() : NAN; };
    r[e.key()] = {v((*e)[0]), v((*e)[1])};
  }
  return r;
}

// The fields Google Benchmark's layout gives every entry: one repetition of `iterations`, timed
// at `median` seconds, written in `unit_name` (unit seconds each).
ordered_json benchmark_entry(const std::string& name, int threads, int64_t iterations, double median, double unit,
                             const char* unit_name) {
  ordered_json j;
  j["name"] = name;
  j["run_name"] = name;
  j["run_type"] = "iteration";
  j["repetitions"] = 1;
  j["repetition_index"] = 0;
  j["threads"] = threads;
  j["iterations"] = iterations;
  j["real_time"] = num(median / unit);
  j["cpu_time"] = num(median / unit);
  j["time_unit"] = unit_name;
  return j;
}

json parse_document(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: not JSON ({})", what, shown(e.what(), 200)));
  }
  NL_USAGE(j.is_object() && j.contains("context") && j.contains("benchmarks") && j["benchmarks"].is_array(),
           "{}: not a normlab bench JSON document (no context and benchmarks)", what);
  return j;
}

}  // namespace

std::string bench_kind_of_json(const std::string& text, const std::string& what) {
  json j = parse_document(text, what);
  const std::string kind = get_str(j["context"], "normlab_bench");
  NL_USAGE(kind == "norms" || kind == "step" || kind == "ops", "{}: context.normlab_bench is '{}', not norms, step or ops",
           what, shown(kind));
  return kind;
}

// ---- bench norms ---------------------------------------------------------------------------

namespace {

ordered_json norm_row_json(const NormRow& r) {
  constexpr double kUnit = 1e-6;  // microseconds
  ordered_json j = benchmark_entry(r.name(), r.threads, r.time.samples * r.calls_per_sample, r.time.median, kUnit, "us");
  j["bytes_per_second"] = num(static_cast<double>(r.bytes.data) / r.time.median);
  j["label"] = r.cache_resident ? "cache-resident" : "memory";
  j["norm"] = r.norm;
  j["impl"] = r.impl;
  j["provider"] = r.provider;
  j["pass"] = r.pass;
  j["shape"] = {r.shape.batch, r.shape.seq, r.shape.d};
  j["device"] = r.device;
  j["dtype"] = r.dtype;
  j["resident"] = r.resident;
  j["calls_per_sample"] = r.calls_per_sample;
  j["status"] = r.status;
  j["streaming_stores"] = r.streaming_stores;
  if (!r.variant.empty()) {
    j["variant"] = r.variant;
    j["variant_source"] = r.variant_source;
    if (!r.backend_variant.empty()) j["backend_variant"] = r.backend_variant;
  }
  j["verify"] = {{"pass", r.verify.pass},
                 {"max_abs_err", num(r.verify.max_abs_err)},
                 {"worst_output", r.verify.worst_output},
                 {"report", r.verify.report}};
  j["aggregates"] = aggregates_json(r.time, kUnit);
  ordered_json c;
  c["data_bytes"] = r.bytes.data;
  c["param_bytes"] = r.bytes.params;
  c["stat_bytes"] = r.bytes.stats;
  c["working_set_bytes"] = r.working_set_bytes;
  c["parameters"] = r.parameters;
  c["gb_per_s"] = num(r.gb_per_s);
  c["copy_loop_gb_per_s"] = num(r.copy_loop_gb_per_s);
  c["memcpy_gb_per_s"] = num(r.memcpy_gb_per_s);
  c["pct_of_copy_loop"] = num(r.pct_of_copy_loop);
  c["pct_of_memcpy"] = num(r.pct_of_memcpy);
  c["pct_of_copy"] = num(r.pct_of_copy);
  c["own_copy_gb_per_s"] = num(r.own_copy_gb_per_s);
  c["pct_of_own_copy"] = num(r.pct_of_own_copy);
  c["rms_over_ln"] = num(r.rms_over_ln);
  c["vs_onednn"] = num(r.vs_onednn);
  c["backend_vs_onednn"] = num(r.backend_vs_onednn);
  c["vs_torch"] = num(r.vs_torch);
  c["vs_unfused"] = num(r.vs_unfused);
  j["counters"] = c;
  j["pct_against"] = r.pct_against;
  j["measurement_error"] = r.measurement_error;
  j["runs"] = r.runs;
  if (!r.run_range.empty()) j["run_range"] = range_json(r.run_range);
  return j;
}

NormRow norm_row_from(const json& j, const std::string& what) {
  NormRow r;
  r.norm = get_str(j, "norm");
  r.impl = get_str(j, "impl");
  r.provider = get_str(j, "provider");
  r.pass = get_str(j, "pass");
  NL_USAGE(!r.norm.empty() && !r.impl.empty() && !r.pass.empty(), "{}: benchmark '{}' has no norm, impl or pass",
           what, get_str(j, "name"));
  NL_USAGE(j.contains("shape") && j["shape"].is_array() && j["shape"].size() == 3,
           "{}: benchmark '{}' has no shape [batch, seq, d]", what, get_str(j, "name"));
  int64_t dims[3];
  for (size_t i = 0; i < 3; ++i) {
    const json& d = j["shape"][i];
    NL_USAGE(d.is_number_integer() && !(d.is_number_unsigned() && d.get<uint64_t>() > uint64_t{INT64_MAX}),
             "{}: benchmark '{}' has a shape that is not three integers", what, shown(get_str(j, "name")));
    dims[i] = d.get<int64_t>();
  }
  r.shape = {dims[0], dims[1], dims[2]};
  r.threads = static_cast<int>(get_int(j, "threads", 1));
  r.device = get_str(j, "device", "cpu");
  r.dtype = get_str(j, "dtype", "f32");
  NL_USAGE(!r.device.empty() && !r.dtype.empty(), "{}: benchmark '{}' has an empty device or dtype", what,
           shown(get_str(j, "name")));
  r.resident = get_flag(j, "resident");
  r.calls_per_sample = std::max<int64_t>(1, get_int(j, "calls_per_sample", 1));
  r.status = get_str(j, "status", "ok");
  r.streaming_stores = get_flag(j, "streaming_stores");
  r.variant = get_str(j, "variant");
  r.variant_source = get_str(j, "variant_source");
  r.backend_variant = get_str(j, "backend_variant");
  if (j.contains("verify") && j["verify"].is_object()) {
    const json& v = j["verify"];
    r.verify.pass = get_flag(v, "pass");
    r.verify.max_abs_err = get_num(v, "max_abs_err");
    r.verify.worst_output = get_str(v, "worst_output");
    r.verify.report = get_str(v, "report");
  }
  const double unit = unit_seconds(get_str(j, "time_unit", "us"));
  if (j.contains("aggregates") && j["aggregates"].is_object()) r.time = aggregates_from(j["aggregates"], unit);
  const json c = j.contains("counters") && j["counters"].is_object() ? j["counters"] : json::object();
  r.bytes.data = get_int(c, "data_bytes");
  r.bytes.params = get_int(c, "param_bytes");
  r.bytes.stats = get_int(c, "stat_bytes");
  r.working_set_bytes = get_int(c, "working_set_bytes");
  r.parameters = get_int(c, "parameters");
  r.gb_per_s = get_num(c, "gb_per_s");
  r.copy_loop_gb_per_s = get_num(c, "copy_loop_gb_per_s");
  r.memcpy_gb_per_s = get_num(c, "memcpy_gb_per_s");
  r.pct_of_copy_loop = get_num(c, "pct_of_copy_loop");
  r.pct_of_memcpy = get_num(c, "pct_of_memcpy");
  r.own_copy_gb_per_s = get_num(c, "own_copy_gb_per_s");
  r.pct_of_own_copy = get_num(c, "pct_of_own_copy");
  r.measurement_error = get_flag(j, "measurement_error");
  r.rms_over_ln = get_num(c, "rms_over_ln");
  r.vs_onednn = get_num(c, "vs_onednn");
  r.backend_vs_onednn = get_num(c, "backend_vs_onednn");
  r.vs_torch = get_num(c, "vs_torch");
  r.vs_unfused = get_num(c, "vs_unfused");
  r.pct_against = get_str(j, "pct_against", r.streaming_stores ? "memcpy" : "copy-loop");
  // Documents before pct_of_copy was written: the percentage of the copy pct_against names.
  r.pct_of_copy = c.contains("pct_of_copy") ? get_num(c, "pct_of_copy")
                  : r.pct_against == "memcpy" ? r.pct_of_memcpy : r.pct_of_copy_loop;
  r.cache_resident = get_str(j, "label") == "cache-resident";
  r.runs = static_cast<int>(get_int(j, "runs", 1));
  r.run_range = range_from(j, "run_range");
  return r;
}

}  // namespace

namespace {

// A report's document: the context block and one entry per row (row_json).
template <class Report, class RowJson>
std::string report_json(const Report& r, const char* kind, RowJson&& row_json) {
  ordered_json j;
  j["context"] = context_json(r.context, kind, r.warnings);
  ordered_json b = ordered_json::array();
  for (const auto& row : r.rows) b.push_back(row_json(row));
  j["benchmarks"] = b;
  if (!r.run_contexts.empty()) {
    ordered_json runs = ordered_json::array();
    for (const Context& c : r.run_contexts) {
      ordered_json rc = context_json(c, kind, {});
      for (const char* k : {"normlab_bench", "schema", "warnings"}) rc.erase(k);
      runs.push_back(rc);
    }
    j["runs"] = runs;
  }
  return j.dump(2);
}

// The inverse, for a document of `bench <kind>`; rows read by row_from(entry, what).
template <class Report, class RowFrom>
Report report_from_json(const std::string& text, const std::string& what, const std::string& kind, RowFrom&& row_from) {
  json j = parse_document(text, what);
  NL_USAGE(get_str(j["context"], "normlab_bench") == kind,
           "{}: not a `bench {}` document (context.normlab_bench is '{}')", what, kind,
           get_str(j["context"], "normlab_bench"));
  Report r;
  r.context = context_from(j["context"]);
  if (j["context"].contains("warnings") && j["context"]["warnings"].is_array())
    for (const json& w : j["context"]["warnings"])
      if (w.is_string()) r.warnings.push_back(w.get<std::string>());
  for (const json& b : j["benchmarks"]) r.rows.push_back(row_from(b, what));
  if (j.contains("runs") && j["runs"].is_array())
    for (const json& c : j["runs"])
      if (c.is_object()) r.run_contexts.push_back(context_from(c));
  return r;
}

}  // namespace

std::string norm_report_json(const NormReport& r) {
  ordered_json j = ordered_json::parse(report_json(r, "norms", norm_row_json));
  const std::vector<std::string> verdicts = norm_verdicts(r);
  if (!verdicts.empty()) j["context"]["verdicts"] = verdicts;
  return j.dump(2);
}

NormReport norm_report_from_json(const std::string& text, const std::string& what) {
  return report_from_json<NormReport>(text, what, "norms", norm_row_from);
}

// ---- bench step ----------------------------------------------------------------------------

namespace {

// Where the step's time goes, in seconds per step (StepRow's parts and kernels).
ordered_json step_parts_json(const StepRow& r) {
  ordered_json p;
  p["clocked_step_s"] = num(r.clocked_step);
  for (const StepPart& part : step_parts()) p[std::string(part.name) + "_s"] = num(r.*part.seconds);
  p["outside_kernels_s"] = num(r.outside_kernels_s);
  p["outside_products_share"] = num(r.outside_products_share);
  p["products_gflop_per_s"] = num(r.products_gflop_per_s);
  p["products_pct_of_fma_peak"] = num(r.products_pct_of_fma_peak);
  ordered_json kernels = ordered_json::array();
  for (const StepRow::Kernel& k : r.kernels)
    kernels.push_back({{"name", k.name}, {"part", k.part}, {"calls", k.calls}, {"seconds", num(k.seconds)}});
  p["kernels"] = kernels;
  return p;
}

void step_parts_from(const json& p, StepRow& r) {
  r.clocked_step = get_num(p, "clocked_step_s");
  for (const StepPart& part : step_parts()) r.*part.seconds = get_num(p, (std::string(part.name) + "_s").c_str());
  r.outside_kernels_s = get_num(p, "outside_kernels_s");
  r.outside_products_share = get_num(p, "outside_products_share");
  r.products_gflop_per_s = get_num(p, "products_gflop_per_s");
  r.products_pct_of_fma_peak = get_num(p, "products_pct_of_fma_peak");
  if (!p.contains("kernels") || !p["kernels"].is_array()) return;
  for (const json& k : p["kernels"])
    r.kernels.push_back({get_str(k, "name"), get_str(k, "part"), get_num(k, "calls"), get_num(k, "seconds")});
}

ordered_json step_row_json(const StepRow& r) {
  constexpr double kUnit = 1e-3;  // milliseconds
  ordered_json j = benchmark_entry(r.name(), r.threads, r.step.samples, r.step.median, kUnit, "ms");
  j["items_per_second"] = num(r.tokens_per_s);
  j["model"] = r.model;
  j["norm"] = r.norm;
  j["precision"] = to_string(r.precision);
  j["config"] = {{"layers", r.layers}, {"d_model", r.d_model}, {"d_hidden", r.d_hidden}, {"heads", r.heads},
                 {"vocab", r.vocab},   {"batch", r.batch},     {"seq", r.seq}};
  j["aggregates"] = aggregates_json(r.step, kUnit);
  j["norm_kernels"] = aggregates_json(r.norm_kernels, kUnit);
  j["norm_verify"] = {{"pass", r.norm_verify.pass},
                      {"max_abs_err", num(r.norm_verify.max_abs_err)},
                      {"worst_output", r.norm_verify.worst_output}};
  ordered_json c;
  c["parameters"] = r.parameters;
  c["norm_parameters"] = r.norm_parameters;
  c["norm_calls"] = r.norm_calls;
  c["norm_rows"] = r.norm_rows;
  c["norm_share"] = num(r.norm_share);
  c["tokens_per_s"] = num(r.tokens_per_s);
  c["step_speedup"] = num(r.step_speedup);
  c["op_speedup"] = num(r.op_speedup);
  c["predicted_step_speedup"] = num(r.predicted_step_speedup);
  c["precision_speedup"] = num(r.precision_speedup);
  c["matmul_flops"] = r.matmul_flops;
  c["gflop_per_s"] = num(r.gflop_per_s);
  c["fma_peak_gflop_per_s"] = num(r.fma_peak_gflop_per_s);
  c["pct_of_fma_peak"] = num(r.pct_of_fma_peak);
  j["counters"] = c;
  j["parts"] = step_parts_json(r);
  j["runs"] = r.runs;
  if (!r.run_range.empty()) j["run_range"] = range_json(r.run_range);
  return j;
}

StepRow step_row_from(const json& j, const std::string& what) {
  StepRow r;
  r.model = get_str(j, "model");
  r.norm = get_str(j, "norm");
  NL_USAGE(!r.model.empty() && !r.norm.empty(), "{}: benchmark '{}' has no model or norm", what, get_str(j, "name"));
  r.threads = static_cast<int>(get_int(j, "threads", 1));
  r.precision = parse_kind<Precision>(get_str(j, "precision", "fp32"));  // runs before bf16 rows: fp32
  const json cfg = j.contains("config") ? j["config"] : json::object();
  r.layers = get_int(cfg, "layers");
  r.d_model = get_int(cfg, "d_model");
  r.d_hidden = get_int(cfg, "d_hidden");
  r.heads = get_int(cfg, "heads");
  r.vocab = get_int(cfg, "vocab");
  r.batch = get_int(cfg, "batch");
  r.seq = get_int(cfg, "seq");
  const double unit = unit_seconds(get_str(j, "time_unit", "ms"));
  if (j.contains("aggregates")) r.step = aggregates_from(j["aggregates"], unit);
  if (j.contains("norm_kernels")) r.norm_kernels = aggregates_from(j["norm_kernels"], unit);
  if (j.contains("norm_verify")) {
    r.norm_verify.pass = get_flag(j["norm_verify"], "pass");
    r.norm_verify.max_abs_err = get_num(j["norm_verify"], "max_abs_err");
    r.norm_verify.worst_output = get_str(j["norm_verify"], "worst_output");
  }
  const json c = j.contains("counters") ? j["counters"] : json::object();
  r.parameters = get_int(c, "parameters");
  r.norm_parameters = get_int(c, "norm_parameters");
  r.norm_calls = get_int(c, "norm_calls");
  r.norm_rows = get_int(c, "norm_rows");
  r.norm_share = get_num(c, "norm_share");
  r.tokens_per_s = get_num(c, "tokens_per_s");
  r.step_speedup = get_num(c, "step_speedup");
  r.op_speedup = get_num(c, "op_speedup");
  r.predicted_step_speedup = get_num(c, "predicted_step_speedup");
  r.precision_speedup = get_num(c, "precision_speedup");
  r.matmul_flops = std::isfinite(get_num(c, "matmul_flops")) ? get_num(c, "matmul_flops") : 0;
  r.gflop_per_s = get_num(c, "gflop_per_s");
  r.fma_peak_gflop_per_s = get_num(c, "fma_peak_gflop_per_s");
  r.pct_of_fma_peak = get_num(c, "pct_of_fma_peak");
  if (j.contains("parts") && j["parts"].is_object()) step_parts_from(j["parts"], r);
  r.runs = static_cast<int>(get_int(j, "runs", 1));
  r.run_range = range_from(j, "run_range");
  return r;
}

}  // namespace

std::string step_report_json(const StepReport& r) { return report_json(r, "step", step_row_json); }

StepReport step_report_from_json(const std::string& text, const std::string& what) {
  return report_from_json<StepReport>(text, what, "step", step_row_from);
}

// ---- bench ops -----------------------------------------------------------------------------

namespace {

ordered_json op_row_json(const OpRow& r) {
  constexpr double kUnit = 1e-6;  // microseconds
  ordered_json j = benchmark_entry(r.name(), r.threads, r.time.samples * r.calls_per_sample, r.time.median, kUnit, "us");
  j["bytes_per_second"] = num(static_cast<double>(r.bytes) / r.time.median);
  j["op"] = r.op;
  j["case"] = r.line;
  j["backend"] = r.backend;
  j["status"] = r.status;
  j["verify"] = r.verify;
  j["calls_per_sample"] = r.calls_per_sample;
  j["sets"] = r.sets;
  j["bytes"] = r.bytes;
  j["flops"] = num(r.flops);
  j["gb_per_s"] = num(r.gb_per_s);
  j["gflop_per_s"] = num(r.gflop_per_s);
  j["aggregates"] = aggregates_json(r.time, kUnit);
  return j;
}

OpRow op_row_from(const json& j, const std::string& what) {
  OpRow r;
  r.op = get_str(j, "op");
  r.line = get_str(j, "case");
  r.backend = get_str(j, "backend");
  NL_USAGE(!r.op.empty() && !r.line.empty() && !r.backend.empty(), "{}: benchmark '{}' has no op, case or backend",
           what, get_str(j, "name"));
  r.threads = static_cast<int>(get_int(j, "threads", 1));
  r.status = get_str(j, "status", "ok");
  r.verify = get_str(j, "verify");
  r.calls_per_sample = get_int(j, "calls_per_sample", 1);
  r.sets = get_int(j, "sets", 1);
  r.bytes = get_int(j, "bytes");
  r.flops = get_num(j, "flops");
  r.gb_per_s = get_num(j, "gb_per_s");
  r.gflop_per_s = get_num(j, "gflop_per_s");
  if (j.contains("aggregates")) r.time = aggregates_from(j["aggregates"], unit_seconds(get_str(j, "time_unit", "us")));
  return r;
}

}  // namespace

std::string ops_report_json(const OpsReport& r) {
  ordered_json j;
  j["context"] = context_json(r.context, "ops", r.warnings);
  ordered_json b = ordered_json::array();
  for (const OpRow& row : r.rows) b.push_back(op_row_json(row));
  j["benchmarks"] = b;
  return j.dump(2);
}

OpsReport ops_report_from_json(const std::string& text, const std::string& what) {
  json j = parse_document(text, what);
  NL_USAGE(get_str(j["context"], "normlab_bench") == "ops", "{}: not a `bench ops` document (context.normlab_bench is '{}')",
           what, get_str(j["context"], "normlab_bench"));
  OpsReport r;
  r.context = context_from(j["context"]);
  if (j["context"].contains("warnings") && j["context"]["warnings"].is_array())
    for (const json& w : j["context"]["warnings"])
      if (w.is_string()) r.warnings.push_back(w.get<std::string>());
  for (const json& e : j["benchmarks"]) r.rows.push_back(op_row_from(e, what));
  return r;
}

// ---- several runs ----------------------------------------------------------------------------

namespace {

double median_of(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  return median(std::move(v));
}

std::pair<double, double> range_of(const std::vector<double>& v) {
  double lo = NAN, hi = NAN;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    lo = std::isnan(lo) ? x : std::min(lo, x);
    hi = std::isnan(hi) ? x : std::max(hi, x);
  }
  return {lo, hi};
}

// Time statistics of one row over runs: the median of the medians, the extremes of the
// extremes, the mean of the means, the median of the standard deviations, all the samples.
Stats merge_stats(const std::vector<Stats>& s) {
  Stats m;
  std::vector<double> med, mean, sd;
  for (const Stats& x : s) {
    med.push_back(x.median);
    mean.push_back(x.mean);
    sd.push_back(x.stddev);
    m.samples += x.samples;
    if (std::isfinite(x.min)) m.min = std::isnan(m.min) ? x.min : std::min(m.min, x.min);
    if (std::isfinite(x.max)) m.max = std::isnan(m.max) ? x.max : std::max(m.max, x.max);
  }
  m.median = median_of(med);
  double total = 0;
  int count = 0;
  for (double x : mean)
    if (std::isfinite(x)) total += x, ++count;
  m.mean = count ? total / count : NAN;
  m.stddev = median_of(sd);
  return m;
}

template <class Report>
void merge_context(Report& out, const std::vector<Report>& runs) {
  out.context = runs.front().context;
  std::set<std::string> seen;
  for (size_t i = 0; i < runs.size(); ++i) {
    // The busiest run's load: the merged figures are no cleaner than their noisiest run.
    const Context& c = runs[i].context;
    if (std::isfinite(c.others_cpu) && !(c.others_cpu <= out.context.others_cpu)) out.context.others_cpu = c.others_cpu;
    if (std::isfinite(c.steal) && !(c.steal <= out.context.steal)) out.context.steal = c.steal;
    if (!c.load_avg.empty() && !out.context.load_avg.empty() && c.load_avg[0] > out.context.load_avg[0])
      out.context.load_avg = c.load_avg;
    for (const auto& [k, v] : runs[i].context.libraries) out.context.libraries.emplace(k, v);
    for (const std::string& w : runs[i].warnings)
      if (seen.insert(w).second) out.warnings.push_back(w);
  }
  out.context.thread_round_trip_ns.clear();
  for (const Report& r : runs)
    for (double ns : r.context.thread_round_trip_ns) out.context.thread_round_trip_ns.push_back(ns);
  // The FMA peak at each thread count: the median over the runs, as every merged figure.
  for (FmaPeak& p : out.context.fma_peaks) {
    std::vector<double> v;
    for (const Report& r : runs)
      if (const FmaPeak* q = r.context.fma_peak(p.threads)) v.push_back(q->gflop_per_s);
    p.gflop_per_s = median_of(v);
    p.run_range = range_of(v);
  }
  for (const Report& r : runs) out.run_contexts.push_back(r.context);
  std::string dates;
  for (const Report& r : runs) dates += (dates.empty() ? "" : ", ") + r.context.date;
  out.warnings.push_back(fmt::format("{} runs merged (dates {}): each figure is the median over the runs, its range "
                                     "over the runs in brackets",
                                     runs.size(), dates));
}

// The figures each run derives from its own rows timed side by side (derive), by name.
template <class Row>
using Figures = std::vector<std::pair<const char*, double Row::*>>;

const Figures<NormRow> kNormFigures = {
    {"gb_per_s", &NormRow::gb_per_s},         {"copy_loop_gb_per_s", &NormRow::copy_loop_gb_per_s},
    {"memcpy_gb_per_s", &NormRow::memcpy_gb_per_s}, {"pct_of_copy_loop", &NormRow::pct_of_copy_loop},
    {"pct_of_memcpy", &NormRow::pct_of_memcpy}, {"pct_of_copy", &NormRow::pct_of_copy},
    {"own_copy_gb_per_s", &NormRow::own_copy_gb_per_s}, {"pct_of_own_copy", &NormRow::pct_of_own_copy},
    {"rms_over_ln", &NormRow::rms_over_ln},   {"vs_onednn", &NormRow::vs_onednn},
    {"backend_vs_onednn", &NormRow::backend_vs_onednn}, {"vs_torch", &NormRow::vs_torch},
    {"vs_unfused", &NormRow::vs_unfused}};

// A step row's figures, then each of step_parts()' seconds under the part's name.
Figures<StepRow> step_figures() {
  Figures<StepRow> f = {
      {"norm_share", &StepRow::norm_share},     {"tokens_per_s", &StepRow::tokens_per_s},
      {"gflop_per_s", &StepRow::gflop_per_s},   {"fma_peak_gflop_per_s", &StepRow::fma_peak_gflop_per_s},
      {"pct_of_fma_peak", &StepRow::pct_of_fma_peak}, {"step_speedup", &StepRow::step_speedup},
      {"op_speedup", &StepRow::op_speedup},     {"predicted_step_speedup", &StepRow::predicted_step_speedup},
      {"precision_speedup", &StepRow::precision_speedup},
      {"clocked_step", &StepRow::clocked_step}, {"outside_kernels_s", &StepRow::outside_kernels_s},
      {"outside_products_share", &StepRow::outside_products_share},
      {"products_gflop_per_s", &StepRow::products_gflop_per_s},
      {"products_pct_of_fma_peak", &StepRow::products_pct_of_fma_peak}};
  for (const StepPart& part : step_parts()) f.emplace_back(part.name, part.seconds);
  return f;
}

// One figure over the runs of a row: the median of the runs' values into the merged row, their
// range into its run_range (where some run has a finite value).
void merge_figure(const std::vector<double>& v, double& median_out, std::pair<double, double>& range_out,
                  std::map<std::string, std::pair<double, double>>& run_range, const char* name) {
  median_out = median_of(v);
  range_out = range_of(v);
  if (std::isfinite(range_out.first)) run_range[name] = range_out;
}

// A row's runs (one group, the same name in each run) as one: each derived figure the median of
// the runs' own, each of `times` (the row's Stats members) merged by merge_stats over the runs
// that timed it, with the range of its median under its name.
template <class Row>
Row merge_row(const std::vector<const Row*>& g, const Figures<Row>& figures,
              const std::vector<std::pair<const char*, Stats Row::*>>& times) {
  Row m = *g.front();
  m.runs = static_cast<int>(g.size());
  m.run_range.clear();
  std::pair<double, double> range;
  for (const auto& [name, field] : figures) {
    std::vector<double> v;
    for (const Row* r : g) v.push_back(r->*field);
    merge_figure(v, m.*field, range, m.run_range, name);
  }
  for (const auto& [name, field] : times) {
    std::vector<Stats> s;
    std::vector<double> med;
    for (const Row* r : g)
      if (std::isfinite((r->*field).median)) s.push_back(r->*field), med.push_back((r->*field).median);
    m.*field = s.empty() ? Stats{} : merge_stats(s);
    double unused;
    merge_figure(med, unused, range, m.run_range, name);
  }
  return m;
}

// Several runs of one kind of bench as one: each run's figures derived, their rows grouped by
// name (in the order first met), each group merged by merge_group. Not derived again: a merged
// figure is the median of the runs' own, never one of the merged times.
template <class Report, class MergeGroup>
Report merge_reports(const std::vector<Report>& runs_in, MergeGroup merge_group) {
  NL_USAGE(!runs_in.empty(), "merge: no runs given");
  std::vector<Report> runs = runs_in;
  for (Report& r : runs) derive(r);
  Report out;
  merge_context(out, runs);
  using Row = typename decltype(Report::rows)::value_type;
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Row*>> groups;
  for (const Report& r : runs)
    for (const Row& row : r.rows) {
      auto& g = groups[row.name()];
      if (g.empty()) order.push_back(row.name());
      g.push_back(&row);
    }
  for (const std::string& name : order) out.rows.push_back(merge_group(groups[name]));
  return out;
}

}  // namespace

NormReport merge_runs(const std::vector<NormReport>& runs) {
  return merge_reports(runs, [](const std::vector<const NormRow*>& g) {
    NormRow m = merge_row(g, kNormFigures, {{"median", &NormRow::time}});
    int memcpy_runs = 0, own_runs = 0, ok_runs = 0;
    for (const NormRow* r : g) {
      if (!r->verify.pass && m.verify.pass) m.verify = r->verify;
      m.verify.max_abs_err = std::max(m.verify.max_abs_err, r->verify.max_abs_err);
      if (r->status != "ok") continue;
      ++ok_runs;
      memcpy_runs += r->pct_against == "memcpy";
      own_runs += r->pct_against == "own-copy";
    }
    m.status = ok_runs == static_cast<int>(g.size()) ? "ok" : "rejected";
    // The copy most runs held the row to (runs of a streaming kernel can differ: derive).
    if (ok_runs > 0)
      m.pct_against = 2 * own_runs >= ok_runs ? "own-copy" : 2 * memcpy_runs >= ok_runs ? "memcpy" : "copy-loop";
    m.measurement_error = m.pct_of_own_copy > kOwnCopyLimitPct;
    return m;
  });
}

namespace {

// Each kernel's calls and seconds per step: the median over the runs (0 in a run without it), as
// the parts are.
std::vector<StepRow::Kernel> merged_kernels(const std::vector<const StepRow*>& g) {
  std::vector<StepRow::Kernel> out;
  for (const StepRow* r : g)
    for (const StepRow::Kernel& k : r->kernels)
      if (std::none_of(out.begin(), out.end(), [&](const StepRow::Kernel& o) { return o.name == k.name; }))
        out.push_back({k.name, k.part, 0, 0});
  for (StepRow::Kernel& k : out) {
    std::vector<double> calls, seconds;
    for (const StepRow* r : g) {
      const auto it = std::find_if(r->kernels.begin(), r->kernels.end(),
                                   [&](const StepRow::Kernel& x) { return x.name == k.name; });
      calls.push_back(it == r->kernels.end() ? 0 : it->calls);
      seconds.push_back(it == r->kernels.end() ? 0 : it->seconds);
    }
    k.calls = median_of(calls);
    k.seconds = median_of(seconds);
  }
  std::sort(out.begin(), out.end(), [](const StepRow::Kernel& a, const StepRow::Kernel& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace

StepReport merge_runs(const std::vector<StepReport>& runs) {
  return merge_reports(runs, [](const std::vector<const StepRow*>& g) {
    static const Figures<StepRow> figures = step_figures();
    StepRow m = merge_row(g, figures, {{"step", &StepRow::step}, {"norm_kernels", &StepRow::norm_kernels}});
    m.kernels = merged_kernels(g);
    return m;
  });
}

// ---- comparisons -----------------------------------------------------------------------------

std::vector<NamedStats> timed_entries(const NormReport& r) {
  std::vector<NamedStats> out;
  for (const NormRow& row : r.rows)
    if (row.status == "ok") out.push_back({row.name(), row.time});
  return out;
}

std::vector<NamedStats> timed_entries(const StepReport& r) {
  std::vector<NamedStats> out;
  for (const StepRow& row : r.rows) {
    out.push_back({row.name(), row.step});
    out.push_back({row.name() + "/norm_kernels", row.norm_kernels});
  }
  return out;
}

std::vector<NamedStats> timed_entries_from_json(const std::string& text, const std::string& what) {
  const std::string kind = bench_kind_of_json(text, what);
  if (kind == "ops") return timed_entries(ops_report_from_json(text, what));
  return kind == "norms" ? timed_entries(norm_report_from_json(text, what))
                         : timed_entries(step_report_from_json(text, what));
}

std::vector<CompareRow> compare(const std::vector<NamedStats>& base, const std::vector<NamedStats>& now) {
  // Below 5% a change is not told apart from the run-to-run spread of medians measured on
  // this kind of machine (docs/bench.md); noisier rows need more (twice their combined cv).
  constexpr double kRunToRun = 0.05;
  std::map<std::string, const NamedStats*> by_name;
  for (const NamedStats& b : base) by_name[b.name] = &b;
  std::set<std::string> matched;
  std::vector<CompareRow> out;
  for (const NamedStats& n : now) {
    CompareRow c;
    c.name = n.name;
    c.now = n.time;
    auto it = by_name.find(n.name);
    if (it == by_name.end()) {
      c.verdict = "only now";
      out.push_back(c);
      continue;
    }
    matched.insert(n.name);
    c.base = it->second->time;
    c.ratio = c.now.median / c.base.median;
    const double cvb = std::isfinite(c.base.cv()) ? c.base.cv() : 0, cvn = std::isfinite(c.now.cv()) ? c.now.cv() : 0;
    c.noise = std::max(kRunToRun, 2 * std::sqrt(cvb * cvb + cvn * cvn));
    c.verdict = !std::isfinite(c.ratio) ? "not timed" : c.ratio < 1 - c.noise ? "faster" : c.ratio > 1 + c.noise ? "slower" : "same";
    out.push_back(c);
  }
  for (const NamedStats& b : base) {
    if (matched.count(b.name)) continue;
    CompareRow c;
    c.name = b.name;
    c.base = b.time;
    c.verdict = "only in base";
    out.push_back(c);
  }
  return out;
}

std::string compare_json(const std::vector<CompareRow>& rows) {
  ordered_json j = ordered_json::array();
  for (const CompareRow& c : rows)
    j.push_back({{"name", c.name},
                 {"base_median_s", num(c.base.median)},
                 {"now_median_s", num(c.now.median)},
                 {"ratio", num(c.ratio)},
                 {"noise", num(c.noise)},
                 {"verdict", c.verdict}});
  ordered_json doc;
  doc["comparison"] = j;
  return doc.dump(2);
}

}  // namespace normlab::bench
