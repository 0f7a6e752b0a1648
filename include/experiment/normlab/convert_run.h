// `normlab convert` as one library call: a trained run's directory in, a new directory out
// (config.json, model.safetensors, convert.json), written as a run directory is (run.h): under
// <out>.partial.<pid>, renamed to <out> only when whole, never replacing anything; a failure or an
// interrupt removes the partial directory, so a directory named <out> is always a finished
// conversion.
#pragma once
#include <csignal>
#include <functional>
#include <string>

#include "normlab/convert.h"
#include "normlab/kinds.h"

namespace normlab {

struct ConvertRequest {
  std::string source;  // a run directory: config.json + model.safetensors
  NormKind to = NormKind::rmsnorm;  // rmsnorm (from layernorm) or layernorm (from rmsnorm)
  std::string method;  // to rmsnorm: "naive" or "exact" ("" = exact); to layernorm: "" (one mapping)
  // "gemma" or "plain": the same norm with its gains reparametrized (convert_gain_parametrization)
  // instead of another norm; `to` and `method` are then unused.
  std::string gain;
  std::string out;     // a new directory; its parent must exist
  int64_t calibrate = 0;  // then fine-tune this many steps and report the loss
  // Set (to the signal's number) by the caller's handler: the conversion stops at the next
  // calibration step or write, removes its partial directory and throws Interrupted.
  const volatile std::sig_atomic_t* interrupt = nullptr;
  std::function<void(const std::string&)> on_notice;  // stale partial directories of <out>
};

struct ConvertReport {
  std::string method;  // the method name that ran: naive, exact, gain, gemma-gain, plain-gain
  double val_loss_before = 0, val_loss_converted = 0, val_loss_calibrated = 0;
  bool stream_centred = false;  // to layernorm: the mapping is exact exactly when this holds
  std::string json;             // convert.json's text
};

// Every input (the flags, the source run, the destination) is checked before anything is written:
// UsageError naming the problem.
ConvertReport convert_run(const ConvertRequest& request);

}  // namespace normlab
