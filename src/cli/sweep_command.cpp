// `normlab sweep`: flags and progress rendering; planning, running, tables and plots live in
// src/experiment/sweep_*.cpp (include/normlab/sweep.h).
//   normlab sweep SPEC.json --out DIR
//   normlab sweep --out DIR lr=1e-4,3e-4,1e-3 layers=2,4 placement=pre,post seed=0,1,2
//   normlab sweep summarize DIR --rows lr --cols placement,layers --format csv
#include <fmt/ranges.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <spdlog/spdlog.h>

#include "cli_common.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/parse.h"
#include "normlab/render.h"
#include "normlab/sweep.h"
#include "normlab/system.h"
#include "normlab/table.h"

namespace normlab::cli {

namespace {

struct SweepArgs {
  std::vector<std::string> positional;  // SPEC.json and/or key=v1,v2 axes
  std::vector<std::string> sets;
  std::string out, shard, rerun, tensorboard;
  const CLI::Option* tensorboard_opt = nullptr;
  int jobs = 0, threads = 1;
  bool dry_run = false, force = false;
  bool slurm = false, submit = false;
  std::string slurm_partition, slurm_time;
  int slurm_cpus = 1, slurm_array_max = 0, slurm_shards = 0;
  // Given on the command line (a given 0 is refused, not read as "the default")
  const CLI::Option* jobs_opt = nullptr;
  const CLI::Option* slurm_shards_opt = nullptr;
  // summarize
  std::string dir, rows, cols, metric, paired, format = "md";
  bool no_write = false, brief = false, summary_check = false;
  // render
  std::string render_doc;
  bool render_check = false;
  std::string curves, curve_field = "val_loss", curve_layers = "max";
  std::vector<std::string> curve_where;
  int curve_digits = 4;
  bool curve_transpose = false;
  std::string profile, plot;
  // status
  std::vector<std::string> status_dirs;
  DeviceOptions dev;
};

std::string clock_text(double s) {
  if (s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

std::string progress_counts(const SweepProgress& p) {
  return fmt::format("{}/{} done, {} running, {} failed, {} diverged, {} elapsed, ~{} left", p.finished, p.total, p.running,
                     p.failed, p.diverged, clock_text(p.elapsed_s), p.eta_s < 0 ? "?" : clock_text(p.eta_s));
}

std::string outcome_line(const SweepPoint& pt, const PointOutcome& o, const SweepProgress& p) {
  std::string detail;
  if (o.status == "completed") detail = fmt::format("val {:.4f}", o.metric);
  else if (o.status == "diverged") detail = fmt::format("at step {}", o.diverged_step);
  else if (o.signal) detail = fmt::format("signal {} ({})", o.signal, strsignal(o.signal));
  else detail = fmt::format("exit {}", o.exit_code);
  std::string line = fmt::format("[{}/{}] {:<11} {}  {}  {:.1f} s  ({} running, {} failed, {} diverged, {} elapsed, ~{} left)",
                                 p.finished, p.total, o.status, pt.name, detail, o.seconds, p.running, p.failed, p.diverged,
                                 clock_text(p.elapsed_s), p.eta_s < 0 ? "?" : clock_text(p.eta_s));
  if (o.status == "failed" && !o.stderr_tail.empty()) {
    std::string last = o.stderr_tail.substr(o.stderr_tail.rfind('\n') == std::string::npos ? 0 : o.stderr_tail.rfind('\n') + 1);
    line += "\n    " + last;
  }
  return line;
}

// --cols: empty entries dropped ("" is the default, every other varied axis).
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  for (std::string& item : split_at(s, ','))
    if (!item.empty()) out.push_back(std::move(item));
  return out;
}

// One warning per damaged run: it is not a result, and says what is wrong with it.
void warn_damaged(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& damaged,
                  const char* then) {
  for (const auto& [point, problem] : damaged)
    spdlog::warn("{}/runs/{} {}; {}", dir, point, problem, then);
}

// The flags as a SweepInvocation: positionals are the spec file and key=v1,v2 axes.
SweepInvocation invocation_of(const SweepArgs& a) {
  SweepInvocation inv;
  inv.request.absolute_paths = true;
  for (const std::string& p : a.positional) {
    if (p.find('=') != std::string::npos) {
      inv.request.axes.push_back(p);
    } else {
      NL_USAGE(inv.request.spec_file.empty(), "two spec files given ('{}' and '{}'); axes are written key=v1,v2",
               shown(inv.request.spec_file, 200), shown(p, 200));
      inv.request.spec_file = p;
    }
  }
  inv.request.sets = a.sets;
  inv.run.dir = a.out;
  inv.run.jobs = a.jobs_opt->count() > 0 ? a.jobs : usable_cpus();
  inv.run.threads = a.threads;
  inv.run.shard = a.shard.empty() ? shard_from_env() : parse_shard(a.shard);
  inv.run.device = a.dev.device;
  inv.run.tf32 = a.dev.tf32;
  // Absolute: the children run with the same working directory, Slurm's tasks maybe not.
  NL_USAGE(a.tensorboard_opt->count() == 0 || !a.tensorboard.empty(), "--tensorboard needs a directory (TensorBoard's --logdir)");
  if (!a.tensorboard.empty()) inv.run.tensorboard = std::filesystem::absolute(a.tensorboard).lexically_normal().string();
  inv.rerun = parse_rerun(a.rerun);
  inv.force = a.force;
  inv.dry_run = a.dry_run;
  inv.slurm = a.slurm;
  inv.submit = a.submit;
  inv.slurm_options.partition = a.slurm_partition;
  inv.slurm_options.time = a.slurm_time;
  inv.slurm_options.cpus = a.slurm_cpus;
  inv.slurm_options.array_max = a.slurm_array_max;
  inv.slurm_options.shards = a.slurm_shards_opt->count() > 0 ? a.slurm_shards : -1;  // a given 0 is refused
  return inv;
}

std::string shard_text(const Shard& shard) {
  return shard.count > 1 ? fmt::format(" in shard {}/{}", shard.index, shard.count) : "";
}

void print_dry_run(const SweepInvocation& inv, const SweepInvocationResult& r) {
  const ShardWork& w = r.work;
  for (size_t i = 0; i < r.plan.points.size(); ++i)
    if (in_shard(i, inv.run.shard))
      std::printf("%-5s %-11s %s%s\n", w.runs[i] ? "run" : "skip", r.states[i].status.c_str(), r.plan.points[i].name.c_str(),
                  r.states[i].carried_from.empty() ? "" : (" (with --force: the run of " + r.states[i].carried_from + ")").c_str());
  std::printf("%zu points%s: %zu to run, %zu already done (dry run: nothing was started or created)\n", w.points,
              shard_text(inv.run.shard).c_str(), w.todo.size(), w.done);
  if (!r.changed.empty())
    std::printf("note: the spec differs from the sweep in %s: %s (a real run refuses without --force)\n", inv.run.dir.c_str(),
                r.changed.c_str());
}

void print_slurm(const SweepInvocation& inv, const SweepInvocationResult& r) {
  std::printf("wrote %s: %d array tasks over %zu points, %d cpus each\n", r.sbatch_script.c_str(), r.slurm_shards,
              r.plan.points.size(), inv.slurm_options.cpus);
  if (inv.submit) std::printf("submitted job %s\n", r.job_id.c_str());
  else std::printf("sbatch %s\n", r.sbatch_script.c_str());
}

void print_start(const SweepInvocation& inv, const ShardWork& w, const GlobalOptions& g) {
  warn_damaged(inv.run.dir, w.damaged, "the point runs again");
  if (g.quiet) return;
  const int jobs = inv.run.jobs, threads = inv.run.threads;
  std::fprintf(stderr, "sweep %s: %zu points%s; %zu to run, %zu already done%s; %d job%s x %d thread%s\n", inv.run.dir.c_str(),
               w.points, shard_text(inv.run.shard).c_str(), w.todo.size(), w.done,
               w.diverged ? fmt::format(" ({} diverged)", w.diverged).c_str() : "", jobs, jobs == 1 ? "" : "s", threads,
               threads == 1 ? "" : "s");
}

void draw_bar(const SweepProgress& p) {
  const int width = 24;
  int filled = p.total ? static_cast<int>(width * p.finished / p.total) : width;
  std::fprintf(stderr, "\r\033[K[%.*s%*s] %s", filled, "########################", width - filled, "", progress_counts(p).c_str());
  std::fflush(stderr);
}

// Each point's end on stderr: a line each (a progress bar on a terminal, failures above it).
SweepCallbacks progress_printer(bool tty, const GlobalOptions& g) {
  SweepCallbacks cb;
  cb.on_end = [tty, quiet = g.quiet](const SweepPoint& pt, const PointOutcome& o, const SweepProgress& p) {
    const bool notable = o.status == "failed";
    if (tty) {
      if (notable) std::fprintf(stderr, "\r\033[K%s\n", outcome_line(pt, o, p).c_str());
      draw_bar(p);
    } else if (!quiet || notable) {
      std::fprintf(stderr, "%s\n", outcome_line(pt, o, p).c_str());
    }
  };
  if (tty) cb.on_tick = draw_bar;
  return cb;
}

// The summary on stdout, what ran on stderr; the exit status (128 + a signal that stopped it, 1
// when a point failed).
int print_run(const SweepInvocation& inv, const SweepInvocationResult& r, const GlobalOptions& g) {
  const SweepProgress& p = r.report.progress;
  const std::string& dir = inv.run.dir;
  if (r.report.signal) {
    std::fprintf(stderr, "sweep interrupted (%s): %zu finished, %zu interrupted, %zu not started; run the same command "
                 "again to resume\n", strsignal(r.report.signal), p.finished - p.interrupted, p.interrupted, p.total - p.finished);
    return exit_status(r.report);
  }
  std::cout << (g.json ? summary_json(r.summary) : summary_markdown(r.summary));
  if (!g.quiet) {
    // The sweep's own cost (planning, launching, bookkeeping, summaries): this process's CPU time.
    const double own_cpu = process_cpu_seconds();
    std::fprintf(stderr, "ran %zu point%s in %s: %zu completed, %zu diverged, %zu failed%s; summaries and plots in %s "
                 "(the sweep process itself used %.2f s of CPU)\n", p.finished, p.finished == 1 ? "" : "s",
                 clock_text(p.elapsed_s).c_str(), p.completed, p.diverged, p.failed,
                 p.skipped ? fmt::format("; {} skipped (started by another process of this shard)", p.skipped).c_str() : "",
                 dir.c_str(), own_cpu);
  }
  if (p.failed)
    std::fprintf(stderr, "%zu point%s failed: see %s/manifest.jsonl and %s/logs/; rerun the same command to retry them\n",
                 p.failed, p.failed == 1 ? "" : "s", dir.c_str(), dir.c_str());
  return exit_status(r.report);
}

int run_sweep_command(const SweepArgs& a, const GlobalOptions& g) {
  // Everything is checked before anything is created (a --device cuda without a GPU first).
  check_device(a.dev);
  const SweepInvocation inv = invocation_of(a);
  const bool tty = isatty(STDERR_FILENO) && !g.quiet;
  const SweepInvocationResult r =
      run_sweep_invocation(inv, progress_printer(tty, g), [&](const ShardWork& w) { print_start(inv, w, g); });
  if (tty && !inv.dry_run && !inv.slurm) std::fprintf(stderr, "\r\033[K");
  if (inv.dry_run) print_dry_run(inv, r);
  else if (inv.slurm) print_slurm(inv, r);
  else return print_run(inv, r, g);
  return 0;
}

int run_curves_command(const SweepArgs& a) {
  CurveOptions o;
  o.steps = parse_integer_list(a.curves, "--curves", 0, int64_t{1} << 40);
  o.field = a.curve_field;
  o.layers = parse_kind<LayerReduce>(a.curve_layers);
  o.where = a.curve_where;
  o.digits = a.curve_digits;
  o.transpose = a.curve_transpose;
  std::cout << sweep_curves_markdown(a.dir, o);
  return 0;
}

int run_profile_command(const SweepArgs& a) {
  ProfileOptions o;
  o.step = a.profile == "last" ? -1 : parse_integer_list(a.profile, "--profile", 0, int64_t{1} << 40).at(0);
  NL_USAGE(a.profile == "last" || a.profile.find(',') == std::string::npos, "--profile takes one step (or last), got '{}'",
           shown(a.profile));
  if (a.curve_field != "val_loss") o.field = a.curve_field;
  o.where = a.curve_where;
  o.digits = a.curve_digits;
  if (!a.plot.empty()) check_output_file(a.plot, "--plot", true, is_layer_profile_svg);
  const std::vector<LayerProfile> profiles = sweep_layer_profiles(a.dir, o);
  if (!a.plot.empty()) write_output_file(a.plot, plot_layer_profiles_svg(o, profiles), "--plot", true, is_layer_profile_svg);
  std::cout << layer_profiles_markdown(a.dir, o, profiles);
  return 0;
}

// Exit 1 when a summary file of DIR differs from what its runs give (as `render --check` for a document).
int check_summaries(const std::string& dir, const SweepSummary& s, const GlobalOptions& g) {
  const auto files = summary_files(s);
  const std::vector<std::string> stale = stale_summary_files(dir, files);
  for (const std::string& f : stale) std::cerr << fmt::format("{}: differs from what the runs give (or is missing)\n", f);
  if (!g.quiet)
    std::cout << fmt::format("{}: {} summary files, {} differ from what the runs give\n", dir, files.size(),
                             stale.size());
  return stale.empty() ? 0 : 1;
}

int run_summarize_command(const SweepArgs& a, const GlobalOptions& g) {
  NL_USAGE(a.plot.empty() || !a.profile.empty(), "--plot draws the --profile table: give --profile STEP");
  if (!a.profile.empty()) {
    NL_USAGE(a.curves.empty() && a.rows.empty() && a.cols.empty() && a.metric.empty() && a.paired.empty() &&
                 a.format == "md" && !a.no_write && !g.json && a.curve_layers == "max" && !a.curve_transpose,
             "--profile prints its own markdown table (shaped by --field, --where, --digits; --plot FILE also draws "
             "it): drop the summary's and --curves' options");
    return run_profile_command(a);
  }
  if (!a.curves.empty()) {
    NL_USAGE(a.rows.empty() && a.cols.empty() && a.metric.empty() && a.paired.empty() && a.format == "md" && !a.no_write && !g.json,
             "--rows, --cols, --metric, --paired, --format, --no-write and --json shape the summary; --curves prints its own "
             "markdown table and writes nothing");
    return run_curves_command(a);
  }
  NL_USAGE(a.curve_field == "val_loss" && a.curve_layers == "max" && a.curve_digits == 4 && !a.curve_transpose,
           "--field, --layers, --digits and --transpose shape the --curves table: give --curves STEPS");
  NL_USAGE(a.curve_where.empty() || a.no_write,
           "--where prints a table of some of the points: add --no-write (DIR's summaries cover every point)");
  // The formats' one name table (md is markdown's alias); a summary has no text form.
  OutputFormat format = OutputFormat::text;
  try {
    format = parse_kind<OutputFormat>(a.format);
  } catch (const UsageError&) {
  }
  NL_USAGE(format != OutputFormat::text, "--format '{}' is not one of md, csv, json", shown(a.format));
  if (g.json) format = OutputFormat::json;
  SummaryOptions o;
  o.rows = a.rows;
  o.cols = split_commas(a.cols);
  o.metric = a.metric;
  o.paired = a.paired;
  o.where = a.curve_where;
  NL_USAGE(!a.summary_check || (!a.no_write && !a.brief && a.curve_where.empty() && a.format == "md" && !g.json),
           "--check compares DIR's summary files with what its runs give and prints no table: drop --no-write, "
           "--brief, --where, --format and --json");
  SweepSummary s = summarize_sweep(a.dir, o);
  if (a.summary_check) return check_summaries(a.dir, s, g);
  // Written before anything is printed: a summary that cannot be written is an error (exit 2, one
  // line); --no-write is for reading a directory one cannot write.
  if (!a.no_write) write_summaries(a.dir, s);
  warn_damaged(a.dir, s.damaged_runs, "not counted as a result (`normlab sweep` runs the point again)");
  NL_USAGE(!a.brief || format == OutputFormat::markdown, "--brief shapes the markdown table; it has no {} form",
           to_string(format));
  if (format == OutputFormat::markdown) std::cout << summary_markdown(s, a.brief);
  else if (format == OutputFormat::csv) std::cout << summary_csv(s);
  else std::cout << summary_json(s);
  return 0;
}

int run_render_command(const SweepArgs& a, const GlobalOptions& g) {
  const RenderResult r = render_document(read_file(a.render_doc), shown(a.render_doc, 200), self_exe());
  size_t changed = 0;
  for (const RenderBlock& b : r.blocks) {
    if (!b.changed) continue;
    ++changed;
    if (a.render_check) std::cerr << fmt::format("{}:{}: `normlab {}` gives other output than the document holds\n",
                                                 a.render_doc, b.line, b.command);
  }
  if (a.render_check) {
    if (!g.quiet)
      std::cout << fmt::format("{}: {} blocks, {} differ from what the data give\n", a.render_doc, r.blocks.size(), changed);
    return changed ? 1 : 0;
  }
  if (changed) write_file_atomic(a.render_doc, r.text);
  if (!g.quiet) std::cout << fmt::format("{}: {} blocks, {} rewritten\n", a.render_doc, r.blocks.size(), changed);
  return 0;
}

int run_status_command(const SweepArgs& a, const GlobalOptions& g) {
  std::vector<SweepStatus> sweeps;
  for (const std::string& d : a.status_dirs) sweeps.push_back(sweep_status(d));
  std::cout << (g.json ? sweep_status_json(sweeps) : sweep_status_markdown(sweeps));
  return 0;
}

// ---- the subcommands' flags

CLI::App* add_summarize(CLI::App* sub, const std::shared_ptr<SweepArgs>& a, GlobalOptions& g) {
  CLI::App* summ = sub->add_subcommand("summarize", "Rebuild DIR's tables and plots from whatever runs are there");
  summ->add_option("dir", a->dir, "The sweep directory")->required();
  summ->add_option("--rows", a->rows, "The row axis (default: the spec's, lr when it varies)");
  summ->add_option("--cols", a->cols, "Column axes, comma-separated (default: every other varied axis but seed)");
  summ->add_option("--metric", a->metric,
                   "A numeric field of result.json (default final_val_loss; final_excess_loss: above the oracle's loss "
                   "on the same held-out tokens, which cancels the seeds' different validation sets)");
  summ->add_option("--paired", a->paired,
                   "KEY=VALUE[ ...] over column axes (e.g. norm=layernorm): also show each column minus its reference "
                   "(the column with these values and its own on the other axes), paired by seed, with a 95% t interval");
  summ->add_option("--format", a->format, "markdown (md), csv or json (stdout)");
  summ->add_flag("--no-write", a->no_write, "Print the table only; write nothing into DIR (a directory you cannot write)");
  summ->add_flag("--check", a->summary_check,
                 "Write nothing; exit 1 when one of DIR's summary files differs from what its runs give now");
  summ->add_flag("--brief", a->brief,
                 "Markdown without the title, the legend and the curves: the table, its resolution and the paired "
                 "table (what a document cites; see `sweep render`)");
  summ->add_option("--curves", a->curves,
                   "STEPS (comma list): print a metrics.jsonl field at these steps for every point, mean ± std over "
                   "the seeds, instead of the summary (writes nothing)");
  summ->add_option("--field", a->curve_field, "--curves: a field of metrics.jsonl (default val_loss)");
  summ->add_option("--layers", a->curve_layers, "--curves: a per-layer field's reduction: " + kind_help<LayerReduce>());
  summ->add_option("--where", a->curve_where, "key=v1,v2 keeps the points with one of these values (repeatable; the summary with --no-write, --curves, --profile)")
      ->allow_extra_args(false);
  summ->add_option("--digits", a->curve_digits, "--curves: decimals (default 4)");
  summ->add_flag("--transpose", a->curve_transpose, "--curves: one row per point, one column per step");
  summ->add_option("--profile", a->profile,
                   "STEP or last: a per-layer field of metrics.jsonl (--field, default stream_max_abs) layer by layer "
                   "at that step, one column per point (mean ± std over seeds; --where selects)");
  summ->add_option("--plot", a->plot,
                   "--profile: also draw it as an SVG line plot in FILE (replaces only a plot normlab drew)");
  add_global_flags(*summ, g);
  return summ;
}

CLI::App* add_status(CLI::App* sub, const std::shared_ptr<SweepArgs>& a, GlobalOptions& g) {
  CLI::App* status = sub->add_subcommand(
      "status", "Where sweep directories stand: points finished of planned, how they ended, wall clock and run time");
  status->add_option("dirs", a->status_dirs, "Sweep directories (each holds spec.json and manifest.jsonl)")->required();
  add_global_flags(*status, g);
  status->footer(R"(Examples:
  normlab sweep status results/sweeps/*/
  normlab sweep status sweeps/lr --json

A point is finished when its run directory is whole and of the spec's config (as `normlab sweep` decides
what to resume); statuses are its result.json's. Wall clock: the first start to the last end in the
manifest, across resumes; the sum of run times adds each point's last attempt's seconds.)");
  return status;
}

CLI::App* add_render(CLI::App* sub, const std::shared_ptr<SweepArgs>& a, GlobalOptions& g) {
  CLI::App* render = sub->add_subcommand(
      "render", "Regenerate the blocks of a markdown document that cite normlab commands (tables from the sweeps)");
  render->add_option("doc", a->render_doc, "The document (e.g. results/REPRODUCTION.md); rewritten in place")->required();
  render->add_flag("--check", a->render_check, "Write nothing; exit 1 when a block differs from what its command gives now");
  add_global_flags(*render, g);
  render->footer(R"(A block is a directive line, the command's output, and an end marker:

  <!-- normlab: sweep summarize results/sweeps/depth-torch --no-write --brief --paired norm=layernorm -->
  (the output of `normlab sweep summarize ...`, replaced on every render)
  <!-- normlab: end -->

Each command runs as this normlab binary in the current directory; words are split at spaces (no quoting).
Examples:
  normlab sweep render results/REPRODUCTION.md
  normlab sweep render results/REPRODUCTION.md --check)");
  return render;
}

}  // namespace

Runner add_sweep(CLI::App& app, GlobalOptions& g) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* sub = app.add_subcommand("sweep", "Run a grid of train configurations in parallel: resumable, shardable over Slurm, with tables and plots");
  sub->add_option("spec_and_axes", a->positional, "SPEC.json and/or axes key=v1,v2,... (Hydra-style: they override the spec's axes and seeds; key=v of an unvaried key sets the base)");
  sub->add_option("--out", a->out, "The sweep directory (runs, manifest, summaries, plots)");
  sub->add_option("--set", a->sets, "key=value: a base config value (repeatable; config=FILE starts from a config file)")
      ->allow_extra_args(false);
  sub->add_flag("--dry-run", a->dry_run, "List the points with their run names and whether they would run; create nothing");
  a->jobs_opt = sub->add_option("-j,--jobs", a->jobs, "Points at once, at least 1 (default: the number of cores, or SLURM_CPUS_PER_TASK)");
  sub->add_option("--threads", a->threads, "Threads per point, 1 to 1024 (default 1)");
  a->tensorboard_opt = sub->add_option("--tensorboard", a->tensorboard,
                  "Also write TensorBoard event files as the points train: DIR/<point name>/ each (view all with "
                  "tensorboard --logdir DIR)");
  sub->add_option("--rerun", a->rerun, "Also re-run finished points with these statuses (comma list): diverged, completed, all; failed and interrupted points always run again");
  sub->add_flag("--force", a->force, "Run a changed spec over an existing sweep directory");
  sub->add_option("--shard", a->shard, "K/N: run only the K-th of N slices (0-based; default SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT)");
  sub->add_flag("--slurm", a->slurm, "Write DIR/sweep.sbatch (a job array, one task per shard) and print the sbatch line");
  sub->add_flag("--submit", a->submit, "With --slurm: submit it and print the job id");
  a->slurm_shards_opt = sub->add_option("--slurm-shards", a->slurm_shards, "Array tasks, 1 to the number of points (default: one per point)");
  sub->add_option("--slurm-partition", a->slurm_partition, "#SBATCH --partition: a partition name, or a comma list of them");
  sub->add_option("--slurm-time", a->slurm_time, "#SBATCH --time: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED (e.g. 01:00:00)");
  sub->add_option("--slurm-cpus", a->slurm_cpus, "#SBATCH --cpus-per-task, and --jobs of each task, 1 to 1024 (default 1)");
  sub->add_option("--slurm-array-max", a->slurm_array_max, "At most this many array tasks at once (%M; 0 = no limit)");
  add_device_flags(*sub, a->dev);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab sweep --out sweeps/lr lr=1e-4,3e-4,1e-3,3e-3,1e-2 layers=12,30 placement=pre,post seed=0,1,2 --set steps=3000
  normlab sweep experiments/sweep-lr-depth.json --out sweeps/lr --jobs 2
  normlab sweep experiments/sweep-lr-depth.json --out sweeps/lr --dry-run
  normlab sweep experiments/sweep-lr-depth.json --out sweeps/lr --slurm --slurm-shards 8 --slurm-time 02:00:00 --submit
  normlab sweep summarize sweeps/lr --rows lr --cols placement,layers --format csv
  normlab sweep summarize results/sweeps/depth-torch --check
  normlab sweep summarize sweeps/warmup --curves 200,500,1000 --where placement=post
  normlab sweep status sweeps/lr

A spec file: {"base": {"config": "FILE", "steps": 3000, ...}, "grid": {"lr": [1e-4, 1e-3], "placement": ["pre", "post"]},
"zip": {"lr": [...], "warmup_steps": [...]}, "seeds": [0, 1, 2], "summary": {"rows": "lr", "cols": [...], "metric": "final_val_loss"}}.
Runs land in DIR/runs/<key=value/...>; running the same command again resumes (finished points are skipped;
diverged ones are results and are not re-run unless --rerun diverged). See docs/sweep.md.)");

  CLI::App* summ = add_summarize(sub, a, g);
  CLI::App* status = add_status(sub, a, g);
  CLI::App* render = add_render(sub, a, g);
  return [a, summ, status, render, &g] {
    if (render->parsed()) return run_render_command(*a, g);
    if (summ->parsed()) return run_summarize_command(*a, g);
    if (status->parsed()) return run_status_command(*a, g);
    return run_sweep_command(*a, g);
  };
}

}  // namespace normlab::cli
