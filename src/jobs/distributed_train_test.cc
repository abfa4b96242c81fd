// A train job of N ranks (threads of this process over LocalGroup; the MPI transport is
// tested by cli/mpi_train_test) against one rank on the same global minibatches
// (docs/distributed.md, "N ranks = 1 rank"). Faults, resumes, tiers and memory-sized passes on
// ranks: distributed_resume_test.cc.
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

TEST(DistributedTrainTest, OneRankOverTheTransportEqualsTheSingleProcessJobBitForBit) {
  TempDir dir;
  Data d = WriteFiles(dir);
  JobConfig job = Job(dir.File("single"), /*sgd=*/false);
  job.data.paths = d.files;
  auto single = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  job.model_dir = dir.File("dist");
  auto ranks = RunRanks(1, job);
  ASSERT_TRUE(ranks[0].ok()) << ranks[0].status().ToString();
  EXPECT_EQ((*ranks[0])["digest"], (*single)["digest"]);
  EXPECT_EQ((*ranks[0])["examples"], kFiles * kRowsPerFile);
}

// Fewer files than ranks: each rank reads the lines that start in its byte range of every
// file (docs/distributed.md, "Byte ranges"). Each rank trains exactly those lines (counted here
// from the file's bytes), the job every line once, and the model is as good as one process's.
TEST(DistributedTrainTest, FewerFilesThanRanksAreSplitByByteRanges) {
  TempDir dir;
  Data d = WriteFiles(dir);
  std::string text;
  for (const auto& rows : d.rows) {
    for (const auto& l : rows) text += l;
  }
  const std::string one_file = dir.File("all.tsv");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), one_file, text).ok());
  const std::string test_file = dir.File("test.tsv");
  std::string test_text;
  for (const auto& l : Lines(100000, 104000)) test_text += l;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), test_file, test_text).ok());

  JobConfig job = Job(dir.File("one"), /*sgd=*/false);
  job.data.paths = {one_file};
  job.train.batch_size = 240;  // a multiple of 2 and 3
  auto single = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  const double single_auc = TestAuc(job.model_dir, test_file);
  for (int n : {2, 3}) {
    // The lines starting in part r of n: [size r / n, size (r + 1) / n).
    std::vector<uint64_t> want(n, 0);
    uint64_t start = 0;
    for (size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
      start = at;
      for (int r = 0; r < n; ++r) {
        if (start >= text.size() * r / n && start < text.size() * (r + 1) / n) want[r]++;
      }
    }
    job.model_dir = dir.File("ranks" + std::to_string(n));
    auto ranks = RunRanks(n, job);
    for (int r = 0; r < n; ++r) ASSERT_TRUE(ranks[r].ok()) << ranks[r].status().ToString();
    EXPECT_EQ((*ranks[0])["examples"], kFiles * kRowsPerFile);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ((*ranks[0])["per_rank"][r]["examples"], want[r]) << n << " ranks, rank " << r;
    }
    // The ranks' minibatches mix rows from n places in the file, one process's from one: at
    // 8 192 rows the test AUC moves by ~0.01 with the order alone.
    EXPECT_NEAR(TestAuc(job.model_dir, test_file), single_auc, 0.02) << n << " ranks";
  }
}

// Runs n ranks and the one-rank job on the interleaved file; returns the shards' directories
// and the one-rank model's.
struct Pair {
  std::string ranks, one;  // the model directories
  std::vector<std::string> digests;
};
Pair TrainBoth(const TempDir& dir, const Data& d, int n, bool sgd, const std::string& tag,
               const std::vector<SlotDims>& slot_dims = {}) {
  Pair p;
  JobConfig one = Job(dir.File(tag + "one" + std::to_string(n)), sgd);
  one.spec.model.slot_dims = slot_dims;
  one.data.paths = {InterleavedFile(dir, d, n)};
  auto single = TrainJson(Env::Posix(), one, nullptr);
  EXPECT_TRUE(single.ok()) << single.status().ToString();
  p.one = one.model_dir;
  JobConfig job = Job(dir.File(tag + "n" + std::to_string(n)), sgd);
  job.spec.model.slot_dims = slot_dims;
  job.data.paths = d.files;
  auto ranks = RunRanks(n, job);
  uint64_t examples = 0;  // the ranks' own, from rank 0's report
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(ranks[r].ok()) << "rank " << r << ": " << ranks[r].status().ToString();
    if (!ranks[r].ok()) continue;
    EXPECT_EQ((*ranks[r])["examples"], kFiles * kRowsPerFile);  // the job's
    p.digests.push_back((*ranks[r])["digest"]);
  }
  if (ranks[0].ok()) {
    for (const auto& line : (*ranks[0])["per_rank"]) examples += line["examples"].get<uint64_t>();
  }
  EXPECT_EQ(examples, kFiles * kRowsPerFile);
  p.ranks = job.model_dir;
  // One model, whose digest every rank reported.
  auto manifest = ReadManifest(Env::Posix(), p.ranks);
  EXPECT_TRUE(manifest.ok()) << manifest.status().ToString();
  if (manifest.ok()) {
    EXPECT_EQ(manifest->files.size(), size_t(n) + 1);
    for (const auto& d : p.digests) EXPECT_EQ(d, manifest->digest);
  }
  return p;
}

// With linear updates the N-rank model is the one-rank model up to float rounding: measured
// 2.7e-8 after 32 minibatches (relative to 1 + |value|); the bound is 1e-6. A rank that missed
// another's gradient share, or a holder that took a different update than the owner, is off
// by ~1e-3 or more.
TEST(DistributedTrainTest, NRanksTrainTheOneRankModelUpToSummationOrder) {
  TempDir dir;
  Data d = WriteFiles(dir);
  for (int n : {2, 4}) {
    Pair p = TrainBoth(dir, d, n, /*sgd=*/true, "sgd");
    const Model want = Load(p.one), got = Load(p.ranks);
    EXPECT_GT(want.rows.size(), 1000u);
    const double distance = Distance(got, want);
    RecordProperty("distance_" + std::to_string(n), std::to_string(distance));
    EXPECT_LT(distance, 1e-6) << n << " ranks";
  }
}

// model.slot_dims: the tables' rows move between the ranks at their own sizes and the gradient
// records are the widest table's; N ranks still train the one-rank model.
TEST(DistributedTrainTest, NRanksWithSlotDimensionsTrainTheOneRankModel) {
  TempDir dir;
  Data d = WriteFiles(dir);
  Pair p = TrainBoth(dir, d, 2, /*sgd=*/true, "dims", {{{0}, 12}, {{1}, 3}});
  const Model want = Load(p.one), got = Load(p.ranks);
  EXPECT_GT(want.rows.size(), 1000u);
  EXPECT_LT(Distance(got, want), 1e-6);
}

// With the default optimizers (Adagrad, Adam) the models drift apart by the first steps'
// signs (up to ~1e-3 here), and the test AUC stays within 0.0005; a fixed number of ranks is
// bit-identical run after run.
TEST(DistributedTrainTest, DefaultOptimizersGiveTheOneRankAucAndRepeatBitForBit) {
  TempDir dir;
  Data d = WriteFiles(dir);
  const std::string test = dir.File("test.tsv");
  {
    std::string text;
    for (const auto& l : Lines(kFiles * kRowsPerFile, kFiles * kRowsPerFile + 8000)) text += l;
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), test, text).ok());
  }
  for (int n : {2, 4}) {
    Pair p = TrainBoth(dir, d, n, /*sgd=*/false, "ada");
    const double want = TestAuc(p.one, test), got = TestAuc(p.ranks, test);
    RecordProperty("auc_one_" + std::to_string(n), std::to_string(want));
    RecordProperty("auc_ranks_" + std::to_string(n), std::to_string(got));
    EXPECT_GT(want, 0.55);
    EXPECT_NEAR(got, want, 0.0005) << n << " ranks";
    Pair again = TrainBoth(dir, d, n, /*sgd=*/false, "again");
    EXPECT_EQ(again.digests, p.digests) << n << " ranks";
  }
}

// The stages overlapped on consecutive passes (pull of pass j while pass j - 1 trains) give
// the sequential ranks' model bit for bit: an owner's served rows take the newer values from
// its passes in flight, and it re-sends them to their holders before training (the
// distributed form of docs/pipeline.md's rule).
TEST(DistributedTrainTest, PipelinedRanksEqualSequentialRanksBitForBit) {
  TempDir dir;
  Data d = WriteFiles(dir);
  JobConfig job = Job(dir.File("seq"), /*sgd=*/false);
  job.data.paths = d.files;
  job.pipeline.pass_examples = 1024;  // more passes, most keys shared between them
  job.pipeline.enabled = false;
  auto seq = RunRanks(2, job);
  ASSERT_TRUE(seq[0].ok()) << seq[0].status().ToString();
  job.pipeline.enabled = true;
  job.model_dir = dir.File("pipe");
  auto pipe = RunRanks(2, job);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(pipe[r].ok()) << pipe[r].status().ToString();
    EXPECT_EQ((*pipe[r])["digest"], (*seq[r])["digest"]);
  }
  EXPECT_TRUE((*pipe[0])["pipelined"].get<bool>());
  // Rows did come from passes in flight (else the test proves nothing).
  EXPECT_GT((*pipe[0])["rows_from_passes_in_flight"].get<uint64_t>(), 0u);
}

// The ranks and row layouts two ways of training are compared on: float32, 4 ranks, and 8-bit
// codes with two slot dimensions.
struct LayoutCase {
  int ranks;
  uint32_t quant_bits;
  std::vector<SlotDims> dims;
};
std::vector<LayoutCase> LayoutCases() {
  return {{2, 0, {}}, {4, 0, {}}, {2, 8, {{{0}, 12}, {{1}, 3}}}};
}
// The default optimizers on d's files in small passes (rows come from passes in flight), with
// embeddings created on a later sight and c's layout.
JobConfig LayoutJob(const TempDir& dir, const Data& d, const LayoutCase& c) {
  JobConfig job = Job(dir.File("x"), /*sgd=*/false);
  job.data.paths = d.files;
  job.pipeline.pass_examples = 1024;
  job.spec.table.embedx_threshold = 1.5f;
  job.spec.model.quant.bits = c.quant_bits;
  job.spec.model.slot_dims = c.dims;
  return job;
}

// Owner updates (the default) and replicated updates train the same model bit for bit: a
// holder's copy of a row is refreshed from the owner's before the holder's next minibatch uses
// it. Checked with lazy embeddings, quantized codes, per-table dimensions and the overlapped
// stages' patches, on 2 and 4 ranks; owner updates receive fewer bytes. Dropping the refresh,
// or refreshing only the keys this rank touched, changes the digest.
TEST(DistributedTrainTest, OwnerUpdatesEqualReplicatedUpdatesBitForBit) {
  TempDir dir;
  Data d = WriteFiles(dir);
  for (const LayoutCase& c : LayoutCases()) {
    SCOPED_TRACE(::testing::Message() << c.ranks << " ranks, quant " << c.quant_bits);
    JobConfig job = LayoutJob(dir, d, c);
    std::map<bool, std::vector<StatusOr<nlohmann::json>>> runs;
    for (bool owner : {false, true}) {
      job.dist.owner_updates = owner;
      job.model_dir = dir.File(std::string(owner ? "owner" : "replicated") +
                               std::to_string(c.ranks) + "q" + std::to_string(c.quant_bits));
      runs[owner] = RunRanks(c.ranks, job);
      for (int r = 0; r < c.ranks; ++r) {
        ASSERT_TRUE(runs[owner][r].ok()) << runs[owner][r].status().ToString();
      }
    }
    const nlohmann::json &replicated = *runs[false][0], &owner = *runs[true][0];
    EXPECT_EQ(owner["digest"], replicated["digest"]);
    EXPECT_GT(owner["rows_from_passes_in_flight"].get<uint64_t>(), 0u);
    EXPECT_GT(owner["embeddings_created"].get<uint64_t>(), 0u);
    uint64_t got = 0, was = 0;
    for (int r = 0; r < c.ranks; ++r) {
      got += (*runs[true][r])["exchange"]["bytes_received"].get<uint64_t>();
      was += (*runs[false][r])["exchange"]["bytes_received"].get<uint64_t>();
    }
    RecordProperty(
        "bytes_received_ratio_" + std::to_string(c.ranks) + "_" + std::to_string(c.quant_bits),
        std::to_string(double(got) / double(was)));
    EXPECT_LT(got, was);
  }
}

// device: gpu on every rank, in the host emulation (gpu.emulate runs the GPU step's kernels on
// CPU threads: docs/gpu.md). Each rank's GPUs train its share of every global minibatch; the
// dense gradient is summed over the GPUs and then the ranks, and each key's summed record goes
// to its owning rank, which updates the row on the host and refreshes the holders' GPU copies
// before their next minibatch (docs/distributed.md, "GPUs across ranks").
//   - One GPU per rank with segment sums is the CPU model's step bit for bit (docs/gpu.md), so
//     the GPU ranks give the CPU ranks' digest: on 2 and 4 ranks, pipelined (rows come from
//     passes in flight and are patched on the GPUs), with lazy embeddings, 8-bit codes and two
//     slot dimensions. Dropping the refreshed rows' re-upload, or the ranks' dense sum, changes
//     it.
//   - --resume from the ranks' checkpoint continues bit for bit.
//   - Two GPUs per rank sum in another order: with SGD the model stays within the float
//     tolerance of NRanksTrainTheOneRankModelUpToSummationOrder of the CPU ranks', and a
//     second run repeats it bit for bit.
TEST(DistributedTrainTest, GpuRanksTrainTheCpuRanksModel) {
  TempDir dir;
  Data d = WriteFiles(dir);
  for (const LayoutCase& c : LayoutCases()) {
    SCOPED_TRACE(::testing::Message() << c.ranks << " ranks, quant " << c.quant_bits);
    JobConfig job = LayoutJob(dir, d, c);
    const std::string tag = std::to_string(c.ranks) + "q" + std::to_string(c.quant_bits);
    job.model_dir = dir.File("cpu" + tag);
    auto cpu = RunRanks(c.ranks, job);
    job.gpu = true;
    job.gpu_options.emulate = true;
    job.model_dir = dir.File("gpu" + tag);
    auto gpu = RunRanks(c.ranks, job);
    for (int r = 0; r < c.ranks; ++r) {
      ASSERT_TRUE(cpu[r].ok()) << cpu[r].status().ToString();
      ASSERT_TRUE(gpu[r].ok()) << gpu[r].status().ToString();
      EXPECT_EQ((*gpu[r])["digest"], (*cpu[r])["digest"]) << "rank " << r;
    }
    EXPECT_NE((*gpu[0])["device"].dump().find("emulation"), std::string::npos)
        << (*gpu[0])["device"];
    EXPECT_GT((*gpu[0])["rows_from_passes_in_flight"].get<uint64_t>(), 0u);
    EXPECT_EQ((*gpu[0])["embeddings_created"], (*cpu[0])["embeddings_created"]);
    EXPECT_GT((*gpu[0])["embeddings_created"].get<uint64_t>(), 0u);
  }
  {  // rank 1's input ends first: it trains empty minibatches, in step with rank 0's
    TempDir short_dir;
    Data uneven = WriteFiles(short_dir);
    std::string text;
    for (size_t i = 0; i < 700; ++i) text += uneven.rows[3][i];
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), uneven.files[3], text).ok());
    JobConfig job = Job(short_dir.File("cpu"), /*sgd=*/false);
    job.data.paths = uneven.files;
    auto cpu = RunRanks(2, job);
    job.gpu = true;
    job.gpu_options.emulate = true;
    job.model_dir = short_dir.File("gpu");
    auto gpu = RunRanks(2, job);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(cpu[r].ok()) << cpu[r].status().ToString();
      ASSERT_TRUE(gpu[r].ok()) << gpu[r].status().ToString();
      EXPECT_EQ((*gpu[r])["digest"], (*cpu[r])["digest"]) << "uneven, rank " << r;
    }
    EXPECT_EQ((*gpu[0])["examples"], 3 * kRowsPerFile + 700);
  }
  {  // --resume from the ranks' checkpoint after pass 2 of 4 ends with the uninterrupted model
    JobConfig job = Job(dir.File("gpufull"), /*sgd=*/false);
    job.data.paths = d.files;
    job.gpu = true;
    job.gpu_options.emulate = true;
    job.ckpt.dir = dir.File("gpuckpt");
    job.ckpt.every_passes = 1;
    job.ckpt.keep = 10;
    auto full = RunRanks(2, job);
    ASSERT_TRUE(full[0].ok()) << full[0].status().ToString();
    ASSERT_TRUE(CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir, {2, 2}).ok());
    job.resume = true;
    job.fresh = false;
    job.model_dir = dir.File("gpuresumed");
    auto resumed = RunRanks(2, job);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(resumed[r].ok()) << resumed[r].status().ToString();
    EXPECT_EQ((*resumed[0])["examples"], 2 * kPass);  // this run: passes 3 and 4
    EXPECT_EQ((*resumed[0])["digest"], (*full[0])["digest"]);
  }
  // Two GPUs per rank.
  JobConfig job = Job(dir.File("cpu2x2"), /*sgd=*/true);
  job.data.paths = d.files;
  auto cpu = RunRanks(2, job);
  job.gpu = true;
  job.gpu_options.emulate = true;
  job.gpu_options.gpus = 2;
  std::vector<std::string> digests;
  for (const char* name : {"gpu2x2", "gpu2x2again"}) {
    job.model_dir = dir.File(name);
    auto gpu = RunRanks(2, job);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(gpu[r].ok()) << gpu[r].status().ToString();
    digests.push_back((*gpu[0])["digest"]);
  }
  ASSERT_TRUE(cpu[0].ok()) << cpu[0].status().ToString();
  EXPECT_EQ(digests[0], digests[1]);
  const Model want = Load(dir.File("cpu2x2")), got = Load(dir.File("gpu2x2"));
  EXPECT_GT(want.rows.size(), 1000u);
  const double distance = Distance(got, want);
  RecordProperty("distance_2x2_gpus", std::to_string(distance));
  EXPECT_LT(distance, 1e-6);
  // Replicated updates are not built on GPUs: refused, naming the key.
  job.dist.owner_updates = false;
  job.model_dir = dir.File("replicated");
  auto refused = RunRanks(2, job);
  ASSERT_FALSE(refused[0].ok());
  EXPECT_NE(refused[0].status().ToString().find("dist.sparse_updates"), std::string::npos)
      << refused[0].status().ToString();
}

// A full disk (ENOSPC) or an I/O error at any point of a run of 2 ranks with tiered shards and
// checkpoints: every rank stops (none hangs), one of them with the injected error, and
// --resume from the ranks' last checkpoint ends with the uninterrupted run's digest. The
// ranks share one MemEnv (a shared file system) whose n-th I/O call fails from then on, so
// the fault lands in SSD write-backs and reads, checkpoints and the final save alike.
}  // namespace
}  // namespace ctrbox
