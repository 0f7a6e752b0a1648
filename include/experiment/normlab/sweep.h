// Sweeps: a grid of train configurations, each point run as its own `normlab train` child process,
// resumable, shardable over a Slurm job array, summarized into tables (md/csv/json) and SVG plots.
//
// A sweep directory DIR holds:
//   spec.json            the resolved spec (base config with every default, axes, seeds, summary layout);
//                        itself a valid spec: `normlab sweep DIR/spec.json --out DIR` resumes the sweep
//   manifest.jsonl       append-only: one line at the start and one at the end of every point attempt
//   points/<hash>.json   the resolved config handed to each point's child process
//   logs/<name>.log      stdout and stderr of each point's last attempt
//   runs/<name>/         one train run directory per point, <name> = varied values, e.g.
//                        runs/layers=2/placement=post/lr=1e-3/seed=0 (written atomically by train)
//   summary.md/.csv/.json, loss_curves.svg, final_loss_vs_lr.svg
//   sweep.sbatch         with --slurm
//   sweep.lock           flock'ed by the sweep that writes DIR (points/<hash>.lock: by the one running the point)
//
// The flow, run_sweep_invocation whole: plan_sweep (parse and validate everything; nothing touched),
// check_run_options and check_slurm_options -> SweepDir (refuses a changed spec, creates and locks
// DIR) -> select_points -> run_sweep -> summarize_sweep + write_summaries.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/names.h"
#include "normlab/stats.h"
#include "normlab/train.h"

namespace normlab {

// ---- the plan --------------------------------------------------------------------------------
// What the command line gives: a spec file and/or Hydra-style axes and base overrides.
struct SweepRequest {
  std::string spec_file;           // JSON spec; empty: axes and sets only
  std::vector<std::string> axes;   // "key=v1,v2,..." (a single value is a base override, as in Hydra)
  std::vector<std::string> sets;   // "key=value" base overrides (--set)
  // Larger grids are refused before they are expanded (the fuzz target plans small ones only).
  size_t max_points = 100000;
  // The user's spec, as a sweep is made or resumed: a relative path (data text:PATH, init_from)
  // names a file from the current directory and is planned, and recorded in spec.json, as its
  // absolute path. Off for a stored spec.json, which is planned as it was recorded.
  bool absolute_paths = false;
  // Each point's inputs checked as a run checks them (a text file read, once per file). Off where a
  // stored spec.json is planned to read what its runs wrote (plan_stored_sweep): reading results
  // does not need the data they were trained on.
  bool check_inputs = true;
};

struct SweepPoint {
  std::string name;   // "layers=2/placement=post/lr=1e-3/seed=0": the varied values, run directory below runs/
  std::vector<std::pair<std::string, std::string>> values;  // varied key -> value as shown in the name
  TrainConfig config;  // fully resolved; threads is set per launch (--threads) and not part of the hash
  std::string hash;    // 16 hex digits: FNV-1a 64 of the resolved config's JSON (threads excluded)
};

struct SummaryLayout {
  std::string rows;               // the row axis (default lr when it varies, else the first varied axis)
  std::vector<std::string> cols;  // column axes (default: every other varied axis but seed)
  std::string metric = "final_val_loss";  // a numeric field of result.json
  std::string paired;  // a reference column (SummaryOptions::paired); empty: none
};

struct SweepPlan {
  std::string spec_json;           // resolved spec, pretty JSON (DIR/spec.json)
  std::vector<std::string> axes;   // varied keys in name order; seed (when varied) is last
  std::vector<SweepPoint> points;  // grid order: the first axis varies slowest
  SummaryLayout layout;            // from the spec's "summary" object, defaults filled in
};

// Parses and validates the whole sweep (every point's config, via TrainConfig::validate) before
// anything is created. Throws UsageError naming the field.
SweepPlan plan_sweep(const SweepRequest& request);
// A sweep directory's spec.json planned as it was recorded, its inputs unchecked: the points whose
// runs summarize, status, curves and resume read.
SweepPlan plan_stored_sweep(const std::string& spec_json);
// The spec keys, for --help and "did you mean".
const std::vector<std::string>& sweep_spec_keys();
// A float value as shown in run names: the shorter of plain and scientific form that reads back exactly
// (1e-3, 3e-4, 0.5, 12).
std::string short_number(double v);

// ---- shards ----------------------------------------------------------------------------------
struct Shard {
  int index = 0, count = 1;  // 0 <= index < count
};
// "K/N" with 0 <= K < N. Throws UsageError.
Shard parse_shard(const std::string& text);
// SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT when both are set, else 0/1.
Shard shard_from_env();
// The points of one shard: every N-th point starting at K (round robin, so each shard gets a mix).
bool in_shard(size_t point_index, const Shard& shard);

// ---- the directory -----------------------------------------------------------------------------
// Checks, without creating anything, that DIR can hold this sweep: DIR (or its nearest existing
// ancestor) is a writable directory, and an existing DIR/spec.json plans the same points. Returns
// what changed (empty: nothing); UsageError when DIR cannot be a sweep directory at all.
std::string check_sweep_dir(const std::string& dir, const SweepPlan& plan);

// A whole run of DIR's stored spec whose config a point of `plan` has under another name: an axis
// was added at the value the base had (or one was removed), which renames the points but not what
// they ran. A --force run moves it to the point's run directory instead of running it again.
struct CarriedRun {
  SweepPoint from;  // the stored spec's point
  size_t to = 0;    // its index in plan.points
  std::string status;  // the run's: completed or diverged
};
std::vector<CarriedRun> runs_to_carry(const std::string& dir, const SweepPlan& plan);

// DIR opened for writing by this process: checked (a changed spec is refused unless force), created
// if absent, locked, the runs a forced changed spec renames moved (runs_to_carry), spec.json
// written, runs/ points/ logs/ made. The lock is an flock on
// DIR/sweep.lock, which the kernel releases however the process ends:
//   exclusive  one sweep at a time: a second one gets a UsageError naming the process that holds it;
//   shared     shards (--shard K/N, a Slurm array on a shared file system) run side by side, each
//              point locked while it runs (run_sweep), and exclude an unsharded sweep.
// Until keep(), the destructor removes what the constructor (and add_created) made, so that a sweep
// stopped by an error before its first point leaves the file system as it was.
class SweepDir {
 public:
  enum class Lock { exclusive, shared };
  SweepDir(const std::string& dir, const SweepPlan& plan, bool force, Lock lock);
  ~SweepDir();
  SweepDir(const SweepDir&) = delete;
  SweepDir& operator=(const SweepDir&) = delete;
  const std::string& path() const { return dir_; }
  // A file or directory the caller made inside DIR: removed with the rest unless kept.
  void add_created(const std::string& path, bool is_dir);
  void keep();
  // Lets others take the lock (the array tasks submitted from here lock DIR themselves); what was
  // created is still removed unless kept, if no one else holds DIR by then.
  void unlock();

 private:
  void lock_or_refuse();
  void rollback();
  std::string dir_;
  Lock mode_;
  int fd_ = -1;
  bool kept_ = false;
  std::vector<std::pair<std::string, bool>> created_;  // path, is a directory; in creation order
};
// SweepDir's work for a caller that does not need the lock or the rollback (tests).
void prepare_sweep_dir(const std::string& dir, const SweepPlan& plan, bool force);

// A point's state on disk: pending (never finished), completed, diverged (both final: the run
// directory is whole and its config hash matches), failed or interrupted (the manifest's last end
// record for the point's hash), running (a start without an end: another shard, or a killed sweep),
// damaged (something is at its run directory that is not a whole run: `problem` says what).
struct PointState {
  std::string status = "pending";
  bool done = false;  // completed or diverged with a matching hash
  std::string problem;  // damaged: "result.json is not valid JSON", "is not a directory", ...
  std::string carried_from;  // dry run: the stored spec's name of the run a --force run moves here
};
std::vector<PointState> point_states(const std::string& dir, const SweepPlan& plan);

// The points to run: in this shard, not done, plus the done ones whose status is in `rerun`
// (failed, interrupted, diverged, completed or all).
std::vector<size_t> select_points(const SweepPlan& plan, const std::vector<PointState>& states, const Shard& shard,
                                  const std::vector<std::string>& rerun);
// What one invocation does with its shard, counted once for `--dry-run` and a real run.
struct ShardWork {
  std::vector<size_t> todo;   // select_points
  std::vector<bool> runs;     // per point of the plan: in todo
  size_t points = 0;          // of the plan, in this shard
  size_t done = 0;            // finished and not run again
  size_t diverged = 0;        // of done
  std::vector<std::pair<std::string, std::string>> damaged;  // in this shard: point name, problem
};
ShardWork shard_work(const SweepPlan& plan, const std::vector<PointState>& states, const Shard& shard,
                     const std::vector<std::string>& rerun);
// Splits and checks a --rerun list ("diverged,failed"). Throws UsageError.
std::vector<std::string> parse_rerun(const std::string& text);

// ---- running -----------------------------------------------------------------------------------
struct SweepRunOptions {
  std::string dir;
  std::string exe;   // the normlab binary the children run (default: /proc/self/exe)
  int jobs = 1;      // points at once
  int threads = 1;   // threads per point
  Shard shard;       // recorded in the manifest
  std::string device = "cpu";  // passed to each point's `train --device` (not part of the hash)
  bool tf32 = false;           // and --tf32
  // A TensorBoard log directory: each point's `train --tensorboard <tensorboard>/<point name>`
  // (so that every point is a run of its own there); empty: none.
  std::string tensorboard;
};
// --jobs and --threads, before anything is created: jobs >= 1, 1 <= threads <= kMaxThreads.
// UsageError naming the flag.
void check_run_options(const SweepRunOptions& opt);

struct PointOutcome {
  size_t point = 0;
  std::string status;    // completed, diverged, failed, interrupted
  int exit_code = -1;    // the child's exit code, -1 when it was killed by a signal
  int signal = 0;        // the signal that ended it, 0 if none
  double seconds = 0;
  double metric = 0;     // final_val_loss (NaN when diverged)
  int64_t diverged_step = -1;
  std::string stderr_tail;  // the last lines of its output (failed points)
};

struct SweepProgress {
  size_t total = 0;     // points this invocation runs
  size_t finished = 0;  // of those
  size_t running = 0, completed = 0, diverged = 0, failed = 0, interrupted = 0;
  size_t skipped = 0;   // of total: started by another process of the same shard since this one began
  double elapsed_s = 0, eta_s = -1;  // -1: no estimate yet
};

struct SweepCallbacks {
  std::function<void(const SweepPoint&, const PointOutcome&, const SweepProgress&)> on_end;
  std::function<void(const SweepProgress&)> on_tick;  // a few times a second
};

struct SweepRunReport {
  SweepProgress progress;
  int signal = 0;  // SIGINT / SIGTERM / SIGHUP that stopped the sweep, 0 if it ran to the end
};
// The exit status of `normlab sweep` after such a run: 128 + the signal that stopped it, 1 when
// a point failed, else 0.
int exit_status(const SweepRunReport& r);

// Runs the chosen points as child processes, `jobs` at once. SIGINT, SIGTERM and SIGHUP are forwarded
// to the children, which end as interrupted; the call then returns promptly with report.signal set.
// Each point is locked (DIR/points/<hash>.lock) while it runs; a point that another process has
// started since this call began is skipped. An error of the sweep's own (a manifest or a point's
// config that cannot be written) stops and reaps the children, then is thrown.
SweepRunReport run_sweep(const SweepPlan& plan, const std::vector<size_t>& todo, const SweepRunOptions& opt,
                         const SweepCallbacks& cb);

// ---- summaries ---------------------------------------------------------------------------------
struct SummaryOptions {
  std::string rows;               // empty: the spec's layout
  std::vector<std::string> cols;  // empty: the spec's layout
  std::string metric;             // empty: the spec's layout
  // What every column is compared with, paired by seed: "key=value ..." for some of the column axes
  // (e.g. "norm=layernorm"): each column's reference has its values on the other column axes and
  // these on the named ones. Empty: the spec's layout (none).
  std::string paired;
  // "key=v1,v2": only the points whose axis key has one of these values (every condition holds).
  std::vector<std::string> where;
};

struct SummaryCell {
  int n = 0;                // seeds that converged: finished, not collapsed, with a finite metric
  int diverged = 0, failed = 0, pending = 0;
  int damaged = 0;          // something that is not a whole run is at the point's run directory
  int collapsed = 0;        // finished but ended having learned nothing (train's status "collapsed"); not in n
  double collapsed_mean = NAN;  // the metric's mean over the collapsed seeds
  double mean = 0, std = 0; // over the n converged seeds (std: sample, n-1; 0 when n = 1)
  int plateaued = 0;        // of the n: sat at the unigram loss for a while, then learned (result.json "plateaus")
  int64_t plateau_first = -1, plateau_last = -1;  // the earliest start and latest end of those spells
  int64_t spikes = -1;      // training-loss spikes summed over the seeds that counted them (-1: none did)
  int64_t diverged_first = -1, diverged_last = -1;    // range of divergence steps
  int64_t collapsed_first = -1, collapsed_last = -1;  // range of the steps they collapsed from
  std::vector<std::string> points;  // point names in the cell
  std::vector<std::string> implied;  // the cell's value of each SweepSummary::implied axis
  bool present = false;     // some point of the plan falls in this cell
};

struct SummaryCurve {
  std::string label;        // the column label plus the row value ("placement=post layers=2 lr=1e-3")
  size_t col = 0, row = 0;
  std::vector<int64_t> steps;
  std::vector<double> mean;  // mean val loss over the seeds that reached the step (NaN: none finite)
  int64_t diverged_step = -1;  // earliest divergence among the seeds, -1 if none
};

struct SweepSummary {
  std::string rows;                        // row axis
  std::vector<std::string> cols;           // column axes
  // Varied axes neither the rows nor a column, which they determine (zipped with one of them):
  // one value per cell (SummaryCell::implied), said beside the table.
  std::vector<std::string> implied;
  std::string metric;
  std::vector<std::string> row_values;     // display text, sorted numerically when numeric
  std::vector<double> row_numbers;         // NaN when not numeric
  std::vector<std::string> col_labels;     // "placement=post layers=2" ("all" with no column axes)
  std::vector<std::vector<std::string>> col_values;  // per column: the value of each column axis
  std::vector<std::vector<SummaryCell>> cells;  // [row][col]
  std::vector<std::vector<size_t>> stable;      // per column: rows where every seed converged (none collapsed)
  std::vector<int> best;                        // per column: best stable row, -1 if none
  std::vector<SummaryCurve> curves;             // every (row, col) with a point that ran
  size_t points = 0, completed = 0, diverged = 0, failed = 0, pending = 0, collapsed = 0, damaged = 0;
  std::vector<std::pair<std::string, std::string>> damaged_runs;  // point name, what is wrong
  // The metric's resolution: the median over the runs of its standard error on the held-out batches
  // (result.json "<metric>_se"), and how many runs reported one (0: runs from before it was measured).
  double resolution = NAN;
  size_t resolution_runs = 0;
  // Paired by seed (SummaryOptions::paired): per row and column, the difference column - its
  // reference column over the seeds where both converged. paired_by: the reference values as given
  // ("" : no comparison); paired_ref[col]: that column's reference (-1: none, or it is one).
  std::string paired_by;
  std::vector<int> paired_ref;
  std::vector<std::vector<PairedDifference>> paired;  // [row][col]
  double unigram_loss = NAN;  // the task's unigram baseline (from the runs), drawn in the plots of a loss
};

// Reads DIR/spec.json and whatever runs are there (a run counts only when its config hash matches).
SweepSummary summarize_sweep(const std::string& dir, const SummaryOptions& opt);
// brief: the table with its stable/best rows, the resolution line and the paired table only (no
// title, legend or curves): what a document cites.
std::string summary_markdown(const SweepSummary& s, bool brief = false);
// The line every summary states its metric's resolution with, and the paired table (empty without
// a reference column); parts of summary_markdown.
std::string resolution_text(const SweepSummary& s);
std::string paired_markdown(const SweepSummary& s, bool brief);
std::string summary_csv(const SweepSummary& s);
std::string summary_json(const SweepSummary& s);
// SVG plots: validation loss by step per configuration (log y; one panel per column, one line per row
// value) and the final metric against the row axis (log x when numeric) with diverged points marked.
std::string plot_loss_curves_svg(const SweepSummary& s);
std::string plot_final_vs_rows_svg(const SweepSummary& s);
// Writes summary.md/.csv/.json, loss_curves.svg and final_loss_vs_lr.svg into DIR, all or none
// (UsageError naming the file that could not be written: a read-only DIR, a file-size limit).
void write_summaries(const std::string& dir, const SweepSummary& s);
// What write_summaries writes: each file's name in DIR and its text.
std::vector<std::pair<std::string, std::string>> summary_files(const SweepSummary& s);
// The summary files of DIR that are missing or differ from what `s` gives (`normlab sweep summarize
// --check`): a committed summary is what the binary writes from the committed runs.
// `files` is summary_files(s), rendered once by the caller (the plots cost most of a check).
std::vector<std::string> stale_summary_files(const std::string& dir,
                                             const std::vector<std::pair<std::string, std::string>>& files);

// ---- curves ------------------------------------------------------------------------------------
// A field of metrics.jsonl at chosen steps for every point of a sweep, mean ± std over the seeds
// (`normlab sweep summarize DIR --curves STEPS`): the curves behind summarize's final numbers.
enum class LayerReduce { max, min, mean, first, last };  // how a per-layer field becomes one number
template <>
const EnumNames& enum_names<LayerReduce>();

struct CurveOptions {
  std::vector<int64_t> steps;           // eval steps of the runs, in the order shown
  std::string field = "val_loss";       // a field of metrics.jsonl
  LayerReduce layers = LayerReduce::max;  // for a per-layer (list) field
  // "key=v1,v2": only the points whose axis key has one of these values (numbers compared as numbers)
  std::vector<std::string> where;
  int digits = 4;          // decimals shown
  bool transpose = false;  // one row per point (default: one row per step)
};
// The markdown table, with its title line. A point's cell averages the seeds whose run reached the
// step ("n=2/3" when some did not), "nan" when a value is not finite, "—" when none has it.
// UsageError when no run of DIR matches.
std::string sweep_curves_markdown(const std::string& dir, const CurveOptions& opt);

// A per-layer field of metrics.jsonl at one step, layer by layer (`normlab sweep summarize DIR
// --profile STEP`): one column per point (mean ± std over its seeds), one row per layer (1 is
// the first block); where the stream leaves a format's range, and at which depth.
struct ProfileOptions {
  int64_t step = -1;                  // an eval step; -1: each run's last record (a diverged run's last finite one)
  std::string field = "stream_max_abs";  // a per-layer (list) field of metrics.jsonl
  std::vector<std::string> where;     // as CurveOptions::where
  int digits = 4;
};
struct LayerProfile {
  std::string name;                 // the point's axes but seed and those all profiles share ("placement=pre")
  std::string shared;               // the axes all profiles share ("layers=20 lr=1e-3"), the same in each
  int runs = 0;                     // seeds with a record at the step
  std::vector<double> mean, std;    // per layer (std NaN with one seed)
};
// The profiles of DIR's matching points; UsageError when none has a record at the step.
std::vector<LayerProfile> sweep_layer_profiles(const std::string& dir, const ProfileOptions& opt);
// The markdown table, with its title line.
std::string layer_profiles_markdown(const std::string& dir, const ProfileOptions& opt,
                                    const std::vector<LayerProfile>& profiles);
// The same as an SVG line plot: layer on x, the field on y (log scale when every value is > 0),
// one line per point. Its first line marks it as normlab's (is_layer_profile_svg).
std::string plot_layer_profiles_svg(const ProfileOptions& opt, const std::vector<LayerProfile>& profiles);
bool is_layer_profile_svg(const std::string& text);

// ---- status ------------------------------------------------------------------------------------
// Where a sweep directory stands (`normlab sweep status`): the points finished of those its spec
// plans (finished as the runner decides: a whole run directory of the point's config), how they
// ended, and what they cost according to the manifest (read as the runner reads it).
struct SweepStatus {
  std::string dir;
  std::vector<std::string> inits;  // the planned points' init schemes, in plan order, each once
  size_t points = 0, finished = 0;
  std::vector<std::pair<std::string, size_t>> statuses;  // of the finished, by result.json's status, sorted
  double wall_seconds = 0;  // the first start to the last end, across resumes (0: nothing ended)
  double run_seconds = 0;   // the sum over points of their last attempt's own seconds
};
// Reads DIR/spec.json, DIR/manifest.jsonl and the run directories; UsageError naming what is missing.
SweepStatus sweep_status(const std::string& dir);
// One row per sweep: | sweep | init | points done | statuses | wall clock | sum of run times |.
std::string sweep_status_markdown(const std::vector<SweepStatus>& sweeps);
std::string sweep_status_json(const std::vector<SweepStatus>& sweeps);

// ---- Slurm -------------------------------------------------------------------------------------
struct SlurmOptions {
  std::string exe;        // absolute path of normlab
  std::string partition;  // empty: the cluster's default
  std::string time;       // e.g. 01:00:00; empty: the partition's default
  int cpus = 1;           // cpus per array task (= --jobs of each task)
  int threads = 1;        // threads per point
  int array_max = 0;      // at most this many tasks at once (%M); 0 = no limit
  int shards = 1;         // array tasks
  std::vector<std::string> rerun;
  std::string tensorboard;  // passed to each task's sweep (SweepRunOptions::tensorboard); absolute
};
// Everything that goes into the script, against Slurm's own syntax, before anything is created:
// --slurm-time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, UNLIMITED), --slurm-partition (a comma list of
// names), the numbers (1 <= shards <= points), and paths without control characters (a newline would
// start a line of the script, a directive among them) or backslashes (Slurm's --output reads one as
// "no %A/%a patterns"). points 0: not known (no upper bound on shards). UsageError naming the flag.
void check_slurm_options(const std::string& dir, const SlurmOptions& opt, size_t points);
// The sbatch script: one array task per shard, each running `normlab sweep DIR/spec.json --out DIR
// --shard $SLURM_ARRAY_TASK_ID/N`. Directive values are quoted for sbatch's parser, the command for
// the shell. Calls check_slurm_options.
std::string sbatch_script(const std::string& dir, const SlurmOptions& opt);
// Writes DIR/sweep.sbatch (and makes DIR/slurm for the tasks' output), both removed with the rest of
// what `d` created unless kept. Returns the script's path.
std::string write_sbatch_script(SweepDir& d, const SlurmOptions& opt);
// UsageError unless an executable sbatch is on PATH (checked before --submit creates anything).
void check_sbatch_available();
// Runs `sbatch --parsable SCRIPT` and returns the job id. Throws Error with sbatch's message.
std::string submit_sbatch(const std::string& script_path);

// ---- one invocation of `normlab sweep` ------------------------------------------------------------
// The workflow the command runs, whole: plan, check every option, then a dry run (nothing created),
// the Slurm script (written, and submitted), or the points run here and DIR's summaries rewritten.
struct SweepInvocation {
  SweepRequest request;          // the spec file, axes and --set
  SweepRunOptions run;           // DIR, jobs, threads, shard, device, tensorboard
  std::vector<std::string> rerun;  // parse_rerun's statuses
  bool force = false;            // a changed spec: keep the points whose runs are of its config, run the rest
  bool dry_run = false;          // say what would run; create nothing
  bool slurm = false, submit = false;
  // With slurm: partition, time, cpus and array_max as given; shards -1 = one per point. exe,
  // threads, rerun and tensorboard are filled in from the invocation.
  SlurmOptions slurm_options;
};
struct SweepInvocationResult {
  SweepPlan plan;
  ShardWork work;                  // this shard's points: what runs, what is done
  std::vector<PointState> states;  // dry run: each point's state, as `work` counted it
  std::string changed;             // dry run: how the spec differs from DIR's ("": it does not)
  std::string sbatch_script, job_id;  // slurm: the script written; with submit, the job's id
  int slurm_shards = 0;
  SweepRunReport report;  // a run here
  SweepSummary summary;   // a run here: every run in DIR, other shards' included
};
// on_start (may be empty) is called once the points to run are known, before the first starts.
// UsageError before anything is created for a bad option; a run's errors as run_sweep's.
SweepInvocationResult run_sweep_invocation(const SweepInvocation& inv, const SweepCallbacks& cb,
                                           const std::function<void(const ShardWork&)>& on_start);

}  // namespace normlab
