// `normlab export tensorboard PATH... --out DIR`: finished run directories (a run, a sweep, a
// results tree) as TensorBoard event files; the mapping and the format are
// src/tensorboard/ (normlab/tensorboard.h), this file parses and prints.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli_common.h"
#include "normlab/tensorboard.h"

namespace normlab::cli {

namespace {

struct ExportArgs {
  std::vector<std::string> paths;
  std::string out = "tensorboard";
};

int run_export_tensorboard(const ExportArgs& a, const GlobalOptions& g) {
  TbExportOptions opt;
  opt.interrupt = catch_interrupts();
  opt.on_notice = [](const std::string& s) { spdlog::warn("{}", s); };
  const std::vector<TbExport> done = export_tensorboard(a.paths, a.out, opt);
  size_t scalars = 0;
  for (const TbExport& e : done) scalars += e.scalars;
  if (g.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const TbExport& e : done) j.push_back({{"run", e.run}, {"name", e.name}, {"file", e.file}, {"scalars", e.scalars}});
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  if (!g.quiet)
    for (const TbExport& e : done) std::printf("%s -> %s (%zu scalars)\n", e.run.c_str(), e.file.c_str(), e.scalars);
  std::printf("exported %zu run%s (%zu scalars) to %s; view with: tensorboard --logdir %s\n", done.size(),
              done.size() == 1 ? "" : "s", scalars, a.out.c_str(), a.out.c_str());
  return 0;
}

}  // namespace

Runner add_export(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* sub = app.add_subcommand("export", "Write finished runs in another tool's format (TensorBoard event files)");
  sub->require_subcommand(1);
  CLI::App* tb = sub->add_subcommand("tensorboard", "Finished run directories (a run, a sweep, a folder of them) as TensorBoard event files");
  tb->add_option("paths", args->paths, "Run directories, sweep directories or folders holding them")->required();
  tb->add_option("--out", args->out, "The TensorBoard log directory: one run per exported run, DIR/<name>/ (default: tensorboard)");
  add_global_flags(*tb, g);
  tb->footer(R"(Examples:
  normlab export tensorboard runs/20261203-toy-rmsnorm-pre-L6-s0
  normlab export tensorboard results/sweeps/depth-torch --out tb && tensorboard --logdir tb

Each run becomes DIR/<name>/events.out.tfevents.<time>.normlab-export, <name> its path below the
folder given (without a sweep's runs/): every number of metrics.jsonl as a scalar of the same name,
per-layer lists as <field>/layer_<k>, timing as timing/<field>, result.json's numbers as
result/<field>, and the texts config and status. Exporting again replaces the earlier export's
files; event files that an export did not write (a run trained there with --tensorboard) are
never touched: the export stops and says so, as it does for a symbolic link at DIR/<name>. All or
nothing: a failed write or Ctrl-C (SIGINT, SIGTERM, SIGHUP) leaves DIR as it was. docs/tensorboard.md
has the details.)");
  return [args, &g, tb] {
    if (tb->parsed()) return run_export_tensorboard(*args, g);
    return 2;
  };
}

}  // namespace normlab::cli
