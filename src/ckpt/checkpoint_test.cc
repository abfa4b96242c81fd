#include "ckpt/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "ckpt/model_dir.h"
#include "table/tiered_table.h"
#include "util/mem_env.h"
#include "util/random.h"

namespace ctrbox {
namespace {

// A job in miniature: passes that pull random keys (new and old), change their rows and the
// dense state, push them, and commit a checkpoint after each.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.schema = Schema{4, 3};
    spec_.model.embedding_dim = 8;
    spec_.model.mlp = {16, 8};
    spec_.model.wide = true;
    spec_.dense_optimizer.kind = OptimizerKind::kAdam;
    model_ = NewModel();
    table_ = NewTable();
  }

  std::unique_ptr<CtrModel> NewModel() const {
    return std::make_unique<CtrModel>(spec_.schema, spec_.model, spec_.sparse_optimizer,
                                      spec_.dense_optimizer, spec_.table.seed);
  }
  std::unique_ptr<SparseTable> NewTable() const {
    TieredOptions o;
    o.layout = NewModel()->value_layout();
    o.stripe_bits = 3;
    return std::move(TieredTable::Open(Env::Posix(), o).value());
  }
  TableFactory Factory() const {
    return
        [this](const ValueLayout&) -> StatusOr<std::unique_ptr<SparseTable>> { return NewTable(); };
  }

  std::unique_ptr<CheckpointWriter> Writer(Env* env, CheckpointOptions o,
                                           const CheckpointManifest* last = nullptr) {
    auto w = CheckpointWriter::Open(env, o, spec_, {{"pipeline.pass_examples", 7}},
                                    model_->value_layout(), last);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return std::move(*w);
  }

  // One pass: 200 keys out of 600, rows and dense state changed, pushed, handed to `w`.
  Status Pass(CheckpointWriter* w) {
    std::vector<uint64_t> keys;
    std::set<uint64_t> seen;
    while (keys.size() < 200) {
      const uint64_t k = rng_.Below(600) * 0x9E3779B97F4A7C15ull + 1;
      if (seen.insert(k).second) keys.push_back(k);
    }
    CtrAccessor acc(model_->value_layout(), spec_.table);
    RowBlock rows(model_->value_layout());
    ASSIGN_OR_RETURN(PinnedRows pins, table_->Pull(keys.data(), keys.size(), &acc, &rows, nullptr));
    for (size_t i = 0; i < rows.size(); ++i) {
      rows.show(i) += 1;
      rows.wide(i) += rng_.UniformFloat() - 0.5f;
    }
    RETURN_IF_ERROR(table_->Push(&pins, rows, nullptr));
    model_->dense_params()[rng_.Below(model_->dense_params().size())] += 0.25f;
    model_->dense_optimizer().BeginStep();
    ++position_.passes;
    position_.examples += 1000;
    return w != nullptr ? w->OnPush(rows) : Status::OK();
  }

  std::string Digest() { return ModelDigest(*table_, *model_, nullptr).value(); }

  StatusOr<CheckpointManifest> Commit(CheckpointWriter* w) {
    auto m = w->Commit(*table_, DensePayload(*model_), position_, nullptr, nullptr);
    if (m.ok()) digests_[m->id] = Digest();
    return m;
  }

  // Loads checkpoint `id` into a fresh model and table; returns the state's digest.
  StatusOr<std::string> Load(Env* env, const std::string& dir, uint64_t id) {
    auto model = NewModel();
    auto table = NewTable();
    CheckpointManifest m;
    RETURN_IF_ERROR(LoadCheckpoint(env, dir, id, table.get(), model.get(), nullptr, &m));
    return ModelDigest(*table, *model, nullptr);
  }

  ModelSpec spec_;
  std::unique_ptr<CtrModel> model_;
  std::unique_ptr<SparseTable> table_;
  Random rng_{7};
  TrainPosition position_;
  std::map<uint64_t, std::string> digests_;  // checkpoint id -> state digest at its commit
};

std::string TempDirPath() {
  char tmpl[] = "/tmp/ctrbox_ckpt_XXXXXX";
  return mkdtemp(tmpl);
}

TEST_F(CheckpointTest, EveryCheckpointOfAChainLoadsToTheStateItWasCutFrom) {
  MemEnv env;
  auto w = Writer(&env, {"/c", 1, 3, 100});
  std::vector<bool> bases;
  for (int p = 0; p < 8; ++p) {
    ASSERT_TRUE(Pass(w.get()).ok());
    auto m = Commit(w.get());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->id, static_cast<uint64_t>(p + 1));
    EXPECT_EQ(m->position.passes, static_cast<uint64_t>(p + 1));
    bases.push_back(m->base);
    EXPECT_EQ(m->digest.empty(), !m->base);  // a base knows its digest; a mid-run delta not
    if (!m->base) {
      EXPECT_EQ(m->rows, 200u);  // a delta holds the pass's rows only
    }
  }
  // base_every 3: a base, two deltas, a base...
  EXPECT_EQ(bases, (std::vector<bool>{true, false, false, true, false, false, true, false}));
  for (const auto& [id, digest] : digests_) {
    auto got = Load(&env, "/c", id);
    ASSERT_TRUE(got.ok()) << id << ": " << got.status().ToString();
    EXPECT_EQ(*got, digest) << "checkpoint " << id;
  }
  // A commit with nothing pushed since the last one is that one.
  auto again = Commit(w.get());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, 8u);
  // A final checkpoint with a digest the caller knows records it, and the load checks it.
  ASSERT_TRUE(Pass(w.get()).ok());
  const std::string digest = Digest();
  auto final_ckpt = w->Commit(
      *table_, DensePayload(*model_), position_, [&]() -> StatusOr<std::string> { return digest; },
      nullptr);
  ASSERT_TRUE(final_ckpt.ok());
  EXPECT_FALSE(final_ckpt->base);
  EXPECT_EQ(final_ckpt->digest, digest);
  EXPECT_EQ(*Load(&env, "/c", final_ckpt->id), Digest());
}

TEST_F(CheckpointTest, ShrinkForcesABaseAndPruningKeepsTheChainsItNeeds) {
  MemEnv env;
  auto w = Writer(&env, {"/c", 1, 3, 2});
  auto ids = [&] { return ListCheckpoints(&env, "/c").value(); };
  for (int p = 0; p < 3; ++p) {
    ASSERT_TRUE(Pass(w.get()).ok());
    ASSERT_TRUE(Commit(w.get()).ok());
  }
  EXPECT_EQ(ids(), (std::vector<uint64_t>{1, 2, 3}));  // 3 needs 2 and 1
  ASSERT_TRUE(Pass(w.get()).ok());
  w->OnShrink();  // every row may have changed
  auto m4 = Commit(w.get());
  ASSERT_TRUE(m4.ok());
  EXPECT_TRUE(m4->base);
  EXPECT_EQ(ids(), (std::vector<uint64_t>{1, 2, 3, 4}));  // keep 2: 4 and 3 (with 2, 1)
  ASSERT_TRUE(Pass(w.get()).ok());
  ASSERT_TRUE(Commit(w.get()).ok());  // delta of 4
  EXPECT_EQ(ids(), (std::vector<uint64_t>{4, 5}));
  EXPECT_FALSE(env.IsDirectory("/c/ckpt-000001"));
}

TEST_F(CheckpointTest, AResumedJobContinuesItsChainAndIncompleteCheckpointsAreRemoved) {
  MemEnv env;
  {
    auto w = Writer(&env, {"/c", 1, 8, 2});
    for (int p = 0; p < 2; ++p) {
      ASSERT_TRUE(Pass(w.get()).ok());
      ASSERT_TRUE(Commit(w.get()).ok());
    }
    ASSERT_TRUE(Pass(w.get()).ok());  // its delta is being written when the job fails
    EXPECT_TRUE(env.FileExists("/c/ckpt-000003/sparse.bin"));
  }
  // A job that fails removes its uncommitted delta as its writer goes.
  EXPECT_FALSE(env.IsDirectory("/c/ckpt-000003"));
  // One that dies leaves it, as a crash would: the next writer removes it.
  ASSERT_TRUE(env.CreateDirs("/c/ckpt-000003").ok());
  ASSERT_TRUE(WriteFileAtomic(&env, "/c/ckpt-000003/sparse.bin", "partial").ok());
  EXPECT_EQ(ListCheckpoints(&env, "/c").value(), (std::vector<uint64_t>{1, 2}));

  auto r = ResumeNewestCheckpoint(&env, "/c", Factory(), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->manifest.id, 2u);
  EXPECT_TRUE(r->warnings.empty());
  EXPECT_EQ(*ModelDigest(*r->table, *r->model, nullptr), digests_[2]);
  EXPECT_EQ(r->manifest.settings["pipeline.pass_examples"], 7);

  model_ = std::move(r->model);
  table_ = std::move(r->table);
  position_ = r->manifest.position;
  auto w = Writer(&env, {"/c", 1, 8, 2}, &r->manifest);
  EXPECT_FALSE(env.IsDirectory("/c/ckpt-000003"));  // the incomplete one
  ASSERT_TRUE(Pass(w.get()).ok());
  auto m = Commit(w.get());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->id, 3u);
  EXPECT_FALSE(m->base);
  EXPECT_EQ(m->parent, 2u);
  EXPECT_EQ(m->depth, 2u);
  EXPECT_EQ(*Load(&env, "/c", 3), digests_[3]);
}

// Test 2 and 3 of docs/checkpoints.md: a power loss, ENOSPC or EIO at every I/O call of a
// pass's delta and its commit, and of a base's commit with the pruning after it. After the
// crash the newest checkpoint that loads is the previous one or the new one, never anything
// else, and the new one once its commit returned OK.
TEST_F(CheckpointTest, ACrashOrIoErrorAtAnyCallOfACommitKeepsTheLastCommittedState) {
  struct Mode {
    const char* name;
    bool crash_only;
    bool enospc;
  };
  for (int phase = 0; phase < 2; ++phase) {  // 0: a delta commit; 1: a base commit + pruning
    for (const Mode mode :
         {Mode{"crash", true, false}, Mode{"enospc", false, true}, Mode{"eio", false, false}}) {
      uint64_t n = 1;
      for (;; ++n) {
        // The same job each time, up to the window.
        SetUp();
        rng_ = Random(7);
        position_ = {};
        digests_.clear();
        MemEnv env;
        auto w = Writer(&env, {"/c", 1, 3, 1});
        for (int p = 0; p < 1 + phase * 2; ++p) {  // phase 1: base, delta, delta; then a base
          ASSERT_TRUE(Pass(w.get()).ok());
          ASSERT_TRUE(Commit(w.get()).ok());
        }
        const uint64_t before = w->last().id;
        const uint64_t fired_before = env.FaultsFired();
        // A sticky fault is a crash at call n: nothing after it reaches the disk.
        env.InjectFault(FaultOp::kAny, n,
                        mode.enospc ? MemEnv::NoSpace("injected") : MemEnv::Eio("injected"),
                        /*sticky=*/mode.crash_only);
        const Status pushed = Pass(w.get());
        ASSERT_EQ(w->last().id, before);
        StatusOr<CheckpointManifest> committed = pushed;  // the job stops at a failed push
        if (pushed.ok()) committed = Commit(w.get());
        const bool fired = env.FaultsFired() > fired_before;
        env.ClearFaults();
        env.SimulateCrash();
        auto r = ResumeNewestCheckpoint(&env, "/c", Factory(), nullptr);
        ASSERT_TRUE(r.ok()) << mode.name << " n=" << n << ": " << r.status().ToString();
        EXPECT_TRUE(r->warnings.empty()) << mode.name << " n=" << n << ": " << r->warnings[0];
        const std::string got = *ModelDigest(*r->table, *r->model, nullptr);
        if (committed.ok()) {
          EXPECT_EQ(r->manifest.id, committed->id) << mode.name << " n=" << n;
          EXPECT_EQ(got, digests_[committed->id]);
        } else {
          EXPECT_TRUE(r->manifest.id == before || r->manifest.id == before + 1)
              << mode.name << " n=" << n;
          if (r->manifest.id == before) {
            EXPECT_EQ(got, digests_[before]);
          } else {
            // Durable before the failure: its state is the one the commit wrote.
            const std::string want = Digest();
            EXPECT_EQ(got, want) << mode.name << " n=" << n;
          }
        }
        if (!fired) break;  // n is past the window's last call
      }
      EXPECT_GT(n, 8u) << mode.name << " phase " << phase;
    }
  }
}

// Test 4: flipped bits in every file of a chain are detected on load, named, and the previous
// checkpoint is used; a state never loads with a wrong value.
TEST_F(CheckpointTest, FlippedBitsInAnyCheckpointFileAreDetectedAndThePreviousOneIsUsed) {
  const std::string dir = TempDirPath();
  Env* env = Env::Posix();
  auto w = Writer(env, {dir, 1, 8, 8});
  for (int p = 0; p < 3; ++p) {
    ASSERT_TRUE(Pass(w.get()).ok());
    ASSERT_TRUE(Commit(w.get()).ok());
  }
  Random pick(3);
  uint64_t flips = 0, detected = 0;
  struct Target {
    uint64_t id;
    const char* file;
  };
  for (const Target t : {Target{3, "MANIFEST"}, Target{3, "sparse.bin"}, Target{3, "dense.bin"},
                         Target{1, "sparse.bin"}, Target{2, "MANIFEST"}}) {
    const std::string path = dir + "/" + CheckpointName(t.id) + "/" + t.file;
    std::string good;
    ASSERT_TRUE(ReadFileToString(env, path, &good).ok());
    const uint64_t bits = good.size() * 8;
    const uint64_t samples = std::min<uint64_t>(bits, 600);
    for (uint64_t i = 0; i < samples; ++i) {
      const uint64_t bit = samples == bits ? i : pick.Below(bits);
      std::string bad = good;
      bad[bit / 8] ^= static_cast<char>(1 << (bit % 8));
      ASSERT_TRUE(WriteFileAtomic(env, path, bad).ok());
      ++flips;
      auto r = ResumeNewestCheckpoint(env, dir, Factory(), nullptr);
      if (t.id == 2) {
        // A middle delta's MANIFEST: neither it nor the delta after it loads; the base does.
        ASSERT_TRUE(r.ok()) << "bit " << bit << ": " << r.status().ToString();
        ASSERT_EQ(r->manifest.id, 1u) << "MANIFEST bit " << bit << " was not detected";
        EXPECT_EQ(*ModelDigest(*r->table, *r->model, nullptr), digests_[1]);
        ASSERT_EQ(r->warnings.size(), 2u);
        EXPECT_NE(r->warnings[1].find("ckpt-000002/MANIFEST"), std::string::npos);
        ++detected;
      } else if (t.id == 3) {
        // The newest is damaged: ckpt-000002 loads, with a warning that names the file.
        ASSERT_TRUE(r.ok()) << t.file << " bit " << bit << ": " << r.status().ToString();
        ASSERT_EQ(r->manifest.id, 2u) << t.file << " bit " << bit << " was not detected";
        EXPECT_EQ(*ModelDigest(*r->table, *r->model, nullptr), digests_[2]);
        ASSERT_EQ(r->warnings.size(), 1u);
        EXPECT_NE(r->warnings[0].find(t.file), std::string::npos) << r->warnings[0];
        EXPECT_NE(r->warnings[0].find("resuming from ckpt-000002"), std::string::npos);
        ++detected;
      } else {
        // The chain's base: nothing loads.
        ASSERT_FALSE(r.ok()) << t.file << " of " << t.id << " bit " << bit << " was not detected";
        EXPECT_NE(r.status().message().find(t.file), std::string::npos) << r.status().message();
        ++detected;
      }
    }
    ASSERT_TRUE(WriteFileAtomic(env, path, good).ok());
  }
  EXPECT_EQ(detected, flips);
  auto r = ResumeNewestCheckpoint(env, dir, Factory(), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->manifest.id, 3u);
  auto report = InspectCheckpoints(env, dir);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ((*report)["resumes_from"], "ckpt-000003");
  EXPECT_EQ((*report)["checkpoints"].size(), 3u);
  (void)std::system(("rm -rf " + dir).c_str());
}

TEST_F(CheckpointTest, InspectReportsEachCheckpointAndWhichOneAResumeWouldLoad) {
  MemEnv env;
  auto w = Writer(&env, {"/c", 1, 8, 8});
  for (int p = 0; p < 3; ++p) {
    ASSERT_TRUE(Pass(w.get()).ok());
    ASSERT_TRUE(Commit(w.get()).ok());
  }
  ASSERT_TRUE(env.FlipBit("/c/ckpt-000002/dense.bin", 100).ok());
  auto report = InspectCheckpoints(&env, "/c");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const auto& list = (*report)["checkpoints"];
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["kind"], "base");
  EXPECT_EQ(list[1]["kind"], "delta");
  EXPECT_TRUE(list[0]["verified"].get<bool>());
  EXPECT_FALSE(list[1]["verified"].get<bool>());
  EXPECT_NE(list[1]["error"].get<std::string>().find("dense.bin"), std::string::npos);
  // ckpt-000003 needs ckpt-000002's rows, not its dense state: a resume loads ckpt-000003.
  EXPECT_EQ((*report)["resumes_from"], "ckpt-000003");
  auto r = ResumeNewestCheckpoint(&env, "/c", Factory(), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->manifest.id, 3u);
  ASSERT_TRUE(env.FlipBit("/c/ckpt-000002/sparse.bin", 900).ok());
  report = InspectCheckpoints(&env, "/c");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ((*report)["resumes_from"], "ckpt-000001");
}

}  // namespace
}  // namespace ctrbox
