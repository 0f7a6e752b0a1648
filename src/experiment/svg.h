// The SVG primitives every plot of the experiment layer draws with (sweep_plot.cpp, run_plots.cpp):
// written by hand, no plotting library. Not a public header.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace normlab::svg {

// Tableau 10: distinguishable, readable on white.
extern const char* const kColors[10];
const char* color(size_t i);

// Text for an attribute value or element content.
std::string esc(const std::string& s);
std::string tick_label(double v);

// Linear "nice" ticks (1, 2, 5 x 10^k steps) inside [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, int target = 5);
// Ticks for a log axis over [lo, hi] (both > 0): decades when the range is wide, 1-2-5 or 1..9 per
// decade when narrow, linear nice ticks when even those give fewer than three.
std::vector<double> log_ticks(double lo, double hi);

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double px0 = 0, px1 = 1;  // pixel range (px0 maps lo)
  double map(double v) const;
};

// Widens [lo, hi] a little (in log space for a log axis) so that points do not sit on the frame.
void pad(double& lo, double& hi, bool log);

// The <svg> element (12 px text) and its white background; the caller closes it.
std::string header(double w, double h);

// Frame, grid lines, ticks and axis labels of one panel.
std::string frame(const Axis& x, const Axis& y, const std::vector<double>& xt, const std::vector<std::string>& xl,
                  const std::vector<double>& yt, const std::string& xlabel, const std::string& ylabel,
                  const std::string& title);

std::string cross(double x, double y, double r, const char* stroke);

// Whole SVG documents (each from header()) one above the other, in one document as wide as the
// widest.
std::string stack_vertically(const std::vector<std::string>& documents);

// A whole small SVG saying `what` (nothing to plot).
std::string empty_plot(const std::string& what);

// ---- for the per-layer plots (run_plots.cpp, sweep_multiples.cpp) ------------------------------
// Estimated width of `text` in DejaVu Sans at `font_px`: 0.64 em a character (a digit's advance;
// most letters are narrower), so that labels kept this far apart do not touch.
double text_width(const std::string& text, double font_px);

// Which of the labels at `pos` (increasing or decreasing pixel positions) to show so that none
// touches the next: every k-th one from the first, k the smallest of 1, 2, 5, 10, 20, 50, ... that
// keeps them apart, plus the last one when it has room. With `counts` (whole numbers, one per
// label: layers 1..L), the first and the multiples of k instead (1, 10, 20, 30 rather than
// 1, 11, 21, 31). Horizontal labels need their widths apart, stacked ones a line height.
std::vector<size_t> thin_labels(const std::vector<double>& pos, const std::vector<std::string>& labels,
                                double font_px, bool stacked, const std::vector<double>* counts = nullptr);

// Tick labels with as many significant digits (3 at least) as it takes to tell them apart: a
// narrow range (8.001 ... 8.004) would otherwise print "8" four times.
std::vector<std::string> distinct_labels(const std::vector<double>& v);

// Viridis (matplotlib's, 11 anchors interpolated in sRGB): perceptually uniform, its luminance
// rising monotonically from t = 0 to 1, so that it still reads in grayscale. "#rrggbb".
std::string viridis(double t);

// <defs> with the hatch patterns, each a transparent tile of dark strokes to lay over a fill (so
// that bars and cells differ in grayscale too): ids hatch-diag (/), hatch-back (\), hatch-cross
// (x), hatch-horiz (-), hatch-dots; and the light cells of a heatmap: cell-nan
// (grey, white diagonals) and cell-nonpos (white, grey dots).
std::string pattern_defs();
extern const char* const kHatches[6];  // "" (a plain fill), then hatch ids in the order of use

// A text element; size in px, anchor start|middle|end, extra: further attributes (" class=...").
std::string text(double x, double y, const std::string& s, double size, const char* anchor = "start",
                 const std::string& extra = "");

// Frame, light grid, tick marks and labels of one panel, for the per-layer plots: labels at 12 px,
// thinned (thin_labels) so that none overlap, with class="xtick" / "ytick" (the tests find them
// so); axis labels at 13 px, the y label clear of the widest y tick label. Empty xlabel / ylabel:
// none.
struct Ticks {
  std::vector<double> at;
  std::vector<std::string> labels;
  bool counts = false;  // `at` are whole numbers: thinned to multiples of a round number
};
struct AxesStyle {
  bool x_labels = true, y_labels = true;  // false: tick marks without labels (a panel beside another)
  bool grid_x = true, grid_y = true;      // light grid lines at the shown ticks (none over a heatmap's cells)
};
std::string axes(const Axis& x, const Axis& y, const Ticks& xt, const Ticks& yt, const std::string& xlabel,
                 const std::string& ylabel, const AxesStyle& style = {});
// Ticks of a log axis or a linear one, labelled (distinct_labels); given the axis' length in px,
// as many as fit stacked (a y axis, a colour bar) from the usual sets (1..9 or 1-2-5 per decade,
// decades), else log_ticks / linear_ticks as they are.
Ticks value_ticks(double lo, double hi, bool log, double px = 0);
// Layers 1..layers as ticks (counts).
Ticks layer_ticks(size_t layers);

// What a per-layer field of metrics.jsonl measures, for axis labels ("block gradient norm
// ‖dL/dθ_l‖"); the field's name when normlab has no words for it.
std::string field_label(const std::string& field);

}  // namespace normlab::svg
