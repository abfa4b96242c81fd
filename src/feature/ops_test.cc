// Every operator of the feature graph against a plain row-at-a-time reference written
// independently (ops_test_reference.h), on random rows parsed from CSV text; and the three
// schedules — sequential, layered on the reader's thread, layered over a pool — giving the
// same columns bit for bit.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "feature/extractor.h"
#include "feature/ops_test_reference.h"
#include "util/hash.h"
#include "util/mem_env.h"
#include "util/random.h"

namespace ctrbox {
namespace {

using namespace ops_test;  // NOLINT(build/namespaces): the graph, its rows and reference

Status WriteStringToFile(Env* env, const std::string& data, const std::string& path) {
  return WriteFileAtomic(env, path, data);
}

class OpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.CreateDirs("/v").IgnoreError();
    ASSERT_TRUE(WriteStringToFile(&env_, SideCsv(), "/v/side.csv").ok());
    auto plan = ParseFeatures(YAML::Load(kGraph), "ops.yaml");
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan_ = *plan;
  }
  std::shared_ptr<Extractor> Open(Schedule schedule, int threads,
                                  FeatureDevice device = FeatureDevice::kCpu, bool fused = true) {
    Extractor::Options o;
    o.schedule = schedule;
    o.layer_threads = threads;
    o.device = device;
    o.fused = fused;
    DataOptions main;
    main.paths = {"/v/main.csv"};
    auto x = Extractor::Open(&env_, plan_, main, o);
    EXPECT_TRUE(x.ok()) << x.status().ToString();
    return x.ok() ? *x : nullptr;
  }
  MemEnv env_;
  std::shared_ptr<const FeaturePlan> plan_;
};

// The value of a column at row r, as a Ref (lists and keys by content).
Ref Got(const Column& c, uint32_t r) {
  if (!c.valid[r]) return Null();
  Ref x;
  x.null = false;
  switch (c.type) {
    case ColType::kInt:
    case ColType::kMask:
      x.i = c.ints()[r];
      break;
    case ColType::kFloat:
      x.f = c.floats()[r];
      break;
    case ColType::kString:
      x.s = std::string(c.strs()[r].view());
      break;
    case ColType::kList:
      for (uint32_t k = 0; k < c.lists()[r].n; ++k) x.list.emplace_back(c.lists()[r].p[k].view());
      break;
    case ColType::kKeys:
    case ColType::kHashed:
      x.keys.assign(c.keys()[r].p, c.keys()[r].p + c.keys()[r].n);
      break;
    case ColType::kTag:
      x.keys = {c.tags()[r].lo, c.tags()[r].hi};
      break;
  }
  return x;
}

void ExpectSame(const Ref& want, const Ref& got, const std::string& what) {
  ASSERT_EQ(want.null, got.null) << what;
  if (want.null) return;
  EXPECT_EQ(want.i, got.i) << what;
  EXPECT_EQ(std::bit_cast<uint64_t>(want.f), std::bit_cast<uint64_t>(got.f))
      << what << ": " << want.f << " vs " << got.f;
  EXPECT_EQ(want.s, got.s) << what;
  EXPECT_EQ(want.list, got.list) << what;
  EXPECT_EQ(want.keys, got.keys) << what;
}

TEST_F(OpsTest, EveryOperatorMatchesTheRowAtATimeReference) {
  const std::vector<Row> rows = RandomRows(7, 3000);
  ASSERT_TRUE(WriteStringToFile(&env_, ToCsv(rows), "/v/main.csv").ok());
  auto x = Open(Schedule::kLayered, 0);
  ASSERT_NE(x, nullptr);
  TextChunk chunk;
  ASSERT_TRUE(ReadFileToString(&env_, "/v/main.csv", &chunk.data).ok());
  chunk.file = "/v/main.csv";
  Arena arena;
  ColumnTable t;
  ParseOutcome outcome;
  ASSERT_TRUE(x->ParseMain(chunk, &arena, &t, &outcome).ok());
  ASSERT_EQ(t.rows, rows.size());  // every generated row is well-formed CSV
  ASSERT_TRUE(x->RunGraph(&t, &arena).ok());

  const FeaturePlan& p = *plan_;
  auto col = [&](const std::string& name) -> const Column& {
    const int c = p.FindColumn(name);
    EXPECT_GE(c, 0) << name;
    return t.cols[c];
  };
  auto op_index = [&](const std::string& name) {
    for (size_t k = 0; k < p.ops.size(); ++k) {
      if (p.ops[k].name == name) return static_cast<int>(k);
    }
    ADD_FAILURE() << name;
    return -1;
  };
  const SideRows side = SideById();
  int errors_seen = 0, joined = 0, filtered_in = 0;
  for (uint32_t r = 0; r < t.rows; ++r) {
    const Row& w = rows[r];
    const std::string at = "row " + std::to_string(r);
    std::map<std::string, Ref> want = RowAtATime(w, side);
    filtered_in +=
        want["filter#13"].i && want["filter#14"].i && want["filter#15"].i && want["filter#16"].i;
    joined += side.contains(w.side);

    // The lowest operator that failed marks the row.
    int first_error = 0;
    for (auto& [name, ref] : want) {
      if (ref.error) {
        const int k = op_index(name) + 1;
        if (first_error == 0 || k < first_error) first_error = k;
        continue;
      }
      ExpectSame(ref, Got(col(name), r), at + " " + name);
    }
    EXPECT_EQ(t.errors[r], static_cast<uint32_t>(first_error)) << at;
    errors_seen += first_error != 0;
    if (HasFatalFailure()) return;
  }
  // Dedupe: equal (s, i) values, equal tags; different, different.
  const Column& tags = t.cols[p.ops[op_index("dedupe#17")].output];
  std::map<std::pair<std::string, std::optional<int64_t>>, std::pair<uint64_t, uint64_t>> seen;
  std::set<std::pair<uint64_t, uint64_t>> distinct;
  for (uint32_t r = 0; r < t.rows; ++r) {
    const auto tag = std::make_pair(tags.tags()[r].lo, tags.tags()[r].hi);
    auto [it, fresh] = seen.emplace(std::make_pair(rows[r].s, rows[r].i), tag);
    if (!fresh) {
      EXPECT_EQ(it->second, tag) << r;
    } else {
      EXPECT_TRUE(distinct.insert(tag).second) << r;
    }
  }
  // The random rows reach every branch.
  EXPECT_GT(errors_seen, 50);
  EXPECT_GT(joined, 1000);
  EXPECT_LT(joined, 2800);
  EXPECT_GT(filtered_in, 50);
}

TEST_F(OpsTest, SequentialLayeredAndPooledSchedulesGiveTheSameBatches) {
  const std::vector<Row> rows = RandomRows(11, 5000);
  ASSERT_TRUE(WriteStringToFile(&env_, ToCsv(rows), "/v/main.csv").ok());
  TextChunk chunk;
  ASSERT_TRUE(ReadFileToString(&env_, "/v/main.csv", &chunk.data).ok());
  chunk.file = "/v/main.csv";
  // Sequential; layered on one thread; layered over 3; the fixed-width operators on the
  // emulated GPU, one launch per layer and one per operator.
  struct Mode {
    Schedule schedule;
    int threads;
    FeatureDevice device;
    bool fused;
  };
  const Mode modes[] = {{Schedule::kSequential, 0, FeatureDevice::kCpu, true},
                        {Schedule::kLayered, 0, FeatureDevice::kCpu, true},
                        {Schedule::kLayered, 3, FeatureDevice::kCpu, true},
                        {Schedule::kLayered, 0, FeatureDevice::kEmulatedGpu, true},
                        {Schedule::kLayered, 0, FeatureDevice::kEmulatedGpu, false}};
  const int n = std::size(modes);
  std::vector<ChunkParseResult> results(n);
  std::vector<ExtractTotals> totals(n);
  for (int m = 0; m < n; ++m) {
    auto x = Open(modes[m].schedule, modes[m].threads, modes[m].device, modes[m].fused);
    ASSERT_NE(x, nullptr);
    x->ExtractChunk(chunk, &results[m]);
    ASSERT_TRUE(results[m].status.ok()) << results[m].status.ToString();
    totals[m] = x->totals();
  }
  // The device ran the graph's fixed-width operators: one launch for each layer that has
  // some, or one per operator.
  int fixed_layers = 0, fixed_ops = 0;
  for (const auto& layer : plan_->layers) {
    int k = 0;
    for (int id : layer) k += IsFixedOp(*plan_, plan_->ops[id]);
    fixed_layers += k > 0;
    fixed_ops += k;
  }
  EXPECT_GE(fixed_ops, 14);
  EXPECT_LT(fixed_layers, fixed_ops);
  EXPECT_EQ(totals[3].device_launches, static_cast<uint64_t>(fixed_layers));
  EXPECT_EQ(totals[4].device_launches, static_cast<uint64_t>(fixed_ops));
  EXPECT_EQ(totals[3].device, "emulated GPU (one launch per layer)");
  EXPECT_EQ(totals[0].device, "cpu");
  ASSERT_GT(results[0].batch.rows(), 50u);
  for (int m = 1; m < n; ++m) {
    const Batch& a = results[0].batch;
    const Batch& b = results[m].batch;
    EXPECT_EQ(a.labels, b.labels) << m;
    EXPECT_EQ(a.offsets, b.offsets) << m;
    EXPECT_EQ(a.keys, b.keys) << m;
    ASSERT_EQ(a.dense.size(), b.dense.size());
    EXPECT_EQ(0, std::memcmp(a.dense.data(), b.dense.data(), a.dense.size() * sizeof(float)));
    EXPECT_EQ(results[0].counts.good, results[m].counts.good);
    EXPECT_EQ(results[0].counts.bad, results[m].counts.bad);
    EXPECT_EQ(results[0].row_tags, results[m].row_tags);
  }
  // Bad rows are counted by the kind of the operator that failed, with file and line.
  const RecordCounts& c = results[0].counts;
  EXPECT_GT(c.bad[static_cast<int>(BadKind::kBadNumber)], 0u);
  EXPECT_GT(c.bad[static_cast<int>(BadKind::kBadJson)], 0u);
  ASSERT_FALSE(results[0].samples.empty());
  EXPECT_EQ(results[0].samples[0].file, "/v/main.csv");
  EXPECT_GT(results[0].samples[0].line, 1u);
}

// The CUDA layers against the CPU, bit for bit (log1p aside: the device's math library may
// round its last bit otherwise; the rows' dense values are compared as the floats they become).
TEST_F(OpsTest, CudaLayersMatchTheCpu) {
  auto device = NewCudaDeviceLayers(true);
  if (!device.ok()) GTEST_SKIP() << device.status().message();
  const std::vector<Row> rows = RandomRows(13, 20000);
  ASSERT_TRUE(WriteStringToFile(&env_, ToCsv(rows), "/v/main.csv").ok());
  TextChunk chunk;
  ASSERT_TRUE(ReadFileToString(&env_, "/v/main.csv", &chunk.data).ok());
  chunk.file = "/v/main.csv";
  ChunkParseResult cpu, gpu, unfused;
  Open(Schedule::kLayered, 0)->ExtractChunk(chunk, &cpu);
  auto x = Open(Schedule::kLayered, 0, FeatureDevice::kCuda, true);
  ASSERT_NE(x, nullptr);
  x->ExtractChunk(chunk, &gpu);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
  Open(Schedule::kLayered, 0, FeatureDevice::kCuda, false)->ExtractChunk(chunk, &unfused);
  ASSERT_TRUE(unfused.status.ok()) << unfused.status.ToString();
  for (const ChunkParseResult* r : {&gpu, &unfused}) {
    EXPECT_EQ(cpu.batch.labels, r->batch.labels);
    EXPECT_EQ(cpu.batch.offsets, r->batch.offsets);
    EXPECT_EQ(cpu.batch.keys, r->batch.keys);
    ASSERT_EQ(cpu.batch.dense.size(), r->batch.dense.size());
    for (size_t i = 0; i < cpu.batch.dense.size(); ++i) {
      EXPECT_FLOAT_EQ(cpu.batch.dense[i], r->batch.dense[i]) << i;  // within 4 ulps
    }
    EXPECT_EQ(cpu.counts.bad, r->counts.bad);
  }
  EXPECT_NE(x->totals().device.find("one launch per layer"), std::string::npos);
}

}  // namespace
}  // namespace ctrbox
