// The SVG charts of `ctrbox report` (cli/html_report.h): axes, ticks, line and bar charts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cli/html_report.h"

namespace ctrbox {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string EscapeText(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Ticks at 1, 2 or 5 times a power of ten, about `want` of them across [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int want) {
  const double raw = (hi - lo) / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string Number(double v) {
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) return fmt::format("{:.3g}", v);
  return fmt::format("{:.6g}", v);
}

constexpr int kWidth = 480, kHeight = 270;
constexpr int kLeft = 64, kRight = 14, kTop = 30, kBottom = 42;

std::string SvgOpen(const std::string& title, int height) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" role=\"img\" aria-label=\"{2}\"><title>{2}</title>"
      "<text x=\"{3}\" y=\"18\" class=\"t\">{2}</text>",
      kWidth, height, EscapeText(title), kLeft);
}

// The plot area of a line chart and its data ranges.
struct Plot {
  static constexpr double kW = kWidth - kLeft - kRight, kH = kHeight - kTop - kBottom;
  double x0, x1, y0, y1;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * kW; }
  double py(double y) const { return kTop + (y1 - y) / (y1 - y0) * kH; }
};

// The frame, the grid with the y ticks, the x ticks (whole numbers only when `whole_x`) and
// the axis labels.
std::string AxesSvg(const Plot& p, bool whole_x, const std::string& x_label,
                    const std::string& y_label) {
  const double pw = Plot::kW, ph = Plot::kH;
  std::string svg = fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", kLeft, kTop, pw, ph);
  for (double t : NiceTicks(p.y0, p.y1, 5)) {
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1:.1f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" class=\"yt\">{5}</text>",
        kLeft, kLeft + pw, p.py(t), kLeft - 4, p.py(t) + 4, Number(t));
  }
  for (double t : NiceTicks(p.x0, p.x1, 6)) {
    if (whole_x && t != std::floor(t)) continue;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" class=\"tick\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" class=\"xt\">{4}</text>",
        p.px(t), kTop + ph, kTop + ph + 4, kTop + ph + 16, Number(t));
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"xl\">{}</text>", kLeft + pw / 2,
                     kHeight - 6, EscapeText(x_label));
  svg += fmt::format("<text transform=\"translate(14,{:.1f}) rotate(-90)\" class=\"yl\">{}</text>",
                     kTop + ph / 2, EscapeText(y_label));
  return svg;
}

}  // namespace

std::string LineChartSvg(const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<ChartSeries>& series) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const ChartSeries& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  }
  std::string svg = SvgOpen(title, kHeight);
  if (!(x0 <= x1)) {  // nothing to draw
    return svg + fmt::format("<text x=\"{}\" y=\"{}\">no data</text></svg>", kLeft, kHeight / 2);
  }
  // Passes, epochs and partitions are whole numbers: no tick between them; one of them (a
  // one-pass run, most users' first) sits in the middle of the chart.
  bool whole_x = true;
  for (const ChartSeries& s : series) {
    for (double v : s.x) whole_x = whole_x && (!std::isfinite(v) || v == std::floor(v));
  }
  if (x0 == x1) x0 -= whole_x ? 0.5 : 1, x1 += whole_x ? 0.5 : 1;
  if (y0 == y1) {
    const double d = y0 == 0 ? 1 : std::abs(y0) * 0.05;
    y0 -= d, y1 += d;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  const Plot plot{x0, x1, y0, y1};
  auto px = [&](double x) { return plot.px(x); };
  auto py = [&](double y) { return plot.py(y); };
  const double pw = Plot::kW;
  svg += AxesSvg(plot, whole_x, x_label, y_label);
  // Series, then the legend, placed so that its longest label ends inside the frame (11 px
  // text: about 6.2 px a character).
  size_t longest = 0;
  for (const ChartSeries& s : series) longest = std::max(longest, s.name.size());
  const double legend_text =
      std::max<double>(kLeft + 26, kLeft + pw - 6 - 6.2 * static_cast<double>(longest));
  int legend = 0;
  std::string legend_svg;
  for (const ChartSeries& s : series) {
    std::string d;
    bool pen_down = false;
    size_t points = 0;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) {
        pen_down = false;
        continue;
      }
      d += fmt::format("{}{:.1f} {:.1f} ", pen_down ? "L" : "M", px(s.x[i]), py(s.y[i]));
      pen_down = true;
      ++points;
    }
    if (points == 0) continue;
    d.pop_back();
    // A reference line (dashed, one value: a held-out metric, calibration) spans the chart,
    // whatever number of points it has: one pass must not hide it.
    bool level = s.dashed;
    double level_y = kNaN;
    for (double v : s.y) {
      if (!std::isfinite(v)) continue;
      if (std::isfinite(level_y) && v != level_y) level = false;
      level_y = v;
    }
    if (level && std::isfinite(level_y)) {
      d = fmt::format("M{:.1f} {:.1f} L{:.1f} {:.1f}", px(x0), py(level_y), px(x1), py(level_y));
    }
    svg += fmt::format("<path d=\"{}\" stroke=\"{}\" class=\"s{}\"><title>{}</title></path>", d,
                       s.color, s.dashed ? " dash" : "", EscapeText(s.name));
    // Few points (a one-pass run has one): each a dot, so that none is an invisible stroke.
    if (points <= 30 && !s.dashed) {
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
        svg += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\" class=\"pt\"><title>{}: "
            "{}</title></circle>",
            px(s.x[i]), py(s.y[i]), s.color, EscapeText(s.name), Number(s.y[i]));
        if (points == 1) {  // a lone point says its value
          svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"pv\">{}</text>",
                             px(s.x[i]) + 6, py(s.y[i]) - 6, Number(s.y[i]));
        }
      }
    }
    const double ly = kTop + 12 + 14 * legend++;
    legend_svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{1:.1f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
        "class=\"lg{4}\"/><text x=\"{5:.1f}\" y=\"{6:.1f}\" class=\"lt\">{7}</text>",
        legend_text - 22, legend_text - 4, ly - 4, s.color, s.dashed ? " dash" : "", legend_text,
        ly, EscapeText(s.name));
  }
  // The legend over the lines, on a light ground so that a line behind it does not cross its
  // labels.
  if (legend > 0) {
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#fff\" "
        "fill-opacity=\"0.85\"/>",
        legend_text - 26, kTop + 2, kLeft + pw - 2 - (legend_text - 26), 14 * legend + 2);
  }
  return svg + legend_svg + "</svg>";
}

std::string BarChartSvg(const std::string& title, const std::vector<std::string>& labels,
                        const std::vector<double>& values, double scale, const std::string& unit) {
  const int bar = 22, height = kTop + 10 + bar * static_cast<int>(labels.size()) + 10;
  std::string svg = SvgOpen(title, height);
  double top = 0;
  for (double v : values) top = std::max(top, v * scale);
  if (top <= 0) top = 1;
  const int left = 150, right = 90;
  const double w = kWidth - left - right;
  for (size_t i = 0; i < labels.size() && i < values.size(); ++i) {
    const double y = kTop + 6 + bar * static_cast<double>(i);
    const double len = std::max(0.0, values[i] * scale) / top * w;
    svg += fmt::format(
        "<text x=\"{0}\" y=\"{1:.1f}\" class=\"yt\">{2}</text>"
        "<path d=\"M{3} {4:.1f} h{5:.1f} v{6} h{7:.1f} Z\" class=\"bar\"><title>{2}</title></path>"
        "<text x=\"{8:.1f}\" y=\"{1:.1f}\" class=\"lt\">{9:.3g} {10}</text>",
        left - 6, y + 15, EscapeText(labels[i]), left, y + 3, std::max(len, 0.5), bar - 6,
        -std::max(len, 0.5), left + len + 6, values[i] * scale, EscapeText(unit));
  }
  return svg + "</svg>";
}

std::string HtmlEscape(const std::string& s) { return EscapeText(s); }

}  // namespace ctrbox
