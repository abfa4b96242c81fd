// `ctrbox report` from the command line: the pages of a tiered run, a one-pass run and a job
// of epochs, each rendered by headless Chromium and measured in the browser's layout.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "util/env.h"
#include "util/parse.h"

namespace ctrbox {
namespace {

using testing::CliTest;
using testing::Result;

// `ctrbox report` on a budgeted run, rendered by headless Chromium (Debian's `chromium`,
// which scripts/setup installs): a script added to a copy of the page measures every chart's
// drawn paths in the browser's layout, and a screenshot of the page itself is taken.
TEST_F(CliTest, ReportDrawsEveryChartAndChromiumRendersThem) {
  Result train = Run(Ctrbox("train --fresh --model-dir " + Path("m") +
                            " --set data.gen.rows=30000 --set data.gen.test_rows=3000"
                            " --set model.mlp=32,16 --set pipeline.pass_examples=3000"
                            " --set storage.ssd_dir=" +
                            Path("ssd") + " --set storage.memory_budget=3MB" +
                            " --set storage.disk_probe=0.2"));
  ASSERT_EQ(train.exit_code, 0) << train.err;
  // The disk under the SSD files, measured at the job's end (or why not).
  const nlohmann::json ceiling = train.last_json["disk"]["ceiling"];
  ASSERT_TRUE(ceiling.is_object()) << train.last_json["disk"];
  const bool measured = ceiling["measured"].get<bool>();
  if (measured) {
    EXPECT_GT(ceiling["random_4k_reads_qd16_per_s"].get<double>(), 0) << ceiling;
    EXPECT_GE(train.last_json["disk"]["reads_of_ceiling"].get<double>(), 0) << ceiling;
  }
  Result report = Run(Ctrbox("report --model-dir " + Path("m")));
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(report.last_json["out"], Path("m") + "/report.html");
  std::string html;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("m/report.html"), &html).ok());
  // AUC, logloss, COPC, speed, stages, hit rate, SSD traffic, reads in flight, memory by owner.
  const char* kCharts[] = {
      "AUC per pass",   "Logloss per pass",     "COPC per pass",
      "Training speed", "Stage busy time",      "Cache hit rate",
      "SSD traffic",    "Disk reads in flight", "Memory at the peak, by owner"};
  for (const char* c : kCharts) EXPECT_NE(html.find(c), std::string::npos) << c;
  EXPECT_NE(html.find("disk reads in flight"), std::string::npos);   // (the summary's row)
  EXPECT_NE(html.find("reads out of mappings"), std::string::npos);  // (storage.mapped_reads)
  EXPECT_NE(html.find(measured ? "random 4 KiB reads/s with 16 in flight" : "not measured"),
            std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, nothing to run
  EXPECT_NE(html.find(train.last_json["digest"].get<std::string>()), std::string::npos);
  // The model's shape, escaped ("->" is text).
  EXPECT_NE(html.find("13 dense + 26 slots x 16 -&gt; MLP"), std::string::npos);
  // Neither argument: a usage error.
  EXPECT_EQ(Run(Ctrbox("report")).exit_code, 2);
  EXPECT_NE(Run(Ctrbox("report --model-dir " + Path("nothing"))).err.find("no metrics log"),
            std::string::npos);

  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "chromium is not installed (scripts/setup installs Debian's chromium)";
  }
  const std::string chromium =
      "timeout 120 chromium --headless --no-sandbox --disable-gpu "
      "--hide-scrollbars --user-data-dir=" +
      Path("chromium") + " ";
  // Each chart of a page as the browser lays it out: its width, its drawn paths, and its texts
  // that cross its edges (a legend label cut off).
  auto probe = [&](const std::string& page, const char* name) {
    std::string p = page;
    p.insert(p.rfind("</body>"), R"(<script>
const out = [];
for (const svg of document.querySelectorAll('svg')) {
  const box = svg.getBoundingClientRect();
  let drawn = 0, cut = 0;
  for (const p of svg.querySelectorAll('path')) {
    const b = p.getBBox();
    if (p.getTotalLength() > 0 && (b.width > 0 || b.height > 0)) drawn++;
  }
  for (const c of svg.querySelectorAll('circle')) drawn += c.r.baseVal.value > 0;
  for (const t of svg.querySelectorAll('text')) {
    const r = t.getBoundingClientRect();
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5) cut++;
  }
  out.push(svg.getAttribute('aria-label') + '|' + Math.round(box.width) + '|' + drawn + '|' + cut);
}
document.body.insertAdjacentHTML('beforeend', '<pre id="probe">' + out.join(';') + '</pre>');
</script>)");
    const std::string file = Path(std::string(name) + ".html");
    EXPECT_TRUE(WriteFileAtomic(Env::Posix(), file, p).ok());
    Result dom = Run(chromium + "--dump-dom file://" + file);
    EXPECT_EQ(dom.exit_code, 0) << dom.err;
    const size_t at = dom.out.rfind("<pre id=\"probe\">");  // after the script, which names it
    EXPECT_NE(at, std::string::npos) << dom.out.substr(0, 2000);
    std::vector<std::vector<std::string>> charts;
    if (at == std::string::npos) return charts;
    const std::string rendered = dom.out.substr(at + 16, dom.out.find("</pre>", at) - at - 16);
    for (std::string_view item : Split(rendered, ';')) {
      std::vector<std::string> f;
      for (std::string_view v : Split(item, '|')) f.emplace_back(v);
      EXPECT_EQ(f.size(), 4u) << item;
      if (f.size() != 4) continue;
      EXPECT_GE(std::stoi(f[1]), 400) << name << ": " << item;  // laid out at its size
      EXPECT_GE(std::stoi(f[2]), 1) << name << ": " << item;    // a visible line or point
      EXPECT_EQ(f[3], "0") << name << ": " << item << ": a text crosses the chart's edge";
      charts.push_back(std::move(f));
    }
    return charts;
  };
  EXPECT_EQ(probe(html, "tiered").size(), std::size(kCharts));
  // A one-pass run, most users' first, and a job of epochs: every line visible, no label cut.
  // (A small job's report page, and its train report.)
  auto page_of = [&](const std::string& dir, const std::string& more, std::string* page) {
    Result t = Run(Ctrbox("train --fresh --model-dir " + Path(dir) +
                          " --set data.gen.rows=3000 --set data.gen.test_rows=1000"
                          " --set model.mlp=32,16 --set pipeline.pass_examples=100000" +
                          more));
    EXPECT_EQ(t.exit_code, 0) << t.err;
    EXPECT_EQ(Run(Ctrbox("report --model-dir " + Path(dir))).exit_code, 0);
    EXPECT_TRUE(ReadFileToString(Env::Posix(), Path(dir + "/report.html"), page).ok());
    return t;
  };
  std::string epochs_page, single_page;
  Result one = page_of("one", " --set train.epochs=auto --set train.max_epochs=3", &epochs_page);
  EXPECT_NE(epochs_page.find("Logloss per epoch"), std::string::npos);
  const uint64_t epochs = one.last_json["validation"]["epochs"];
  EXPECT_NE(epochs_page.find("<th>passes</th><td>" + std::to_string(epochs) + "</td>"),
            std::string::npos)
      << "one pass an epoch";
  probe(epochs_page, "epochs");
  page_of("single", "", &single_page);
  EXPECT_NE(single_page.find("1 pass."), std::string::npos);
  probe(single_page, "single");
  Result shot = Run(chromium + "--window-size=1100,2000 --screenshot=" + Path("shot.png") +
                    " file://" + Path("m/report.html"));
  ASSERT_EQ(shot.exit_code, 0) << shot.err;
  auto png = Env::Posix()->GetFileSize(Path("shot.png"));
  ASSERT_TRUE(png.ok()) << shot.err;
  EXPECT_GT(*png, 20000u);
}

}  // namespace
}  // namespace ctrbox
