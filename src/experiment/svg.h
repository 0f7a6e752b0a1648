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

// A whole small SVG saying `what` (nothing to plot).
std::string empty_plot(const std::string& what);

}  // namespace normlab::svg
