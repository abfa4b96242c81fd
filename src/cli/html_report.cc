#include "cli/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "util/env.h"

namespace ctrbox {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string Escape(const std::string& s) { return HtmlEscape(s); }

}  // namespace

namespace {

double Get(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}
double GetIn(const nlohmann::json& j, const char* obj, const char* key) {
  auto it = j.find(obj);
  return it != j.end() && it->is_object() ? Get(*it, key) : kNaN;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string Row(const std::string& name, const std::string& value) {
  return "<tr><th>" + Escape(name) + "</th><td>" + Escape(value) + "</td></tr>";
}

std::string Bytes(double b) {
  if (!std::isfinite(b)) return "-";
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return fmt::format("{:.3g} {}", b, units[u]);
}

}  // namespace

namespace {

// The records of a metrics file, by event.
struct MetricsRecords {
  std::vector<nlohmann::json> passes, tests, partitions;
  std::map<uint64_t, nlohmann::json> epochs;  // a validated job's, by epoch (the newest run's)
  nlohmann::json stages, report;
  size_t resumes = 0;  // runs resumed from a checkpoint (their passes follow on)
  std::string note;    // what the page says about the file itself
};

StatusOr<MetricsRecords> ReadMetricsRecords(const std::string& metrics_path) {
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(Env::Posix(), metrics_path, &text));
  MetricsRecords r;
  size_t line_no = 0, begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    const bool last = end == std::string::npos;
    if (last) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event")) {
      if (last) {  // a job killed while writing it
        r.note = fmt::format("The last line ({}) is incomplete and left out.", line_no);
        break;
      }
      return DataLossError(
          fmt::format("{}:{}: not a metrics record (a JSON object with an "
                      "\"event\")",
                      metrics_path, line_no));
    }
    const std::string event = j["event"].is_string() ? j["event"].get<std::string>() : "";
    if (event == "pass") {
      r.passes.push_back(std::move(j));
    } else if (event == "test") {
      r.tests.push_back(std::move(j));
    } else if (event == "stages") {
      r.stages = std::move(j);
    } else if (event == "report") {
      r.report = std::move(j);
    } else if (event == "resume") {
      ++r.resumes;
    } else if (event == "partition") {  // a stream job's (docs/routine.md)
      r.partitions.push_back(std::move(j));
    } else if (event == "epoch" && j.contains("epoch") && j["epoch"].is_number_unsigned()) {
      const uint64_t epoch = j["epoch"].get<uint64_t>();  // docs/model.md, "Validation ..."
      r.epochs[epoch] = std::move(j);
    }
  }
  if (r.passes.empty()) {
    return FailedPreconditionError(fmt::format(
        "{}: no pass records: nothing to draw (a train job writes one per pass)", metrics_path));
  }
  return r;
}

const char* kStageNames[] = {"read", "pull", "train", "push", "extract"};

// Per pass, in the order written: x is the pass's position in the log (across runs).
struct PassSeries {
  explicit PassSeries(const std::vector<nlohmann::json>& passes);
  std::vector<double> Flat(double v) const { return std::vector<double>(x.size(), v); }

  std::vector<double> x, auc, logloss, copc, rate, hit, read_mb, write_mb;
  // The SSD tier's reads in flight on average: their summed time over the pass's (storage's
  // ssd_read_nanos; NaN in a log from before it was counted).
  std::vector<double> in_flight;
  // Each stage's busy share of the pass; the extract stage's worker time (docs/features.md)
  // when the job had a feature graph.
  std::vector<std::vector<double>> busy;
  bool extracting = false;
  bool tiered = false;
};

PassSeries::PassSeries(const std::vector<nlohmann::json>& passes) {
  const size_t n = passes.size();
  for (auto* v : {&x, &auc, &logloss, &copc, &rate, &hit, &read_mb, &write_mb, &in_flight}) {
    v->resize(n);
  }
  busy.assign(5, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i) {
    const nlohmann::json& p = passes[i];
    x[i] = static_cast<double>(i);
    auc[i] = Get(p, "auc");
    logloss[i] = Get(p, "logloss");
    copc[i] = Get(p, "copc");
    rate[i] = Get(p, "examples_per_s");
    const double seconds = Get(p, "seconds");
    for (int s = 0; s < 5; ++s) {
      const double b =
          p.contains("stages") ? GetIn(p["stages"], kStageNames[s], "busy_seconds") : kNaN;
      busy[s][i] = seconds > 0 ? 100.0 * b / seconds : kNaN;
    }
    extracting = extracting || std::isfinite(busy[4][i]);
    hit[i] = 100.0 * GetIn(p, "storage", "hit_rate");
    read_mb[i] = GetIn(p, "storage", "ssd_bytes_read") / 1e6;
    write_mb[i] = GetIn(p, "storage", "ssd_bytes_written") / 1e6;
    in_flight[i] = seconds > 0 ? GetIn(p, "storage", "ssd_read_nanos") * 1e-9 / seconds : kNaN;
    tiered = tiered || read_mb[i] > 0 || write_mb[i] > 0;
  }
}

// A stream job: each partition tested on before it is trained on (the online metrics).
void AddPartitionCharts(const std::vector<nlohmann::json>& partitions,
                        std::vector<std::string>* charts) {
  if (partitions.empty()) return;
  const size_t m = partitions.size();
  std::vector<double> px(m), online(m), keys(m), evicted(m);
  for (size_t i = 0; i < m; ++i) {
    px[i] = static_cast<double>(i);
    online[i] = partitions[i].contains("online") ? Get(partitions[i]["online"], "auc") : kNaN;
    keys[i] = Get(partitions[i], "keys");
    evicted[i] = Get(partitions[i], "evicted");
  }
  charts->push_back(LineChartSvg("Online AUC per partition (tested before trained on)", "partition",
                                 "AUC", {{"online AUC", kColors[0], px, online}}));
  charts->push_back(LineChartSvg("Keys per partition", "partition", "keys",
                                 {{"keys held", kColors[0], px, keys},
                                  {"evicted (table.ttl_partitions)", kColors[1], px, evicted}}));
}

// A job validated per epoch: the rows held back, scored after each epoch, beside the epoch's
// own progressive metrics; the best epoch is the model kept.
void AddEpochCharts(const std::map<uint64_t, nlohmann::json>& epochs,
                    std::vector<std::string>* charts) {
  if (epochs.empty()) return;
  const size_t m = epochs.size();
  std::vector<double> ex(m), v_ll(m), v_auc(m), t_ll(m), t_auc(m);
  size_t i = 0;
  for (const auto& [epoch, e] : epochs) {
    ex[i] = static_cast<double>(epoch);
    v_ll[i] = e.contains("validation") ? Get(e["validation"], "logloss") : kNaN;
    v_auc[i] = e.contains("validation") ? Get(e["validation"], "auc") : kNaN;
    t_ll[i] = e.contains("train") ? Get(e["train"], "logloss") : kNaN;
    t_auc[i] = e.contains("train") ? Get(e["train"], "auc") : kNaN;
    ++i;
  }
  charts->push_back(LineChartSvg("Logloss per epoch (validation: rows held back)", "epoch",
                                 "logloss",
                                 {{"validation logloss", kColors[1], ex, v_ll},
                                  {"training logloss (progressive)", kColors[0], ex, t_ll}}));
  charts->push_back(LineChartSvg("AUC per epoch (validation: rows held back)", "epoch", "AUC",
                                 {{"validation AUC", kColors[1], ex, v_auc},
                                  {"training AUC (progressive)", kColors[0], ex, t_auc}}));
}

// The report's memory split by owner at its largest pass (the resident set then, `rss`),
// beside the run's peak RSS.
void AddMemoryChart(const nlohmann::json& report, std::vector<std::string>* charts) {
  if (!report.contains("memory_peak_by_owner") || !report["memory_peak_by_owner"].is_object()) {
    return;
  }
  std::vector<std::string> labels;
  std::vector<double> values;
  for (const auto& [owner, bytes] : report["memory_peak_by_owner"].items()) {
    if (!bytes.is_number() || owner == "rss") continue;
    labels.push_back(owner == "other_heap_free"    ? "of other: allocator's free"
                     : owner == "other_file_pages" ? "of other: file pages"
                                                   : owner);
    values.push_back(bytes.get<double>());
  }
  if (const auto& m = report["memory_peak_by_owner"]; m.contains("rss") && m["rss"].is_number()) {
    labels.push_back("RSS then (all)");
    values.push_back(m["rss"].get<double>());
  }
  labels.push_back("peak RSS (all)");
  values.push_back(Get(report, "peak_rss_bytes"));
  charts->push_back(BarChartSvg("Memory at the peak, by owner", labels, values, 1e-6, "MB"));
}

std::vector<std::string> Charts(const MetricsRecords& r, const PassSeries& ps) {
  const std::vector<double>& x = ps.x;
  std::vector<std::string> charts;
  {
    std::vector<ChartSeries> s = {{"progressive AUC", kColors[0], x, ps.auc}};
    if (!r.tests.empty() && std::isfinite(Get(r.tests.back(), "auc"))) {
      s.push_back({"held-out test AUC", kColors[1], x, ps.Flat(Get(r.tests.back(), "auc")), true});
    }
    if (std::isfinite(Get(r.report, "oracle_auc"))) {
      s.push_back({"oracle AUC", kColors[2], x, ps.Flat(Get(r.report, "oracle_auc")), true});
    }
    charts.push_back(LineChartSvg("AUC per pass", "pass", "AUC", s));
  }
  AddPartitionCharts(r.partitions, &charts);
  AddEpochCharts(r.epochs, &charts);
  {
    std::vector<ChartSeries> s = {{"progressive logloss", kColors[0], x, ps.logloss}};
    if (!r.tests.empty() && std::isfinite(Get(r.tests.back(), "logloss"))) {
      s.push_back(
          {"held-out test logloss", kColors[1], x, ps.Flat(Get(r.tests.back(), "logloss")), true});
    }
    charts.push_back(LineChartSvg("Logloss per pass", "pass", "logloss", s));
  }
  charts.push_back(LineChartSvg(
      "COPC per pass (clicks / predicted clicks)", "pass", "COPC",
      {{"COPC", kColors[0], x, ps.copc}, {"calibrated (1)", kColors[2], x, ps.Flat(1.0), true}}));
  charts.push_back(LineChartSvg("Training speed", "pass", "examples/s",
                                {{"examples/s", kColors[0], x, ps.rate}}));
  {
    std::vector<ChartSeries> s;
    for (int i = 0; i < (ps.extracting ? 5 : 4); ++i) {
      s.push_back({kStageNames[i], kColors[i], x, ps.busy[i]});
    }
    charts.push_back(LineChartSvg("Stage busy time, % of the pass time", "pass", "% busy", s));
  }
  if (ps.tiered) {
    charts.push_back(LineChartSvg("Cache hit rate (memory tier)", "pass", "% of pulled keys",
                                  {{"hit rate", kColors[0], x, ps.hit}}));
    charts.push_back(LineChartSvg(
        "SSD traffic", "pass", "MB per pass",
        {{"read", kColors[0], x, ps.read_mb}, {"written", kColors[1], x, ps.write_mb}}));
    if (std::any_of(ps.in_flight.begin(), ps.in_flight.end(),
                    [](double v) { return std::isfinite(v); })) {
      // (Near the threads that pull, the disk sets the speed; near 0, the CPU does.)
      charts.push_back(LineChartSvg("Disk reads in flight", "pass", "reads under way, on average",
                                    {{"reads in flight", kColors[0], x, ps.in_flight}}));
    }
  }
  AddMemoryChart(r.report, &charts);
  return charts;
}

// The summary: the run's report and the saved model.
std::string SummaryRows(const nlohmann::json& report, const std::string& manifest_text,
                        bool tiered) {
  std::string summary;
  if (report.is_object()) {
    auto num = [&](const char* k, const char* f) {
      const double v = Get(report, k);
      return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : std::string("-");
    };
    if (report.contains("model_shape")) {
      summary += Row("model", report.value("model_shape", std::string("-")));
    }
    summary += Row("examples trained", num("examples", "{:.0f}"));
    summary += Row("passes", num("passes", "{:.0f}"));
    summary += Row("training time", num("seconds", "{:.1f} s"));
    summary += Row("examples/s", num("examples_per_s", "{:.0f}"));
    if (report.contains("validation") && report["validation"].is_object()) {
      const nlohmann::json& v = report["validation"];
      summary +=
          Row("epochs", fmt::format("{:.0f} (kept: epoch {:.0f}, validation logloss {:.4f}{})",
                                    Get(v, "epochs"), Get(v, "best_epoch"), Get(v, "best_logloss"),
                                    v.value("stopped_early", false) ? "; stopped early" : ""));
      summary += Row("validation rows", fmt::format("{:.0f} % of the training rows held back",
                                                    100.0 * Get(v, "fraction")));
    }
    summary += Row("held-out test AUC", num("test_auc", "{:.4f}"));
    summary += Row("held-out test logloss", num("test_logloss", "{:.4f}"));
    summary += Row("oracle AUC", num("oracle_auc", "{:.4f}"));
    summary += Row("device", report.value("device", std::string("-")));
    summary += Row("BLAS core", report.value("blas_core", std::string("-")));
    // Mapped reads count the SSD files' pages they touched in the RSS (page cache, which the
    // kernel takes back when memory is short): where that is most of it, the headline is the
    // job's own memory, the RSS beside it (an unconfined 100 M-key run: 2.62 GB against 24.0).
    const double rss = Get(report, "peak_rss_bytes");
    const double anon = Get(report, "peak_anon_rss_bytes");
    if (std::isfinite(anon) && anon < 0.9 * rss) {
      summary += Row("peak memory", fmt::format("{} the job's own (peak RSS {} with the SSD "
                                                "files' pages its mapped reads touched)",
                                                Bytes(anon), Bytes(rss)));
    } else {
      summary += Row("peak RSS", Bytes(rss));
    }
    // The box the job ran in (its memory cgroup's limit, which counts the page cache, or the
    // machine's memory), its peak use where the cgroup counts one, and the budget's share.
    if (report.contains("memory_box") && report["memory_box"].is_object()) {
      const nlohmann::json& box = report["memory_box"];
      std::string text = fmt::format("{} ({})", Bytes(Get(box, "limit_bytes")),
                                     box.value("source", std::string("-")));
      if (std::isfinite(Get(box, "peak_bytes"))) {
        text += fmt::format("; its peak use {} (the process and the page cache)",
                            Bytes(Get(box, "peak_bytes")));
      }
      if (std::isfinite(Get(box, "budget_share")) && tiered) {
        text += fmt::format("; the memory budget {:.0f} % of it", 100.0 * Get(box, "budget_share"));
      }
      summary += Row("memory box", text);
    }
    const double hit_rate = GetIn(report, "storage", "hit_rate");
    if (std::isfinite(hit_rate) && tiered) {
      summary += Row("cache hit rate", fmt::format("{:.1f} %", 100.0 * hit_rate));
    }
    const double in_flight = GetIn(report, "disk", "reads_in_flight");
    if (std::isfinite(in_flight)) {
      summary += Row(
          "disk reads in flight",
          fmt::format("{:.2f} on average ({:.0f} reads/s, {:.1f} µs each)", in_flight,
                      GetIn(report, "disk", "reads_per_s"), GetIn(report, "disk", "mean_read_us")));
    }
    const double mapped = GetIn(report, "storage", "mapped_records_read");
    const double records = GetIn(report, "storage", "records_read");
    if (std::isfinite(mapped) && records > 0) {
      summary += Row(
          "reads out of mappings",
          fmt::format("{:.1f} % of the records read ({:.0f} switches to and from pread)",
                      100.0 * mapped / records, GetIn(report, "storage", "read_path_switches")));
    }
    const double device_pulls = GetIn(report, "storage", "device_pulls");
    if (std::isfinite(device_pulls) && records > 0) {
      summary += Row("pulls read from the device",
                     fmt::format("{:.0f} (storage.device_io_threads at a time; {:.0f} switches "
                                 "between the device and memory)",
                                 device_pulls, GetIn(report, "storage", "device_read_switches")));
    }
    // The disk's own ceiling (storage.disk_probe), so that the reads above have a scale.
    const nlohmann::json ceiling =
        report.contains("disk") ? report["disk"].value("ceiling", nlohmann::json()) : nullptr;
    if (ceiling.is_object() && ceiling.value("measured", false)) {
      summary += Row(
          "disk ceiling",
          fmt::format("{:.0f} random 4 KiB reads/s with 16 in flight, {:.0f} with 1; "
                      "{:.0f} MB/s in order — the job's reads: {:.1f} % of it",
                      Get(ceiling, "random_4k_reads_qd16_per_s"),
                      Get(ceiling, "random_4k_reads_qd1_per_s"), Get(ceiling, "seq_read_mb_per_s"),
                      100.0 * GetIn(report, "disk", "reads_of_ceiling")) +
              // Reads far faster than the disk's: the page cache served them.
              (GetIn(report, "disk", "mean_read_us") < 0.5 * Get(ceiling, "read_us_qd1")
                   ? fmt::format(" (a read took {:.1f} µs, the disk's {:.0f} µs: the page cache "
                                 "answered most)",
                                 GetIn(report, "disk", "mean_read_us"), Get(ceiling, "read_us_qd1"))
                   : std::string()));
    } else if (ceiling.is_object()) {
      summary += Row("disk ceiling", "not measured: " + ceiling.value("why_not", std::string()));
    }
    const double wa = GetIn(report, "storage", "write_amplification");
    if (std::isfinite(wa)) summary += Row("write amplification", fmt::format("{:.2f}", wa));
    summary += Row("model digest", report.value("digest", std::string("-")));
    if (report.value("interrupted", false)) summary += Row("interrupted", "yes (Ctrl-C)");
  }
  if (!manifest_text.empty()) {
    nlohmann::json m = nlohmann::json::parse(manifest_text, nullptr, false);
    if (m.is_object()) {
      summary += Row("saved model: keys", fmt::format("{:.0f}", Get(m, "keys")));
      summary += Row("saved model: live bytes", Bytes(Get(m, "bytes_live")));
      summary +=
          Row("saved model: trained examples", fmt::format("{:.0f}", Get(m, "trained_examples")));
    }
  }
  return summary;
}

// The stage totals of the "stages" line.
std::string StageTable(const nlohmann::json& stages) {
  if (!stages.contains("stages")) return "";
  std::string table =
      "<table><tr><th>stage</th><th>busy s</th><th>stalled s</th><th>idle s</th></tr>";
  for (const char* s : kStageNames) {
    if (!std::isfinite(GetIn(stages["stages"], s, "busy_seconds"))) continue;  // none here
    table += fmt::format("<tr><th>{}</th><td>{:.2f}</td><td>{:.2f}</td><td>{:.2f}</td></tr>", s,
                         GetIn(stages["stages"], s, "busy_seconds"),
                         GetIn(stages["stages"], s, "stalled_seconds"),
                         GetIn(stages["stages"], s, "idle_seconds"));
  }
  return table + "</table>";
}

constexpr const char* kPageHead =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<title>ctrbox train report</title><style>"
    "body{font:14px sans-serif;margin:24px;color:#222}"
    ".grid2{display:grid;grid-template-columns:repeat(auto-fill,minmax(490px,1fr));gap:12px}"
    "svg{background:#fff;border:1px solid #ddd}"
    "svg .t{font:bold 13px sans-serif} svg text{font:11px sans-serif;fill:#333}"
    "svg .yt{text-anchor:end} svg .xt{text-anchor:middle} svg .xl,svg .yl{text-anchor:middle}"
    "svg .frame{fill:none;stroke:#999} svg .grid{stroke:#eee} svg .tick{stroke:#999}"
    "svg path.s{fill:none;stroke-width:1.6} svg .dash{stroke-dasharray:5 4}"
    "svg line[class^=lg]{stroke-width:2} svg .bar{fill:#1f77b4}"
    "table{border-collapse:collapse;margin:8px 0 16px}"
    "th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}"
    "</style></head><body>\n";

}  // namespace

StatusOr<std::string> RenderReport(const std::string& metrics_path,
                                   const std::string& manifest_text) {
  ASSIGN_OR_RETURN(const MetricsRecords r, ReadMetricsRecords(metrics_path));
  const PassSeries ps(r.passes);
  const std::vector<std::string> charts = Charts(r, ps);
  const std::string summary = SummaryRows(r.report, manifest_text, ps.tiered);
  const std::string stage_table = StageTable(r.stages);
  const size_t n = r.passes.size();
  std::string html = kPageHead;
  html += "<h1>ctrbox train report</h1>\n<p>From <code>" + Escape(metrics_path) +
          "</code>: " + std::to_string(n) + (n == 1 ? " pass" : " passes") +
          (r.resumes == 0 ? std::string() : fmt::format(", {} resumed run(s)", r.resumes)) + ". " +
          Escape(r.note) + "</p>\n";
  if (!summary.empty()) html += "<h2>Summary</h2><table>" + summary + "</table>\n";
  if (!stage_table.empty()) html += "<h2>Stage totals</h2>" + stage_table + "\n";
  html += "<h2>Per pass</h2><div class=\"grid2\">\n";
  for (const std::string& c : charts) html += "<div>" + c + "</div>\n";
  html += "</div></body></html>\n";
  return html;
}

}  // namespace ctrbox
