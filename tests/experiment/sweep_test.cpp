// Sweep tests: planning and names, and the whole workflow (run_sweep_invocation, summaries, curves,
// profiles, status) in process, its points run as child `normlab train`s: shards merging into the
// unsharded summary, diverged points (never re-run by default, never best), changed specs. The built
// binary where the test is about the command or the process: bad flags (one error line, exit 2,
// nothing created), resume after SIGKILL at several moments, SIGTERM, locks, Slurm, what it prints.
//   ./build/normlab_tests --gtest_filter='Sweep*'
// Points are tiny (2 layers, d_model 16, 40 steps: ~40 ms each) so the file runs in seconds.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_util.h"
#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/parse.h"
#include "normlab/sweep.h"

namespace normlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::CliResult;
using test::describe;
using test::expect_one_error_line;
using test::run_cli;
using test::slurp;

// A fresh directory under /tmp, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/normlab_sweep_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The grid of most tests: 3 lr x 2 placements x 2 seeds = 12 points; lr 1e30 diverges at step 2.
std::vector<std::string> grid_args(const std::string& out) {
  return {"sweep",        "--out",        out,           "--jobs",         "2",
          "--set",        "layers=2",     "--set",       "d_model=16",     "--set",
          "d_hidden=32",  "--set",        "steps=40",    "--set",          "eval_every=10",
          "--set",        "batch_size=4", "--set",       "eval_batches=2", "lr=1e-3,1e-2,1e30",
          "placement=pre,post",           "seed=0,1"};
}

// ---- the library, in process ---------------------------------------------------------------------
// Where a test checks what the library computes, it asks the library directly, so that a failure
// points at the library and the test does not pay a process per question. The command's own
// wiring keeps its tests below. The points still run as child `normlab train` processes.

// `normlab sweep [SPEC] AXES --set SETS --out DIR --jobs JOBS` as the invocation the command makes
// of its flags (sweep_command.cpp, invocation_of).
SweepInvocation sweep_of(const std::string& dir, const std::vector<std::string>& axes,
                         const std::vector<std::string>& sets, const std::string& spec_file = "", int jobs = 2) {
  SweepInvocation inv;
  inv.request.spec_file = spec_file;
  inv.request.axes = axes;
  inv.request.sets = sets;
  inv.request.absolute_paths = true;
  inv.run.dir = dir;
  inv.run.exe = NORMLAB_BINARY;
  inv.run.jobs = jobs;
  return inv;
}

// grid_args(out) as that invocation.
SweepInvocation grid_sweep(const std::string& out) {
  return sweep_of(out, {"lr=1e-3,1e-2,1e30", "placement=pre,post", "seed=0,1"},
                  {"layers=2", "d_model=16", "d_hidden=32", "steps=40", "eval_every=10", "batch_size=4", "eval_batches=2"});
}

SweepInvocationResult run_in_process(const SweepInvocation& inv) { return run_sweep_invocation(inv, {}, {}); }

// The exit status the command gives such a run (the library's one definition).
int exit_status(const SweepInvocationResult& r) { return normlab::exit_status(r.report); }

// `normlab sweep summarize DIR --no-write [--brief]` with these options: the markdown it prints.
std::string summary_md(const std::string& dir, const SummaryOptions& opt = {}, bool brief = false) {
  return summary_markdown(summarize_sweep(dir, opt), brief);
}

// `normlab sweep summarize DIR` without --no-write: the summary, written into DIR as the command does.
SweepSummary summarize_writing(const std::string& dir, const SummaryOptions& opt = {}) {
  SweepSummary s = summarize_sweep(dir, opt);
  write_summaries(dir, s);
  return s;
}

// What `normlab sweep summarize DIR --check` finds: DIR's summary files that differ from what its runs give.
std::vector<std::string> stale_summaries(const std::string& dir) {
  return stale_summary_files(dir, summary_files(summarize_sweep(dir, {})));
}

SummaryOptions paired_on(const std::string& column, const std::string& metric = "") {
  SummaryOptions o;
  o.metric = metric;
  o.paired = column;
  return o;
}

SummaryOptions with_metric(const std::string& metric) { return paired_on("", metric); }

// The library's side of a refusal the command prints as one `error: ` line with exit 2: a
// UsageError saying `says`, on one line.
void expect_usage_error(const std::function<void()>& call, const std::string& says) {
  try {
    call();
    ADD_FAILURE() << "no UsageError; expected one saying: " << says;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(says), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

std::vector<json> manifest(const std::string& dir) {
  std::vector<json> out;
  std::ifstream in(dir + "/manifest.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

size_t count_events(const std::vector<json>& m, const std::string& event, const std::string& status = "") {
  size_t n = 0;
  for (const json& j : m) n += j["event"] == event && (status.empty() || j.value("status", "") == status);
  return n;
}

// The three summaries, which must not depend on how (or in how many pieces) the sweep ran.
std::string summaries(const std::string& dir) {
  return slurp(dir + "/summary.md") + slurp(dir + "/summary.csv") + slurp(dir + "/summary.json");
}

// Seconds since the epoch of the manifest's "2026-11-30T18:53:25Z", and back.
double epoch_seconds(const std::string& iso) {
  std::tm tm{};
  const char* end = ::strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  EXPECT_TRUE(end != nullptr && *end == '\0') << iso;
  return static_cast<double>(::timegm(&tm));
}

std::string iso_time(double seconds) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Starts normlab in the background (output discarded); returns its pid.
pid_t spawn(const std::vector<std::string>& args) {
  std::vector<std::string> full = {NORMLAB_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits until the manifest holds at least `ends` end records. The sweep exiting first, or no
// such record within a hang guard's time, fails the test with what was awaited; false then.
// The sweep is never reaped here, so the caller's kill cannot hit a reused pid and its waitpid
// sees how the sweep really ended.
bool wait_for_ends(pid_t pid, const std::string& dir, size_t ends) {
  auto ends_so_far = [&] {
    std::error_code ec;
    if (!fs::exists(dir + "/manifest.jsonl", ec)) return size_t{0};
    const std::string m = slurp(dir + "/manifest.jsonl");
    size_t n = 0;
    for (size_t p = m.find("\"event\":\"end\""); p != std::string::npos; p = m.find("\"event\":\"end\"", p + 1)) ++n;
    return n;
  };
  bool exited = false;
  const std::string what = std::to_string(ends) + " end records in " + dir + "/manifest.jsonl";
  const bool ok = normlab::test::wait_until(
      [&] {
        siginfo_t info{};
        exited = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
        return exited || ends_so_far() >= ends;
      },
      what);
  if (ok && exited && ends_so_far() < ends) {
    ADD_FAILURE() << "the sweep exited with " << ends_so_far() << " of the " << what;
    return false;
  }
  return ok;
}

// Options that run the points of DIR tmp/s with a shell script (`body`) in place of normlab.
SweepRunOptions with_fake_normlab(const TempDir& tmp, const std::string& body, int jobs) {
  std::ofstream(tmp / "fake-normlab.sh") << "#!/bin/sh\n" << body << "\n";
  ::chmod((tmp / "fake-normlab.sh").c_str(), 0755);
  SweepRunOptions opt;
  opt.dir = tmp / "s";
  opt.exe = tmp / "fake-normlab.sh";
  opt.jobs = jobs;
  return opt;
}

// ---- planning ---------------------------------------------------------------------------------

TEST(SweepPlan, AxesMakeTheProductWithNamesFromTheValues) {
  SweepRequest req;
  req.axes = {"lr=1e-4,3e-4,1e-3,3e-3,1e-2", "layers=2,3", "placement=pre,post", "seed=0,1"};
  req.sets = {"steps=20"};
  SweepPlan plan = plan_sweep(req);
  ASSERT_EQ(plan.points.size(), 40u);
  EXPECT_EQ(plan.points.front().name, "lr=1e-4/layers=2/placement=pre/seed=0");
  EXPECT_EQ(plan.points[1].name, "lr=1e-4/layers=2/placement=pre/seed=1");
  EXPECT_EQ(plan.points.back().name, "lr=1e-2/layers=3/placement=post/seed=1");
  EXPECT_EQ(plan.axes, (std::vector<std::string>{"lr", "layers", "placement", "seed"}));
  EXPECT_EQ(plan.points.back().config.steps, 20);
  EXPECT_DOUBLE_EQ(plan.points.back().config.lr, 1e-2);
  EXPECT_EQ(plan.layout.rows, "lr");
  EXPECT_EQ(plan.layout.cols, (std::vector<std::string>{"layers", "placement"}));
  // hashes: distinct per point, and the same config always hashes the same
  std::set<std::string> hashes;
  for (const SweepPoint& p : plan.points) hashes.insert(p.hash);
  EXPECT_EQ(hashes.size(), plan.points.size());
  EXPECT_EQ(plan_sweep(req).points[7].hash, plan.points[7].hash);
}

TEST(SweepPlan, ResolvedSpecPlansTheSamePoints) {
  TempDir tmp;
  std::ofstream(tmp / "spec.json") << R"({"base": {"steps": 30, "layers": 2},
    "grid": {"placement": ["pre", "post"]}, "zip": {"lr": [1e-3, 3e-3], "warmup_steps": [5, 10]}, "seeds": [0, 1]})";
  SweepPlan a = plan_sweep({tmp / "spec.json", {}, {}});
  ASSERT_EQ(a.points.size(), 8u);
  EXPECT_EQ(a.points[0].name, "placement=pre/lr=1e-3/warmup_steps=5/seed=0");
  EXPECT_EQ(a.points[3].name, "placement=pre/lr=3e-3/warmup_steps=10/seed=1");
  write_file_atomic(tmp / "resolved.json", a.spec_json);
  SweepPlan b = plan_sweep({tmp / "resolved.json", {}, {}});
  EXPECT_EQ(a.spec_json, b.spec_json);
  ASSERT_EQ(a.points.size(), b.points.size());
  for (size_t i = 0; i < a.points.size(); ++i) {
    EXPECT_EQ(a.points[i].name, b.points[i].name);
    EXPECT_EQ(a.points[i].hash, b.points[i].hash);
  }
  // The same grid from the command line is the same sweep.
  SweepPlan c = plan_sweep({"", {"placement=pre,post", "seed=0,1"}, {"steps=30", "layers=2", "lr=1e-3"}});
  SweepPlan d = plan_sweep({"", {"placement=pre,post", "seed=0,1"}, {"steps=30", "layers=2", "lr=0.001"}});
  EXPECT_EQ(c.spec_json, d.spec_json);
}

// A zip is a list of points: precision fp32 has no norm_compute (null: the base's value, left out of
// the run name, "-" in summaries) while bf16 and fp16 each take two.
TEST(SweepPlan, ZipRepeatsValuesAndLeavesNullUnset) {
  TempDir tmp;
  std::ofstream(tmp / "spec.json") << R"({"base": {"steps": 30, "layers": 2},
    "zip": {"precision": ["fp32", "bf16", "bf16", "fp16"], "norm_compute": [null, "format", "fp32", "format"]}})";
  SweepPlan a = plan_sweep({tmp / "spec.json", {}, {}});
  ASSERT_EQ(a.points.size(), 4u);
  EXPECT_EQ(a.points[0].name, "precision=fp32");
  EXPECT_EQ(a.points[0].values[1], (std::pair<std::string, std::string>{"norm_compute", "-"}));
  EXPECT_EQ(a.points[2].name, "precision=bf16/norm_compute=fp32");
  EXPECT_EQ(a.points[2].config.storage(), Precision::bf16);
  EXPECT_EQ(a.points[2].config.norm_compute, NormCompute::fp32);
  EXPECT_EQ(a.points[0].config.storage(), Precision::fp32);
  EXPECT_FALSE(a.points[0].config.norm_compute.has_value());
  write_file_atomic(tmp / "resolved.json", a.spec_json);
  SweepPlan b = plan_sweep({tmp / "resolved.json", {}, {}});
  EXPECT_EQ(a.spec_json, b.spec_json);
  for (size_t i = 0; i < a.points.size(); ++i) EXPECT_EQ(a.points[i].hash, b.points[i].hash);
}

// A one-axis sweep paired over its axis (A vs B, the commonest comparison): the axis becomes the one
// column and the rows one row, in the plan, in its resolved spec and when planned again from it.
TEST(SweepPlan, PairedOverTheOnlyAxisMakesItTheColumn) {
  TempDir tmp;
  std::ofstream(tmp / "spec.json") << R"({"base": {"steps": 30, "layers": 2, "model": "gpt"}, "grid": {"qk_norm": [false, true]},
    "seeds": [0, 1], "summary": {"paired": "qk_norm=false"}})";
  SweepPlan a = plan_sweep({tmp / "spec.json", {}, {}});
  EXPECT_EQ(a.layout.rows, "");
  EXPECT_EQ(a.layout.cols, (std::vector<std::string>{"qk_norm"}));
  write_file_atomic(tmp / "resolved.json", a.spec_json);
  SweepPlan b = plan_sweep({tmp / "resolved.json", {}, {}});
  EXPECT_EQ(b.layout.rows, "");
  EXPECT_EQ(a.spec_json, b.spec_json);
  // Without paired, the axis stays the rows; paired over another key is still refused.
  std::ofstream(tmp / "plain.json") << R"({"base": {"steps": 30, "model": "gpt"}, "grid": {"qk_norm": [false, true]}, "seeds": [0, 1]})";
  EXPECT_EQ(plan_sweep({tmp / "plain.json", {}, {}}).layout.rows, "qk_norm");
  std::ofstream(tmp / "other.json") << R"({"base": {"steps": 30, "model": "gpt"}, "grid": {"qk_norm": [false, true]},
    "summary": {"paired": "norm=rmsnorm"}})";
  try {
    plan_sweep({tmp / "other.json", {}, {}});
    ADD_FAILURE() << "paired over a key that is not an axis was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("names 'norm', which is not a column axis"), std::string::npos) << e.what();
  }
}

// The command line overrides the spec: an axis the spec varies, or its seeds, take the values
// given, even a single one (the run paths keep the spec's layout); a key in the spec's zip is refused.
TEST(SweepPlan, CommandLineAxesOverrideTheSpecsAxesAndSeeds) {
  TempDir tmp;
  std::ofstream(tmp / "spec.json") << R"({"base": {"steps": 30, "layers": 2, "init": "torch"},
    "grid": {"placement": ["pre", "post"], "norm": ["layernorm", "rmsnorm"]}, "seeds": [0, 1, 2]})";
  SweepPlan one = plan_sweep({tmp / "spec.json", {"seed=0", "init=gpt2"}, {}});
  ASSERT_EQ(one.points.size(), 4u);
  EXPECT_EQ(one.points[0].name, "placement=pre/norm=layernorm/seed=0");
  EXPECT_EQ(one.points[0].config.model.init, InitScheme::gpt2);
  SweepPlan narrowed = plan_sweep({tmp / "spec.json", {"placement=post", "seed=1,2"}, {}});
  ASSERT_EQ(narrowed.points.size(), 4u);
  EXPECT_EQ(narrowed.points[0].name, "placement=post/norm=layernorm/seed=1");
  EXPECT_EQ(narrowed.points[3].name, "placement=post/norm=rmsnorm/seed=2");

  std::ofstream(tmp / "zipped.json") << R"({"base": {"steps": 30}, "zip": {"lr": [1e-3, 3e-3], "warmup_steps": [5, 10]}})";
  try {
    plan_sweep({tmp / "zipped.json", {"lr=1e-3"}, {}});
    ADD_FAILURE() << "an axis of the spec's zip was overridden silently";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("zip"), std::string::npos) << e.what();
  }
}

TEST(SweepPlan, NumbersAndShards) {
  EXPECT_EQ(short_number(1e-3), "1e-3");
  EXPECT_EQ(short_number(3e-4), "3e-4");
  EXPECT_EQ(short_number(0.5), "0.5");
  EXPECT_EQ(short_number(12), "12");
  EXPECT_EQ(short_number(0.25), "0.25");
  EXPECT_EQ(parse_shard("1/4").index, 1);
  EXPECT_EQ(parse_shard("1/4").count, 4);
  EXPECT_THROW(parse_shard("3/2"), UsageError);
  EXPECT_THROW(parse_shard("0/0"), UsageError);
  EXPECT_THROW(parse_shard("4/4"), UsageError);
  EXPECT_THROW(parse_shard("a/2"), UsageError);
  EXPECT_THROW(parse_shard("1"), UsageError);
  Shard s{1, 3};
  EXPECT_FALSE(in_shard(0, s));
  EXPECT_TRUE(in_shard(1, s));
  EXPECT_TRUE(in_shard(4, s));
}

// What `sweep --dry-run` and a real run count, from the points' states: one function for both.
TEST(SweepPlan, ShardWorkCountsThePointsOfTheShard) {
  SweepPlan plan = plan_sweep({"", {"lr=1e-3,2e-3,3e-3,4e-3,5e-3"}, {"steps=5"}});
  std::vector<PointState> st(5);
  st[0].status = "completed", st[0].done = true;
  st[1].status = "diverged", st[1].done = true;
  st[2].status = "damaged", st[2].problem = "result.json is not valid JSON";
  st[3].status = "diverged", st[3].done = true;
  ShardWork all = shard_work(plan, st, {}, {});
  EXPECT_EQ(all.points, 5u);
  EXPECT_EQ(all.todo, (std::vector<size_t>{2, 4}));
  EXPECT_EQ(all.runs, (std::vector<bool>{false, false, true, false, true}));
  EXPECT_EQ(all.done, 3u);
  EXPECT_EQ(all.diverged, 2u);
  ASSERT_EQ(all.damaged.size(), 1u);
  EXPECT_EQ(all.damaged[0].first, plan.points[2].name);
  ShardWork rerun = shard_work(plan, st, {}, {"diverged"});  // run again: no longer done
  EXPECT_EQ(rerun.todo, (std::vector<size_t>{1, 2, 3, 4}));
  EXPECT_EQ(rerun.done, 1u);
  EXPECT_EQ(rerun.diverged, 0u);
  ShardWork second = shard_work(plan, st, Shard{1, 2}, {});  // points 1 and 3
  EXPECT_EQ(second.points, 2u);
  EXPECT_TRUE(second.todo.empty());
  EXPECT_EQ(second.done, 2u);
  EXPECT_EQ(second.diverged, 2u);
  EXPECT_TRUE(second.damaged.empty());
}

// ---- bad input: one line, exit 2, nothing created ------------------------------------------------

struct BadCase {
  std::string name, spec;             // spec text ("" = none)
  std::vector<std::string> args;      // after `sweep`
  std::string expect;                 // a substring of the error line
};

TEST(SweepErrors, OneLineExit2NothingCreated) {
  TempDir tmp;
  std::ofstream(tmp / "file") << "not a directory";
  const std::vector<BadCase> cases = {
      {"unknown config key", R"({"base": {"lrr": 1e-3}, "grid": {"layers": [2, 3]}})", {}, "did you mean 'lr'"},
      {"unknown grid key", R"({"grid": {"placment": ["pre", "post"]}})", {}, "did you mean 'placement'"},
      {"unknown spec key", R"({"gird": {"layers": [2, 3]}})", {}, "did you mean 'grid'"},
      {"empty axis", R"({"grid": {"layers": []}})", {}, "grid.layers is empty"},
      {"empty cli axis", "", {"layers="}, "empty"},
      {"wrong type", R"({"grid": {"layers": [2, "three"]}})", {}, "grid.layers[1]"},
      {"wrong type in base", R"({"base": {"lr": "fast"}})", {}, "base.lr"},
      {"wrong cli type", "", {"lr=1e-3,fast"}, "lr"},
      {"invalid base", R"({"base": {"steps": -1}, "grid": {"layers": [2, 3]}})", {}, "steps must be >= 0"},
      {"invalid point", R"({"grid": {"lr": [1e-3, -1]}})", {}, "lr must be > 0"},
      {"zip lengths", R"({"zip": {"lr": [1e-3, 3e-3], "warmup_steps": [10]}})", {}, "equal lengths"},
      {"zip point twice", R"({"zip": {"lr": [1e-3, 3e-3, 1e-3], "warmup_steps": [10, 10, 10]}})", {},
       "lists the point lr=0.001 warmup_steps=10 twice (values 1 and 3)"},
      {"zip all null", R"({"zip": {"lr": [1e-3, 3e-3], "warmup_steps": [null, null]}})", {}, "null at every point"},
      {"zip null in a grid", R"({"grid": {"layers": [2, null]}})", {}, "grid.layers[1]"},
      {"seed twice", R"({"grid": {"seed": [0, 1]}, "seeds": [2]})", {}, "seed"},
      {"shard 3/2", R"({"grid": {"layers": [2, 3]}})", {"--shard", "3/2"}, "--shard"},
      {"shard 0/0", R"({"grid": {"layers": [2, 3]}})", {"--shard", "0/0"}, "--shard"},
      {"not json", "{grid: ", {}, "not valid JSON"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> args = {"sweep", "--out", tmp / "out"};
    if (!c.spec.empty()) {
      std::ofstream(tmp / "spec.json") << c.spec;
      args.push_back(tmp / "spec.json");
    }
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(test::split_lines(r.err).size(), 1u) << describe(r);
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << describe(r);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << describe(r);
    EXPECT_FALSE(fs::exists(tmp / "out")) << c.name;
  }
  // An unwritable DIR: under a regular file (root may write anywhere else).
  CliResult r = run_cli({"sweep", "--out", tmp / "file/out", "layers=2,3"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(test::split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_NE(r.err.find("not a directory"), std::string::npos) << describe(r);
  if (::geteuid() != 0) {
    fs::create_directories(tmp / "ro");
    ::chmod((tmp / "ro").c_str(), 0555);
    CliResult r2 = run_cli({"sweep", "--out", tmp / "ro/out", "layers=2,3"});
    EXPECT_EQ(r2.exit_code, 2) << describe(r2);
    EXPECT_FALSE(fs::exists(tmp / "ro/out"));
  }
  // SLURM variables that do not describe a 0-based array are an error too.
  test::RunOptions env;
  env.env = {{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "2"}};
  CliResult r3 = run_cli({"sweep", "--out", tmp / "out", "layers=2,3"}, env);
  EXPECT_EQ(r3.exit_code, 2) << describe(r3);
  EXPECT_NE(r3.err.find("SLURM_ARRAY_TASK_ID"), std::string::npos) << describe(r3);
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

TEST(SweepErrors, DryRunListsPointsAndCreatesNothing) {
  TempDir tmp;
  CliResult r = run_cli({"sweep", "--out", tmp / "out", "--dry-run", "lr=1e-3,1e-2", "layers=2,3", "--set", "steps=5"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("run   pending     lr=1e-3/layers=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 points: 4 to run, 0 already done"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

// ---- running ---------------------------------------------------------------------------------------

// One uninterrupted sweep, shared by the tests below as the reference summary.
class SweepRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ref_ = new TempDir;
    CliResult r = run_cli(grid_args(*ref_ / "ref"));
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    ref_summary_ = new std::string(summaries(*ref_ / "ref"));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete ref_summary_;
  }
  static TempDir* ref_;
  static std::string* ref_summary_;
};
TempDir* SweepRun::ref_ = nullptr;
std::string* SweepRun::ref_summary_ = nullptr;

// A changed spec (one more lr): the dry run counts the points a --force run keeps (whole runs of
// the same config), as the forced run itself then does; it said "0 already done" before.
TEST_F(SweepRun, DryRunOnAChangedSpecCountsWhatAForcedRunKeeps) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  std::vector<std::string> args = grid_args(dir);
  std::replace(args.begin(), args.end(), std::string("lr=1e-3,1e-2,1e30"), std::string("lr=1e-3,1e-2,1e30,3e-3"));
  args.push_back("--dry-run");
  CliResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("16 points: 4 to run, 12 already done"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: the spec differs"), std::string::npos) << r.out;
  SweepInvocation forced = grid_sweep(dir);
  forced.request.axes[0] = "lr=1e-3,1e-2,1e30,3e-3";
  forced.force = true;
  const SweepInvocationResult run = run_in_process(forced);
  ASSERT_EQ(exit_status(run), 0);
  EXPECT_EQ(run.work.todo.size(), 4u);  // "4 to run, 12 already done"
  EXPECT_EQ(run.work.done, 12u);
}

// An axis added at the value the base had renames every point but changes no config: a --force run
// moves the 12 runs to their new names (the dry run says which) and runs only the 12 new points.
TEST_F(SweepRun, AnAxisAddedAtTheBaseValueCarriesTheRunsOver) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  SweepInvocation widened = grid_sweep(dir);
  std::vector<std::string>& sets = widened.request.sets;
  sets.erase(std::find(sets.begin(), sets.end(), std::string("eval_batches=2")));
  widened.request.axes.insert(widened.request.axes.begin(), "eval_batches=2,3");
  widened.dry_run = true;
  const SweepInvocationResult dry = run_in_process(widened);
  ASSERT_EQ(dry.plan.points.size(), 24u);
  EXPECT_EQ(dry.work.todo.size(), 12u);
  std::map<std::string, std::string> moves;  // new name -> old
  for (size_t i = 0; i < dry.plan.points.size(); ++i)
    if (!dry.states[i].carried_from.empty()) moves[dry.plan.points[i].name] = dry.states[i].carried_from;
  ASSERT_EQ(moves.size(), 12u);
  EXPECT_EQ(moves["eval_batches=2/lr=1e-3/placement=pre/seed=1"], "lr=1e-3/placement=pre/seed=1");
  EXPECT_TRUE(fs::exists(dir + "/runs/lr=1e-3/placement=pre/seed=1/result.json"));  // the dry run moved nothing
  widened.dry_run = false;
  widened.force = true;
  const SweepInvocationResult r = run_in_process(widened);
  ASSERT_EQ(exit_status(r), 0);
  EXPECT_EQ(r.work.todo.size(), 12u);
  EXPECT_EQ(r.work.done, 12u);
  for (const auto& [to, from] : moves) {
    EXPECT_FALSE(fs::exists(dir + "/runs/" + from)) << from;
    EXPECT_EQ(slurp(dir + "/runs/" + to + "/result.json"), slurp(*ref_ / "ref/runs/" + from + "/result.json")) << to;
  }
  EXPECT_FALSE(fs::exists(dir + "/runs/lr=1e-3"));  // emptied by the moves, so removed
  const std::vector<json> m = manifest(dir);
  EXPECT_EQ(count_events(m, "start"), 24u);  // 12 from the reference, 12 new: none of the moved ones again
  EXPECT_EQ(std::count_if(m.begin(), m.end(), [](const json& e) { return e.contains("moved_from"); }), 12);
  EXPECT_NE(slurp(dir + "/summary.md").find("24 points: 16 completed (6 collapsed), 8 diverged, 0 failed, 0 pending"),
            std::string::npos) << slurp(dir + "/summary.md");
}

// A one-axis sweep compared with --paired has no row axis: no best anywhere (markdown, CSV,
// JSON), and the curves of every column are shown.
// A zip that leaves norm_compute unset for precision fp32: the fp32 column is the reference of
// every low-precision column (its "-" stands for any value), paired by seed.
TEST(SweepSummaryZip, UnsetReferenceIsPairedWithEveryValue) {
  TempDir tmp;
  std::ofstream(tmp / "spec.json") << R"({"base": {"layers": 2, "d_model": 16, "d_hidden": 32, "steps": 60,
    "eval_every": 20, "batch_size": 8, "eval_batches": 2},
    "grid": {"lr": [3e-2]}, "zip": {"precision": ["fp32", "bf16", "bf16"], "norm_compute": [null, "format", "fp32"]},
    "seeds": [0, 1], "summary": {"rows": "lr", "cols": ["precision", "norm_compute"], "paired": "precision=fp32"}})";
  const std::string dir = tmp / "s";
  ASSERT_EQ(exit_status(run_in_process(sweep_of(dir, {}, {}, tmp / "spec.json"))), 0);
  EXPECT_TRUE(fs::exists(dir + "/runs/lr=0.03/precision=fp32/seed=0/result.json"));
  EXPECT_TRUE(fs::exists(dir + "/runs/lr=0.03/precision=bf16/norm_compute=fp32/seed=1/result.json"));
  const std::string md = summary_md(dir);
  for (const char* diff : {"precision=bf16 norm_compute=format − precision=fp32 norm_compute=-",
                           "precision=bf16 norm_compute=fp32 − precision=fp32 norm_compute=-"})
    EXPECT_NE(md.find(diff), std::string::npos) << diff << "\n" << md;
  EXPECT_NE(md.find(" [-"), std::string::npos) << md;  // an interval, from two seeds
}

// Axes zipped together move together: with d_model as the rows, d_hidden (zipped with it) has one
// value per cell and needs no place in the table, nor does it keep the seeds from pairing. An
// axis the rows and columns do not determine still must have a place.
TEST(SweepSummaryZip, AnAxisZippedWithTheRowsNeedsNoPlace) {
  TempDir tmp;
  std::ofstream(tmp / "spec.json") << R"({"base": {"layers": 2, "steps": 60, "eval_every": 20, "batch_size": 8,
    "eval_batches": 2, "lr": 3e-2}, "grid": {"placement": ["pre", "post"]}, "zip": {"d_model": [16, 32], "d_hidden": [32, 64]},
    "seeds": [0, 1], "summary": {"rows": "d_model", "cols": ["placement"], "paired": "placement=pre"}})";
  const std::string dir = tmp / "s";
  ASSERT_EQ(exit_status(run_in_process(sweep_of(dir, {}, {}, tmp / "spec.json"))), 0);
  const SweepSummary s = summarize_sweep(dir, {});
  const std::string brief = summary_markdown(s, true);
  EXPECT_NE(brief.find("| d_model | placement=pre | placement=post |"), std::string::npos) << brief;
  EXPECT_NE(brief.find("placement=post − placement=pre"), std::string::npos) << brief;
  EXPECT_NE(brief.find(" [-"), std::string::npos) << brief;  // paired by seed: an interval
  EXPECT_NE(brief.find("d_hidden follows d_model: 32, 64 (by row)."), std::string::npos) << brief;
  const std::string csv = summary_csv(s);
  EXPECT_NE(csv.find(",d_hidden\n"), std::string::npos) << csv;  // the implied axis, a column of its own
  SummaryOptions by_hidden = paired_on("d_hidden=32");
  by_hidden.rows = "placement";
  by_hidden.cols = {"d_hidden"};
  const std::string md = summary_md(dir, by_hidden);  // d_model, zipped with the column, is implied too
  EXPECT_NE(md.find("d_model follows the columns: 16, 32 (by column)."), std::string::npos) << md;
  // Without the zip's members, nothing determines them: the layout is refused, naming the axis.
  std::ofstream(tmp / "bad.json") << R"({"base": {"steps": 20}, "grid": {"placement": ["pre", "post"], "lr": [1e-3, 3e-3]},
    "zip": {"d_model": [16, 32], "d_hidden": [32, 64]}, "summary": {"rows": "d_model", "cols": ["placement"]}})";
  SweepInvocation bad = sweep_of(tmp / "bad", {}, {}, tmp / "bad.json");
  bad.dry_run = true;
  expect_usage_error([&] { run_in_process(bad); }, "axis 'lr' is neither the rows nor a column");
}

TEST(SweepSummaryNoRows, PairedOneAxisSweepHasNoBestAndShowsEveryCurve) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  const SweepInvocation inv = sweep_of(dir, {"placement=pre,post", "seed=0,1"},
                                       {"layers=2", "d_model=16", "d_hidden=32", "steps=20", "eval_every=10",
                                        "batch_size=4", "eval_batches=2"});
  ASSERT_EQ(exit_status(run_in_process(inv)), 0);
  const SweepSummary s = summarize_sweep(dir, paired_on("placement=pre"));
  const std::string md = summary_markdown(s);
  EXPECT_EQ(md.find("**"), std::string::npos) << md;
  EXPECT_EQ(md.find("| stable"), std::string::npos) << md;
  EXPECT_NE(md.find("| step | placement=pre | placement=post |"), std::string::npos) << md;
  EXPECT_NE(md.find("placement=post − placement=pre"), std::string::npos) << md;
  const json doc = json::parse(summary_json(s));  // alive for the loop: a temporary's member would dangle
  for (const json& col : doc["columns"]) EXPECT_TRUE(col["best"].is_null()) << col.dump();
  const std::string csv = summary_csv(s);
  const std::vector<std::string> lines = test::split_lines(csv);
  ASSERT_GE(lines.size(), 3u) << csv;
  const std::vector<std::string> header = split_at(lines[0], ',');
  const size_t best = static_cast<size_t>(std::find(header.begin(), header.end(), "best") - header.begin());
  ASSERT_LT(best, header.size()) << lines[0];
  for (size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(split_at(lines[i], ',').at(best), "false") << lines[i];
}

TEST_F(SweepRun, ReferenceHasEveryPointDivergedNeverBest) {
  const std::string dir = *ref_ / "ref";
  std::vector<json> m = manifest(dir);
  EXPECT_EQ(count_events(m, "start"), 12u);
  EXPECT_EQ(count_events(m, "end", "completed"), 8u);
  EXPECT_EQ(count_events(m, "end", "diverged"), 4u);
  for (const char* f : {"spec.json", "summary.md", "summary.csv", "summary.json", "loss_curves.svg", "final_loss_vs_lr.svg"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  EXPECT_TRUE(fs::exists(dir + "/runs/lr=1e-3/placement=post/seed=1/result.json"));
  json s = json::parse(slurp(dir + "/summary.json"));
  ASSERT_EQ(s["columns"].size(), 2u);
  for (const json& col : s["columns"]) {
    ASSERT_FALSE(col["best"].is_null());
    EXPECT_NE(col["best"]["row"], "1e30");
    for (const json& r : col["stable"]) EXPECT_NE(r, "1e30");
    for (const json& cell : col["cells"])
      if (cell["row"] == "1e30") {
        EXPECT_EQ(cell["diverged"], 2);
        EXPECT_EQ(cell["text"], "diverged@2");
      }
  }
  EXPECT_NE(slurp(dir + "/summary.md").find("diverged@2"), std::string::npos);
  EXPECT_NE(slurp(dir + "/final_loss_vs_lr.svg").find("diverged"), std::string::npos);
}

// `sweep status` (was scripts/sweep_status.py) counts what the runner counts: every point
// of spec.json's plan, finished when its run directory is whole; statuses are result.json's.
TEST_F(SweepRun, StatusCountsThePlanAndHowThePointsEnded) {
  const std::string dir = *ref_ / "ref";
  CliResult r = run_cli({"sweep", "status", dir + "/", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["dir"], dir);
  EXPECT_EQ(j[0]["points"], 12);
  EXPECT_EQ(j[0]["finished"], 12);
  EXPECT_EQ(j[0]["init"], json::array({"gpt2"}));
  EXPECT_EQ(j[0]["statuses"].value("diverged", 0), 4) << j.dump();
  int n = 0;
  for (const auto& [status, count] : j[0]["statuses"].items()) n += count.get<int>();
  EXPECT_EQ(n, 12);
  double run_seconds = 0, first_start = 1e300, last_end = -1e300;
  for (const json& e : manifest(dir)) {
    const double t = epoch_seconds(e["time"]);
    if (e["event"] == "start") first_start = std::min(first_start, t);
    if (e["event"] != "end") continue;
    run_seconds += e["seconds"].get<double>();
    last_end = std::max(last_end, t);
  }
  EXPECT_NEAR(j[0]["run_seconds"].get<double>(), run_seconds, 1e-9);
  EXPECT_EQ(j[0]["wall_seconds"].get<double>(), last_end - first_start);
  const std::string md = sweep_status_markdown({sweep_status(dir)});
  EXPECT_EQ(md.rfind("| sweep | init | points done | statuses | wall clock | sum of run times |\n", 0), 0u) << md;
  EXPECT_NE(md.find("| ref | gpt2 | 12 / 12 | "), std::string::npos) << md;
  EXPECT_NE(md.find("4 diverged"), std::string::npos) << md;
  // `sweep status DIR --json`'s one entry.
  auto status_json = [](const std::string& d) { return json::parse(sweep_status_json({sweep_status(d)}))[0]; };
  // A point whose run directory is gone is not finished, whatever the manifest says.
  TempDir copy;
  fs::copy(dir, copy / "ref", fs::copy_options::recursive);
  fs::create_directories(copy / "runs");
  fs::remove_all(copy / "ref/runs/lr=1e-3/placement=pre/seed=0");
  EXPECT_EQ(status_json(copy / "ref")["finished"], 11);
  // A point tried twice (an interrupted attempt an hour before, then the one that completed) counts
  // once, with its last attempt's seconds; the wall clock runs from the earlier attempt's start.
  {
    TempDir twice;
    fs::copy(dir, twice / "ref", fs::copy_options::recursive);
    std::vector<json> m = manifest(twice / "ref");
    json start = m.front(), end;
    for (const json& e : m)
      if (e["event"] == "end" && e["point"] == start["point"]) end = e;
    ASSERT_EQ(start["event"], "start");
    ASSERT_FALSE(end.is_null());
    start["time"] = iso_time(epoch_seconds(start["time"]) - 3600);
    end["time"] = iso_time(epoch_seconds(start["time"]) + 1);
    end["status"] = "interrupted";
    end["seconds"] = 1000.0;
    {
      std::ofstream out(twice / "ref/manifest.jsonl");
      out << start.dump() << "\n" << end.dump() << "\n";
      for (const json& e : m) out << e.dump() << "\n";
    }
    const json t = status_json(twice / "ref");
    EXPECT_EQ(t["finished"], 12);
    EXPECT_EQ(t["statuses"], j[0]["statuses"]) << t.dump();
    EXPECT_NEAR(t["run_seconds"].get<double>(), run_seconds, 1e-9) << "not the last attempt's seconds alone";
    EXPECT_EQ(t["wall_seconds"].get<double>(), last_end - epoch_seconds(start["time"]));
  }
  expect_usage_error([&] { sweep_status(copy / "runs"); }, "no spec.json");  // not a sweep directory
}

// `sweep summarize --curves` (was scripts/sweep_curves.py): a metrics.jsonl field at the
// chosen steps, mean ± sample std over the seeds, one column per point.
TEST_F(SweepRun, CurvesAreTheMeanOverSeedsAtEachStep) {
  const std::string dir = *ref_ / "ref";
  auto val_loss = [&](const std::string& point, int64_t step) {
    std::ifstream in(dir + "/runs/" + point + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const json rec = json::parse(line);
      if (rec["step"] == step) return rec["val_loss"].get<double>();
    }
    return std::nan("");
  };
  const double a = val_loss("lr=1e-3/placement=post/seed=0", 10), b = val_loss("lr=1e-3/placement=post/seed=1", 10);
  const double mean = (a + b) / 2, sd = std::sqrt(((a - mean) * (a - mean) + (b - mean) * (b - mean)) / 1);
  CurveOptions at_10_40;
  at_10_40.steps = {10, 40};
  at_10_40.where = {"lr=0.001,1e30"};
  const std::string table = sweep_curves_markdown(dir, at_10_40);
  const auto lines = test::split_lines(table);
  ASSERT_EQ(lines.size(), 6u) << table;
  EXPECT_EQ(lines[0], "val_loss: mean ± std over seeds (" + dir + ")");
  EXPECT_EQ(lines[2], "| step | lr=1e-3 placement=pre | lr=1e-3 placement=post | lr=1e30 placement=pre | "
                      "lr=1e30 placement=post |");
  EXPECT_NE(lines[4].find(fmt::format("| {:.4f} ± {:.4f} |", mean, sd)), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("| — | — |"), std::string::npos) << lines[4];  // lr 1e30 diverged at step 2
  // The flags of --curves, through the command.
  CliResult r = run_cli({"sweep", "summarize", dir, "--curves", "10", "--transpose", "--digits", "2", "--where", "lr=1e-3",
                         "--field", "stream_norm", "--layers", "first"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("stream_norm (first over layers)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| point | step 10 |"), std::string::npos) << r.out;
  EXPECT_EQ(test::split_lines(r.out).size(), 6u) << r.out;
  r = run_cli({"sweep", "summarize", dir, "--curves", "10", "--layers", "median"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  CurveOptions no_match;
  no_match.steps = {10};
  no_match.where = {"lr=5"};
  expect_usage_error([&] { sweep_curves_markdown(dir, no_match); }, "");
  r = run_cli({"sweep", "summarize", dir, "--transpose", "--no-write"});  // a curves flag without --curves
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("give --curves STEPS"), std::string::npos) << describe(r);
  // --where selects the summary's points too, printed only (DIR's summaries keep every point)
  SummaryOptions lr_1e3;
  lr_1e3.where = {"lr=1e-3"};
  const std::string brief = summary_md(dir, lr_1e3, true);
  EXPECT_NE(brief.find("4 of 4 points completed"), std::string::npos) << brief;
  // lr, fixed to one value, is no longer a dimension: one row, a column per placement
  EXPECT_NE(brief.find("|  | placement=pre | placement=post |"), std::string::npos) << brief;
  EXPECT_NE(brief.find("| all |"), std::string::npos) << brief;
  r = run_cli({"sweep", "summarize", dir, "--where", "lr=1e-3"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("add --no-write"), std::string::npos) << describe(r);
  SummaryOptions lr_5;
  lr_5.where = {"lr=5"};
  expect_usage_error([&] { summarize_sweep(dir, lr_5); }, "");
  // ... and a summary flag with --curves: it would have been ignored (--json printed markdown).
  for (std::vector<std::string> extra : {std::vector<std::string>{"--json"}, {"--format", "csv"}, {"--rows", "lr"},
                                         {"--cols", "lr"}, {"--metric", "final_val_loss"}, {"--no-write"}}) {
    std::vector<std::string> args = {"sweep", "summarize", dir, "--curves", "10"};
    args.insert(args.end(), extra.begin(), extra.end());
    r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_NE(r.err.find("--curves prints its own markdown table"), std::string::npos) << describe(r);
  }
}

// `sweep summarize --profile STEP`: a per-layer field layer by layer at one step, one column per
// point (mean ± std over the seeds), axes every column shares in the title; --plot draws it and
// replaces only a plot of its own.
TEST_F(SweepRun, ProfileIsEachLayerAtAStep) {
  const std::string dir = *ref_ / "ref";
  auto layer_value = [&](const std::string& point, int64_t step, size_t layer) {
    std::ifstream in(dir + "/runs/" + point + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const json rec = json::parse(line);
      if (rec["step"] == step) return rec["stream_norm"][layer].get<double>();
    }
    return std::nan("");
  };
  TempDir tmp;
  const std::string plot = tmp / "profile.svg";
  ProfileOptions at_10;
  at_10.step = 10;
  at_10.field = "stream_norm";
  at_10.where = {"lr=1e-3"};
  const std::vector<LayerProfile> profiles = sweep_layer_profiles(dir, at_10);
  // Written as --plot writes it, so that the command's rerun below has its own plot to replace.
  write_output_file(plot, plot_layer_profiles_svg(at_10, profiles), "--plot", true, is_layer_profile_svg);
  const std::string table = layer_profiles_markdown(dir, at_10, profiles);
  auto lines = test::split_lines(table);
  ASSERT_EQ(lines.size(), 6u) << table;  // title, blank, header, rule, 2 layers
  EXPECT_EQ(lines[0], "stream_norm by layer at step 10: mean ± std over seeds (" + dir + "; lr=1e-3)");
  EXPECT_EQ(lines[2], "| layer | placement=pre | placement=post |");
  for (size_t layer : {0u, 1u}) {
    const double a = layer_value("lr=1e-3/placement=post/seed=0", 10, layer),
                 b = layer_value("lr=1e-3/placement=post/seed=1", 10, layer);
    const double m = (a + b) / 2, sd = std::fabs(a - b) / std::sqrt(2.0);
    EXPECT_NE(lines[4 + layer].find(fmt::format(" {:.4g} ± {:.2g} |", m, sd)), std::string::npos) << lines[4 + layer];
    EXPECT_EQ(lines[4 + layer].rfind(fmt::format("| {} |", layer + 1), 0), 0u) << lines[4 + layer];
  }
  const std::string svg = test::slurp(plot);
  EXPECT_TRUE(is_layer_profile_svg(svg)) << svg.substr(0, 80);
  EXPECT_NE(svg.find("placement=post"), std::string::npos);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  // A rerun replaces its own plot; a person's file at that path is never replaced (the command's
  // --profile and --plot).
  CliResult r = run_cli({"sweep", "summarize", dir, "--profile", "last", "--field", "stream_norm", "--plot", plot});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("at each run's last record"), std::string::npos) << r.out;
  std::ofstream(tmp / "mine.svg") << "<svg>mine</svg>";
  r = run_cli({"sweep", "summarize", dir, "--profile", "10", "--field", "stream_norm", "--plot", tmp / "mine.svg"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(test::slurp(tmp / "mine.svg"), "<svg>mine</svg>");
  // What the runs do not have, refused by the library ...
  for (const auto& [step, field] : std::vector<std::pair<int64_t, std::string>>{
           {10, "stream_max_abs"} /* fp32 runs log none */, {7, "stream_norm"} /* no eval at step 7 */}) {
    SCOPED_TRACE(field + " at step " + std::to_string(step));
    ProfileOptions o;
    o.step = step;
    o.field = field;
    expect_usage_error([&] { sweep_layer_profiles(dir, o); }, "");
  }
  // ... and by the command: flags that do not go together, and --field val_loss (the flag's own
  // default, which leaves --profile's field as it is).
  for (std::vector<std::string> bad : {std::vector<std::string>{"--profile", "10", "--field", "val_loss"},
                                       {"--profile", "10,40"},
                                       {"--plot", plot},
                                       {"--profile", "10", "--curves", "10"}}) {
    std::vector<std::string> args = {"sweep", "summarize", dir};
    args.insert(args.end(), bad.begin(), bad.end());
    r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(test::split_lines(r.err).size(), 1u) << describe(r);
  }
}

TEST_F(SweepRun, RerunSkipsDoneAndDivergedPoints) {
  TempDir tmp;
  fs::copy(*ref_ / "ref", tmp / "s", fs::copy_options::recursive);
  CliResult r = run_cli(grid_args(tmp / "s"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("0 to run, 12 already done (4 diverged)"), std::string::npos) << r.err;
  EXPECT_EQ(count_events(manifest(tmp / "s"), "start"), 12u);
  EXPECT_EQ(summaries(tmp / "s"), *ref_summary_);
  // --rerun diverged runs exactly the diverged points again, and they diverge again.
  SweepInvocation rerun = grid_sweep(tmp / "s");
  rerun.rerun = parse_rerun("diverged");
  const SweepInvocationResult again = run_in_process(rerun);
  ASSERT_EQ(exit_status(again), 0);
  EXPECT_EQ(again.work.todo.size(), 4u);  // "4 to run, 8 already done"
  EXPECT_EQ(again.work.done, 8u);
  std::vector<json> m = manifest(tmp / "s");
  EXPECT_EQ(count_events(m, "start"), 16u);
  EXPECT_EQ(count_events(m, "end", "diverged"), 8u);
  EXPECT_EQ(summaries(tmp / "s"), *ref_summary_);
}

TEST_F(SweepRun, SigkillAtSeveralMomentsThenResumeGivesTheSameSummary) {
  for (size_t ends : {0u, 3u, 8u}) {
    SCOPED_TRACE("killed after " + std::to_string(ends) + " points ended");
    TempDir tmp;
    const std::string dir = tmp / "s";
    pid_t pid = spawn(grid_args(dir));
    if (!wait_for_ends(pid, dir, ends)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return;
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    // A sweep that had already finished on its own would test resuming a complete sweep instead.
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the sweep was not killed: wait status " << status;
    // PDEATHSIG: no child outlives the sweep (give the kernel a moment to deliver it)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<json> before = manifest(dir);
    std::printf("[ sweep   ] killed after %zu points ended (%zu starts)\n", count_events(before, "end"), count_events(before, "start"));
    std::map<std::string, int> finished_before;
    for (const json& j : before)
      if (j["event"] == "end") ++finished_before[j["point"].get<std::string>()];
    CliResult r = run_cli(grid_args(dir));
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(summaries(dir), *ref_summary_);
    // A point that had finished was not started again; no point finished twice.
    std::map<std::string, int> starts_after, ends_total;
    std::vector<json> after = manifest(dir);
    for (size_t i = before.size(); i < after.size(); ++i)
      if (after[i]["event"] == "start") ++starts_after[after[i]["point"].get<std::string>()];
    for (const auto& [point, n] : finished_before) EXPECT_EQ(starts_after[point], 0) << point;
    for (const json& j : after)
      if (j["event"] == "end") ++ends_total[j["point"].get<std::string>()];
    // (a point whose child renamed its run directory just before the kill is done without an end record)
    EXPECT_GE(ends_total.size(), 11u);
    for (const auto& [point, n] : ends_total) EXPECT_EQ(n, 1) << point;
    // no half-written run directory is left behind
    for (const auto& e : fs::recursive_directory_iterator(dir + "/runs"))
      EXPECT_EQ(e.path().string().find(".partial."), std::string::npos) << e.path();
  }
}

TEST_F(SweepRun, TwoShardsMergeIntoTheUnshardedSummary) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  SweepInvocation first = grid_sweep(dir);
  first.run.shard = parse_shard("0/2");
  const SweepInvocationResult r0 = run_in_process(first);
  ASSERT_EQ(exit_status(r0), 0);
  EXPECT_EQ(r0.work.points, 6u);  // "6 points in shard 0/2"
  EXPECT_NE(summaries(dir), *ref_summary_);  // half the runs: a partial summary
  // shard 1 from the Slurm variables, as an array task gets it: through the command, which reads them
  test::RunOptions env;
  env.env = {{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "2"}};
  CliResult r1 = run_cli(grid_args(dir), env);
  ASSERT_EQ(r1.exit_code, 0) << describe(r1);
  EXPECT_NE(r1.err.find("6 points in shard 1/2"), std::string::npos) << r1.err;
  CliResult s = run_cli({"sweep", "summarize", dir});
  ASSERT_EQ(s.exit_code, 0) << describe(s);
  EXPECT_EQ(summaries(dir), *ref_summary_);
  EXPECT_EQ(s.out, slurp(dir + "/summary.md"));
  EXPECT_EQ(count_events(manifest(dir), "start"), 12u);
}

TEST_F(SweepRun, ChangedSpecIsRefusedUnlessForced) {
  TempDir tmp;
  fs::copy(*ref_ / "ref", tmp / "s", fs::copy_options::recursive);
  SweepInvocation changed = grid_sweep(tmp / "s");
  changed.request.sets.push_back("steps=30");
  expect_usage_error([&] { run_in_process(changed); }, "base steps: 40 -> 30");
  EXPECT_EQ(count_events(manifest(tmp / "s"), "start"), 12u);
  changed.force = true;
  const SweepInvocationResult r = run_in_process(changed);
  ASSERT_EQ(exit_status(r), 0);
  EXPECT_EQ(r.work.todo.size(), 12u);  // "12 to run, 0 already done"
  EXPECT_EQ(r.work.done, 0u);
  json s = json::parse(slurp(tmp / "s/summary.json"));
  EXPECT_EQ(s["curves"][0]["steps"].back(), 30);
}

TEST_F(SweepRun, SummarizeLayoutsAndFormats) {
  const std::string dir = *ref_ / "ref";
  SummaryOptions by_placement;
  by_placement.rows = "placement";
  by_placement.cols = {"lr"};
  const std::string csv = summary_csv(summarize_writing(dir, by_placement));
  EXPECT_EQ(csv.rfind("placement,lr,metric,n,mean,std,diverged,diverged_step,collapsed,failed,pending,stable,best,damaged,"
                      "collapsed_mean,plateaued,spikes,paired_n,paired_mean,paired_low,paired_high\n", 0), 0u) << csv;
  EXPECT_NE(csv.find("pre,1e30,final_val_loss,0,,,2,2,0,0,0,false,false"), std::string::npos) << csv;
  SummaryOptions no_such_col;
  no_such_col.cols = {"nope"};
  expect_usage_error([&] { summarize_writing(dir, no_such_col); }, "");
  expect_usage_error([&] { summarize_writing(dir, with_metric("status")); }, "");
  EXPECT_EQ(json::parse(summary_json(summarize_writing(dir, with_metric("best_val_loss"))))["metric"], "best_val_loss");
  // restore the default layout for the other tests
  ASSERT_NO_THROW(summarize_writing(dir));
}

// The experiment layer speaks the CLI's grammar in one place: each point is a child
// `normlab train --config POINT --out RUN --force -q` (docs/layers.md). Pinned here, so that a
// change to train's flags that would break every sweep fails first.
TEST_F(SweepRun, EachPointIsTrainsCommandLine) {
  const std::string dir = *ref_ / "ref";
  size_t starts = 0;
  for (const json& m : manifest(dir)) {
    if (m["event"] != "start") continue;
    ++starts;
    const std::vector<std::string> argv = m["command"].get<std::vector<std::string>>();
    ASSERT_EQ(argv.size(), 8u) << m.dump();
    EXPECT_EQ(fs::path(argv[0]).filename(), "normlab");
    const std::vector<std::string> flags = {argv[1], argv[2], argv[4], argv[6], argv[7]};
    EXPECT_EQ(flags, (std::vector<std::string>{"train", "--config", "--out", "--force", "-q"}));
    EXPECT_EQ(argv[3], dir + "/points/" + m["hash"].get<std::string>() + ".json");
    EXPECT_EQ(argv[5], dir + "/runs/" + m["point"].get<std::string>());
  }
  EXPECT_EQ(starts, 12u);
}

// The workflow `normlab sweep` runs, as one library call: a dry run creates nothing and counts what
// a run would do; the run then runs exactly that and writes the summaries the command writes.
TEST_F(SweepRun, TheInvocationIsTheCommandsWorkflow) {
  TempDir tmp;
  SweepInvocation inv = grid_sweep(tmp / "s");
  inv.dry_run = true;
  bool started = false;
  auto on_start = [&](const ShardWork& w) {
    started = true;
    EXPECT_EQ(w.todo.size(), 12u);
  };
  SweepInvocationResult r = run_sweep_invocation(inv, {}, on_start);
  EXPECT_FALSE(started);
  EXPECT_FALSE(fs::exists(tmp / "s"));
  EXPECT_EQ(r.work.todo.size(), 12u);
  EXPECT_EQ(r.states.size(), 12u);
  inv.dry_run = false;
  size_t ended = 0;
  SweepCallbacks cb;
  cb.on_end = [&](const SweepPoint&, const PointOutcome&, const SweepProgress&) { ++ended; };
  r = run_sweep_invocation(inv, cb, on_start);
  EXPECT_TRUE(started);
  EXPECT_EQ(ended, 12u);
  EXPECT_EQ(r.report.progress.completed + r.report.progress.diverged, 12u);
  EXPECT_EQ(summaries(tmp / "s"), *ref_summary_);
  EXPECT_EQ(r.summary.points, 12u);
  inv.run.dir.clear();
  EXPECT_THROW(run_sweep_invocation(inv, {}, on_start), UsageError);
}

// `summarize --check`: exit 0 when DIR's five files are what its runs give, 1 naming each file that
// is missing or differs; summary.json's numbers may differ in their last bits, no more.
TEST_F(SweepRun, CheckSaysWhetherTheSummariesAreWhatTheRunsGive) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  ASSERT_NO_THROW(summarize_writing(dir));
  const auto files = summary_files(summarize_sweep(dir, {}));
  EXPECT_EQ(files.size(), 5u);  // "5 summary files, 0 differ"
  EXPECT_EQ(stale_summary_files(dir, files), std::vector<std::string>{});
  const std::string md = slurp(tmp / "s/summary.md"), js = slurp(tmp / "s/summary.json");
  std::ofstream(tmp / "s/summary.md") << md << "edited by hand\n";
  fs::remove(tmp / "s/loss_curves.svg");
  // What the command makes of the files that differ: exit 1, each named on stderr.
  CliResult r = run_cli({"sweep", "summarize", dir, "--check"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.out.find("2 differ"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("summary.md: differs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loss_curves.svg: differs"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(tmp / "s/summary.md"), md + "edited by hand\n");
  ASSERT_NO_THROW(summarize_writing(dir));
  // One curve value moved by a relative 1e-15 (another CPU's rounding) passes; by 1e-9 it does not.
  json j = json::parse(js);
  const double v = j["curves"][0]["val_loss"][0].get<double>();
  for (const double rel : {1e-15, 1e-9}) {
    j["curves"][0]["val_loss"][0] = v * (1 + rel);
    std::ofstream(tmp / "s/summary.json") << j.dump(2);
    const std::vector<std::string> stale = stale_summaries(dir);
    EXPECT_EQ(stale.empty(), rel < 1e-12) << rel << " " << json(stale).dump();
  }
  r = run_cli({"sweep", "summarize", dir, "--check", "--no-write"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

TEST(SweepSlurm, WritesAnArrayScriptAndPrintsTheSbatchLine) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  CliResult r = run_cli({"sweep", "--out", dir, "lr=1e-3,1e-2", "seed=0,1,2", "--set", "steps=5", "--slurm",
                         "--slurm-shards", "3", "--slurm-cpus", "2", "--slurm-array-max", "2", "--slurm-partition",
                         "cpu", "--slurm-time", "00:05:00", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::string script = slurp(dir + "/sweep.sbatch");
  for (const char* line : {"#SBATCH --array=0-2%2\n", "#SBATCH --cpus-per-task=2\n", "#SBATCH --partition=cpu\n",
                           "#SBATCH --time=00:05:00\n", "/slurm/%A_%a.out\n", "--shard \"${SLURM_ARRAY_TASK_ID}/3\" --jobs 2 --threads 1"})
    EXPECT_NE(script.find(line), std::string::npos) << line << "\n" << script;
  EXPECT_NE(r.out.find("sbatch " + dir + "/sweep.sbatch"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_directory(dir + "/slurm"));
  EXPECT_TRUE(fs::exists(dir + "/spec.json"));
  EXPECT_FALSE(fs::exists(dir + "/manifest.jsonl"));  // nothing ran here
  // the spec the array tasks run is the same sweep
  SweepPlan from_dir = plan_sweep({dir + "/spec.json", {}, {}});
  EXPECT_EQ(from_dir.points.size(), 6u);
  EXPECT_EQ(from_dir.spec_json, slurp(dir + "/spec.json"));
  CliResult bad = run_cli({"sweep", "--out", tmp / "t", "lr=1e-3,1e-2", "--submit"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_FALSE(fs::exists(tmp / "t"));
}

TEST(SweepSignals, SigtermInterruptsPromptlyAndResumes) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  // slower points (2000 steps, ~1 s each) so that SIGTERM lands while they run
  std::vector<std::string> args = {"sweep", "--out", dir, "--jobs", "2", "--set", "layers=2", "--set", "d_model=16",
                                   "--set", "steps=2000", "--set", "eval_every=1000", "--set", "batch_size=4",
                                   "lr=1e-3,1e-2", "seed=0,1"};
  pid_t pid = spawn(args);
  const bool started = normlab::test::wait_until(
      [&] { return count_events(fs::exists(dir + "/manifest.jsonl") ? manifest(dir) : std::vector<json>{}, "start") >= 2; },
      "2 start records in " + dir + "/manifest.jsonl");
  if (!started) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  // Not a speed target: a guard against a sweep that waits for its children to finish (each has
  // ~1000 steps left), generous because the machine may be loaded.
  EXPECT_LT(seconds, 30.0);
  std::vector<json> m = manifest(dir);
  EXPECT_GE(count_events(m, "end", "interrupted"), 1u);
  // the rerun finishes the sweep; every point ends completed once
  std::vector<std::string> quick = args;
  CliResult r = run_cli(quick);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_events(manifest(dir), "end", "completed"), 4u);
}

TEST(SweepFailures, ACrashingPointIsRecordedAndTheSweepGoesOn) {
  TempDir tmp;
  SweepPlan plan = plan_sweep({"", {"lr=1e-3,1e-2"}, {"steps=5"}});
  prepare_sweep_dir(tmp / "s", plan, false);
  // a "normlab" that fails the way a crashing one would
  SweepRunOptions opt = with_fake_normlab(tmp, "echo 'boom: something broke' >&2\nexit 3", 2);
  std::vector<PointOutcome> outcomes;
  SweepCallbacks cb;
  cb.on_end = [&](const SweepPoint&, const PointOutcome& o, const SweepProgress&) { outcomes.push_back(o); };
  SweepRunReport rep = run_sweep(plan, {0, 1}, opt, cb);
  EXPECT_EQ(rep.progress.failed, 2u);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].status, "failed");
  EXPECT_EQ(outcomes[0].exit_code, 3);
  EXPECT_NE(outcomes[0].stderr_tail.find("boom: something broke"), std::string::npos);
  std::vector<PointState> st = point_states(tmp / "s", plan);
  EXPECT_EQ(st[0].status, "failed");
  EXPECT_FALSE(st[0].done);
  // failed points are not done: the default selection runs them again
  EXPECT_EQ(select_points(plan, st, {}, {}).size(), 2u);
  SweepSummary s = summarize_sweep(tmp / "s", {});
  EXPECT_EQ(s.failed, 2u);
  EXPECT_EQ(s.best[0], -1);
}

// A collapsed run (train's status: it finished but learned nothing) is a result: shown as
// collapsed@STEP, kept out of the stable window, never best.
TEST(SweepCollapsed, ShownAtItsStepNeverStableNeverBest) {
  TempDir tmp;
  const SweepInvocation inv = sweep_of(tmp / "s", {"placement=pre,post"},
                                       {"lr=1e-2", "layers=12", "init=torch", "steps=100", "eval_every=50", "eval_batches=2"});
  ASSERT_EQ(exit_status(run_in_process(inv)), 0);
  SweepSummary s = summarize_sweep(tmp / "s", {"placement", {}, "final_val_loss", "", {}});
  ASSERT_EQ(s.points, 2u);
  EXPECT_EQ(s.collapsed, 1u);
  const std::string md = slurp(tmp / "s" + "/summary.md");
  EXPECT_NE(md.find("collapsed@50 ("), std::string::npos) << md;
  ASSERT_EQ(s.best.size(), 1u);
  EXPECT_EQ(s.row_values[static_cast<size_t>(s.best[0])], "pre");
}

// ---- sweep checks everything first and writes only what it was asked to ---------------------------

// Waits until DIR's manifest holds `starts` start records. Fails the test (and returns false) if
// the sweep exits first or nothing happens for a very long time: never gives up silently.
bool wait_for_starts(pid_t pid, const std::string& dir, size_t starts) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);  // a hang guard only
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "the sweep exited (status " << status << ") before " << starts << " points started";
      return false;
    }
    std::error_code ec;
    if (fs::exists(dir + "/manifest.jsonl", ec)) {
      const std::string m = slurp(dir + "/manifest.jsonl");
      size_t n = 0;
      for (size_t p = m.find("\"event\":\"start\""); p != std::string::npos; p = m.find("\"event\":\"start\"", p + 1)) ++n;
      if (n >= starts) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "no " << starts << " start records in " << dir << " after 10 minutes";
  ::kill(pid, SIGKILL);
  return false;
}

int exit_code_of(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Points that never end by themselves (a million steps): the test decides when they stop.
std::vector<std::string> endless_args(const std::string& out) {
  return {"sweep", "--out", out, "--jobs", "2", "--set", "layers=1", "--set", "d_model=8", "--set", "d_hidden=8",
          "--set", "steps=1000000", "--set", "eval_every=500000", "--set", "batch_size=2", "lr=1e-3,1e-2"};
}

TEST(SweepErrors, AnAxisValueOfTheWrongTypeIsOneClearLine) {
  TempDir tmp;
  std::ofstream(tmp / "spec.json") << R"({"grid": {"layers": ["two"]}})";
  CliResult r = run_cli({"sweep", tmp / "spec.json", "--out", tmp / "out"});
  expect_one_error_line(r, "grid.layers[0]");
  // where (once), which key, what was expected, what was given; no int64 range for a string
  EXPECT_EQ(r.err.find("grid.layers[0]"), r.err.rfind("grid.layers[0]")) << r.err;
  EXPECT_NE(r.err.find("'layers'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("must be a whole number"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"two\""), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("9223372036854775807"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

TEST(SweepErrors, SubmitWithoutSbatchOnThePathCreatesNothing) {
  TempDir tmp;
  fs::create_directories(tmp / "empty-bin");
  test::RunOptions env;
  env.env = {{"PATH", tmp / "empty-bin"}};
  CliResult r = run_cli({"sweep", "--out", tmp / "sw", "lr=1e-3,1e-2", "--set", "steps=5", "--slurm", "--submit"}, env);
  expect_one_error_line(r, "sbatch");
  EXPECT_FALSE(fs::exists(tmp / "sw"));
}

TEST(SweepErrors, AFileSizeLimitOnTheFirstWriteLeavesNothing) {
  TempDir tmp;
  // 512 bytes: less than spec.json, the first file a sweep writes
  const std::string cmd = "ulimit -f 1; exec '" + std::string(NORMLAB_BINARY) +
                          "' sweep --out sw --jobs 1 --set steps=2 --set layers=1 lr=1e-3,1e-2";
  test::RunOptions opt;
  opt.cwd = tmp.path();
  CliResult r = test::run_program("/bin/sh", {"-c", cmd}, opt);
  expect_one_error_line(r, "File too large");
  EXPECT_FALSE(fs::exists(tmp / "sw")) << "left: " << (fs::exists(tmp / "sw") ? fs::directory_iterator(tmp / "sw")->path().string() : "");
  // and into an existing (empty) directory: it is left as it was, empty
  fs::create_directories(tmp / "sw");
  r = test::run_program("/bin/sh", {"-c", cmd}, opt);
  expect_one_error_line(r, "File too large");
  EXPECT_TRUE(fs::is_directory(tmp / "sw"));
  EXPECT_TRUE(fs::is_empty(tmp / "sw"));
}

// What sbatch reads from a #SBATCH line: its arguments, split and unquoted as Slurm's
// _get_argument does (whitespace separates, '...' and "..." quote, backslash escapes, an unquoted
// # ends the line).
std::vector<std::string> sbatch_arguments(const std::string& line) {
  std::vector<std::string> args;
  size_t i = std::string("#SBATCH").size();
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) break;
    std::string arg;
    char quote = 0;
    bool escape = false;
    for (; i < line.size() && (quote || line[i] != ' '); ++i) {
      const char c = line[i];
      if (escape) escape = false;
      else if (c == '\\') { escape = true; continue; }
      else if (quote) { if (c == quote) { quote = 0; continue; } }
      else if (c == '"' || c == '\'') { quote = c; continue; }
      else if (c == '#') { i = line.size(); break; }
      arg += c;
    }
    EXPECT_EQ(quote, 0) << "unmatched quote in " << line;
    if (!arg.empty()) args.push_back(arg);
  }
  return args;
}

TEST(SweepSlurm, NoValueCanStartALineOrADirective) {
  TempDir tmp;
  const std::vector<std::string> base = {"lr=1e-3,1e-2", "--set", "steps=5", "--slurm"};
  auto sweep_into = [&](const std::string& out, std::vector<std::string> more) {
    std::vector<std::string> a = {"sweep", "--out", out};
    a.insert(a.end(), base.begin(), base.end());
    a.insert(a.end(), more.begin(), more.end());
    return run_cli(a);
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--slurm-time", "01:00:00\n#SBATCH --x"}, "--slurm-time"},
      {{"--slurm-time", "01:00:00 --mem=1T"}, "--slurm-time"},
      {{"--slurm-time", "1:2:3:4"}, "--slurm-time"},
      {{"--slurm-partition", "cpu\n#SBATCH --x"}, "--slurm-partition"},
      {{"--slurm-partition", "cpu --mem=1T"}, "--slurm-partition"},
      {{"--slurm-partition", "a,,b"}, "--slurm-partition"},
  };
  for (const auto& [flags, expect] : refused) {
    SCOPED_TRACE(flags[1]);
    expect_one_error_line(sweep_into(tmp / "sw", flags), expect);
    EXPECT_FALSE(fs::exists(tmp / "sw"));
  }
  expect_one_error_line(sweep_into(tmp / "s\nw", {}), "--out");
  EXPECT_FALSE(fs::exists(tmp / "s\nw"));

  // Accepted: Slurm's time forms and partition lists; a directory with a space, quotes, '#' and '%'
  // stays one argument of its directives and one word of the command.
  for (const char* t : {"30", "30:00", "01:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"}) {
    SCOPED_TRACE(t);
    CliResult r = sweep_into(tmp / "t", {"--slurm-time", t, "--slurm-partition", "cpu,gpu-a100.x_1"});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(slurp(tmp / "t/sweep.sbatch").find(std::string("#SBATCH --time=") + t + "\n"), std::string::npos);
  }
  const std::string odd = tmp / "my runs #1 'x' \"y\" 100%";
  CliResult r = sweep_into(odd, {"--slurm-time", "10"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::string script = slurp(odd + "/sweep.sbatch");
  size_t directives = 0;
  bool output_seen = false;
  for (const std::string& line : test::split_lines(script)) {
    if (line.rfind("#SBATCH", 0) != 0) continue;
    ++directives;
    std::vector<std::string> args = sbatch_arguments(line);
    ASSERT_EQ(args.size(), 1u) << line;
    if (args[0].rfind("--output=", 0) == 0) {
      output_seen = true;
      // Slurm's file name patterns: %% is a literal %, %A and %a the job and task
      EXPECT_EQ(args[0], "--output=" + odd.substr(0, odd.size() - 1) + "%%/slurm/%A_%a.out") << line;
    }
  }
  EXPECT_TRUE(output_seen) << script;
  EXPECT_EQ(directives, 6u) << script;  // job-name, array, ntasks, cpus-per-task, time, output
  // the command line: run by bash, the directory one word
  test::RunOptions env;
  env.env = {{"SLURM_ARRAY_TASK_ID", "0"}};
  CliResult echo = test::run_program("/bin/bash", {"-c", "exec() { printf '%s\\n' \"$@\"; }; " +
                                                         test::split_lines(script).back()}, env);
  ASSERT_EQ(echo.exit_code, 0) << describe(echo);
  EXPECT_NE(("\n" + echo.out).find("\n" + odd + "\n"), std::string::npos) << echo.out;
  EXPECT_NE(("\n" + echo.out).find("\n" + odd + "/spec.json\n"), std::string::npos) << echo.out;
}

TEST(SweepLock, ASecondSweepIntoTheSameDirectoryExits2NamingTheFirst) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  const pid_t first = spawn(endless_args(dir));
  ASSERT_TRUE(wait_for_starts(first, dir, 2));
  CliResult second = run_cli(endless_args(dir));
  expect_one_error_line(second, "process " + std::to_string(first));
  ::kill(first, SIGTERM);
  EXPECT_EQ(exit_code_of(first), 128 + SIGTERM);
  std::map<std::string, int> starts;
  for (const json& j : manifest(dir))
    if (j["event"] == "start") ++starts[j["point"].get<std::string>()];
  EXPECT_EQ(starts.size(), 2u);
  for (const auto& [point, n] : starts) EXPECT_EQ(n, 1) << point << " was started twice";
}

// Shards share DIR (a job array on a shared file system): each point is locked while it runs, so
// two processes given the same shard never train a point twice.
TEST(SweepLock, TwoProcessesOfOneShardRunEachPointOnce) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  std::vector<std::string> args = grid_args(dir);
  args.insert(args.end(), {"--shard", "0/2"});
  const pid_t a = spawn(args), b = spawn(args);
  EXPECT_EQ(exit_code_of(a), 0);
  EXPECT_EQ(exit_code_of(b), 0);
  std::map<std::string, int> starts;
  for (const json& j : manifest(dir))
    if (j["event"] == "start") ++starts[j["point"].get<std::string>()];
  EXPECT_EQ(starts.size(), 6u);
  for (const auto& [point, n] : starts) EXPECT_EQ(n, 1) << point << " was started " << n << " times";
  // Each process writes the summary of what it sees when it ends, and the two end in either order
  // (the later writer may have read the runs before the other's last point landed): the sweep's
  // summary is the one summarize rebuilds once both are done.
  CliResult summ = run_cli({"sweep", "summarize", dir, "-q"});
  ASSERT_EQ(summ.exit_code, 0) << describe(summ);
  json s = json::parse(slurp(dir + "/summary.json"));
  EXPECT_EQ(s["counts"]["completed"].get<int>() + s["counts"]["diverged"].get<int>(), 6) << s["counts"].dump();
}

TEST(SweepSignals, SighupIsHandledAsSigterm) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  const pid_t pid = spawn(endless_args(dir));
  ASSERT_TRUE(wait_for_starts(pid, dir, 2));
  ::kill(pid, SIGHUP);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << " instead of handling it";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGHUP);
  std::vector<json> m = manifest(dir);
  EXPECT_EQ(count_events(m, "start"), 2u);
  EXPECT_EQ(count_events(m, "end", "interrupted"), 2u);
  EXPECT_TRUE(fs::exists(dir + "/summary.md"));
  for (const auto& e : fs::recursive_directory_iterator(dir + "/runs"))
    EXPECT_EQ(e.path().string().find(".partial."), std::string::npos) << e.path();
}

// A failed write while points run (the manifest, a point's config) stops the sweep: its running
// children are stopped and reaped before the error is reported, none is left behind.
TEST(SweepFailures, AWriteErrorWhilePointsRunStopsTheChildren) {
  TempDir tmp;
  SweepPlan plan = plan_sweep({"", {"lr=1e-3,1e-2"}, {"steps=5"}});
  prepare_sweep_dir(tmp / "s", plan, false);
  fs::create_directories(tmp / "s/manifest.jsonl");  // cannot be appended to
  SweepRunOptions opt = with_fake_normlab(tmp, "exec sleep 1000", 1);
  EXPECT_THROW(run_sweep(plan, {0, 1}, opt, {}), UsageError);
  // the child was reaped: waitpid has nothing left to wait for
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(SweepQuiet, PrintsNothingButErrors) {
  TempDir tmp;
  CliResult r = run_cli({"sweep", "-q", "--out", tmp / "s", "--jobs", "2", "--set", "steps=2", "--set", "layers=1",
                         "--set", "eval_every=1", "lr=1e-3,1e-2"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
  EXPECT_NE(r.out.find("# Sweep summary"), std::string::npos) << describe(r);
}

TEST_F(SweepRun, SummarizeThatCannotWriteExits2) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  fs::remove(dir + "/summary.md");  // so that a write would show
  const std::string cmd = "ulimit -f 1; exec '" + std::string(NORMLAB_BINARY) + "' sweep summarize '" + dir + "'";
  CliResult r = test::run_program("/bin/sh", {"-c", cmd});
  expect_one_error_line(r, "File too large");
  EXPECT_FALSE(fs::exists(dir + "/summary.md"));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  // --no-write prints the table and touches nothing
  r = test::run_program("/bin/sh", {"-c", cmd + " --no-write"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("# Sweep summary"), std::string::npos) << describe(r);
  EXPECT_FALSE(fs::exists(dir + "/summary.md"));

  // A read-only directory (as a user who cannot write there: root can write anywhere).
  ::chmod(dir.c_str(), 0555);
  std::vector<std::string> as_nobody = {"--reuid=65534", "--regid=65534", "--clear-groups", NORMLAB_BINARY, "sweep",
                                        "summarize", dir};
  if (::geteuid() == 0) {
    ::chmod(tmp.path().c_str(), 0755);
    r = test::run_program("/usr/bin/setpriv", as_nobody);
  } else {
    r = run_cli({"sweep", "summarize", dir});
  }
  ::chmod(dir.c_str(), 0755);
  expect_one_error_line(r, "summary");
  EXPECT_FALSE(fs::exists(dir + "/summary.md"));
}

TEST_F(SweepRun, DamagedRunsAreReportedNotCountedAsPending) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  const std::string a = dir + "/runs/lr=1e-3/placement=pre/seed=0";
  const std::string b = dir + "/runs/lr=1e-3/placement=pre/seed=1";
  const std::string c = dir + "/runs/lr=1e-2/placement=post/seed=0";
  const std::string text = slurp(a + "/result.json");
  std::ofstream(a + "/result.json", std::ios::trunc) << text.substr(0, text.size() / 2);  // truncated
  std::ofstream(b + "/result.json", std::ios::trunc) << "\x01garbage";
  fs::remove_all(c);
  std::ofstream(c) << "a file where a run directory was\n";
  // One without its records is not a whole run; one a person added notes to still is.
  const std::string d = dir + "/runs/lr=1e-3/placement=post/seed=0", e = dir + "/runs/lr=1e-3/placement=post/seed=1";
  fs::remove(d + "/metrics.jsonl");
  std::ofstream(e + "/notes.txt") << "mine\n";
  const std::string f = dir + "/runs/lr=1e-2/placement=pre/seed=0";
  std::ofstream(f + "/result.json", std::ios::trunc) << "[1]\n";  // JSON, but no status
  CliResult r = run_cli({"sweep", "summarize", dir, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* point : {"lr=1e-3/placement=pre/seed=0", "lr=1e-3/placement=pre/seed=1", "lr=1e-2/placement=post/seed=0",
                            "lr=1e-3/placement=post/seed=0", "lr=1e-2/placement=pre/seed=0"})
    EXPECT_NE(r.err.find(point), std::string::npos) << point << " not reported: " << r.err;
  EXPECT_NE(r.err.find("has no metrics.jsonl"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("result.json has no final status"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("lr=1e-3/placement=post/seed=1"), std::string::npos) << r.err;
  EXPECT_EQ(test::split_lines(r.err).size(), 5u) << r.err;
  json s = json::parse(r.out);
  EXPECT_EQ(s["counts"]["damaged"], 5) << s["counts"].dump();
  EXPECT_EQ(s["counts"]["pending"], 0) << s["counts"].dump();
  EXPECT_NE(slurp(dir + "/summary.md").find("5 damaged"), std::string::npos);
}


// What a sweep reads back from its directory is never waited on: a FIFO in place of a
// run's metrics.jsonl, or of the manifest, is refused (summarize used to block forever on it).
TEST(SweepFiles, AFifoInTheSweepIsNeverWaitedOn) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  const SweepInvocation inv = sweep_of(
      dir, {"lr=1e-3"}, {"layers=1", "d_model=8", "d_hidden=8", "steps=4", "eval_every=2", "batch_size=2", "eval_batches=1"});
  ASSERT_EQ(exit_status(run_in_process(inv)), 0);
  const std::string metrics = dir + "/runs/base/metrics.jsonl";
  ASSERT_TRUE(fs::exists(metrics));
  fs::remove(metrics);
  ASSERT_EQ(::mkfifo(metrics.c_str(), 0600), 0);
  test::RunOptions opt;
  opt.timeout_s = 60;
  // Through the command, with a timeout: a summarize that waited on the FIFO would never return.
  CliResult r = run_cli({"sweep", "summarize", dir, "--no-write"}, opt);
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  const std::string manifest = dir + "/manifest.jsonl";
  fs::remove(manifest);
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0600), 0);
  r = run_cli({"sweep", "summarize", dir, "--no-write"}, opt);
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << describe(r);
}


// ---- collapsed seeds apart, plateaus, spikes, the paired table, the backfilled excess loss -----

// Rewrites fields of a run's result.json (as a run with other outcomes would have written it).
void edit_result(const std::string& run, const json& fields, const std::vector<std::string>& erase = {}) {
  json j = json::parse(slurp(run + "/result.json"));
  for (const auto& [k, v] : fields.items()) j[k] = v;
  for (const std::string& k : erase) j.erase(k);
  std::ofstream(run + "/result.json", std::ios::trunc) << j.dump(2) << "\n";
}

json result_of(const std::string& run) { return json::parse(slurp(run + "/result.json")); }

std::string fixed4(double v) { return fmt::format("{:.4f}", v); }

TEST_F(SweepRun, CollapsedSeedsAreNeverAveragedIn) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  const std::string runs = dir + "/runs/";
  // lr 1e-2, pre: seed 0 learned; seed 1 ended collapsed at step 30 (its plateau is not counted).
  edit_result(runs + "lr=1e-2/placement=pre/seed=0",
              {{"status", "ok"}, {"collapsed_step", nullptr}, {"final_val_loss", 3.25}, {"plateaus", json::array()},
               {"spike_count", 0}});
  edit_result(runs + "lr=1e-2/placement=pre/seed=1",
              {{"status", "collapsed"}, {"collapsed_step", 30}, {"final_val_loss", 4.0625},
               {"plateaus", json::parse("[[10, 20]]")}, {"spike_count", 0}});
  // lr 1e-2, post: both learned; seed 0 plateaued twice and spiked twice, seed 1 once.
  edit_result(runs + "lr=1e-2/placement=post/seed=0",
              {{"status", "ok"}, {"collapsed_step", nullptr}, {"final_val_loss", 3.0},
               {"plateaus", json::parse("[[10, 10], [20, 30]]")}, {"spike_count", 2}});
  edit_result(runs + "lr=1e-2/placement=post/seed=1",
              {{"status", "ok"}, {"collapsed_step", nullptr}, {"final_val_loss", 3.5}, {"plateaus", json::array()},
               {"spike_count", 1}});
  SweepSummary s = summarize_sweep(dir, {});
  ASSERT_EQ(s.rows, "lr");
  ASSERT_EQ(s.col_labels, (std::vector<std::string>{"placement=pre", "placement=post"}));
  ASSERT_EQ(s.row_values[1], "1e-2");
  const SummaryCell& pre = s.cells[1][0];
  EXPECT_EQ(pre.n, 1);
  EXPECT_EQ(pre.mean, 3.25);  // seed 0 alone
  EXPECT_EQ(pre.collapsed, 1);
  EXPECT_EQ(pre.collapsed_mean, 4.0625);
  EXPECT_EQ(pre.plateaued, 0);
  EXPECT_EQ(pre.spikes, 0);
  const SummaryCell& post = s.cells[1][1];
  EXPECT_EQ(post.n, 2);
  EXPECT_EQ(post.mean, 3.25);
  EXPECT_EQ(post.collapsed, 0);
  EXPECT_EQ(post.plateaued, 1);
  EXPECT_EQ(post.plateau_first, 10);
  EXPECT_EQ(post.plateau_last, 30);
  EXPECT_EQ(post.spikes, 3);
  // Every cell of the sweep: the mean over the seeds that ended "ok", the collapsed counted apart.
  for (size_t r = 0; r < s.row_values.size(); ++r)
    for (size_t c = 0; c < s.col_labels.size(); ++c) {
      SCOPED_TRACE(s.row_values[r] + " " + s.col_labels[c]);
      std::vector<double> ok;
      int collapsed = 0;
      for (const std::string& point : s.cells[r][c].points) {
        const json j = result_of(runs + point);
        if (j["status"] == "ok") ok.push_back(j["final_val_loss"].get<double>());
        collapsed += j["status"] == "collapsed";
      }
      EXPECT_EQ(s.cells[r][c].n, static_cast<int>(ok.size()));
      EXPECT_EQ(s.cells[r][c].collapsed, collapsed);
      if (!ok.empty()) {
        EXPECT_NEAR(s.cells[r][c].mean, mean(ok), 1e-12);
      }
    }
  // A row with a collapsed seed is never stable; pre has no other stable row (lr 1e-3 collapses in
  // 40 steps, lr 1e30 diverges), so no best.
  for (size_t r : s.stable[0]) EXPECT_NE(s.row_values[r], "1e-2");
  json j = json::parse(summary_json(s));  // `summarize --format json --no-write`: the same options
  std::map<std::string, std::string> text;
  for (const json& col : j["columns"])
    for (const json& cell : col["cells"]) text[col["label"].get<std::string>() + " " + cell["row"].get<std::string>()] = cell["text"];
  EXPECT_EQ(text["placement=pre 1e-2"], "3.2500 (1/2 collapsed@30 at 4.0625)");
  EXPECT_EQ(text["placement=post 1e-2"], "3.2500 ± " + fixed4(std::sqrt(0.125)) + " (1/2 plateau@10–30, 3 spikes)");
}

TEST_F(SweepRun, PairedBySeedWithAStudentTInterval) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  const std::string runs = dir + "/runs/";
  auto set = [&](const std::string& point, const std::string& status, double loss) {
    edit_result(runs + point, {{"status", status}, {"collapsed_step", status == "collapsed" ? json(10) : json(nullptr)},
                               {"final_val_loss", loss}});
  };
  // lr 1e-2: post - pre = -0.1 (seed 0), -0.3 (seed 1). lr 1e-3: only seed 0 converged in both.
  set("lr=1e-2/placement=pre/seed=0", "ok", 3.0);
  set("lr=1e-2/placement=pre/seed=1", "ok", 3.5);
  set("lr=1e-2/placement=post/seed=0", "ok", 2.9);
  set("lr=1e-2/placement=post/seed=1", "ok", 3.2);
  set("lr=1e-3/placement=pre/seed=0", "ok", 4.0);
  set("lr=1e-3/placement=pre/seed=1", "collapsed", 4.1);
  set("lr=1e-3/placement=post/seed=0", "ok", 3.875);
  set("lr=1e-3/placement=post/seed=1", "ok", 3.0);
  {
    SweepSummary s = summarize_sweep(dir, paired_on("placement=pre"));
    ASSERT_EQ(s.paired_by, "placement=pre");
    ASSERT_EQ(s.paired_ref, (std::vector<int>{-1, 0}));  // post against pre; pre is the reference
    ASSERT_EQ(s.row_values, (std::vector<std::string>{"1e-3", "1e-2", "1e30"}));
    const PairedDifference& d = s.paired[1][1];
    EXPECT_EQ(d.n, 2);
    EXPECT_NEAR(d.mean, -0.2, 1e-12);
    const double half = 12.706 * (0.2 / std::sqrt(2.0)) / std::sqrt(2.0);  // t(1) * sd / sqrt(n)
    EXPECT_NEAR(d.low, -0.2 - half, 1e-12);
    EXPECT_NEAR(d.high, -0.2 + half, 1e-12);
    EXPECT_EQ(s.paired[0][1].n, 1);  // the collapsed seed pairs with nothing
    EXPECT_EQ(s.paired[0][1].mean, -0.125);
    EXPECT_EQ(s.paired[2][1].n, 0);  // diverged
  }
  const SweepSummary paired = summarize_sweep(dir, paired_on("placement=pre"));
  const std::string md = summary_markdown(paired);
  EXPECT_NE(md.find("## Paired by seed against placement=pre"), std::string::npos) << md;
  EXPECT_NE(md.find("placement=post − placement=pre"), std::string::npos) << md;
  EXPECT_NE(md.find("-0.2000 [-1.4706, +1.0706]"), std::string::npos) << md;
  EXPECT_NE(md.find("-0.1250 (n=1)"), std::string::npos) << md;
  json j = json::parse(summary_json(paired));
  EXPECT_EQ(j["paired"], "placement=pre");
  for (const json& cell : j["columns"][1]["cells"])
    if (cell["row"] == "1e-2") {
      EXPECT_EQ(cell["paired"]["n"], 2) << cell.dump();
      EXPECT_NEAR(cell["paired"]["mean"].get<double>(), -0.2, 1e-12) << cell.dump();
      EXPECT_EQ(cell["paired"]["against"], "placement=pre") << cell.dump();
    }
  // Without --paired: no paired table.
  const std::string plain = summary_md(dir);
  EXPECT_EQ(plain.find("Paired by seed"), std::string::npos) << plain;
  // A value no column has, a key that is not a column axis, a word that is not key=value: one
  // line each, naming what is there.
  auto refused = [&](const std::string& column, const std::string& says) {
    SCOPED_TRACE("--paired " + column);
    expect_usage_error([&] { summarize_sweep(dir, paired_on(column)); }, says);
  };
  refused("placement=sandwich", "placement has no value 'sandwich' (values: pre, post)");
  refused("lr=1e-2", "names 'lr', which is not a column axis (columns: placement)");
  refused("pre", "'pre' is not key=value");
}

// Runs from before evals measured the oracle: final_excess_loss (and final_oracle_loss) come back
// from their config, as the run itself would have written them.
TEST_F(SweepRun, ExcessLossIsBackfilledForRunsThatLackIt) {
  TempDir tmp;
  const std::string dir = tmp / "s";
  fs::copy(*ref_ / "ref", dir, fs::copy_options::recursive);
  const std::string a = dir + "/runs/lr=1e-2/placement=pre/seed=0", b = dir + "/runs/lr=1e-2/placement=pre/seed=1";
  edit_result(a, {{"status", "ok"}, {"collapsed_step", nullptr}});
  edit_result(b, {{"status", "ok"}, {"collapsed_step", nullptr}});
  const json ja = result_of(a), jb = result_of(b);
  const double oracle = held_out_oracle_loss(load_train_config(a + "/config.json", {}));
  const double backfilled = ja["final_val_loss"].get<double>() - oracle;
  EXPECT_NEAR(backfilled, ja["final_excess_loss"].get<double>(), 1e-12);  // what the run wrote
  EXPECT_EQ(oracle, ja["final_oracle_loss"].get<double>());
  edit_result(a, json::object(), {"final_excess_loss", "final_excess_loss_se", "final_oracle_loss"});
  SweepSummary s = summarize_sweep(dir, paired_on("", "final_excess_loss"));
  ASSERT_EQ(s.row_values[1], "1e-2");
  EXPECT_EQ(s.cells[1][0].n, 2);
  EXPECT_NEAR(s.cells[1][0].mean, 0.5 * (backfilled + jb["final_excess_loss"].get<double>()), 1e-12);
  // Its resolution: the runs that reported a standard error (not the backfilled one).
  EXPECT_EQ(s.resolution_runs, s.completed - 1);
  EXPECT_TRUE(std::isfinite(s.resolution));
  EXPECT_NE(resolution_text(s).find("Resolution of final_excess_loss: "), std::string::npos) << resolution_text(s);
  s = summarize_sweep(dir, paired_on("", "final_oracle_loss"));
  EXPECT_NEAR(s.cells[1][0].mean, 0.5 * (oracle + jb["final_oracle_loss"].get<double>()), 1e-12);
  const std::string md = summary_md(dir, with_metric("final_excess_loss"));
  EXPECT_NE(md.find("# Sweep summary: final_excess_loss"), std::string::npos) << md;
  EXPECT_NE(md.find("Resolution of final_excess_loss: "), std::string::npos) << md;
}

}  // namespace
}  // namespace normlab

// A finished sweep on text reads back (summaries, status) where its data file is gone: its
// spec.json is planned as recorded, with the character vocabulary resolved in it, and reading
// what the runs wrote does not read the text they were trained on. Running it again does.
TEST(SweepPlan, AStoredTextSweepReadsBackWithoutItsDataFile) {
  const std::filesystem::path dir = normlab::test::fresh_dir("sweep_text_gone");
  std::filesystem::create_directories(dir);
  const std::filesystem::path text = dir / "corpus.txt";
  std::filesystem::copy_file(std::filesystem::path(NORMLAB_SOURCE_DIR) / "experiments" / "data" / "tiny.txt", text);
  const std::string out = (dir / "sw").string();
  auto r = normlab::test::run_cli({"sweep", "--out", out, "--set", "data=text:" + text.string(), "--set",
                                   "tokenizer=chars", "--set", "model=gpt", "--set", "steps=2", "--set", "eval_every=1",
                                   "--set", "layers=1", "--set", "d_model=8", "--set", "heads=2", "--set", "d_hidden=8",
                                   "--set", "seq_len=8", "--set", "batch_size=2", "norm=layernorm,rmsnorm", "-q"});
  ASSERT_EQ(r.exit_code, 0) << normlab::test::describe(r);
  std::filesystem::remove(text);
  r = normlab::test::run_cli({"sweep", "summarize", out, "--check"});
  EXPECT_EQ(r.exit_code, 0) << normlab::test::describe(r);
  r = normlab::test::run_cli({"sweep", "status", out});
  EXPECT_EQ(r.exit_code, 0) << normlab::test::describe(r);
  EXPECT_NE(r.out.find("2 / 2"), std::string::npos) << r.out;
  // Resuming would train: then the missing file is an error naming it.
  r = normlab::test::run_cli({"sweep", "--out", out, "--set", "data=text:" + text.string(), "--set", "tokenizer=chars",
                              "--set", "model=gpt", "--set", "steps=3", "--force", "norm=layernorm,rmsnorm", "-q"});
  EXPECT_EQ(r.exit_code, 2) << normlab::test::describe(r);
}
