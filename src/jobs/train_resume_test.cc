// Stopping and resuming the train job: resumes from checkpoints equal one run (other thread
// counts, CPU and emulated GPU, faults anywhere), Ctrl-C at the shrink barrier.
#include <gtest/gtest.h>

#include <atomic>

#include "ckpt/checkpoint.h"
#include "ckpt/model_dir.h"
#include "jobs/trainer.h"
#include "jobs/trainer_test_util.h"
#include "util/mem_env.h"

namespace ctrbox {
namespace {

using testing::SmallJob;
using testing::SmallSsdJobInMemEnv;
using testing::StopAfter;
using testing::TempDir;
using testing::TrainJson;
using testing::WriteCriteo;

// Test 5 of docs/checkpoints.md: a job stopped twice and resumed twice, with other thread
// counts and without the pipeline, ends with the digest of one uninterrupted run; shrinking
// (which forces base checkpoints) included. What a resume refuses is named.
TEST(TrainerTest, AJobResumedTwiceWithOtherThreadCountsEqualsOneRun) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 24000, 5);
  auto job_for = [&](const std::string& model_dir) {
    JobConfig job = SmallJob(model_dir);
    job.data.paths = {data};
    job.pipeline.pass_examples = 2000;
    job.train.shrink_every_passes = 5;
    job.spec.table.delete_threshold = 0.5f;
    return job;
  };
  auto one = TrainJson(Env::Posix(), job_for(dir.File("one")), nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_GT((*one)["keys_shrunk"].get<uint64_t>(), 0u);

  JobConfig job = job_for(dir.File("m"));
  job.ckpt.dir = dir.File("ckpt");
  job.ckpt.base_every = 3;
  std::atomic<bool> stop{false};
  StopAfter first(4, &stop);
  auto r1 = TrainJson(Env::Posix(), job, &first, &stop);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE((*r1)["interrupted"].get<bool>());
  const uint64_t passes1 = (*r1)["job_passes"];
  ASSERT_LT(passes1, 12u);

  // Without --resume the old checkpoints are not silently replaced.
  auto no_resume = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_FALSE(no_resume.ok());
  EXPECT_NE(no_resume.status().message().find("--resume"), std::string::npos);
  // A setting that changes results, or other data, is refused and named.
  job.resume = true;
  JobConfig other = job;
  other.train.batch_size = 128;
  auto bad = TrainJson(Env::Posix(), other, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.batch_size"), std::string::npos)
      << bad.status().ToString();
  other = job;
  other.spec.sparse_optimizer.lr = 0.5f;
  bad = TrainJson(Env::Posix(), other, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sparse_optimizer.lr"), std::string::npos)
      << bad.status().ToString();
  other = job;
  other.data.paths = {WriteCriteo(dir, "other.tsv", 0, 24001, 5)};
  bad = TrainJson(Env::Posix(), other, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("other.tsv"), std::string::npos) << bad.status().ToString();
  // The data edited in place, keeping its size (issue 21 item 12: only the size was compared).
  std::string original;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), data, &original).ok());
  std::string edited = original;
  edited[0] = edited[0] == '0' ? '1' : '0';  // the first label
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), data, edited).ok());
  bad = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("edited in place"), std::string::npos)
      << bad.status().ToString();
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), data, original).ok());

  stop = false;
  job.train.threads = 1;
  StopAfter second(3, &stop);
  auto r2 = TrainJson(Env::Posix(), job, &second, &stop);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ((*r2)["resumed_from"], (*r1)["checkpoint"]["last"]);
  const uint64_t passes2 = (*r2)["job_passes"];
  ASSERT_GT(passes2, passes1);
  ASSERT_LT(passes2, 12u);

  stop = false;
  job.train.threads = 3;
  job.pipeline.enabled = false;
  auto r3 = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ((*r3)["job_passes"], 12u);
  EXPECT_EQ((*r3)["job_examples"], 24000u);
  EXPECT_EQ((*r3)["examples"].get<uint64_t>(), 24000u - (*r2)["job_examples"].get<uint64_t>());
  EXPECT_EQ((*r3)["digest"], (*one)["digest"]);
  auto verified = VerifyModel(Env::Posix(), job.model_dir);
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->digest, (*one)["digest"]);
  EXPECT_EQ(verified->trained_examples, 24000u);
  // Shrinking every 5 passes made passes 5 and 10 bases besides the every-3rd ones.
  EXPECT_GT((*r3)["checkpoint"]["bases"].get<uint64_t>() +
                (*r2)["checkpoint"]["bases"].get<uint64_t>() +
                (*r1)["checkpoint"]["bases"].get<uint64_t>(),
            3u);
  auto report = InspectCheckpoints(Env::Posix(), job.ckpt.dir);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ((*report)["resumes_from"], (*r3)["checkpoint"]["last"]);
}

// The GPU train stage (its host emulation: docs/gpu.md) through the whole job: shrink,
// checkpoints (the dense snapshot comes from the host model the GPU step writes back),
// stop, resume on the CPU, stop, resume on the GPU. With this job's GEMM shapes (256-row
// minibatches, layers <= 128 wide) one emulated GPU computes what the CPU model does bit for
// bit, so every mix of devices must end with the digest of one CPU run.
// --resume over an SSD tier whose budget is far below the rows takes the newest checkpoint, a
// delta several deep, and ends with the uninterrupted run's digest. Loading the chain evicts
// base rows that the deltas then update: Insert must count them once, or the delta's key check
// fails and the resume quietly goes back to the chain's base (docs/storage.md, Insert).
TEST(TrainerTest, AResumeOverATieredTableTakesTheNewestDeltaCheckpoint) {
  TempDir dir;
  JobConfig job = SmallJob(dir.File("whole"));
  job.generated.rows = 30000;
  job.generated.test_rows = 1000;
  job.spec.model.mlp = {32};
  job.pipeline.pass_examples = 2048;
  job.storage.ssd.dir = dir.File("ssd");
  job.storage.ssd.group_bits = 8;
  job.storage.memory_budget = 2 << 20;
  job.storage.evict_start = 0.3;
  job.storage.evict_stop = 0.2;
  job.ckpt.dir = dir.File("ckpt");
  job.ckpt.keep = 50;
  job.ckpt.base_every = 8;
  job.fresh = true;
  auto whole = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  // Back to checkpoint 7: a delta 6 deep on the base ckpt-000001.
  ASSERT_TRUE(RemoveCheckpointsAfter(Env::Posix(), job.ckpt.dir, 7).ok());
  job.fresh = false;
  job.resume = true;
  job.model_dir = dir.File("resumed");
  auto resumed = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ((*resumed)["resumed_from"], CheckpointName(7))
      << (*resumed).value("resume_warnings", nlohmann::json()).dump();
  EXPECT_FALSE(resumed->contains("resume_warnings") && !(*resumed)["resume_warnings"].empty())
      << (*resumed)["resume_warnings"].dump();
  EXPECT_EQ((*resumed)["digest"], (*whole)["digest"]);
  // Another group count moves the pass-sizing window: the resume is refused, naming the keys.
  job.storage.ssd.group_bits = 9;
  job.model_dir = dir.File("regrouped");
  auto regrouped = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_FALSE(regrouped.ok());
  EXPECT_NE(regrouped.status().message().find("pass sizing (storage.memory_budget)"),
            std::string::npos)
      << regrouped.status().ToString();
  EXPECT_NE(regrouped.status().message().find("storage.group_bits"), std::string::npos)
      << regrouped.status().ToString();
}

TEST(TrainerTest, AJobMovedBetweenCpuAndEmulatedGpuByResumesEqualsOneCpuRun) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 16000, 7);
  auto job_for = [&](const std::string& model_dir) {
    JobConfig job = SmallJob(model_dir);
    job.data.paths = {data};
    job.pipeline.pass_examples = 2000;
    job.spec.model.wide = true;
    job.train.shrink_every_passes = 3;
    job.spec.table.delete_threshold = 0.5f;
    job.gpu_options.emulate = true;
    return job;
  };
  auto one = TrainJson(Env::Posix(), job_for(dir.File("one")), nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_GT((*one)["keys_shrunk"].get<uint64_t>(), 0u);

  JobConfig job = job_for(dir.File("m"));
  job.ckpt.dir = dir.File("ckpt");
  job.resume = true;
  job.gpu = true;
  std::atomic<bool> stop{false};
  StopAfter first(3, &stop);
  auto r1 = TrainJson(Env::Posix(), job, &first, &stop);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE((*r1)["interrupted"].get<bool>());
  EXPECT_EQ((*r1)["device"], "host emulation of 1 GPU (scatter segment)");

  stop = false;
  job.gpu = false;
  StopAfter second(2, &stop);
  auto r2 = TrainJson(Env::Posix(), job, &second, &stop);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ((*r2)["device"], "cpu");
  ASSERT_GT((*r2)["job_passes"].get<uint64_t>(), (*r1)["job_passes"].get<uint64_t>());

  stop = false;
  job.gpu = true;
  auto r3 = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ((*r3)["job_passes"], 8u);
  EXPECT_EQ((*r3)["digest"], (*one)["digest"]);

  // Passes cut by gpu.staged_memory (a few minibatches each) train the same model; a value
  // set cuts the CPU run's passes alike, so the job moves between devices by resume.
  JobConfig small = job_for(dir.File("small"));
  small.gpu = true;
  small.gpu_options.staged_memory = 6 << 20;
  auto r5 = TrainJson(Env::Posix(), small, nullptr);
  ASSERT_TRUE(r5.ok()) << r5.status().ToString();
  EXPECT_EQ((*r5)["digest"], (*one)["digest"]);
  const nlohmann::json& z = (*r5)["pass_sizing"];
  EXPECT_EQ(z["by"], "gpu_memory");
  EXPECT_EQ(z["gpu_pass_bytes"], (6 << 20) / (small.pipeline.queue_depth + 2));
  EXPECT_GT(z["closed_by_gpu_memory"].get<uint64_t>(), 5u);
  EXPECT_LE(z["max_pass_gpu_bytes"].get<uint64_t>(), z["gpu_pass_bytes"].get<uint64_t>());
  EXPECT_GT(z["passes"].get<uint64_t>(), (*one)["pass_sizing"]["passes"].get<uint64_t>());
  // What the (emulated) GPU buffers of the staged passes reached: within gpu.staged_memory, and
  // the same run without it stages far more.
  const uint64_t staged = (*r5)["gpu_staged_bytes"];
  EXPECT_GT(staged, 0u);
  EXPECT_LE(staged, uint64_t{6} << 20);
  JobConfig unsized = job_for(dir.File("unsized"));
  unsized.gpu = true;
  auto r8 = TrainJson(Env::Posix(), unsized, nullptr);
  ASSERT_TRUE(r8.ok()) << r8.status().ToString();
  EXPECT_GT((*r8)["gpu_staged_bytes"].get<uint64_t>(), staged);
  JobConfig moved = small;
  moved.model_dir = dir.File("moved");
  moved.ckpt.dir = dir.File("ckpt-moved");
  moved.resume = true;
  stop = false;
  StopAfter third(4, &stop);
  auto r6 = TrainJson(Env::Posix(), moved, &third, &stop);
  ASSERT_TRUE(r6.ok()) << r6.status().ToString();
  ASSERT_TRUE((*r6)["interrupted"].get<bool>());
  stop = false;
  moved.gpu = false;
  auto r7 = TrainJson(Env::Posix(), moved, nullptr);
  ASSERT_TRUE(r7.ok()) << r7.status().ToString();
  EXPECT_EQ((*r7)["device"], "cpu");
  EXPECT_EQ((*r7)["digest"], (*one)["digest"]);

  // Two emulated GPUs sum in another order: the same model up to float rounding.
  JobConfig two = job_for(dir.File("two"));
  two.gpu = true;
  two.gpu_options.gpus = 2;
  auto r4 = TrainJson(Env::Posix(), two, nullptr);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_NE((*r4)["digest"], (*one)["digest"]);
  EXPECT_NEAR((*r4)["auc"].get<double>(), (*one)["auc"].get<double>(), 1e-3);
  EXPECT_EQ((*r4)["keys"], (*one)["keys"]);
}

// What a failed run left on disk besides its commits: SSD files, model files the MANIFEST
// does not name, checkpoint directories without a MANIFEST. "" if nothing.
std::string UncommittedFiles(Env* env, const JobConfig& job) {
  std::string left;
  auto children = [&](const std::string& dir) {
    auto c = env->GetChildren(dir);
    return c.ok() ? *c : std::vector<std::string>{};
  };
  for (const std::string& c : children(job.storage.ssd.dir))
    left += job.storage.ssd.dir + "/" + c + " ";
  std::string manifest;
  ReadFileToString(env, JoinPath(job.model_dir, "MANIFEST"), &manifest).IgnoreError();
  for (const std::string& c : children(job.model_dir)) {
    const bool model_file = c.starts_with("sparse-") || c.starts_with("dense-");
    if (model_file && manifest.find(c) == std::string::npos) left += job.model_dir + "/" + c + " ";
  }
  for (const std::string& c : children(job.ckpt.dir)) {
    const std::string d = JoinPath(job.ckpt.dir, c);
    if (env->IsDirectory(d) && !env->FileExists(JoinPath(d, "MANIFEST"))) left += d + " ";
  }
  return left;
}

// Test 3 with checkpoints: EIO, ENOSPC or a crash (every call failing from the N-th on) at
// points across a run with a checkpoint after every pass over an SSD tier. Each run ends
// cleanly; after a power loss, a resumed run ends with the digest of one uninterrupted run.
// The interactions through whole jobs (docs/model.md, "Architectures"): a DeepFM + low-rank
// DCN-v2 + DLRM-dots model stopped on the emulated GPU, resumed on the CPU, stopped, resumed on
// the GPU, ends with the digest of one CPU run: checkpoints carry the cross layers and the
// GPU step writes them back.
TEST(TrainerTest, AnInteractionModelMovedBetweenCpuAndEmulatedGpuByResumesEqualsOneCpuRun) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 12000, 8);
  auto job_for = [&](const std::string& model_dir) {
    JobConfig job = SmallJob(model_dir);
    job.data.paths = {data};
    job.pipeline.pass_examples = 2000;
    job.spec.model.wide = job.spec.model.fm = job.spec.model.dot = true;
    job.spec.model.cross_layers = 2;
    job.spec.model.cross_rank = 16;
    // Bit for bit needs the GEMM shapes of AJobMovedBetweenCpuAndEmulatedGpu...: every layer
    // at most 128 wide (the CPU's weight-gradient tiles), here W0 = 13 + 26 x 4 = 117.
    job.spec.model.embedding_dim = 4;
    job.gpu_options.emulate = true;
    return job;
  };
  auto one = TrainJson(Env::Posix(), job_for(dir.File("one")), nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  JobConfig job = job_for(dir.File("m"));
  job.ckpt.dir = dir.File("ckpt");
  job.resume = true;
  job.gpu = true;
  std::atomic<bool> stop{false};
  StopAfter first(2, &stop);
  auto r1 = TrainJson(Env::Posix(), job, &first, &stop);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE((*r1)["interrupted"].get<bool>());
  stop = false;
  job.gpu = false;
  StopAfter second(2, &stop);
  auto r2 = TrainJson(Env::Posix(), job, &second, &stop);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  ASSERT_GT((*r2)["job_passes"].get<uint64_t>(), (*r1)["job_passes"].get<uint64_t>());
  stop = false;
  job.gpu = true;
  auto r3 = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ((*r3)["job_examples"], 12000u);
  EXPECT_EQ((*r3)["digest"], (*one)["digest"]);
}

TEST(TrainerTest, AFaultAnywhereInARunWithCheckpointsThenResumeGivesTheDigestOfOneRun) {
  SynthOptions so;
  so.seed = 9;
  std::string text;
  SynthGenerator(so).GenerateText(0, 3000, &text, nullptr);
  JobConfig job = SmallSsdJobInMemEnv("/m");
  // Compactions take part too, whatever the timing: six passes leave only ~3 % of the bytes
  // stale, so merges are made frequent (stale bases), files small, and every maintenance
  // round compacts every sealed file with a stale byte in a hundred (trigger and target 0).
  job.storage.delta_share = 0.02;
  job.storage.ssd.file_bytes = 16 << 10;
  job.storage.compact_stale = 0.01;
  job.storage.compact_trigger = 0;
  job.storage.compact_target = 0;
  job.ckpt.dir = "/c";
  job.ckpt.base_every = 3;
  job.resume = true;
  auto fresh = [&]() {
    auto env = std::make_unique<MemEnv>();
    EXPECT_TRUE(env->CreateDirs("/d").ok());
    EXPECT_TRUE(WriteFileAtomic(env.get(), "/d/train.tsv", text).ok());
    return env;
  };
  std::string digest;
  uint64_t calls = 0;
  // The faults land in SSD write-backs, reloads and compactions as well as in checkpoints.
  // Whether the background maintenance compacts before the run ends depends on the timing (a
  // loaded machine may not schedule it: seen once in ~20 runs): the reference run is repeated
  // until one compacts, and every repetition must give the same digest.
  for (int attempt = 0;; ++attempt) {
    ASSERT_LT(attempt, 10) << "no reference run compacted";
    auto env = fresh();
    const uint64_t before = env->Calls(FaultOp::kAny);
    auto r = TrainJson(env.get(), job, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (attempt > 0) {
      ASSERT_EQ((*r)["digest"], digest);
    }
    digest = (*r)["digest"];
    calls = env->Calls(FaultOp::kAny) - before;
    ASSERT_EQ((*r)["checkpoint"]["deltas"].get<uint64_t>(), 4u);  // 6 passes: b d d b d d
    ASSERT_GT((*r)["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
    if ((*r)["storage"]["compactions"].get<uint64_t>() > 0) break;
  }
  RecordProperty("io_calls_per_run", std::to_string(calls));
  std::vector<uint64_t> ns;
  for (uint64_t n = 1; n <= calls; n += n < 30 ? 1 : 1 + calls / 60) ns.push_back(n);
  ns.push_back(calls);
  int failed = 0, resumed = 0;
  for (uint64_t n : ns) {
    for (int mode = 0; mode < 2; ++mode) {  // 0: one EIO or ENOSPC; 1: a crash at call n
      SCOPED_TRACE(::testing::Message() << "fault at I/O call " << n << " of " << calls
                                        << (mode ? " (crash)" : " (one error)"));
      auto env = fresh();
      env->InjectFault(FaultOp::kAny, n,
                       n % 2 ? MemEnv::NoSpace("injected") : MemEnv::Eio("injected"), mode == 1);
      auto r = TrainJson(env.get(), job, nullptr);
      env->ClearFaults();
      if (!r.ok()) {
        ++failed;
        EXPECT_NE(r.status().message().find("injected"), std::string::npos)
            << r.status().ToString();
        // After an error (a full disk) nothing uncommitted stays on disk (issue 21 item 10).
        if (mode == 0) {
          EXPECT_EQ(UncommittedFiles(env.get(), job), "");
        }
      }
      env->SimulateCrash();
      auto again = TrainJson(env.get(), job, nullptr);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      EXPECT_EQ((*again)["digest"], digest);
      EXPECT_EQ((*again)["job_examples"], 3000u);
      resumed += again->contains("resumed_from");
    }
  }
  EXPECT_GT(failed, static_cast<int>(ns.size()));
  EXPECT_GT(resumed, static_cast<int>(ns.size()) / 2);
}

// Ctrl-C while the pull stage waits at the shrink barrier for a pass that the train stage then
// discards (pulled, not trained): the job stops after the passes it pushed, without hanging.
TEST(TrainerTest, CtrlCWhileAPullWaitsAtTheShrinkBarrierStopsCleanly) {
  TempDir dir;
  const std::string data = WriteCriteo(dir, "train.tsv", 0, 20000, 6);
  JobConfig job = SmallJob(dir.File("m"));
  job.data.paths = {data};
  job.pipeline.pass_examples = 2048;
  job.train.shrink_every_passes = 3;  // pass 3's pull waits until pass 2 is pushed
  job.train.progress_seconds = 0;     // OnProgress after every minibatch
  class StopInPassOne : public ProgressSink {
   public:
    explicit StopInPassOne(std::atomic<bool>* stop) : stop_(stop) {}
    void OnProgress(const TrainProgress& p) override {
      if (p.examples > 2048) stop_->store(true);  // pass 1 trains on; pass 2 is discarded
    }

   private:
    std::atomic<bool>* const stop_;
  };
  std::atomic<bool> stop{false};
  StopInPassOne sink(&stop);
  auto r = TrainJson(Env::Posix(), job, &sink, &stop);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)["interrupted"].get<bool>());
  EXPECT_EQ((*r)["passes"], 2u);
  EXPECT_EQ((*r)["examples"], 4096u);
}

}  // namespace
}  // namespace ctrbox
