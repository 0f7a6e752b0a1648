// SVG plots of a sweep summary, written by hand (no plotting library): validation loss by step per
// configuration (one panel per column of the table, one line per row value, log-scale loss), and the
// final metric against the row axis (log x when numeric) per column, diverged points marked.
#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "normlab/sweep.h"
#include "svg.h"

namespace normlab {

namespace {

using namespace svg;

// A dashed horizontal line at the unigram loss, labelled, when it lies inside the y range.
std::string unigram_line(const Axis& x, const Axis& y, double unigram) {
  if (!std::isfinite(unigram) || unigram < y.lo || unigram > y.hi) return "";
  double py = y.map(unigram);
  return fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n"
                     "<text x=\"{3:.1f}\" y=\"{4:.1f}\" fill=\"#555\" font-size=\"10\">unigram (learned nothing)</text>\n",
                     x.px0, py, x.px1, x.px0 + 6, py - y.px1 < 14 ? py + 12 : py - 5);
}

}  // namespace

std::string plot_loss_curves_svg(const SweepSummary& s) {
  // Shared axes across panels, so panels compare at a glance.
  double ylo = INFINITY, yhi = -INFINITY, xhi = 0;
  for (const SummaryCurve& c : s.curves)
    for (size_t i = 0; i < c.steps.size(); ++i) {
      if (std::isfinite(c.mean[i]) && c.mean[i] > 0) ylo = std::min(ylo, c.mean[i]), yhi = std::max(yhi, c.mean[i]);
      xhi = std::max(xhi, static_cast<double>(c.steps[i]));
    }
  if (!(yhi >= ylo) || xhi <= 0) return empty_plot("no finished runs to plot yet");
  pad(ylo, yhi, true);

  const size_t panels = s.col_labels.size();
  const size_t per_row = std::min<size_t>(panels, 3);
  const size_t rows = (panels + per_row - 1) / per_row;
  const double pw = 330, ph = 230, ml = 72, mr = 18, mt = 34, mb = 50, legend_w = 170;
  const double width = static_cast<double>(per_row) * (ml + pw + mr) + legend_w;
  const double height = std::max(static_cast<double>(rows) * (mt + ph + mb) + 34, 60.0 + 20.0 * static_cast<double>(s.row_values.size()));
  std::string out = header(width, height);
  out += fmt::format("<text x=\"12\" y=\"20\" font-size=\"14\" font-weight=\"bold\">Validation loss by step (mean over "
                     "seeds; log scale){}</text>\n",
                     s.rows.empty() ? "" : ", one line per " + esc(s.rows));
  std::vector<double> yt = log_ticks(ylo, yhi);
  std::vector<double> xt = linear_ticks(0, xhi, 4);
  std::vector<std::string> xl;
  for (double v : xt) xl.push_back(tick_label(v));
  bool any_diverged = false;
  for (size_t p = 0; p < panels; ++p) {
    const double ox = static_cast<double>(p % per_row) * (ml + pw + mr) + ml;
    const double oy = 34 + static_cast<double>(p / per_row) * (mt + ph + mb) + mt;
    Axis x{0, xhi * 1.02, false, ox, ox + pw};
    Axis y{ylo, yhi, true, oy + ph, oy};
    out += frame(x, y, xt, xl, yt, "step", "validation loss", s.col_labels[p] == "all" ? "" : s.col_labels[p]);
    out += unigram_line(x, y, s.unigram_loss);
    for (const SummaryCurve& c : s.curves) {
      if (c.col != p) continue;
      std::string pts;
      double lx = NAN, ly = NAN;
      for (size_t i = 0; i < c.steps.size(); ++i) {
        if (!std::isfinite(c.mean[i]) || c.mean[i] <= 0) continue;
        lx = x.map(static_cast<double>(c.steps[i]));
        ly = y.map(c.mean[i]);
        pts += fmt::format("{:.1f},{:.1f} ", lx, ly);
      }
      if (!pts.empty())
        out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, color(c.row));
      if (c.diverged_step >= 0) {
        any_diverged = true;
        // the × sits at the divergence step, at the last finite loss (or the top when none was finite)
        double dx = x.map(static_cast<double>(c.diverged_step));
        out += cross(dx, std::isfinite(ly) ? ly : y.px1 + 6, 5, color(c.row));
      }
    }
  }
  // Legend: one entry per row value.
  const double lx = width - legend_w + 10;
  double ly = 34 + 30;
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-weight=\"bold\">{}</text>\n", lx, ly - 14,
                     esc(s.rows.empty() ? "run" : s.rows));
  for (size_t r = 0; r < s.row_values.size(); ++r, ly += 20) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"/>\n", lx,
                       ly - 4, lx + 24, ly - 4, color(r));
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", lx + 30, ly, esc(s.row_values[r]));
  }
  if (any_diverged) {
    out += cross(lx + 12, ly - 4, 5, "#333");
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">diverged</text>\n", lx + 30, ly);
  }
  return out + "</svg>\n";
}

namespace {

// The final-metric plot's fixed geometry: margins, the plot area, the legend, and the "diverged"
// band above the plot area.
constexpr double kFinalMl = 78, kFinalPw = 520, kFinalPh = 320, kFinalMt = 44, kFinalMb = 54, kFinalLegendW = 250,
                 kFinalBand = 26;

// How the rows spread along x: log x when every row value is a positive number, unless they are so
// unevenly spaced even in log space (1e-3, 1e-2, 1e30) that all but one would crowd into a corner;
// then, as in any other case, evenly spaced in order.
struct RowScale {
  bool log_x = false, uneven = false;
};
RowScale row_scale(const SweepSummary& s) {
  const size_t nr = s.row_values.size();
  RowScale rs;
  rs.log_x = nr > 0;
  for (double v : s.row_numbers) rs.log_x = rs.log_x && std::isfinite(v) && v > 0;
  if (rs.log_x && nr >= 3) {
    double min_gap = INFINITY, max_gap = 0;
    for (size_t r = 1; r < nr; ++r) {
      double gap = std::log10(s.row_numbers[r]) - std::log10(s.row_numbers[r - 1]);
      min_gap = std::min(min_gap, gap);
      max_gap = std::max(max_gap, gap);
    }
    rs.uneven = max_gap > 8 * min_gap;
    rs.log_x = !rs.uneven;
  }
  return rs;
}

bool any_cell_diverged(const SweepSummary& s) {
  for (const std::vector<SummaryCell>& row : s.cells)
    for (const SummaryCell& cell : row)
      if (cell.diverged > 0) return true;
  return false;
}

// The y range of the cells' mean ± std; empty (lo > hi) when no cell has a positive mean.
void final_y_range(const SweepSummary& s, double& ylo, double& yhi) {
  ylo = INFINITY, yhi = -INFINITY;
  for (const std::vector<SummaryCell>& row : s.cells)
    for (const SummaryCell& cell : row) {
      if (cell.n == 0 || !(cell.mean > 0)) continue;
      ylo = std::min(ylo, cell.mean - cell.std > 0 ? cell.mean - cell.std : cell.mean);
      yhi = std::max(yhi, cell.mean + cell.std);
    }
}

// The x axis and its ticks: one per row value.
Axis rows_axis(const SweepSummary& s, bool log_x, std::vector<double>& xt, std::vector<std::string>& xl) {
  const size_t nr = s.row_values.size();
  for (size_t r = 0; r < nr; ++r) xt.push_back(log_x ? s.row_numbers[r] : static_cast<double>(r)), xl.push_back(s.row_values[r]);
  if (!log_x) return Axis{-0.5, static_cast<double>(nr) - 0.5, false, kFinalMl, kFinalMl + kFinalPw};
  double lo = *std::min_element(s.row_numbers.begin(), s.row_numbers.end());
  double hi = *std::max_element(s.row_numbers.begin(), s.row_numbers.end());
  pad(lo, hi, true);
  return Axis{lo, hi, true, kFinalMl, kFinalMl + kFinalPw};
}

// Column c's line through its cells, its error bars and markers, the best row's ring and the
// crosses of diverged cells in the band. px: a row's x; jit: the column's offset, so that columns
// at the same row do not hide each other.
std::string final_column(const SweepSummary& s, size_t c, const Axis& y, const std::function<double(size_t)>& px, double jit) {
  const size_t nr = s.row_values.size();
  std::string out, pts;
  auto line = [&]() {
    if (!pts.empty()) out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, color(c));
    pts.clear();
  };
  for (size_t r = 0; r < nr; ++r) {
    const SummaryCell& cell = s.cells[r][c];
    if (cell.n == 0 || !(cell.mean > 0)) line();
    else pts += fmt::format("{:.1f},{:.1f} ", px(r) + jit, y.map(cell.mean));
  }
  line();
  for (size_t r = 0; r < nr; ++r) {
    const SummaryCell& cell = s.cells[r][c];
    const double cx = px(r) + jit;
    if (cell.n > 0 && cell.mean > 0) {
      if (cell.n > 1 && cell.std > 0) {
        double lo = cell.mean - cell.std > 0 ? y.map(cell.mean - cell.std) : y.px0;
        out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"1.5\"/>\n",
                           cx, lo, y.map(cell.mean + cell.std), color(c));
      }
      // hollow marker: some seeds of this cell diverged
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>\n", cx,
                         y.map(cell.mean), cell.diverged ? "white" : color(c), color(c));
      if (s.best[c] == static_cast<int>(r))
        out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"8\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n", cx,
                           y.map(cell.mean), color(c));
    }
    if (cell.diverged > 0) out += cross(cx, kFinalMt + kFinalBand / 2, 5, color(c));
  }
  return out;
}

// One entry per column, then what the markers mean.
std::string final_legend(const SweepSummary& s, const std::string& rows_name) {
  const double lx = kFinalMl + kFinalPw + 28;
  double ly = kFinalMt + kFinalBand + 6;
  std::string out = fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-weight=\"bold\">{}</text>\n", lx, ly - 14,
                                esc(s.cols.empty() ? "configuration" : fmt::format("{}", fmt::join(s.cols, ", "))));
  for (size_t c = 0; c < s.col_labels.size(); ++c, ly += 20) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"/>\n", lx,
                       ly - 4, lx + 24, ly - 4, color(c));
    out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"/>\n", lx + 12, ly - 4, color(c));
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", lx + 32, ly, esc(s.col_labels[c]));
  }
  ly += 8;
  out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"8\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\"/>\n", lx + 12, ly - 4);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">best (stable) {}</text>\n", lx + 32, ly, esc(rows_name));
  ly += 20;
  out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"white\" stroke=\"#333\" stroke-width=\"2\"/>\n", lx + 12, ly - 4);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">some seeds diverged</text>\n", lx + 32, ly);
  ly += 20;
  out += cross(lx + 12, ly - 4, 5, "#333");
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">diverged (top band)</text>\n", lx + 32, ly);
  return out;
}

}  // namespace

std::string plot_final_vs_rows_svg(const SweepSummary& s) {
  const size_t nc = s.col_labels.size();
  const RowScale rs = row_scale(s);
  double ylo = 0, yhi = 0;
  final_y_range(s, ylo, yhi);
  const bool any_diverged = any_cell_diverged(s);
  if (!(yhi >= ylo) && !any_diverged) return empty_plot("no finished runs to plot yet");
  if (!(yhi >= ylo)) ylo = 1, yhi = 10;
  pad(ylo, yhi, true);

  const double width = kFinalMl + kFinalPw + 20 + kFinalLegendW;
  const double height = std::max(kFinalMt + kFinalBand + kFinalPh + kFinalMb, kFinalMt + 40 + 20.0 * static_cast<double>(nc + 3));
  std::string out = header(width, height);
  const std::string rows_name = s.rows.empty() ? "run" : s.rows;
  out += fmt::format("<text x=\"12\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{} against {} (mean ± std over "
                     "seeds{})</text>\n",
                     esc(s.metric), esc(rows_name), rs.log_x ? "; log x" : (rs.uneven ? "; x values evenly spaced" : ""));
  std::vector<double> xt;
  std::vector<std::string> xl;
  const Axis x = rows_axis(s, rs.log_x, xt, xl);
  const double top = kFinalMt + kFinalBand;
  const Axis y{ylo, yhi, true, top + kFinalPh, top};
  out += frame(x, y, xt, xl, log_ticks(ylo, yhi), rows_name, s.metric + " (log scale)", "");
  out += unigram_line(x, y, s.unigram_loss);
  if (any_diverged) {
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fbe9e9\" stroke=\"#333\"/>\n",
                       kFinalMl, kFinalMt, kFinalPw, kFinalBand);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#b00\">diverged</text>\n", kFinalMl - 7,
                       kFinalMt + kFinalBand / 2 + 4);
  }
  auto px = [&](size_t r) { return rs.log_x ? x.map(s.row_numbers[r]) : x.map(static_cast<double>(r)); };
  const double jitter_step = nc > 1 ? std::min(6.0, 24.0 / static_cast<double>(nc)) : 0;
  for (size_t c = 0; c < nc; ++c)
    out += final_column(s, c, y, px, (static_cast<double>(c) - (static_cast<double>(nc) - 1) / 2) * jitter_step);
  return out + final_legend(s, rows_name) + "</svg>\n";
}

}  // namespace normlab

namespace normlab {

namespace {
constexpr const char* kProfileMark = "<!-- normlab: sweep summarize, profile plot -->";
}  // namespace

bool is_layer_profile_svg(const std::string& text) { return text.rfind(kProfileMark, 0) == 0; }

std::string plot_layer_profiles_svg(const ProfileOptions& opt, const std::vector<LayerProfile>& profiles) {
  // A max |x| field is drawn against fp16's largest finite value: how far the stream is from
  // overflowing there.
  const bool against_fp16 = opt.field.size() > 8 && opt.field.compare(opt.field.size() - 8, 8, "_max_abs") == 0;
  constexpr double kFp16Max = 65504;
  double ylo = INFINITY, yhi = -INFINITY;
  size_t layers = 0;
  for (const LayerProfile& p : profiles) {
    layers = std::max(layers, p.mean.size());
    for (double v : p.mean)
      if (std::isfinite(v)) ylo = std::min(ylo, v), yhi = std::max(yhi, v);
  }
  std::string out = std::string(kProfileMark) + "\n";
  if (!(yhi >= ylo) || layers == 0) return out + empty_plot("no finite values to plot");
  if (against_fp16) yhi = std::max(yhi, kFp16Max);
  const bool log = ylo > 0;
  pad(ylo, yhi, log);
  const double ml = 78, pw = 520, ph = 320, mt = 46, mb = 56, legend_w = 330;
  const double width = ml + pw + 24 + legend_w;
  const double height = std::max(mt + ph + mb, 70.0 + 18.0 * static_cast<double>(profiles.size()));
  out += header(width, height);
  out += fmt::format("<text x=\"12\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{} by layer at {} (mean over "
                     "seeds{}){}</text>\n",
                     esc(opt.field), opt.step < 0 ? "each run's last record" : fmt::format("step {}", opt.step),
                     log ? "; log scale" : "", profiles[0].shared.empty() ? "" : ", " + esc(profiles[0].shared));
  Axis x{0.5, static_cast<double>(layers) + 0.5, false, ml, ml + pw};
  Axis y{ylo, yhi, log, mt + ph, mt};
  std::vector<double> xt = linear_ticks(1, static_cast<double>(layers), 6);
  xt.erase(std::remove_if(xt.begin(), xt.end(), [](double v) { return v != std::floor(v) || v < 1; }), xt.end());
  std::vector<std::string> xl;
  for (double v : xt) xl.push_back(tick_label(v));
  out += frame(x, y, xt, xl, log ? log_ticks(ylo, yhi) : linear_ticks(ylo, yhi), "layer (block; 1 = first)",
               opt.field, "");
  if (against_fp16 && kFp16Max <= yhi) {
    const double py = y.map(kFp16Max);
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#555\" "
                       "stroke-dasharray=\"5,4\"/>\n<text x=\"{3:.1f}\" y=\"{4:.1f}\" fill=\"#555\" "
                       "font-size=\"11\">fp16's largest finite value, 65504</text>\n",
                       x.px0, py, x.px1, x.px0 + 6, py + 14);
  }
  // Ten colours, then dashes: lines stay apart in grayscale too (markers on every point).
  static const char* kDash[] = {"", "6,3", "2,3", "8,3,2,3"};
  for (size_t i = 0; i < profiles.size(); ++i) {
    const LayerProfile& p = profiles[i];
    const char* dash = kDash[(i / 10) % 4];
    std::string pts, marks;
    for (size_t l = 0; l < p.mean.size(); ++l) {
      if (!std::isfinite(p.mean[l]) || (log && p.mean[l] <= 0)) continue;
      const double px = x.map(static_cast<double>(l + 1)), py = y.map(p.mean[l]);
      pts += fmt::format("{:.1f},{:.1f} ", px, py);
      marks += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", px, py, color(i));
    }
    if (!pts.empty())
      out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n{}", pts, color(i),
                         *dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "", marks);
  }
  const double lx = ml + pw + 24;
  double ly = mt + 4;
  for (size_t i = 0; i < profiles.size(); ++i, ly += 18) {
    const char* dash = kDash[(i / 10) % 4];
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"{}/>\n",
                       lx, ly - 4, lx + 24, ly - 4, color(i), *dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "");
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>\n", lx + 30, ly, esc(profiles[i].name));
  }
  return out + "</svg>\n";
}

}  // namespace normlab
