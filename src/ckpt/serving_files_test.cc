#include "ckpt/serving_files.h"

#include <gtest/gtest.h>

#include <map>

#include "util/mem_env.h"
#include "util/random.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

ValueLayout TableLayout() {
  ValueLayout l;
  l.dim = 4;
  l.emb_state = 4;
  l.wide_state = 1;
  return l;
}

ModelSpec Spec() {
  ModelSpec s;
  s.schema.num_slots = 2;
  s.model.embedding_dim = 4;
  return s;
}

// A dense payload of a model of Spec() (seed: which one).
std::string Dense(uint64_t seed) {
  const ModelSpec s = Spec();
  CtrModel m(s.schema, s.model, s.sparse_optimizer, s.dense_optimizer, seed);
  return DensePayload(m);
}

// Rows for `keys` with values drawn from rng.
RowBlock Rows(const std::vector<uint64_t>& keys, Random* rng) {
  RowBlock r(TableLayout());
  r.Resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    r.ClearRow(i, keys[i]);
    r.show(i) = static_cast<float>(rng->Below(100));
    r.wide(i) = static_cast<float>(rng->Uniform() - 0.5);
    r.wide_state(i)[0] = 7;
    if (rng->Below(3) > 0) {
      r.flags(i) |= kFlagHasEmb;
      for (int d = 0; d < 4; ++d) {
        r.emb(i)[d] = static_cast<float>(rng->Uniform() - 0.5);
        r.emb_state(i)[d] = 3;
      }
    }
  }
  return r;
}

// What serving must hold for `rows`: each row in the serving layout.
void Expect(std::map<uint64_t, std::string>* model, const RowBlock& rows, const ValueLayout& l) {
  RowBlock s(l);
  s.Resize(1);
  for (size_t i = 0; i < rows.size(); ++i) {
    s.ClearRow(0, rows.key(i));
    s.flags(0) = rows.flags(i);
    s.wide(0) = rows.wide(i);
    const Quantizer q = l.quantizer();
    for (uint32_t d = 0; d < l.dim; ++d)
      s.emb(0)[d] =
          q.enabled() && rows.has_emb(i) ? q.Value(q.Code(rows.emb(i)[d], 0.5f)) : rows.emb(i)[d];
    std::string enc;
    s.EncodeRow(0, &enc);
    (*model)[rows.key(i)] = enc;
  }
}

StatusOr<ServingVersion> Publish(Env* env, const std::string& dir, uint64_t version, bool base,
                                 uint64_t parent, uint64_t base_version, const RowBlock& rows,
                                 const std::vector<uint64_t>& deleted, const ValueLayout& l,
                                 uint64_t keys) {
  ServingVersion v;
  v.version = version;
  v.base = base;
  v.parent = parent;
  v.base_version = base_version;
  v.partition = "p" + std::to_string(version);
  ASSIGN_OR_RETURN(auto w, ServingVersionWriter::Create(env, dir, v, Spec(), TableLayout(), l));
  RETURN_IF_ERROR(w->AddRows(rows));
  RETURN_IF_ERROR(w->AddDeleted(deleted));
  ASSIGN_OR_RETURN(ServingVersion done, w->Finish(Dense(version), keys));
  RETURN_IF_ERROR(AppendServingVersion(env, dir, done));
  return done;
}

class ServingFilesTest : public ::testing::TestWithParam<uint32_t> {};

// A base, then deltas that change, add and delete rows: every version loads as the reference
// model after it, at float32 and at 16 and 8 bits.
TEST_P(ServingFilesTest, BaseAndDeltasLoadAsTheModelAfterEachVersion) {
  testing::TempDir tmp;
  Env* env = Env::Posix();
  const ValueLayout l = ServingLayout(TableLayout(), GetParam(), 0.5f);
  EXPECT_EQ(l.emb_state, 0u);
  EXPECT_EQ(l.wide_state, 0u);
  Random rng(5);
  std::map<uint64_t, std::string> model;
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 300; ++k) keys.push_back(k * 7919);
  RowBlock base = Rows(keys, &rng);
  Expect(&model, base, l);
  auto v1 = Publish(env, tmp.path(), 1, true, 0, 1, base, {}, l, model.size());
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  std::map<uint64_t, std::map<uint64_t, std::string>> after = {{1, model}};
  for (uint64_t v = 2; v <= 4; ++v) {
    std::vector<uint64_t> changed, deleted;
    for (uint64_t k : keys) {
      const uint64_t r = rng.Below(10);
      if (r == 0) {
        deleted.push_back(k);
      } else if (r < 3) {
        changed.push_back(k);
      }
    }
    changed.push_back(1000000 + v);  // a new key
    for (uint64_t k : deleted) model.erase(k);
    RowBlock rows = Rows(changed, &rng);
    Expect(&model, rows, l);
    auto pv = Publish(env, tmp.path(), v, false, v - 1, 1, rows, deleted, l, model.size());
    ASSERT_TRUE(pv.ok()) << pv.status().ToString();
    EXPECT_EQ(pv->deleted, deleted.size());
    after[v] = model;
  }
  auto listed = ReadServingVersions(env, tmp.path());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 4u);
  for (uint64_t v = 1; v <= 4; ++v) {
    auto s = LoadServingState(env, tmp.path(), v);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->rows, after[v]) << "version " << v;
    EXPECT_EQ(s->dense_payload, Dense(v));
    ASSERT_TRUE(VerifyServingVersion(env, tmp.path(), (*listed)[v - 1]).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Bits, ServingFilesTest, ::testing::Values(0u, 16u, 8u));

TEST(ServingFilesTest, DamageIsFoundAndNamed) {
  testing::TempDir tmp;
  Env* env = Env::Posix();
  const ValueLayout l = ServingLayout(TableLayout(), 0, 1.0f);
  Random rng(1);
  RowBlock rows = Rows({1, 2, 3}, &rng);
  auto v = Publish(env, tmp.path(), 1, true, 0, 1, rows, {}, l, 3);
  ASSERT_TRUE(v.ok());
  // A flipped byte of the sparse file.
  const std::string sparse = tmp.File("v-000001/sparse.bin");
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(env, sparse, &bytes).ok());
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(env, sparse, bytes).ok());
  Status s = VerifyServingVersion(env, tmp.path(), *v);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("sparse.bin"), std::string::npos) << s.ToString();
  auto loaded = LoadServingState(env, tmp.path(), 1);
  EXPECT_EQ(loaded.status().code(), StatusCode::kCorruption);
  EXPECT_NE(loaded.status().message().find("sparse.bin"), std::string::npos)
      << loaded.status().ToString();
  // A donefile line cut short: named by line.
  ASSERT_TRUE(WriteFileAtomic(env, tmp.File("versions.jsonl"), "{\"version\": 1}\n").ok());
  auto listed = ReadServingVersions(env, tmp.path());
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.status().message().find("line 1"), std::string::npos);
}

TEST(ServingFilesTest, PruningKeepsTheNewestBasesAndTheirDeltasAndDropsUnpublishedDirs) {
  testing::TempDir tmp;
  Env* env = Env::Posix();
  const ValueLayout l = ServingLayout(TableLayout(), 0, 1.0f);
  Random rng(2);
  RowBlock rows = Rows({1, 2, 3}, &rng);
  // Versions 1 (base) 2 (delta) 3 (base) 4 (delta) 5 (base).
  uint64_t base = 0;
  for (uint64_t v = 1; v <= 5; ++v) {
    const bool is_base = v % 2 == 1;
    if (is_base) base = v;
    ASSERT_TRUE(
        Publish(env, tmp.path(), v, is_base, is_base ? 0 : v - 1, base, rows, {}, l, 3).ok());
  }
  // A version written and never listed (the job died before publishing it).
  ServingVersion orphan;
  orphan.version = 6;
  orphan.base_version = 6;
  auto w = ServingVersionWriter::Create(env, tmp.path(), orphan, Spec(), TableLayout(), l);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Finish(Dense(6), 0).ok());
  ASSERT_TRUE(PruneServing(env, tmp.path(), 2).ok());
  auto listed = ReadServingVersions(env, tmp.path());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 3u);  // 3, 4, 5
  EXPECT_EQ(listed->front().version, 3u);
  EXPECT_FALSE(env->IsDirectory(tmp.File("v-000001")));
  EXPECT_FALSE(env->IsDirectory(tmp.File("v-000002")));
  EXPECT_TRUE(env->IsDirectory(tmp.File("v-000004")));
  EXPECT_FALSE(env->IsDirectory(tmp.File("v-000006")));
  EXPECT_TRUE(LoadServingState(env, tmp.path(), 4).ok());
}

// A version whose write fails (a full disk at any of its writes and syncs) leaves no directory
// behind; a writer abandoned before Finish neither.
TEST(ServingFilesTest, AVersionThatFailsToWriteLeavesNothing) {
  const ValueLayout l = ServingLayout(TableLayout(), 0, 1.0f);
  Random rng(3);
  RowBlock rows = Rows({1, 2, 3, 4}, &rng);
  auto write = [&](Env* env) -> StatusOr<ServingVersion> {
    ServingVersion v;
    v.version = v.base_version = 1;
    ASSIGN_OR_RETURN(auto w, ServingVersionWriter::Create(env, "/s", v, Spec(), TableLayout(), l));
    RETURN_IF_ERROR(w->AddRows(rows));
    RETURN_IF_ERROR(w->AddDeleted({7}));
    return w->Finish(Dense(1), 4);
  };
  // A full disk fails every write from then on; a sync or a rename fails once.
  for (FaultOp op : {FaultOp::kWrite, FaultOp::kSync, FaultOp::kRename}) {
    for (uint64_t n = 1;; ++n) {
      MemEnv env;
      ASSERT_TRUE(env.CreateDirs("/s").ok());
      env.InjectFault(op, n, MemEnv::NoSpace("injected"), op == FaultOp::kWrite);
      auto done = write(&env);
      if (env.FaultsFired() == 0) {  // every call of this kind passed: the version is whole
        ASSERT_TRUE(done.ok()) << done.status().ToString();
        break;
      }
      EXPECT_FALSE(done.ok());
      EXPECT_FALSE(env.IsDirectory("/s/v-000001")) << "fault at call " << n;
    }
  }
  MemEnv env;
  ASSERT_TRUE(env.CreateDirs("/s").ok());
  ServingVersion v;
  v.version = v.base_version = 1;
  v.base = true;
  {
    auto w = ServingVersionWriter::Create(&env, "/s", v, Spec(), TableLayout(), l);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddRows(rows).ok());
    EXPECT_TRUE(env.IsDirectory("/s/v-000001"));
  }
  EXPECT_FALSE(env.IsDirectory("/s/v-000001"));
}

// Versions carry the dense parameters without the optimizer's state: they set a model's
// parameters as the whole payload does; a short or foreign payload is refused.
TEST(ServingFilesTest, TheDenseParametersAloneSetTheModelsParameters) {
  const ModelSpec s = Spec();
  CtrModel a(s.schema, s.model, s.sparse_optimizer, s.dense_optimizer, 3);
  CtrModel b(s.schema, s.model, s.sparse_optimizer, s.dense_optimizer, 4);
  ASSERT_NE(a.dense_params(), b.dense_params());
  const std::string params = DenseParamsPayload(a);
  EXPECT_LT(params.size(), DensePayload(a).size());
  ASSERT_TRUE(ApplyDensePayload(params, "p", &b).ok());
  EXPECT_EQ(a.dense_params(), b.dense_params());
  EXPECT_FALSE(ApplyDensePayload(params.substr(0, 20), "p", &b).ok());
  EXPECT_FALSE(ApplyDensePayload(params.substr(0, params.size() - 4), "p", &b).ok());
}

}  // namespace
}  // namespace ctrbox
