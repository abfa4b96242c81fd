// The feature graph's YAML: layers, and every refusal with the YAML line.
#include "feature/graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "feature/op_spec.h"

namespace ctrbox {
namespace {

using ::testing::HasSubstr;

constexpr const char* kMain = R"(
main:
  format: csv
  columns: {a: int, b: string, c: float, y: int}
views:
  v:
    paths: [v.csv]
    columns: {id: string, w: int}
    key: id
)";

StatusOr<std::shared_ptr<const FeaturePlan>> Parse(const std::string& rest) {
  return ParseFeatures(YAML::Load(std::string(kMain) + rest), "job.yaml");
}

std::string Error(const std::string& rest) {
  auto p = Parse(rest);
  return p.ok() ? "OK" : p.status().message();
}

TEST(FeatureGraphTest, LayersFollowDepth) {
  auto p = Parse(R"(
ops:
  - {name: x, op: cross, inputs: [bb, v.w]}
  - {op: join, view: v, on: b}
  - {name: bb, op: bucketize, input: c, boundaries: [1, 2]}
  - {name: l, op: log, input: a}
label: y
slots: [x, b]
dense: [l]
)");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const FeaturePlan& plan = **p;
  // Layer 1: the join and bucketize and log; layer 2: the join's gathers; layer 3: the cross.
  ASSERT_EQ(plan.layers.size(), 3u);
  auto names = [&](int l) {
    std::vector<std::string> n;
    for (int i : plan.layers[l]) n.push_back(plan.ops[i].name);
    return n;
  };
  EXPECT_THAT(names(0), ::testing::UnorderedElementsAre("join v", "bb", "l"));
  EXPECT_THAT(names(1), ::testing::UnorderedElementsAre("v.id", "v.w"));
  EXPECT_THAT(names(2), ::testing::ElementsAre("x"));
  // The sequential order is topological.
  std::vector<int> pos(plan.ops.size());
  for (size_t k = 0; k < plan.topo.size(); ++k) pos[plan.topo[k]] = static_cast<int>(k);
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    for (int c : plan.ops[i].inputs) {
      const int producer = plan.columns[c].producer;
      if (producer >= 0) {
        EXPECT_LT(pos[producer], pos[i]);
      }
    }
  }
  EXPECT_EQ(plan.columns[plan.FindColumn("x")].type, ColType::kHashed);
  EXPECT_NE(plan.Describe().find("layer 3: x=cross(bb, v.w)"), std::string::npos)
      << plan.Describe();
}

TEST(FeatureGraphTest, RefusalsNameTheYamlLine) {
  // Lines: kMain is 9 lines (a leading newline, then 8), so `ops:` is line 10.
  EXPECT_THAT(Error("ops:\n  - {name: x, op: log, input: nope}\nlabel: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: operator log ('x'): unknown column 'nope'"));
  EXPECT_THAT(Error("ops:\n  - {name: x, op: logg, input: a}\nlabel: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: unknown operator 'logg'"));
  EXPECT_THAT(Error("ops:\n  - {name: x, op: split, input: a, sep: ','}\nlabel: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: operator split ('x'): input 'a' is int, "
                        "expected string"));
  EXPECT_THAT(
      Error("ops:\n  - {name: x, op: log, input: z}\n  - {name: z, op: log, input: x}\n"
            "label: y\nslots: [a]\n"),
      HasSubstr("job.yaml:11: features: the operators form a cycle (or depend on one): x, z"));
  EXPECT_THAT(Error("ops:\n  - {name: a, op: log, input: c}\nlabel: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: the column 'a' is made twice"));
  EXPECT_THAT(Error("ops:\n  - {op: join, view: v, on: a}\nlabel: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: join v: 'a' is int, but the view's key column "
                        "'id' is string"));
  EXPECT_THAT(Error("ops:\n  - {op: join, view: w, on: b}\nlabel: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: join: no view named 'w'"));
  EXPECT_THAT(Error("ops:\n  - {name: x, op: log, input: a, base: 2}\nlabel: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: unknown key 'base' in operator log"));
  EXPECT_THAT(Error("ops:\n  - {name: x, op: bucketize, input: a, boundaries: [2, 1]}\n"
                    "label: y\nslots: [a]\n"),
              HasSubstr("job.yaml:11: features: boundaries must be strictly increasing"));
  EXPECT_THAT(Error("label: b\nslots: [a]\n"),
              HasSubstr("job.yaml:10: features: label: 'b' is string, expected int or float"));
  EXPECT_THAT(Error("label: y\nslots: [a, nope]\n"),
              HasSubstr("job.yaml:11: features: slots: unknown column 'nope'"));
  EXPECT_THAT(Error("label: y\nslots: [a]\ndense: [b]\n"),
              HasSubstr("job.yaml:12: features: dense: 'b' is string, expected int or float"));
  EXPECT_THAT(Error("ops:\n  - {name: x, op: fill_null, input: a, value: abc}\nlabel: y\n"
                    "slots: [a]\n"),
              HasSubstr("job.yaml:11: features: fill_null ('x'): value 'abc' is not a number"));
  EXPECT_THAT(Error("label: y\n"), HasSubstr("features needs `slots`"));
  EXPECT_THAT(
      ParseFeatures(YAML::Load("main: {format: xml, columns: {a: int}}\nlabel: a\nslots: [a]\n"),
                    "j.yaml")
          .status()
          .message(),
      HasSubstr("j.yaml:1: features: main.format 'xml': expected csv, tsv or jsonl"));
  EXPECT_EQ(Error("ops:\n  - {op: join, view: v, on: b, as: u}\nlabel: y\nslots: [u.w]\n"), "OK");
}

TEST(FeatureGraphTest, FingerprintChangesWithTheGraph) {
  auto a = Parse("ops:\n  - {name: x, op: clip, input: a, min: 0, max: 5}\nlabel: y\nslots: [x]\n");
  auto b = Parse("ops:\n  - {name: x, op: clip, input: a, min: 0, max: 6}\nlabel: y\nslots: [x]\n");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->Fingerprint(), (*b)->Fingerprint());
  EXPECT_EQ((*a)->Fingerprint(), (*Parse("ops:\n  - {name: x, op: clip, input: a, min: 0, max: 5}"
                                         "\nlabel: y\nslots: [x]\n"))
                                     ->Fingerprint());
}

}  // namespace
}  // namespace ctrbox

namespace ctrbox {
namespace {

// The registry (op_list.h): every operator a job file can name is found by its name, takes
// the keys its spec lists and no others, and has a type rule and rows on the CPU or the GPU.
TEST(OpRegistryTest, EveryOperatorIsFoundByItsNameAndComplete) {
  const std::vector<std::string> written = {
      "fill_null", "cast",  "json_field", "filter",    "dedupe", "join", "hash",      "cross",
      "bucketize", "split", "last_n",     "time_part", "log",    "clip", "normalize", "parse_time"};
  for (const std::string& name : written) {
    OpKind kind;
    const OpSpec* spec = FindSpec(name, &kind);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_EQ(OpKindName(kind), name);
    EXPECT_EQ(&SpecOf(kind), spec);
    EXPECT_NE(spec->parse, nullptr) << name;
    EXPECT_NE(spec->type, nullptr) << name;
    EXPECT_TRUE(spec->rows != nullptr || spec->fixed != nullptr) << name;
    EXPECT_THAT(Error("ops:\n  - {name: x, op: " + name + ", nope: 1}\nlabel: y\nslots: [a]\n"),
                HasSubstr("unknown key 'nope' in operator " + name));
  }
  OpKind kind;
  EXPECT_EQ(FindSpec("gather", &kind), nullptr);  // made by a join, never written
  EXPECT_EQ(KnownOpNames(),
            "bucketize, cast, clip, cross, dedupe, fill_null, filter, hash, join, json_field, "
            "last_n, log, normalize, parse_time, split, time_part");
}

}  // namespace
}  // namespace ctrbox
