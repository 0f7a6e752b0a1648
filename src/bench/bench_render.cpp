// `bench`: the exporters. They serialize the result structs (bench.h) and compute nothing but
// formatting: aligned text tables, markdown, CSV; JSON is bench_json.cpp's.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/parse.h"
#include "normlab/table.h"

namespace normlab::bench {

namespace {

bool finite(double x) { return std::isfinite(x); }

// The bench tables' columns: text on the left, figures on the right.
TableColumn left(const char* header) { return {header, Align::left}; }
TableColumn right(const char* header) { return {header, Align::right}; }

std::string fmt_time(double s) {
  if (!finite(s)) return "-";
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1.0) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}
std::string fmt_pct(double p) { return finite(p) ? fmt::format("{:.0f}%", p) : "-"; }
std::string fmt_ratio(double x) { return finite(x) ? fmt::format("{:.2f}x", x) : "-"; }
std::string fmt_gbps(double x) { return finite(x) ? fmt::format("{:.1f}", x) : "-"; }
std::string fmt_mib(int64_t b) {
  const double m = static_cast<double>(b) / (1 << 20);
  return m < 10 ? fmt::format("{:.2f}", m) : fmt::format("{:.0f}", m);  // a resident set is a fraction of 1 MiB
}

// "1.32x [1.29-1.35]" when several runs were merged, else "1.32x".
std::string with_range(const std::string& value, const std::map<std::string, std::pair<double, double>>& rr,
                       const std::string& key, const char* spec) {
  auto it = rr.find(key);
  if (value == "-" || it == rr.end() || !finite(it->second.first)) return value;
  return value + fmt::format(" [{}-{}]", fmt::format(fmt::runtime(spec), it->second.first),
                             fmt::format(fmt::runtime(spec), it->second.second));
}

// The run-to-run spread of the medians: (max - min) / median over the merged runs.
std::string run_spread(const std::map<std::string, std::pair<double, double>>& rr, const std::string& key,
                       double median) {
  auto it = rr.find(key);
  if (it == rr.end() || !finite(median) || median <= 0) return "-";
  return fmt::format("{:.1f}%", 100 * (it->second.second - it->second.first) / median);
}

std::string csv_num(double x) { return finite(x) ? fmt::format("{:.6g}", x) : ""; }

// A CSV table: its columns named by "a,b,c", the rows' cells written as fmt writes them.
Table csv_table(const std::string& header) {
  Table t;
  for (const std::string& h : split_at(header, ',')) t.columns.push_back({h});
  return t;
}
template <class... T>
std::vector<std::string> cells(const T&... v) {
  return {fmt::format("{}", v)...};
}

// The context's thread round trips, "62 / 64 ..." (ns), or "" when none was measured.
std::string round_trips_ns(const Context& c) {
  std::string v;
  for (double ns : c.thread_round_trip_ns) v += fmt::format("{}{:.0f}", v.empty() ? "" : " / ", ns);
  return v;
}

std::string context_line(const Context& c) {
  std::string llc = c.llc_bytes ? fmt::format(", last-level cache {} MiB", c.llc_bytes >> 20) : "";
  std::string libs;
  for (const auto& [k, v] : c.libraries) libs += fmt::format(", {} {}", k, v);
  std::string load = c.load_avg.empty() ? "" : fmt::format(", load average {:.2f} at the start", c.load_avg[0]);
  if (finite(c.others_cpu))
    load += fmt::format(", other processes {:.0f}% of the CPU time during the run", 100 * c.others_cpu);
  const std::string streaming = c.streaming_stores.empty() ? "" : "; streaming stores " + c.streaming_stores;
  std::string trips = round_trips_ns(c);
  if (!trips.empty()) trips = "; threads 0-1 cache-line round trip " + trips + " ns (start / end)";
  const std::string device = c.device.empty() ? "" : "; device " + c.device;
  const std::string which = c.cpu_family.empty() ? "" : fmt::format(" family {} model {}", c.cpu_family, c.cpu_model_number);
  const std::string isa = c.cpu_isa.empty() ? "" : ", " + c.cpu_isa;
  return fmt::format("{} on {}{} ({} CPUs{}{}); normlab {} ({}, {} {}){}; threads pinned: {}, OpenMP wait policy: {}{}{}{}{}",
                     c.date, c.cpu_model, which, c.num_cpus, isa, llc, c.normlab_version, c.git_commit, c.compiler, c.build_type,
                     libs, c.threads_pinned ? "yes" : "no", c.omp_wait_policy.empty() ? "?" : c.omp_wait_policy,
                     load, streaming, trips, device);
}

// ---- bench norms -------------------------------------------------------------------------

int pass_rank(const std::string& p) { return p == "copy" ? 0 : p == "fwd" ? 1 : p == "bwd" ? 2 : 3; }
int norm_rank(const std::string& n) { return n == "copy" ? 0 : n == "layernorm" ? 1 : 2; }

// Display order: shapes (memory-bound and resident apart) and thread counts as first met, then
// copy, forward, backward, add+norm forward; in each, copy rows, LayerNorm rows, RMSNorm rows,
// implementations as first met (torch after the rest).
std::vector<const NormRow*> display_order(const NormReport& r) {
  std::map<std::string, size_t> shape_at, impl_at, device_at, dtype_at;
  auto shape_key = [](const NormRow& x) { return x.shape.str() + (x.resident ? "/resident" : ""); };
  for (const NormRow& row : r.rows) {
    shape_at.emplace(shape_key(row), shape_at.size());
    impl_at.emplace(row.impl, row.impl == "torch" ? 1000 : impl_at.size());
    device_at.emplace(row.device, device_at.size());
    dtype_at.emplace(row.dtype, dtype_at.size());
  }
  std::vector<const NormRow*> v;
  for (const NormRow& row : r.rows) v.push_back(&row);
  std::stable_sort(v.begin(), v.end(), [&](const NormRow* a, const NormRow* b) {
    auto key = [&](const NormRow* x) {
      return std::make_tuple(shape_at[shape_key(*x)], device_at[x->device], x->threads, dtype_at[x->dtype],
                             pass_rank(x->pass), norm_rank(x->norm), impl_at[x->impl]);
    };
    return key(a) < key(b);
  });
  return v;
}

bool any_merged(const NormReport& r) {
  for (const NormRow& row : r.rows)
    if (row.runs > 1) return true;
  return false;
}
bool any_resident(const NormReport& r) {
  for (const NormRow& row : r.rows)
    if (row.resident) return true;
  return false;
}
bool any_device(const NormReport& r) {
  for (const NormRow& row : r.rows)
    if (row.device != "cpu") return true;
  return false;
}
bool any_cpu(const NormReport& r) {
  for (const NormRow& row : r.rows)
    if (row.device == "cpu") return true;
  return false;
}
bool any_narrow(const NormReport& r) {
  for (const NormRow& row : r.rows)
    if (row.dtype != "f32") return true;
  return false;
}

// Where a row ran: its thread count on the cpu, else the device ("cuda").
// "pipelined-pf2 (measured)", "tiled-2048 (cached; backend: onednn)", or "" for rows without one.
std::string variant_cell(const NormRow& x) {
  if (x.variant.empty()) return "";
  std::string why = x.variant_source;
  const size_t cut = why.find(" (");
  if (cut != std::string::npos) why = why.substr(0, cut);  // "forced (NORMLAB_...)" -> "forced"
  return fmt::format("{} ({}{})", x.variant, why, x.backend_variant.empty() ? "" : "; backend: " + x.backend_variant);
}

std::string where(const NormRow& x) { return x.device == "cpu" ? std::to_string(x.threads) : x.device; }

Table norm_table(const NormReport& r) {
  const bool merged = any_merged(r);
  Table t;
  t.columns = {left("implementation"), left("pass"), left("shape"), right("thr"), right("params"), right("median"),
               right("min"), right("max"), right("cv"), right("GB/s"), right("%copy"), right("RMS/LN"),
               right("vs oneDNN"), right("vs unfused"), right("vs torch"), right("ws MiB")};
  if (any_device(r)) t.columns[3].header = any_cpu(r) ? "thr/dev" : "device";
  if (merged) t.columns.insert(t.columns.begin() + 6, right("runs"));
  const bool narrow = any_narrow(r);
  if (narrow) t.columns.insert(t.columns.begin() + 3, left("dtype"));
  const bool variants = std::any_of(r.rows.begin(), r.rows.end(), [](const NormRow& x) { return !x.variant.empty(); });
  if (variants) t.columns.push_back(left("variant"));
  std::string last_group;
  for (const NormRow* p : display_order(r)) {
    const NormRow& x = *p;
    if (is_own_copy(x)) continue;  // each its row's %copy (JSON and CSV have them)
    const std::string group = fmt::format("{}/{}/{}", x.shape.str(), where(x), x.dtype);
    if (!last_group.empty() && group != last_group) t.add_line("");
    last_group = group;
    const auto& rr = x.run_range;
    std::string pct = fmt_pct(x.norm == "copy" ? x.pct_of_copy_loop : x.pct_of_copy);
    if (pct != "-" && x.pct_against == "memcpy" && x.norm != "copy") pct += " of memcpy";
    if (x.measurement_error) pct = "error";
    std::vector<std::string> row = {
        x.norm + "." + x.impl,
        x.pass,
        x.shape.str(),
        where(x),
        x.parameters ? std::to_string(x.parameters) : "-",
        x.status == "ok" ? fmt_time(x.time.median) : "REJECTED",
        x.status == "ok" ? fmt_time(x.time.min) : "",
        x.status == "ok" ? fmt_time(x.time.max) : "",
        x.status == "ok" && finite(x.time.cv()) ? fmt::format("{:.1f}%", 100 * x.time.cv()) : "",
        with_range(fmt_gbps(x.gb_per_s), rr, "gb_per_s", "{:.1f}"),
        x.norm == "copy" ? pct : with_range(pct, rr, "pct_of_copy", "{:.0f}"),
        with_range(fmt_ratio(x.rms_over_ln), rr, "rms_over_ln", "{:.2f}"),
        with_range(fmt_ratio(x.vs_onednn), rr, "vs_onednn", "{:.2f}"),
        with_range(fmt_ratio(x.vs_unfused), rr, "vs_unfused", "{:.2f}"),
        with_range(fmt_ratio(x.vs_torch), rr, "vs_torch", "{:.2f}"),
        // A resident row is in the caches by design: the '*' warns of memory-bound rows that may be.
        fmt_mib(x.working_set_bytes) + (x.cache_resident && !x.resident ? "*" : "")};
    if (merged) row.insert(row.begin() + 6, fmt::format("{} {}", x.runs, run_spread(rr, "median", x.time.median)));
    if (narrow) row.insert(row.begin() + 3, x.dtype);
    if (variants) row.push_back(variant_cell(x));
    t.add_row(row);
  }
  return t;
}

std::string norm_legend(bool merged, bool resident, bool device) {
  std::string s =
      "median/min/max: seconds per call over the timed samples (memory-bound: one call = one sample, each on the "
      "next buffer set; resident: one sample = a batch of calls on the same buffers, divided by their number); "
      "cv: stddev/mean. GB/s: the N x D arrays moved per call (fwd: x read + y written; bwd: x, dy read + dx "
      "written; addfwd, the fused residual add + norm forward of Post-LN/DeepNorm: a, b read + s = alpha*a + b and "
      "y = norm(s) written; parameters and statistics not counted) / median. %copy: of the row's own copy, timed "
      "beside it in the same run: the same arrays read and written on the row's own buffers (the same footprint and "
      "rotation) with the kernel's kind of stores (streaming where its variant streams): the most a kernel moving "
      "those bytes can reach, so a row above 105% of it is a measurement error ('error', listed below the table), "
      "not a result. Rows without one (a device's) are held to the copy loop, a streaming kernel to memcpy ('of "
      "memcpy'); the copy rows show the copy loop's and memcpy's own speed as % of the copy loop. RMS/LN: "
      "LayerNorm's median / RMSNorm's, same implementation (>1: RMSNorm faster). vs oneDNN, vs torch: the other's "
      "median / this median (>1: this faster). vs unfused (addfwd): the add+norm as two kernels (an add, then the "
      "fused norm) / this median. ws: MiB the case cycles through; * = below max(1 GiB, 4 x LLC) on a memory-bound "
      "row: may be cache speed.";
  if (resident)
    s += " Resident rows (the training step's shapes): one buffer set reused by every call, so x and y stay in "
         "L1/L2 as inside the step; their %copy is of their own copy on the same reused buffers, i.e. of the cache's "
         "copy speed, not of memory's.";
  if (device)
    s += " Device rows (dev cuda, cuda-sim): the device backend's kernels through the Backend interface on their op "
         "cases (checked by the test suite's check_case first), each call on the next of the case's device buffer "
         "sets, a sample a batch of calls (~2 ms) timed to the completion of the last; copy.loop is the backend's "
         "elementwise scale kernel (one read, one write per element, as a copy), copy.memcpy its copy (cudaMemcpy, "
         "device to device); bf16 and fp16 rows (dtype) store the N x D arrays and gamma/beta in the format (2 bytes "
         "per element in GB/s) with float32 statistics.";
  if (merged)
    s += " runs: runs merged and the spread of their medians ((max-min)/median); [a-b]: the figure's range over the "
         "runs.";
  s += " variant: the fused kernel's variant for the row's shape class and why (measured now, cached from an "
       "earlier measurement on this CPU and build, forced by NORMLAB_NORM_VARIANT, or the fixed rule under "
       "NORMLAB_TUNE=off); backend: what training runs where it differs (oneDNN measured faster). Every candidate's "
       "time: bench norms -v.";
  return s;
}

// The other norms' columns of the summary (DyT, Derf, ...: each one's GB/s and its speed against
// RMSNorm), added to t only where they ran, so that the LayerNorm/RMSNorm table reads as before;
// returns (norm, its label) of each.
std::vector<std::pair<std::string, std::string>> other_norm_columns(const NormReport& r, Table& t) {
  std::vector<std::pair<std::string, std::string>> others;
  for (const EnumName& n : enum_names<NormKind>().names) {
    const std::string norm = n.name;
    if (norm == "layernorm" || norm == "rmsnorm") continue;
    if (std::any_of(r.rows.begin(), r.rows.end(), [&](const NormRow& x) { return x.norm == norm; })) {
      // The name its help phrase starts with: "DyT (Zhu et al. 2025): ..." is DyT.
      const std::string help = n.help;
      const std::string label = help.substr(0, help.find_first_of(" :"));
      others.emplace_back(norm, label);
      t.columns.push_back(right((label + " fused GB/s").c_str()));
      t.columns.push_back(right((label + " speed vs RMS").c_str()));
    }
  }
  return others;
}

Table summary_table(const NormReport& r) {
  // One line per (shape, threads, pass) with the headline figures.
  std::map<std::string, const NormRow*> at;
  auto key = [](const std::string& ni, const std::string& pass, const NormRow& x, const std::string& dtype) {
    return fmt::format("{}/{}/{}/{}/{}", ni, pass, x.shape.str(), where(x), dtype);
  };
  // A copy row serves the norms of every dtype (GB/s either way).
  for (const NormRow& x : r.rows)
    at.emplace(key(x.norm + "." + x.impl, x.pass, x, x.norm == "copy" ? "" : x.dtype), &x);
  auto get = [&](const std::string& ni, const std::string& pass, const NormRow& like) -> const NormRow* {
    auto it = at.find(key(ni, pass, like, pass == "copy" ? "" : like.dtype));
    return it == at.end() || it->second->status != "ok" ? nullptr : it->second;
  };
  Table t;
  t.columns = {left("shape"),         right("thr"),          left("pass"),
               right("copy GB/s"),    right("memcpy GB/s"),  right("LN fused GB/s"),
               right("LN %copy"),     right("RMS fused GB/s"), right("RMS %copy"),
               right("RMS/LN fused"), right("RMS/LN torch"), right("LN fused vs oneDNN"),
               right("LN fused vs torch"), right("RMS fused vs torch"), right("LN vs unfused"),
               right("RMS vs unfused")};
  if (any_device(r)) t.columns[1].header = any_cpu(r) ? "thr/dev" : "device";
  const std::vector<std::pair<std::string, std::string>> others = other_norm_columns(r, t);
  const bool narrow = any_narrow(r);
  if (narrow) t.columns.insert(t.columns.begin() + 2, left("dtype"));
  std::set<std::string> done;
  for (const NormRow* p : display_order(r)) {
    const NormRow& x = *p;
    if (x.pass == "copy") continue;
    if (!done.insert(fmt::format("{}/{}/{}/{}", x.shape.str(), where(x), x.dtype, x.pass)).second) continue;
    const NormRow* cl = get("copy.loop", "copy", x);
    const NormRow* cm = get("copy.memcpy", "copy", x);
    const NormRow* lf = get("layernorm.fused", x.pass, x);
    const NormRow* rf = get("rmsnorm.fused", x.pass, x);
    const NormRow* rt = get("rmsnorm.torch", x.pass, x);
    auto fig = [&](const NormRow* row, double v, const char* key2, const char* spec, std::string (*f)(double)) {
      if (!row) return std::string("-");
      return with_range(f(v), row->run_range, key2, spec);
    };
    // A row above its own copy has no % to show (the verdicts name it).
    auto pct = [&](const NormRow* row) {
      return row && row->measurement_error ? std::string("error")
                                           : fig(row, row ? row->pct_of_copy : NAN, "pct_of_copy", "{:.0f}", fmt_pct);
    };
    std::vector<std::string> row = {
        x.shape.str(),
        where(x),
        x.pass,
        fig(cl, cl ? cl->gb_per_s : NAN, "gb_per_s", "{:.1f}", fmt_gbps),
        fig(cm, cm ? cm->gb_per_s : NAN, "gb_per_s", "{:.1f}", fmt_gbps),
        fig(lf, lf ? lf->gb_per_s : NAN, "gb_per_s", "{:.1f}", fmt_gbps),
        pct(lf),
        fig(rf, rf ? rf->gb_per_s : NAN, "gb_per_s", "{:.1f}", fmt_gbps),
        pct(rf),
        fig(rf, rf ? rf->rms_over_ln : NAN, "rms_over_ln", "{:.2f}", fmt_ratio),
        fig(rt, rt ? rt->rms_over_ln : NAN, "rms_over_ln", "{:.2f}", fmt_ratio),
        fig(lf, lf ? lf->vs_onednn : NAN, "vs_onednn", "{:.2f}", fmt_ratio),
        fig(lf, lf ? lf->vs_torch : NAN, "vs_torch", "{:.2f}", fmt_ratio),
        fig(rf, rf ? rf->vs_torch : NAN, "vs_torch", "{:.2f}", fmt_ratio),
        fig(lf, lf ? lf->vs_unfused : NAN, "vs_unfused", "{:.2f}", fmt_ratio),
        fig(rf, rf ? rf->vs_unfused : NAN, "vs_unfused", "{:.2f}", fmt_ratio)};
    for (const auto& [norm, label] : others) {
      // Time ratio: RMSNorm's median over the other's (above 1: it is faster), one run, side by side.
      const NormRow* of = get(norm + ".fused", x.pass, x);
      row.push_back(fig(of, of ? of->gb_per_s : NAN, "gb_per_s", "{:.1f}", fmt_gbps));
      row.push_back(of && rf ? fmt_ratio(rf->time.median / of->time.median) : std::string("-"));
    }
    if (narrow) row.insert(row.begin() + 2, x.dtype);
    t.add_row(row);
  }
  return t;
}

std::string norm_csv(const NormReport& r) {
  Table t = csv_table(
      "name,norm,impl,provider,pass,batch,seq,d,threads,status,samples,median_s,min_s,max_s,mean_s,stddev_s,cv,"
      "spread,data_bytes,param_bytes,stat_bytes,working_set_bytes,cache_resident,parameters,gb_per_s,"
      "copy_loop_gb_per_s,memcpy_gb_per_s,pct_of_copy_loop,pct_of_memcpy,pct_against,rms_over_ln,vs_onednn,"
      "vs_torch,verify_max_abs_err,runs,resident,calls_per_sample,vs_unfused,device,dtype,own_copy_gb_per_s,"
      "pct_of_own_copy,measurement_error");
  for (const NormRow* p : display_order(r)) {
    const NormRow& x = *p;
    t.add_row(cells(x.name(), x.norm, x.impl, x.provider, x.pass, x.shape.batch, x.shape.seq,
                     x.shape.d, x.threads, x.status, x.time.samples, csv_num(x.time.median), csv_num(x.time.min),
                     csv_num(x.time.max), csv_num(x.time.mean), csv_num(x.time.stddev), csv_num(x.time.cv()),
                     csv_num(x.time.spread()), x.bytes.data, x.bytes.params, x.bytes.stats, x.working_set_bytes,
                     x.cache_resident ? 1 : 0, x.parameters, csv_num(x.gb_per_s), csv_num(x.copy_loop_gb_per_s),
                     csv_num(x.memcpy_gb_per_s), csv_num(x.pct_of_copy_loop), csv_num(x.pct_of_memcpy),
                     x.pct_against, csv_num(x.rms_over_ln), csv_num(x.vs_onednn), csv_num(x.vs_torch),
                     csv_num(x.verify.max_abs_err), x.runs, x.resident ? 1 : 0, x.calls_per_sample,
                     csv_num(x.vs_unfused), x.device, x.dtype, csv_num(x.own_copy_gb_per_s),
                     csv_num(x.pct_of_own_copy), x.measurement_error ? 1 : 0));
  }
  return t.csv();
}

// ---- bench step ----------------------------------------------------------------------------

// Whether any row of the report ran in a precision other than fp32: its tables then name each
// row's precision, and the step table its speed-up over the fp32 row.
bool mixed_precisions(const StepReport& r) {
  for (const StepRow& row : r.rows)
    if (row.precision != Precision::fp32) return true;
  return false;
}

Table step_table(const StepReport& r) {
  bool merged = false;
  for (const StepRow& row : r.rows) merged = merged || row.runs > 1;
  const bool mixed = mixed_precisions(r);
  Table t;
  t.columns = {left("model"),        left("norm"),         right("thr"),          right("params"),
               right("norm params"),  right("norm calls"),  right("step median"),  right("min"),
               right("max"),          right("cv"),          right("tokens/s"),     right("GFLOP/s"),
               right("%FMA peak"),    right("norm kernels"), right("norm share"),  right("RMS/LN step"),
               right("RMS/LN norms"), right("predicted")};
  if (merged) t.columns.insert(t.columns.begin() + 7, right("runs"));
  if (mixed) {
    t.columns.insert(t.columns.begin() + 2, left("precision"));
    t.columns.push_back(right("vs fp32"));
  }
  std::string last;
  for (const StepRow& x : r.rows) {
    const std::string group = fmt::format("{}/{}", x.model, x.threads);
    if (!last.empty() && group != last) t.add_line("");
    last = group;
    const auto& rr = x.run_range;
    std::vector<std::string> row = {
        x.model,
        x.norm,
        std::to_string(x.threads),
        std::to_string(x.parameters),
        std::to_string(x.norm_parameters),
        fmt::format("{} x {}x{}", x.norm_calls, x.norm_rows, x.d_model),
        fmt_time(x.step.median),
        fmt_time(x.step.min),
        fmt_time(x.step.max),
        finite(x.step.cv()) ? fmt::format("{:.1f}%", 100 * x.step.cv()) : "-",
        finite(x.tokens_per_s) ? fmt::format("{:.0f}", x.tokens_per_s) : "-",
        with_range(finite(x.gflop_per_s) ? fmt::format("{:.1f}", x.gflop_per_s) : "-", rr, "gflop_per_s", "{:.1f}"),
        with_range(finite(x.pct_of_fma_peak) ? fmt::format("{:.1f}%", x.pct_of_fma_peak) : "-", rr, "pct_of_fma_peak",
                   "{:.1f}"),
        fmt_time(x.norm_kernels.median),
        with_range(finite(x.norm_share) ? fmt::format("{:.1f}%", 100 * x.norm_share) : "-", {}, "", ""),
        with_range(fmt_ratio(x.step_speedup), rr, "step_speedup", "{:.3f}"),
        with_range(fmt_ratio(x.op_speedup), rr, "op_speedup", "{:.2f}"),
        with_range(fmt_ratio(x.predicted_step_speedup), rr, "predicted_step_speedup", "{:.3f}")};
    if (merged) row.insert(row.begin() + 7, fmt::format("{} {}", x.runs, run_spread(rr, "step", x.step.median)));
    if (mixed) {
      row.insert(row.begin() + 2, to_string(x.precision));
      row.push_back(with_range(fmt_ratio(x.precision_speedup), rr, "precision_speedup", "{:.3f}"));
    }
    t.add_row(row);
  }
  return t;
}

// Where each row's step time goes, in the parts of step_parts().
Table step_parts_table(const StepReport& r) {
  const bool mixed = mixed_precisions(r);
  Table t;
  t.columns = {left("model"), left("norm"), right("thr"), right("clocked step")};
  if (mixed) t.columns.insert(t.columns.begin() + 2, left("precision"));
  for (const StepPart& p : step_parts()) t.columns.push_back(right(p.name));
  for (const char* c : {"in no kernel", "outside products", "products GFLOP/s", "products %FMA"})
    t.columns.push_back(right(c));
  auto pct = [](double x) { return std::isfinite(x) ? fmt::format("{:.1f}%", 100 * x) : std::string("-"); };
  std::string last;
  for (const StepRow& x : r.rows) {
    const std::string group = fmt::format("{}/{}", x.model, x.threads);
    if (!last.empty() && group != last) t.add_line("");
    last = group;
    std::vector<std::string> row = {x.model, x.norm, std::to_string(x.threads), fmt_time(x.clocked_step)};
    if (mixed) row.insert(row.begin() + 2, to_string(x.precision));
    for (const StepPart& p : step_parts()) row.push_back(pct(x.*p.seconds / x.clocked_step));
    row.push_back(pct(x.outside_kernels_s / x.clocked_step));
    row.push_back(pct(x.outside_products_share));
    row.push_back(finite(x.products_gflop_per_s) ? fmt::format("{:.1f}", x.products_gflop_per_s) : "-");
    row.push_back(finite(x.products_pct_of_fma_peak) ? fmt::format("{:.1f}%", x.products_pct_of_fma_peak) : "-");
    t.add_row(row);
  }
  return t;
}

std::string step_parts_legend() {
  return "Where the time goes: as many steps again, each kernel timed on the calling thread (its worker threads "
         "inside its time), in parts: products (oneDNN's matrix products with their fused bias, residual and "
         "GELU-derivative epilogues), norms, attention (the toy's prefix mean), elementwise (GELU, adds, copies, "
         "bias gradients), optimizer (AdamW and the gradient norm), other (embedding, loss, statistics, and the "
         "time in no kernel: the tape, allocation). Shares of the clocked step. products GFLOP/s: the linear layers' "
         "and the head's flops over the products' time alone (attention's products are its kernels' own, in "
         "attention); %FMA: of the FMA loop at the same thread count.";
}

std::string step_legend(bool mixed) {
  const std::string precision =
      mixed ? " precision: what the step's ops store in (bf16: a bf16 run's activations, products native where the CPU "
              "has bf16 dot products); vs fp32: the fp32 row's step / this row's (same model, norm and threads; every "
              "model of a thread count steps in turn); %FMA peak: fp32 rows only (the FMA loop is float32's)."
            : "";
  return "step: one training step (forward + backward + gradient norm + AdamW), the two norms' models stepping in "
         "turn. GFLOP/s: the step's matrix-product flops (forward and the two backward products of each, 2*M*N*K "
         "apiece; see docs/bench.md) / step median; %FMA peak: of the FMA loop's GFLOP/s at the same thread count "
         "(above the table). norm calls: norm forwards per step (each with its backward) x their rows x d. norm "
         "kernels: those calls' kernels, forward and backward, timed apart at the step's shapes (cache-resident, as "
         "in the step). norm share: norm kernels / step. RMS/LN step: LayerNorm's step / RMSNorm's (model level); "
         "RMS/LN norms: the same for the norm kernels (operator level); predicted: the step speed-up if only the "
         "norm time changed." +
         precision;
}

// "FMA peak (float32, avx512f, 16 floats per vector, 2 flops per lane per FMA): 1 thread 190.3 GFLOP/s, ..."
std::string fma_peak_line(const Context& c) {
  if (c.fma_peaks.empty()) return "";
  std::string s = fmt::format("FMA peak (float32, {}, {} floats per vector, 2 flops per lane per FMA, measured in this "
                              "run):",
                              c.fma_peaks.front().isa, c.fma_peaks.front().lanes);
  for (size_t i = 0; i < c.fma_peaks.size(); ++i)
    s += fmt::format("{} {} thread{} {:.1f} GFLOP/s", i ? "," : "", c.fma_peaks[i].threads,
                     c.fma_peaks[i].threads == 1 ? "" : "s", c.fma_peaks[i].gflop_per_s);
  return s + "\n";
}

// "Threads 0 and 1 exchange a cache line in 62 / 64 ns (round trip, at the start / end of the run)..."
std::string thread_round_trip_line(const Context& c) {
  const std::string v = round_trips_ns(c);
  if (v.empty()) return "";
  return fmt::format("Threads 0 and 1 exchange a cache line in {} ns (round trip, at the start / end of {}); above {:.0f} "
                     "ns their cores are far apart and multi-threaded timings are slower than usual\n",
                     v, c.thread_round_trip_ns.size() > 2 ? "each run" : "the run", kFarThreadsNs);
}

std::string step_csv(const StepReport& r) {
  Table t = csv_table(
      "name,model,norm,threads,layers,d_model,d_hidden,heads,vocab,batch,seq,parameters,norm_parameters,norm_calls,"
      "norm_rows,samples,step_median_s,step_min_s,step_max_s,step_cv,norm_kernels_median_s,norm_share,tokens_per_s,"
      "step_speedup,op_speedup,predicted_step_speedup,runs,matmul_flops,gflop_per_s,fma_peak_gflop_per_s,"
      "pct_of_fma_peak,clocked_step_s,products_s,norms_s,attention_s,elementwise_s,optimizer_s,other_s,"
      "outside_kernels_s,outside_products_share,products_gflop_per_s,products_pct_of_fma_peak,precision,"
      "precision_speedup");
  for (const StepRow& x : r.rows) {
    std::vector<std::string> parts = {csv_num(x.clocked_step)};
    for (const StepPart& p : step_parts()) parts.push_back(csv_num(x.*p.seconds));
    for (double v : {x.outside_kernels_s, x.outside_products_share, x.products_gflop_per_s, x.products_pct_of_fma_peak})
      parts.push_back(csv_num(v));
    std::vector<std::string> row = cells(x.name(),
                     x.model, x.norm, x.threads, x.layers, x.d_model, x.d_hidden, x.heads, x.vocab, x.batch, x.seq,
                     x.parameters, x.norm_parameters, x.norm_calls, x.norm_rows, x.step.samples,
                     csv_num(x.step.median), csv_num(x.step.min), csv_num(x.step.max), csv_num(x.step.cv()),
                     csv_num(x.norm_kernels.median), csv_num(x.norm_share), csv_num(x.tokens_per_s),
                     csv_num(x.step_speedup), csv_num(x.op_speedup), csv_num(x.predicted_step_speedup), x.runs,
                     fmt::format("{:.0f}", x.matmul_flops), csv_num(x.gflop_per_s), csv_num(x.fma_peak_gflop_per_s),
                     csv_num(x.pct_of_fma_peak));
    row.insert(row.end(), parts.begin(), parts.end());
    row.push_back(to_string(x.precision));
    row.push_back(csv_num(x.precision_speedup));
    t.add_row(row);
  }
  return t.csv();
}

std::string notes_markdown(const std::vector<std::string>& warnings) {
  std::string s;
  for (const std::string& w : warnings) s += "- " + w + "\n";
  return s;
}

std::string verdict_lines(const NormReport& r, bool markdown) {
  const std::vector<std::string> v = norm_verdicts(r);
  if (v.empty()) return "";
  std::string s = markdown ? "\n**Verdict:** " + v[0] + "\n" : "\nverdict: " + v[0] + "\n";
  for (size_t i = 1; i < v.size(); ++i) s += (markdown ? "- " + v[i].substr(2) : v[i]) + "\n";
  return s;
}

// ---- the two sections of bench norms: memory-bound and resident shapes -------------------------

// Renders `table_of` each section's rows, under its heading when the report has resident rows
// (a report of memory-bound rows alone reads as it always did).
template <class TableOf>
std::string sections(const NormReport& r, OutputFormat f, bool long_headings, TableOf&& table_of) {
  const bool split = any_resident(r);
  std::string out;
  for (const bool resident : {false, true}) {
    NormReport part;
    part.context = r.context;
    for (const NormRow& row : r.rows)
      if (row.resident == resident) part.rows.push_back(row);
    if (part.rows.empty()) continue;
    if (split) {
      std::string heading;
      if (!resident) {
        heading = long_headings && r.context.footprint_target > 0
                      ? fmt::format("memory-bound shapes: each case cycles through >= {} MiB of buffers, so every "
                                    "call reads its inputs from memory",
                                    r.context.footprint_target >> 20)
                      : "memory-bound shapes";
      } else {
        heading = long_headings ? "cache-resident, the training step's shapes: one buffer set reused by every call "
                                  "(L1/L2), calls timed in batches; %copy is of each row's own copy on the same buffers"
                                : "cache-resident, the training step's shapes";
      }
      out += (out.empty() ? "" : "\n") + heading + ":\n";
    }
    const Table t = table_of(part);
    out += f == OutputFormat::markdown ? (split ? "\n" : "") + t.markdown() : t.text();
  }
  return out;
}

}  // namespace

std::string render(const NormReport& r, OutputFormat f) {
  switch (f) {
    case OutputFormat::json: return norm_report_json(r) + "\n";
    case OutputFormat::csv: return norm_csv(r);
    case OutputFormat::markdown: {
      std::string s = "Measured " + context_line(r.context) + ".\n\n" + sections(r, f, true, norm_table) + "\n" +
                      norm_legend(any_merged(r), any_resident(r), any_device(r)) + "\n" +
                      verdict_lines(r, true);
      if (!r.warnings.empty()) s += "\n" + notes_markdown(r.warnings);
      return s;
    }
    case OutputFormat::text: break;
  }
  const std::string device = r.context.device.empty() ? "" : "device: " + r.context.device + "\n\n";
  return device + thread_round_trip_line(r.context) + sections(r, f, true, norm_table) + "\n" +
         norm_legend(any_merged(r), any_resident(r), any_device(r)) + "\n" + verdict_lines(r, false);
}

std::string render_norm_summary(const NormReport& r, OutputFormat f) { return sections(r, f, false, summary_table); }

std::string render_kernel_choices(const Context& c, OutputFormat f, bool every_candidate) {
  if (c.kernel_choices.empty()) return "";
  Table t;
  t.columns = {left("shape class"), left("fused rows ran"), left("backend runs"), left("why"), right("timed rows")};
  if (every_candidate) t.columns.push_back(left("candidates: median per call (vs the fastest)"));
  for (const KernelChoiceRecord& k : c.kernel_choices) {
    std::vector<std::string> row = {k.shape_class, k.fused, k.backend, k.source,
                                    k.timed_rows > 0 ? std::to_string(k.timed_rows) : "-"};
    if (every_candidate) {
      std::string all;
      const double best = k.seconds.empty() ? NAN : k.seconds.front().second;
      for (const auto& [v, sec] : k.seconds)
        all += fmt::format("{}{} {} ({:+.0f}%)", all.empty() ? "" : ", ", v, fmt_time(sec), 100 * (sec / best - 1));
      row.push_back(all.empty() ? "-" : all);
    }
    t.add_row(row);
  }
  const std::string head = fmt::format("kernel variants (NORMLAB_TUNE={}, cache {}){}:\n", c.tune_mode,
                                       c.tune_cache.empty() ? "none" : c.tune_cache,
                                       every_candidate ? "" : "; every candidate's time with -v");
  return head + (f == OutputFormat::markdown ? "\n" + t.markdown() : t.text());
}

std::string render_norm_impls(const NormRegistry& registry) {
  Table t;
  t.columns = {{"implementation", Align::left, 22}, {"provider", Align::left, 14, " "}, {"what", Align::left, 0, " "}};
  for (const NormImpl& m : registry.all()) t.add_row({m.name(), m.provider, m.description});
  t.add_row({"layernorm.torch", "PyTorch", "torch.nn.LayerNorm, with --with-torch"});
  t.add_row({"rmsnorm.torch", "PyTorch", "torch.nn.RMSNorm, with --with-torch"});
  return t.text();
}

std::string render(const StepReport& r, OutputFormat f) {
  switch (f) {
    case OutputFormat::json: return step_report_json(r) + "\n";
    case OutputFormat::csv: return step_csv(r);
    case OutputFormat::markdown: {
      std::string s = "Measured " + context_line(r.context) + ".\n\n" + fma_peak_line(r.context) +
                      (r.context.fma_peaks.empty() ? "" : "\n") + step_table(r).markdown() + "\n" + step_legend(mixed_precisions(r)) +
                      "\n\n" + step_parts_table(r).markdown() + "\n" + step_parts_legend() + "\n";
      if (!r.warnings.empty()) s += "\n" + notes_markdown(r.warnings);
      return s;
    }
    case OutputFormat::text: break;
  }
  return fma_peak_line(r.context) + thread_round_trip_line(r.context) + step_table(r).text() + "\n" + step_legend(mixed_precisions(r)) +
         "\n\n" + step_parts_table(r).text() + "\n" + step_parts_legend() + "\n";
}

namespace {

// One row per case, backend and thread count, in the order run.
Table ops_table(const OpsReport& r) {
  Table t;
  t.columns = {left("case"), left("backend"), right("thr"), right("sets"), right("median"), right("min"), right("cv"),
               right("GB/s"), right("GFLOP/s"), left("check")};
  for (const OpRow& x : r.rows)
    t.add_row({x.line, x.backend, std::to_string(x.threads), std::to_string(x.sets), fmt_time(x.time.median),
               fmt_time(x.time.min),
               finite(x.time.cv()) ? fmt::format("{:.1f}%", 100 * x.time.cv()) : "-", fmt_gbps(x.gb_per_s),
               fmt_gbps(x.gflop_per_s), x.status == "ok" ? x.verify : "REJECTED"});
  return t;
}

Table ops_csv(const OpsReport& r) {
  Table t = csv_table("case,op,backend,threads,status,median_s,min_s,max_s,cv,calls_per_sample,sets,bytes,flops,"
                      "gb_per_s,gflop_per_s,verify");
  for (const OpRow& x : r.rows)
    t.add_row(cells(x.line, x.op, x.backend, x.threads, x.status, csv_num(x.time.median), csv_num(x.time.min),
                    csv_num(x.time.max), csv_num(x.time.cv()), x.calls_per_sample, x.sets, x.bytes, csv_num(x.flops),
                    csv_num(x.gb_per_s), csv_num(x.gflop_per_s), x.verify));
  return t;
}

const char* ops_legend() {
  return "Each case (its line reproduces it: bench ops 'LINE') checked against the float64 reference first, then timed "
         "on tensors resident on its device (sets: copies each call takes the next of, --footprint-mib); median and min "
         "per call. GB/s: every input read and every output written once "
         "(float32) / median; GFLOP/s: the reference's arithmetic / median.\n";
}

}  // namespace

std::string render(const OpsReport& r, OutputFormat f) {
  switch (f) {
    case OutputFormat::json: return ops_report_json(r) + "\n";
    case OutputFormat::csv: return ops_csv(r).csv();
    case OutputFormat::markdown: {
      std::string s = "Measured " + context_line(r.context) + ".\n\n" + ops_table(r).markdown() + "\n" + ops_legend();
      if (!r.warnings.empty()) s += "\n" + notes_markdown(r.warnings);
      return s;
    }
    case OutputFormat::text: break;
  }
  return ops_table(r).text() + "\n" + ops_legend();
}

std::string render(const std::vector<CompareRow>& rows, OutputFormat f) {
  if (f == OutputFormat::json) return compare_json(rows) + "\n";
  if (f == OutputFormat::csv) {
    Table t = csv_table("name,base_median_s,now_median_s,ratio,noise,verdict");
    for (const CompareRow& c : rows)
      t.add_row(cells(c.name, csv_num(c.base.median), csv_num(c.now.median), csv_num(c.ratio), csv_num(c.noise),
                      c.verdict));
    return t.csv();
  }
  Table t;
  t.columns = {left("benchmark"), right("base"), right("now"), right("now/base"), right("noise"), left("verdict")};
  for (const CompareRow& c : rows)
    t.add_row({c.name, fmt_time(c.base.median), fmt_time(c.now.median),
                      finite(c.ratio) ? fmt::format("{:.3f}", c.ratio) : "-",
                      finite(c.noise) ? fmt::format("{:.0f}%", 100 * c.noise) : "-", c.verdict});
  const std::string legend =
      "now/base: this run's median / the base's (< 1: faster now). noise: the change below which a ratio is not told "
      "apart from 1 (the larger of 5%, the run-to-run spread of medians, and twice the rows' combined cv).\n";
  return (f == OutputFormat::markdown ? t.markdown() : t.text()) + "\n" + legend;
}

}  // namespace normlab::bench
