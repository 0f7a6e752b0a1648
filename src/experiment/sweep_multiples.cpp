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

std::string plot_sweep_small_multiples_svg(const SweepSummary& s, SmallMultiple kind, const CellLayers& layers) {
  const size_t nr = s.row_values.size(), nc = s.col_labels.size();
  if (nr == 0 || nc == 0) return empty_plot("no points to plot");
  const bool curves = kind == SmallMultiple::loss_curves;
  auto cell_layers = [&](size_t r, size_t c) -> const std::vector<PointLayers>* {
    if (r < layers.cells.size() && c < layers.cells[r].size()) return &layers.cells[r][c];
    return nullptr;
  };
  // One y range for every panel, so that panels compare at a glance; x shared too for curves.
  double lo = INFINITY, hi = -INFINITY, xhi = 0;
  bool ranged_on_ok_only = false;
  if (curves) {
    for (const SummaryCurve& cv : s.curves)
      for (size_t i = 0; i < cv.steps.size(); ++i) {
        if (usable(cv.mean[i])) lo = std::min(lo, cv.mean[i]), hi = std::max(hi, cv.mean[i]);
        xhi = std::max(xhi, static_cast<double>(cv.steps[i]));
      }
  } else {
    // The range of the panels whose runs all finished ok, when there are any: a collapsed run's
    // gradients (1e-10 against 1e+20) would otherwise flatten every healthy profile to a line.
    // The other panels' lines are clipped to their frame.
    for (const bool only_ok : {true, false}) {
      bool skipped = false;
      for (size_t r = 0; r < nr; ++r)
        for (size_t c = 0; c < nc; ++c) {
          const auto* pts = cell_layers(r, c);
          if (!pts || pts->empty()) continue;
          if (only_ok && *cell_state(s.cells[r][c]).kind) {
            skipped = true;
            continue;
          }
          for (const PointLayers& p : *pts)
            for (double v : p.values)
              if (usable(v)) lo = std::min(lo, v), hi = std::max(hi, v);
        }
      if (hi >= lo) {
        ranged_on_ok_only = only_ok && skipped;  // said in the subtitle only when it left a panel out
        break;
      }
    }
  }
  const bool any = hi >= lo && (!curves || xhi > 0);
  if (!any) lo = 1, hi = 10, xhi = 1;
  pad(lo, hi, true);
  const Ticks yt = value_ticks(lo, hi, true, kPanelH);

  // Geometry: row labels, y tick labels (first column only), then the panels.
  // hgap: room for the last x label of one panel beside the first of the next ("3000" and "0").
  const double pw = 210, ph = kPanelH, hgap = 34, vgap = curves ? 22 : 40;
  double row_w = 0, ytw = 0;
  auto row_label = [&](size_t r) { return s.rows.empty() ? s.row_values[r] : s.rows + "=" + s.row_values[r]; };
  for (size_t r = 0; r < nr; ++r) row_w = std::max(row_w, text_width(row_label(r), kLabel));
  for (const std::string& l : yt.labels) ytw = std::max(ytw, text_width(l, kTick));
  size_t head_lines = 1;
  std::vector<std::string> col_heads;
  for (const std::string& l : s.col_labels) col_heads.push_back(without_unset_keys(l));
  for (const std::string& h : col_heads) head_lines = std::max(head_lines, wrap(h, pw, kLabel).size());
  const double x0 = 30 + row_w + 16 + ytw + 12;  // the first panel's left edge
  const double y0 = 56 + 17.0 * static_cast<double>(head_lines) + 6;
  const std::string title = curves ? "validation loss by step (mean over seeds)"
                                   : (layers.field.empty() ? std::string("per-layer field") : field_label(layers.field)) +
                                         " by layer, each run's last record";
  const std::string sub = fmt::format("rows: {}; columns: {}; {}", s.rows.empty() ? "-" : s.rows,
                                      s.cols.empty() ? "-" : fmt::format("{}", fmt::join(s.cols, ", ")),
                                      curves ? "one log y axis for all panels; × marks a divergence"
                                      : ranged_on_ok_only
                                          ? "one line per seed; one log y axis for all panels, ranged on the runs that finished ok"
                                          : "one line per seed; one log y axis for all panels");
  const double width = std::max(x0 + static_cast<double>(nc) * (pw + hgap) + 10,
                                24 + std::max(1.1 * text_width(title, 15), text_width(sub, kTick)));
  const double grid_h = static_cast<double>(nr) * (ph + vgap);
  bool shown_diverged = false, shown_collapsed = false, shown_pending = false;
  for (size_t r = 0; r < nr; ++r)
    for (size_t c = 0; c < nc; ++c) {
      const std::string k = cell_state(s.cells[r][c]).kind;
      shown_diverged = shown_diverged || k == "diverged";
      shown_collapsed = shown_collapsed || k == "collapsed";
      shown_pending = shown_pending || k == "pending";
    }
  bool any_diverged_mark = false;
  if (curves)
    for (const SummaryCurve& cv : s.curves) any_diverged_mark = any_diverged_mark || cv.diverged_step >= 0;
  const bool unigram_shown = curves && std::isfinite(s.unigram_loss) && s.unigram_loss >= lo && s.unigram_loss <= hi;
  const bool legend = shown_diverged || shown_collapsed || shown_pending || any_diverged_mark || unigram_shown;
  const double height = y0 + grid_h + (curves ? 40 : 24) + (legend ? 34 : 4);

  std::string out = header(width, height) + backgrounds();
  out += text(12, 22, title, 15, "start", " font-weight=\"bold\" class=\"title\"");
  out += text(12, 42, sub, kTick, "start", " fill=\"#333\"");
  for (size_t c = 0; c < nc; ++c) {
    const std::vector<std::string> lines = wrap(col_heads[c], pw, kLabel);
    const double cx = x0 + static_cast<double>(c) * (pw + hgap) + pw / 2;
    for (size_t i = 0; i < lines.size(); ++i)
      out += text(cx, y0 - 8 - 17.0 * static_cast<double>(lines.size() - 1 - i), lines[i], kLabel, "middle",
                  " font-weight=\"bold\" class=\"col-label\"");
  }
  for (size_t r = 0; r < nr; ++r) {
    const double top = y0 + static_cast<double>(r) * (ph + vgap), bottom = top + ph;
    out += text(30 + row_w, (top + bottom) / 2 + 4, row_label(r), kLabel, "end", " font-weight=\"bold\" class=\"row-label\"");
    for (size_t c = 0; c < nc; ++c) {
      const double left = x0 + static_cast<double>(c) * (pw + hgap), right = left + pw;
      const SummaryCell& cell = s.cells[r][c];
      const CellState st = cell_state(cell);
      out += fmt::format("<g class=\"panel\" data-row=\"{}\" data-col=\"{}\" data-state=\"{}\">\n", r, c, *st.kind ? st.kind : "ok");
      out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n", left, top, pw, ph,
                         background(st.kind));
      Axis y{lo, hi, true, bottom, top};
      const bool last_row = r + 1 == nr;
      if (curves) {
        Axis x{0, xhi * 1.02, false, left, right};
        Ticks xt;
        xt.at = linear_ticks(0, xhi, 3);
        xt.labels = distinct_labels(xt.at);
        out += axes(x, y, xt, yt, "", "", {last_row, c == 0, true, true});
        for (const SummaryCurve& cv : s.curves) {
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
          if (cv.diverged_step >= 0) {
            // at the last finite loss; without one, below the cell's state text
            out += cross(x.map(static_cast<double>(cv.diverged_step)), std::isfinite(ly) ? ly : top + 34, 5, "#a00");
          }
        }
        if (unigram_shown)
          out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#555\" "
                             "stroke-dasharray=\"5,4\"/>\n",
                             left, y.map(s.unigram_loss), right);
      } else {
        size_t nl = 0;
        const std::vector<PointLayers>* pts = cell_layers(r, c);
        if (pts)
          for (const PointLayers& p : *pts) nl = std::max(nl, p.values.size());
        Axis x{0.5, static_cast<double>(std::max<size_t>(nl, 1)) + 0.5, false, left, right};
        // Each panel has its own depth (columns may differ in layers), so each labels its x axis.
        out += axes(x, y, nl ? layer_ticks(nl) : Ticks{}, yt, "", "", {true, c == 0, false, true});
        static const char* kDash[] = {"", "6,3", "2,3", "8,3,2,3"};
        const std::string clip = fmt::format("clip-{}-{}", r, c);
        if (pts && !pts->empty())
          out += fmt::format("<clipPath id=\"{}\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/></clipPath>\n",
                             clip, left, top, pw, ph);
        if (pts)
          for (size_t k = 0; k < pts->size(); ++k) {
            const PointLayers& p = (*pts)[k];
            std::string line;
            auto flush = [&]() {
              if (!line.empty())
                out += fmt::format("<polyline class=\"profile\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} "
                                   "clip-path=\"url(#{})\"/>\n",
                                   line, color(0), *kDash[k % 4] ? fmt::format(" stroke-dasharray=\"{}\"", kDash[k % 4]) : "", clip);
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
          }
        if (cell.present && st.text.empty() && (!pts || pts->empty()))
          out += text(left + pw / 2, top + ph / 2, "no per-layer data", kTick, "middle", " fill=\"#555\"");
      }
      if (!st.text.empty()) {
        const std::string k = st.kind;
        const char* fill = k == "diverged" ? "#a00" : k == "collapsed" ? "#6b5200" : "#444";
        const double tw = std::min(pw - 8, text_width(st.text, kTick));
        out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"17\" fill=\"white\" fill-opacity=\"0.85\"/>\n",
                           left + 3, top + 3, tw + 6);
        out += text(left + 6, top + 16, st.text, kTick, "start", fmt::format(" font-weight=\"bold\" fill=\"{}\" class=\"cell-state\"", fill));
      }
      out += "</g>\n";
    }
  }
  const double grid_bottom = y0 + grid_h - vgap;
  out += text(x0 + (static_cast<double>(nc) * (pw + hgap) - hgap) / 2, grid_bottom + (curves ? 38 : 36),
              curves ? "training step" : "layer (block; 1 = first)", kLabel, "middle", " class=\"xlabel\"");
  out += fmt::format("<text transform=\"translate(18,{:.1f}) rotate(-90)\" text-anchor=\"middle\" font-size=\"{}\" "
                     "class=\"ylabel\">{}</text>\n",
                     y0 + (grid_h - vgap) / 2, kLabel,
                     esc(curves ? "validation loss (log scale)" : (layers.field.empty() ? "value" : field_label(layers.field)) + " (log scale)"));
  // Legend: what the tints and marks mean.
  double lx = x0, ly = height - 14;
  auto swatch = [&](const char* fill, const std::string& meaning) {
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"22\" height=\"14\" fill=\"{}\" stroke=\"#333\"/>\n", lx, ly - 11,
                       fill);
    out += text(lx + 28, ly, meaning, kTick, "start", " class=\"legend\"");
    lx += 28 + text_width(meaning, kTick) + 22;
  };
  if (shown_diverged) swatch(background("diverged"), "diverged (all or most seeds)");
  if (shown_collapsed) swatch(background("collapsed"), "collapsed (learned nothing)");
  if (shown_pending) swatch(background("pending"), "pending (not run yet)");
  if (curves && any_diverged_mark) {
    out += cross(lx + 8, ly - 4, 5, "#a00");
    out += text(lx + 20, ly, "divergence step", kTick, "start", " class=\"legend\"");
    lx += 20 + text_width("divergence step", kTick) + 22;
  }
  if (unigram_shown) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n", lx,
                       ly - 4, lx + 26, ly - 4);
    out += text(lx + 32, ly, "unigram loss (learned nothing)", kTick, "start", " class=\"legend\"");
  }
  return out + "</svg>\n";
}

}  // namespace normlab
