// RunDir: what is at a path where a run may be, and its files read one way for every reader.
#include "normlab/run_records.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "normlab/error.h"
#include "test_util.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// A run directory as train leaves it, with two evaluations.
fs::path finished_run(const fs::path& dir) {
  fs::create_directories(dir);
  write(dir / ".normlab-run", "a normlab run directory (normlab train)\n");
  write(dir / "config.json", "{\"steps\": 20}\n");
  write(dir / "result.json", "{\"status\": \"diverged\", \"steps_done\": 20}\n");
  write(dir / "metrics.jsonl", "{\"step\":10,\"val_loss\":3.5}\n{\"step\":20,\"val_loss\":null}\n");
  write(dir / "timing.jsonl", "{\"step\":10,\"seconds_per_step\":0.5}\n");
  return dir;
}

}  // namespace

TEST(RunDir, AFinishedRunReadsItsFiles) {
  const RunDir run(finished_run(test::fresh_dir("rundir_finished")).string());
  ASSERT_EQ(run.state(), RunDir::State::finished) << run.problem();
  EXPECT_TRUE(run.finished());
  EXPECT_EQ(run.result()["status"], "diverged");
  EXPECT_EQ(run.result()["steps_done"], 20);
  EXPECT_EQ(run.config().steps, 20);
  const std::vector<MetricsRecord> m = run.metrics();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].line, 1u);
  EXPECT_EQ(m[1].step, 20);
  EXPECT_TRUE(m[1].fields["val_loss"].is_null());
  const std::vector<MetricsRecord> t = run.timing();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_DOUBLE_EQ(t[0].fields["seconds_per_step"].get<double>(), 0.5);
}

TEST(RunDir, EveryWayOfNotBeingAWholeRunIsNamed) {
  const fs::path root = test::fresh_dir("rundir_damaged");
  fs::create_directories(root);
  EXPECT_EQ(RunDir((root / "none").string()).state(), RunDir::State::absent);
  const fs::path partial = finished_run(root / ("run.partial." + std::to_string(::getpid())));
  EXPECT_EQ(RunDir(partial.string()).state(), RunDir::State::being_written);
  write(root / "file", "x");
  fs::create_directory_symlink(finished_run(root / "target"), root / "link");
  struct Case {
    fs::path path;
    std::string problem;
  };
  std::vector<Case> cases = {{root / "file", "is not a directory"},
                             {root / "link", "is a symbolic link, not a run directory"}};
  for (const char* f : {"config.json", "result.json", "metrics.jsonl"}) {
    const fs::path d = finished_run(root / (std::string("no-") + f));
    fs::remove(d / f);
    cases.push_back({d, std::string("has no ") + f});
  }
  for (const Case& c : cases) {
    const RunDir run(c.path.string());
    EXPECT_EQ(run.state(), RunDir::State::damaged) << c.path;
    EXPECT_FALSE(run.finished()) << c.path;
    EXPECT_EQ(run.problem(), c.problem) << c.path;
    EXPECT_FALSE(is_finished_run(c.path.string())) << c.path;
  }
}

// A person's notes beside a run leave it a run (they only keep train --force from replacing it);
// a FIFO where timing.jsonl was is not read (never waited on).
TEST(RunDir, AddedFilesLeaveARunFinished) {
  const fs::path run = finished_run(test::fresh_dir("rundir_added"));
  write(run / "notes.txt", "mine\n");
  fs::remove(run / "timing.jsonl");
  ASSERT_EQ(::mkfifo((run / "timing.jsonl").c_str(), 0644), 0);
  const RunDir r(run.string());
  EXPECT_TRUE(r.finished()) << r.problem();
  EXPECT_TRUE(r.timing().empty());
  EXPECT_EQ(r.metrics().size(), 2u);
}

TEST(RunDir, ABadLineIsAnErrorNamingItExceptTheTornEndOfARunBeingWritten) {
  const fs::path root = test::fresh_dir("rundir_lines");
  const fs::path done = finished_run(root / "done");
  write(done / "metrics.jsonl", "{\"step\":10}\n{\"step\":20,\"val_lo");
  try {
    RunDir(done.string()).metrics();
    ADD_FAILURE() << "a finished run's torn line was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl' line 2: not a record"), std::string::npos) << e.what();
  }
  write(done / "timing.jsonl", "{\"seconds_per_step\":0.5}\n");  // no step
  EXPECT_THROW(RunDir(done.string()).timing(), UsageError);
  const fs::path going = finished_run(root / ("going.partial." + std::to_string(::getpid())));
  write(going / "metrics.jsonl", "{\"step\":10}\n{\"step\":20,\"val_lo");
  EXPECT_EQ(RunDir(going.string()).metrics().size(), 1u);
  write(going / "metrics.jsonl", "{\"step\":10}\nnot json\n{\"step\":30}\n");  // whole lines: no exception
  EXPECT_THROW(RunDir(going.string()).metrics(), UsageError);
  write(done / "result.json", "[1, 2]\n");
  EXPECT_THROW(RunDir(done.string()).result(), UsageError);
}
