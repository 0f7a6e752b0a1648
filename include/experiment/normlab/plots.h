// Per-layer pictures as SVG text: a run's per-layer field over its eval steps (heatmap, profile
// lines), probe results (grouped bars) and a sweep as small multiples arranged like its summary
// table. The plot functions are pure (data in, SVG out); only the read_* functions read files.
//
// Every figure is meant to survive a paper: axis labels say the unit, text is at least 11 px at
// full size, tick labels are thinned so that none overlap, and what colour tells is told again by
// a dash pattern, a marker or a hatch (it reads in grayscale). Heatmaps use viridis.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/probe.h"
#include "normlab/sweep.h"

namespace normlab {

// ---- one run ---------------------------------------------------------------------------------
// One per-layer field of a run's metrics.jsonl, record by record.
struct LayerHistory {
  std::vector<int64_t> steps;                // the records' steps, in file order
  std::vector<std::vector<double>> values;   // [step index][layer], [..][0] is layer 1 (the first block); NaN: null
  std::string field;                         // "stream_norm", "block_grad_norm", ...
  std::string status;                        // result.json's status (ok, collapsed, diverged); "" without one
  int64_t status_step = -1;                  // its diverged_step or collapsed_step (-1: none)
  std::string title;                         // the run as shown: "SWEEP: POINT NAME", or the directory's name
  // An encoder-decoder's run: its lists hold this many encoder layers, then the decoder's; each
  // plot draws the two stacks as two panels, one above the other (0: one stack of blocks).
  int64_t encoder_layers = 0;
  std::string stack;                         // a panel's stack: "encoder", "decoder"; "" for blocks
};
// An encoder-decoder's history as its two stacks, each numbered from layer 1.
std::vector<LayerHistory> split_stacks(const LayerHistory& h);

// RUN_DIR/metrics.jsonl's records that have `field` (a list per block; null entries are NaN) and
// RUN_DIR/result.json's status. A run still going (no result.json yet) has status "". UsageError
// naming the file or the field when metrics.jsonl is missing, no record has the field, the field is
// not a list, or result.json is not JSON.
LayerHistory read_layer_history(const std::string& run_dir, const std::string& field);

// Layer x step heatmap: one cell per (record, layer), layer 1 at the bottom, log colour scale
// (viridis) with a labelled colour bar; values <= 0 and non-finite ones in hatched greys that a
// legend explains; a diverged or collapsed run marked by a vertical line at its status_step.
std::string plot_layer_heatmap_svg(const LayerHistory& h);

// The field layer by layer at the first record and at the last (a diverged run's last record with a
// finite value), log y, and `init` (e.g. probe's act_norm at initialization) when given.
std::string plot_layer_profile_lines_svg(const LayerHistory& h, const std::vector<double>& init = {},
                                         const std::string& init_label = "init (probe)");

// The per-layer fields at initialization, for the profile's init line: RUN_DIR/config.json probed
// (probe_config) at the run's seed with one batch of 16 sequences; the same statistics as
// metrics.jsonl's stream_norm and block_grad_norm before the first step. UsageError when the config
// cannot be read or probed.
struct LayerInit {
  std::vector<double> stream_norm, block_grad_norm;
  std::string label;  // "init (probe: seed 0, 16 sequences)"
  const std::vector<double>& of(const std::string& field) const;  // UsageError for another field
};
LayerInit probe_layer_init(const std::string& run_dir);

// ---- probe -----------------------------------------------------------------------------------
// One architecture's per-layer probe numbers (mean over seeds), layer 1 first; a NaN or an empty
// vector draws no bar.
struct ProbeBarSeries {
  std::string label;                   // "gpt post-layernorm L=12 init=xavier"
  std::vector<double> stream_norm;     // mean_t ||x_l,t||, the stream after block l
  std::vector<double> grad_norm;       // ||dL/dtheta_l||_F over block l's parameters
  std::vector<double> identity_share;  // ||identity term|| / (||identity|| + ||F term||) of dL/dx_{l-1}, in [0, 1]
};
ProbeBarSeries probe_bar_series(const ConfigProbe& probe);

// Three panels (stream norm and gradient norm on log axes, identity share on [0, 1]), one group of
// bars per layer, one colour + hatch per series. title "": a default naming probe.
std::string plot_probe_bars_svg(const std::vector<ProbeBarSeries>& series, const std::string& title = "");

// ---- a sweep ---------------------------------------------------------------------------------
// The last record of a per-layer field for each point of a summary's cells.
struct PointLayers {
  std::string point;            // the point's name (its run directory below DIR/runs)
  int64_t step = -1;            // the record's step
  std::vector<double> values;   // per layer, layer 1 first; NaN: null
};
struct CellLayers {
  std::string field;
  std::vector<std::vector<std::vector<PointLayers>>> cells;  // [row][col]: the points that have a record
  std::vector<std::string> fields_seen;  // every per-layer field of the metrics read, in order of first sight
  size_t runs_read = 0;                  // points whose metrics.jsonl was read
};
// For each point of s.cells[r][c].points, DIR/runs/<point>/metrics.jsonl's last record with a finite
// positive value of `field` (a diverged run's last records hold nulls and zeros: the one before
// them); points without one (pending, or never finite) are left out.
CellLayers read_cell_layers(const std::string& sweep_dir, const SweepSummary& s,
                            const std::string& field = "block_grad_norm");
// UsageError when runs were read and none had `layers.field` (a mistyped field would draw empty
// panels), naming the per-layer fields they have.
void require_layer_field(const CellLayers& layers, const std::string& sweep_dir);

enum class SmallMultiple {
  loss_curves,    // validation loss by step (s.curves: the mean over seeds), one log y for all cells
  layer_profile,  // `layers`' field by layer at each point's last record (one line per seed), one log y
};
// A grid laid out like the summary table: one row per s.row_values, one column per s.col_labels.
// Cells whose seeds all diverged or collapsed are tinted and say so ("diverged @ step N",
// "collapsed"); cells with nothing run yet say "pending".
std::string plot_sweep_small_multiples_svg(const SweepSummary& s, SmallMultiple kind, const CellLayers& layers = {});

}  // namespace normlab
