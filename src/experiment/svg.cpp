// The SVG primitives (svg.h), moved here from sweep_plot.cpp unchanged: the sweep plots' bytes must
// not move with them.
#include "svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "normlab/error.h"
#include "normlab/table.h"

namespace normlab::svg {

const char* const kColors[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
const char* color(size_t i) { return kColors[i % 10]; }

std::string esc(const std::string& s) { return xml_escaped(s); }

std::string tick_label(double v) {
  std::string s = fmt::format("{:.3g}", v);
  return s;
}

std::vector<double> linear_ticks(double lo, double hi, int target) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  double raw = (hi - lo) / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi * (1 + 1e-12); v += step) t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  const double decades = std::log10(hi / lo);
  auto collect = [&](std::vector<double> mults, int every) {
    std::vector<double> out;
    for (int k = static_cast<int>(std::floor(std::log10(lo))) - 1; k <= static_cast<int>(std::ceil(std::log10(hi))) + 1; ++k) {
      if (((k % every) + every) % every != 0) continue;
      for (double m : mults) {
        double v = m * std::pow(10.0, k);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
      }
    }
    return out;
  };
  if (decades >= 3) return collect({1.0}, decades > 8 ? 2 : 1);
  t = collect({1.0, 2.0, 5.0}, 1);
  if (t.size() >= 3) return t;
  t = collect({1, 2, 3, 4, 5, 6, 7, 8, 9}, 1);
  if (t.size() >= 3 && t.size() <= 9) return t;
  return linear_ticks(lo, hi, 6);
}

double Axis::map(double v) const {
  double f = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  return px0 + f * (px1 - px0);
}

void pad(double& lo, double& hi, bool log) {
  if (log) {
    if (!(hi > lo)) lo /= 1.5, hi *= 1.5;
    double r = std::log10(hi / lo) * 0.05;
    lo /= std::pow(10.0, r);
    hi *= std::pow(10.0, r);
  } else {
    if (!(hi > lo)) lo -= 0.5, hi += 0.5;
    double r = (hi - lo) * 0.05;
    lo -= r;
    hi += r;
  }
}

std::string header(double w, double h) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      w, h);
}

namespace {

// The number in the attribute `name="..."` of a document's first element.
double root_attribute(const std::string& doc, const std::string& name) {
  const size_t end = doc.find('>');
  const size_t at = doc.find(" " + name + "=\"");
  NL_CHECK(at != std::string::npos && at < end, "an SVG document without its {}", name);
  return std::stod(doc.substr(at + name.size() + 3));
}

}  // namespace

std::string stack_vertically(const std::vector<std::string>& documents) {
  double width = 0, height = 0;
  for (const std::string& d : documents) {
    width = std::max(width, root_attribute(d, "width"));
    height += root_attribute(d, "height");
  }
  std::string out = header(width, height);
  double y = 0;
  for (const std::string& d : documents) {
    // A nested <svg> is placed by its x and y: the document as it is, moved down.
    out += "<svg x=\"0\" y=\"" + fmt::format("{}", y) + "\"" + d.substr(4);
    y += root_attribute(d, "height");
  }
  return out + "</svg>\n";
}

std::string frame(const Axis& x, const Axis& y, const std::vector<double>& xt, const std::vector<std::string>& xl,
                  const std::vector<double>& yt, const std::string& xlabel, const std::string& ylabel, const std::string& title) {
  std::string s;
  const double left = x.px0, right = x.px1, bottom = y.px0, top = y.px1;
  s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#333\"/>\n", left,
                   top, right - left, bottom - top);
  for (size_t i = 0; i < xt.size(); ++i) {
    double px = x.map(xt[i]);
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>\n", px, top, bottom);
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n", px, bottom, bottom + 4);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", px, bottom + 17, esc(xl[i]));
  }
  for (double v : yt) {
    double py = y.map(v);
    s += fmt::format("<line x1=\"{1:.1f}\" y1=\"{0:.1f}\" x2=\"{2:.1f}\" y2=\"{0:.1f}\" stroke=\"#e4e4e4\"/>\n", py, left, right);
    s += fmt::format("<line x1=\"{1:.1f}\" y1=\"{0:.1f}\" x2=\"{2:.1f}\" y2=\"{0:.1f}\" stroke=\"#333\"/>\n", py, left - 4, left);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 7, py + 4, esc(tick_label(v)));
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", (left + right) / 2, bottom + 36, esc(xlabel));
  s += fmt::format("<text transform=\"translate({:.1f},{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n", left - 48,
                   (top + bottom) / 2, esc(ylabel));
  if (!title.empty())
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n", (left + right) / 2,
                     top - 8, esc(title));
  return s;
}

std::string cross(double x, double y, double r, const char* stroke) {
  return fmt::format("<path d=\"M{0:.1f},{1:.1f} L{2:.1f},{3:.1f} M{0:.1f},{3:.1f} L{2:.1f},{1:.1f}\" stroke=\"{4}\" "
                     "stroke-width=\"2.5\"/>\n",
                     x - r, y - r, x + r, y + r, stroke);
}


std::string empty_plot(const std::string& what) {
  return header(480, 120) + fmt::format("<text x=\"240\" y=\"64\" text-anchor=\"middle\">{}</text>\n</svg>\n", esc(what));
}

double text_width(const std::string& text, double font_px) {
  double chars = 0;
  for (unsigned char c : text)
    if ((c & 0xC0) != 0x80) chars += 1;  // one per UTF-8 code point
  return chars * 0.64 * font_px;
}

std::vector<size_t> thin_labels(const std::vector<double>& pos, const std::vector<std::string>& labels,
                                double font_px, bool stacked, const std::vector<double>* counts) {
  const size_t n = pos.size();
  std::vector<size_t> out;
  if (n == 0) return out;
  const double gap = font_px;  // a digit's width and more: "95 100" runs together at half that
  auto apart = [&](size_t a, size_t b) {
    // stacked: a line and a half apart; tighter reads as a column of numbers, not as ticks
    const double need = stacked ? 1.8 * font_px : (text_width(labels[a], font_px) + text_width(labels[b], font_px)) / 2 + gap;
    return std::fabs(pos[b] - pos[a]) >= need;
  };
  for (size_t mag = 1;; mag *= 10)
    for (size_t m : {1, 2, 5}) {
      const size_t k = m * mag;
      out.clear();
      bool ok = true;
      if (counts) {
        // the first, then the multiples of k, the first of those only if it has room
        out.push_back(0);
        for (size_t i = 1; i < n; ++i) {
          const double v = (*counts)[i];
          if (std::fmod(v, static_cast<double>(k)) != 0) continue;
          if (out.size() > 1 && !apart(out.back(), i)) ok = false;
          // the first multiple only when it is not crowding the first (1, 4, 6, ... rather than 1, 2, 4)
          if (out.size() == 1 && (!apart(0, i) || v - (*counts)[0] < 0.6 * static_cast<double>(k))) continue;
          out.push_back(i);
        }
      } else {
        for (size_t i = 0; i < n; i += k) {
          if (!out.empty() && !apart(out.back(), i)) ok = false;
          out.push_back(i);
        }
      }
      // past the last index (or count) only the first is left
      const bool last_try = counts ? static_cast<double>(k) > *std::max_element(counts->begin(), counts->end())
                                   : k >= n;
      if (ok || last_try) {
        if (!ok) out.resize(1);
        if (out.back() != n - 1 && apart(out.back(), n - 1)) out.push_back(n - 1);
        return out;
      }
    }
}

std::vector<std::string> distinct_labels(const std::vector<double>& v) {
  std::vector<std::string> out;
  // Whole numbers below 100000 as they are: steps read 3000, not 3e3.
  if (std::all_of(v.begin(), v.end(), [](double x) { return x == std::floor(x) && std::fabs(x) < 1e5; })) {
    for (double x : v) out.push_back(fmt::format("{}", static_cast<int64_t>(x)));
    return out;
  }
  for (int digits = 3; digits <= 12; ++digits) {
    out.clear();
    for (double x : v) {
      std::string t = fmt::format("{:.{}g}", x, digits);
      const size_t e = t.find('e');
      if (e != std::string::npos) {  // 1e+03 -> 1e3, 1e-05 -> 1e-5
        std::string mant = t.substr(0, e), ex = t.substr(e + 1);
        const bool neg = ex[0] == '-';
        ex = ex.substr(1);
        while (ex.size() > 1 && ex[0] == '0') ex.erase(0, 1);
        t = mant + "e" + (neg ? "-" : "") + ex;
      }
      out.push_back(t);
    }
    // One notation per axis: 1e-6 beside 0.0001 reads as a mistake.
    if (std::any_of(out.begin(), out.end(), [](const std::string& t) { return t.find('e') != std::string::npos; }))
      for (size_t i = 0; i < v.size(); ++i) {
        const int ex = v[i] == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(v[i])) + 1e-9));
        out[i] = fmt::format("{:.{}g}e{}", v[i] / std::pow(10.0, ex), digits, ex);
      }
    bool distinct = true;
    for (size_t i = 1; i < out.size(); ++i) distinct = distinct && out[i] != out[i - 1];
    if (distinct) break;
  }
  return out;
}

std::string viridis(double t) {
  static const unsigned char kAnchors[11][3] = {{0x44, 0x01, 0x54}, {0x48, 0x24, 0x75}, {0x41, 0x44, 0x87},
                                                {0x35, 0x5f, 0x8d}, {0x2a, 0x78, 0x8e}, {0x21, 0x91, 0x8c},
                                                {0x22, 0xa8, 0x84}, {0x44, 0xbf, 0x70}, {0x7a, 0xd1, 0x51},
                                                {0xbd, 0xdf, 0x26}, {0xfd, 0xe7, 0x25}};
  if (!(t >= 0)) t = 0;  // NaN too
  if (t > 1) t = 1;
  const double f = t * 10;
  const int i = std::min(9, static_cast<int>(f));
  const double w = f - i;
  int c[3];
  for (int k = 0; k < 3; ++k) c[k] = static_cast<int>(std::lround(kAnchors[i][k] * (1 - w) + kAnchors[i + 1][k] * w));
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

const char* const kHatches[6] = {"", "hatch-diag", "hatch-dots", "hatch-back", "hatch-cross", "hatch-horiz"};

std::string pattern_defs() {
  auto tile = [](const char* id, const std::string& body) {
    return fmt::format("<pattern id=\"{}\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\">{}</pattern>\n", id, body);
  };
  const std::string ink = "stroke=\"#000\" stroke-opacity=\"0.55\" stroke-width=\"1.3\"";
  std::string s = "<defs>\n";
  s += tile("hatch-diag", "<path d=\"M-2,2 L2,-2 M0,8 L8,0 M6,10 L10,6\" " + ink + "/>");
  s += tile("hatch-back", "<path d=\"M-2,6 L2,10 M0,0 L8,8 M6,-2 L10,2\" " + ink + "/>");
  s += tile("hatch-cross", "<path d=\"M0,8 L8,0 M0,0 L8,8\" " + ink + "/>");
  s += tile("hatch-horiz", "<path d=\"M0,4 L8,4\" " + ink + "/>");
  s += tile("hatch-dots", "<circle cx=\"4\" cy=\"4\" r=\"1.4\" fill=\"#000\" fill-opacity=\"0.6\"/>");
  s += tile("cell-nan", "<rect width=\"8\" height=\"8\" fill=\"#8c8c8c\"/><path d=\"M-2,2 L2,-2 M0,8 L8,0 M6,10 L10,6\" "
                        "stroke=\"#fff\" stroke-width=\"1.6\"/>");
  s += tile("cell-nonpos", "<rect width=\"8\" height=\"8\" fill=\"#fff\"/><circle cx=\"4\" cy=\"4\" r=\"1.5\" fill=\"#777\"/>");
  return s + "</defs>\n";
}

std::string text(double x, double y, const std::string& s, double size, const char* anchor, const std::string& extra) {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\"{}{}>{}</text>\n", x, y, size,
                     std::string(anchor) == "start" ? "" : fmt::format(" text-anchor=\"{}\"", anchor), extra, esc(s));
}

std::string axes(const Axis& x, const Axis& y, const Ticks& xt, const Ticks& yt, const std::string& xlabel,
                 const std::string& ylabel, const AxesStyle& style) {
  constexpr double kTick = 12, kLabel = 13;
  const double left = std::min(x.px0, x.px1), right = std::max(x.px0, x.px1);
  const double top = std::min(y.px0, y.px1), bottom = std::max(y.px0, y.px1);
  std::string s;
  std::vector<double> xp, yp;
  for (double v : xt.at) xp.push_back(x.map(v));
  for (double v : yt.at) yp.push_back(y.map(v));
  const std::vector<size_t> xk = thin_labels(xp, xt.labels, kTick, false, xt.counts ? &xt.at : nullptr);
  const std::vector<size_t> yk = thin_labels(yp, yt.labels, kTick, true, yt.counts ? &yt.at : nullptr);
  if (style.grid_x)
    for (size_t i : xk)
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e8e8e8\"/>\n", xp[i], top, bottom);
  if (style.grid_y)
    for (size_t i : yk)
      s += fmt::format("<line x1=\"{1:.1f}\" y1=\"{0:.1f}\" x2=\"{2:.1f}\" y2=\"{0:.1f}\" stroke=\"#e8e8e8\"/>\n", yp[i], left, right);
  s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#333\"/>\n", left,
                   top, right - left, bottom - top);
  for (size_t i : xk) {
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n", xp[i], bottom,
                     bottom + 4);
    if (style.x_labels) s += text(xp[i], bottom + 17, xt.labels[i], kTick, "middle", " class=\"xtick\"");
  }
  double widest = 0;
  for (size_t i : yk) {
    s += fmt::format("<line x1=\"{1:.1f}\" y1=\"{0:.1f}\" x2=\"{2:.1f}\" y2=\"{0:.1f}\" stroke=\"#333\"/>\n", yp[i], left - 4,
                     left);
    if (style.y_labels) s += text(left - 7, yp[i] + 4, yt.labels[i], kTick, "end", " class=\"ytick\"");
    widest = std::max(widest, text_width(yt.labels[i], kTick));
  }
  if (!xlabel.empty()) s += text((left + right) / 2, bottom + 38, xlabel, kLabel, "middle", " class=\"xlabel\"");
  if (!ylabel.empty())
    s += fmt::format("<text transform=\"translate({:.1f},{:.1f}) rotate(-90)\" text-anchor=\"middle\" font-size=\"{}\" "
                     "class=\"ylabel\">{}</text>\n",
                     left - 16 - widest, (top + bottom) / 2, kLabel, esc(ylabel));
  return s;
}

Ticks value_ticks(double lo, double hi, bool log, double px) {
  Ticks t;
  const double need = 1.8 * 12;  // a stacked label's room (thin_labels)
  if (log && px > 0 && hi > lo && lo > 0) {
    // The densest of 1..9, 1-2-5, 1 per decade, 1 per 2, 3, 5, 10 decades whose ticks stay apart on
    // `px` pixels: thinning by index afterwards would leave 6, 8, 10, 30 (20 gone).
    const double decades = std::log10(hi / lo);
    const int k0 = static_cast<int>(std::floor(std::log10(lo))), k1 = static_cast<int>(std::ceil(std::log10(hi)));
    struct Set {
      std::vector<double> mults;
      int every;
    };
    const Set sets[] = {{{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1}, {{1, 2, 5}, 1}, {{1}, 1}, {{1}, 2}, {{1}, 3}, {{1}, 5}, {{1}, 10}};
    for (const Set& set : sets) {
      std::vector<double> at;
      for (int k = k0; k <= k1; ++k) {
        if (((k % set.every) + set.every) % set.every != 0) continue;
        for (double m : set.mults) {
          const double v = m * std::pow(10.0, k);
          if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) at.push_back(v);
        }
      }
      if (at.size() < 2) break;  // a narrow range: linear ticks below
      double closest = INFINITY;
      for (size_t i = 1; i < at.size(); ++i) closest = std::min(closest, std::log10(at[i] / at[i - 1]) / decades * px);
      if (closest >= need || &set == &sets[6]) {
        t.at = at;
        break;
      }
    }
  }
  if (t.at.empty()) t.at = log ? log_ticks(lo, hi) : linear_ticks(lo, hi, px > 0 ? std::clamp(static_cast<int>(px / 36), 2, 6) : 5);
  if (t.at.size() < 3) t.at = linear_ticks(lo, hi, 4);
  t.labels = distinct_labels(t.at);
  return t;
}

Ticks layer_ticks(size_t layers) {
  Ticks t;
  t.counts = true;
  for (size_t l = 1; l <= layers; ++l) t.at.push_back(static_cast<double>(l)), t.labels.push_back(std::to_string(l));
  return t;
}

// What a metrics.jsonl field measures, for axis and colour-bar labels.
std::string field_label(const std::string& field) {
  if (field == "stream_norm") return "stream norm ‖x_l‖ (mean token L2)";
  if (field == "block_grad_norm") return "block gradient norm ‖dL/dθ_l‖";
  if (field == "stream_max_abs") return "stream max |x_l|";
  if (field == "norm_input_max_abs") return "norm input max |x|";
  if (field == "overflow_share") return "overflow share (fraction)";
  if (field == "underflow_share") return "underflow share (fraction)";
  if (field == "attn_entropy") return "attention entropy (nats)";
  if (field == "attn_max_logit") return "max attention logit";
  return field;
}

}  // namespace normlab::svg
