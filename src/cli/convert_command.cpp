// `normlab convert`: a trained LayerNorm run to an RMSNorm model (naive or exact), with the
// validation loss before and after (and after --calibrate steps of fine-tuning). The workflow is
// convert_run (src/experiment/convert_run.cpp); this file parses and prints.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "cli_common.h"
#include "normlab/convert_run.h"

namespace normlab::cli {

namespace {

struct ConvertArgs {
  std::string run_dir, to, method, out, gain;  // method: exact for rmsnorm; layernorm has one mapping
  int64_t calibrate = 0;
};

int run_convert(const ConvertArgs& a, const GlobalOptions& g) {
  ConvertRequest req;
  req.source = a.run_dir;
  NL_USAGE(a.to.empty() != a.gain.empty(), "give one of --to (another norm) and --gain (the same norm's gains)");
  if (!a.to.empty()) req.to = parse_kind<NormKind>(a.to);  // none: refused by convert_run
  req.gain = a.gain;
  req.method = a.method;
  req.out = a.out;
  req.calibrate = a.calibrate;
  req.interrupt = catch_interrupts();
  req.on_notice = [](const std::string& s) { spdlog::warn("{}", s); };
  const ConvertReport r = convert_run(req);
  if (g.json) {
    std::cout << r.json << "\n";
    return 0;
  }
  const bool to_ln = a.gain.empty() && req.to == NormKind::layernorm;
  const std::string target = a.gain.empty() ? std::string(to_string(req.to)) : a.gain + " gains";
  std::printf("%s -> %s (%s, %s): validation loss %.4f before, %.4f converted", a.run_dir.c_str(), a.out.c_str(),
              target.c_str(), r.method.c_str(), r.val_loss_before, r.val_loss_converted);
  if (to_ln)
    std::printf(" (the stream's writers are %scentred: the mapping is %sexact)", r.stream_centred ? "" : "not ",
                r.stream_centred ? "" : "not ");
  if (a.calibrate > 0)
    std::printf(", %.4f after %lld calibration steps", r.val_loss_calibrated, static_cast<long long>(a.calibrate));
  std::printf("\n");
  return 0;
}

}  // namespace

Runner add_convert(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand(
      "convert", "Convert a trained LayerNorm run to RMSNorm (naive or exact), or back; or its gains to Gemma's 1 + w");
  sub->add_option("run_dir", args->run_dir, "A run directory (config.json + model.safetensors)")->required();
  sub->add_option("--to", args->to, "Target norm: rmsnorm (from layernorm) or layernorm (from rmsnorm)");
  sub->add_option("--gain", args->gain,
                  "Instead of --to: gemma (gains as Gemma's 1 + w, w = gamma - 1) or plain (gamma = 1 + w), the same "
                  "norm and function");
  sub->add_option("--method", args->method,
                  "--to rmsnorm: naive (keep gamma, drop beta) or exact (function-preserving, Pre-LN; the default)");
  sub->add_option("--out", args->out,
                  "New directory (its parent must exist): config.json, model.safetensors, convert.json; written "
                  "under OUT.partial.<pid> and renamed when whole")
      ->required();
  sub->add_option("--calibrate", args->calibrate,
                  "Then fine-tune this many steps (at most 2^40) and report the loss (model.safetensors stays the "
                  "converted model)")
      ->check(whole_count);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab convert runs/ln --to rmsnorm --method exact --out runs/ln-as-rms
  normlab convert runs/ln --to rmsnorm --method naive --calibrate 100 --out runs/ln-naive-100
  normlab convert runs/ln-as-rms --to layernorm --out runs/ln-round-trip
  normlab convert runs/rms --gain gemma --out runs/rms-gemma     (and --gain plain back)

exact folds each LayerNorm's beta into the bias of the linear that reads it (the head gets a bias)
and centres every writer of the residual stream, so that every LayerNorm sees zero-mean input and
equals an RMSNorm: the logits are preserved (Pre-LN with the final norm only; other placements are
refused with the reason). naive keeps gamma and drops beta, as community scripts do. --to layernorm
keeps each gain and sets beta = 0: exact when the stream's writers are centred (a model `exact`
produced), not otherwise; convert.json says which.
A directory named OUT is always a whole conversion: an error, Ctrl-C (exit 130) or SIGTERM (143)
removes the partial directory; one left by SIGKILL is named by the next convert into OUT.)");
  return [args, &g] { return run_convert(*args, g); };
}

}  // namespace normlab::cli
