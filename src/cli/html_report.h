// `ctrbox report`: one self-contained HTML page (inline SVG, no scripts, nothing fetched)
// drawn from a train job's metrics log (docs/report.md).
#ifndef CTRBOX_CLI_HTML_REPORT_H_
#define CTRBOX_CLI_HTML_REPORT_H_

#include <string>
#include <vector>

#include "util/status.h"

namespace ctrbox {

// One line series of a chart: y[i] at x[i]; a NaN y breaks the line (an undefined AUC).
struct ChartSeries {
  std::string name;
  std::string color;
  std::vector<double> x, y;
  bool dashed = false;
};

// An SVG line chart with axes, ticks, a legend and the title as its accessible name. Every
// series with at least one point draws one <path> whose data are its points.
std::string LineChartSvg(const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<ChartSeries>& series);

// A horizontal bar chart (one bar per label, values in `unit` after scaling by `scale`).
std::string BarChartSvg(const std::string& title, const std::vector<std::string>& labels,
                        const std::vector<double>& values, double scale, const std::string& unit);

// `s` as HTML text (&, <, > and " escaped).
std::string HtmlEscape(const std::string& s);

// The page for the metrics log at `metrics_path` (the JSON lines a train job writes); the
// model's MANIFEST text, when given, adds the saved model's summary. A malformed line is an
// error naming the file and line, except a truncated last line (a job killed mid-write),
// which is left out and said so on the page.
StatusOr<std::string> RenderReport(const std::string& metrics_path,
                                   const std::string& manifest_text);

}  // namespace ctrbox

#endif  // CTRBOX_CLI_HTML_REPORT_H_
