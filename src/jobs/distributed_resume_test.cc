// The distributed train job (distributed_train_test.cc) stopped and resumed: a fault on a
// rank, resume on another number of ranks (generated rows, files, memory-sized passes), ranks
// over a tiered table, and a model continued by more ranks than saved it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/model_dir.h"
#include "ckpt/ranks_checkpoint.h"
#include "dist/comm.h"
#include "jobs/data.h"
#include "jobs/distributed_test_util.h"
#include "jobs/evaluator.h"
#include "jobs/trainer.h"
#include "jobs/trainer_test_util.h"
#include "util/logging.h"
#include "util/mem_env.h"

namespace ctrbox {
namespace {

using namespace dist_testing;  // NOLINT: the tests' helpers
using testing::SmallJob;
using testing::TempDir;
using testing::TrainJson;

TEST(DistributedTrainTest, AFullDiskOnARankStopsEveryRankAndResumeEndsWithTheUninterruptedModel) {
  JobConfig job = testing::SmallSsdJobInMemEnv("/m");
  job.data.paths.clear();
  job.train.batch_size = kBatch;
  job.pipeline.pass_examples = kPass;
  job.storage.memory_budget = 1 << 20;  // rows go to the SSD files and come back
  job.ckpt.dir = "/c";
  job.ckpt.every_passes = 1;
  job.resume = true;
  auto fresh = [&]() {
    auto env = std::make_unique<MemEnv>();
    EXPECT_TRUE(env->CreateDirs("/d").ok());
    for (int f = 0; f < kFiles; ++f) {
      std::string text;
      for (const auto& l : Lines(f * 1024, (f + 1) * 1024)) text += l;
      const std::string path = "/d/part-" + std::to_string(f) + ".tsv";
      EXPECT_TRUE(WriteFileAtomic(env.get(), path, text).ok());
    }
    return env;
  };
  for (int f = 0; f < kFiles; ++f)
    job.data.paths.push_back("/d/part-" + std::to_string(f) + ".tsv");
  std::string digest;
  uint64_t calls = 0;
  {
    auto env = fresh();
    const uint64_t before = env->Calls(FaultOp::kAny);
    auto r = RunRanks(2, job, env.get());
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(r[k].ok()) << r[k].status().ToString();
    digest = (*r[0])["digest"];
    calls = env->Calls(FaultOp::kAny) - before;
    ASSERT_GT((*r[0])["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
  }
  RecordProperty("io_calls_per_run", std::to_string(calls));
  int failed = 0;
  int i = 0;
  for (uint64_t n = 1; n <= calls; n += 1 + calls / 12, ++i) {
    SCOPED_TRACE(::testing::Message() << "fault at I/O call " << n << " of " << calls);
    auto env = fresh();
    env->InjectFault(FaultOp::kAny, n,
                     i % 2 ? MemEnv::NoSpace("injected") : MemEnv::Eio("injected"),
                     /*sticky=*/true);
    Status stopped_by;
    auto r = RunRanks(2, job, env.get(), &stopped_by, /*timeout=*/60);
    env->ClearFaults();
    if (!r[0].ok() || !r[1].ok()) {
      ++failed;
      // Every rank stopped with an error: the injected one, or the group's abort.
      const std::string both = r[0].status().ToString() + " | " + r[1].status().ToString();
      EXPECT_FALSE(r[0].ok()) << both;
      EXPECT_FALSE(r[1].ok()) << both;
      EXPECT_NE(both.find("injected"), std::string::npos) << both;
      // The group was stopped by the failed rank's abort, at its first error, not by an
      // exchange's timeout (dist.timeout_seconds): no stage of either rank waited for an
      // exchange that a stopped stage would never join. (Before the stage runner aborted the
      // ranks at once, 2 runs in 21 waited the whole timeout here.)
      EXPECT_NE(stopped_by.message().find("injected"), std::string::npos) << stopped_by.ToString();
    }
    auto again = RunRanks(2, job, env.get());
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(again[k].ok()) << again[k].status().ToString();
    EXPECT_EQ((*again[0])["digest"], digest);
    EXPECT_EQ((*again[0])["job_examples"], kFiles * 1024u);
  }
  EXPECT_GT(failed, 6);
}

// A rank whose input ends first trains empty passes; its checkpoints count them. --resume
// (here of the finished job, from its final checkpoint) skips its input to the end without
// taking that for changed data, and ends with the same model.
TEST(DistributedTrainTest, ResumeWhereOneRanksInputEndedFirst) {
  TempDir dir;
  Data d = WriteFiles(dir);
  {  // rank 1's second file is short
    std::string text;
    for (size_t i = 0; i < 512; ++i) text += d.rows[3][i];
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), d.files[3], text).ok());
  }
  JobConfig job = Job(dir.File("m"), /*sgd=*/false);
  job.data.paths = d.files;
  job.ckpt.dir = dir.File("ckpt");
  job.ckpt.every_passes = 1;
  auto whole = RunRanks(2, job);
  ASSERT_TRUE(whole[0].ok()) << whole[0].status().ToString();
  EXPECT_EQ((*whole[0])["examples"], 3 * kRowsPerFile + 512);
  job.resume = true;
  job.fresh = false;
  job.model_dir = dir.File("resumed");
  auto resumed = RunRanks(2, job);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(resumed[r].ok()) << resumed[r].status().ToString();
    EXPECT_EQ((*resumed[r])["digest"], (*whole[r])["digest"]);
    EXPECT_TRUE(resumed[r]->contains("resumed_from"));
  }
}

// One process on 8 192 generated rows with SGD, and its model in *want: what a job resumed on
// another number of ranks must end with, up to summation order.
JobConfig OneProcessOnGeneratedRows(const TempDir& dir, Model* want) {
  JobConfig one = Job(dir.File("one"), /*sgd=*/true);
  one.generated.rows = 8192;
  one.generated.test_rows = 1000;
  auto single = TrainJson(Env::Posix(), one, nullptr);
  EXPECT_TRUE(single.ok()) << single.status().ToString();
  if (single.ok()) *want = Load(one.model_dir);
  return one;
}

// --resume with another number of ranks (generated data): the checkpoint that 2 ranks
// committed after half the passes is taken up by 4 ranks (and one 4 ranks committed by 2),
// each loading the rows it owns from every chain; the job ends with the one-process model up
// to summation order, so every row was loaded exactly once and every example trained once.
TEST(DistributedTrainTest, ResumeWithAnotherNumberOfRanksRepartitionsTheCheckpoint) {
  TempDir dir;
  Model want;
  const JobConfig one = OneProcessOnGeneratedRows(dir, &want);
  ASSERT_FALSE(want.rows.empty());
  for (auto [from, to] : {std::pair{2, 4}, std::pair{4, 2}}) {
    const std::string tag = std::to_string(from) + "to" + std::to_string(to);
    JobConfig job = one;
    job.model_dir = dir.File("first" + tag);
    job.ckpt.dir = dir.File("ckpt" + tag);
    job.ckpt.every_passes = 1;
    job.ckpt.keep = 10;
    auto first = RunRanks(from, job);
    ASSERT_TRUE(first[0].ok()) << first[0].status().ToString();
    // As if the job had stopped after pass 2 of 4: the ranks' commit names checkpoint 2.
    ASSERT_TRUE(
        CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir, {static_cast<uint32_t>(from), 2}).ok());
    job.resume = true;
    job.fresh = false;
    job.model_dir = dir.File("resumed" + tag);
    auto resumed = RunRanks(to, job);
    for (int r = 0; r < to; ++r) {
      ASSERT_TRUE(resumed[r].ok())
          << tag << " rank " << r << ": " << resumed[r].status().ToString();
    }
    EXPECT_EQ((*resumed[0])["examples"], 4096u) << tag;      // this run: passes 3 and 4
    EXPECT_EQ((*resumed[0])["job_examples"], 8192u) << tag;  // the job
    const Model got = Load(job.model_dir);                   // a key twice would fail here
    EXPECT_EQ(got.rows.size(), want.rows.size()) << tag;
    EXPECT_LT(Distance(got, want), 1e-6) << tag;
  }
}

// Every key's show and click counts: the sums over the examples trained, whatever their order.
std::map<uint64_t, std::pair<float, float>> Counts(const Model& m) {
  std::map<uint64_t, std::pair<float, float>> c;
  for (const auto& [key, v] : m.rows) c[key] = {v[0], v[1]};
  return c;
}

// The checkpoint ids in rank 0's chain of a job of n ranks, oldest first.
std::vector<uint64_t> RankCheckpoints(const std::string& ckpt_dir, int n) {
  auto ids = ListCheckpoints(Env::Posix(), RankCheckpointDir(ckpt_dir, 0, n));
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<uint64_t>();
}

// --resume of a job of files on another number of ranks (docs/distributed.md, "Resuming files
// on another number of ranks"): the new ranks read what the old ones had left of their files,
// mid-file and with the second epoch still to come. Every example is trained exactly once:
// every key's show and click counts (sums over the examples, whatever their order) equal one
// process's over the two epochs, and a key loaded twice would fail Load. Whole files and byte
// ranges (fewer files than ranks), and a plan planned again on a third number of ranks.
TEST(DistributedTrainTest, ResumeOfFilesWithAnotherNumberOfRanksTrainsEveryExampleOnce) {
  TempDir dir;
  const Data d = WriteFiles(dir);
  struct Case {
    int files, from, to, then;
    uint64_t checkpoint;  // mid-file, in the first epoch
  };
  for (const Case c : {Case{4, 2, 4, 3, 2}, Case{4, 4, 2, 1, 2}, Case{2, 4, 3, 2, 1}}) {
    const std::string tag = fmt::format("{}files{}to{}to{}", c.files, c.from, c.to, c.then);
    JobConfig job = Job(dir.File("one" + tag), /*sgd=*/true);
    job.data.paths.assign(d.files.begin(), d.files.begin() + c.files);
    job.train.epochs = 2;
    job.train.batch_size = 768;  // 2, 3 and 4 ranks take equal shares
    job.pipeline.pass_examples = 3072;
    auto single = TrainJson(Env::Posix(), job, nullptr);
    ASSERT_TRUE(single.ok()) << single.status().ToString();
    const auto want = Counts(Load(job.model_dir));
    const uint64_t examples = 2 * c.files * kRowsPerFile;

    job.model_dir = dir.File("first" + tag);
    job.ckpt.dir = dir.File("ckpt" + tag);
    job.ckpt.every_passes = 1;
    job.ckpt.keep = 20;
    auto first = RunRanks(c.from, job);
    ASSERT_TRUE(first[0].ok()) << tag << ": " << first[0].status().ToString();
    // As if the job had stopped there.
    ASSERT_TRUE(CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir,
                                      {static_cast<uint32_t>(c.from), c.checkpoint})
                    .ok());
    job.resume = true;
    job.fresh = false;
    job.model_dir = dir.File("resumed" + tag);
    auto resumed = RunRanks(c.to, job);
    for (int r = 0; r < c.to; ++r) {
      ASSERT_TRUE(resumed[r].ok())
          << tag << " rank " << r << ": " << resumed[r].status().ToString();
    }
    EXPECT_EQ((*resumed[0])["job_examples"], examples) << tag;
    EXPECT_EQ(Counts(Load(job.model_dir)), want) << tag;
    for (int r = 0; r < c.to; ++r) {  // each rank took a share
      EXPECT_GT((*resumed[0])["per_rank"][r]["examples"].get<uint64_t>(), 0u) << tag << r;
    }

    // The plan's ranks resume their own checkpoint bit for bit...
    const std::vector<uint64_t> ids = RankCheckpoints(job.ckpt.dir, c.to);
    ASSERT_GE(ids.size(), 2u) << tag;
    const uint64_t mid = ids[(ids.size() - 1) / 2];  // not the last
    ASSERT_TRUE(
        CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir, {static_cast<uint32_t>(c.to), mid}).ok());
    job.model_dir = dir.File("again" + tag);
    auto again = RunRanks(c.to, job);
    ASSERT_TRUE(again[0].ok()) << tag << ": " << again[0].status().ToString();
    EXPECT_EQ((*again[0])["digest"], (*resumed[0])["digest"]) << tag;
    // ... and it is planned again on a third number of ranks.
    ASSERT_TRUE(
        CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir, {static_cast<uint32_t>(c.to), mid}).ok());
    job.model_dir = dir.File("then" + tag);
    auto then = RunRanks(c.then, job);
    ASSERT_TRUE(then[0].ok()) << tag << ": " << then[0].status().ToString();
    EXPECT_EQ((*then[0])["job_examples"], examples) << tag;
    EXPECT_EQ(Counts(Load(job.model_dir)), want) << tag;
  }
}

// A file edited since the checkpoint is refused, naming it; the old ranks' checkpoints stay.
TEST(DistributedTrainTest, ResumeOfFilesOnOtherRanksRefusesAnEditedFile) {
  TempDir dir;
  Data d = WriteFiles(dir);
  JobConfig job = Job(dir.File("m"), /*sgd=*/false);
  job.data.paths = d.files;
  job.ckpt.dir = dir.File("ckpt");
  job.ckpt.keep = 10;
  auto two = RunRanks(2, job);
  ASSERT_TRUE(two[0].ok()) << two[0].status().ToString();
  ASSERT_TRUE(CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir, {2, 2}).ok());
  std::string text;
  for (size_t i = 1; i < d.rows[3].size(); ++i) text += d.rows[3][i];  // a line less
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), d.files[3], text).ok());
  job.resume = true;
  job.fresh = false;
  auto four = RunRanks(4, job);
  bool named = false;
  for (int r = 0; r < 4; ++r) {
    if (!four[r].ok() && four[r].status().code() == StatusCode::kInvalidArgument) {
      named = four[r].status().message().find(d.files[3]) != std::string::npos;
      if (named) break;
    }
  }
  EXPECT_TRUE(named) << four[0].status().ToString();
  EXPECT_TRUE(Env::Posix()->FileExists(dir.File("ckpt/RANKS")));
}

// Ranks with tiers: each rank's part over an SSD tier with a memory budget far below its
// rows (so most rows go through the files) trains the in-memory ranks' model bit for bit.
TEST(DistributedTrainTest, RanksWithATieredPartEqualTheInMemoryRanks) {
  TempDir dir;
  Data d = WriteFiles(dir);
  JobConfig job = Job(dir.File("mem"), /*sgd=*/false);
  job.data.paths = d.files;
  auto mem = RunRanks(2, job);
  ASSERT_TRUE(mem[0].ok()) << mem[0].status().ToString();
  JobConfig tiered = job;
  tiered.model_dir = dir.File("tiered");
  tiered.storage.ssd.dir = dir.File("ssd");
  tiered.storage.ssd.group_bits = 6;
  tiered.storage.memory_budget = 2 << 20;  // the rows take ~3.5 MiB per rank, a pass ~1
  tiered.storage.evict_start = 0.3;
  tiered.storage.evict_stop = 0.2;
  auto ranks = RunRanks(2, tiered);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ranks[r].ok()) << ranks[r].status().ToString();
    EXPECT_EQ((*ranks[r])["digest"], (*mem[r])["digest"]);
  }
  // Rows did go through the files.
  const auto& storage = (*ranks[0])["storage"];
  EXPECT_GT(storage["loaded_from_ssd"].get<uint64_t>(), 0u) << storage.dump();
}

// Files of `rows[f]` rows each.
std::vector<std::string> WriteFilesOf(const TempDir& dir, const std::vector<uint64_t>& rows) {
  std::vector<std::string> files;
  uint64_t at = 0;
  for (size_t f = 0; f < rows.size(); ++f) {
    std::string text;
    for (const auto& l : Lines(at, at + rows[f])) text += l;
    at += rows[f];
    files.push_back(dir.File("rows-" + std::to_string(f) + ".tsv"));
    EXPECT_TRUE(WriteFileAtomic(Env::Posix(), files.back(), text).ok());
  }
  return files;
}

// Tiered shards whose memory budget holds far fewer rows than a pass of pass_examples uses.
void Tier(JobConfig* job, const std::string& ssd) {
  job->storage.ssd.dir = ssd;
  job->storage.ssd.group_bits = 6;
  job->storage.memory_budget = 2 << 20;
  job->storage.evict_start = 0.3;
  job->storage.evict_stop = 0.2;
}

// Passes sized by memory on several ranks (docs/distributed.md, "Pass sizing"): the ranks
// agree on every cut, so each cuts its share of a pass at the same minibatch and the global
// minibatches stay those of passes of pass_examples. Ranks over shards with a small budget
// train the in-memory ranks' model bit for bit, over two epochs of files of unequal lengths
// (the ranks' epochs end mid pass at different rows; with 4 ranks and 3 files, in byte
// ranges); no pass holds more keys than the budget's rows; a checkpoint taken mid run
// resumes to the same digest.
TEST(DistributedTrainTest, PassesSizedByMemoryAreCutAlikeOnEveryRankAndKeepTheModel) {
  TempDir dir;
  const std::vector<std::string> files = WriteFilesOf(dir, {2048, 1500, 1000});
  for (int n : {2, 4}) {
    const std::string tag = std::to_string(n) + "ranks";
    JobConfig job = Job(dir.File("mem" + tag), /*sgd=*/false);
    job.data.paths = files;
    job.train.epochs = 2;
    auto mem = RunRanks(n, job);
    ASSERT_TRUE(mem[0].ok()) << tag << ": " << mem[0].status().ToString();

    JobConfig tiered = job;
    tiered.model_dir = dir.File("tiered" + tag);
    Tier(&tiered, dir.File("ssd" + tag));
    tiered.ckpt.dir = dir.File("ckpt" + tag);
    tiered.ckpt.keep = 50;
    auto ranks = RunRanks(n, tiered);
    uint64_t cut = 0;
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(ranks[r].ok()) << tag << " rank " << r << ": " << ranks[r].status().ToString();
      const nlohmann::json& rep = *ranks[r];
      EXPECT_EQ(rep["digest"], (*mem[r])["digest"]) << tag << " rank " << r;
      EXPECT_EQ(rep["passes"], (*ranks[0])["passes"]) << tag << " rank " << r;
      const nlohmann::json& sizing = rep["pass_sizing"];
      EXPECT_EQ(sizing["by"], "memory") << sizing.dump();
      EXPECT_LE(sizing["max_pass_keys"].get<uint64_t>(), sizing["max_keys"].get<uint64_t>());
      cut += sizing["closed_by_keys"].get<uint64_t>() + sizing.value("closed_by_memory", 0u);
    }
    EXPECT_GT(cut, 0u) << tag << ": no pass was cut";
    EXPECT_GT((*ranks[0])["passes"].get<uint64_t>(), (*mem[0])["passes"].get<uint64_t>()) << tag;

    // Resume from a checkpoint in the middle.
    const std::vector<uint64_t> ids = RankCheckpoints(tiered.ckpt.dir, n);
    ASSERT_GE(ids.size(), 3u) << tag;
    ASSERT_TRUE(CommitRanksCheckpoint(Env::Posix(), tiered.ckpt.dir,
                                      {static_cast<uint32_t>(n), ids[ids.size() / 2]})
                    .ok());
    tiered.resume = true;
    tiered.fresh = false;
    tiered.model_dir = dir.File("resumed" + tag);
    auto resumed = RunRanks(n, tiered);
    ASSERT_TRUE(resumed[0].ok()) << tag << ": " << resumed[0].status().ToString();
    EXPECT_EQ((*resumed[0])["digest"], (*ranks[0])["digest"]) << tag;
  }
}

// ... and resumed on another number of ranks (generated data): the new ranks skip whole passes
// of pass_examples, whatever pieces either number of ranks cut them into, and end with the
// one-process model up to summation order.
TEST(DistributedTrainTest, PassesSizedByMemoryResumeOnAnotherNumberOfRanks) {
  TempDir dir;
  Model want;
  const JobConfig one = OneProcessOnGeneratedRows(dir, &want);
  ASSERT_FALSE(want.rows.empty());
  JobConfig job = one;
  job.model_dir = dir.File("first");
  Tier(&job, dir.File("ssd"));
  job.ckpt.dir = dir.File("ckpt");
  job.ckpt.keep = 50;
  auto first = RunRanks(2, job);
  ASSERT_TRUE(first[0].ok()) << first[0].status().ToString();
  EXPECT_GT((*first[0])["pass_sizing"]["closed_by_keys"].get<uint64_t>(), 0u);
  // As if the job had stopped after grid pass 2 of 4 (the checkpoints come at their ends).
  const std::vector<uint64_t> ids = RankCheckpoints(job.ckpt.dir, 2);
  ASSERT_GE(ids.size(), 4u);
  ASSERT_TRUE(CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir, {2, ids[1]}).ok());
  job.resume = true;
  job.fresh = false;
  job.model_dir = dir.File("resumed");
  auto resumed = RunRanks(4, job);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(resumed[r].ok()) << "rank " << r << ": " << resumed[r].status().ToString();
  }
  EXPECT_EQ((*resumed[0])["job_examples"], 8192u);
  const Model got = Load(job.model_dir);
  EXPECT_EQ(got.rows.size(), want.rows.size());
  EXPECT_LT(Distance(got, want), 1e-6);
}

// Generated data: rank r generates the blocks of b / N rows whose index mod N is r, so the
// ranks train one process's minibatches with no file to interleave; the held-out rows are
// evaluated by every rank (rows looked up from their owners) and reported over all of them.
TEST(DistributedTrainTest, GeneratedDataTrainsOneProcesssMinibatchesAndEvaluatesOnEveryRank) {
  TempDir dir;
  JobConfig job = Job(dir.File("one"), /*sgd=*/true);
  job.generated.rows = 8192 + 300;  // a last minibatch some ranks have no rows of
  job.generated.test_rows = 3000;
  auto single = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  const Model want = Load(job.model_dir);
  for (int n : {2, 4}) {
    JobConfig ranks_job = job;
    ranks_job.model_dir = dir.File("ranks" + std::to_string(n));
    auto ranks = RunRanks(n, ranks_job);
    for (int r = 0; r < n; ++r) ASSERT_TRUE(ranks[r].ok()) << ranks[r].status().ToString();
    const nlohmann::json& rep = *ranks[0];
    EXPECT_EQ(rep["examples"], job.generated.rows);
    EXPECT_LT(Distance(Load(ranks_job.model_dir), want), 1e-6) << n << " ranks";
    EXPECT_EQ(rep["test_examples"], 3000u);
    // Rank 0's pass lines are the job's: every rank's rows of each pass.
    std::string log;
    ASSERT_TRUE(ReadFileToString(Env::Posix(), ranks_job.model_dir + "/metrics.jsonl", &log).ok());
    uint64_t pass_examples = 0, last = 0;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
      auto j = nlohmann::json::parse(line);
      if (j["event"] != "pass") continue;
      pass_examples += j["pass_examples"].get<uint64_t>();
      last = j["examples"].get<uint64_t>();
    }
    EXPECT_EQ(pass_examples, job.generated.rows);
    EXPECT_EQ(last, job.generated.rows);
    EXPECT_NEAR(rep["test_auc"].get<double>(), (*single)["test_auc"].get<double>(), 1e-5);
    EXPECT_EQ(rep["oracle_auc"], (*single)["oracle_auc"]);
  }
}

// A model saved by 2 ranks, continued by 4 (each loads the rows it owns) and by 1 on the same
// global minibatches: the same model up to summation order, so every row was loaded once.
TEST(DistributedTrainTest, AModelSavedByTwoRanksIsContinuedByFourWithEveryRowOnce) {
  TempDir dir;
  Data d = WriteFiles(dir);
  JobConfig first = Job(dir.File("two"), /*sgd=*/true);
  first.data.paths = d.files;
  auto two = RunRanks(2, first);
  ASSERT_TRUE(two[0].ok()) << two[0].status().ToString();
  // New data for the continuation: the same generator further on.
  Data more;
  for (int f = 0; f < kFiles; ++f) {
    more.rows.push_back(Lines((kFiles + f) * kRowsPerFile, (kFiles + f + 1) * kRowsPerFile));
    std::string text;
    for (const auto& l : more.rows.back()) text += l;
    more.files.push_back(dir.File("more-" + std::to_string(f) + ".tsv"));
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), more.files.back(), text).ok());
  }
  namespace fs = std::filesystem;
  fs::copy(first.model_dir, dir.File("four"), fs::copy_options::recursive);
  fs::copy(first.model_dir, dir.File("one"), fs::copy_options::recursive);
  JobConfig four = Job(dir.File("four"), /*sgd=*/true);
  four.fresh = false;
  four.train.continue_model = true;
  four.data.paths = more.files;
  auto ranks = RunRanks(4, four);
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(ranks[r].ok()) << ranks[r].status().ToString();
  JobConfig one = Job(dir.File("one"), /*sgd=*/true);
  one.fresh = false;
  one.train.continue_model = true;
  one.data.paths = {InterleavedFile(dir, more, 4)};
  auto single = TrainJson(Env::Posix(), one, nullptr);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  const Model want = Load(one.model_dir), got = Load(four.model_dir);
  EXPECT_GT(want.rows.size(), Load(first.model_dir).rows.size());
  EXPECT_LT(Distance(got, want), 1e-6);
  EXPECT_EQ((*ranks[0])["keys"], (*single)["keys"]);
}

}  // namespace
}  // namespace ctrbox
