#include "ckpt/model_dir.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "util/mem_env.h"
#include "util/random.h"

namespace ctrbox {
namespace {

class ModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ctrbox_ckpt_XXXXXX";
    dir_ = mkdtemp(tmpl);
    spec_.schema = Schema{4, 3};
    spec_.model.embedding_dim = 8;
    spec_.model.mlp = {16, 8};
    spec_.model.wide = true;
    spec_.dense_optimizer.kind = OptimizerKind::kAdam;
    spec_.dense_optimizer.lr = 1e-3f;
    spec_.dense_optimizer.epsilon = 1e-8f;
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<CtrModel> NewModel() {
    return std::make_unique<CtrModel>(spec_.schema, spec_.model, spec_.sparse_optimizer,
                                      spec_.dense_optimizer, 5);
  }
  // A table with random rows, some without embeddings.
  std::unique_ptr<SparseTable> NewTable(const CtrModel& model, size_t keys,
                                        uint32_t stripe_bits = 3) {
    TieredOptions o;
    o.layout = model.value_layout();
    o.stripe_bits = stripe_bits;
    auto table = std::move(TieredTable::Open(Env::Posix(), o).value());
    CtrAccessor acc(model.value_layout(), spec_.table);
    RowBlock rows(model.value_layout());
    rows.Resize(keys);
    Random rng(1);
    const uint32_t tables = model.value_layout().tables;
    for (size_t i = 0; i < keys; ++i) {
      uint64_t key = rng.Next();
      if (tables > 1) key = TableKey(key, static_cast<uint32_t>(key % tables));  // slot_dims
      acc.InitRow(&rows, i, key);
      rows.show(i) = static_cast<float>(rng.Below(100));
      rows.wide(i) = rng.UniformFloat();
      if (i % 7 == 0) rows.flags(i) = 0;
    }
    EXPECT_TRUE(table->Insert(rows, nullptr).ok());
    return table;
  }

  // Saves `model` (of spec_) with a table into dir_, and loads it into a fresh model: the
  // manifest holds spec_, the dense parameters come back and the digest matches.
  void ExpectSavedAndLoaded(const CtrModel& model) {
    auto table = NewTable(model, 2000);
    ThreadPool pool(2);
    auto saved = SaveModel(Env::Posix(), dir_, spec_, *table, model, 10, &pool);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    auto m = ReadManifest(Env::Posix(), dir_);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->spec.FirstDifference(spec_), "");
    auto model2 = NewModel();
    auto table2 = NewTable(*model2, 0);
    ASSERT_TRUE(LoadModel(Env::Posix(), dir_, *m, table2.get(), model2.get(), &pool).ok());
    EXPECT_EQ(model2->dense_params(), model.dense_params());
    EXPECT_EQ(*ModelDigest(*table2, *model2, &pool), saved->digest);
  }

  std::string dir_;
  ModelSpec spec_;
};

TEST_F(ModelDirTest, SaveLoadRoundTripKeepsTheDigest) {
  auto model = NewModel();
  model->dense_optimizer().BeginStep();  // non-trivial optimizer state
  model->dense_optimizer().m()[3] = 0.5f;
  auto table = NewTable(*model, 150000);  // several blocks
  ThreadPool pool(2);
  auto saved = SaveModel(Env::Posix(), dir_, spec_, *table, *model, 1234, &pool);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->digest, *ModelDigest(*table, *model, &pool));
  EXPECT_EQ(saved->keys, 150000u);
  EXPECT_EQ(saved->bytes_live, table->Stats().value_bytes);

  auto m = ReadManifest(Env::Posix(), dir_);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->spec.FirstDifference(spec_), "");
  EXPECT_EQ(m->trained_examples, 1234u);
  auto model2 = NewModel();
  auto table2 = NewTable(*model2, 0, 5);  // other stripes, same model
  ASSERT_TRUE(LoadModel(Env::Posix(), dir_, *m, table2.get(), model2.get(), &pool).ok());
  EXPECT_EQ(*ModelDigest(*table2, *model2, &pool), saved->digest);
  EXPECT_EQ(model2->dense_optimizer().step(), 1u);
  auto verified = VerifyModel(Env::Posix(), dir_);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
}

TEST_F(ModelDirTest, QuantizedModelsSaveTheirCodesExactly) {
  for (uint32_t bits : {8u, 12u}) {
    spec_.model.quant = QuantOptions{bits, 0.02f, QuantRounding::kStochastic};
    auto model = NewModel();
    ASSERT_EQ(model->value_layout().quant_bits, bits);
    auto table = NewTable(*model, 20000);
    ThreadPool pool(2);
    auto saved = SaveModel(Env::Posix(), dir_, spec_, *table, *model, 1, &pool);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    // 8-bit codes: 1 byte per element; 12-bit: 2 (float32: 4).
    const ValueLayout l = model->value_layout();
    EXPECT_EQ(l.EncodedBytes(true) - l.EncodedBytes(false), 8 * (bits <= 8 ? 1 : 2) + 4 * 8u);
    EXPECT_EQ(saved->bytes_live, table->Stats().value_bytes);
    auto lm = OpenModel(Env::Posix(), dir_, TieredOptions{}, &pool);
    ASSERT_TRUE(lm.ok()) << lm.status().ToString();
    EXPECT_EQ(lm->model->value_layout(), l);
    EXPECT_EQ(*ModelDigest(*lm->table, *lm->model, &pool), saved->digest);
    ASSERT_TRUE(VerifyModel(Env::Posix(), dir_).ok());
    // A model file of another quantization is refused, naming both layouts.
    spec_.model.quant.range = 0.04f;
    auto other_model = NewModel();
    auto other_table = NewTable(*other_model, 0);
    Status st = LoadModel(Env::Posix(), dir_, *saved, other_table.get(), other_model.get(), &pool);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
    EXPECT_NE(st.message().find("quant_range"), std::string::npos) << st.ToString();
    (void)std::system(("rm -rf " + dir_ + "/*").c_str());
  }
}

TEST_F(ModelDirTest, ACrashOrIoErrorAtAnyCallOfASaveKeepsACommittedModel) {
  // Generation 1 is committed; saving generation 2 then stops at its n-th I/O call, for every
  // n: by a crash (that call and all later ones fail, then power is lost) or by one ENOSPC or
  // EIO (the save reports it; then power is lost). The directory must then hold a complete
  // model: generation 1, or generation 2 if that save returned OK.
  ThreadPool pool(2);
  auto model = NewModel();
  auto table = NewTable(*model, 3000);
  RowBlock changed(model->value_layout());
  {
    std::vector<uint64_t> keys;
    Random rng(1);
    for (int i = 0; i < 500; ++i) keys.push_back(rng.Next());  // the first NewTable keys
    CtrAccessor acc(model->value_layout(), spec_.table);
    changed.Resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      acc.InitRow(&changed, i, keys[i]);
      changed.show(i) = 1000.0f + static_cast<float>(i);
    }
  }
  struct Mode {
    const char* name;
    bool sticky;
    Status error;
  };
  const Mode modes[] = {{"crash", true, MemEnv::Eio("power lost")},
                        {"enospc", false, MemEnv::NoSpace("disk full")},
                        {"eio", false, MemEnv::Eio("bad sector")}};
  for (const Mode& mode : modes) {
    uint64_t n = 1;
    for (;; ++n) {
      SCOPED_TRACE(testing::Message() << mode.name << " at call " << n);
      MemEnv env;
      auto t = NewTable(*model, 3000);
      auto g1 = SaveModel(&env, "/m", spec_, *t, *model, 10, &pool);
      ASSERT_TRUE(g1.ok()) << g1.status().ToString();
      ASSERT_TRUE(t->Insert(changed, &pool).ok());
      const std::string d2 = *ModelDigest(*t, *model, &pool);
      ASSERT_NE(d2, g1->digest);
      env.InjectFault(FaultOp::kAny, n, mode.error, mode.sticky);
      const uint64_t fired_before = env.FaultsFired();
      auto g2 = SaveModel(&env, "/m", spec_, *t, *model, 20, &pool);
      const bool fired = env.FaultsFired() > fired_before;
      env.ClearFaults();
      env.SimulateCrash();
      auto verified = VerifyModel(&env, "/m");
      ASSERT_TRUE(verified.ok()) << verified.status().ToString();
      auto lm = OpenModel(&env, "/m", TieredOptions{}, &pool);
      ASSERT_TRUE(lm.ok()) << lm.status().ToString();
      const std::string got = *ModelDigest(*lm->table, *lm->model, &pool);
      EXPECT_EQ(got, verified->digest);
      if (g2.ok()) {  // committed (a failure after the commit, of a cleanup delete, is ignored)
        EXPECT_EQ(got, d2) << "a save that returned OK was lost";
      } else {
        EXPECT_TRUE(got == g1->digest || got == d2);
      }
      if (!fired) break;  // n is past the save's last call
    }
    EXPECT_GT(n, 10u) << mode.name;  // the save made that many calls, each one tried
  }
}

TEST_F(ModelDirTest, NewGenerationsReplaceOldFilesAtomically) {
  auto model = NewModel();
  auto table = NewTable(*model, 100);
  ASSERT_TRUE(SaveModel(Env::Posix(), dir_, spec_, *table, *model, 1, nullptr).ok());
  model->dense_params()[0] += 1;
  auto second = SaveModel(Env::Posix(), dir_, spec_, *table, *model, 2, nullptr);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->generation, 2u);
  auto children = Env::Posix()->GetChildren(dir_);
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(*children,
            (std::vector<std::string>{"MANIFEST", "dense-000002.bin", "sparse-000002.bin"}));
}

TEST_F(ModelDirTest, EveryFlippedByteIsDetected) {
  auto model = NewModel();
  auto table = NewTable(*model, 40);
  auto saved = SaveModel(Env::Posix(), dir_, spec_, *table, *model, 1, nullptr);
  ASSERT_TRUE(saved.ok());
  for (const ModelFileInfo& f : saved->files) {
    const std::string path = dir_ + "/" + f.name;
    std::string good;
    ASSERT_TRUE(ReadFileToString(Env::Posix(), path, &good).ok());
    for (size_t i = 0; i < good.size(); i += (f.name[0] == 'd' ? 97 : 1)) {
      std::string bad = good;
      bad[i] ^= static_cast<char>(1 << (i % 8));
      ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, bad).ok());
      auto v = VerifyModel(Env::Posix(), dir_);
      ASSERT_FALSE(v.ok()) << f.name << " byte " << i;
      EXPECT_EQ(v.status().code(), StatusCode::kCorruption);
      EXPECT_NE(v.status().message().find(f.name), std::string::npos) << v.status().message();
    }
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, good).ok());
  }
  const std::string manifest = dir_ + "/MANIFEST";
  std::string good;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), manifest, &good).ok());
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x04;
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), manifest, bad).ok());
    auto v = ReadManifest(Env::Posix(), dir_);
    ASSERT_FALSE(v.ok()) << "MANIFEST byte " << i;
    EXPECT_EQ(v.status().code(), StatusCode::kCorruption);
  }
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), manifest, good).ok());
  EXPECT_TRUE(VerifyModel(Env::Posix(), dir_).ok());
}

TEST_F(ModelDirTest, SpecDifferencesAreNamed) {
  ModelSpec other = spec_;
  other.model.mlp = {16, 4};
  EXPECT_EQ(spec_.FirstDifference(other), "model.mlp");
  other = spec_;
  other.sparse_optimizer.lr = 0.1f;
  EXPECT_EQ(spec_.FirstDifference(other), "sparse_optimizer.lr");
  // Hyperparameters may change between runs of one model; shapes and optimizer kinds not.
  other = spec_;
  other.sparse_optimizer.lr = 0.1f;
  other.table.seed = 9;
  EXPECT_EQ(spec_.FirstIncompatibility(other), "");
  other.dense_optimizer.kind = OptimizerKind::kSgd;
  EXPECT_EQ(spec_.FirstIncompatibility(other), "dense_optimizer.kind");
  other = spec_;
  other.table.decay = 0.5f;
  other.model.embedding_dim = 4;
  EXPECT_EQ(spec_.FirstIncompatibility(other), "model.embedding_dim");
  // Messages show both values (issue 21 item 11: they named only the key).
  EXPECT_EQ(spec_.DescribeDifference(other, "model.embedding_dim"),
            fmt::format("model.embedding_dim = {} there, 4 now", spec_.model.embedding_dim));
  other = spec_;
  other.model.mlp = {16, 4};
  EXPECT_EQ(spec_.DescribeDifference(other, "model.mlp"),
            "model.mlp = " + nlohmann::json(spec_.model.mlp).dump() + " there, [16,4] now");
  auto j = spec_.ToJson();
  j["schema"].erase("num_dense");
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  // Quantization: the stored codes' width and range are structural, the rounding is not.
  other = spec_;
  other.model.quant.rounding = QuantRounding::kNearest;
  EXPECT_EQ(spec_.FirstDifference(other), "model.quant.rounding");
  EXPECT_EQ(spec_.FirstIncompatibility(other), "");
  other.model.quant.bits = 8;
  EXPECT_EQ(spec_.FirstIncompatibility(other), "model.quant.bits");
  other = spec_;
  other.model.quant.range = 0.5f;
  EXPECT_EQ(spec_.FirstIncompatibility(other), "model.quant.range");
  j = spec_.ToJson();
  j["model"]["quant"]["bits"] = 1;
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j["model"].erase("quant");  // a spec from before quantization: float32
  auto old = ModelSpec::FromJson(j);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->model.quant, QuantOptions{});
  // Hashed keys: written only when on (lossless specs read as before), and structural.
  EXPECT_FALSE(spec_.ToJson()["model"].contains("hashing"));
  other = spec_;
  other.model.hashing = {HashingMethod::kOpOsrp, 1000};
  auto back = ModelSpec::FromJson(other.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model.hashing, other.model.hashing);
  EXPECT_NE(spec_.FirstIncompatibility(other), "");
  EXPECT_NE(other.FirstIncompatibility(spec_), "");
  ModelSpec bins = other;
  bins.model.hashing.bins = 999;
  EXPECT_EQ(other.FirstIncompatibility(bins), "model.hashing.bins");
  j = other.ToJson();
  j["model"]["hashing"]["method"] = "crc";
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j["model"]["hashing"] = {{"method", "modulo"}, {"bins", 0}};
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  // Interactions: written only when on (specs without them read as before), and structural.
  for (const char* key : {"fm", "cross_layers", "cross_rank", "dot", "bottom_mlp"}) {
    EXPECT_FALSE(spec_.ToJson()["model"].contains(key)) << key;
  }
  other = spec_;
  other.model.fm = other.model.dot = true;
  other.model.cross_layers = 3;
  other.model.cross_rank = 64;
  other.model.bottom_mlp = {64, other.model.embedding_dim};
  back = ModelSpec::FromJson(other.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->model.fm);
  EXPECT_TRUE(back->model.dot);
  EXPECT_EQ(back->model.cross_layers, 3u);
  EXPECT_EQ(back->model.cross_rank, 64u);
  EXPECT_EQ(back->model.bottom_mlp, other.model.bottom_mlp);
  EXPECT_EQ(back->FirstDifference(other), "");
  for (auto change :
       {+[](ModelSpec* s) { s->model.fm = false; }, +[](ModelSpec* s) { s->model.dot = false; },
        +[](ModelSpec* s) { s->model.cross_layers = 2; },
        +[](ModelSpec* s) { s->model.cross_rank = 0; },
        +[](ModelSpec* s) { s->model.cross_experts = 2; },
        +[](ModelSpec* s) { s->model.bottom_mlp = {}; }}) {
    ModelSpec changed = other;
    change(&changed);
    EXPECT_NE(other.FirstIncompatibility(changed), "");
  }
  EXPECT_EQ(other.DescribeDifference(*back, "model.cross_layers"),
            "model.cross_layers = 3 there, 3 now");
  j = other.ToJson();
  j["model"]["cross_layers"] = 17;
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j = other.ToJson();
  j["model"]["cross_experts"] = 2;
  EXPECT_TRUE(ModelSpec::FromJson(j).ok());
  j["model"].erase("cross_rank");  // experts are low rank
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j = other.ToJson();
  j["model"]["bottom_mlp"] = {64, 3};  // z must be as wide as an embedding
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  // Shared slots: written only when set, structural, checked against the schema.
  EXPECT_FALSE(spec_.ToJson()["model"].contains("shared_slots"));
  other = spec_;
  other.model.shared_slots = {{0, 2}};
  back = ModelSpec::FromJson(other.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model.shared_slots, other.model.shared_slots);
  EXPECT_EQ(spec_.FirstIncompatibility(other), "model.shared_slots");
  j = other.ToJson();
  j["model"]["shared_slots"] = {{0, spec_.schema.num_slots}};
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j["model"]["shared_slots"] = {{0, 1}, {1, 2}};
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
}

TEST_F(ModelDirTest, ModelsWithInteractionsSaveAndLoadTheirCrossLayers) {
  spec_.model.fm = spec_.model.dot = true;
  spec_.model.cross_layers = 2;
  spec_.model.cross_rank = 5;
  spec_.model.bottom_mlp = {12, spec_.model.embedding_dim};
  auto model = NewModel();
  const size_t mlp_params = model->mlp().num_params();
  ASSERT_EQ(model->dense_params().size(),
            mlp_params + model->cross().num_params() + model->bottom().num_params());
  model->dense_params().back() = 0.25f;                     // the bottom MLP's last bias
  model->dense_params()[model->bottom_base() - 1] = -0.5f;  // the last cross layer's
  ExpectSavedAndLoaded(*model);
}

TEST_F(ModelDirTest, ModelsWithExpertsSaveAndLoadThem) {  // DCN-Mix
  spec_.model.cross_layers = 2;
  spec_.model.cross_rank = 5;
  spec_.model.cross_experts = 3;
  spec_.model.bottom_mlp = {12, spec_.model.embedding_dim};
  auto model = NewModel();
  EXPECT_EQ(model->cross().num_params(), 0u);  // the experts follow the bottom MLP
  EXPECT_EQ(model->dense_params().size(),
            model->mlp().num_params() + model->bottom().num_params() + model->mix().num_params());
  model->dense_params().back() = 0.75f;  // the last mixture layer's bias
  ExpectSavedAndLoaded(*model);
}

// AIBox's towers: the spec keys written only when set, structural, checked; the towers'
// parameters saved and loaded with the model.
TEST_F(ModelDirTest, ModelsWithTowersSaveAndLoadThem) {
  EXPECT_FALSE(spec_.ToJson()["model"].contains("towers"));
  ModelSpec other = spec_;
  other.model.towers = 2;
  other.model.dense_groups = {{0}, {1}};
  other.model.tower_mlp = {{16, 8}, {12}};
  auto back = ModelSpec::FromJson(other.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model.towers, 2u);
  EXPECT_EQ(back->model.dense_groups, other.model.dense_groups);
  EXPECT_EQ(back->model.tower_mlp, other.model.tower_mlp);
  EXPECT_EQ(spec_.FirstIncompatibility(other), "model.dense_groups");
  nlohmann::json j = other.ToJson();
  j["model"]["dense_groups"] = {{0}, {spec_.schema.num_dense}};  // beyond the schema
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j["model"]["dense_groups"] = {{0}};  // one group for two towers
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j = other.ToJson();
  j["model"]["tower_mlp"] = {{16, 8}};  // one shape for two towers
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());

  spec_ = other;
  auto model = NewModel();
  EXPECT_EQ(model->dense_params().size(), model->towers().num_params());
  model->dense_params().back() = 0.25f;  // the output unit's bias
  ExpectSavedAndLoaded(*model);
}

// model.slot_dims: the spec key written only when set, structural, checked against the schema
// and the interactions; every row saved at its own table's size and loaded back.
TEST_F(ModelDirTest, ModelsWithSlotDimsSaveAndLoadThem) {
  EXPECT_FALSE(spec_.ToJson()["model"].contains("slot_dims"));
  ModelSpec other = spec_;
  other.model.slot_dims = {{{0, 2}, 24}, {{3}, 4}};
  auto back = ModelSpec::FromJson(other.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model.slot_dims, other.model.slot_dims);
  EXPECT_EQ(spec_.FirstIncompatibility(other), "model.slot_dims");
  nlohmann::json j = other.ToJson();
  j["model"]["slot_dims"][1]["slots"] = {spec_.schema.num_slots};  // beyond the schema
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());
  j = other.ToJson();
  j["model"]["fm"] = true;  // FM needs one dimension
  EXPECT_FALSE(ModelSpec::FromJson(j).ok());

  spec_ = other;
  auto model = NewModel();
  EXPECT_EQ(model->input_width(), 3u + 24 + 8 + 24 + 4);
  ExpectSavedAndLoaded(*model);
  // Rows at their own sizes: the saved bytes are the table's, well under 24-wide rows'.
  auto table = NewTable(*model, 3000);
  ThreadPool pool(2);
  auto saved = SaveModel(Env::Posix(), dir_, spec_, *table, *model, 10, &pool);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->bytes_live, table->Stats().value_bytes);
  const ValueLayout l = model->value_layout();
  EXPECT_LT(saved->bytes_live, 3000 * (l.EncodedBytes(true) - 8) * 3 / 4);
}

TEST(ModelDirFormatTest, AVersion1ModelDirectoryStillLoads) {
  // Written by the build before quantization (commit 604b907): sparse file version 1, a
  // MANIFEST without model.quant. It loads as a float32 model with the digest it was saved with.
  const std::string dir = std::string(CTRBOX_SOURCE_DIR) + "/src/ckpt/testdata/model_v1";
  auto m = VerifyModel(Env::Posix(), dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->keys, 811u);
  EXPECT_EQ(m->digest, "196acbdea002f2f2");
  EXPECT_EQ(m->spec.model.quant.bits, 0u);
  ThreadPool pool(2);
  auto lm = OpenModel(Env::Posix(), dir, TieredOptions{}, &pool);
  ASSERT_TRUE(lm.ok()) << lm.status().ToString();
  auto digest = ModelDigest(*lm->table, *lm->model, &pool);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(*digest, "196acbdea002f2f2");
}

}  // namespace
}  // namespace ctrbox
