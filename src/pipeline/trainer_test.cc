#include "pipeline/trainer.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "ckpt/checkpoint.h"
#include "ckpt/model_dir.h"
#include "io/synth.h"
#include "io/test_util.h"
#include "pipeline/evaluator.h"
#include "util/mem_env.h"
#include "util/parse.h"

namespace ctrbox {
namespace {

using testing::TempDir;

std::string WriteCriteo(const TempDir& dir, const std::string& name, uint64_t begin, uint64_t end,
                        uint64_t seed) {
  SynthOptions o;
  o.seed = seed;
  std::string text;
  SynthGenerator(o).GenerateText(begin, end, &text, nullptr);
  std::string path = dir.File(name);
  EXPECT_TRUE(WriteFileAtomic(Env::Posix(), path, text).ok());
  return path;
}

JobConfig SmallJob(const std::string& model_dir) {
  JobConfig job;
  job.model_dir = model_dir;
  job.spec.model.mlp = {64, 32};
  job.train.batch_size = 256;
  job.train.threads = 2;
  job.pipeline.pass_examples = 4096;
  job.spec.dense_optimizer.kind = OptimizerKind::kAdam;
  job.spec.dense_optimizer.lr = 1e-3f;
  job.spec.dense_optimizer.epsilon = 1e-8f;
  job.train.progress_seconds = 1e9;
  return job;
}

// A small job over an SSD tier for the MemEnv fault tests: data in /d/train.tsv (3000 rows
// make 6 passes), files in /ssd, one thread.
JobConfig SmallSsdJobInMemEnv(const std::string& model_dir) {
  JobConfig job = SmallJob(model_dir);
  job.data.paths = {"/d/train.tsv"};
  job.data.chunk_bytes = 64 << 10;
  job.spec.model.mlp = {16};
  job.train.threads = 1;
  job.pipeline.pass_examples = 500;
  job.storage.ssd.dir = "/ssd";
  job.storage.ssd.group_bits = 8;
  job.storage.ssd.file_bytes = 64 << 10;
  // Room for the passes the pipeline pins at once even when training is slow (TSan): a
  // tighter budget can legitimately stop the run with resource_exhausted, masking the fault.
  job.storage.memory_budget = 4 << 20;
  job.storage.io_threads = 1;
  job.storage.evict_threads = 1;
  job.storage.evict_start = 0.3;  // evict early: the SSD tier takes part
  job.storage.evict_stop = 0.2;
  return job;
}

TEST(TrainerTest, LearnsThePlantedModelOnGeneratedData) {
  TempDir dir;
  JobConfig job = SmallJob(dir.File("model"));
  job.spec.model.mlp = {512, 256, 128};  // the default model
  job.train.batch_size = 2048;
  job.pipeline.pass_examples = 65536;
  job.generated.rows = 200000;
  job.generated.test_rows = 50000;
  auto report = RunTrain(Env::Posix(), job, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const auto& r = *report;
  EXPECT_EQ(r["examples"], 200000u);
  EXPECT_EQ(r["test_examples"], 50000u);
  const double oracle = r["oracle_auc"], test = r["test_auc"];
  RecordProperty("test_auc", std::to_string(test));
  RecordProperty("oracle_auc", std::to_string(oracle));
  // The stated bar: at least half of the oracle's lift over chance (AUC - 0.5) after 200 K
  // examples seen once (measured: 0.688 against an oracle of 0.810, i.e. 61 %).
  EXPECT_GE(test - 0.5, 0.5 * (oracle - 0.5)) << "test " << test << " oracle " << oracle;
  EXPECT_GT(r["auc"].get<double>(), 0.6);  // progressive training AUC
  EXPECT_NEAR(r["test_copc"].get<double>(), 1.0, 0.15);
  EXPECT_EQ(r["keys"], r["keys_with_embedding"]);
  EXPECT_TRUE(ModelExists(Env::Posix(), dir.File("model")));
}

TEST(TrainerTest, DeterministicAcrossRunsAndThreadCounts) {
  TempDir dir;
  std::string data = WriteCriteo(dir, "train.tsv", 0, 20000, 1);
  std::string digest;
  for (int threads : {1, 2, 2, 3}) {
    JobConfig job = SmallJob(dir.File(std::string("m").append(std::to_string(threads))));
    job.fresh = true;
    job.data.paths = {data};
    job.data.threads = threads;
    job.train.threads = threads;
    job.train.deterministic = true;
    auto report = RunTrain(Env::Posix(), job, nullptr);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    if (digest.empty()) digest = (*report)["digest"];
    EXPECT_EQ((*report)["digest"], digest) << threads << " threads";
    auto verified = VerifyModel(Env::Posix(), job.model_dir);
    ASSERT_TRUE(verified.ok());
    EXPECT_EQ(verified->digest, digest);
  }
}

TEST(TrainerTest, TieredStorageIsLosslessWithAFivePercentBudget) {
  // Invariant 1 of docs/storage.md: a budget of ~5 % of the model, most keys evicted and
  // reloaded several times, the same digest as the all-in-memory run.
  TempDir dir;
  std::string data = WriteCriteo(dir, "train.tsv", 0, 40000, 4);
  JobConfig mem = SmallJob(dir.File("mem"));
  mem.data.paths = {data};
  mem.spec.model.mlp = {32};
  auto r1 = RunTrain(Env::Posix(), mem, nullptr);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  const uint64_t model_bytes = (*r1)["table_memory_bytes"];

  JobConfig tiered = SmallJob(dir.File("tiered"));
  tiered.data.paths = {data};
  tiered.spec.model.mlp = {32};
  tiered.storage.ssd.dir = dir.File("ssd");
  tiered.storage.memory_budget = model_bytes / 20;
  tiered.storage.ssd.group_bits = 10;
  tiered.storage.ssd.file_bytes = 1 << 20;
  tiered.storage.shard_bits = 4;
  tiered.pipeline.pass_examples = 256;  // small passes: a working set must fit the budget
  auto r2 = RunTrain(Env::Posix(), tiered, nullptr);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ((*r1)["digest"], (*r2)["digest"]);
  const auto& st = (*r2)["storage"];
  RecordProperty("storage", st.dump());
  EXPECT_GT(st["loaded_from_ssd"].get<uint64_t>(), (*r2)["keys"].get<uint64_t>()) << st.dump();
  EXPECT_GT(st["evicted_dirty"].get<uint64_t>(), (*r2)["keys"].get<uint64_t>());
  // Within the budget plus the stated margin: a few slots' share of one pass.
  EXPECT_LE(st["peak_memory_bytes"].get<uint64_t>(), tiered.storage.memory_budget * 5 / 4);
  // The scratch files are gone; the model is in the model directory.
  auto left = Env::Posix()->GetChildren(dir.File("ssd"));
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

TEST(TrainerTest, ContinuingFromTheModelDirEqualsOneRun) {
  TempDir dir;
  // 8192 rows = 2 passes, then 4000 more; one run over both files must equal two runs.
  std::string a = WriteCriteo(dir, "a.tsv", 0, 8192, 3);
  std::string b = WriteCriteo(dir, "b.tsv", 8192, 12192, 3);
  JobConfig one = SmallJob(dir.File("one"));
  one.data.paths = {a, b};
  auto r1 = RunTrain(Env::Posix(), one, nullptr);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();

  JobConfig two = SmallJob(dir.File("two"));
  two.data.paths = {a};
  ASSERT_TRUE(RunTrain(Env::Posix(), two, nullptr).ok());
  two.data.paths = {b};
  auto r2 = RunTrain(Env::Posix(), two, nullptr);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ((*r2)["generation"], 2u);
  EXPECT_EQ((*r1)["digest"], (*r2)["digest"]);

  // A job with other hyperparameters continues; one with another model shape refuses,
  // naming the key.
  JobConfig lr = SmallJob(dir.File("two"));
  lr.data.paths = {b};
  lr.spec.sparse_optimizer.lr = 0.01f;
  lr.train.seed = 5;
  auto r4 = RunTrain(Env::Posix(), lr, nullptr);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_EQ((*r4)["generation"], 3u);
  JobConfig other = SmallJob(dir.File("two"));
  other.data.paths = {b};
  other.spec.model.embedding_dim = 8;
  auto r3 = RunTrain(Env::Posix(), other, nullptr);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("model.embedding_dim"), std::string::npos)
      << r3.status().message();
}

TEST(TrainerTest, EvalAndPredictAgreeWithTheSavedModel) {
  TempDir dir;
  std::string train = WriteCriteo(dir, "train.tsv", 0, 10000, 5);
  std::string test = WriteCriteo(dir, "test.tsv", 0, 3000, 6);
  JobConfig job = SmallJob(dir.File("model"));
  job.data.paths = {train};
  job.eval_paths = {test};
  auto report = RunTrain(Env::Posix(), job, nullptr);
  ASSERT_TRUE(report.ok());

  JobConfig eval = SmallJob(dir.File("model"));
  eval.data.paths = {test};
  auto er = RunEval(Env::Posix(), eval);
  ASSERT_TRUE(er.ok()) << er.status().ToString();
  EXPECT_EQ((*er)["examples"], 3000u);
  EXPECT_DOUBLE_EQ((*er)["auc"].get<double>(), (*report)["test_auc"].get<double>());
  EXPECT_NEAR((*er)["auc_exact"].get<double>(), (*er)["auc"].get<double>(), 1e-4);
  EXPECT_EQ((*er)["auc_exact_examples"], 3000u);

  // predict: one line out per line in, "nan" for a malformed one.
  std::string text;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), test, &text).ok());
  // The first record, a malformed line, then the whole file.
  std::string input = text.substr(0, text.find('\n') + 1);
  input.append("garbage line\n");
  input.append(text);
  text.swap(input);
  std::string in = dir.File("in.tsv");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), in, text).ok());
  ThreadPool pool(2);
  auto lm = OpenModel(Env::Posix(), dir.File("model"), TieredOptions{}, &pool);
  ASSERT_TRUE(lm.ok());
  DataOptions d;
  d.paths = {in};
  std::string out_path = dir.File("out.txt");
  std::FILE* out = std::fopen(out_path.c_str(), "w");
  RecordCounts counts;
  Status s = PredictLines(Env::Posix(), d, *lm->table, lm->model.get(), 256, &pool, out, &counts);
  std::fclose(out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string got;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), out_path, &got).ok());
  auto lines = Split(got, '\n');
  ASSERT_EQ(lines.size(), 3002u + 1);  // trailing empty piece
  EXPECT_EQ(lines[1], "nan");
  EXPECT_EQ(lines[0], lines[2]);  // the same record scores the same
  EXPECT_EQ(counts.good, 3001u);
}

TEST(TrainerTest, TooManyMalformedRecordsCommitNothing) {
  TempDir dir;
  std::string text;
  SynthGenerator(SynthOptions{}).GenerateText(0, 5000, &text, nullptr);
  for (int i = 0; i < 100; ++i) text += "1\tnot\ta\tcriteo\tline\n";  // 2 % bad
  std::string path = dir.File("bad.tsv");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, text).ok());
  JobConfig job = SmallJob(dir.File("model"));
  job.data.paths = {path};
  auto report = RunTrain(Env::Posix(), job, nullptr);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(report.status().message().find("bad.tsv:5001: field_count"), std::string::npos)
      << report.status().message();
  EXPECT_FALSE(ModelExists(Env::Posix(), dir.File("model")));
}

// Continuing a committed model over an SSD tier, with an I/O error injected at the n-th I/O
// call (reads of the data, parameter-file appends and reads, INDEX, metrics, model save) for
// a spread of n covering the whole run: the run must end (no hang, no crash) with the error
// named, or succeed if the fault hit a call whose failure is tolerated; after a power loss
// the model directory holds the committed model or, if the run succeeded, the new one.
TEST(TrainerTest, AnIoErrorAtAnyCallEndsTheRunCleanlyAndKeepsTheCommittedModel) {
  SynthOptions so;
  so.seed = 8;
  std::string text;
  SynthGenerator(so).GenerateText(0, 3000, &text, nullptr);
  auto job_for = [](const std::string& model_dir) { return SmallSsdJobInMemEnv(model_dir); };
  // The committed model (generation 1) and the files a power-safe setup starts from.
  std::map<std::string, std::string> committed;
  std::string d1, d2;
  uint64_t calls = 0;
  auto fresh = [&]() {
    auto env = std::make_unique<MemEnv>();
    EXPECT_TRUE(env->CreateDirs("/d").ok());
    EXPECT_TRUE(WriteFileAtomic(env.get(), "/d/train.tsv", text).ok());
    if (!committed.empty()) {
      EXPECT_TRUE(env->CreateDirs("/m").ok());
      for (const auto& [name, bytes] : committed) {
        EXPECT_TRUE(WriteFileAtomic(env.get(), "/m/" + name, bytes).ok());
      }
    }
    return env;
  };
  {
    auto env = fresh();
    auto r1 = RunTrain(env.get(), job_for("/m"), nullptr);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    d1 = (*r1)["digest"];
    auto names = env->GetChildren("/m");
    ASSERT_TRUE(names.ok()) << names.status().ToString();
    for (const std::string& name : *names) committed[name] = *env->Contents("/m/" + name);
    auto check = fresh();
    const uint64_t before = check->Calls(FaultOp::kAny);
    auto r2 = RunTrain(check.get(), job_for("/m"), nullptr);
    ASSERT_TRUE(r2.ok()) << r2.status().ToString();
    d2 = (*r2)["digest"];
    ASSERT_GT((*r2)["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);  // the SSD tier is used
    calls = check->Calls(FaultOp::kAny) - before;
    ASSERT_NE(d1, d2);
    RecordProperty("io_calls_per_run", std::to_string(calls));
  }
  ASSERT_GT(calls, 20u);
  std::vector<uint64_t> ns;
  for (uint64_t n = 1; n <= calls; n += n < 40 ? 1 : 1 + calls / 80) ns.push_back(n);
  ns.push_back(calls);
  int failed_runs = 0;
  for (uint64_t n : ns) {
    for (bool enospc : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "fault at I/O call " << n << " of " << calls
                                        << (enospc ? " (ENOSPC)" : " (EIO)"));
      auto env = fresh();
      env->InjectFault(FaultOp::kAny, n,
                       enospc ? MemEnv::NoSpace("injected") : MemEnv::Eio("injected"));
      auto r = RunTrain(env.get(), job_for("/m"), nullptr);
      env->ClearFaults();
      if (!r.ok()) {
        ++failed_runs;
        EXPECT_NE(r.status().message().find("injected"), std::string::npos)
            << r.status().ToString();
      }
      env->SimulateCrash();
      auto m = VerifyModel(env.get(), "/m");
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      if (r.ok()) {
        EXPECT_EQ(m->digest, d2);
      } else {
        EXPECT_TRUE(m->digest == d1 || m->digest == d2) << m->digest;
      }
    }
  }
  EXPECT_GT(failed_runs, static_cast<int>(ns.size()));  // most faults stop the run
}

// Stops the job (as Ctrl-C does) once `after` passes were pushed.
class StopAfter : public ProgressSink {
 public:
  StopAfter(int after, std::atomic<bool>* stop) : after_(after), stop_(stop) {}
  void OnPass(const nlohmann::json&) override {
    if (++passes_ >= after_) stop_->store(true);
  }

 private:
  const int after_;
  std::atomic<bool>* const stop_;
  int passes_ = 0;
};

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
  auto one = RunTrain(Env::Posix(), job_for(dir.File("one")), nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_GT((*one)["keys_shrunk"].get<uint64_t>(), 0u);

  JobConfig job = job_for(dir.File("m"));
  job.ckpt.dir = dir.File("ckpt");
  job.ckpt.base_every = 3;
  std::atomic<bool> stop{false};
  StopAfter first(4, &stop);
  auto r1 = RunTrain(Env::Posix(), job, &first, &stop);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE((*r1)["interrupted"].get<bool>());
  const uint64_t passes1 = (*r1)["job_passes"];
  ASSERT_LT(passes1, 12u);

  // Without --resume the old checkpoints are not silently replaced.
  auto no_resume = RunTrain(Env::Posix(), job, nullptr);
  ASSERT_FALSE(no_resume.ok());
  EXPECT_NE(no_resume.status().message().find("--resume"), std::string::npos);
  // A setting that changes results, or other data, is refused and named.
  job.resume = true;
  JobConfig other = job;
  other.train.batch_size = 128;
  auto bad = RunTrain(Env::Posix(), other, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.batch_size"), std::string::npos)
      << bad.status().ToString();
  other = job;
  other.spec.sparse_optimizer.lr = 0.5f;
  bad = RunTrain(Env::Posix(), other, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sparse_optimizer.lr"), std::string::npos)
      << bad.status().ToString();
  other = job;
  other.data.paths = {WriteCriteo(dir, "other.tsv", 0, 24001, 5)};
  bad = RunTrain(Env::Posix(), other, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("other.tsv"), std::string::npos) << bad.status().ToString();

  stop = false;
  job.train.threads = 1;
  StopAfter second(3, &stop);
  auto r2 = RunTrain(Env::Posix(), job, &second, &stop);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ((*r2)["resumed_from"], (*r1)["checkpoint"]["last"]);
  const uint64_t passes2 = (*r2)["job_passes"];
  ASSERT_GT(passes2, passes1);
  ASSERT_LT(passes2, 12u);

  stop = false;
  job.train.threads = 3;
  job.pipeline.enabled = false;
  auto r3 = RunTrain(Env::Posix(), job, nullptr);
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
  auto one = RunTrain(Env::Posix(), job_for(dir.File("one")), nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_GT((*one)["keys_shrunk"].get<uint64_t>(), 0u);

  JobConfig job = job_for(dir.File("m"));
  job.ckpt.dir = dir.File("ckpt");
  job.resume = true;
  job.gpu = true;
  std::atomic<bool> stop{false};
  StopAfter first(3, &stop);
  auto r1 = RunTrain(Env::Posix(), job, &first, &stop);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE((*r1)["interrupted"].get<bool>());
  EXPECT_EQ((*r1)["device"], "host emulation of 1 GPU (scatter segment)");

  stop = false;
  job.gpu = false;
  StopAfter second(2, &stop);
  auto r2 = RunTrain(Env::Posix(), job, &second, &stop);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ((*r2)["device"], "cpu");
  ASSERT_GT((*r2)["job_passes"].get<uint64_t>(), (*r1)["job_passes"].get<uint64_t>());

  stop = false;
  job.gpu = true;
  auto r3 = RunTrain(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ((*r3)["job_passes"], 8u);
  EXPECT_EQ((*r3)["digest"], (*one)["digest"]);

  // Two emulated GPUs sum in another order: the same model up to float rounding.
  JobConfig two = job_for(dir.File("two"));
  two.gpu = true;
  two.gpu_options.gpus = 2;
  auto r4 = RunTrain(Env::Posix(), two, nullptr);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_NE((*r4)["digest"], (*one)["digest"]);
  EXPECT_NEAR((*r4)["auc"].get<double>(), (*one)["auc"].get<double>(), 1e-3);
  EXPECT_EQ((*r4)["keys"], (*one)["keys"]);
}

// Test 3 with checkpoints: EIO, ENOSPC or a crash (every call failing from the N-th on) at
// points across a run with a checkpoint after every pass over an SSD tier. Each run ends
// cleanly; after a power loss, a resumed run ends with the digest of one uninterrupted run.
TEST(TrainerTest, AFaultAnywhereInARunWithCheckpointsThenResumeGivesTheDigestOfOneRun) {
  SynthOptions so;
  so.seed = 9;
  std::string text;
  SynthGenerator(so).GenerateText(0, 3000, &text, nullptr);
  JobConfig job = SmallSsdJobInMemEnv("/m");
  job.storage.compact_stale = 0.2;  // compact early: compactions take part too
  job.storage.compact_trigger = 1.2;
  job.storage.compact_target = 1.1;
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
  {
    auto env = fresh();
    const uint64_t before = env->Calls(FaultOp::kAny);
    auto r = RunTrain(env.get(), job, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    digest = (*r)["digest"];
    calls = env->Calls(FaultOp::kAny) - before;
    ASSERT_EQ((*r)["checkpoint"]["deltas"].get<uint64_t>(), 4u);  // 6 passes: b d d b d d
    // The faults land in SSD write-backs, reloads and compactions as well as in checkpoints.
    ASSERT_GT((*r)["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
    ASSERT_GT((*r)["storage"]["compactions"].get<uint64_t>(), 0u);
    RecordProperty("io_calls_per_run", std::to_string(calls));
  }
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
      auto r = RunTrain(env.get(), job, nullptr);
      env->ClearFaults();
      if (!r.ok()) {
        ++failed;
        EXPECT_NE(r.status().message().find("injected"), std::string::npos)
            << r.status().ToString();
      }
      env->SimulateCrash();
      auto again = RunTrain(env.get(), job, nullptr);
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
  auto r = RunTrain(Env::Posix(), job, &sink, &stop);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)["interrupted"].get<bool>());
  EXPECT_EQ((*r)["passes"], 2u);
  EXPECT_EQ((*r)["examples"], 4096u);
}

}  // namespace
}  // namespace ctrbox
