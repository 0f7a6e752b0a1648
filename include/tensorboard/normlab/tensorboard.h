// TensorBoard event files (docs/tensorboard.md): what `train --tensorboard DIR`, `sweep
// --tensorboard DIR` and `export tensorboard` write, and the reader that checks them.
//
// The format is TensorFlow's: a file of TFRecord records (little-endian uint64 length, the masked
// CRC-32C of those 8 bytes, the payload, the masked CRC-32C of the payload), each payload a
// serialized Event protobuf (src/tensorboard/event.proto); the first event of a file holds the
// version "brain.Event:2". TensorBoard reads every file with "tfevents" in its name in a run's
// directory. The protobuf encoding is libprotobuf's (Debian's libprotobuf-dev), the CRC Boost.CRC's.
//
// What a run's events hold (one definition: the same for a run as it trains and for an export):
//   every number of a metrics.jsonl line but step, as a scalar named like its field ("val_loss");
//   every list of one (per layer), a scalar per entry "<field>/layer_<k>", k from 1 (the first
//   block), zero-padded so that TensorBoard lists layer 2 before layer 10; null (not finite) as NaN;
//   timing.jsonl's numbers as "timing/<field>"; at the end result.json's numbers (those a sweep
//   summary tabulates) as "result/<field>" and the text "status" ("ok", "diverged at step 312
//   (...)"); at step 0 the text "config" (config.json). Scalars are float32, as TensorBoard holds them.
#pragma once
#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/train.h"

namespace normlab {

// ---- the record format ---------------------------------------------------------------------
uint32_t crc32c(const void* data, size_t n);
// The CRC as TFRecord stores it: rotated right by 15 bits plus 0xa282ead8 (a CRC of data that
// holds CRCs is then not trivially related to them).
uint32_t masked_crc32c(const void* data, size_t n);
// payload framed as one record.
std::string tfrecord(const std::string& payload);

// ---- events --------------------------------------------------------------------------------
struct TbScalar {
  std::string tag;
  double value = 0;  // stored as float32
};
// One framed record each: the file version (with who wrote the file), scalars at a step, a text
// (markdown) at a step.
std::string version_event(double wall_time, const std::string& writer);
std::string scalars_event(double wall_time, int64_t step, const std::vector<TbScalar>& scalars);
std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown);

// The mapping above. A line that is not a JSON object with an integer "step" is a UsageError.
struct TbStep {
  int64_t step = 0;
  std::vector<TbScalar> scalars;
};
// encoder_layers > 0 (an encoder-decoder's run, run_records.h encoder_layers_of): its per-layer
// lists hold that many encoder layers and then the decoder's, tagged encoder_K and decoder_K
// instead of layer_K.
TbStep metrics_line_scalars(const std::string& metrics_line, int64_t encoder_layers = 0);
TbStep timing_line_scalars(const std::string& timing_line);
std::vector<TbScalar> result_scalars(const std::string& result_json);
// "ok", "diverged at step 312 (non-finite loss)", "collapsed from step 750": result.json's status.
std::string result_status_text(const std::string& result_json);
// config.json as a markdown code block, for the "config" text.
std::string config_text(const std::string& config_json);

// A new events file in DIR (created with its parents if absent), named
// events.out.tfevents.<unix seconds>.<host>.<pid>.<n> and never replacing a file; its first event
// the version. Each append is one checked write: TensorBoard sees it as soon as it is written, and
// a full disk or a file-size limit is a UsageError naming the file, with the file cut back to the
// end of its last whole record (never a torn one).
class EventWriter {
 public:
  EventWriter(const std::string& dir, const std::string& writer);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  void append(const std::string& framed_events);
  void close();  // checked; the destructor closes silently
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The events of a run as `train --tensorboard DIR` writes them while it trains (writer "normlab train").
class RunEventLog {
 public:
  RunEventLog(const std::string& dir, const std::string& config_json);
  void eval(const EvalRecord& r);
  // The result's scalars and status, and closes the file.
  void finish(const std::string& result_json);
  // A run that stopped without a result (interrupted, an error): the status says so.
  void stopped(const std::string& why);
  const std::string& path() const { return writer_.path(); }

 private:
  EventWriter writer_;
  int64_t encoder_layers_ = 0;  // encoder_layers_of(config)
  int64_t last_step_ = 0;
};

// ---- reading back --------------------------------------------------------------------------
struct TbEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, writer;  // the version event's
  std::vector<TbScalar> scalars;     // the float32 values, widened
  std::vector<std::pair<std::string, std::string>> texts;  // tag, text
};
// Every event of a file, each record's length and CRCs checked: a UsageError names the file and
// the record that is torn, corrupt or not an Event.
std::vector<TbEvent> read_event_file(const std::string& path);
// The files TensorBoard would read in DIR (names holding "tfevents"), sorted.
std::vector<std::string> event_files(const std::string& dir);

// ---- export --------------------------------------------------------------------------------
// `normlab export tensorboard PATH... --out DIR`: every finished run directory found at the paths
// (a run directory itself; or every run directory below a directory: a sweep's runs/, a results
// tree) becomes DIR/<name>/events.out.tfevents.<...>.normlab-export, <name> the run's path
// relative to the parent of the PATH it was found under, without the "runs" components of sweep
// directories. Everything is checked before anything is written: no runs found, two runs with one
// name, a destination holding event files that an earlier export did not write (a run trained
// there with --tensorboard, someone else's), a symbolic link at DIR/<name> or between them are
// UsageErrors. An earlier export's file of the same run is replaced (re-running updates). All
// files or none: each is written whole under DIR/<name>/.export.partial.<pid> first, and a failed
// write (a full disk, a file-size limit) or an interrupt removes them and every folder the export
// made, leaving DIR as it was; only then are they renamed.
struct TbExport {
  std::string run;    // the run directory read
  std::string name;   // its name under DIR
  std::string file;   // the events file written
  size_t scalars = 0; // scalar values written
};
struct TbExportOptions {
  // Set (by a signal handler) when the command is asked to stop: the export stops between runs
  // and files, removes what it wrote and throws Interrupted.
  const volatile std::sig_atomic_t* interrupt = nullptr;
  // Things worth a warning: partial files left by an export that was killed.
  std::function<void(const std::string&)> on_notice;
};
std::vector<TbExport> export_tensorboard(const std::vector<std::string>& paths, const std::string& out_dir,
                                         const TbExportOptions& options = {});

}  // namespace normlab
