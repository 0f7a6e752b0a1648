// A sweep as small multiples laid out like its summary table (plots.h): one panel per (row value,
// column), loss curves or the last per-layer profile of each point, the cells' fate written on them.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "normlab/io.h"
#include "normlab/plots.h"
#include "svg.h"
#include "sweep_internal.h"

namespace normlab {

using json = nlohmann::json;
using namespace svg;

namespace {

constexpr double kTick = 12, kLabel = 13, kPanelH = 140;

bool usable(double v) { return std::isfinite(v) && v > 0; }

// The last record of `field` with a value on a log scale: a diverged run's last records hold nulls
// or zeros (its skipped steps), the one before them is what it looked like.
PointLayers last_layers(const RunDir& run, const std::string& field, std::vector<std::string>& fields_seen) {
  PointLayers out;
  for_each_metrics_record(run, [&](int64_t step, const json& rec) {
    for (const auto& [k, v] : rec.items())
      if (v.is_array() && std::find(fields_seen.begin(), fields_seen.end(), k) == fields_seen.end()) fields_seen.push_back(k);
    if (!rec.contains(field) || !rec[field].is_array()) return;
    std::vector<double> v;
    for (const json& x : rec[field]) v.push_back(x.is_number() ? x.get<double>() : NAN);
    if (std::none_of(v.begin(), v.end(), usable)) return;
    out.step = step;
    out.values = std::move(v);
  });
  return out;
}

// What became of a cell's seeds, when not all of them converged; "" when all did.
struct CellState {
  std::string text;
  const char* kind = "";  // diverged, collapsed, pending, failed, none ("" ok)
};

std::string step_range(int64_t first, int64_t last) {
  if (first < 0) return "";
  return last > first ? fmt::format(" @ steps {}–{}", first, last) : fmt::format(" @ step {}", first);
}

CellState cell_state(const SummaryCell& c) {
  if (!c.present) return {"no point", "none"};
  const int seeds = c.n + c.diverged + c.collapsed + c.failed + c.damaged + c.pending;
  const int ran = seeds - c.pending;
  if (ran == 0) return {"pending", "pending"};
  std::string more;
  if (c.failed) more += fmt::format(", {} failed", c.failed);
  if (c.damaged) more += fmt::format(", {} damaged", c.damaged);
  if (c.pending) more += fmt::format(", {} pending", c.pending);
  auto some = [&](int k) { return k == seeds ? std::string() : fmt::format("{}/{} ", k, seeds); };
  if (c.diverged && c.diverged >= c.collapsed)
    return {some(c.diverged) + "diverged" + step_range(c.diverged_first, c.diverged_last) +
                (c.collapsed ? fmt::format(", {} collapsed", c.collapsed) : "") + more,
            "diverged"};
  if (c.collapsed)
    return {some(c.collapsed) + "collapsed" + step_range(c.collapsed_first, c.collapsed_last) +
                (c.diverged ? fmt::format(", {} diverged", c.diverged) : "") + more,
            "collapsed"};
  if (c.failed || c.damaged) return {more.substr(2), "failed"};
  if (c.pending) return {more.substr(2), "pending"};
  return {};
}

// A column label without its unset keys ("residual_scale=-"): in a zip of variants most keys are
// unset in most columns, and the panels' heads would be mostly dashes.
std::string without_unset_keys(const std::string& label) {
  std::istringstream in(label);
  std::string out;
  for (std::string word; in >> word;) {
    if (word.size() > 2 && word.compare(word.size() - 2, 2, "=-") == 0) continue;
    out += (out.empty() ? "" : " ") + word;
  }
  return out.empty() ? label : out;
}

// The words of `label` on lines no wider than `width` px.
std::vector<std::string> wrap(const std::string& label, double width, double font) {
  std::vector<std::string> lines;
  std::istringstream in(label);
  for (std::string word; in >> word;) {
    if (!lines.empty() && text_width(lines.back() + " " + word, font) <= width) lines.back() += " " + word;
    else lines.push_back(word);
  }
  if (lines.empty()) lines.push_back("");
  return lines;
}

// A cell's background: diverged cells are pink with darker diagonals (the tint alone would be one
// more light grey in print), collapsed ones sand, pending ones white behind a dashed frame.
std::string backgrounds() {
  return "<defs>\n"
         "<pattern id=\"bg-diverged\" width=\"10\" height=\"10\" patternUnits=\"userSpaceOnUse\">"
         "<rect width=\"10\" height=\"10\" fill=\"#f8dcdc\"/><path d=\"M-2,2 L2,-2 M0,10 L10,0 M8,12 L12,8\" "
         "stroke=\"#e3a9a9\" stroke-width=\"1.2\"/></pattern>\n"
         "</defs>\n";
}

const char* background(const char* kind) {
  const std::string k = kind;
  if (k == "diverged") return "url(#bg-diverged)";
  if (k == "collapsed") return "#efe6cc";
  if (k == "none") return "#f2f2f2";
  return "white";
}

}  // namespace

CellLayers read_cell_layers(const std::string& sweep_dir, const SweepSummary& s, const std::string& field) {
  CellLayers out;
  out.field = field;
  out.cells.assign(s.cells.size(), {});
  for (size_t r = 0; r < s.cells.size(); ++r) {
    out.cells[r].resize(s.cells[r].size());
    for (size_t c = 0; c < s.cells[r].size(); ++c)
      for (const std::string& point : s.cells[r][c].points) {
        const RunDir run(sweep_dir + "/runs/" + point);
        if (!run.finished()) continue;  // pending
        // One profile per run joins an encoder-decoder's two stacks into one line: its run's own
        // plot draws them apart.
        NL_USAGE(run.encoder_layers() == 0, "{}: an encoder-decoder's per-layer figures are two stacks; `normlab plot "
                 "profile RUN` draws a run's as two panels", shown(sweep_dir, 200));
        ++out.runs_read;
        PointLayers p = last_layers(run, field, out.fields_seen);
        if (p.step < 0) continue;
        p.point = point;
        out.cells[r][c].push_back(std::move(p));
      }
  }
  return out;
}

void require_layer_field(const CellLayers& layers, const std::string& sweep_dir) {
  if (layers.runs_read == 0 || std::find(layers.fields_seen.begin(), layers.fields_seen.end(), layers.field) != layers.fields_seen.end())
    return;
  std::string known;
  for (const std::string& k : layers.fields_seen) known += (known.empty() ? "" : ", ") + k;
  throw UsageError(fmt::format("{}: no run has the per-layer field '{}' (their per-layer fields: {})", shown(sweep_dir, 200),
                               shown(layers.field), known.empty() ? "none" : known));
}

namespace {

// What one figure of small multiples draws, and where: the shared value range, the geometry of the
// grid of panels, the titles, and which marks the legend explains.
struct Multiples {
  const SweepSummary& s;
  const CellLayers& layers;
  bool curves = false;
  size_t nr = 0, nc = 0;
  double lo = INFINITY, hi = -INFINITY, xhi = 0;
  bool ranged_on_ok_only = false;
  Ticks yt;
  double pw = 210, ph = kPanelH, hgap = 34, vgap = 22;
  double row_w = 0, x0 = 0, y0 = 0, width = 0, height = 0, grid_h = 0;
  std::vector<std::string> col_heads;
  std::string title, sub;
  bool shown_diverged = false, shown_collapsed = false, shown_pending = false, any_diverged_mark = false,
       unigram_shown = false;

  Multiples(const SweepSummary& summary, const CellLayers& l) : s(summary), layers(l) {}
  const std::vector<PointLayers>* cell_layers(size_t r, size_t c) const {
    if (r < layers.cells.size() && c < layers.cells[r].size()) return &layers.cells[r][c];
    return nullptr;
  }
  std::string row_label(size_t r) const { return s.rows.empty() ? s.row_values[r] : s.rows + "=" + s.row_values[r]; }
  double left(size_t c) const { return x0 + static_cast<double>(c) * (pw + hgap); }
  double top(size_t r) const { return y0 + static_cast<double>(r) * (ph + vgap); }
};

// The curves' one y range over every panel (so that panels compare at a glance) and shared x.
void range_curves(Multiples& m) {
  for (const SummaryCurve& cv : m.s.curves)
    for (size_t i = 0; i < cv.steps.size(); ++i) {
      if (usable(cv.mean[i])) m.lo = std::min(m.lo, cv.mean[i]), m.hi = std::max(m.hi, cv.mean[i]);
      m.xhi = std::max(m.xhi, static_cast<double>(cv.steps[i]));
    }
}

// The range of the panels whose runs all finished ok, when there are any: a collapsed run's
// gradients (1e-10 against 1e+20) would otherwise flatten every healthy profile to a line. The
// other panels' lines are clipped to their frame.
void range_profiles(Multiples& m) {
  for (const bool only_ok : {true, false}) {
    bool skipped = false;
    for (size_t r = 0; r < m.nr; ++r)
      for (size_t c = 0; c < m.nc; ++c) {
        const auto* pts = m.cell_layers(r, c);
        if (!pts || pts->empty()) continue;
        if (only_ok && *cell_state(m.s.cells[r][c]).kind) {
          skipped = true;
          continue;
        }
        for (const PointLayers& p : *pts)
          for (double v : p.values)
            if (usable(v)) m.lo = std::min(m.lo, v), m.hi = std::max(m.hi, v);
      }
    if (m.hi >= m.lo) {
      m.ranged_on_ok_only = only_ok && skipped;  // said in the subtitle only when it left a panel out
      return;
    }
  }
}

void set_titles(Multiples& m) {
  const SweepSummary& s = m.s;
  m.title = m.curves ? "validation loss by step (mean over seeds)"
                     : (m.layers.field.empty() ? std::string("per-layer field") : field_label(m.layers.field)) +
                           " by layer, each run's last record";
  m.sub = fmt::format("rows: {}; columns: {}; {}", s.rows.empty() ? "-" : s.rows,
                      s.cols.empty() ? "-" : fmt::format("{}", fmt::join(s.cols, ", ")),
                      m.curves ? "one log y axis for all panels; × marks a divergence"
                      : m.ranged_on_ok_only
                          ? "one line per seed; one log y axis for all panels, ranged on the runs that finished ok"
                          : "one line per seed; one log y axis for all panels");
}

// Which cell states and marks are drawn, so that the legend explains exactly those.
void find_marks(Multiples& m) {
  for (size_t r = 0; r < m.nr; ++r)
    for (size_t c = 0; c < m.nc; ++c) {
      const std::string k = cell_state(m.s.cells[r][c]).kind;
      m.shown_diverged = m.shown_diverged || k == "diverged";
      m.shown_collapsed = m.shown_collapsed || k == "collapsed";
      m.shown_pending = m.shown_pending || k == "pending";
    }
  if (m.curves)
    for (const SummaryCurve& cv : m.s.curves) m.any_diverged_mark = m.any_diverged_mark || cv.diverged_step >= 0;
  m.unigram_shown = m.curves && std::isfinite(m.s.unigram_loss) && m.s.unigram_loss >= m.lo && m.s.unigram_loss <= m.hi;
}

// Geometry: row labels, y tick labels (first column only), then the panels. hgap: room for the
// last x label of one panel beside the first of the next ("3000" and "0").
void lay_out(Multiples& m) {
  m.vgap = m.curves ? 22 : 40;
  double ytw = 0;
  for (size_t r = 0; r < m.nr; ++r) m.row_w = std::max(m.row_w, text_width(m.row_label(r), kLabel));
  for (const std::string& l : m.yt.labels) ytw = std::max(ytw, text_width(l, kTick));
  size_t head_lines = 1;
  for (const std::string& l : m.s.col_labels) m.col_heads.push_back(without_unset_keys(l));
  for (const std::string& h : m.col_heads) head_lines = std::max(head_lines, wrap(h, m.pw, kLabel).size());
  m.x0 = 30 + m.row_w + 16 + ytw + 12;  // the first panel's left edge
  m.y0 = 56 + 17.0 * static_cast<double>(head_lines) + 6;
  set_titles(m);
  m.width = std::max(m.x0 + static_cast<double>(m.nc) * (m.pw + m.hgap) + 10,
                     24 + std::max(1.1 * text_width(m.title, 15), text_width(m.sub, kTick)));
  m.grid_h = static_cast<double>(m.nr) * (m.ph + m.vgap);
  find_marks(m);
  const bool legend = m.shown_diverged || m.shown_collapsed || m.shown_pending || m.any_diverged_mark || m.unigram_shown;
  m.height = m.y0 + m.grid_h + (m.curves ? 40 : 24) + (legend ? 34 : 4);
}

Multiples plan_multiples(const SweepSummary& s, SmallMultiple kind, const CellLayers& layers) {
  Multiples m(s, layers);
  m.curves = kind == SmallMultiple::loss_curves;
  m.nr = s.row_values.size();
  m.nc = s.col_labels.size();
  if (m.curves) range_curves(m);
  else range_profiles(m);
  const bool any = m.hi >= m.lo && (!m.curves || m.xhi > 0);
  if (!any) m.lo = 1, m.hi = 10, m.xhi = 1;
  pad(m.lo, m.hi, true);
  m.yt = value_ticks(m.lo, m.hi, true, kPanelH);
  lay_out(m);
  return m;
}

// The mean validation loss of panel (r, c) by step, its divergence marks and the unigram line.
std::string curve_panel(const Multiples& m, size_t r, size_t c, const Axis& y) {
  const double left = m.left(c), right = left + m.pw, top = m.top(r);
  Axis x{0, m.xhi * 1.02, false, left, right};
  Ticks xt;
  xt.at = linear_ticks(0, m.xhi, 3);
  xt.labels = distinct_labels(xt.at);
  std::string out = axes(x, y, xt, m.yt, "", "", {r + 1 == m.nr, c == 0, true, true});
  for (const SummaryCurve& cv : m.s.curves) {
    if (cv.row != r || cv.col != c) continue;
    std::string pts;
    double lx = NAN, ly = NAN;
    for (size_t i = 0; i < cv.steps.size(); ++i) {
      if (!usable(cv.mean[i])) continue;
      lx = x.map(static_cast<double>(cv.steps[i]));
      ly = y.map(cv.mean[i]);
      pts += fmt::format("{:.1f},{:.1f} ", lx, ly);
    }
    if (!pts.empty())
      out += fmt::format("<polyline class=\"curve\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts,
                         color(0));
    // at the last finite loss; without one, below the cell's state text
    if (cv.diverged_step >= 0) out += cross(x.map(static_cast<double>(cv.diverged_step)), std::isfinite(ly) ? ly : top + 34, 5, "#a00");
  }
  if (m.unigram_shown)
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#555\" "
                       "stroke-dasharray=\"5,4\"/>\n",
                       left, y.map(m.s.unigram_loss), right);
  return out;
}

// One seed's profile as polylines clipped to the panel, broken where a layer has no usable value.
std::string profile_lines(const PointLayers& p, size_t seed, const Axis& x, const Axis& y, const std::string& clip) {
  static const char* kDash[] = {"", "6,3", "2,3", "8,3,2,3"};
  std::string out, line;
  auto flush = [&]() {
    if (!line.empty())
      out += fmt::format("<polyline class=\"profile\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} "
                         "clip-path=\"url(#{})\"/>\n",
                         line, color(0), *kDash[seed % 4] ? fmt::format(" stroke-dasharray=\"{}\"", kDash[seed % 4]) : "", clip);
    line.clear();
  };
  for (size_t l = 0; l < p.values.size(); ++l) {
    if (!usable(p.values[l])) {
      flush();
      continue;
    }
    line += fmt::format("{:.1f},{:.1f} ", x.map(static_cast<double>(l + 1)), y.map(p.values[l]));
  }
  flush();
  return out;
}

// Panel (r, c)'s per-layer profiles, one line per seed.
std::string profile_panel(const Multiples& m, size_t r, size_t c, const Axis& y, const CellState& st) {
  const double left = m.left(c), top = m.top(r);
  size_t nl = 0;
  const std::vector<PointLayers>* pts = m.cell_layers(r, c);
  if (pts)
    for (const PointLayers& p : *pts) nl = std::max(nl, p.values.size());
  Axis x{0.5, static_cast<double>(std::max<size_t>(nl, 1)) + 0.5, false, left, left + m.pw};
  // Each panel has its own depth (columns may differ in layers), so each labels its x axis.
  std::string out = axes(x, y, nl ? layer_ticks(nl) : Ticks{}, m.yt, "", "", {true, c == 0, false, true});
  const std::string clip = fmt::format("clip-{}-{}", r, c);
  if (pts && !pts->empty())
    out += fmt::format("<clipPath id=\"{}\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/></clipPath>\n",
                       clip, left, top, m.pw, m.ph);
  if (pts)
    for (size_t k = 0; k < pts->size(); ++k) out += profile_lines((*pts)[k], k, x, y, clip);
  if (m.s.cells[r][c].present && st.text.empty() && (!pts || pts->empty()))
    out += text(left + m.pw / 2, top + m.ph / 2, "no per-layer data", kTick, "middle", " fill=\"#555\"");
  return out;
}

// The cell's state ("2/3 diverged@40"), boxed in the panel's corner.
std::string state_badge(const Multiples& m, size_t r, size_t c, const CellState& st) {
  if (st.text.empty()) return "";
  const double left = m.left(c), top = m.top(r);
  const std::string k = st.kind;
  const char* fill = k == "diverged" ? "#a00" : k == "collapsed" ? "#6b5200" : "#444";
  const double tw = std::min(m.pw - 8, text_width(st.text, kTick));
  return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"17\" fill=\"white\" fill-opacity=\"0.85\"/>\n",
                     left + 3, top + 3, tw + 6) +
         text(left + 6, top + 16, st.text, kTick, "start", fmt::format(" font-weight=\"bold\" fill=\"{}\" class=\"cell-state\"", fill));
}

std::string panel(const Multiples& m, size_t r, size_t c) {
  const double left = m.left(c), top = m.top(r), bottom = top + m.ph;
  const CellState st = cell_state(m.s.cells[r][c]);
  std::string out = fmt::format("<g class=\"panel\" data-row=\"{}\" data-col=\"{}\" data-state=\"{}\">\n", r, c, *st.kind ? st.kind : "ok");
  out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n", left, top, m.pw, m.ph,
                     background(st.kind));
  const Axis y{m.lo, m.hi, true, bottom, top};
  out += m.curves ? curve_panel(m, r, c, y) : profile_panel(m, r, c, y, st);
  return out + state_badge(m, r, c, st) + "</g>\n";
}

std::string headings(const Multiples& m) {
  std::string out = text(12, 22, m.title, 15, "start", " font-weight=\"bold\" class=\"title\"");
  out += text(12, 42, m.sub, kTick, "start", " fill=\"#333\"");
  for (size_t c = 0; c < m.nc; ++c) {
    const std::vector<std::string> lines = wrap(m.col_heads[c], m.pw, kLabel);
    const double cx = m.left(c) + m.pw / 2;
    for (size_t i = 0; i < lines.size(); ++i)
      out += text(cx, m.y0 - 8 - 17.0 * static_cast<double>(lines.size() - 1 - i), lines[i], kLabel, "middle",
                  " font-weight=\"bold\" class=\"col-label\"");
  }
  return out;
}

std::string axis_labels(const Multiples& m) {
  const double grid_bottom = m.y0 + m.grid_h - m.vgap;
  std::string out = text(m.x0 + (static_cast<double>(m.nc) * (m.pw + m.hgap) - m.hgap) / 2, grid_bottom + (m.curves ? 38 : 36),
                         m.curves ? "training step" : "layer (block; 1 = first)", kLabel, "middle", " class=\"xlabel\"");
  out += fmt::format("<text transform=\"translate(18,{:.1f}) rotate(-90)\" text-anchor=\"middle\" font-size=\"{}\" "
                     "class=\"ylabel\">{}</text>\n",
                     m.y0 + (m.grid_h - m.vgap) / 2, kLabel,
                     esc(m.curves ? "validation loss (log scale)"
                                  : (m.layers.field.empty() ? "value" : field_label(m.layers.field)) + " (log scale)"));
  return out;
}

// What the tints and marks mean, those drawn only.
std::string legend(const Multiples& m) {
  std::string out;
  double lx = m.x0, ly = m.height - 14;
  auto swatch = [&](const char* fill, const std::string& meaning) {
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"22\" height=\"14\" fill=\"{}\" stroke=\"#333\"/>\n", lx, ly - 11,
                       fill);
    out += text(lx + 28, ly, meaning, kTick, "start", " class=\"legend\"");
    lx += 28 + text_width(meaning, kTick) + 22;
  };
  if (m.shown_diverged) swatch(background("diverged"), "diverged (all or most seeds)");
  if (m.shown_collapsed) swatch(background("collapsed"), "collapsed (learned nothing)");
  if (m.shown_pending) swatch(background("pending"), "pending (not run yet)");
  if (m.curves && m.any_diverged_mark) {
    out += cross(lx + 8, ly - 4, 5, "#a00");
    out += text(lx + 20, ly, "divergence step", kTick, "start", " class=\"legend\"");
    lx += 20 + text_width("divergence step", kTick) + 22;
  }
  if (m.unigram_shown) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n", lx,
                       ly - 4, lx + 26, ly - 4);
    out += text(lx + 32, ly, "unigram loss (learned nothing)", kTick, "start", " class=\"legend\"");
  }
  return out;
}

}  // namespace

std::string plot_sweep_small_multiples_svg(const SweepSummary& s, SmallMultiple kind, const CellLayers& layers) {
  if (s.row_values.empty() || s.col_labels.empty()) return empty_plot("no points to plot");
  const Multiples m = plan_multiples(s, kind, layers);
  std::string out = header(m.width, m.height) + backgrounds() + headings(m);
  for (size_t r = 0; r < m.nr; ++r) {
    const double top = m.top(r), bottom = top + m.ph;
    out += text(30 + m.row_w, (top + bottom) / 2 + 4, m.row_label(r), kLabel, "end", " font-weight=\"bold\" class=\"row-label\"");
    for (size_t c = 0; c < m.nc; ++c) out += panel(m, r, c);
  }
  return out + axis_labels(m) + legend(m) + "</svg>\n";
}

}  // namespace normlab
