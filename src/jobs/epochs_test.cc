// Per-epoch validation and early stopping (jobs/epochs.cc, docs/model.md "Validation and
// early stopping") through the whole train job.
#include <gtest/gtest.h>

#include <set>

#include "ckpt/model_dir.h"
#include "jobs/trainer.h"
#include "jobs/trainer_test_util.h"

namespace ctrbox {
namespace {

using testing::SmallJob;
using testing::StopAfter;
using testing::TempDir;
using testing::TrainJson;
using testing::WriteCriteo;

// 8000 generated rows: the small model overfits them after one epoch (as ctrbox's default
// does, docs/model.md), so a second epoch scores worse on the rows held back.
JobConfig ValidatedJob(const std::string& data, const std::string& model_dir) {
  JobConfig job = SmallJob(model_dir);
  job.data.paths = {data};
  job.pipeline.pass_examples = 2000;
  job.train.validation_fraction = 0.2;
  return job;
}

std::vector<double> Loglosses(const nlohmann::json& report) {
  std::vector<double> out;
  for (const auto& e : report["validation"]["history"]) {
    out.push_back(e["validation"]["logloss"].get<double>());
  }
  return out;
}

TEST(EpochsTest, AutoStopsAfterThePatienceAndKeepsTheBestEpochsModel) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 8000, 5);
  JobConfig job = ValidatedJob(data, dir.File("auto"));
  job.train.epochs_auto = true;
  job.train.max_epochs = 6;
  job.train.patience = 2;
  auto a = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const nlohmann::json& v = (*a)["validation"];
  const uint32_t best = v["best_epoch"], done = v["epochs"];
  const std::vector<double> ll = Loglosses(*a);
  ASSERT_EQ(ll.size(), done);
  // It stopped `patience` epochs after the best, which has the lowest logloss of all.
  ASSERT_TRUE(v["stopped_early"].get<bool>()) << v.dump();
  EXPECT_EQ(done, best + 2);
  for (uint32_t e = 1; e <= done; ++e) {
    if (e != best) {
      EXPECT_GT(ll[e - 1], ll[best - 1]) << e;
    }
  }
  EXPECT_EQ(v["best_logloss"].get<double>(), ll[best - 1]);
  ASSERT_LT(best, done);  // the kept model is an earlier epoch's: it was restored
  EXPECT_EQ((*a)["epochs"], done);

  // The same job trained just `best` epochs ends with that model, bit for bit.
  JobConfig fixed = ValidatedJob(data, dir.File("fixed"));
  fixed.train.epochs = best;
  auto f = TrainJson(Env::Posix(), fixed, nullptr);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)["digest"], (*a)["digest"]);
  EXPECT_FALSE((*f)["validation"]["stopped_early"].get<bool>());
  auto saved = VerifyModel(Env::Posix(), job.model_dir);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->digest, (*a)["digest"]);
  // What the report and the MANIFEST say is the kept model's: the training metrics of epoch
  // `best` (not the discarded last epoch's), and the examples that trained it (epochs 1..best).
  const nlohmann::json& kept = v["history"][best - 1];
  EXPECT_EQ((*a)["logloss"], kept["train"]["logloss"]);
  EXPECT_EQ((*a)["auc"], kept["train"]["auc"]);
  EXPECT_EQ(saved->trained_examples, uint64_t{best} * kept["examples"].get<uint64_t>());
  auto fixed_saved = VerifyModel(Env::Posix(), fixed.model_dir);
  ASSERT_TRUE(fixed_saved.ok()) << fixed_saved.status().ToString();
  EXPECT_EQ(saved->trained_examples, fixed_saved->trained_examples);
  // The metrics log has one epoch line per epoch.
  std::string log;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), dir.File("auto/metrics.jsonl"), &log).ok());
  size_t lines = 0;
  for (size_t p = log.find("\"event\":\"epoch\""); p != std::string::npos;
       p = log.find("\"event\":\"epoch\"", p + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, done);
}

// train.max_epochs and train.early_stop_patience steer epochs: auto only: without it they are
// refused, not ignored.
TEST(EpochsTest, AutoOnlyKeysWithoutAutoAreRefused) {
  JobConfig job = ValidatedJob("x.tsv", "m");
  job.train.epochs = 3;
  job.train.max_epochs = 5;
  Status s = job.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("train.max_epochs applies to train.epochs: auto"), std::string::npos)
      << s.ToString();
  job.train.max_epochs = 0;
  job.train.patience = 3;
  s = job.Validate();
  EXPECT_NE(s.ToString().find("train.early_stop_patience"), std::string::npos) << s.ToString();
  job.train.epochs_auto = true;
  EXPECT_TRUE(job.Validate().ok());
}

TEST(EpochsTest, TheEpochsTrainOnEveryRowButTheHeldBackOnes) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 6000, 6);
  JobConfig job = ValidatedJob(data, dir.File("m"));
  job.train.epochs = 2;
  auto r = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json& h = (*r)["validation"]["history"];
  ASSERT_EQ(h.size(), 2u);
  const uint64_t held = h[0]["validation"]["examples"], trained = h[0]["examples"];
  EXPECT_EQ(held + trained, 6000u);
  EXPECT_NEAR(double(held), 1200.0, 200.0);  // 0.2 of the rows (binomial sd 31)
  EXPECT_EQ(h[1]["validation"]["examples"], held);
  EXPECT_EQ(h[1]["examples"], trained);
  EXPECT_EQ((*r)["examples"], 2 * trained);
  // Without validation the same epochs train every row.
  JobConfig all = job;
  all.model_dir = dir.File("all");
  all.train.validation_fraction = 0;
  auto a = TrainJson(Env::Posix(), all, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)["examples"], 12000u);
  EXPECT_FALSE(a->contains("validation"));
}

TEST(EpochsTest, AJobStoppedInsideEpochsResumesAtTheEpochAndEqualsOneRun) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 8000, 5);
  JobConfig one_job = ValidatedJob(data, dir.File("one"));
  one_job.train.epochs_auto = true;
  one_job.train.max_epochs = 5;
  auto one = TrainJson(Env::Posix(), one_job, nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();

  JobConfig job = one_job;
  job.model_dir = dir.File("m");
  job.ckpt.dir = dir.File("ckpt");
  job.resume = true;
  // 4 passes an epoch (3200 training rows... 6400 / 2000): stopped in epoch 2, then in 3.
  // Stopped runs go pass by pass: a pipelined one pushes every pass trained before the stop,
  // and may have trained the rest of the epoch by then (CI saw the second run finish epoch 4
  // and the job). Interrupting a pipeline has its own test (PipelineTest.Interrupt...).
  job.pipeline.enabled = false;
  std::atomic<bool> stop{false};
  StopAfter first(6, &stop);
  auto r1 = TrainJson(Env::Posix(), job, &first, &stop);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_TRUE((*r1)["interrupted"].get<bool>());
  EXPECT_FALSE((*r1)["saved"].get<bool>());
  EXPECT_FALSE(ModelExists(Env::Posix(), job.model_dir));
  EXPECT_TRUE(Env::Posix()->FileExists(dir.File("ckpt/best-epoch-1/MANIFEST")));

  stop = false;
  StopAfter second(6, &stop);
  auto r2 = TrainJson(Env::Posix(), job, &second, &stop);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE((*r2)["interrupted"].get<bool>());
  ASSERT_TRUE(r2->contains("resumed_from"));

  stop = false;
  job.train.threads = 1;
  job.pipeline.enabled = true;
  auto r3 = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ((*r3)["digest"], (*one)["digest"]);
  EXPECT_EQ((*r3)["validation"]["history"], (*one)["validation"]["history"]);
  // Done: the same command again trains nothing and keeps the model.
  auto r4 = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_EQ((*r4)["digest"], (*one)["digest"]);
  EXPECT_EQ((*r4)["examples"], 0u);
  // The copies left are the best's and those the checkpoints kept name (a resume may fall
  // back to an older one).
  std::set<std::string> copies,
      named = {"best-epoch-" + std::to_string((*one)["validation"]["best_epoch"].get<uint32_t>())};
  auto children = Env::Posix()->GetChildren(job.ckpt.dir);
  ASSERT_TRUE(children.ok());
  for (const std::string& c : *children) {
    if (c.rfind("best-epoch-", 0) == 0) copies.insert(c);
  }
  auto ids = ListCheckpoints(Env::Posix(), job.ckpt.dir);
  ASSERT_TRUE(ids.ok());
  for (uint64_t id : *ids) {
    auto m = ReadCheckpointManifest(Env::Posix(), job.ckpt.dir, id);
    ASSERT_TRUE(m.ok());
    named.insert("best-epoch-" + std::to_string(m->epochs["best"].get<uint32_t>()));
  }
  EXPECT_EQ(copies, named);
}

TEST(EpochsTest, OverAnSsdTierAndOnTheEmulatedGpuTheModelIsTheSame) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 8000, 5);
  JobConfig job = ValidatedJob(data, dir.File("mem"));
  job.train.epochs_auto = true;
  job.train.max_epochs = 4;
  job.train.patience = 1;
  auto mem = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  ASSERT_LT((*mem)["validation"]["best_epoch"].get<uint32_t>(),
            (*mem)["validation"]["epochs"].get<uint32_t>());

  JobConfig tiered = job;
  tiered.model_dir = dir.File("tiered");
  tiered.storage.ssd.dir = dir.File("ssd");
  tiered.storage.ssd.group_bits = 8;
  tiered.storage.ssd.file_bytes = 64 << 10;
  tiered.storage.memory_budget = 4 << 20;
  tiered.storage.evict_start = 0.3;  // evict early: the SSD tier takes part
  tiered.storage.evict_stop = 0.2;
  auto t = TrainJson(Env::Posix(), tiered, nullptr);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)["digest"], (*mem)["digest"]);
  EXPECT_GT((*t)["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u) << (*t)["storage"].dump();

  JobConfig gpu = job;
  gpu.model_dir = dir.File("gpu");
  gpu.gpu = true;
  gpu.gpu_options.emulate = true;
  auto g = TrainJson(Env::Posix(), gpu, nullptr);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)["digest"], (*mem)["digest"]);
}

TEST(EpochsTest, SettingsThatCannotValidateAreRefused) {
  JobConfig job = SmallJob("");
  job.train.epochs_auto = true;
  job.train.validation_fraction = 0;
  Status s = job.Validate();
  EXPECT_NE(s.message().find("train.validation_fraction is 0"), std::string::npos) << s.ToString();
  job.train.validation_fraction = -1;  // unset: 0.1
  EXPECT_TRUE(job.Validate().ok());
  job.data.paths = {"-"};
  s = job.Validate();
  EXPECT_NE(s.message().find("standard input"), std::string::npos) << s.ToString();
  job.data.paths = {};
  job.dist.ranks = 2;
  s = job.Validate();
  EXPECT_NE(s.message().find("ranks"), std::string::npos) << s.ToString();
  job.dist.ranks = 1;
  job.train.validation_fraction = 0.7;
  s = job.Validate();
  EXPECT_NE(s.message().find("more than half"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ctrbox
