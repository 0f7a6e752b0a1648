// plots.h: per-layer heatmaps, profile lines, probe bars and sweep small multiples, checked on
// their structure (parsed back as XML): well-formed, one cell per (step, layer), layer 1 at the
// bottom, a labelled colour bar whose colours brighten monotonically, tick labels that do not
// overlap, and a run's divergence marked exactly when it diverged. Odd sizes and non-finite
// values included. NORMLAB_PLOTS_OUT=DIR also writes every figure there, to look at.
#include <gtest/gtest.h>

#include <cctype>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "normlab/error.h"
#include "normlab/plots.h"
#include "test_util.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

// ---- a minimal XML reader: enough to tell a well-formed SVG and to find its elements -----------
struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // the character data directly inside (for <text>), entities left as written
  double num(const std::string& key) const { return std::stod(attrs.at(key)); }
  bool has_class(const std::string& c) const {
    auto it = attrs.find("class");
    if (it == attrs.end()) return false;
    std::string s = " " + it->second + " ";
    return s.find(" " + c + " ") != std::string::npos;
  }
};

struct Doc {
  std::vector<Element> elements;  // in document order
  std::string error;              // "" when well-formed
  std::vector<const Element*> with_class(const std::string& c) const {
    std::vector<const Element*> out;
    for (const Element& e : elements)
      if (e.has_class(c)) out.push_back(&e);
    return out;
  }
  std::vector<const Element*> named(const std::string& n) const {
    std::vector<const Element*> out;
    for (const Element& e : elements)
      if (e.name == n) out.push_back(&e);
    return out;
  }
};

bool entity_ok(const std::string& s, size_t amp) {
  for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
    if (s.compare(amp, std::string(e).size(), e) == 0) return true;
  // a decimal character reference, &#39;
  size_t i = amp + 1;
  if (i >= s.size() || s[i] != '#') return false;
  size_t digits = 0;
  while (++i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++digits;
  return digits > 0 && i < s.size() && s[i] == ';';
}

// Tags balanced and properly nested, attributes name="value" without '<' or stray '&', character
// data without '<' or stray '&', one root element <svg>.
Doc parse_xml(const std::string& s) {
  Doc d;
  std::vector<size_t> open;  // indices into elements
  size_t i = 0, roots = 0;
  auto fail = [&](const std::string& why) {
    if (d.error.empty()) d.error = why + " at byte " + std::to_string(i);
  };
  while (i < s.size() && d.error.empty()) {
    if (s[i] != '<') {
      const size_t next = std::min(s.find('<', i), s.size());
      const std::string chars = s.substr(i, next - i);
      for (size_t k = 0; k < chars.size(); ++k)
        if (chars[k] == '&' && !entity_ok(chars, k)) fail("a bare & in character data");
      if (!open.empty()) d.elements[open.back()].text += chars;
      else if (chars.find_first_not_of(" \n\t\r") != std::string::npos) fail("text outside the root");
      i = next;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find("-->", i);
      if (end == std::string::npos) return fail("an unterminated comment"), d;
      i = end + 3;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return fail("an unterminated tag"), d;
    std::string tag = s.substr(i + 1, end - i - 1);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || d.elements[open.back()].name != name) fail("</" + name + "> closes nothing open");
      else open.pop_back();
      i = end + 1;
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.pop_back();
    Element e;
    size_t k = 0;
    while (k < tag.size() && !std::isspace(static_cast<unsigned char>(tag[k]))) ++k;
    e.name = tag.substr(0, k);
    if (e.name.empty()) fail("a tag without a name");
    while (k < tag.size() && d.error.empty()) {
      while (k < tag.size() && std::isspace(static_cast<unsigned char>(tag[k]))) ++k;
      if (k >= tag.size()) break;
      const size_t eq = tag.find('=', k);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') {
        fail("an attribute without =\"...\" in <" + e.name + ">");
        break;
      }
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) {
        fail("an unterminated attribute in <" + e.name + ">");
        break;
      }
      const std::string key = tag.substr(k, eq - k), value = tag.substr(eq + 2, close - eq - 2);
      if (value.find('<') != std::string::npos) fail("a < in an attribute");
      for (size_t a = 0; a < value.size(); ++a)
        if (value[a] == '&' && !entity_ok(value, a)) fail("a bare & in an attribute");
      if (e.attrs.count(key)) fail("attribute " + key + " twice");
      e.attrs[key] = value;
      k = close + 1;
    }
    if (open.empty()) ++roots;
    d.elements.push_back(e);
    if (!self_closing) open.push_back(d.elements.size() - 1);
    i = end + 1;
  }
  if (d.error.empty() && !open.empty()) d.error = "<" + d.elements[open.back()].name + "> never closed";
  if (d.error.empty() && roots != 1) d.error = std::to_string(roots) + " root elements";
  if (d.error.empty() && (d.elements.empty() || d.elements[0].name != "svg")) d.error = "the root is not <svg>";
  return d;
}

Doc parse_ok(const std::string& svg) {
  Doc d = parse_xml(svg);
  EXPECT_EQ(d.error, "") << svg.substr(0, 400);
  return d;
}

void save(const std::string& name, const std::string& svg) {
  if (const char* dir = std::getenv("NORMLAB_PLOTS_OUT")) std::ofstream(std::string(dir) + "/" + name + ".svg") << svg;
}

// ---- measures --------------------------------------------------------------------------------
// Relative luminance (WCAG, linearized sRGB) of "#rrggbb".
double luminance(const std::string& hex) {
  EXPECT_EQ(hex.size(), 7u) << hex;
  auto ch = [&](int i) {
    const double c = std::stoi(hex.substr(1 + 2 * i, 2), nullptr, 16) / 255.0;
    return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * ch(0) + 0.7152 * ch(1) + 0.0722 * ch(2);
}

// DejaVu Sans at font-size px: digits are 0.636 em; a label counts its characters (code points).
double est_width(const std::string& label, double font) {
  double n = 0;
  for (unsigned char c : label)
    if ((c & 0xC0) != 0x80) n += 1;
  return n * 0.6 * font;
}

double font_of(const Element& e) { return e.attrs.count("font-size") ? e.num("font-size") : 12; }

// Horizontal tick labels (text-anchor middle) do not overlap: neighbours' centres are farther apart
// than half of each one's width; stacked ones are a line apart. Per panel: labels are compared with
// those on the same baseline (x ticks) or the same column (y ticks).
void expect_apart(const std::vector<const Element*>& labels, bool stacked, const std::string& what) {
  std::map<double, std::vector<const Element*>> lines;  // by baseline (x ticks) or by x (y ticks)
  for (const Element* e : labels) lines[stacked ? e->num("x") : e->num("y")].push_back(e);
  for (auto& [at, group] : lines) {
    std::sort(group.begin(), group.end(), [&](const Element* a, const Element* b) {
      return stacked ? a->num("y") < b->num("y") : a->num("x") < b->num("x");
    });
    for (size_t i = 1; i < group.size(); ++i) {
      const Element &a = *group[i - 1], &b = *group[i];
      if (stacked) {
        EXPECT_GT(b.num("y") - a.num("y"), font_of(b)) << what << ": '" << a.text << "' and '" << b.text << "'";
      } else {
        const double need = (est_width(a.text, font_of(a)) + est_width(b.text, font_of(b))) / 2;
        EXPECT_GT(b.num("x") - a.num("x"), need) << what << ": '" << a.text << "' and '" << b.text << "'";
      }
    }
  }
}

void expect_font_at_least_11(const Doc& d, const std::string& what) {
  for (const Element* e : d.named("text")) EXPECT_GE(font_of(*e), 11) << what << ": '" << e->text << "'";
}

// ---- synthetic runs --------------------------------------------------------------------------
LayerHistory history(size_t steps, size_t layers, const std::string& status = "ok", int64_t status_step = -1) {
  LayerHistory h;
  h.field = "stream_norm";
  h.title = "synthetic <run> & \"quotes\"";  // escaped, or the SVG is not well-formed
  h.status = status;
  h.status_step = status_step;
  for (size_t i = 0; i < steps; ++i) {
    h.steps.push_back(static_cast<int64_t>((i + 1) * 500));
    std::vector<double> v;
    for (size_t l = 0; l < layers; ++l) v.push_back(std::pow(1.1, static_cast<double>(l)) * (1 + 0.01 * static_cast<double>(i)));
    h.values.push_back(v);
  }
  return h;
}

std::vector<const Element*> cells_of_layer(const Doc& d, int layer) {
  std::vector<const Element*> out;
  for (const Element* e : d.with_class("cell"))
    if (std::stoi(e->attrs.at("data-layer")) == layer) out.push_back(e);
  return out;
}

std::string all_text(const Doc& d) {
  std::string s;
  for (const Element* e : d.named("text")) s += e->text + "\n";
  return s;
}

}  // namespace

// ---- heatmap -----------------------------------------------------------------------------------
TEST(RunPlots, HeatmapHasOneCellPerStepAndLayerWithLayerOneAtTheBottom) {
  for (auto [steps, layers] : std::vector<std::pair<size_t, size_t>>{{1, 1}, {1, 7}, {40, 48}, {3, 100}, {200, 2}}) {
    SCOPED_TRACE(testing::Message() << steps << " steps x " << layers << " layers");
    const std::string svg = plot_layer_heatmap_svg(history(steps, layers));
    save("heatmap_" + std::to_string(steps) + "x" + std::to_string(layers), svg);
    const Doc d = parse_ok(svg);
    ASSERT_EQ(d.with_class("cell").size(), steps * layers);
    // Every (step, layer) once.
    std::set<std::pair<std::string, std::string>> seen;
    for (const Element* e : d.with_class("cell")) seen.insert({e->attrs.at("data-step"), e->attrs.at("data-layer")});
    EXPECT_EQ(seen.size(), steps * layers);
    // Layer 1 lowest on the page (largest y), layer L highest; each layer above the one before.
    double prev_y = INFINITY;
    for (size_t l = 1; l <= layers; ++l) {
      const std::vector<const Element*> row = cells_of_layer(d, static_cast<int>(l));
      ASSERT_EQ(row.size(), steps);
      const double y = row[0]->num("y");
      for (const Element* e : row) EXPECT_DOUBLE_EQ(e->num("y"), y) << "layer " << l << " is not one row";
      EXPECT_LT(y, prev_y) << "layer " << l << " is not above layer " << l - 1;
      prev_y = y;
    }
    // Columns in step order, left to right.
    const std::vector<const Element*> first = cells_of_layer(d, 1);
    for (size_t i = 1; i < first.size(); ++i) EXPECT_GT(first[i]->num("x"), first[i - 1]->num("x"));
    // A colour bar with at least three labelled values; axis labels with what they count.
    EXPECT_GE(d.with_class("cbar-tick").size(), 3u);
    EXPECT_NE(all_text(d).find("layer (block; 1 = first)"), std::string::npos);
    EXPECT_NE(all_text(d).find("training step"), std::string::npos);
    EXPECT_TRUE(d.with_class("status-mark").empty());
    expect_apart(d.with_class("xtick"), false, "x ticks");
    expect_apart(d.with_class("ytick"), true, "y ticks");
    expect_apart(d.with_class("cbar-tick"), true, "colour bar ticks");
    expect_font_at_least_11(d, "heatmap");
  }
}

// An encoder-decoder's run: the encoder's layers and the decoder's as two panels, one above the
// other, each numbered from layer 1, in one well-formed document.
TEST(RunPlots, AnEncoderDecoderIsTwoPanelsOneStackEach) {
  LayerHistory h = history(5, 7);
  h.encoder_layers = 4;
  const std::vector<LayerHistory> stacks = split_stacks(h);
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(stacks[0].values[2], std::vector<double>(h.values[2].begin(), h.values[2].begin() + 4));
  EXPECT_EQ(stacks[1].values[2], std::vector<double>(h.values[2].begin() + 4, h.values[2].end()));
  for (const std::string& svg : {plot_layer_heatmap_svg(h), plot_layer_profile_lines_svg(h)}) {
    save("encdec_panels", svg);
    const Doc d = parse_ok(svg);
    ASSERT_EQ(d.named("svg").size(), 3u) << "the document and its two panels";
    const double top = d.named("svg")[1]->num("y"), below = d.named("svg")[2]->num("y");
    EXPECT_EQ(top, 0);
    EXPECT_DOUBLE_EQ(below, d.named("svg")[1]->num("height"));
    EXPECT_DOUBLE_EQ(d.named("svg")[0]->num("height"), below + d.named("svg")[2]->num("height"));
    const std::string text = all_text(d);
    EXPECT_NE(text.find("encoder layer (1 = first)"), std::string::npos);
    EXPECT_NE(text.find("decoder layer (1 = first)"), std::string::npos);
    EXPECT_EQ(text.find("layer (block"), std::string::npos);
  }
  EXPECT_EQ(parse_ok(plot_layer_heatmap_svg(h)).with_class("cell").size(), 5u * 7u);
}

TEST(RunPlots, HeatmapTickLabelsStayApartWithManyWideSteps) {
  LayerHistory h = history(120, 64);
  for (size_t i = 0; i < h.steps.size(); ++i) h.steps[i] = 1000000 + static_cast<int64_t>(i) * 25000;  // 7-digit steps
  const Doc d = parse_ok(plot_layer_heatmap_svg(h));
  const auto x = d.with_class("xtick"), y = d.with_class("ytick");
  EXPECT_GE(x.size(), 3u);
  EXPECT_GE(y.size(), 3u);
  EXPECT_LT(x.size(), 20u);
  expect_apart(x, false, "x ticks");
  expect_apart(y, true, "y ticks");
  // The first layer is always labelled: where the stack starts.
  bool one = false;
  for (const Element* e : y) one = one || e->text == "1";
  EXPECT_TRUE(one);
}

TEST(RunPlots, ColormapBrightensMonotonicallyWithTheValue) {
  const Doc d = parse_ok(plot_layer_heatmap_svg(history(5, 30)));
  // The colour bar, bottom (low values) to top.
  std::vector<const Element*> bar = d.with_class("cbar");
  ASSERT_GE(bar.size(), 16u);
  std::sort(bar.begin(), bar.end(), [](const Element* a, const Element* b) { return a->num("y") > b->num("y"); });
  for (size_t i = 1; i < bar.size(); ++i)
    EXPECT_GT(luminance(bar[i]->attrs.at("fill")), luminance(bar[i - 1]->attrs.at("fill"))) << "colour bar step " << i;
  // From dark to light: it reads in grayscale.
  EXPECT_LT(luminance(bar.front()->attrs.at("fill")), 0.05);
  EXPECT_GT(luminance(bar.back()->attrs.at("fill")), 0.6);
  // The cells: values rise with the layer here, so does their luminance.
  std::vector<const Element*> col;
  for (const Element* e : d.with_class("cell"))
    if (e->attrs.at("data-step") == "500") col.push_back(e);
  std::sort(col.begin(), col.end(), [](const Element* a, const Element* b) {
    return std::stoi(a->attrs.at("data-layer")) < std::stoi(b->attrs.at("data-layer"));
  });
  for (size_t i = 1; i < col.size(); ++i) EXPECT_GT(luminance(col[i]->attrs.at("fill")), luminance(col[i - 1]->attrs.at("fill")));
}

TEST(RunPlots, HeatmapDrawsNonFiniteAndNonPositiveValuesApartWithALegend) {
  LayerHistory h = history(4, 5);
  h.values[1][2] = NAN;
  h.values[2][0] = INFINITY;
  h.values[2][1] = -INFINITY;
  h.values[3][4] = 0;
  h.values[3][3] = -2;
  h.values[0].resize(3);  // a record with fewer layers: the missing ones are not finite
  const Doc d = parse_ok(plot_layer_heatmap_svg(h));
  size_t nan = 0, nonpos = 0;
  for (const Element* e : d.with_class("cell")) {
    nan += e->attrs.at("fill") == "url(#cell-nan)";
    nonpos += e->attrs.at("fill") == "url(#cell-nonpos)";
  }
  EXPECT_EQ(nan, 5u);  // NaN, inf, -inf and the two missing layers
  EXPECT_EQ(nonpos, 2u);
  EXPECT_EQ(d.with_class("cell").size(), 20u);
  const std::string text = all_text(d);
  EXPECT_NE(text.find("not finite"), std::string::npos);
  EXPECT_NE(text.find("zero or negative"), std::string::npos);
  // Nothing finite at all: still a whole figure, every cell hatched, the bar a key.
  LayerHistory none = history(2, 3);
  for (auto& v : none.values) std::fill(v.begin(), v.end(), NAN);
  const Doc e = parse_ok(plot_layer_heatmap_svg(none));
  EXPECT_EQ(e.with_class("cell").size(), 6u);
  for (const Element* c : e.with_class("cell")) EXPECT_EQ(c->attrs.at("fill"), "url(#cell-nan)");
  EXPECT_GE(e.with_class("cbar-tick").size(), 3u);
  // A plain run: no legend of grey cells.
  EXPECT_TRUE(parse_ok(plot_layer_heatmap_svg(history(3, 3))).with_class("legend").empty());
  // A constant field: a colour bar that still has values on it.
  LayerHistory flat = history(3, 4);
  for (auto& v : flat.values) std::fill(v.begin(), v.end(), 8.0);
  EXPECT_GE(parse_ok(plot_layer_heatmap_svg(flat)).with_class("cbar-tick").size(), 3u);
}

TEST(RunPlots, HeatmapMarksADivergedRunAndOnlyThen) {
  auto marks = [](const LayerHistory& h) {
    const Doc d = parse_ok(plot_layer_heatmap_svg(h));
    return std::make_pair(d.with_class("status-mark").size(), all_text(d));
  };
  // At a recorded step, between records, after the last one.
  for (int64_t step : {1500, 1730, 9000}) {
    auto [n, text] = marks(history(6, 12, "diverged", step));
    EXPECT_EQ(n, 1u) << step;
    EXPECT_NE(text.find("diverged at step " + std::to_string(step)), std::string::npos) << text;
  }
  for (const char* status : {"ok", "", "collapsed"}) {
    auto [n, text] = marks(history(6, 12, status, 1000));
    EXPECT_EQ(text.find("diverged"), std::string::npos) << status;
    EXPECT_EQ(n, std::string(status) == "collapsed" ? 1u : 0u) << status;
  }
  const Doc d = parse_ok(plot_layer_heatmap_svg(history(6, 12, "diverged", 1500)));
  ASSERT_EQ(d.with_class("diverged").size(), 1u);
  // The line sits over the column of step 1500 (the third).
  const Element* line = nullptr;
  for (size_t i = 0; i < d.elements.size(); ++i)
    if (d.elements[i].has_class("diverged")) line = &d.elements[i + 1];
  ASSERT_NE(line, nullptr);
  ASSERT_EQ(line->name, "line");
  const Element* col = nullptr;
  for (const Element* e : cells_of_layer(d, 1))
    if (e->attrs.at("data-step") == "1500") col = e;
  ASSERT_NE(col, nullptr);
  EXPECT_GT(line->num("x1"), col->num("x"));
  EXPECT_LT(line->num("x1"), col->num("x") + col->num("width"));
}

// ---- profile lines -----------------------------------------------------------------------------
TEST(RunPlots, ProfileLinesDifferInDashAndMarkerNotOnlyColour) {
  LayerHistory h = history(5, 48);
  std::vector<double> init(48, 2.0);
  const std::string svg = plot_layer_profile_lines_svg(h, init, "init (probe)");
  save("profile_48", svg);
  const Doc d = parse_ok(svg);
  const auto lines = d.with_class("profile");
  ASSERT_EQ(lines.size(), 3u);
  std::set<std::string> dashes, strokes;
  for (const Element* e : lines) {
    dashes.insert(e->attrs.count("stroke-dasharray") ? e->attrs.at("stroke-dasharray") : "solid");
    strokes.insert(e->attrs.at("stroke"));
  }
  EXPECT_EQ(dashes.size(), 3u);
  EXPECT_EQ(strokes.size(), 3u);
  // Three marker shapes (circle, triangle path, square rect) appear in the legend and on the lines.
  EXPECT_FALSE(d.named("circle").empty());
  EXPECT_FALSE(d.named("path").empty());
  const std::string text = all_text(d);
  EXPECT_NE(text.find("step 500 (first record)"), std::string::npos) << text;
  EXPECT_NE(text.find("step 2500 (last record)"), std::string::npos) << text;
  EXPECT_NE(text.find("init (probe)"), std::string::npos);
  expect_apart(d.with_class("xtick"), false, "x ticks");
  expect_apart(d.with_class("ytick"), true, "y ticks");
  expect_font_at_least_11(d, "profile");
}

TEST(RunPlots, ProfileLinesOfOddRuns) {
  // One record, one layer.
  Doc d = parse_ok(plot_layer_profile_lines_svg(history(1, 1)));
  EXPECT_EQ(d.with_class("profile").size(), 1u);
  EXPECT_NE(all_text(d).find("the only record"), std::string::npos);
  // A diverged run whose last record holds nothing finite: its last finite record is drawn.
  LayerHistory h = history(4, 6, "diverged", 2000);
  std::fill(h.values[3].begin(), h.values[3].end(), NAN);
  h.values[2][1] = 0;  // a gap in the line
  d = parse_ok(plot_layer_profile_lines_svg(h));
  const std::string text = all_text(d);
  EXPECT_NE(text.find("step 1500 (last finite record)"), std::string::npos) << text;
  EXPECT_NE(text.find("diverged at step 2000"), std::string::npos);
  EXPECT_NE(text.find("gaps"), std::string::npos);
  EXPECT_EQ(d.with_class("profile").size(), 3u);  // the first record, and the last finite one in two pieces
  // Nothing to draw: a small figure saying so, still well-formed.
  LayerHistory empty;
  empty.field = "stream_norm";
  parse_ok(plot_layer_profile_lines_svg(empty));
}

// ---- probe bars ----------------------------------------------------------------------------------
TEST(RunPlots, ProbeBarsGroupOneBarPerSeriesAndLayerInThreePanels) {
  std::vector<ProbeBarSeries> series(3);
  for (size_t i = 0; i < 3; ++i) {
    series[i].label = "arch " + std::to_string(i);
    for (size_t l = 0; l < 24; ++l) {
      series[i].stream_norm.push_back(8.0 + static_cast<double>(l * i));
      series[i].grad_norm.push_back(std::pow(0.5, static_cast<double>(l)) * static_cast<double>(i + 1));  // spans decades: log
      series[i].identity_share.push_back(static_cast<double>(l) / 24.0);
    }
  }
  series[2].grad_norm[5] = NAN;  // no bar
  const std::string svg = plot_probe_bars_svg(series);
  save("probe_bars", svg);
  const Doc d = parse_ok(svg);
  EXPECT_EQ(d.with_class("bar").size(), 3u * 3u * 24u - 1u);
  // One colour and one hatch per series, told apart in grayscale by the hatch.
  std::map<std::string, std::set<std::string>> fill_of_series;
  for (const Element* e : d.with_class("bar")) fill_of_series[e->attrs.at("data-series")].insert(e->attrs.at("fill"));
  ASSERT_EQ(fill_of_series.size(), 3u);
  std::set<std::string> fills;
  for (auto& [k, f] : fill_of_series) {
    EXPECT_EQ(f.size(), 1u) << k;
    fills.insert(*f.begin());
  }
  EXPECT_EQ(fills.size(), 3u);
  std::set<std::string> hatches;
  for (const Element* e : d.named("rect"))
    if (e->attrs.count("fill") && e->attrs.at("fill").rfind("url(#hatch", 0) == 0) hatches.insert(e->attrs.at("fill"));
  EXPECT_EQ(hatches.size(), 2u);  // series 0 plain, 1 and 2 hatched differently
  const std::string text = all_text(d);
  for (const char* s : {"stream norm", "block gradient norm", "identity share", "(log scale)", "arch 2"})
    EXPECT_NE(text.find(s), std::string::npos) << s;
  // Bars of a layer sit side by side, in series order.
  std::map<std::string, double> x_at_layer3;
  for (const Element* e : d.with_class("bar"))
    if (e->attrs.at("data-layer") == "3" && !x_at_layer3.count(e->attrs.at("data-series")))
      x_at_layer3[e->attrs.at("data-series")] = e->num("x");
  EXPECT_LT(x_at_layer3["0"], x_at_layer3["1"]);
  EXPECT_LT(x_at_layer3["1"], x_at_layer3["2"]);
  expect_apart(d.with_class("xtick"), false, "x ticks");
  expect_apart(d.with_class("ytick"), true, "y ticks");
  expect_font_at_least_11(d, "probe bars");
  // From a ConfigProbe: the per-layer means.
  ConfigProbe p;
  p.label = "toy";
  p.layers.resize(2);
  p.layers[1].act_norm.mean = 3;
  p.layers[1].block_grad_norm.mean = 0.5;
  p.layers[1].identity_share.mean = 0.25;
  const ProbeBarSeries s = probe_bar_series(p);
  EXPECT_EQ(s.label, "toy");
  EXPECT_EQ(s.stream_norm, (std::vector<double>{0, 3}));
  EXPECT_EQ(s.grad_norm, (std::vector<double>{0, 0.5}));
  EXPECT_EQ(s.identity_share, (std::vector<double>{0, 0.25}));
  parse_ok(plot_probe_bars_svg({}));
}

// ---- small multiples ---------------------------------------------------------------------------
namespace {

// 2 rows x 3 columns: ok, diverged, collapsed / ok, pending, absent.
SweepSummary small_summary() {
  SweepSummary s;
  s.rows = "lr";
  s.cols = {"placement"};
  s.metric = "final_val_loss";
  s.row_values = {"1e-3", "1e-2"};
  s.row_numbers = {1e-3, 1e-2};
  s.col_labels = {"placement=pre", "placement=post", "placement=deepnorm layers=100 with a long label"};
  s.cells.assign(2, std::vector<SummaryCell>(3));
  for (auto& row : s.cells)
    for (SummaryCell& c : row) c.present = true, c.n = 2, c.mean = 1;
  SummaryCell& div = s.cells[0][1];
  div.n = 0, div.diverged = 2, div.diverged_first = 120, div.diverged_last = 120;
  SummaryCell& col = s.cells[0][2];
  col.n = 0, col.collapsed = 2, col.collapsed_first = 500, col.collapsed_last = 500;
  SummaryCell& pend = s.cells[1][1];
  pend.n = 0, pend.pending = 2;
  s.cells[1][2].present = false;
  s.cells[1][2].n = 0;
  s.unigram_loss = 4.09;
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 3; ++c) {
      if (s.cells[r][c].pending || !s.cells[r][c].present) continue;
      SummaryCurve cv;
      cv.row = r, cv.col = c;
      cv.steps = {0, 100, 200, 300};
      cv.mean = {4.1, 2.0, 1.2, s.cells[r][c].diverged ? NAN : 1.0};
      if (s.cells[r][c].collapsed) cv.mean = {4.1, 4.09, 4.09, 4.09};
      cv.diverged_step = s.cells[r][c].diverged_first;
      s.curves.push_back(cv);
    }
  return s;
}

std::map<std::pair<int, int>, const Element*> panels(const Doc& d) {
  std::map<std::pair<int, int>, const Element*> out;
  for (const Element* e : d.with_class("panel")) out[{std::stoi(e->attrs.at("data-row")), std::stoi(e->attrs.at("data-col"))}] = e;
  return out;
}

}  // namespace

TEST(RunPlots, SmallMultiplesAreLaidOutLikeTheTableWithEachCellsFate) {
  const SweepSummary s = small_summary();
  const std::string svg = plot_sweep_small_multiples_svg(s, SmallMultiple::loss_curves);
  save("small_multiples_loss", svg);
  const Doc d = parse_ok(svg);
  const auto p = panels(d);
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p.at({0, 0})->attrs.at("data-state"), "ok");
  EXPECT_EQ(p.at({0, 1})->attrs.at("data-state"), "diverged");
  EXPECT_EQ(p.at({0, 2})->attrs.at("data-state"), "collapsed");
  EXPECT_EQ(p.at({1, 1})->attrs.at("data-state"), "pending");
  EXPECT_EQ(p.at({1, 2})->attrs.at("data-state"), "none");
  // Rows down, columns across: the panels' backgrounds (each panel's first rect) say where they are.
  auto rect_of = [&](int r, int c) {
    for (size_t i = 0; i < d.elements.size(); ++i)
      if (&d.elements[i] == p.at({r, c})) return &d.elements[i + 1];
    return static_cast<const Element*>(nullptr);
  };
  EXPECT_LT(rect_of(0, 0)->num("x"), rect_of(0, 1)->num("x"));
  EXPECT_LT(rect_of(0, 1)->num("x"), rect_of(0, 2)->num("x"));
  EXPECT_LT(rect_of(0, 0)->num("y"), rect_of(1, 0)->num("y"));
  EXPECT_DOUBLE_EQ(rect_of(0, 2)->num("x"), rect_of(1, 2)->num("x"));
  // Diverged and collapsed cells look different from ok ones, and say what happened.
  EXPECT_NE(rect_of(0, 1)->attrs.at("fill"), rect_of(0, 0)->attrs.at("fill"));
  EXPECT_NE(rect_of(0, 2)->attrs.at("fill"), rect_of(0, 0)->attrs.at("fill"));
  EXPECT_NE(rect_of(0, 1)->attrs.at("fill"), rect_of(0, 2)->attrs.at("fill"));
  std::vector<std::string> states;
  for (const Element* e : d.with_class("cell-state")) states.push_back(e->text);
  EXPECT_EQ(states, (std::vector<std::string>{"diverged @ step 120", "collapsed @ step 500", "pending", "no point"}));
  // Row and column labels as in the table; the long column label wrapped onto lines of its own.
  std::string rows, cols;
  for (const Element* e : d.with_class("row-label")) rows += e->text + "|";
  for (const Element* e : d.with_class("col-label")) cols += e->text + "|";
  EXPECT_EQ(rows, "lr=1e-3|lr=1e-2|");
  EXPECT_NE(cols.find("placement=pre|placement=post|"), std::string::npos) << cols;
  for (const Element* e : d.with_class("col-label")) EXPECT_LE(est_width(e->text, 13), 210 + 1) << e->text;
  EXPECT_EQ(d.with_class("curve").size(), 4u);
  expect_apart(d.with_class("xtick"), false, "x ticks");
  expect_apart(d.with_class("ytick"), true, "y ticks");
  expect_font_at_least_11(d, "small multiples");
  // A cell where some seeds diverged says how many.
  SweepSummary some = s;
  some.cells[0][0].diverged = 1, some.cells[0][0].diverged_first = some.cells[0][0].diverged_last = 80;
  const Doc e = parse_ok(plot_sweep_small_multiples_svg(some, SmallMultiple::loss_curves));
  EXPECT_NE(all_text(e).find("1/3 diverged @ step 80"), std::string::npos);
}

TEST(RunPlots, SmallMultiplesOfLayerProfilesDrawOneLinePerSeed) {
  const SweepSummary s = small_summary();
  CellLayers layers;
  layers.field = "block_grad_norm";
  layers.cells.assign(2, std::vector<std::vector<PointLayers>>(3));
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 3; ++c)
      for (int seed = 0; seed < (c == 1 && r == 1 ? 0 : 2); ++seed) {
        PointLayers p;
        p.point = "seed=" + std::to_string(seed);
        p.step = 300;
        for (size_t l = 0; l < (c == 2 ? 100u : 6u); ++l) p.values.push_back(0.1 * static_cast<double>(l + 1 + seed));
        layers.cells[r][c].push_back(p);
      }
  const std::string svg = plot_sweep_small_multiples_svg(s, SmallMultiple::layer_profile, layers);
  save("small_multiples_layers", svg);
  const Doc d = parse_ok(svg);
  EXPECT_EQ(panels(d).size(), 6u);
  EXPECT_EQ(d.with_class("profile").size(), 2u * 5u);  // (1, 1) is pending
  EXPECT_NE(all_text(d).find("block gradient norm"), std::string::npos);
  expect_apart(d.with_class("xtick"), false, "x ticks");
  expect_apart(d.with_class("ytick"), true, "y ticks");
  // Without per-layer data: the panels say so rather than stay blank.
  const Doc none = parse_ok(plot_sweep_small_multiples_svg(s, SmallMultiple::layer_profile));
  EXPECT_NE(all_text(none).find("no per-layer data"), std::string::npos);
  parse_ok(plot_sweep_small_multiples_svg(SweepSummary{}, SmallMultiple::loss_curves));
}

TEST(RunPlots, SmallMultiplesOfLayerProfilesRangeOnTheOkRunsAndClipTheRest) {
  SweepSummary s = small_summary();
  s.col_labels[0] = "norm=layernorm residual_scale=- placement=pre ln_scaling=-";
  CellLayers layers;
  layers.field = "block_grad_norm";
  layers.cells.assign(2, std::vector<std::vector<PointLayers>>(3));
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 3; ++c) {
      PointLayers p;
      p.point = "seed=0";
      p.step = 300;
      const bool collapsed = r == 0 && c == 2;  // a collapsed run's gradients span 30 decades
      for (int l = 0; l < 6; ++l) p.values.push_back(collapsed ? std::pow(10.0, -10 + 6 * l) : 0.1 * (l + 1));
      layers.cells[r][c].push_back(p);
    }
  const Doc d = parse_ok(plot_sweep_small_multiples_svg(s, SmallMultiple::layer_profile, layers));
  double top_tick = 0;
  for (const Element* e : d.with_class("ytick")) top_tick = std::max(top_tick, std::stod(e->text));
  EXPECT_GE(top_tick, 0.5);
  EXPECT_LT(top_tick, 10) << "the y range follows the ok runs (0.1 .. 0.6), not the collapsed one";
  const auto lines = d.with_class("profile");
  ASSERT_EQ(lines.size(), 6u);
  for (const Element* e : lines) EXPECT_NE(e->attrs.count("clip-path"), 0u);
  EXPECT_NE(all_text(d).find("ranged on the runs that finished ok"), std::string::npos);
  // When every panel with data finished ok, nothing was left out and the subtitle does not say so.
  SweepSummary all_ok = s;
  for (auto& row : all_ok.cells)
    for (SummaryCell& c : row) c = SummaryCell{}, c.present = true, c.n = 1, c.mean = 1;
  layers.cells[0][2].clear();
  EXPECT_EQ(all_text(parse_ok(plot_sweep_small_multiples_svg(all_ok, SmallMultiple::layer_profile, layers)))
                .find("ranged on the runs"),
            std::string::npos);
  std::string cols;
  for (const Element* e : d.with_class("col-label")) cols += e->text + "|";
  EXPECT_EQ(cols.rfind("norm=layernorm|placement=pre|", 0), 0u) << cols;  // wrapped, the unset keys gone
  EXPECT_EQ(cols.find("=-"), std::string::npos) << cols;
}

// ---- readers -------------------------------------------------------------------------------------
TEST(RunPlots, ReadLayerHistoryReadsNullsAsNaNAndTheStatus) {
  // A run being written (train's <dir>.partial.<pid>) may end in half a line: left out.
  const fs::path dir = test::fresh_dir("run_plots_read").string() + ".partial.4242";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << "{\"step\":10,\"val_loss\":3.0,\"stream_norm\":[1.0,2.0,3.0]}\n"
                                          "{\"step\":15,\"train_loss\":2.0}\n"
                                          "{\"step\":20,\"val_loss\":null,\"stream_norm\":[4.0,null,\"inf\"]}\n"
                                          "{\"step\":30,\"stream_no";  // torn by a kill
  std::ofstream(dir / "result.json") << R"({"status": "diverged", "diverged_step": 21, "collapsed_step": null})";
  LayerHistory h = read_layer_history(dir.string(), "stream_norm");
  EXPECT_EQ(h.steps, (std::vector<int64_t>{10, 20}));
  ASSERT_EQ(h.values.size(), 2u);
  EXPECT_EQ(h.values[0], (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(h.values[1][0], 4);
  EXPECT_TRUE(std::isnan(h.values[1][1]));
  EXPECT_TRUE(std::isnan(h.values[1][2]));
  EXPECT_EQ(h.status, "diverged");
  EXPECT_EQ(h.status_step, 21);
  EXPECT_EQ(h.field, "stream_norm");
  EXPECT_FALSE(h.title.empty());
  // A run still going: no result.json, no status.
  fs::remove(dir / "result.json");
  h = read_layer_history(dir.string(), "stream_norm");
  EXPECT_EQ(h.status, "");
  EXPECT_EQ(h.status_step, -1);

  auto error_of = [&](const std::string& run, const std::string& field) {
    try {
      read_layer_history(run, field);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error for " << run << " " << field;
    return std::string();
  };
  EXPECT_NE(error_of(dir.string(), "block_grad_norm").find("block_grad_norm"), std::string::npos);
  EXPECT_NE(error_of(dir.string(), "block_grad_norm").find("stream_norm"), std::string::npos);  // what there is
  EXPECT_NE(error_of(dir.string(), "val_loss").find("not a per-layer field"), std::string::npos);
  EXPECT_NE(error_of((dir / "nothing").string(), "stream_norm").find("metrics.jsonl"), std::string::npos);
  // The same half line in a finished run (renamed into place whole) is damage: an error naming the
  // file and the line, as every reader of metrics.jsonl says it.
  const fs::path finished = test::fresh_dir("run_plots_read_finished");
  fs::create_directories(finished);
  fs::copy_file(dir / "metrics.jsonl", finished / "metrics.jsonl");
  EXPECT_NE(error_of(finished.string(), "stream_norm").find("metrics.jsonl' line 4"), std::string::npos);
  std::ofstream(dir / "result.json") << "{not json";
  EXPECT_NE(error_of(dir.string(), "stream_norm").find("result.json"), std::string::npos);
}

TEST(RunPlots, ReadCellLayersTakesEachPointsLastFiniteRecord) {
  const fs::path dir = test::fresh_dir("run_plots_cells");
  const fs::path a = dir / "runs" / "lr=1e-3" / "seed=0", b = dir / "runs" / "lr=1e-3" / "seed=1";
  for (const fs::path& run : {a, b}) {  // finished runs: only their metrics are read
    fs::create_directories(run);
    std::ofstream(run / "config.json") << "{}\n";
    std::ofstream(run / "result.json") << "{\"status\":\"ok\"}\n";
  }
  std::ofstream(a / "metrics.jsonl") << "{\"step\":100,\"block_grad_norm\":[0.5,0.25]}\n"
                                        "{\"step\":200,\"block_grad_norm\":[0.4,0.2]}\n";
  // diverged: the last record's gradients are zeros (skipped steps), the one before counts
  std::ofstream(b / "metrics.jsonl") << "{\"step\":100,\"block_grad_norm\":[0.3,0.1]}\n"
                                        "{\"step\":130,\"block_grad_norm\":[0.0,0.0]}\n";
  SweepSummary s;
  s.row_values = {"1e-3"};
  s.col_labels = {"all"};
  s.cells.assign(1, std::vector<SummaryCell>(1));
  s.cells[0][0].points = {"lr=1e-3/seed=0", "lr=1e-3/seed=1", "lr=1e-3/seed=2"};  // seed 2 pending
  const CellLayers c = read_cell_layers(dir.string(), s);
  EXPECT_EQ(c.field, "block_grad_norm");
  ASSERT_EQ(c.cells.size(), 1u);
  ASSERT_EQ(c.cells[0].size(), 1u);
  ASSERT_EQ(c.cells[0][0].size(), 2u);
  EXPECT_EQ(c.cells[0][0][0].point, "lr=1e-3/seed=0");
  EXPECT_EQ(c.cells[0][0][0].step, 200);
  EXPECT_EQ(c.cells[0][0][0].values, (std::vector<double>{0.4, 0.2}));
  EXPECT_EQ(c.cells[0][0][1].step, 100);
}
