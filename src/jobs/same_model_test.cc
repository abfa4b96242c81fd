// The same model on any number of ranks (docs/distributed.md, "The same model on any number of
// ranks"): with train.deterministic, the default optimizers (Adagrad, Adam) and generated data,
// 1, 2, 3, 4 and 6 thread ranks train one digest, pipelined and sequential, in memory and over
// the SSD tier, with owner and replicated updates, and across a resume on another number of
// ranks. Without it, the digests of 1 and 4 ranks differ (the sums' order).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/ranks_checkpoint.h"
#include "dist/comm.h"
#include "dist/dist_test_util.h"
#include "gpu/trainer.h"
#include "io/reader.h"
#include "io/shard.h"
#include "io/synth.h"
#include "jobs/trainer_test_util.h"
#include "util/env.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

using testing::TempDir;
using testing::TrainJson;

JobConfig GeneratedJob(const std::string& model_dir) {
  JobConfig job = testing::SmallJob(model_dir);  // Adam for the dense weights
  job.spec.model.wide = true;
  job.spec.table.embedx_threshold = 1.5f;  // embeddings created from counts summed by owners
  job.generated.rows = 4 * 1536 + 300;     // a last minibatch some ranks have no rows of
  job.generated.test_rows = 2000;
  job.train.batch_size = 1536;        // 12 sum blocks of 128 rows: 1, 2, 3, 4, 6 or 12 ranks
  job.pipeline.pass_examples = 4000;  // (cut to 3072: whole minibatches)
  job.train.deterministic = true;
  job.fresh = true;
  return job;
}

// The report of the job on n thread ranks (rank 0's; one process for n = 1).
nlohmann::json Report(int n, const JobConfig& job) {
  if (n == 1) {
    auto one = TrainJson(Env::Posix(), job, nullptr);
    EXPECT_TRUE(one.ok()) << one.status().ToString();
    return one.ok() ? *one : nlohmann::json{{"digest", ""}};
  }
  nlohmann::json first = {{"digest", ""}};
  std::vector<Status> status = RunRanks(n, [&](Comm* comm) -> Status {
    auto rep = TrainJson(Env::Posix(), job, nullptr, nullptr, comm);
    if (!rep.ok()) return rep.status();
    if (comm->rank() == 0) first = *rep;
    return Status::OK();
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(status[r].ok()) << status[r].ToString();
  return first;
}

std::string Digest(int n, const JobConfig& job) { return Report(n, job)["digest"]; }

// Trains `job` on `from` ranks with a checkpoint per pass (the one-process digest `want`),
// commits the ranks' checkpoint after pass `stop_after` as if the job had stopped there, and
// resumes it on `to` ranks: the digest must still be `want`.
void ExpectResumeKeepsTheDigest(JobConfig job, const TempDir& dir, int from, int to,
                                size_t stop_after, const std::string& want) {
  const std::string tag = std::to_string(from) + "to" + std::to_string(to);
  job.model_dir = dir.File("first" + tag);
  job.ckpt.dir = dir.File("ckpt" + tag);
  job.ckpt.every_passes = 1;
  job.ckpt.keep = 20;
  EXPECT_EQ(Digest(from, job), want) << tag;
  auto ids = ListCheckpoints(Env::Posix(), RankCheckpointDir(job.ckpt.dir, 0, from));
  ASSERT_TRUE(ids.ok() && ids->size() > stop_after) << tag;
  ASSERT_TRUE(CommitRanksCheckpoint(Env::Posix(), job.ckpt.dir,
                                    {static_cast<uint32_t>(from), (*ids)[stop_after - 1]})
                  .ok());
  job.resume = true;
  job.fresh = false;
  job.model_dir = dir.File("resumed" + tag);
  EXPECT_EQ(Digest(to, job), want) << tag;
}

TEST(SameModelTest, AnyRanksDividingTheSumBlocksTrainTheOneProcessDigest) {
  TempDir dir;
  struct Case {
    std::string name;
    bool pipelined, ssd, replicated;
  };
  for (const Case& c :
       {Case{"pipelined", true, false, false}, Case{"sequential", false, false, false},
        Case{"over the SSD tier", true, true, false},
        Case{"replicated updates", true, false, true}}) {
    SCOPED_TRACE(c.name);
    std::string want;
    nlohmann::json want_metrics;
    for (int n : {1, 2, 3, 4, 6}) {
      if ((c.ssd || c.replicated) && n == 6) continue;  // (the slow cases on fewer)
      if (c.ssd && n == 4) continue;                    // (6 sum blocks)
      const std::string tag = c.name + std::to_string(n);
      JobConfig job = GeneratedJob(dir.File("m " + tag));
      job.pipeline.enabled = c.pipelined;
      job.dist.owner_updates = !c.replicated;
      if (c.ssd) {
        job.storage.ssd.dir = dir.File("ssd " + tag);
        job.train.batch_size = 768;  // (a smaller minibatch, 6 sum blocks: a smaller budget)
        job.storage.memory_budget = 3 << 19;  // 1.5 MiB of the 2 MB model
        job.storage.ssd.group_bits = 8;
        job.storage.ssd.file_bytes = 1 << 20;
      }
      const nlohmann::json rep = Report(n, job);
      const std::string got = rep["digest"];
      if (c.ssd && n == 1 && rep.contains("storage")) {  // rows went to the SSD and came back
        EXPECT_GT(rep["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u) << rep["storage"];
      }
      if (want.empty()) want = got;
      EXPECT_EQ(got, want) << n << " ranks";
      // The reported metrics too: the progressive (training) and the held-out ones.
      nlohmann::json metrics;
      for (const char* key : {"auc", "logloss", "copc", "test_auc", "test_logloss", "test_copc"}) {
        metrics[key] = rep.value(key, nlohmann::json());
      }
      if (want_metrics.is_null()) want_metrics = metrics;
      EXPECT_EQ(metrics, want_metrics) << n << " ranks";
    }
  }
  // 8 ranks (not dividing the 12 sum blocks: warned) keep their own fixed order: the same
  // model run after run.
  JobConfig eight = GeneratedJob(dir.File("eight"));
  const std::string first = Digest(8, eight);
  eight.model_dir = dir.File("eight again");
  EXPECT_EQ(Digest(8, eight), first);
  EXPECT_FALSE(first.empty());
  // Without canonical sums the ranks add their shares in rank order: another model.
  JobConfig fast = GeneratedJob(dir.File("fast1"));
  fast.train.deterministic = false;
  const std::string one = Digest(1, fast);
  fast.model_dir = dir.File("fast4");
  EXPECT_NE(Digest(4, fast), one);
}

// The GPU step (its kernels emulated on the host, gpu.emulate) sums as the CPU model does
// (gpu/step_canonical.h): the CPU's one-process digest on 1, 2, 3 and 4 ranks of one GPU,
// pipelined and sequential, over the SSD tier, across a resume from 2 ranks onto 3, and on
// 2 or 3 GPUs per rank (and 4 ranks of 2 GPUs resumed on 2).
TEST(SameModelTest, GpuRanksTrainTheCpuDigestOnAnyRanksAndGpus) {
  TempDir dir;
  auto on_gpu = [](JobConfig job) {
    job.gpu = true;
    job.gpu_options.emulate = true;
    return job;
  };
  const std::string want = Digest(1, GeneratedJob(dir.File("cpu")));
  for (bool pipelined : {true, false}) {
    for (int n : {1, 2, 3, 4}) {
      if (!pipelined && n % 2 == 1) continue;  // (sequential: 2 and 4)
      const std::string tag = (pipelined ? "pipelined " : "sequential ") + std::to_string(n);
      JobConfig job = on_gpu(GeneratedJob(dir.File("gpu " + tag)));
      job.pipeline.enabled = pipelined;
      EXPECT_EQ(Digest(n, job), want) << tag;
    }
  }
  ExpectResumeKeepsTheDigest(on_gpu(GeneratedJob("")), dir, 2, 3, 2, want);
  // Over the SSD tier (6 sum blocks of 128 rows): 1 CPU process, 1 and 3 GPU ranks.
  auto ssd = [&](const std::string& name) {
    JobConfig job = GeneratedJob(dir.File("m " + name));
    job.storage.ssd.dir = dir.File("ssd " + name);
    job.train.batch_size = 768;
    job.storage.memory_budget = 3 << 19;
    job.storage.ssd.group_bits = 8;
    job.storage.ssd.file_bytes = 1 << 20;
    return job;
  };
  const std::string want_ssd = Digest(1, ssd("cpu"));
  EXPECT_NE(want_ssd, want);
  EXPECT_EQ(Digest(1, on_gpu(ssd("gpu1"))), want_ssd);
  EXPECT_EQ(Digest(3, on_gpu(ssd("gpu3"))), want_ssd);
  // Several GPUs per rank (whole sum blocks each; 3 GPUs: unequal slices): the same digest,
  // on one process and on ranks; 17 GPUs (past kMaxCanonicalGpus) keep their own order.
  for (auto [ranks, gpus] : {std::pair{1, 2}, std::pair{2, 2}, std::pair{1, 3}, std::pair{2, 3}}) {
    const std::string tag = std::to_string(ranks) + " ranks of " + std::to_string(gpus) + " GPUs";
    JobConfig job = on_gpu(GeneratedJob(dir.File(tag)));
    job.gpu_options.gpus = gpus;
    EXPECT_EQ(Digest(ranks, job), want) << tag;
  }
  EXPECT_EQ(Digest(3,
                   [&] {
                     JobConfig job = on_gpu(ssd("gpu3x2"));
                     job.gpu_options.gpus = 2;
                     return job;
                   }()),
            want_ssd);
  JobConfig two_gpus = on_gpu(GeneratedJob(""));  // 4 ranks of 2 GPUs resumed on 2
  two_gpus.gpu_options.gpus = 2;
  ExpectResumeKeepsTheDigest(two_gpus, dir, 4, 2, 2, want);
  JobConfig many = on_gpu(GeneratedJob(dir.File("many gpus")));
  many.gpu_options.gpus = kMaxCanonicalGpus + 1;
  EXPECT_NE(Digest(1, many), want);
}

// 2 ranks stopped after a checkpoint and resumed on 3 (and 4 on 2) give the one-process digest.
// Under train.deterministic a GPU keeps a gradient record per node of its cut of a minibatch:
// the GPU pass bound the reader cuts passes by (gpu.staged_memory) counts them, for the rank
// whose GPUs take the most.
TEST(SameModelTest, TheGpuPassBoundCountsTheCanonicalSumsNodes) {
  JobConfig job = GeneratedJob("");
  job.gpu = true;
  job.gpu_options.emulate = true;
  job.gpu_options.gpus = 3;
  job.gpu_options.staged_memory = uint64_t{1} << 30;
  const PassShape shape{1 << 20, 60000, 20000, 2, 30000, 3072, 16000};
  job.train.deterministic = false;
  const uint64_t default_order = job.PassOptions().device_bytes(shape);
  job.train.deterministic = true;
  const uint64_t one = job.PassOptions().device_bytes(shape);
  EXPECT_GT(one, default_order);
  const ValueLayout layout = CtrModel::LayoutFor(job.spec.model, job.spec.sparse_optimizer);
  const GpuPassShape gpu_shape{3072, (1 << 20) + sizeof(uint32_t), 60000, 20000, 2, 30000, 16000};
  const GpuSumNodes whole = MostSumNodes(SumOrderFor(job, 1, 0), 3);
  EXPECT_GT(whole.gpu, 1u);
  EXPECT_EQ(one, GpuPassBytesBound(gpu_shape, layout, 3, whole));
  // On 2 ranks, the larger of the two ranks' counts; on 5 (not dividing the 12 blocks) the
  // ranks keep their own order: the default bound.
  const GpuSumNodes r0 = MostSumNodes(SumOrderFor(job, 2, 0), 3);
  const GpuSumNodes r1 = MostSumNodes(SumOrderFor(job, 2, 1), 3);
  EXPECT_EQ(job.PassOptions(2).device_bytes(shape),
            GpuPassBytesBound(gpu_shape, layout, 3,
                              {true, std::max(r0.gpu, r1.gpu), std::max(r0.rank, r1.rank)}));
  EXPECT_EQ(job.PassOptions(5).device_bytes(shape), default_order);
}

TEST(SameModelTest, AResumeOnAnotherNumberOfRanksKeepsTheDigest) {
  TempDir dir;
  const std::string want = Digest(1, GeneratedJob(dir.File("one")));
  // As if the job had stopped after its second pass.
  for (auto [from, to] : {std::pair{2, 3}, std::pair{4, 2}}) {
    ExpectResumeKeepsTheDigest(GeneratedJob(""), dir, from, to, 2, want);
  }
}

// Two epochs of generated rows: each epoch's shares start anew, and a rank with no rows of an
// epoch's last pass has an empty pass there.
TEST(SameModelTest, EpochsOfGeneratedRowsTrainTheOneProcessDigest) {
  TempDir dir;
  std::string want;
  for (int n : {1, 2, 3}) {
    JobConfig job = GeneratedJob(dir.File("m" + std::to_string(n)));
    job.train.epochs = 2;
    const std::string got = Digest(n, job);
    if (want.empty()) want = got;
    EXPECT_EQ(got, want) << n << " ranks";
  }
}

// A job of three files of uneven sizes (one with malformed lines, which every rank skips
// alike) and a held-out file, read whole by every rank: each keeps its share of every global
// minibatch (io/row_share.h), so the rows of minibatch m do not depend on the ranks.
JobConfig FilesJob(const TempDir& dir, const std::string& model_dir) {
  JobConfig job = GeneratedJob(model_dir);
  std::vector<std::string> files;
  const uint64_t sizes[] = {2000, 2900, 1700};
  uint64_t begin = 0;
  for (int f = 0; f < 3; ++f) {
    const std::string path = dir.File("part" + std::to_string(f) + ".tsv");
    if (!Env::Posix()->FileExists(path)) {
      SynthOptions o;
      o.seed = 5;
      std::string text;
      SynthGenerator(o).GenerateText(begin, begin + sizes[f], &text, nullptr);
      if (f == 1) {  // two malformed lines after the file's 700th and 1400th lines
        for (size_t at : {size_t{1400}, size_t{700}}) {
          size_t pos = 0;
          for (size_t l = 0; l < at; ++l) pos = text.find('\n', pos) + 1;
          text.insert(pos, "not a criteo line\n");
        }
      }
      EXPECT_TRUE(WriteFileAtomic(Env::Posix(), path, text).ok());
    }
    files.push_back(path);
    begin += sizes[f];
  }
  job.data.paths = files;
  job.data.format = DataFormat::kCriteo;
  job.eval_paths = {testing::WriteCriteo(dir, "test.tsv", 0, 2000, 6)};
  return job;
}

TEST(SameModelTest, RanksReadingFilesTrainTheOneProcessDigest) {
  TempDir dir;
  std::string want;
  nlohmann::json want_metrics;
  for (int n : {1, 2, 3, 4}) {  // (4 ranks: more ranks than files)
    for (bool pipelined : {true, false}) {
      if (!pipelined && n != 3) continue;
      const std::string tag = std::to_string(n) + (pipelined ? "" : " sequential");
      JobConfig job = FilesJob(dir, dir.File("m " + tag));
      job.pipeline.enabled = pipelined;
      const nlohmann::json rep = Report(n, job);
      const std::string got = rep["digest"];
      if (want.empty()) want = got;
      EXPECT_EQ(got, want) << tag << " ranks";
      EXPECT_EQ(rep["examples"], 6600u) << tag;
      nlohmann::json metrics;
      for (const char* key : {"auc", "logloss", "copc", "test_auc", "test_logloss", "test_copc"}) {
        metrics[key] = rep.value(key, nlohmann::json());
      }
      if (want_metrics.is_null()) want_metrics = metrics;
      EXPECT_EQ(metrics, want_metrics) << tag << " ranks";
    }
  }
  // Over the SSD tier, passes sized by memory (agreed by the ranks) and two epochs.
  std::string ssd_want;
  for (int n : {1, 2, 3}) {
    const std::string tag = "ssd" + std::to_string(n);
    JobConfig job = FilesJob(dir, dir.File("m " + tag));
    job.train.epochs = 2;
    job.storage.ssd.dir = dir.File("ssd " + tag);
    job.train.batch_size = 768;  // (6 sum blocks)
    job.storage.memory_budget = 3 << 19;
    job.storage.ssd.group_bits = 8;
    job.storage.ssd.file_bytes = 1 << 20;
    const std::string got = Digest(n, job);
    if (ssd_want.empty()) ssd_want = got;
    EXPECT_EQ(got, ssd_want) << tag;
  }
}

// The same rows as shard files (blocks of 500 rows: blocks cross the ranks' shares): one
// digest on 1, 2 and 3 ranks, the text files' digest.
TEST(SameModelTest, ShardsReadByEveryRankTrainTheTextFilesDigest) {
  TempDir dir;
  const JobConfig text = FilesJob(dir, dir.File("text"));
  const std::string want = Digest(1, text);
  std::vector<std::string> shards;
  for (const std::string& path : text.data.paths) {
    DataOptions one = text.data;
    one.paths = {path};
    auto reader = OpenReader(Env::Posix(), one);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    shards.push_back(path + ".ctrshard");
    ShardWriterOptions o;
    o.block_rows = 500;
    auto writer = ShardWriter::Open(Env::Posix(), shards.back(), (*reader)->schema(), o);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    Batch b;
    bool eof = false;
    while (true) {
      ASSERT_TRUE((*reader)->Next(&b, &eof).ok());
      if (eof) break;
      ASSERT_TRUE((*writer)->Add(b).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  for (int n : {1, 2, 3}) {
    JobConfig job = FilesJob(dir, dir.File("shards" + std::to_string(n)));
    job.data.paths = shards;
    job.data.format = DataFormat::kShards;
    job.eval_paths.clear();  // (text; the digest is the model's)
    EXPECT_EQ(Digest(n, job), want) << n << " ranks";
  }
}

// Two epochs of files: stopped in the second (whose shares start anew) and resumed on 3 ranks
// from 2 and on 2 from 3.
TEST(SameModelTest, FilesResumedOnAnotherNumberOfRanksKeepTheDigest) {
  TempDir dir;
  JobConfig job = FilesJob(dir, dir.File("one"));
  job.train.epochs = 2;
  const std::string want = Digest(1, job);
  // As if the job had stopped after its fourth pass (the second epoch's first).
  for (auto [from, to] : {std::pair{2, 3}, std::pair{3, 2}}) {
    ExpectResumeKeepsTheDigest(job, dir, from, to, 4, want);
  }
}

}  // namespace
}  // namespace ctrbox
