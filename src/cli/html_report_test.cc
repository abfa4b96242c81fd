#include "cli/html_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <regex>

#include "io/test_util.h"
#include "util/env.h"

namespace ctrbox {
namespace {

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(HtmlReportTest, LineChartDrawsOnePathPerSeriesAndBreaksItAtUndefinedValues) {
  const double nan = std::nan("");
  const std::string svg = LineChartSvg("AUC <per> pass", "pass", "AUC",
                                       {{"a", "#000", {0, 1, 2, 3, 4}, {0.5, 0.6, nan, 0.7, 0.8}},
                                        {"b", "#111", {0, 4}, {0.55, 0.55}, true},
                                        {"empty", "#222", {0, 1}, {nan, nan}}});
  EXPECT_EQ(Count(svg, "<path "), 2u) << svg;  // the all-undefined series draws nothing
  EXPECT_NE(svg.find("aria-label=\"AUC &lt;per&gt; pass\""), std::string::npos) << svg;
  // Series a: two subpaths (M ... L ...) around the undefined point.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<path d=\"([^\"]*)\" stroke=\"#000\"")));
  EXPECT_EQ(Count(m[1].str(), "M"), 2u) << m[1];
  EXPECT_EQ(Count(m[1].str(), "L"), 2u) << m[1];
  // The highest value is drawn highest: y of 0.8 above (smaller than) y of 0.5.
  std::smatch first, last;
  const std::string d = m[1].str();
  ASSERT_TRUE(std::regex_search(d, first, std::regex("^M([0-9.]+) ([0-9.]+)")));
  ASSERT_TRUE(std::regex_search(d, last, std::regex("L([0-9.]+) ([0-9.]+)$")));
  EXPECT_LT(std::stod(last[2]), std::stod(first[2]));
  EXPECT_GT(std::stod(last[1]), std::stod(first[1]));
  EXPECT_NE(LineChartSvg("t", "x", "y", {}).find("no data"), std::string::npos);
}

// A one-pass run (most users' first): the lone point says its value, the reference line (the
// held-out metric) spans the chart, the pass axis has no fractional ticks, and the legend's
// longest label ends inside the frame.
TEST(HtmlReportTest, AOnePassChartShowsItsValueAndTheReferenceAcross) {
  const std::string svg =
      LineChartSvg("AUC per pass", "pass", "AUC",
                   {{"progressive AUC", "#000", {0}, {0.61}},
                    {"training logloss (progressive), a long label", "#111", {0}, {0.65}, true}});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      svg, m, std::regex("<path d=\"M([0-9.]+) ([0-9.]+) L([0-9.]+) ([0-9.]+)\" stroke=\"#111\"")));
  EXPECT_EQ(std::stod(m[1]), 64.0);   // the frame's left edge (kLeft)
  EXPECT_EQ(std::stod(m[3]), 466.0);  // ... to its right edge (kWidth - kRight)
  EXPECT_EQ(m[2], m[4]);              // level
  EXPECT_NE(svg.find("class=\"pv\">0.61</text>"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("class=\"xt\">0.5<"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("class=\"xt\">-0.5<"), std::string::npos) << svg;
  EXPECT_NE(svg.find("class=\"xt\">0<"), std::string::npos) << svg;
  std::smatch lt;
  ASSERT_TRUE(std::regex_search(svg, lt,
                                std::regex("<text x=\"([0-9.]+)\" y=\"[0-9.]+\" "
                                           "class=\"lt\">training logloss")));
  EXPECT_LE(std::stod(lt[1]) + 6.2 * std::strlen("training logloss (progressive), a long label"),
            466.0 + 1e-9);
}

TEST(HtmlReportTest, MetricsLogErrorsNameTheLineAndATruncatedLastLineIsLeftOut) {
  testing::TempDir dir;
  const std::string pass =
      R"({"event":"pass","pass":0,"examples":10,"auc":0.6,"logloss":0.5,"copc":1.0,)"
      R"("examples_per_s":100,"seconds":0.1})";
  const std::string path = dir.File("metrics.jsonl");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, pass + "\n{\"event\":\"pa").ok());
  auto page = RenderReport(path, "");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_NE(page->find("The last line (2) is incomplete"), std::string::npos);
  EXPECT_EQ(Count(*page, "<svg"),
            5u);  // no tiers, no report line: AUC, logloss, COPC, speed, stages

  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, pass + "\nnot json\n" + pass + "\n").ok());
  auto bad = RenderReport(path, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("metrics.jsonl:2"), std::string::npos)
      << bad.status().ToString();

  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path,
                              R"({"event":"test","auc":0.7})"
                              "\n")
                  .ok());
  auto none = RenderReport(path, "");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no pass records"), std::string::npos);
}

// Issue 44: with one pass the line charts were empty frames (a path `h 0.01` long), the
// held-out logloss was nowhere, the page said "1 passes", and a job without a feature graph
// had a stage row of `nan nan nan`.
TEST(HtmlReportTest, AOnePassRunShowsItsPointsItsHeldOutLoglossAndNoUndefinedRows) {
  testing::TempDir dir;
  const std::string path = dir.File("metrics.jsonl");
  ASSERT_TRUE(
      WriteFileAtomic(
          Env::Posix(), path,
          R"({"event":"pass","pass":0,"examples":10,"auc":0.6,"logloss":0.5,"copc":1.0,)"
          R"("examples_per_s":100,"seconds":0.1})"
          "\n"
          R"({"event":"test","auc":0.7,"logloss":0.41})"
          "\n"
          R"({"event":"stages","stages":{"read":{"busy_seconds":1,"stalled_seconds":0,)"
          R"("idle_seconds":0},"pull":{"busy_seconds":1,"stalled_seconds":0,"idle_seconds":0},)"
          R"("train":{"busy_seconds":1,"stalled_seconds":0,"idle_seconds":0},)"
          R"("push":{"busy_seconds":1,"stalled_seconds":0,"idle_seconds":0}}})"
          "\n"
          R"({"event":"report","examples":10,"passes":1,"test_auc":0.7,"test_logloss":0.41})"
          "\n")
          .ok());
  auto page = RenderReport(path, "");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_NE(page->find(": 1 pass."), std::string::npos);
  EXPECT_EQ(page->find("1 passes"), std::string::npos);
  EXPECT_EQ(page->find("h 0.01"), std::string::npos);
  EXPECT_GE(Count(*page, "<circle "), 4u);  // AUC, logloss, COPC, speed: a dot each at least
  EXPECT_NE(page->find("held-out test logloss"), std::string::npos);
  EXPECT_NE(page->find("<th>held-out test logloss</th><td>0.4100</td>"), std::string::npos)
      << *page;
  EXPECT_EQ(page->find("nan"), std::string::npos);
  EXPECT_EQ(page->find("<th>extract</th>"), std::string::npos);
}

// A run whose mapped reads touched most of its SSD files has an RSS of mostly page cache (the
// unconfined 100 M-key run: 24.0 GB against 2.62 GB of its own): the summary heads with the
// job's own memory and gives the RSS beside it; a run without that gap, with its RSS alone.
TEST(HtmlReportTest, ThePeakMemoryIsTheJobsOwnWhereMappedFilePagesFillTheRss) {
  testing::TempDir dir;
  const std::string path = dir.File("metrics.jsonl");
  auto page_for = [&](const std::string& memory) {
    EXPECT_TRUE(WriteFileAtomic(Env::Posix(), path,
                                R"({"event":"pass","pass":0,"examples":10,"auc":0.6,)"
                                R"("logloss":0.5,"copc":1.0,"examples_per_s":100,"seconds":0.1})"
                                "\n"
                                R"({"event":"report","examples":10,"passes":1,)" +
                                    memory + "}\n")
                    .ok());
    auto page = RenderReport(path, "");
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    return page.ok() ? *page : std::string();
  };
  const std::string mapped =
      page_for(R"("peak_rss_bytes":24000000000,"peak_anon_rss_bytes":2620000000)");
  EXPECT_NE(mapped.find("<th>peak memory</th><td>2.62 GB the job's own (peak RSS 24 GB with"),
            std::string::npos)
      << mapped;
  EXPECT_EQ(mapped.find("<th>peak RSS</th>"), std::string::npos);
  const std::string own =
      page_for(R"("peak_rss_bytes":3000000000,"peak_anon_rss_bytes":2900000000)");
  EXPECT_NE(own.find("<th>peak RSS</th><td>3 GB</td>"), std::string::npos) << own;
  EXPECT_EQ(own.find("peak memory"), std::string::npos);
  EXPECT_EQ(own.find("memory box"), std::string::npos);
  // The box the job ran in, with its peak use where its cgroup counts one.
  const std::string boxed =
      page_for(R"("peak_rss_bytes":3000000000,"memory_box":{"limit_bytes":4294967296,)"
               R"("source":"cgroup v1 /sys/fs/cgroup/memory/box","peak_bytes":4100000000,)"
               R"("budget_share":0.458})");
  EXPECT_NE(boxed.find("<th>memory box</th><td>4.29 GB (cgroup v1 /sys/fs/cgroup/memory/box); "
                       "its peak use 4.1 GB (the process and the page cache)"),
            std::string::npos)
      << boxed;
}

}  // namespace
}  // namespace ctrbox
