// `train --tensorboard` and `sweep --tensorboard`: the event files the commands write hold every
// number of each run's metrics.jsonl (read back with normlab's reader, which checks every CRC;
// scripts/tensorboard_check.sh reads them with TensorBoard itself).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "normlab/tensorboard.h"
#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::fresh_dir;
using normlab::test::run_cli;
using normlab::test::slurp;

namespace {

// Every metrics.jsonl number of `run` (per layer too) equals the float32 scalar of its tag in the
// one events file of `tb`; the status text ends the file. Returns the values checked.
size_t expect_tb_matches(const fs::path& tb, const fs::path& run) {
  const std::vector<std::string> files = normlab::event_files(tb.string());
  EXPECT_EQ(files.size(), 1u) << tb;
  if (files.empty()) return 0;
  const std::vector<normlab::TbEvent> events = normlab::read_event_file(files[0]);
  std::map<std::string, std::map<int64_t, double>> got;
  for (const auto& e : events)
    for (const auto& s : e.scalars) got[s.tag][e.step] = s.value;
  size_t checked = 0;
  for (const std::string& line : normlab::test::split_lines(slurp(run / "metrics.jsonl"))) {
    const normlab::TbStep want = normlab::metrics_line_scalars(line);
    for (const normlab::TbScalar& s : want.scalars) {
      EXPECT_TRUE(got[s.tag].count(want.step)) << s.tag << " at " << want.step;
      const double g = got[s.tag][want.step];
      if (std::isnan(s.value)) EXPECT_TRUE(std::isnan(g)) << s.tag;
      else EXPECT_EQ(g, static_cast<double>(static_cast<float>(s.value))) << s.tag << " at " << want.step;
      ++checked;
    }
  }
  EXPECT_FALSE(events.back().texts.empty());
  if (!events.back().texts.empty()) {
    EXPECT_EQ(events.back().texts[0].first, "status");
    const std::string status = nlohmann::json::parse(slurp(run / "result.json"))["status"];
    EXPECT_EQ(events.back().texts[0].second.rfind(status, 0), 0u) << events.back().texts[0].second;
  }
  return checked;
}

// normlab run with a file-size limit of `kib` KiB (ulimit -f), through sh.
normlab::test::CliResult run_cli_limited(int kib, const std::vector<std::string>& args) {
  const char* bin = std::getenv("NORMLAB_TEST_BINARY");
  std::vector<std::string> argv = {"-c", "ulimit -f " + std::to_string(kib) + " && exec \"$0\" \"$@\"",
                                   bin && *bin ? bin : NORMLAB_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return normlab::test::run_program("/bin/sh", argv);
}

// Every file and folder below root, with the files' contents.
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> t;
  for (const auto& e : fs::recursive_directory_iterator(root))
    t[e.path().lexically_relative(root).string()] = e.is_symlink() ? "link" : e.is_regular_file() ? slurp(e.path()) : "dir";
  return t;
}

}  // namespace

TEST(TensorBoardCli, TrainWritesTheRunsNumbersAsItGoes) {
  const fs::path dir = fresh_dir("tb_cli_train");
  fs::create_directories(dir);
  const auto r = run_cli({"train", "--steps", "6", "--eval_every", "2", "--layers", "3", "--batch_size", "4", "--out",
                          (dir / "run").string(), "--tensorboard", (dir / "tb" / "run").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_GT(expect_tb_matches(dir / "tb" / "run", dir / "run"), 30u);
  // The run directory holds only its run: the events went beside it.
  EXPECT_FALSE(fs::exists(dir / "run" / "tb"));
}

TEST(TensorBoardCli, SweepGivesEachPointItsOwnRun) {
  const fs::path dir = fresh_dir("tb_cli_sweep");
  const auto r = run_cli({"sweep", "--out", (dir / "sweep").string(), "--jobs", "2", "--tensorboard", (dir / "tb").string(),
                          "-q", "steps=4", "eval_every=2", "batch_size=4", "layers=1,2", "placement=pre,post"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::set<std::string> names = {"layers=1/placement=pre", "layers=1/placement=post", "layers=2/placement=pre",
                                        "layers=2/placement=post"};
  // Events in each point's folder and in no other (none for the sweep as a whole); one file in
  // each (expect_tb_matches), its numbers and config the point's own.
  std::set<std::string> with_events;
  for (const auto& e : fs::recursive_directory_iterator(dir / "tb"))
    if (e.is_regular_file() && e.path().filename().string().find("tfevents") != std::string::npos)
      with_events.insert(e.path().parent_path().lexically_relative(dir / "tb").string());
  EXPECT_EQ(with_events, names);
  for (const std::string& name : names) {
    // Every number of the point's metrics.jsonl, at its step ...
    EXPECT_GT(expect_tb_matches(dir / "tb" / name, dir / "sweep" / "runs" / name), 8u) << name;
    // ... and so is its config text: the point's own layers and placement.
    const std::vector<std::string> files = normlab::event_files((dir / "tb" / name).string());
    if (files.empty()) continue;
    std::string config;
    for (const auto& e : normlab::read_event_file(files[0]))
      for (const auto& [tag, text] : e.texts)
        if (tag == "config") config = text;
    const std::string layers = name.substr(7, 1), placement = name.substr(name.find("placement=") + 10);
    EXPECT_NE(config.find("\"layers\": " + layers + ","), std::string::npos) << name << ": " << config;
    EXPECT_NE(config.find("\"placement\": \"" + placement + "\""), std::string::npos) << name << ": " << config;
  }
}

// A file-size limit hit by the events file while the run trains stops the run with an error
// naming the file (docs/tensorboard.md), and the file ends with a whole record: the reader, which
// checks every length and CRC, reads it to its end.
TEST(TensorBoardCli, AFileSizeLimitStopsTheRunAndLeavesNoTornRecord) {
  const fs::path dir = fresh_dir("tb_cli_limit");
  fs::create_directories(dir);
  // The events file starts with the config (~1.6 KB) and then grows about as fast as
  // metrics.jsonl (~0.4 KB an evaluation): it reaches 4 KiB a few evaluations first.
  const auto r = run_cli_limited(4, {"train", "--steps", "60", "--eval_every", "1", "--layers", "3", "--batch_size", "2",
                                     "--threads", "1", "--out", (dir / "run").string(), "--tensorboard", (dir / "tb").string(), "-q"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("tfevents"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << describe(r);
  EXPECT_FALSE(fs::exists(dir / "run"));
  const std::vector<std::string> files = normlab::event_files((dir / "tb").string());
  ASSERT_EQ(files.size(), 1u);
  std::vector<normlab::TbEvent> events;
  EXPECT_NO_THROW(events = normlab::read_event_file(files[0]));
  EXPECT_GT(events.size(), 3u);
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().string().find(".partial."), std::string::npos) << e.path();
}

// `export tensorboard` writes below --out only: a symbolic link at DIR/<name> (or a folder between)
// into someone's directory is refused before anything is written.
TEST(ExportCli, NeverWritesThroughASymbolicLink) {
  const fs::path dir = fresh_dir("export_link");
  fs::create_directories(dir / "in");
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "notes.txt") << "mine\n";
  auto r = run_cli({"train", "--steps", "2", "--eval_every", "1", "--layers", "1", "--batch_size", "2", "--out",
                    (dir / "in" / "r").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  fs::create_directories(dir / "tb");
  fs::create_directory_symlink("../mine", dir / "tb" / "r");  // DIR/<name> itself
  r = run_cli({"export", "tensorboard", (dir / "in" / "r").string(), "--out", (dir / "tb").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << describe(r);
  fs::create_directory_symlink("mine", dir / "tb2");  // a folder between DIR and the run's events
  fs::create_directories(dir / "tb3");
  fs::create_directory_symlink("../mine", dir / "tb3" / "in");
  r = run_cli({"export", "tensorboard", (dir / "in").string(), "--out", (dir / "tb3").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << describe(r);
  EXPECT_EQ(tree(dir / "mine"), (std::map<std::string, std::string>{{"notes.txt", "mine\n"}}));
  // --out itself may be a link a person made (tb2 -> mine): they chose where it goes.
  r = run_cli({"export", "tensorboard", (dir / "in" / "r").string(), "--out", (dir / "tb2").string(), "-q"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(normlab::event_files((dir / "mine" / "r").string()).size(), 1u);
}

// A file-size limit (or a full disk) fails the export with nothing left of it: no partial file,
// no folder it made, and an earlier export as it was.
TEST(ExportCli, AFailedWriteLeavesNothingOfTheExport) {
  const fs::path dir = fresh_dir("export_limit");
  fs::create_directories(dir / "in");
  for (const char* name : {"a", "b"}) {
    auto r = run_cli({"train", "--steps", "4", "--eval_every", "1", "--layers", "3", "--batch_size", "2", "--out",
                      (dir / "in" / name).string(), "-q"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
  }
  auto r = run_cli_limited(1, {"export", "tensorboard", (dir / "in").string(), "--out", (dir / "tb").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << describe(r);
  EXPECT_FALSE(fs::exists(dir / "tb")) << "the export left " << (fs::exists(dir / "tb") ? tree(dir / "tb").begin()->first : "");
  // Into an earlier export: that one is kept as it was.
  r = run_cli({"export", "tensorboard", (dir / "in" / "a").string(), "--out", (dir / "tb").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto before = tree(dir / "tb");
  r = run_cli_limited(1, {"export", "tensorboard", (dir / "in").string(), "--out", (dir / "tb").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(tree(dir / "tb"), before);
}
