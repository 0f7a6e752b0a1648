// The SVG primitives (svg.h), moved here from sweep_plot.cpp unchanged: the sweep plots' bytes must
// not move with them.
#include "svg.h"

#include <fmt/format.h>

#include <cmath>

namespace normlab::svg {

const char* const kColors[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
const char* color(size_t i) { return kColors[i % 10]; }

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

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

}  // namespace normlab::svg
