// The extract stage as a reader over generated views: any thread count, chunk size and
// schedule give the same rows; filter, dedupe and join counts match the files; bad rows are
// counted by kind and obey the error rate.
#include "feature/extractor.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <set>

#include "feature/view_gen.h"
#include "io/test_util.h"
#include "util/mem_env.h"

namespace ctrbox {
namespace {

struct Read {
  Batch all;
  RecordCounts counts;
  Status status;
};

class ExtractorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ViewGenOptions o;
    o.rows = 6000;
    o.test_rows = 500;
    o.users = 700;
    o.ads = 300;
    auto r = GenerateViews(&env_, "/views", o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::string yaml;
    ASSERT_TRUE(ReadFileToString(&env_, "/views/job.yaml", &yaml).ok());
    yaml_ = YAML::Load(yaml);
    auto plan = ParseFeatures(yaml_["features"], "/views/job.yaml");
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan_ = *plan;
  }

  Read ReadAll(int threads, size_t chunk_bytes, Schedule schedule, int layer_threads = 0,
               double max_error_rate = 0.01, FeatureDevice device = FeatureDevice::kCpu) {
    Read out;
    Extractor::Options xo;
    xo.device = device;
    xo.schedule = schedule;
    xo.layer_threads = layer_threads;
    xo.bad_input.max_error_rate = max_error_rate;
    DataOptions d;
    d.paths = {"/views/impressions.csv"};
    d.threads = threads;
    d.chunk_bytes = chunk_bytes;
    d.bad_input.max_error_rate = max_error_rate;
    auto x = Extractor::Open(&env_, plan_, d, xo);
    if (!x.ok()) {
      out.status = x.status();
      return out;
    }
    extractor_ = *x;
    auto reader = OpenFeatureReader(&env_, d, extractor_);
    if (!reader.ok()) {
      out.status = reader.status();
      return out;
    }
    out.all.Reset((*reader)->schema());
    while (true) {
      Batch b;
      bool eof = false;
      out.status = (*reader)->Next(&b, &eof);
      if (!out.status.ok() || eof) break;
      out.all.AppendRows(b, 0, b.rows());
    }
    out.counts = (*reader)->counts();
    return out;
  }

  MemEnv env_;
  YAML::Node yaml_;
  std::shared_ptr<const FeaturePlan> plan_;
  std::shared_ptr<Extractor> extractor_;
};

void ExpectSameRows(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.keys, b.keys);
  ASSERT_EQ(a.dense.size(), b.dense.size());
  EXPECT_EQ(0, std::memcmp(a.dense.data(), b.dense.data(), a.dense.size() * sizeof(float)));
}

TEST_F(ExtractorTest, AnyThreadsChunksAndScheduleGiveTheSameRows) {
  Read ref = ReadAll(1, 4 << 20, Schedule::kSequential);
  ASSERT_TRUE(ref.status.ok()) << ref.status.ToString();
  ASSERT_GT(ref.all.rows(), 5000u);
  EXPECT_EQ(ref.all.schema.num_slots, 14u);
  EXPECT_EQ(ref.all.schema.num_dense, 2u);
  for (auto [threads, chunk, schedule, layer] :
       {std::tuple{3, size_t{64} << 10, Schedule::kLayered, 0},
        std::tuple{2, size_t{20} << 10, Schedule::kLayered, 3},
        std::tuple{1, size_t{4} << 20, Schedule::kLayered, 0}}) {
    Read r = ReadAll(threads, chunk, schedule, layer);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    SCOPED_TRACE(::testing::Message() << threads << " threads, " << chunk << " bytes");
    ExpectSameRows(ref.all, r.all);
    EXPECT_EQ(ref.counts.good, r.counts.good);
  }
  // The fixed-width operators on the emulated GPU, over 3 reader threads (each with its own
  // device layers).
  Read gpu = ReadAll(3, 64 << 10, Schedule::kLayered, 0, 0.01, FeatureDevice::kEmulatedGpu);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
  ExpectSameRows(ref.all, gpu.all);
  EXPECT_GT(extractor_->totals().device_launches, 0u);
}

TEST_F(ExtractorTest, FilterDedupeAndJoinCountsMatchTheFiles) {
  Read r = ReadAll(2, 32 << 10, Schedule::kLayered);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // Count from the text: a line equal to the one before it is a logged-twice impression
  // (dedupe on instance_id drops it); bot lines are filtered, whichever comes first.
  std::string text;
  ASSERT_TRUE(ReadFileToString(&env_, "/views/impressions.csv", &text).ok());
  std::set<std::string> ids;
  uint64_t lines = 0, bots = 0, dups = 0, unknown_users = 0;
  size_t pos = text.find('\n') + 1;  // past the header
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lines;
    const bool bot = line.find("\"\"bot\"\"") != std::string::npos;
    const std::string id = line.substr(0, line.find(','));
    if (bot) {
      ++bots;  // the filter is applied before dedupe's in-order step
      continue;
    }
    if (!ids.insert(id).second) {
      ++dups;
      continue;
    }
    const std::string user = line.substr(line.find(",u") + 2, 7);
    unknown_users += std::stoul(user) >= 700;
  }
  const ExtractTotals t = extractor_->totals();
  EXPECT_EQ(t.rows_in, lines);
  EXPECT_EQ(t.filtered, bots);
  EXPECT_EQ(t.duplicates, dups);
  EXPECT_GT(dups, 5u);
  EXPECT_EQ(t.rows_out, lines - bots - dups);
  EXPECT_EQ(r.all.rows(), t.rows_out);
  ASSERT_EQ(t.join_lookups.size(), 2u);  // users, ads
  EXPECT_EQ(t.join_lookups[0], lines);
  EXPECT_GT(t.join_lookups[0] - t.join_hits[0], 50u);  // 2 % unknown users
  EXPECT_EQ(t.join_hits[1], lines);                    // every ad is known
  EXPECT_GT(unknown_users, 50u);
  EXPECT_EQ(t.side_rows, 1000u);
}

TEST_F(ExtractorTest, BadRowsAreCountedByKindAndObeyTheErrorRate) {
  std::string text;
  ASSERT_TRUE(ReadFileToString(&env_, "/views/impressions.csv", &text).ok());
  // Line 3: malformed JSON in ctx; line 5: a ts that is not a number; line 7: a field too
  // few; line 9: label 2.
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  auto replace = [](std::string* s, const std::string& from, const std::string& to) {
    const size_t at = s->find(from);
    ASSERT_NE(at, std::string::npos) << *s;
    s->replace(at, from.size(), to);
  };
  replace(&lines[2], "{\"\"device\"\": \"\"", "{\"\"device\"\": ");
  replace(&lines[4], ",17", ",x17");
  lines[6] = lines[6].substr(0, lines[6].rfind(','));
  lines[8] = lines[8].substr(0, lines[8].rfind(',')) + ",2";
  std::string bad;
  for (const auto& l : lines) bad += l + "\n";
  ASSERT_TRUE(WriteFileAtomic(&env_, "/views/impressions.csv", bad).ok());

  Read r = ReadAll(2, 16 << 10, Schedule::kLayered);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.counts.bad[static_cast<int>(BadKind::kBadJson)], 1u);
  EXPECT_EQ(r.counts.bad[static_cast<int>(BadKind::kBadNumber)], 1u);
  EXPECT_EQ(r.counts.bad[static_cast<int>(BadKind::kFieldCount)], 1u);
  EXPECT_EQ(r.counts.bad[static_cast<int>(BadKind::kBadLabel)], 1u);

  Read strict = ReadAll(2, 16 << 10, Schedule::kLayered, 0, /*max_error_rate=*/0.0);
  ASSERT_FALSE(strict.status.ok());
  EXPECT_EQ(strict.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(strict.status.message().find("/views/impressions.csv:3"), std::string::npos)
      << strict.status.message();
}

TEST_F(ExtractorTest, SideViewBadRowsAndDuplicateKeysAreCounted) {
  std::string users;
  ASSERT_TRUE(ReadFileToString(&env_, "/views/users.csv", &users).ok());
  users += "u0000001,33,f,city1,cat1\n";   // a key seen before: the first row is kept
  users += "u0000999,old,f,city1,cat1\n";  // age is not an int
  ASSERT_TRUE(WriteFileAtomic(&env_, "/views/users.csv", users).ok());
  Read r = ReadAll(1, 1 << 20, Schedule::kLayered);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const ExtractTotals t = extractor_->totals();
  EXPECT_EQ(t.side_counts.bad[static_cast<int>(BadKind::kDuplicateKey)], 1u);
  EXPECT_EQ(t.side_counts.bad[static_cast<int>(BadKind::kBadNumber)], 1u);
  // Above the error rate the job does not start, naming the view.
  Read strict = ReadAll(1, 1 << 20, Schedule::kLayered, 0, 0.0);
  ASSERT_FALSE(strict.status.ok());
  EXPECT_NE(strict.status.message().find("view users"), std::string::npos)
      << strict.status.message();
}

TEST_F(ExtractorTest, ASideViewCanComeFromACommand) {
  // The user table's rows from a shell command (its output read whole, as a file would be).
  std::string users;
  ASSERT_TRUE(ReadFileToString(&env_, "/views/users.csv", &users).ok());
  testing::TempDir tmp;  // removed however the test ends
  const std::string dir = tmp.path();
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir + "/users.csv", users).ok());
  std::string yaml;
  ASSERT_TRUE(ReadFileToString(&env_, "/views/job.yaml", &yaml).ok());
  const std::string from = "paths: [/views/users.csv]";
  ASSERT_NE(yaml.find(from), std::string::npos);
  yaml.replace(yaml.find(from), from.size(), "command: \"cat " + dir + "/users.csv\"");
  auto plan = ParseFeatures(YAML::Load(yaml)["features"], "job.yaml");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  Read file = ReadAll(1, 1 << 20, Schedule::kLayered);
  ASSERT_TRUE(file.status.ok());
  plan_ = *plan;
  Read command = ReadAll(1, 1 << 20, Schedule::kLayered);
  ASSERT_TRUE(command.status.ok()) << command.status.ToString();
  ExpectSameRows(file.all, command.all);
  EXPECT_EQ(extractor_->totals().side_rows, 1000u);
}

}  // namespace
}  // namespace ctrbox
