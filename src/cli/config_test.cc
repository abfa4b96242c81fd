#include "cli/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include "io/test_util.h"
#include "table/tiered_table.h"
#include "util/memory_box.h"

namespace ctrbox {
namespace {

TEST(ConfigTest, DefaultsAreTheReferenceModel) {
  JobConfigBuilder b;
  auto job = b.Finish();
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec.model.embedding_dim, 16u);
  EXPECT_EQ(job->spec.model.mlp, (std::vector<uint32_t>{512, 256, 128}));
  EXPECT_EQ(job->train.batch_size, 2048u);
  EXPECT_EQ(job->train.epochs, 1u);
  EXPECT_EQ(job->spec.sparse_optimizer.kind, OptimizerKind::kAdagrad);
  EXPECT_FLOAT_EQ(job->spec.sparse_optimizer.lr, 0.05f);
  EXPECT_FLOAT_EQ(job->spec.sparse_optimizer.epsilon, 1e-10f);
  EXPECT_EQ(job->spec.dense_optimizer.kind, OptimizerKind::kAdam);
  EXPECT_FLOAT_EQ(job->spec.dense_optimizer.lr, 1e-3f);
  EXPECT_FLOAT_EQ(job->spec.dense_optimizer.epsilon, 1e-8f);
  EXPECT_FALSE(job->spec.model.wide);
}

TEST(ConfigTest, RequiredSetKeysExistAndParse) {
  JobConfigBuilder b;
  for (const char* s : {"train.threads=3", "train.seed=9", "train.deterministic=true",
                        "train.batch_size=512", "train.epochs=2", "model.embedding_dim=8",
                        "model.mlp=64,32", "optimizer.sparse.lr=0.1", "optimizer.dense.lr=0.01"}) {
    ASSERT_TRUE(b.ApplySet(s).ok()) << s;
  }
  auto job = b.Finish();
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->train.threads, 3);
  EXPECT_EQ(job->train.seed, 9u);
  EXPECT_TRUE(job->train.deterministic);
  EXPECT_EQ(job->spec.model.mlp, (std::vector<uint32_t>{64, 32}));
  EXPECT_FLOAT_EQ(job->spec.dense_optimizer.lr, 0.01f);
}

TEST(ConfigTest, UnknownKeysAndBadValuesNameTheKey) {
  JobConfigBuilder b;
  Status s = b.ApplySet("model.embeding_dim=8");
  EXPECT_NE(s.message().find("unknown configuration key 'model.embeding_dim'"), std::string::npos);
  s = b.ApplySet("train.threads=zero");
  EXPECT_NE(s.message().find("bad value 'zero' for train.threads"), std::string::npos)
      << s.message();
  s = b.ApplySet("model.mlp=512,,128");
  EXPECT_NE(s.message().find("model.mlp"), std::string::npos);
  s = b.ApplySet("optimizer.sparse.type=rmsprop");
  EXPECT_NE(s.message().find("adagrad, rowwise_adagrad, sgd or adam"), std::string::npos)
      << s.message();
  // Row-wise Adagrad is for sparse rows only.
  ASSERT_TRUE(b.ApplySet("optimizer.sparse.type=rowwise_adagrad").ok());
  s = b.ApplySet("optimizer.dense.type=rowwise_adagrad");
  EXPECT_NE(s.message().find("optimizer.dense.type"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("adam, adagrad or sgd"), std::string::npos) << s.message();
  // The tiered table's ranges, named both by the key's parser and by TieredOptions::Validate.
  struct Range {
    const char* set;                          // a value out of the key's range
    std::function<void(TieredOptions*)> bad;  // the same in TieredOptions
    const char* message;                      // Validate's words
  };
  const Range ranges[] = {
      {"storage.delta_share=0", [](TieredOptions* t) { t->delta_share = 5; },
       "storage.delta_share must be in (0, 4]"},
      {"storage.lfu_half_life=0", [](TieredOptions* t) { t->lfu_half_life = 0; },
       "storage.lfu_half_life must be in (0, 1e6]"},
      {"storage.dirty_weight=0.5", [](TieredOptions* t) { t->dirty_weight = 0.5; },
       "storage.dirty_weight must be in [1, 1e6]"},
  };
  for (const Range& r : ranges) {
    const std::string key(r.set, std::string_view(r.set).find('='));
    s = b.ApplySet(r.set);
    EXPECT_NE(s.message().find(key), std::string::npos) << s.message();
    TieredOptions t;
    t.ssd.dir = "/ssd";
    t.ssd.group_bits = 10;
    t.memory_budget = 1 << 20;
    ASSERT_TRUE(t.Validate().ok()) << t.Validate().ToString();
    r.bad(&t);
    EXPECT_NE(t.Validate().message().find(r.message), std::string::npos) << t.Validate().ToString();
  }
  s = b.ApplySet("noequals");
  EXPECT_FALSE(s.ok());
}

// The SSD tier's groups follow the budget (2^G, G = log2(budget / 1920), clamped to [10, 28]),
// unless storage.group_bits sets them.
TEST(ConfigTest, GroupBitsFollowTheBudget) {
  auto bits = [](const std::vector<std::string>& sets) -> uint32_t {
    JobConfigBuilder b;
    EXPECT_TRUE(b.ApplySet("storage.ssd_dir=/ssd").ok());
    for (const std::string& kv : sets) EXPECT_TRUE(b.ApplySet(kv).ok()) << kv;
    auto job = b.Finish();
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->storage.ssd.group_bits : 0;
  };
  EXPECT_EQ(bits({"storage.memory_budget=255829129"}), 17u);  // 2^17 x 1920 <= it < 2^18 x 1920
  EXPECT_EQ(bits({"storage.memory_budget=251658240"}), 17u);  // 2^17 x 1920 exactly
  EXPECT_EQ(bits({"storage.memory_budget=251658239"}), 16u);
  EXPECT_EQ(bits({"storage.memory_budget=1500MB"}), 19u);
  EXPECT_EQ(bits({"storage.memory_budget=1MB"}), 10u);  // the floor
  EXPECT_EQ(bits({"storage.memory_budget=255829129", "storage.group_bits=12"}), 12u);
}

// storage.memory_budget as a share of the job's memory box: that share of the box's bytes (the
// group bits follow it as they follow bytes); bytes again clear the share; shares outside
// (0 %, 100 %] and malformed ones name the key and say what is expected.
TEST(ConfigTest, TheMemoryBudgetMayBeAShareOfTheMemoryBox) {
  const MemoryBox box = FindMemoryBox();
  ASSERT_GT(box.limit, 0u) << "no physical memory known here";
  JobConfigBuilder b;
  ASSERT_TRUE(b.ApplySet("storage.ssd_dir=/ssd").ok());
  ASSERT_TRUE(b.ApplySet("storage.memory_budget=45%").ok());
  auto job = b.Finish();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->storage.memory_budget,
            static_cast<uint64_t>(static_cast<double>(box.limit) * 0.45));
  EXPECT_EQ(job->settings_given.at("storage.memory_budget"), "45%");
  uint32_t bits = 0;
  while ((uint64_t{1} << (bits + 1)) * 1920 <= job->storage.memory_budget) ++bits;
  EXPECT_EQ(job->storage.ssd.group_bits, std::clamp<uint32_t>(bits, 10, 28));

  JobConfigBuilder bytes;
  ASSERT_TRUE(bytes.ApplySet("storage.ssd_dir=/ssd").ok());
  ASSERT_TRUE(bytes.ApplySet("storage.memory_budget=12.5%").ok());
  ASSERT_TRUE(bytes.ApplySet("storage.memory_budget=256MB").ok());
  job = bytes.Finish();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->storage.memory_budget, uint64_t{256} << 20);

  for (const char* bad : {"0%", "100.5%", "-5%", "%", "half%", "45 %%", "lots"}) {
    JobConfigBuilder c;
    const Status s = c.ApplySet(std::string("storage.memory_budget=") + bad);
    EXPECT_NE(s.message().find("storage.memory_budget"), std::string::npos) << bad;
    EXPECT_NE(s.message().find("memory box"), std::string::npos) << bad << ": " << s.message();
  }
}

// pipeline.queue_depth 0 (passes handed on without queues) shares the pass memory and the key
// window among fewer passes, and the LFU half-life, counted in pulls, then defaults to 32
// instead of 64; storage.lfu_half_life set keeps its value.
TEST(ConfigTest, PassesHandedOnWithoutQueuesAgeTheCacheByHalfAsManyPulls) {
  auto job = [](const std::vector<std::string>& sets) -> JobConfig {
    JobConfigBuilder b;
    for (const std::string& kv : sets) EXPECT_TRUE(b.ApplySet(kv).ok()) << kv;
    auto j = b.Finish();
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : JobConfig();
  };
  const JobConfig in_memory = job({});
  EXPECT_EQ(in_memory.pipeline.queue_depth, 1u);
  EXPECT_EQ(in_memory.StorageFor({}).lfu_half_life, 64);
  const std::vector<std::string> budget = {"storage.ssd_dir=/ssd", "storage.memory_budget=256MB"};
  const JobConfig budgeted = job(budget);
  EXPECT_EQ(budgeted.pipeline.queue_depth, 1u);
  EXPECT_EQ(budgeted.PassOptions().window_passes, 5u);
  EXPECT_EQ(budgeted.PassOptions().memory_passes, 7u);
  EXPECT_EQ(budgeted.StorageFor({}).lfu_half_life, 64);
  std::vector<std::string> sets = budget;
  sets.push_back("pipeline.queue_depth=0");
  EXPECT_EQ(job(sets).pipeline.queue_depth, 0u);
  EXPECT_EQ(job(sets).PassOptions().window_passes, 3u);
  EXPECT_EQ(job(sets).PassOptions().memory_passes, 4u);
  EXPECT_EQ(job(sets).StorageFor({}).lfu_half_life, 32);
  sets.push_back("storage.lfu_half_life=64");
  EXPECT_EQ(job(sets).StorageFor({}).lfu_half_life, 64);
}

// A key renamed by the glossary (docs/architecture.md, "Words") still sets its new key, from
// --set and from a job file alike; `ctrbox config` lists the new name only.
TEST(ConfigTest, RenamedKeysStillSetTheirNewKeys) {
  for (const char* old_name : {"gpu.pass_memory", "table.shard_bits"}) {
    SCOPED_TRACE(old_name);
    JobConfigBuilder b;
    const std::string value = std::string(old_name) == "gpu.pass_memory" ? "6MB" : "5";
    ASSERT_TRUE(b.ApplySet(std::string(old_name) + "=" + value).ok());
    auto job = b.Finish();
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    if (std::string(old_name) == "gpu.pass_memory") {
      EXPECT_EQ(job->gpu_options.staged_memory, uint64_t{6} << 20);
      EXPECT_TRUE(b.was_set("gpu.staged_memory"));
    } else {
      EXPECT_EQ(job->storage.stripe_bits, 5u);
      EXPECT_TRUE(b.was_set("table.stripe_bits"));
    }
    EXPECT_EQ(ConfigReference().find(std::string("`") + old_name + "`"), std::string::npos);
  }
}

TEST(ConfigTest, InteractionKeysComposeAndAreValidated) {
  testing::TempDir dir;
  std::string path = dir.File("dcn.yaml");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path,
                              "model:\n  cross_layers: 3\n  fm: true\n  dot: true\n"
                              "  wide: true\n  mlp: [64]\n")
                  .ok());
  JobConfigBuilder b;
  ASSERT_TRUE(b.LoadYaml(path).ok());
  auto job = b.Finish();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.model.cross_layers, 3u);
  EXPECT_TRUE(job->spec.model.fm);
  EXPECT_TRUE(job->spec.model.dot);
  EXPECT_TRUE(job->spec.model.wide);
  JobConfigBuilder defaults;
  auto plain = defaults.Finish();
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->spec.model.HasInteractions());  // the default model is unchanged

  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, "model:\n  fm: true\n  cross_layers: 99\n").ok());
  JobConfigBuilder bad;
  Status s = bad.LoadYaml(path);
  EXPECT_NE(s.message().find("dcn.yaml:3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("model.cross_layers"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[0, 16]"), std::string::npos) << s.message();
  JobConfigBuilder bad2;
  s = bad2.ApplySet("model.dot=maybe");
  EXPECT_NE(s.message().find("model.dot"), std::string::npos) << s.message();
  JobConfigBuilder bottom;  // DLRM's bottom MLP: z as wide as an embedding
  ASSERT_TRUE(bottom.ApplySet("model.bottom_mlp=64,16").ok());
  auto with_bottom = bottom.Finish();
  ASSERT_TRUE(with_bottom.ok()) << with_bottom.status().ToString();
  EXPECT_EQ(with_bottom->spec.model.bottom_mlp, (std::vector<uint32_t>{64, 16}));
  JobConfig narrow = *with_bottom;
  narrow.spec.model.bottom_mlp = {64, 8};
  EXPECT_NE(narrow.Validate().message().find("model.bottom_mlp must end at model.embedding_dim"),
            std::string::npos)
      << narrow.Validate().message();
}

// model.shared_slots: groups of slots whose equal raw ids are one key.
TEST(ConfigTest, SharedSlotGroupsParseAndAreValidated) {
  JobConfigBuilder shared;
  ASSERT_TRUE(shared.ApplySet("model.shared_slots=0+5, 3+7+9").ok());
  auto with_shared = shared.Finish();
  ASSERT_TRUE(with_shared.ok());
  EXPECT_EQ(with_shared->spec.model.shared_slots,
            (std::vector<std::vector<uint32_t>>{{0, 5}, {3, 7, 9}}));
  EXPECT_EQ(with_shared->spec.model.KeySlotMap(), (KeySlots{0, 1, 2, 3, 4, 0, 6, 3, 8, 3}));
  for (const char* bad_groups : {"0+0", "3", "1+2,2+4", "a+b"}) {
    JobConfigBuilder b3;
    Status st = b3.ApplySet(std::string("model.shared_slots=") + bad_groups);
    EXPECT_NE(st.message().find("model.shared_slots"), std::string::npos) << bad_groups;
  }
}

// AIBox's towers with a dense group each: parsed, and checked by the job and by the data.
TEST(ConfigTest, TowersAndDenseGroupsParseAndAreValidated) {
  auto plain = JobConfigBuilder().Finish();
  ASSERT_TRUE(plain.ok());
  JobConfigBuilder towers;
  ASSERT_TRUE(towers.ApplySet("model.towers=3").ok());
  ASSERT_TRUE(towers.ApplySet("model.dense_groups=0-2, 3+5, 4+6-7").ok());
  auto with_towers = towers.Finish();
  ASSERT_TRUE(with_towers.ok()) << with_towers.status().ToString();
  EXPECT_EQ(with_towers->spec.model.dense_groups,
            (std::vector<std::vector<uint32_t>>{{0, 1, 2}, {3, 5}, {4, 6, 7}}));
  EXPECT_TRUE(with_towers->Validate().ok());
  ASSERT_TRUE(towers.ApplySet("model.tower_mlp=64-32, 32+16+8, 16").ok());
  EXPECT_EQ(towers.Finish()->spec.model.tower_mlp,
            (std::vector<std::vector<uint32_t>>{{64, 32}, {32, 16, 8}, {16}}));
  for (const char* bad_shapes : {"64-0", "a", "64,,32"}) {
    JobConfigBuilder b5;
    Status st = b5.ApplySet(std::string("model.tower_mlp=") + bad_shapes);
    EXPECT_NE(st.message().find("model.tower_mlp"), std::string::npos) << bad_shapes;
  }
  for (const char* bad_groups : {"a", "3-1", "1-", "0,,1"}) {
    JobConfigBuilder b4;
    Status st = b4.ApplySet(std::string("model.dense_groups=") + bad_groups);
    EXPECT_NE(st.message().find("model.dense_groups"), std::string::npos) << bad_groups;
  }
  // Checked by the job: one group per tower, no feature twice, towers need hidden layers.
  for (auto [set, want] : std::vector<std::pair<std::function<void(ModelOptions*)>, std::string>>{
           {[](ModelOptions* m) {
              m->dense_groups = {{0}, {1}};
            },
            "model.towers is not 2"},
           {[](ModelOptions* m) {
              m->towers = 2;
              m->dense_groups = {{0}};
            },
            "one per tower"},
           {[](ModelOptions* m) {
              m->towers = 2;
              m->dense_groups = {{0, 1}, {1}};
            },
            "dense feature 1 twice"},
           {[](ModelOptions* m) {
              m->towers = 2;
              m->mlp = {};
            },
            "needs hidden layers"},
           {[](ModelOptions* m) {
              m->towers = 2;
              m->tower_mlp = {{8}, {4}, {2}};
            },
            "model.tower_mlp has 3 shapes but model.towers is 2"},
           {[](ModelOptions* m) {
              m->towers = 2;
              m->tower_mlp = {{8}, {}};
            },
            "needs a hidden layer"},
           {[](ModelOptions* m) {
              m->towers = 2;
              m->dense_groups = {{0}, {1}};
              m->bottom_mlp = {16};
            },
            "model.bottom_mlp"}}) {
    JobConfig j = *plain;
    set(&j.spec.model);
    EXPECT_NE(j.Validate().message().find(want), std::string::npos) << j.Validate().message();
  }
  {  // Once the data is known: its dense features bound the groups (none: no groups at all).
    ModelOptions m;
    m.towers = 2;
    m.dense_groups = {{0}, {1}};
    EXPECT_EQ(TowersError(m, 2), "");
    EXPECT_NE(TowersError(m, 1).find("names dense feature 1 but the data has 1 (0 to 0)"),
              std::string::npos);
    EXPECT_NE(TowersError(m, 0).find("the data has no dense features"), std::string::npos);
    EXPECT_EQ(TowersError(m, kUnknownDense), "");
  }
}

// DCN-Mix's experts need low-rank cross layers; a rank needs cross layers.
TEST(ConfigTest, CrossExpertsAndRanksAreValidated) {
  auto plain = JobConfigBuilder().Finish();
  ASSERT_TRUE(plain.ok());
  JobConfig experts = *plain;
  experts.spec.model.cross_experts = 4;
  experts.spec.model.cross_layers = 2;
  EXPECT_NE(experts.Validate().message().find("model.cross_experts needs"), std::string::npos)
      << experts.Validate().message();
  experts.spec.model.cross_rank = 16;
  EXPECT_TRUE(experts.Validate().ok()) << experts.Validate().message();
  JobConfig orphan = *plain;  // a rank without cross layers would be ignored
  orphan.spec.model.cross_rank = 32;
  EXPECT_NE(orphan.Validate().message().find("model.cross_layers is 0"), std::string::npos)
      << orphan.Validate().message();
}

// model.slot_dims: slots:dim groups (slots as indices or ranges joined by '+'), a table per
// dimension (table 0: model.embedding_dim's), and the refusals naming the key.
TEST(ConfigTest, SlotDimsParseIntoTablesAndAreValidated) {
  JobConfigBuilder b;
  ASSERT_TRUE(b.ApplySet("model.slot_dims=0-2+5:32, 3:8,7:32").ok());
  auto job = b.Finish();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const ModelOptions& m = job->spec.model;
  EXPECT_EQ(m.slot_dims, (std::vector<SlotDims>{{{0, 1, 2, 5}, 32}, {{3}, 8}, {{7}, 32}}));
  EXPECT_EQ(m.TableDims(), (std::vector<uint32_t>{16, 32, 8}));
  EXPECT_EQ(m.SlotTable(5), 1u);
  EXPECT_EQ(m.SlotTable(3), 2u);
  EXPECT_EQ(m.SlotTable(4), 0u);
  EXPECT_EQ(m.SlotDim(4), 16u);
  EXPECT_EQ(m.MaxDim(), 32u);
  EXPECT_EQ(m.KeyTableMap().slot_table, (std::vector<uint32_t>{1, 1, 1, 2, 0, 1, 0, 1}));
  EXPECT_TRUE(job->Validate().ok());
  const ValueLayout l = CtrModel::LayoutFor(m, job->spec.sparse_optimizer);
  EXPECT_EQ(l.tables, 3u);
  EXPECT_EQ(l.dim, 32u);
  EXPECT_EQ(l.table_dim[2], 8u);
  JobConfigBuilder same;  // every dimension model.embedding_dim's: one table, today's model
  ASSERT_TRUE(same.ApplySet("model.slot_dims=0-3:16").ok());
  EXPECT_FALSE(same.Finish()->spec.model.MultiTable());
  EXPECT_FALSE(same.Finish()->spec.model.KeyTableMap().enabled());
  for (const char* bad : {"0-3", "0-3:0", "a:8", "3-1:8", "0:8,0:16", "0:8,1:9000"}) {
    JobConfigBuilder b2;
    Status st = b2.ApplySet(std::string("model.slot_dims=") + bad);
    EXPECT_NE(st.message().find("model.slot_dims"), std::string::npos)
        << bad << ": " << st.ToString();
  }
  struct Refusal {
    const char* set;
    const char* message;
  };
  for (const Refusal& r : {Refusal{"model.fm=true", "model.fm needs one embedding dimension"},
                           Refusal{"model.dot=true", "model.dot needs one embedding dimension"},
                           Refusal{"model.shared_slots=0+4",
                                   "model.shared_slots groups slots 0 and 4, which share their "
                                   "keys, but model.slot_dims gives them dimensions 32 and 16"}}) {
    JobConfigBuilder b3;
    ASSERT_TRUE(b3.ApplySet("model.slot_dims=0-2:32").ok());
    ASSERT_TRUE(b3.ApplySet(r.set).ok());
    auto j3 = b3.Finish();
    ASSERT_TRUE(j3.ok());
    EXPECT_NE(j3->Validate().message().find(r.message), std::string::npos)
        << j3->Validate().message();
  }
  JobConfigBuilder many;  // at most 16 tables
  std::string dims;
  for (int d = 1; d <= 17; ++d) dims += fmt::format("{}{}:{}", d > 1 ? "," : "", d, d);
  EXPECT_NE(many.ApplySet("model.slot_dims=" + dims).message().find("at most 16"),
            std::string::npos);
}

TEST(ConfigTest, YamlFileWithNestedKeysListsAndLineNumbers) {
  testing::TempDir dir;
  std::string path = dir.File("job.yaml");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path,
                              "data:\n  format: slots\n  num_slots: 4\n  paths: [a.txt, /x/b.txt]\n"
                              "model:\n  mlp: [32, 16]\n  wide: true\n"
                              "optimizer:\n  sparse:\n    type: adam\n")
                  .ok());
  JobConfigBuilder b;
  ASSERT_TRUE(b.LoadYaml(path).ok());
  auto job = b.Finish();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->data.format, DataFormat::kSlots);
  // A relative path starts from the job file's folder; an absolute one stays.
  EXPECT_EQ(job->data.paths, (std::vector<std::string>{dir.File("a.txt"), "/x/b.txt"}));
  EXPECT_EQ(job->spec.model.mlp, (std::vector<uint32_t>{32, 16}));
  EXPECT_TRUE(job->spec.model.wide);
  EXPECT_FLOAT_EQ(job->spec.sparse_optimizer.epsilon, 1e-8f);  // adam's default

  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, "train:\n  threads: 2\n  bogus: 1\n").ok());
  JobConfigBuilder b2;
  Status s = b2.LoadYaml(path);
  EXPECT_NE(s.message().find("job.yaml:3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("train.bogus"), std::string::npos);

  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, "train: [unclosed\n").ok());
  JobConfigBuilder b3;
  EXPECT_EQ(b3.LoadYaml(path).code(), StatusCode::kInvalidArgument);

  // Groups as YAML lists of lists (model.shared_slots, model.dense_groups), and mixed forms.
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path,
                              "model:\n  towers: 2\n  dense_groups: [[0, 1, 2], 3-5]\n"
                              "  shared_slots:\n    - [0, 5]\n    - [3, 7, 9]\n")
                  .ok());
  JobConfigBuilder b4;
  ASSERT_TRUE(b4.LoadYaml(path).ok());
  auto grouped = b4.Finish();
  ASSERT_TRUE(grouped.ok()) << grouped.status().ToString();
  EXPECT_EQ(grouped->spec.model.dense_groups,
            (std::vector<std::vector<uint32_t>>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(grouped->spec.model.shared_slots,
            (std::vector<std::vector<uint32_t>>{{0, 5}, {3, 7, 9}}));
  ASSERT_TRUE(
      WriteFileAtomic(Env::Posix(), path, "model:\n  dense_groups: [[0, [1]], [2]]\n").ok());
  JobConfigBuilder b5;
  s = b5.LoadYaml(path);
  EXPECT_NE(s.message().find("job.yaml:2: model.dense_groups: expected a list of values"),
            std::string::npos)
      << s.message();
}

// docs/config.md lists every key as `ctrbox config` prints it: the same table rows, in the
// same order (a key added or reworded in config.cc and not in the page fails here).
TEST(ConfigTest, TheConfigPageHoldsTheReferenceTable) {
  auto rows = [](std::istream& in) {
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("| `", 0) == 0) out.push_back(line);
    }
    return out;
  };
  std::ifstream page(std::string(CTRBOX_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(page.good()) << "docs/config.md";
  std::istringstream printed(ConfigReference());
  const std::vector<std::string> want = rows(printed), got = rows(page);
  EXPECT_GT(want.size(), 50u);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace ctrbox
