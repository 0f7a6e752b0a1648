// `train --tensorboard` and `sweep --tensorboard`: the event files the commands write hold every
// number of each run's metrics.jsonl (read back with normlab's reader, which checks every CRC;
// scripts/tensorboard_check.sh reads them with TensorBoard itself).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
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
  size_t points = 0;
  for (const char* name : {"layers=1/placement=pre", "layers=1/placement=post", "layers=2/placement=pre", "layers=2/placement=post"}) {
    EXPECT_GT(expect_tb_matches(dir / "tb" / name, dir / "sweep" / "runs" / name), 8u) << name;
    ++points;
  }
  EXPECT_EQ(points, 4u);
}
