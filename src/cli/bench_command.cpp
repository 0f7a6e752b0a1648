// `normlab bench`: times norm kernels and whole training steps (the library is src/bench/;
// this file parses flags into its option structs and prints what its exporters return).
//   normlab bench norms [--shapes 8x256x1024,...] [--resident-shapes 1x512x64,...] [--impl fused,onednn]
//                       [--pass fwd,bwd,addfwd|both|all]
//   normlab bench step  [--model toy,gpt] [--threads 1,all]
//   normlab bench ops   [CASE...] [--device cpu|cuda|cuda-sim]   any op case, checked then timed
//   normlab bench merge RUN1.json RUN2.json RUN3.json      several runs as one (median, spread)
//   normlab bench --compare BASE.json NEW.json             two saved runs, row by row
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli_common.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/opcases.h"
#include "normlab/parse.h"
#include "normlab/system.h"

namespace normlab::cli {

namespace {

using namespace normlab::bench;

struct OutputArgs {
  bool markdown = false, csv = false;
  std::string out;         // the JSON document, written to this file as well
  bool out_given = false;  // --out '' is an error, not "no file"
  bool force = false;      // --out may replace a bench document (never another file)
  std::string compare;     // BASE.json
};

// --force replaces only what a bench run or merge wrote: a document bench itself can read.
bool is_bench_document(const std::string& text) {
  try {
    bench_kind_of_json(text, "--out");
    return true;
  } catch (const std::exception&) {
  }
  return false;
}

// Before any work: the --out file can be written (see io.h: never a person's file).
void check_out(const OutputArgs& o) {
  NL_USAGE(!o.out_given || !o.out.empty(), "--out: no file name given");
  if (o.out_given) check_output_file(o.out, "--out", o.force, is_bench_document);
}

void write_out(const OutputArgs& o, const std::string& doc) {
  if (o.out_given) write_output_file(o.out, doc, "--out", o.force, is_bench_document);
}

struct NormsArgs {
  OutputArgs o;
  std::vector<std::string> impls;
  std::string pass = "all";
  std::string shapes, resident_shapes, threads = "1,all";
  int64_t repeats = 5, warmup = 2, footprint_mib = 0;
  double min_time = 0.2;
  uint64_t seed = 0;
  bool list = false, with_torch = false;
  std::string python = "python3", torch_script;
  DeviceOptions dev;
  std::string dtypes = "f32";  // --precision: f32, bf16, fp16
};

struct StepArgs {
  OutputArgs o;
  std::vector<std::string> models;
  std::vector<std::string> precisions;
  std::string threads = "1,all";
  StepOptions opt;
};

struct OpsArgs {
  OutputArgs o;
  std::vector<std::string> cases;
  std::string threads = "1";
  bool list = false;
  int64_t footprint_mib = 0;
  DeviceOptions dev;
  OpsOptions opt;
};

struct MergeArgs {
  OutputArgs o;
  std::vector<std::string> files;
};

struct BenchArgs {
  std::vector<std::string> compare;  // BASE.json NEW.json
  OutputArgs o;
};

OutputFormat format_of(const OutputArgs& o, const GlobalOptions& g) {
  NL_USAGE(int(g.json) + int(o.markdown) + int(o.csv) <= 1, "choose one of --json, --markdown, --csv");
  return g.json ? OutputFormat::json : o.markdown ? OutputFormat::markdown : o.csv ? OutputFormat::csv : OutputFormat::text;
}

void add_output_flags(CLI::App& sub, OutputArgs& o, GlobalOptions& g, bool compare) {
  sub.add_flag("--markdown", o.markdown, "Print markdown tables instead of text");
  sub.add_flag("--csv", o.csv, "Print CSV instead of text");
  add_given_option(sub, "--out", o.out, o.out_given, "Also write the JSON document to FILE (a new file; see --force)");
  sub.add_flag("--force", o.force, "Let --out replace an existing file that bench wrote (never any other file)");
  if (compare) sub.add_option("--compare", o.compare, "Show each row's ratio to an earlier run's JSON (BASE.json)");
  add_global_flags(sub, g);
}

void print_warnings(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) spdlog::warn("{}", w);
}

// Prints the report's comparison with BASE.json: on stdout after the tables, on stderr when
// stdout is one JSON document.
// A base for --compare must be a readable document of the same command as the run it is
// compared with (otherwise no row would match); checked before anything is timed.
void check_base(const std::string& file, const std::string& kind) {
  const std::string found = bench_kind_of_json(read_file(file), file);
  NL_USAGE(found == kind, "--compare: {} is a `bench {}` document; compare `bench {}` runs with `bench {}` runs", file,
           found, kind, kind);
}

// The base's entries, read before --out may replace the file (--out BASE --force --compare BASE).
std::vector<NamedStats> base_entries(const std::string& base_file) {
  return base_file.empty() ? std::vector<NamedStats>{} : timed_entries_from_json(read_file(base_file), base_file);
}

void print_compare(const std::string& base_file, const std::vector<NamedStats>& base,
                   const std::vector<NamedStats>& now, OutputFormat f) {
  const std::vector<CompareRow> rows = compare(base, now);
  if (f == OutputFormat::json) {
    std::fprintf(stderr, "comparison with %s:\n%s", base_file.c_str(), render(rows, OutputFormat::text).c_str());
  } else {
    std::printf("\ncomparison with %s:\n%s", base_file.c_str(), render(rows, f).c_str());
  }
}

// --precision (--dtypes): fp32 (or f32), bf16, fp16 as a comma list, or all; order kept,
// duplicates dropped (validate() checks the names). Rows name float32 "f32", as before.
std::vector<std::string> parse_dtypes(const std::string& text) {
  if (text == "all") return {"f32", "bf16", "fp16"};
  std::vector<std::string> out;
  for (std::string t : split_list(text, "--precision")) {
    if (t == "fp32") t = "f32";
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

// The two shape lists: without --shapes and --resident-shapes both default lists run; with
// either, only the lists given ("default" names a list's defaults).
void set_shapes(NormBenchOptions& opt, const NormsArgs& a) {
  auto list = [](const std::string& text, std::vector<NormShape> (*defaults)(), const char* flag) {
    return text == "default" ? defaults() : parse_shapes(text, flag);
  };
  if (a.shapes.empty() && a.resident_shapes.empty()) return;  // the options' defaults: both lists
  opt.default_shape_lists = false;
  opt.shapes = a.shapes.empty() ? std::vector<NormShape>{} : list(a.shapes, default_shapes, "--shapes");
  opt.resident_shapes = a.resident_shapes.empty() ? std::vector<NormShape>{}
                                                  : list(a.resident_shapes, default_resident_shapes, "--resident-shapes");
}

// --pass: fwd, bwd, addfwd, both (fwd,bwd), all, or a comma-separated list of the first three.
void set_passes(NormBenchOptions& opt, const std::string& pass) {
  opt.fwd = opt.bwd = opt.addfwd = false;
  for (const std::string& item : split_list(pass, "--pass")) {
    // "all" and "both" are spelled in any case, as the passes' own names are.
    const bool all = same_ignoring_case(item, "all"), both = same_ignoring_case(item, "both");
    const std::optional<Pass> one = try_parse_kind<Pass>(item);
    NL_USAGE(all || both || one, "--pass: '{}' is not one of {}, both (fwd,bwd), all", shown(item),
             kind_choices<Pass>());
    opt.fwd = opt.fwd || all || both || one == Pass::fwd;
    opt.bwd = opt.bwd || all || both || one == Pass::bwd;
    opt.addfwd = opt.addfwd || all || one == Pass::addfwd;
  }
}

// bench norms' options from its flags: usage errors for anything that cannot run, before anything
// runs.
NormBenchOptions norm_options(const NormsArgs& a, const NormRegistry& registry) {
  const bool on_device = a.dev.device != "cpu";
  NormBenchOptions opt;
  opt.device = a.dev.device;
  opt.dtypes = parse_dtypes(a.dtypes);
  if (on_device) {
    // cuda-sim is bench's own: the kernels run through the CUDA module's bench interface, not
    // a backend (its module is checked when the run opens it).
    if (a.dev.device == "cuda-sim")
      NL_USAGE(!a.dev.tf32, "--tf32 applies to --device cuda only");
    else
      check_device(a.dev);
    NL_USAGE(a.impls.empty(), "--impl selects cpu implementations; --device {} times normlab's CUDA kernels",
             shown(a.dev.device));
  }
  set_shapes(opt, a);
  if (on_device && a.resident_shapes.empty()) opt.resident_shapes.clear();
  opt.threads = parse_threads(a.threads, "--threads");
  if (!a.impls.empty()) opt.impls = a.impls;
  set_passes(opt, a.pass);
  opt.repeats = a.repeats;
  opt.warmup = a.warmup;
  opt.min_time = a.min_time;
  NL_USAGE(a.footprint_mib >= 0 && a.footprint_mib <= (int64_t{1} << 30),
           "--footprint-mib must be >= 0 (0: automatic), got {}", a.footprint_mib);
  opt.footprint = a.footprint_mib << 20;
  const std::string excess = memory_budget_excess(static_cast<double>(opt.footprint));
  NL_USAGE(excess.empty(), "--footprint-mib {} {}", a.footprint_mib, excess);
  opt.seed = a.seed;
  opt.log = [](const std::string& s) { spdlog::debug("{}", s); };
  // Unknown names, and implementations none of which has a selected pass, are usage errors.
  bool runs_something = on_device;  // the device's kernels have every pass
  for (const NormImpl* m : registry.select(opt.impls))
    for (const auto& [on, pass] : {std::pair{opt.fwd, Pass::fwd}, {opt.bwd, Pass::bwd}, {opt.addfwd, Pass::addfwd}})
      runs_something = runs_something || (on && m->has(pass));
  NL_USAGE(runs_something, "--pass {}: none of the implementations selected by --impl has that pass (see --list)",
           shown(a.pass));
  validate(opt);
  return opt;
}

// The report in the chosen format, the comparison with --compare's run, the warnings; exit 1
// when a row's check rejected it.
int print_norm_report(const NormReport& report, const NormsArgs& a, OutputFormat f, bool verbose,
                      const std::vector<NamedStats>& base) {
  write_out(a.o, render(report, OutputFormat::json));
  std::cout << render(report, f);
  if (f == OutputFormat::text || f == OutputFormat::markdown)
    std::cout << "\nRMSNorm vs LayerNorm and the baselines, per shape:\n" << render_norm_summary(report, f);
  if ((f == OutputFormat::text || f == OutputFormat::markdown) && !report.context.kernel_choices.empty())
    std::cout << "\n" << render_kernel_choices(report.context, f, verbose);
  if (!a.o.compare.empty()) print_compare(a.o.compare, base, timed_entries(report), f);
  print_warnings(report.warnings);
  int rejected = 0;
  for (const NormRow& r : report.rows)
    if (r.status == "rejected") {
      spdlog::error("{}", r.verify.report);
      ++rejected;
    }
  return rejected ? 1 : 0;
}

int run_norms(const NormsArgs& a, const GlobalOptions& g) {
  if (a.list) {
    std::cout << render_norm_impls(builtin_norm_impls());
    return 0;
  }
  const OutputFormat f = format_of(a.o, g);
  check_out(a.o);
  const NormRegistry registry = builtin_norm_impls();
  const NormBenchOptions opt = norm_options(a, registry);
  if (!a.o.compare.empty()) check_base(a.o.compare, "norms");
  if (opt.device != "cpu")
    spdlog::info("bench norms --device {}: {} shape(s), dtypes {}, pass {} ...", opt.device, opt.shapes.size(),
                 a.dtypes, a.pass);
  else
    spdlog::info("bench norms: {} memory-bound and {} resident shape(s), threads {}, pass {} ...", opt.shapes.size(),
                 opt.resident_shapes.size(), a.threads, a.pass);
  NormReport report = run_norm_bench(opt, registry);
  if (a.with_torch) {
    std::string why;
    TorchOptions t;
    t.python = a.python;
    t.script = a.torch_script;
    spdlog::info("bench norms: PyTorch's rows (scripts/torch_bench.py) ...");
    if (!add_torch_rows(report, opt, t, why))
      report.warnings.push_back("--with-torch: " + why + "; PyTorch's rows are missing or incomplete");
  }
  return print_norm_report(report, a, f, g.verbose > 0, base_entries(a.o.compare));
}

int run_step(const StepArgs& a, const GlobalOptions& g) {
  const OutputFormat f = format_of(a.o, g);
  check_out(a.o);
  StepOptions opt = a.opt;
  if (!a.models.empty()) opt.models = a.models;
  if (!a.precisions.empty()) {
    opt.precisions.clear();
    for (const std::string& p : a.precisions) opt.precisions.push_back(parse_kind<Precision>(p));  // repeats: validate
  }
  opt.threads = parse_threads(a.threads, "--threads");
  opt.log = [](const std::string& s) { spdlog::debug("{}", s); };
  validate(opt);
  if (!a.o.compare.empty()) check_base(a.o.compare, "step");
  std::string models;
  for (const std::string& m : opt.models) models += (models.empty() ? "" : ",") + m;
  spdlog::info("bench step: models {}, threads {} ...", models, a.threads);
  StepReport report = run_step_bench(opt);
  const std::vector<NamedStats> base = base_entries(a.o.compare);
  write_out(a.o, render(report, OutputFormat::json));
  std::cout << render(report, f);
  if (!a.o.compare.empty()) print_compare(a.o.compare, base, timed_entries(report), f);
  print_warnings(report.warnings);
  return 0;
}

int run_ops(const OpsArgs& a, const GlobalOptions& g) {
  OpsOptions opt = a.opt;
  if (!a.cases.empty()) opt.cases = a.cases;
  if (a.list) {
    for (const opcases::OpCase* c : opcases::select_cases(opt.cases)) std::cout << c->line() << "\n";
    return 0;
  }
  const OutputFormat f = format_of(a.o, g);
  check_out(a.o);
  check_device(a.dev);
  opt.backend = a.dev.device;
  opt.threads = parse_threads(a.threads, "--threads");
  NL_USAGE(a.dev.device == "cpu" || a.threads == "1", "--threads applies to --device cpu only");
  NL_USAGE(a.footprint_mib >= 0 && a.footprint_mib <= (int64_t{1} << 30), "--footprint-mib must be >= 0 (0: resident), got {}",
           a.footprint_mib);
  opt.footprint = a.footprint_mib << 20;
  const std::string excess = memory_budget_excess(static_cast<double>(opt.footprint));
  NL_USAGE(excess.empty(), "--footprint-mib {} {}", a.footprint_mib, excess);
  opt.log = [](const std::string& s) { spdlog::debug("{}", s); };
  validate(opt);
  if (!a.o.compare.empty()) check_base(a.o.compare, "ops");
  const size_t n = opcases::select_cases(opt.cases).size();
  spdlog::info("bench ops: {} case(s) on {}, threads {} ...", n, opt.backend, a.threads);
  const OpsReport report = run_ops_bench(opt);
  const std::vector<NamedStats> base = base_entries(a.o.compare);
  write_out(a.o, render(report, OutputFormat::json));
  std::cout << render(report, f);
  if (!a.o.compare.empty()) print_compare(a.o.compare, base, timed_entries(report), f);
  print_warnings(report.warnings);
  int rejected = 0;
  for (const OpRow& r : report.rows)
    if (r.status == "rejected") {
      spdlog::error("{}", r.verify);
      ++rejected;
    }
  return rejected ? 1 : 0;
}

int run_merge(const MergeArgs& a, const GlobalOptions& g) {
  const OutputFormat f = format_of(a.o, g);
  NL_USAGE(!a.files.empty(), "merge: give the JSON files of the runs to merge");
  check_out(a.o);
  std::vector<std::string> texts;
  for (const std::string& file : a.files) texts.push_back(read_file(file));
  const std::string kind = bench_kind_of_json(texts[0], a.files[0]);
  NL_USAGE(kind != "ops", "merge: {} is a `bench ops` document; ops runs are compared (--compare), not merged",
           a.files[0]);
  for (size_t i = 1; i < texts.size(); ++i)
    NL_USAGE(bench_kind_of_json(texts[i], a.files[i]) == kind, "merge: {} is a `bench {}` document, {} is not",
             a.files[0], kind, a.files[i]);
  if (kind == "norms") {
    std::vector<NormReport> runs;
    for (size_t i = 0; i < texts.size(); ++i) runs.push_back(norm_report_from_json(texts[i], a.files[i]));
    NormReport m = merge_runs(runs);
    write_out(a.o, render(m, OutputFormat::json));
    std::cout << render(m, f);
    if (f == OutputFormat::text || f == OutputFormat::markdown)
      std::cout << "\nRMSNorm vs LayerNorm and the baselines, per shape:\n" << render_norm_summary(m, f);
  } else {
    std::vector<StepReport> runs;
    for (size_t i = 0; i < texts.size(); ++i) runs.push_back(step_report_from_json(texts[i], a.files[i]));
    StepReport m = merge_runs(runs);
    write_out(a.o, render(m, OutputFormat::json));
    std::cout << render(m, f);
  }
  return 0;
}

int run_compare_files(const BenchArgs& a, const GlobalOptions& g) {
  const OutputFormat f = format_of(a.o, g);
  NL_USAGE(a.compare.size() == 2, "--compare needs BASE.json NEW.json (or run `bench norms --compare BASE.json`)");
  const std::string base_text = read_file(a.compare[0]), now_text = read_file(a.compare[1]);
  check_base(a.compare[0], bench_kind_of_json(now_text, a.compare[1]));
  const auto base = timed_entries_from_json(base_text, a.compare[0]);
  const auto now = timed_entries_from_json(now_text, a.compare[1]);
  std::cout << render(compare(base, now), f);
  return 0;
}

// ---- the subcommands' flags

CLI::App* add_norms(CLI::App* sub, const std::shared_ptr<NormsArgs>& norms, GlobalOptions& g) {
  CLI::App* n = sub->add_subcommand("norms", "Norm kernels (LayerNorm, RMSNorm, DyT, Derf): every implementation, shape and thread count");
  n->add_option_function<std::string>(
      "--impl", [norms](const std::string& v) { norms->impls = split_list(v, "--impl"); },
      "Implementations (comma-separated): all, layernorm, rmsnorm, fused, multipass, onednn, or full names "
      "such as layernorm.fused (see --list); default all");
  n->add_option("--pass", norms->pass,
                "fwd, bwd, addfwd (the fused residual add + norm forward), both (fwd,bwd) or all; comma-separated "
                "(default all)");
  n->add_option("--shapes", norms->shapes,
                "Memory-bound shapes, BATCHxSEQxD list: buffers rotate through --footprint-mib (default "
                "4x128x512,8x256x1024,16x512x2048,32x1024x4096)");
  n->add_option("--resident-shapes", norms->resident_shapes,
                "Cache-resident shapes, BATCHxSEQxD list: one buffer set reused by every call, timed in batches, "
                "against its own copy on the same buffers (default 1x512x64,1x512x128,1x512x256: the training "
                "step's norms)");
  n->add_option("--threads", norms->threads, "Thread counts, comma-separated; 'all' = every CPU (default 1,all)");
  n->add_option("--repeats", norms->repeats, "At least this many timed calls per case (default 5)");
  n->add_option("--min-time", norms->min_time, "And at least this many seconds of timed calls per case (default 0.2)");
  n->add_option("--warmup", norms->warmup, "Untimed calls per case first (default 2)");
  n->add_option("--footprint-mib", norms->footprint_mib,
                "MiB of buffers each memory-bound case rotates through (default 0: max(1 GiB, 4 x last-level cache))");
  n->add_option("--seed", norms->seed, "Seed of the input values (default 0)")->check(whole_u64);
  n->add_flag("--list", norms->list, "List the implementations and exit");
  n->add_flag("--with-torch", norms->with_torch,
              "Add PyTorch's rows (scripts/torch_bench.py; skipped with a warning when python3 cannot import torch)");
  n->add_option("--python", norms->python, "Python interpreter for --with-torch (default python3)");
  n->add_option("--torch-script", norms->torch_script, "Path of torch_bench.py (default: found next to the build)");
  add_device_flags(*n, norms->dev);
  n->add_option("--precision,--dtypes", norms->dtypes,
                "Storage formats, comma-separated: fp32, bf16, fp16 or all (the N x D arrays and the parameters in "
                "the format, float32 statistics: the fused kernels; default fp32)");
  add_output_flags(*n, norms->o, g, true);
  n->footer(R"(Each implementation is checked against the float64 reference kernels on the first buffer set
before it is timed; one that fails is reported (exit 1) and never timed. Each case then runs
--warmup untimed calls and is timed, the cases in turn:
  memory-bound (--shapes): call by call, each call on the next of enough buffer sets that a
    case touches >= max(1 GiB, 4 x LLC) before it sees one again;
  cache-resident (--resident-shapes): every call on the same buffer set, which stays in L1/L2 as
    the step's norms do; a sample is a batch of calls (~200 us), reported per call.
%copy is of each row's own copy: its arrays read and written on its own buffers, with its kind
of stores, timed beside it (resident: the cache's speed for those bytes, not memory's); a row
above 105% of it is a measurement error, printed as "error".
Without --shapes and --resident-shapes both default lists run, each in its own table section;
with either, only the lists given ("default": that list's defaults).
addfwd rows: s = alpha*a + b written, then y = norm(s) (Post-LN, DeepNorm); GB/s counts 4ND floats;
"vs unfused" is the two-kernel sequence (an add, then the fused norm) against the fused kernel.
On a device (--device cuda, or cuda-sim: the same CUDA sources simulated on the host, slow):
normlab's CUDA kernels on device buffers rotated through --footprint-mib (default 1 GiB), each
call timed on the device (CUDA events), against the device's copy kernel (copy.loop) and
cudaMemcpy (copy.memcpy); checked as the cpu rows are, on the outputs downloaded from the device.
Examples:
  normlab bench norms --resident-shapes default --threads 1      the training step's shapes only
  normlab bench norms --impl fused,unfused --pass addfwd         the fused residual add + norm
  normlab bench norms --precision fp32,bf16,fp16                 16-bit storage rows beside float32
  normlab bench norms --device cuda --precision fp32,bf16 --with-torch   GPU rows, PyTorch's beside them
  normlab bench norms --device cuda --pass both   DyT and Derf against RMSNorm on the GPU (DyT speed vs RMS)
Run pinned: OMP_PROC_BIND=close OMP_PLACES=cores normlab bench norms)");
  return n;
}

CLI::App* add_step(CLI::App* sub, const std::shared_ptr<StepArgs>& step, GlobalOptions& g) {
  CLI::App* s = sub->add_subcommand(
      "step", "Whole training steps, LayerNorm vs RMSNorm, the norms' share, GFLOP/s against the FMA peak");
  s->add_option_function<std::string>(
      "--model", [step](const std::string& v) { step->models = split_list(v, "--model"); },
      "toy, gpt or both (comma-separated; default toy,gpt)");
  s->add_option("--threads", step->threads, "Thread counts, comma-separated; 'all' = every CPU (default 1,all)");
  s->add_option_function<std::string>(
      "--precision", [step](const std::string& v) { step->precisions = split_list(v, "--precision"); },
      "fp32, bf16 or both (comma-separated; default fp32): what the steps store in, as train's --precision; each "
      "precision its own rows, all stepping in turn");
  s->add_option("--layers", step->opt.layers, "Blocks (default 20)");
  s->add_option("--d-model", step->opt.d_model, "Width d (default 64)");
  s->add_option("--d-hidden", step->opt.d_hidden, "MLP hidden width (default 128)");
  s->add_option("--heads", step->opt.heads, "Attention heads, gpt (default 4)");
  s->add_option("--vocab", step->opt.vocab, "Vocabulary (default 64)");
  s->add_option("--batch", step->opt.batch, "Sequences per step (default 32)");
  s->add_option("--seq", step->opt.seq, "Tokens per sequence (default 16)");
  s->add_option("--repeats", step->opt.repeats, "At least this many timed steps per model (default 10)");
  s->add_option("--min-time", step->opt.min_time, "And at least this many seconds of steps per model (default 1)");
  s->add_option("--warmup", step->opt.warmup, "Untimed steps first (default 3)");
  s->add_option("--seed", step->opt.seed, "Seed of the models and data (default 0)")->check(whole_u64);
  add_output_flags(*s, step->o, g, true);
  s->footer(R"(Before the steps, an FMA loop (independent float32 FMAs on registers, the compiled ISA's vector
width) measures this machine's peak at each thread count: printed above the table and kept in the
JSON context (fma_peak). GFLOP/s: the step's matrix-product flops (2*M*N*K per product; each
forward product and its two backward ones) / the step's median; %FMA peak: that GFLOP/s as a
share of the peak at the same thread count, the distance to the physical limit.
Examples:
  normlab bench step --model toy --threads 1             the toy step at 1 thread
  normlab bench step --model gpt --d-model 256 --layers 6 --seq 256 --batch 8
  normlab bench step --model gpt --d-model 256 --d-hidden 1024 --layers 6 --seq 256 --batch 8 --precision fp32,bf16)");
  return s;
}

CLI::App* add_ops(CLI::App* sub, const std::shared_ptr<OpsArgs>& ops, GlobalOptions& g) {
  CLI::App* o = sub->add_subcommand("ops", "Any op case (the kernels' test cases) on any device, checked then timed");
  o->add_option("cases", ops->cases,
                "Cases: all (default), an op (rmsnorm_fwd), a family (rmsnorm), or a case's whole line in quotes (see "
                "--list); a norm's line at any size, e.g. 'rmsnorm_fwd rows=16384 d=1024', and a product's "
                "shape, e.g. 'matmul m=768 n=384 k=128 tb=1'");
  o->add_option("--threads", ops->threads, "cpu thread counts, comma-separated; 'all' = every CPU (default 1)");
  o->add_option("--repeats", ops->opt.repeats, "At least this many timed samples per case (default 5)");
  o->add_option("--min-time", ops->opt.min_time, "And at least this many seconds of samples per case (default 0.1)");
  o->add_option("--warmup", ops->opt.warmup, "Untimed calls per case first (default 2)");
  o->add_option("--footprint-mib", ops->footprint_mib,
                "Rotate each case through copies of its tensors adding up to this many MiB, one per call "
                "(memory-bound figures; default 0: one resident set)");
  o->add_flag("--list", ops->list, "List the selected cases' lines and exit");
  add_device_flags(*o, ops->dev);
  add_output_flags(*o, ops->o, g, true);
  o->footer(R"(Every case is checked against the reference backend in float64 (the test suite's check: outputs
NaN-poisoned first) before it is timed; one that fails is reported (exit 1) and never timed. Then
it runs on tensors resident on the device, the same tensors every call (cache-resident where they
fit: the kernel's own speed); bench norms rotates buffers through memory for memory-bound figures.
Examples:
  normlab bench ops --list rmsnorm                          the RMSNorm cases' lines
  normlab bench ops rmsnorm_fwd layernorm_fwd --threads 1,all
  normlab bench ops 'rmsnorm_bwd rows=64 d=512 eps=1e-06 seed=907' --device cuda-sim)");
  return o;
}

CLI::App* add_merge(CLI::App* sub, const std::shared_ptr<MergeArgs>& merge, GlobalOptions& g) {
  CLI::App* m = sub->add_subcommand("merge", "Several runs' JSON as one table: medians over the runs and their range");
  m->add_option("files", merge->files, "JSON files written by --out or --json")->required();
  add_output_flags(*m, merge->o, g, false);
  return m;
}

}  // namespace

Runner add_bench(CLI::App& app, GlobalOptions& g) {
  auto bench = std::make_shared<BenchArgs>();
  auto norms = std::make_shared<NormsArgs>();
  auto step = std::make_shared<StepArgs>();
  auto merge = std::make_shared<MergeArgs>();
  auto ops = std::make_shared<OpsArgs>();

  CLI::App* sub = app.add_subcommand("bench", "Time norm kernels (GB/s, % of copy bandwidth) and training steps");
  sub->require_subcommand(0, 1);
  sub->add_option("--compare", bench->compare, "BASE.json NEW.json: each row's time now / base")->expected(2);
  sub->add_flag("--markdown", bench->o.markdown, "Print markdown instead of text");
  sub->add_flag("--csv", bench->o.csv, "Print CSV instead of text");
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab bench norms                                   every implementation, default shapes, 1 and all threads
  normlab bench norms --shapes 8x256x1024 --impl fused,onednn --pass fwd --threads 1
  normlab bench norms --with-torch --out run1.json      PyTorch's rows too (needs python3 with torch)
  normlab bench step                                    toy and gpt steps, LayerNorm vs RMSNorm, GFLOP/s vs FMA peak
  normlab bench merge run1.json run2.json run3.json     three runs as one: medians and their spread
  normlab bench norms --compare run1.json               this run against an earlier one
  normlab bench --compare run1.json run2.json           two saved runs

docs/bench.md explains every column and the JSON schema.)");

  CLI::App* n = add_norms(sub, norms, g);
  CLI::App* s = add_step(sub, step, g);
  CLI::App* o = add_ops(sub, ops, g);
  CLI::App* m = add_merge(sub, merge, g);

  return [sub, n, s, o, m, bench, norms, step, ops, merge, &g]() -> int {
    if (n->parsed()) return run_norms(*norms, g);
    if (o->parsed()) return run_ops(*ops, g);
    if (s->parsed()) return run_step(*step, g);
    if (m->parsed()) return run_merge(*merge, g);
    if (!bench->compare.empty()) return run_compare_files(*bench, g);
    std::cout << sub->help();
    return 0;
  };
}

}  // namespace normlab::cli
