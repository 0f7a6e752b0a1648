// TensorBoard event files: the CRC against published check values, the TFRecord framing byte by
// byte, the reader refusing torn and corrupt files, the metrics mapping, and export of real runs
// (every scalar read back equal to the float32 of metrics.jsonl).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "normlab/error.h"
#include "normlab/run.h"
#include "normlab/run_records.h"
#include "normlab/tensorboard.h"
#include "test_util.h"

using namespace normlab;
namespace fs = std::filesystem;
using normlab::test::fresh_dir;
using normlab::test::slurp;

namespace {

TrainConfig tiny(int64_t steps = 6) {
  TrainConfig c;
  c.model.layers = 12;  // two-digit layer numbers: the tags are zero-padded
  c.model.d_model = 16;
  c.model.d_hidden = 32;
  c.model.heads = 2;
  c.batch_size = 4;
  c.steps = steps;
  c.eval_every = 3;
  c.eval_batches = 2;
  c.threads = 1;
  return c;
}

float f32(double v) { return static_cast<float>(v); }

// tag -> step -> value, over every event of the files
std::map<std::string, std::map<int64_t, double>> scalars_of(const std::vector<TbEvent>& events) {
  std::map<std::string, std::map<int64_t, double>> out;
  for (const TbEvent& e : events)
    for (const TbScalar& s : e.scalars) out[s.tag][e.step] = s.value;
  return out;
}

// Every number of metrics.jsonl (per layer too) is the scalar of its tag, equal to its float32.
void expect_events_match_run(const std::vector<TbEvent>& events, const fs::path& run) {
  auto scalars = scalars_of(events);
  size_t checked = 0;
  for (const std::string& line : normlab::test::split_lines(slurp(run / "metrics.jsonl"))) {
    auto j = nlohmann::json::parse(line);
    const int64_t step = j["step"];
    for (const auto& [key, v] : j.items()) {
      if (key == "step") continue;
      auto check = [&](const std::string& tag, const nlohmann::json& x) {
        ASSERT_TRUE(scalars[tag].count(step)) << tag << " at step " << step;
        const double got = scalars[tag][step];
        if (x.is_null()) EXPECT_TRUE(std::isnan(got)) << tag;
        else EXPECT_EQ(got, static_cast<double>(f32(x.get<double>()))) << tag << " at step " << step;
        ++checked;
      };
      if (v.is_array()) {
        for (size_t k = 0; k < v.size(); ++k) check(fmt::format("{}/layer_{:02d}", key, k + 1), v[k]);
      } else {
        check(key, v);
      }
    }
  }
  EXPECT_GT(checked, 30u);
}

}  // namespace

TEST(TensorBoard, Crc32cGivesThePublishedCheckValues) {
  // The CRC catalogue's check value (CRC-32/ISCSI), and RFC 3720's B.4 vectors.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  // masked: rotate right 15, add the constant
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, RecordFramingIsLengthCrcPayloadCrc) {
  const std::string payload = "abc";
  const std::string r = tfrecord(payload);
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(std::memcmp(r.data(), "\x03\0\0\0\0\0\0\0", 8), 0);  // little-endian uint64 length
  uint32_t len_crc = 0, data_crc = 0;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 15, 4);
  EXPECT_EQ(len_crc, masked_crc32c(r.data(), 8));
  EXPECT_EQ(r.substr(12, 3), payload);
  EXPECT_EQ(data_crc, masked_crc32c("abc", 3));
}

TEST(TensorBoard, EventsReadBackAsWritten) {
  fs::path dir = fresh_dir("tb_events");
  std::string path;
  {
    EventWriter w(dir.string(), "a test");
    w.append(scalars_event(1.5, 7, {{"loss", 2.25}, {"g/layer_1", 1e-30}, {"nan", NAN}}));
    w.append(text_event(2.5, 9, "status", "ok, *markdown*"));
    w.close();
    path = w.path();
  }
  EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
  const std::vector<TbEvent> ev = read_event_file(path);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_EQ(ev[0].writer, "a test");
  EXPECT_EQ(ev[1].step, 7);
  EXPECT_EQ(ev[1].wall_time, 1.5);
  ASSERT_EQ(ev[1].scalars.size(), 3u);
  EXPECT_EQ(ev[1].scalars[0].tag, "loss");
  EXPECT_EQ(ev[1].scalars[0].value, 2.25);
  EXPECT_EQ(ev[1].scalars[1].value, static_cast<double>(1e-30f));  // float32, as TensorBoard holds it
  EXPECT_TRUE(std::isnan(ev[1].scalars[2].value));
  ASSERT_EQ(ev[2].texts.size(), 1u);
  EXPECT_EQ(ev[2].texts[0], (std::pair<std::string, std::string>{"status", "ok, *markdown*"}));
  // A second writer into the same directory gets a file of its own.
  EventWriter again(dir.string(), "a test");
  EXPECT_NE(again.path(), path);
  EXPECT_EQ(event_files(dir.string()).size(), 2u);
}

TEST(TensorBoard, ReaderRefusesTornAndCorruptFiles) {
  fs::path dir = fresh_dir("tb_corrupt");
  fs::create_directories(dir);
  const std::string good = version_event(1, "x") + scalars_event(2, 3, {{"a", 1}});
  auto expect_refused = [&](const std::string& bytes, const std::string& words) {
    const fs::path p = dir / "events.out.tfevents.bad";
    std::ofstream(p, std::ios::binary) << bytes;
    try {
      read_event_file(p.string());
      ADD_FAILURE() << "accepted: " << words;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_refused(good.substr(0, good.size() - 1), "torn");
  expect_refused(good.substr(0, good.size() - 20), "record 2");
  std::string flipped = good;
  flipped[flipped.size() - 6] ^= 0x01;  // a payload byte of the second record
  expect_refused(flipped, "data's CRC");
  flipped = good;
  flipped[0] ^= 0x01;  // the first record's length
  expect_refused(flipped, "length's CRC");
  expect_refused(good + tfrecord("\xff\xff\xff"), "not an Event");
}

TEST(TensorBoard, MetricsLinesMapToTags) {
  const TbStep s = metrics_line_scalars(
      R"({"step": 250, "val_loss": 1.5, "grad_norm": null, "stream_norm": [1,2,3,4,5,6,7,8,9,10], "note": "x"})");
  EXPECT_EQ(s.step, 250);
  std::map<std::string, double> m;
  for (const TbScalar& t : s.scalars) m[t.tag] = t.value;
  EXPECT_EQ(m.size(), 12u);  // the string is not a scalar
  EXPECT_EQ(m["val_loss"], 1.5);
  EXPECT_TRUE(std::isnan(m["grad_norm"]));
  EXPECT_EQ(m["stream_norm/layer_01"], 1);
  EXPECT_EQ(m["stream_norm/layer_10"], 10);
  EXPECT_EQ(timing_line_scalars(R"({"step": 3, "seconds_per_step": 0.5})").scalars[0].tag, "timing/seconds_per_step");
  EXPECT_THROW(metrics_line_scalars("[1, 2]"), UsageError);
  EXPECT_THROW(metrics_line_scalars(R"({"val_loss": 1})"), UsageError);
  EXPECT_THROW(metrics_line_scalars(R"({"step": 1.5})"), UsageError);
  EXPECT_EQ(result_status_text(R"({"status": "diverged", "diverged_step": 312, "diverged_reason": "non-finite loss"})"),
            "diverged at step 312 (non-finite loss)");
  // A result.json someone edited: no field of an unexpected type stops the export.
  EXPECT_EQ(result_status_text(R"({"status": 3, "diverged_step": "x"})"), "unknown");
  EXPECT_TRUE(result_scalars(R"({"final_val_loss": "x", "steps_done": 5})").size() == 1);
}

// An encoder-decoder's per-layer lists: its encoder's layers, then its decoder's, each stack
// numbered from 1 (lists of another length keep layer_K).
TEST(TensorBoard, AnEncoderDecodersLayersAreTaggedByStack) {
  TrainConfig c;
  c.model.layers = 6;
  EXPECT_EQ(encoder_layers_of(c), 0);
  c.model.model = ModelKind::encdec;
  EXPECT_EQ(encoder_layers_of(c), 6);
  c.model.encoder_layers = 12;
  EXPECT_EQ(encoder_layers_of(c), 12);
  const TbStep s = metrics_line_scalars(R"({"step": 5, "stream_norm": [1,2,3,4,5,6,7,8,9,10,11,12], "x": [7]})", 10);
  std::map<std::string, double> m;
  for (const TbScalar& t : s.scalars) m[t.tag] = t.value;
  EXPECT_EQ(m["stream_norm/encoder_01"], 1);
  EXPECT_EQ(m["stream_norm/encoder_10"], 10);
  EXPECT_EQ(m["stream_norm/decoder_1"], 11);
  EXPECT_EQ(m["stream_norm/decoder_2"], 12);
  EXPECT_EQ(m["x/layer_1"], 7);
  EXPECT_EQ(m.size(), 13u);
}

TEST(TensorBoard, ARunLogsWhatItsRunDirectoryHolds) {
  fs::path tb = fresh_dir("tb_runlog");
  fs::path dir = fresh_dir("tb_runlog_run");
  TrainConfig cfg = tiny();
  std::unique_ptr<RunEventLog> log;
  RunOptions o;
  o.dir = dir.string();
  o.on_start = [&] { log = std::make_unique<RunEventLog>(tb.string(), "{}"); };
  o.on_eval = [&](const EvalRecord& r) { log->eval(r); };
  const std::string result = run_and_record(cfg, o);
  log->finish(result);
  const std::vector<std::string> files = event_files(tb.string());
  ASSERT_EQ(files.size(), 1u);
  const std::vector<TbEvent> ev = read_event_file(files[0]);
  expect_events_match_run(ev, dir);
  auto scalars = scalars_of(ev);
  EXPECT_EQ(scalars["result/final_val_loss"][6], static_cast<double>(f32(nlohmann::json::parse(result)["final_val_loss"].get<double>())));
  EXPECT_TRUE(scalars.count("timing/seconds_per_step"));
  EXPECT_EQ(ev.back().texts.at(0).first, "status");
}

TEST(TensorBoard, ExportWritesEveryRunAndReplacesOnlyItsOwnFiles) {
  const fs::path root = fresh_dir("tb_export_src");
  fs::create_directories(root / "sweep" / "runs" / "layers=2");
  RunOptions o;
  o.dir = (root / "sweep" / "runs" / "layers=2" / "seed=0").string();
  run_and_record(tiny(), o);
  o.dir = (root / "single").string();
  run_and_record(tiny(3), o);
  const fs::path out = fresh_dir("tb_export_out");
  std::vector<TbExport> done = export_tensorboard({root.string()}, out.string());
  ASSERT_EQ(done.size(), 2u);
  std::map<std::string, TbExport> by_name;
  for (const TbExport& e : done) by_name[e.name] = e;
  const std::string base = root.filename().string();
  ASSERT_TRUE(by_name.count(base + "/sweep/layers=2/seed=0")) << done[0].name;  // the sweep's runs/ dropped
  ASSERT_TRUE(by_name.count(base + "/single"));
  for (const TbExport& e : done) {
    EXPECT_GT(e.scalars, 30u);
    expect_events_match_run(read_event_file(e.file), e.run);
  }
  // Again: the earlier export's file is replaced, not joined by a second one.
  done = export_tensorboard({(root / "single").string()}, out.string() + "/" + base);
  EXPECT_EQ(event_files(out.string() + "/" + base + "/single").size(), 1u);
  // Someone else's events file at a destination: nothing is written, nothing removed.
  const fs::path foreign = out / base / "single" / "events.out.tfevents.1.someone";
  std::ofstream(foreign) << "not ours";
  EXPECT_THROW(export_tensorboard({(root / "single").string()}, out.string() + "/" + base), UsageError);
  EXPECT_TRUE(fs::exists(foreign));
  EXPECT_EQ(event_files((out / base / "single").string()).size(), 2u);
  // Bad input
  EXPECT_THROW(export_tensorboard({(root / "nothing").string()}, out.string()), UsageError);
  fs::create_directories(root / "empty");
  EXPECT_THROW(export_tensorboard({(root / "empty").string()}, out.string()), UsageError);
  EXPECT_THROW(export_tensorboard({(root / "single").string()}, (root / "single" / "tb").string()), UsageError);
  EXPECT_FALSE(fs::exists(root / "single" / "tb"));
}
