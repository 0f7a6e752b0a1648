// One run's per-layer field as a heatmap and as profile lines, and probe results as grouped bars
// (plots.h). Drawn with svg.h's primitives.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/config.h"
#include "normlab/plots.h"
#include "svg.h"
#include "sweep_internal.h"

namespace normlab {

using json = nlohmann::json;
using namespace svg;

namespace {

constexpr double kTitle = 15, kSub = 12, kTick = 12, kLabel = 13;

std::string status_text(const std::string& status, int64_t step) {
  if (status == "diverged") return step >= 0 ? fmt::format("diverged at step {}", step) : "diverged";
  if (status == "collapsed") return step >= 0 ? fmt::format("collapsed from step {}", step) : "collapsed";
  return "";
}

double value_at(const LayerHistory& h, size_t i, size_t l) {
  return l < h.values[i].size() ? h.values[i][l] : NAN;
}

size_t layer_count(const LayerHistory& h) {
  size_t n = 0;
  for (const std::vector<double>& v : h.values) n = std::max(n, v.size());
  return n;
}

bool usable(double v) { return std::isfinite(v) && v > 0; }

// What a figure's bold title and its subtitle need across (bold is about a tenth wider).
double title_width(const std::string& title, const std::string& sub) {
  return 24 + std::max(1.1 * text_width(title, kTitle), text_width(sub, kSub));
}

// "sweep: point" for a run directory of a sweep (DIR/runs/<point>), else the directory's name.
std::string run_title(const std::string& run_dir) {
  std::string p = std::filesystem::absolute(run_dir).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t runs = p.rfind("/runs/");
  struct stat st {};
  if (runs != std::string::npos && runs > 0 && ::stat((p.substr(0, runs) + "/spec.json").c_str(), &st) == 0) {
    const std::string sweep = p.substr(p.rfind('/', runs - 1) + 1, runs - p.rfind('/', runs - 1) - 1);
    return sweep + ": " + p.substr(runs + 6);
  }
  return p.substr(p.rfind('/') + 1);
}

}  // namespace

LayerHistory read_layer_history(const std::string& run_dir, const std::string& field) {
  LayerHistory h;
  h.field = field;
  h.title = run_title(run_dir);
  const RunDir run(run_dir);
  const std::string metrics = run_dir + "/metrics.jsonl";
  struct stat st {};
  NL_USAGE(::stat(metrics.c_str(), &st) == 0, "'{}' has no metrics.jsonl (not a run directory, or a run not started)",
           shown(run_dir, 200));
  std::vector<std::string> lists;  // the per-layer fields seen, for the message when `field` is not one
  bool seen = false;
  for_each_metrics_record(run, [&](int64_t step, const json& rec) {
    for (const auto& [k, v] : rec.items())
      if (v.is_array() && std::find(lists.begin(), lists.end(), k) == lists.end()) lists.push_back(k);
    if (!rec.contains(field)) return;
    seen = true;
    const json& v = rec[field];
    NL_USAGE(v.is_array(), "{}: '{}' is not a per-layer field (a list per block) at step {}", shown(metrics, 200),
             shown(field), step);
    h.steps.push_back(step);
    h.values.emplace_back();
    for (const json& x : v) h.values.back().push_back(x.is_number() ? x.get<double>() : NAN);
  });
  std::string known;
  for (const std::string& k : lists) known += (known.empty() ? "" : ", ") + k;
  NL_USAGE(seen, "{}: no record has the field '{}' (its per-layer fields: {})", shown(metrics, 200), shown(field),
           known.empty() ? "none" : known);
  h.encoder_layers = run.encoder_layers();
  if (::stat((run_dir + "/result.json").c_str(), &st) == 0) {  // a run still going has none yet
    const json r = run.result();
    if (r.contains("status") && r["status"].is_string()) h.status = r["status"].get<std::string>();
    const char* key = h.status == "diverged" ? "diverged_step" : h.status == "collapsed" ? "collapsed_step" : "";
    if (*key && r.contains(key) && r[key].is_number_integer()) h.status_step = r[key].get<int64_t>();
  }
  return h;
}

std::vector<LayerHistory> split_stacks(const LayerHistory& h) {
  const auto enc = static_cast<size_t>(std::max<int64_t>(h.encoder_layers, 0));
  LayerHistory encoder = h, decoder = h;
  encoder.encoder_layers = decoder.encoder_layers = 0;
  encoder.stack = "encoder";
  decoder.stack = "decoder";
  for (size_t i = 0; i < h.values.size(); ++i) {
    const std::vector<double>& v = h.values[i];
    const auto cut = v.begin() + static_cast<std::ptrdiff_t>(std::min(enc, v.size()));
    encoder.values[i].assign(v.begin(), cut);
    decoder.values[i].assign(cut, v.end());
  }
  return {encoder, decoder};
}

namespace {

// What a panel's y axis counts, and its subtitle: the run, its stack, its status.
std::string layer_axis_label(const LayerHistory& h) {
  return h.stack.empty() ? "layer (block; 1 = first)" : h.stack + " layer (1 = first)";
}
// An encoder-decoder's figure: `draw` of each stack, one panel above the other.
std::string stack_panels(const LayerHistory& h, const std::function<std::string(const LayerHistory&)>& draw) {
  std::vector<std::string> panels;
  for (const LayerHistory& stack : split_stacks(h)) panels.push_back(draw(stack));
  return stack_vertically(panels);
}

std::string panel_subtitle(const LayerHistory& h) {
  const std::string st = status_text(h.status, h.status_step);
  return h.title + (h.stack.empty() ? "" : ": " + h.stack) + (st.empty() ? "" : "  (" + st + ")");
}

}  // namespace

// ---- heatmap -----------------------------------------------------------------------------------
namespace {

// The heatmap's fixed geometry: margins, the cell area, the colour bar beside it.
constexpr double kHeatMl = 92, kHeatPw = 600, kHeatMt = 78, kHeatPh = 380, kHeatCbx = kHeatMl + kHeatPw + 26, kHeatCbw = 20;

// The colour scale: the log range of the positive finite values, and whether any value is off it.
struct HeatScale {
  double lo = INFINITY, hi = -INFINITY;
  bool any_nan = false, any_nonpos = false;
  double frac(double v) const { return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)); }
};

HeatScale heat_scale(const LayerHistory& h) {
  HeatScale sc;
  for (size_t i = 0; i < h.steps.size(); ++i)
    for (size_t l = 0; l < layer_count(h); ++l) {
      const double v = value_at(h, i, l);
      if (!std::isfinite(v)) sc.any_nan = true;
      else if (v <= 0) sc.any_nonpos = true;
      else sc.lo = std::min(sc.lo, v), sc.hi = std::max(sc.hi, v);
    }
  if (!(sc.hi >= sc.lo)) sc.lo = 1, sc.hi = 10;  // nothing on the log scale: the bar is only a key
  // The scale spans a factor 2 at least (around the data's geometric middle): a stream held at
  // 8.00 to 8.07 by its norms is flat, and must not look like the whole colormap.
  if (sc.hi / sc.lo < 2) {
    const double mid = std::sqrt(sc.lo * sc.hi);
    sc.lo = mid / std::sqrt(2.0), sc.hi = mid * std::sqrt(2.0);
  }
  return sc;
}

// Cells: column i is record i, row l (from the bottom) is layer l + 1.
std::string heat_cells(const LayerHistory& h, const HeatScale& sc) {
  const size_t steps = h.steps.size(), layers = layer_count(h);
  const double cw = kHeatPw / static_cast<double>(steps), ch = kHeatPh / static_cast<double>(layers);
  std::string out = "<g shape-rendering=\"crispEdges\">\n";
  for (size_t i = 0; i < steps; ++i)
    for (size_t l = 0; l < layers; ++l) {
      const double v = value_at(h, i, l);
      const std::string fill = !std::isfinite(v) ? "url(#cell-nan)" : v <= 0 ? "url(#cell-nonpos)" : viridis(sc.frac(v));
      out += fmt::format("<rect class=\"cell\" data-step=\"{}\" data-layer=\"{}\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" "
                         "height=\"{:.2f}\" fill=\"{}\"/>\n",
                         h.steps[i], l + 1, kHeatMl + static_cast<double>(i) * cw,
                         kHeatMt + static_cast<double>(layers - 1 - l) * ch, cw, ch, fill);
    }
  return out + "</g>\n";
}

// The run's end: a line at the step where it diverged or collapsed (between records: interpolated).
std::string status_mark(const LayerHistory& h, const std::string& st, const Axis& x) {
  const size_t steps = h.steps.size();
  const double top = kHeatMt, bottom = kHeatMt + kHeatPh;
  const double s = static_cast<double>(h.status_step);
  double px = kHeatMl + kHeatPw;
  if (s <= static_cast<double>(h.steps.front())) px = s == static_cast<double>(h.steps.front()) ? x.map(0) : kHeatMl;
  for (size_t i = 0; i < steps; ++i) {
    if (static_cast<double>(h.steps[i]) == s) px = x.map(static_cast<double>(i));
    if (i + 1 < steps && h.steps[i] < h.status_step && h.status_step < h.steps[i + 1])
      px = x.map(static_cast<double>(i) + (s - static_cast<double>(h.steps[i])) / static_cast<double>(h.steps[i + 1] - h.steps[i]));
  }
  const char* kind = h.status == "diverged" ? "diverged" : "collapsed";
  std::string out = fmt::format("<g class=\"status-mark {}\">\n", kind);
  out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#fff\" stroke-width=\"5\"/>\n"
                     "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\" stroke-width=\"2\" "
                     "stroke-dasharray=\"6,3\"/>\n",
                     px, top - 10, bottom);
  const double w = text_width(st, kLabel);
  const double tx = std::clamp(px, kHeatMl + w / 2, kHeatMl + kHeatPw - w / 2);
  out += fmt::format("<path d=\"M{0:.1f},{1:.1f} l-5,-7 h10 z\" fill=\"#000\"/>\n", px, top - 3);
  out += text(tx, top - 16, st, kLabel, "middle", " font-weight=\"bold\" fill=\"#a00\"");
  return out + "</g>\n";
}

// Colour bar: 64 steps of the colormap from lo (bottom) to hi (top), log-spaced ticks.
std::string colour_bar(const LayerHistory& h, const HeatScale& sc, const Ticks& ct, double cbar_w) {
  const double cbx = kHeatCbx, cbw = kHeatCbw, top = kHeatMt, bottom = kHeatMt + kHeatPh, ph = kHeatPh;
  constexpr int kSteps = 64;
  std::string out = "<g shape-rendering=\"crispEdges\">\n";
  for (int k = 0; k < kSteps; ++k)
    out += fmt::format("<rect class=\"cbar\" x=\"{:.1f}\" y=\"{:.2f}\" width=\"{:.1f}\" height=\"{:.2f}\" fill=\"{}\"/>\n", cbx,
                       bottom - (k + 1) * ph / kSteps, cbw, ph / kSteps + 0.3, viridis((k + 0.5) / kSteps));
  out += "</g>\n";
  out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#333\"/>\n", cbx,
                     top, cbw, ph);
  std::vector<double> cp;
  for (double v : ct.at) cp.push_back(bottom - sc.frac(v) * ph);
  for (size_t i : thin_labels(cp, ct.labels, kTick, true)) {
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#333\"/>\n", cbx + cbw, cp[i],
                       cbx + cbw + 4);
    out += text(cbx + cbw + 7, cp[i] + 4, ct.labels[i], kTick, "start", " class=\"cbar-tick\"");
  }
  out += fmt::format("<text transform=\"translate({:.1f},{:.1f}) rotate(-90)\" text-anchor=\"middle\" font-size=\"{}\">{}</text>\n",
                     cbx + cbw + 14 + cbar_w + 8, (top + bottom) / 2, kLabel, esc(field_label(h.field) + " (log colour scale)"));
  return out;
}

// What the grey cells mean, those drawn only.
std::string heat_legend(const HeatScale& sc) {
  std::string out;
  double lx = kHeatMl, ly = kHeatMt + kHeatPh + 62;
  auto entry = [&](const char* pattern, const std::string& what) {
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"16\" height=\"14\" fill=\"url(#{})\" stroke=\"#333\"/>\n", lx,
                       ly - 11, pattern);
    out += text(lx + 22, ly, what, kTick, "start", " class=\"legend\"");
    lx += 22 + text_width(what, kTick) + 24;
  };
  if (sc.any_nan) entry("cell-nan", "not finite (null, NaN or inf)");
  if (sc.any_nonpos) entry("cell-nonpos", "zero or negative (off the log scale)");
  return out;
}

}  // namespace

std::string plot_layer_heatmap_svg(const LayerHistory& h) {
  if (h.encoder_layers > 0) return stack_panels(h, [](const LayerHistory& s) { return plot_layer_heatmap_svg(s); });
  const size_t steps = h.steps.size(), layers = layer_count(h);
  if (steps == 0 || layers == 0) return empty_plot(fmt::format("{}: no records to plot", h.field));
  const HeatScale sc = heat_scale(h);
  const Ticks ct = value_ticks(sc.lo, sc.hi, true, kHeatPh);
  double cbar_w = 0;
  for (const std::string& s : ct.labels) cbar_w = std::max(cbar_w, text_width(s, kTick));
  const std::string st = status_text(h.status, h.status_step);
  const std::string title = field_label(h.field) + " by layer and step", sub = panel_subtitle(h);
  const double width = std::max({kHeatCbx + kHeatCbw + 10 + cbar_w + 34, title_width(title, sub)});
  const bool legend = sc.any_nan || sc.any_nonpos;
  const double height = kHeatMt + kHeatPh + 52 + (legend ? 30 : 0);

  std::string out = header(width, height) + pattern_defs();
  out += text(12, 22, title, kTitle, "start", " font-weight=\"bold\" class=\"title\"");
  out += text(12, 42, sub, kSub, "start", " fill=\"#333\"");
  out += heat_cells(h, sc);
  // Axes in "index" coordinates: x = record index, y = layer.
  Axis x{-0.5, static_cast<double>(steps) - 0.5, false, kHeatMl, kHeatMl + kHeatPw};
  Axis y{0.5, static_cast<double>(layers) + 0.5, false, kHeatMt + kHeatPh, kHeatMt};
  Ticks xt, yt = layer_ticks(layers);
  for (size_t i = 0; i < steps; ++i) xt.at.push_back(static_cast<double>(i)), xt.labels.push_back(std::to_string(h.steps[i]));
  out += axes(x, y, xt, yt, "training step (one column per eval record)", layer_axis_label(h), {true, true, false, false});
  if (!st.empty() && h.status_step >= 0) out += status_mark(h, st, x);
  out += colour_bar(h, sc, ct, cbar_w);
  if (legend) out += heat_legend(sc);
  return out + "</svg>\n";
}

// ---- profile lines -----------------------------------------------------------------------------
namespace {

struct Line {
  std::string label;
  std::vector<double> values;
  const char* color;
  const char* dash;    // "" solid
  const char* marker;  // circle, triangle, square
};

std::string marker(const char* kind, double x, double y, const char* color) {
  if (std::string(kind) == "triangle")
    return fmt::format("<path d=\"M{:.1f},{:.1f} l4.5,8 h-9 z\" fill=\"{}\"/>\n", x, y - 5, color);
  if (std::string(kind) == "square")
    return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"8\" height=\"8\" fill=\"white\" stroke=\"{}\" stroke-width=\"1.8\"/>\n",
                       x - 4, y - 4, color);
  return fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"/>\n", x, y, color);
}

}  // namespace

std::string plot_layer_profile_lines_svg(const LayerHistory& h, const std::vector<double>& init, const std::string& init_label) {
  if (h.encoder_layers > 0)  // an init line (probe's) is a decoder-only model's: none here
    return stack_panels(h, [](const LayerHistory& s) { return plot_layer_profile_lines_svg(s); });
  const size_t steps = h.steps.size();
  size_t layers = std::max(layer_count(h), init.size());
  if (layers == 0 || (steps == 0 && init.empty())) return empty_plot(fmt::format("{}: no records to plot", h.field));
  std::vector<Line> lines;
  if (!init.empty()) lines.push_back({init_label, init, "#555555", "2,4", "square"});
  if (steps > 0) {
    size_t last = steps - 1;  // a diverged run's last record may hold nothing finite
    while (last > 0 && std::none_of(h.values[last].begin(), h.values[last].end(), usable)) --last;
    const bool cut = last != steps - 1;
    if (last == 0) {
      lines.push_back({fmt::format("step {} ({} record)", h.steps[0], steps == 1 ? "the only" : cut ? "the only finite" : "first"),
                       h.values[0], "#1f77b4", "8,4", "triangle"});
    } else {
      lines.push_back({fmt::format("step {} (first record)", h.steps[0]), h.values[0], "#1f77b4", "8,4", "triangle"});
      lines.push_back({fmt::format("step {} ({})", h.steps[last], cut ? "last finite record" : "last record"), h.values[last],
                       "#d62728", "", "circle"});
    }
  }
  double lo = INFINITY, hi = -INFINITY;
  bool gaps = false;
  for (const Line& ln : lines)
    for (size_t l = 0; l < layers; ++l) {
      const double v = l < ln.values.size() ? ln.values[l] : NAN;
      if (usable(v)) lo = std::min(lo, v), hi = std::max(hi, v);
      else gaps = true;
    }
  if (!(hi >= lo)) return empty_plot(fmt::format("{}: no finite positive values to plot on a log scale", h.field));
  pad(lo, hi, true);

  const double ml = 96, pw = 560, mt = 64, ph = 360, mb = 56;
  double legend_w = 0;
  for (const Line& ln : lines) legend_w = std::max(legend_w, text_width(ln.label, kTick));
  legend_w = std::max(legend_w, text_width("gaps: not finite or ≤ 0", kTick)) + 60;
  const std::string title = field_label(h.field) + " by layer (log scale)", sub = panel_subtitle(h);
  const double width = std::max(ml + pw + 20 + legend_w, title_width(title, sub));
  const double height = mt + ph + mb;
  std::string out = header(width, height);
  out += text(12, 22, title, kTitle, "start", " font-weight=\"bold\" class=\"title\"");
  out += text(12, 42, sub, kSub, "start", " fill=\"#333\"");
  Axis x{0.5, static_cast<double>(layers) + 0.5, false, ml, ml + pw};
  Axis y{lo, hi, true, mt + ph, mt};
  out += axes(x, y, layer_ticks(layers), value_ticks(lo, hi, true, ph), layer_axis_label(h), field_label(h.field));
  // Markers on every point up to ~25 of them; beyond, on every k-th so that they stay apart.
  const size_t every = std::max<size_t>(1, (layers + 24) / 25);
  for (const Line& ln : lines) {
    std::string pts, marks;
    auto flush = [&]() {
      if (!pts.empty())
        out += fmt::format("<polyline class=\"profile\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.2\"{}/>\n", pts,
                           ln.color, *ln.dash ? fmt::format(" stroke-dasharray=\"{}\"", ln.dash) : "");
      pts.clear();
    };
    for (size_t l = 0; l < layers; ++l) {
      const double v = l < ln.values.size() ? ln.values[l] : NAN;
      if (!usable(v)) {
        flush();
        continue;
      }
      const double px = x.map(static_cast<double>(l + 1)), py = y.map(v);
      pts += fmt::format("{:.1f},{:.1f} ", px, py);
      if (l % every == 0 || l + 1 == layers) marks += marker(ln.marker, px, py, ln.color);
    }
    flush();
    out += marks;
  }
  double lx = ml + pw + 24, ly = mt + 10;
  for (const Line& ln : lines) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2.2\"{}/>\n", lx,
                       ly - 4, lx + 32, ly - 4, ln.color, *ln.dash ? fmt::format(" stroke-dasharray=\"{}\"", ln.dash) : "");
    out += marker(ln.marker, lx + 16, ly - 4, ln.color);
    out += text(lx + 40, ly, ln.label, kTick, "start", " class=\"legend\"");
    ly += 22;
  }
  if (gaps) out += text(lx, ly + 4, "gaps: not finite or ≤ 0", kTick, "start", " class=\"legend\" fill=\"#555\"");
  return out + "</svg>\n";
}

// ---- probe bars --------------------------------------------------------------------------------
ProbeBarSeries probe_bar_series(const ConfigProbe& probe) {
  ProbeBarSeries s;
  s.label = probe.label;
  for (const LayerProbe& l : probe.layers) {
    s.stream_norm.push_back(l.act_norm.mean);
    s.grad_norm.push_back(l.block_grad_norm.mean);
    s.identity_share.push_back(l.identity_share.mean);
  }
  return s;
}

std::string plot_probe_bars_svg(const std::vector<ProbeBarSeries>& series, const std::string& title) {
  size_t layers = 0;
  for (const ProbeBarSeries& s : series)
    layers = std::max({layers, s.stream_norm.size(), s.grad_norm.size(), s.identity_share.size()});
  if (series.empty() || layers == 0) return empty_plot("no probe results to plot");
  struct Panel {
    std::string title, ylabel;
    std::vector<double> ProbeBarSeries::*field;
    bool share;
  };
  const Panel panels[] = {
      {"stream norm ‖x_l‖: mean token L2 norm after block l", "L2 norm", &ProbeBarSeries::stream_norm, false},
      {"block gradient norm ‖dL/dθ_l‖: Frobenius, all of block l's parameters", "gradient norm",
       &ProbeBarSeries::grad_norm, false},
      {"identity share of dL/dx_(l-1): ‖identity‖ / (‖identity‖ + ‖F‖)", "share (0 to 1)",
       &ProbeBarSeries::identity_share, true},
  };
  const double ml = 96, pw = 760, ph = 180, gap = 74, legend_h = 22.0 * static_cast<double>(series.size());
  const double top0 = 44 + legend_h + 30;
  const std::string heading = title.empty() ? "Signal propagation at initialization (normlab probe), layer by layer" : title;
  double legend_w = 0;
  for (const ProbeBarSeries& se : series) legend_w = std::max(legend_w, ml + 36 + text_width(se.label, kTick) + 12);
  const double width = std::max({ml + pw + 30, title_width(heading, ""), legend_w});
  const double height = top0 + 3 * ph + 2 * gap + 56;
  std::string out = header(width, height) + pattern_defs();
  out += text(12, 22, heading, kTitle, "start", " font-weight=\"bold\" class=\"title\"");
  // Legend: colour and hatch of each series.
  for (size_t i = 0; i < series.size(); ++i) {
    const double ly = 48 + 22.0 * static_cast<double>(i);
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"28\" height=\"15\" fill=\"{}\" stroke=\"#333\"/>\n", ml, ly - 12,
                       color(i));
    if (*kHatches[i % 6])
      out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"28\" height=\"15\" fill=\"url(#{})\"/>\n", ml, ly - 12, kHatches[i % 6]);
    out += text(ml + 36, ly, series[i].label, kTick, "start", " class=\"legend\"");
  }
  const double group = pw / static_cast<double>(layers), inner = group * 0.8, bw = inner / static_cast<double>(series.size());
  for (size_t p = 0; p < 3; ++p) {
    const Panel& pn = panels[p];
    const double top = top0 + static_cast<double>(p) * (ph + gap), bottom = top + ph;
    double lo = INFINITY, hi = -INFINITY;
    for (const ProbeBarSeries& s : series)
      for (double v : s.*pn.field)
        if (usable(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    // Norms that span more than a factor 20 go on a log axis; bars then start at its bottom.
    const bool log = !pn.share && hi >= lo && hi / lo > 20;
    if (pn.share) lo = 0, hi = 1;
    else if (!(hi >= lo)) lo = 0, hi = 1;
    else if (log) pad(lo, hi, true);
    else lo = 0, hi *= 1.08;
    Axis x{0.5, static_cast<double>(layers) + 0.5, false, ml, ml + pw};
    Axis y{lo, hi, log, bottom, top};
    out += text(ml, top - 10, pn.title + (log ? " (log scale)" : ""), kLabel, "start", " font-weight=\"bold\"");
    out += axes(x, y, layer_ticks(layers), value_ticks(lo, hi, log, ph), p == 2 ? "layer (block; 1 = first)" : "", pn.ylabel,
                {true, true, false, true});
    for (size_t i = 0; i < series.size(); ++i) {
      const std::vector<double>& v = series[i].*pn.field;
      for (size_t l = 0; l < v.size(); ++l) {
        if (!std::isfinite(v[l]) || (log && v[l] <= 0)) continue;
        const double bx = x.map(static_cast<double>(l + 1)) - inner / 2 + static_cast<double>(i) * bw;
        const double by = y.map(std::clamp(v[l], lo, hi));
        const double base = y.px0;
        const double y0 = std::min(by, base), h = std::fabs(base - by);
        out += fmt::format("<rect class=\"bar\" data-series=\"{}\" data-layer=\"{}\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" "
                           "height=\"{:.2f}\" fill=\"{}\" stroke=\"#222\" stroke-width=\"0.6\"/>\n",
                           i, l + 1, bx, y0, bw, h, color(i));
        if (*kHatches[i % 6])
          out += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"url(#{})\"/>\n", bx, y0, bw, h,
                             kHatches[i % 6]);
      }
    }
  }
  return out + "</svg>\n";
}

LayerInit probe_layer_init(const std::string& run_dir) {
  const TrainConfig cfg = load_train_config(run_dir + "/config.json", {});
  check_probeable(cfg);
  ProbeOptions opt;
  opt.seeds = 1;
  check_fits_in_memory(cfg, opt.batch, "plot profile --init");
  const ConfigProbe p = probe_config(cfg, opt);
  LayerInit init;
  for (const LayerProbe& l : p.layers) {
    init.stream_norm.push_back(l.act_norm.mean);
    init.block_grad_norm.push_back(l.block_grad_norm.mean);
  }
  init.label = fmt::format("init (probe: seed {}, {} sequences)", cfg.seed, opt.batch);
  return init;
}

const std::vector<double>& LayerInit::of(const std::string& field) const {
  NL_USAGE(field == "stream_norm" || field == "block_grad_norm",
           "the init line probes stream_norm and block_grad_norm at initialization, not '{}'", shown(field, 60));
  return field == "stream_norm" ? stream_norm : block_grad_norm;
}

}  // namespace normlab
