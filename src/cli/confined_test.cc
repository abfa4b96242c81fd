// The SSD tier where the page cache cannot hide it (issue 58, bench/confined.py for the
// figures): a budgeted job inside a memory cgroup whose limit counts the page cache, set below
// what its input, its SSD files and its process take together, trains the unconfined job's
// model bit for bit, with no OOM kill. Skipped, saying why, where no memory cgroup can be made
// (cgroup v1 at /sys/fs/cgroup/memory or v2 at /sys/fs/cgroup, writable: root).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/cli_test_util.h"

namespace ctrbox {
namespace {

using testing::CliTest;
using testing::Result;

// A memory cgroup made for one test, removed after it.
class MemoryCgroup {
 public:
  // "" when none can be made here; *why says why.
  static std::string Root(std::string* why) {
    namespace fs = std::filesystem;
    if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") &&
        access("/sys/fs/cgroup/memory", W_OK) == 0) {
      return "/sys/fs/cgroup/memory";
    }
    std::ifstream controllers("/sys/fs/cgroup/cgroup.controllers");
    std::string c;
    while (controllers >> c) {
      if (c == "memory" && access("/sys/fs/cgroup", W_OK) == 0) return "/sys/fs/cgroup";
    }
    *why =
        "no writable memory cgroup (v1 /sys/fs/cgroup/memory or v2 /sys/fs/cgroup; it needs "
        "root)";
    return "";
  }
  MemoryCgroup(const std::string& root, uint64_t limit)
      : v1_(root.ends_with("/memory")), path_(root + "/ctrbox-test-" + std::to_string(getpid())) {
    std::error_code ec;
    std::filesystem::create_directories(path_, ec);
    std::ofstream knob(path_ + (v1_ ? "/memory.limit_in_bytes" : "/memory.max"));
    knob << limit;
    knob.flush();
    made_ = !ec && knob.good();
  }
  ~MemoryCgroup() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  // Whether the cgroup and its limit could be made (a container may refuse either).
  bool made() const { return made_; }
  // A shell command that runs `command` inside the cgroup.
  std::string Wrap(const std::string& command) const {
    return "sh -c 'echo $$ > " + path_ + "/cgroup.procs && exec " + command + "'";
  }
  uint64_t OomKills() const {
    std::ifstream in(path_ + (v1_ ? "/memory.oom_control" : "/memory.events"));
    std::string key;
    uint64_t value = 0;
    while (in >> key >> value) {
      if (key == "oom_kill") return value;
    }
    return 0;
  }
  uint64_t PeakBytes() const {
    std::ifstream in(path_ + (v1_ ? "/memory.max_usage_in_bytes" : "/memory.peak"));
    uint64_t v = 0;
    in >> v;
    return v;
  }

 private:
  const bool v1_;
  const std::string path_;
  bool made_ = false;
};

TEST_F(CliTest, ABudgetedJobConfinedBelowItsDataAndFilesTrainsTheUnconfinedModel) {
  std::string why;
  const std::string root = MemoryCgroup::Root(&why);
  if (root.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(Run(Ctrbox("gen --rows 400000 --seed 21 --out " + Path("train.tsv"))).exit_code, 0);
  const std::string job = "train --data " + Path("train.tsv") +
                          " --set storage.memory_budget=2MB --set train.deterministic=true "
                          "--set model.mlp=32,16 --set train.progress_seconds=1e9 --fresh";
  Result unconfined =
      Run(Ctrbox(job + " --model-dir " + Path("m1") + " --set storage.ssd_dir=" + Path("ssd1")));
  ASSERT_EQ(unconfined.exit_code, 0) << unconfined.err;
  const uint64_t input = std::filesystem::file_size(Path("train.tsv"));
  const uint64_t files = unconfined.last_json["storage"]["file_bytes"];
  // The job's own memory (heap and stacks: not the SSD files' pages its mapped reads touched,
  // which peak_rss_bytes counts and a confined box cannot keep).
  const uint64_t rss = unconfined.last_json["peak_anon_rss_bytes"];
  // Below the process, its input and its SSD files together: neither can stay cached.
  const uint64_t limit = rss + (input + files) / 4;
  ASSERT_LT(limit, rss + input + files);
  MemoryCgroup cg(root, limit);
  if (!cg.made()) GTEST_SKIP() << "a memory cgroup with a limit could not be made under " << root;
  Result confined = Run(cg.Wrap(
      Ctrbox(job + " --model-dir " + Path("m2") + " --set storage.ssd_dir=" + Path("ssd2"))));
  ASSERT_EQ(confined.exit_code, 0) << confined.err;
  EXPECT_EQ(cg.OomKills(), 0u);
  EXPECT_LE(cg.PeakBytes(), limit);
  EXPECT_EQ(confined.last_json["digest"], unconfined.last_json["digest"]);
  EXPECT_GT(confined.last_json["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
  // The job found its box: the cgroup's limit (rounded down to a page by the kernel), its
  // peak use within it, and the budget's share of it.
  const auto& box = confined.last_json["memory_box"];
  EXPECT_LE(box["limit_bytes"].get<uint64_t>(), limit);
  EXPECT_GT(box["limit_bytes"].get<uint64_t>(), limit - 4096);
  EXPECT_TRUE(box["source"].get<std::string>().starts_with("cgroup v")) << box.dump();
  EXPECT_GT(box["peak_bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(box["peak_bytes"].get<uint64_t>(), limit);
  EXPECT_NEAR(box["budget_share"].get<double>(), (2 << 20) / static_cast<double>(limit), 1e-3);
  const auto& st = confined.last_json["storage"];
  std::fprintf(stderr,
               "confined: limit %.0f MB (input %.0f MB, SSD files %.0f MB, unconfined peak "
               "anonymous RSS %.0f MB): %.0f vs %.0f examples/s unconfined; %llu of %llu records "
               "read out of mappings, %llu switches between mappings and pread; %llu pulls "
               "read from the device (%llu switches)\n",
               limit / 1e6, input / 1e6, files / 1e6, rss / 1e6,
               confined.last_json["examples_per_s"].get<double>(),
               unconfined.last_json["examples_per_s"].get<double>(),
               static_cast<unsigned long long>(st["mapped_records_read"].get<uint64_t>()),
               static_cast<unsigned long long>(st["records_read"].get<uint64_t>()),
               static_cast<unsigned long long>(st["read_path_switches"].get<uint64_t>()),
               static_cast<unsigned long long>(st["device_pulls"].get<uint64_t>()),
               static_cast<unsigned long long>(st["device_read_switches"].get<uint64_t>()));
}

}  // namespace
}  // namespace ctrbox
