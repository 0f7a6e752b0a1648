// `normlab plot`: the per-layer pictures of normlab/plots.h as SVG files, for papers and documents
// (the report draws the same ones into its pages).
//   normlab plot heatmap RUN [--field stream_norm] --out F.svg
//   normlab plot profile RUN [--field block_grad_norm] --out F.svg
//   normlab plot multiples SWEEP [--kind loss|layers] [--field F] [--where k=v] --out F.svg
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "normlab/io.h"
#include "normlab/plots.h"
#include "normlab/sweep.h"
#include "output.h"

namespace normlab::cli {

namespace {

struct PlotArgs {
  std::string path, out, field, kind = "loss";
  std::vector<std::string> where;
  bool init = false;  // profile: also the field at initialization, probed from the run's config
};

// The size of the file written (0 if it went meanwhile: nothing to fail the command for).
uintmax_t file_bytes(const std::string& path) {
  std::error_code ec;
  const uintmax_t n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

// The figure written, then one line (or, with --json, one JSON document) saying what it holds.
int write_plot(const PlotArgs& a, const GlobalOptions& g, const char* kind, const std::string& field, const std::string& svg) {
  write_plot_file(a.out, svg, "--out");
  if (g.json) {
    const nlohmann::json j{{"plot", kind}, {"path", a.path}, {"field", field}, {"out", a.out},
                            {"bytes", file_bytes(a.out)}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (!g.quiet) {
    std::printf("wrote %s\n", a.out.c_str());
  }
  return 0;
}

}  // namespace

Runner add_plot(CLI::App& app, GlobalOptions& g) {
  auto a = std::make_shared<PlotArgs>();
  CLI::App* sub = app.add_subcommand("plot", "Draw a run's or a sweep's per-layer pictures as SVG (heatmap, profile, small multiples)");
  sub->require_subcommand(1);
  auto common = [&](CLI::App* c, const char* what, const char* field_help) {
    c->add_option("path", a->path, what)->required();
    c->add_option("--out", a->out, "The SVG file (replaced only if an earlier `normlab plot` wrote it)")->required();
    c->add_option("--field", a->field, field_help);
    add_global_flags(*c, g);
  };
  CLI::App* heat = sub->add_subcommand("heatmap", "A run's per-layer field as a layer x step heatmap (log colour scale)");
  common(heat, "A run directory (metrics.jsonl)",
         "A per-layer field of metrics.jsonl: stream_norm (default), block_grad_norm, stream_max_abs, ...");
  CLI::App* prof = sub->add_subcommand("profile", "A run's per-layer field at its first and last evaluation, layer by layer");
  common(prof, "A run directory (metrics.jsonl)", "A per-layer field of metrics.jsonl (default stream_norm)");
  prof->add_flag("--init", a->init,
                 "Also the field at initialization: the run's config probed (its seed, one batch of 16 sequences; "
                 "stream_norm and block_grad_norm)");
  CLI::App* mult = sub->add_subcommand("multiples", "A sweep as small multiples laid out like its summary table");
  common(mult, "A sweep directory", "--kind layers: the per-layer field (default block_grad_norm)");
  mult->add_option("--kind", a->kind, "loss (validation loss by step, the default) or layers (each point's last per-layer record)");
  mult->add_option("--where", a->where, "key=v1,v2: only the points with one of these values (repeatable)");
  sub->footer(R"(Examples:
  normlab plot heatmap results/sweeps/deep-deepnorm-torch/runs/placement=post/layers=30/lr=1e-3/seed=0 --out post30.svg
  normlab plot heatmap RUN --field block_grad_norm --out grads.svg
  normlab plot profile RUN --field block_grad_norm --init --out grads-init-vs-final.svg
  normlab plot multiples results/sweeps/deep-deepnorm-torch --kind layers --out deepnorm.svg)");
  return [a, heat, prof, mult, &g] {
    NL_USAGE(!a->out.empty(), "--out needs a file name");
    CLI::App* used = heat->parsed() ? heat : prof->parsed() ? prof : mult;
    const bool field_given = used->count("--field") > 0;
    NL_USAGE(!field_given || !a->field.empty(), "--field needs a field name (e.g. stream_norm, block_grad_norm)");
    check_plot_file(a->out, "--out");
    if (heat->parsed() || prof->parsed()) {
      const char* kind = heat->parsed() ? "heatmap" : "profile";
      const LayerHistory h = read_layer_history(a->path, field_given ? a->field : "stream_norm");
      if (heat->parsed()) return write_plot(*a, g, kind, h.field, plot_layer_heatmap_svg(h));
      if (!a->init) return write_plot(*a, g, kind, h.field, plot_layer_profile_lines_svg(h));
      const LayerInit init = probe_layer_init(a->path);
      return write_plot(*a, g, kind, h.field, plot_layer_profile_lines_svg(h, init.of(h.field), init.label));
    }
    if (mult->parsed()) {
      NL_USAGE(a->kind == "loss" || a->kind == "layers", "--kind must be loss or layers, not '{}'", shown(a->kind, 40));
      NL_USAGE(a->kind == "layers" || !field_given,
               "--field applies to --kind layers (--kind loss draws the validation loss); add --kind layers");
      SummaryOptions o;
      o.where = a->where;
      const SweepSummary s = summarize_sweep(a->path, o);
      if (a->kind == "loss")
        return write_plot(*a, g, "multiples", "val_loss", plot_sweep_small_multiples_svg(s, SmallMultiple::loss_curves));
      const CellLayers layers = read_cell_layers(a->path, s, field_given ? a->field : "block_grad_norm");
      require_layer_field(layers, a->path);
      return write_plot(*a, g, "multiples", layers.field, plot_sweep_small_multiples_svg(s, SmallMultiple::layer_profile, layers));
    }
    return 2;
  };
}

}  // namespace normlab::cli
