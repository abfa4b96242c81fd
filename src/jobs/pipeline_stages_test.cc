// The overlapped pipeline (docs/pipeline.md): bit-identical to the sequential run, the stage
// report adds up, errors stop every stage, Ctrl-C stops after a pushed pass.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "ckpt/model_dir.h"
#include "io/synth.h"
#include "io/test_util.h"
#include "jobs/trainer.h"
#include "jobs/trainer_test_util.h"
#include "table/ssd_store.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using testing::TempDir;
using testing::TrainJson;

// Criteo rows whose passes share most keys: small vocabularies.
std::string WriteOverlapping(const TempDir& dir, const std::string& name, uint64_t rows) {
  SynthOptions o;
  o.seed = 21;
  o.vocab_scale = 0.02;
  std::string text;
  SynthGenerator(o).GenerateText(0, rows, &text, nullptr);
  std::string path = dir.File(name);
  EXPECT_TRUE(WriteFileAtomic(Env::Posix(), path, text).ok());
  return path;
}

JobConfig Job(const std::string& model_dir, const std::string& data) {
  JobConfig job;
  job.model_dir = model_dir;
  job.fresh = true;
  job.data.paths = {data};
  job.spec.model.mlp = {32, 16};
  job.spec.model.wide = true;
  job.spec.table.embedx_threshold = 1.5f;  // embeddings created lazily, across passes
  job.spec.table.delete_after_unseen_passes = 1;
  job.train.shrink_every_passes = 3;
  job.train.batch_size = 128;
  job.train.threads = 2;
  job.train.deterministic = true;
  job.train.progress_seconds = 1e9;
  job.pipeline.pass_examples = 1024;  // (whole minibatches: train.deterministic)
  return job;
}

// The tiered store in dir/ssd with a memory budget of `budget` bytes.
void UseTiers(JobConfig* job, const TempDir& dir, uint64_t budget) {
  job->storage.ssd.dir = dir.File("ssd");
  job->storage.memory_budget = budget;
  job->storage.ssd.group_bits = 9;  // 512 groups: a 36 KiB index (72 B each)
  job->storage.ssd.file_bytes = 1 << 20;
  job->storage.stripe_bits = 4;
}

void ExpectStagesAddUp(const nlohmann::json& r) {
  const double seconds = r["seconds"];
  for (const char* stage : {"read", "pull", "train", "push"}) {
    const auto& s = r["stages"][stage];
    const double working = s["busy_seconds"].get<double>() + s["stalled_seconds"].get<double>();
    // No time counted twice: a stage's busy and stalled time fit in the run.
    EXPECT_LE(working, seconds * 1.01 + 1e-3) << stage << " " << r["stages"].dump();
    const double sum = working + s["idle_seconds"].get<double>();
    EXPECT_NEAR(sum, seconds, 0.01 * seconds + 1e-3) << stage << " " << r["stages"].dump();
    EXPECT_GT(s["busy_seconds"].get<double>(), 0.0) << stage;
  }
}

TEST(PipelineTest, PipelinedEqualsSequentialWithOverlapSmallBudgetAndShrink) {
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 24000);

  JobConfig seq = Job(dir.File("seq"), data);
  seq.pipeline.enabled = false;
  auto r0 = TrainJson(Env::Posix(), seq, nullptr);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_EQ((*r0)["rows_from_passes_in_flight"], 0u);
  EXPECT_GT((*r0)["keys_shrunk"].get<uint64_t>(), 0u);
  ExpectStagesAddUp(*r0);
  const uint64_t model_bytes = (*r0)["table_memory_bytes"];

  uint64_t patched = 0;
  for (uint32_t depth : {0u, 1u, 3u}) {  // 0: each stage hands its pass straight on
    for (bool tiered : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "queue_depth " << depth << " tiered " << tiered);
      JobConfig pipe = Job(dir.File("pipe"), data);
      pipe.pipeline.queue_depth = depth;
      if (tiered) {
        UseTiers(&pipe, dir, model_bytes / 10);  // 10 % of the model
        pipe.pipeline.pass_examples = 256;
      }
      auto r = TrainJson(Env::Posix(), pipe, nullptr);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      JobConfig same = seq;
      same.pipeline.pass_examples = pipe.pipeline.pass_examples;
      if (tiered) {  // the sequential reference at the same pass size
        same.model_dir = dir.File("seq250");
        auto r1 = TrainJson(Env::Posix(), same, nullptr);
        ASSERT_TRUE(r1.ok()) << r1.status().ToString();
        EXPECT_EQ((*r)["digest"], (*r1)["digest"]);
        EXPECT_GT((*r)["storage"]["loaded_from_ssd"].get<uint64_t>(), (*r)["keys"].get<uint64_t>());
        // The disk's view: its reads timed (the reading threads' time in them).
        const nlohmann::json& disk = (*r)["disk"];
        EXPECT_EQ(disk["reads"], (*r)["storage"]["records_read"]) << disk;
        EXPECT_GT(disk["reads"].get<uint64_t>(), 0u) << disk;
        EXPECT_GT(disk["read_seconds"].get<double>(), 0.0) << disk;
        EXPECT_NEAR(disk["mean_read_us"].get<double>() * disk["reads"].get<double>() * 1e-6,
                    disk["read_seconds"].get<double>(), 1e-9)
            << disk;
        EXPECT_NEAR(disk["reads_in_flight"].get<double>() * (*r)["seconds"].get<double>(),
                    disk["read_seconds"].get<double>(), 1e-9)
            << disk;
        EXPECT_LE(disk["read_seconds"].get<double>(),
                  (*r)["seconds"].get<double>() * (pipe.data.threads + pipe.train.threads + 2))
            << disk;
      } else {
        EXPECT_FALSE(r->contains("disk"));  // (no SSD tier)
        EXPECT_EQ((*r)["digest"], (*r0)["digest"]);
      }
      EXPECT_TRUE((*r)["pipelined"].get<bool>());
      ExpectStagesAddUp(*r);
      patched += (*r)["rows_from_passes_in_flight"].get<uint64_t>();
    }
  }
  // Overlap happened: later passes took rows from passes still in flight.
  EXPECT_GT(patched, 0u);
}

// Passes sized by memory (docs/storage.md, "Pass sizing"): at budgets of 2 %, 10 % and 100 %
// of the model, pipelined and sequential, with shrinking every 3 grid passes, the model is the
// in-memory run's bit for bit (shrinking and checkpoints count passes of pass_examples, which
// key-sized passes only subdivide); the smaller the budget, the more passes, and the report
// says how they were cut. A budget that cannot hold one minibatch's rows is refused, naming
// the least that would.
TEST(PipelineTest, PassesSizedByMemoryTrainTheInMemoryModelAtEveryBudget) {
  TempDir dir;
  SynthOptions o;  // a vocabulary large enough that 2 % of the model holds a minibatch
  o.seed = 22;
  o.vocab_scale = 4.0;
  std::string text;
  SynthGenerator(o).GenerateText(0, 8000, &text, nullptr);
  const std::string data = dir.File("train.tsv");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), data, text).ok());
  auto job_for = [&](const std::string& model_dir) {
    JobConfig job = Job(model_dir, data);
    job.pipeline.pass_examples = 2000;
    job.train.batch_size = 8;
    job.train.shrink_every_passes = 2;  // after grid passes 2 and 4
    job.eval_paths = {data};            // held-out evaluation under the budget too
    return job;
  };
  JobConfig mem = job_for(dir.File("mem"));
  auto r0 = TrainJson(Env::Posix(), mem, nullptr);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_EQ((*r0)["pass_sizing"]["by"], "examples");
  EXPECT_EQ(mem.StorageFor({}).lfu_half_life, TieredOptions().lfu_half_life);
  EXPECT_GT((*r0)["keys_shrunk"].get<uint64_t>(), 0u);
  // The model at its largest (shrinking deletes most of it by the end).
  const uint64_t model_bytes = (*r0)["storage"]["peak_memory_bytes"];

  std::map<double, uint64_t> passes;
  for (double share : {0.02, 0.05, 0.10, 1.0}) {
    for (bool pipelined : {true, false}) {
      if (share == 0.10 && !pipelined) continue;
      SCOPED_TRACE(::testing::Message() << "budget " << share << (pipelined ? " pipelined" : ""));
      JobConfig job = job_for(dir.File("b"));
      job.pipeline.enabled = pipelined;
      const uint64_t budget = static_cast<uint64_t>(share * static_cast<double>(model_bytes)) +
                              (uint64_t{1} << 6) * sizeof(GroupEntry);  // + the group index
      UseTiers(&job, dir, budget);
      job.storage.ssd.group_bits = 6;  // small fixed costs: 2 % of this model is ~50 KB
      job.storage.stripe_bits = 3;
      auto r = TrainJson(Env::Posix(), job, nullptr);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      // The cache overshoots the budget by at most the slots' share of one pull that the pull
      // threads insert at once: 2 threads of 8 slots here, bounded by half a pull's rows (room
      // for uneven slots). At 2 % of this model a pull is a large part of the budget.
      const nlohmann::json& st = (*r)["storage"];
      const double pull_bytes = (*r)["pass_sizing"]["max_pass_keys"].get<double>() *
                                (*r)["pass_sizing"]["row_bytes"].get<double>();
      EXPECT_LE(st["peak_memory_bytes"].get<double>(),
                static_cast<double>(budget) + 0.5 * pull_bytes);
      EXPECT_LE(st["memory_by_owner"]["bloom_filters"].get<double>(),
                0.1 * static_cast<double>(budget));
      // Memory by owner at one instant (the pass with the largest resident set): the table's
      // use then (at most its peak), the passes in flight (at most theirs), the dense model
      // (dense Adagrad here: weights, gradients, sums of squares); they fit in the resident
      // set then, which is at most the run's peak RSS.
      const nlohmann::json& m = (*r)["memory_peak_by_owner"];
      EXPECT_GT(m["table"].get<int64_t>(), 0);
      EXPECT_LE(m["table"], st["peak_memory_bytes"]);
      EXPECT_GT(m["passes_in_flight"].get<int64_t>(), 0);
      EXPECT_LE(m["passes_in_flight"], (*r)["passes_peak_bytes"]);
      ASSERT_EQ(job.spec.dense_optimizer.kind, OptimizerKind::kAdagrad);
      EXPECT_EQ(m["dense_model"].get<int64_t>(), (*r)["dense_params"].get<int64_t>() * 12);
      EXPECT_GT(m["other"].get<int64_t>(), 0);
      EXPECT_EQ(m["rss"].get<int64_t>(),
                m["table"].get<int64_t>() + m["passes_in_flight"].get<int64_t>() +
                    m["dense_model"].get<int64_t>() + m["reader_chunks"].get<int64_t>() +
                    m["other"].get<int64_t>());
      EXPECT_LE(m["rss"], (*r)["peak_rss_bytes"]);
      EXPECT_EQ((*r)["digest"], (*r0)["digest"]);
      EXPECT_EQ((*r)["test_auc"], (*r0)["test_auc"]);
      const nlohmann::json& z = (*r)["pass_sizing"];
      EXPECT_EQ(z["by"], "memory");
      EXPECT_EQ(z["window_passes"], 5u);  // pull to push at queue_depth 1
      // Without queues the LFU half-life, which counts pulls, halves for passes about twice as
      // long, unless storage.lfu_half_life is given.
      JobConfig handed = job;
      handed.pipeline.queue_depth = 0;
      EXPECT_EQ(handed.StorageFor({}).lfu_half_life, JobConfig::kLfuHalfLifeWithoutQueues);
      handed.settings_given["storage.lfu_half_life"] = "64";
      EXPECT_EQ(handed.StorageFor({}).lfu_half_life, job.storage.lfu_half_life);
      // A pass fits the window, or is one minibatch (the floor) that fits the budget.
      EXPECT_LE(z["max_pass_keys"].get<uint64_t>(), z["max_keys"].get<uint64_t>());
      if (share >= 0.05) {
        EXPECT_LE(z["max_pass_keys"].get<uint64_t>(), z["window_keys"].get<uint64_t>());
      }
      EXPECT_LE(z["max_pass_examples"].get<uint64_t>(), 2000u);
      passes[share] = z["passes"];
      if (share <= 0.05) {
        // Every persisted row was written at least once: the amplification is >= 1.
        EXPECT_GT(st["rows_persisted"].get<uint64_t>(), 0u);
        EXPECT_GE(st["write_amplification"].get<double>(), 1.0);
        EXPECT_GT(z["closed_by_keys"].get<uint64_t>(), 0u);
        EXPECT_GT((*r)["storage"]["loaded_from_ssd"].get<uint64_t>(), 0u);
      }
    }
  }
  EXPECT_GT(passes[0.02], passes[0.05]);
  EXPECT_GT(passes[0.05], passes[0.10]);
  EXPECT_GT(passes[0.10], passes[1.0]);

  // Passes cut by pipeline.pass_memory (a budget of 4 x the model, so that the key window
  // does not cut): the same model, and the passes alive at once held at most pass_memory
  // (its share per pass holds a minibatch here). Without queues (queue_depth 0) four passes
  // are alive at most, so each may take a quarter of it.
  for (auto [pipelined, depth] : {std::pair{true, 1u}, {true, 0u}, {false, 1u}}) {
    SCOPED_TRACE(::testing::Message()
                 << "pass memory" << (pipelined ? " pipelined" : "") << " queue_depth " << depth);
    JobConfig job = job_for(dir.File("pm"));
    job.pipeline.enabled = pipelined;
    job.pipeline.queue_depth = depth;
    UseTiers(&job, dir, 4 * model_bytes);
    job.storage.ssd.group_bits = 6;
    job.storage.stripe_bits = 3;
    job.pipeline.pass_memory = 4 << 20;
    auto r = TrainJson(Env::Posix(), job, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)["digest"], (*r0)["digest"]);
    const nlohmann::json& z = (*r)["pass_sizing"];
    EXPECT_EQ(z["pass_memory"], 4 << 20);
    EXPECT_EQ(z["memory_passes"], 3 * job.pipeline.queue_depth + 4);
    EXPECT_GT(z["closed_by_memory"].get<uint64_t>(), 10u);
    EXPECT_EQ(z["closed_by_keys"].get<uint64_t>(), 0u);
    const uint64_t bound = uint64_t{4} << 20;
    ASSERT_LE(z["max_minibatch_bytes"].get<uint64_t>() * z["memory_passes"].get<uint64_t>(), bound);
    EXPECT_LE(z["max_window_bytes_used"].get<uint64_t>(), bound);
    const uint64_t held = (*r)["memory_peak_by_owner"]["passes_in_flight"];
    EXPECT_GT(held, 0u);
    EXPECT_LE(held, bound);
  }

  JobConfig tiny = job_for(dir.File("tiny"));
  tiny.train.batch_size = 256;
  UseTiers(&tiny, dir, 100 << 10);
  auto r = TrainJson(Env::Posix(), tiny, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("storage.memory_budget must be at least"), std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(Env::Posix()->FileExists(dir.File("tiny/MANIFEST")));
}

TEST(PipelineTest, PassLinesCarryTheirStageClocks) {
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 5000);
  JobConfig job = Job(dir.File("m"), data);
  job.train.metrics_path = dir.File("metrics.jsonl");
  auto r = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::ifstream in(job.train.metrics_path);
  std::string line;
  int passes = 0, totals = 0, reports = 0;
  double pass_seconds = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "pass") {
      ++passes;
      pass_seconds += j["seconds"].get<double>();
      for (const char* stage : {"read", "pull", "train", "push"})
        EXPECT_GT(j["stages"][stage]["busy_seconds"].get<double>(), 0.0) << line;
    } else if (j["event"] == "stages") {
      ++totals;
      EXPECT_EQ(j["stages"], (*r)["stages"]);
    } else if (j["event"] == "report") {  // the last line: the train report, memory included
      ++reports;
      EXPECT_EQ(j["examples"], (*r)["examples"]);
      EXPECT_EQ(j["digest"], (*r)["digest"]);
      EXPECT_GT(j["memory_peak_by_owner"]["table"].get<int64_t>(), 0) << line;
      EXPECT_LE(j["peak_rss_bytes"], (*r)["peak_rss_bytes"]);
    }
  }
  EXPECT_EQ(passes, 5);
  EXPECT_EQ(totals, 1);
  EXPECT_EQ(reports, 1);
  EXPECT_LE(pass_seconds, (*r)["seconds"].get<double>() + 1e-6);  // push-to-push intervals
}

TEST(PipelineTest, AReadErrorStopsEveryStageAndCommitsNothing) {
  TempDir dir;
  std::string text;
  SynthGenerator(SynthOptions{}).GenerateText(0, 20000, &text, nullptr);
  for (int i = 0; i < 400; ++i) text += "1\tnot\ta\tcriteo\tline\n";  // 2 % bad, at the end
  const std::string path = dir.File("bad.tsv");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), path, text).ok());
  for (uint32_t depth : {0u, 1u}) {  // (0: passes handed on without queues)
    SCOPED_TRACE(::testing::Message() << "queue_depth " << depth);
    JobConfig job = Job(dir.File("model"), path);
    UseTiers(&job, dir, 4 << 20);
    job.pipeline.queue_depth = depth;
    auto r = TrainJson(Env::Posix(), job, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find("bad.tsv:20001"), std::string::npos)
        << r.status().message();
    EXPECT_FALSE(ModelExists(Env::Posix(), dir.File("model")));
  }
}

TEST(PipelineTest, APullErrorStopsEveryStage) {
  // A budget smaller than one pass: the pull stage fails once nothing else is in flight.
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 8000);
  JobConfig job = Job(dir.File("model"), data);
  job.storage.ssd.dir = dir.File("ssd");
  job.storage.memory_budget = 16 << 10;
  job.storage.stripe_bits = 2;
  job.storage.ssd.group_bits = 6;
  auto r = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_FALSE(ModelExists(Env::Posix(), dir.File("model")));
}

TEST(PipelineTest, APushErrorStopsEveryStage) {
  // The push stage writes each pass's metrics line; /dev/full fails every write (ENOSPC).
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 8000);
  for (uint32_t depth : {0u, 1u}) {
    SCOPED_TRACE(::testing::Message() << "queue_depth " << depth);
    JobConfig job = Job(dir.File("model"), data);
    job.train.metrics_path = "/dev/full";
    job.pipeline.queue_depth = depth;
    auto r = TrainJson(Env::Posix(), job, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("/dev/full"), std::string::npos) << r.status().ToString();
    EXPECT_FALSE(ModelExists(Env::Posix(), dir.File("model")));
  }
}

// Keeps every progress update.
class Progresses : public ProgressSink {
 public:
  void OnProgress(const TrainProgress& p) override { seen.push_back(p); }
  std::vector<TrainProgress> seen;
};

TEST(PipelineTest, ProgressGivesTheShareDoneAndTheTimeLeftWhenTheInputSizeIsKnown) {
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 8000);
  JobConfig job = Job(dir.File("m"), data);
  job.train.progress_seconds = 0;  // every minibatch
  job.train.epochs = 2;
  job.data.chunk_bytes = 64 << 10;
  Progresses sink;
  auto r = TrainJson(Env::Posix(), job, &sink);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(sink.seen.size(), 10u);
  double last = 0;
  for (const TrainProgress& p : sink.seen) {
    // The estimate of the rows to come may move as the reading goes on, within a chunk.
    EXPECT_GT(p.fraction, 0.0);
    EXPECT_LE(p.fraction, 1.0);
    EXPECT_GE(p.fraction, last - 0.05);
    EXPECT_GE(p.eta_seconds, 0.0);
    last = p.fraction;
  }
  // The last update is for the last minibatch: nearly all 16000 examples (2 epochs) done.
  EXPECT_EQ(sink.seen.back().examples, 16000u);
  EXPECT_NEAR(sink.seen.back().fraction, 1.0, 0.02);
  EXPECT_NEAR(sink.seen[sink.seen.size() / 2].fraction, 0.5, 0.1);
  EXPECT_LT(sink.seen.back().eta_seconds, sink.seen.front().eta_seconds);
  // From a command, the size is unknown: no share, no estimate.
  job.data.paths.clear();
  job.data.command = "cat " + data;
  job.train.epochs = 1;
  Progresses piped;
  ASSERT_TRUE(TrainJson(Env::Posix(), job, &piped).ok());
  ASSERT_FALSE(piped.seen.empty());
  for (const TrainProgress& p : piped.seen) {
    EXPECT_LT(p.fraction, 0);
    EXPECT_LT(p.eta_seconds, 0);
  }
}

// memory_peak_by_owner measures its owners at one instant (the pass with the largest resident
// set): they add up to the resident set then, `other` is not negative (the owners' peaks,
// taken at different moments, once added up to more than the peak RSS), and generated rows
// hold no reader chunks.
TEST(PipelineTest, MemoryByOwnerAddsUpAtOneInstant) {
  TempDir dir;
  JobConfig job = Job(dir.File("m"), "");
  job.data.paths.clear();  // generated rows
  job.generated.rows = 60000;
  job.generated.test_rows = 1000;
  job.pipeline.pass_examples = 16384;
  auto r = TrainJson(Env::Posix(), job, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json& m = (*r)["memory_peak_by_owner"];
  EXPECT_EQ(m["reader_chunks"].get<int64_t>(), 0);
  EXPECT_GT(m["table"].get<int64_t>(), 0);
  EXPECT_GT(m["passes_in_flight"].get<int64_t>(), 0);
  EXPECT_GT(m["other"].get<int64_t>(), 0);
  int64_t owners = 0;
  for (const char* owner : {"table", "passes_in_flight", "dense_model", "reader_chunks", "other"}) {
    owners += m[owner].get<int64_t>();
  }
  EXPECT_EQ(owners, m["rss"].get<int64_t>());
  EXPECT_LE(m["rss"], (*r)["peak_rss_bytes"]);
  // Of `other`, the allocator's free bytes then (glibc's count; more than nothing: the passes
  // before freed their buffers).
  if (HeapStatsKnown()) {
    EXPECT_GT(m["other_heap_free"].get<int64_t>(), 0);
  }
  // ... and the pages mapped from files (the program's code at least).
  EXPECT_GT(m["other_file_pages"].get<int64_t>(), 0);
  EXPECT_LE(m["other_file_pages"], m["rss"]);
}

// The nice value of each of the process's threads now, by name (/proc/self/task: the stat
// line's 19th field).
std::map<std::string, std::set<int>> NiceByThreadName() {
  std::map<std::string, std::set<int>> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;  // it ended
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    for (int f = 3; f <= 19 && rest >> field; ++f) {
      if (f == 19) out[stat.substr(open + 1, close - open - 1)].insert(std::stoi(field));
    }
  }
  return out;
}

// Notes, at each pass pushed (on the push stage's thread), every thread's nice value, and at
// each progress report (on the train stage's) its own.
class NiceValues : public ProgressSink {
 public:
  void OnProgress(const TrainProgress&) override { train.insert(ThreadNice()); }
  void OnPass(const nlohmann::json&) override {
    for (const auto& [name, nices] : NiceByThreadName())
      seen[name].insert(nices.begin(), nices.end());
  }
  std::set<int> train;
  std::map<std::string, std::set<int>> seen;
};

// pipeline.background_nice: the train stage keeps the process's priority, every other thread
// of the job (the stages, the decoders, the SSD tier's) runs at that much lower a priority;
// at 0 all alike (docs/pipeline.md, "Threads"). The model is the same either way.
TEST(PipelineTest, TheThreadsBesideTheTrainStageRunAtTheBackgroundNiceValue) {
  const int own = ThreadNice();
  if (own + 6 > 19) GTEST_SKIP() << "the test runs at nice " << own << " already";
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 20000);
  std::map<int, std::string> digests;
  for (int nice : {6, 0}) {
    SCOPED_TRACE(nice);
    JobConfig job = Job(dir.File("m"), data);
    job.train.progress_seconds = 0;
    job.data.threads = 2;  // decoders of their own (ctrbox-parse), reading all along
    job.data.chunk_bytes = 64 << 10;
    UseTiers(&job, dir, 2 << 20);
    job.storage.io_threads = 2;  // pools of the tier's: ctrbox-ssd-io, ctrbox-wb-io
    job.storage.evict_threads = 2;
    job.pipeline.background_nice = nice;
    NiceValues sink;
    auto r = TrainJson(Env::Posix(), job, &sink);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    digests[nice] = (*r)["digest"].get<std::string>();
    EXPECT_EQ(sink.train, std::set<int>{own});
    for (const char* name : {"ctrbox-read", "ctrbox-pull", "ctrbox-push", "ctrbox-parse",
                             "ctrbox-tier", "ctrbox-evict", "ctrbox-ssd-io", "ctrbox-wb-io"}) {
      ASSERT_TRUE(sink.seen.contains(name)) << name;
      EXPECT_EQ(sink.seen[name], std::set<int>{own + nice}) << name;
    }
    ASSERT_TRUE(sink.seen.contains("ctrbox-train"));  // the train stage's pool
    EXPECT_EQ(sink.seen["ctrbox-train"], std::set<int>{own});
    EXPECT_EQ(ThreadNice(), own);
  }
  EXPECT_EQ(digests[6], digests[0]);
}

// Sets the stop flag (as Ctrl-C does) once `after` passes are pushed.
class StopAfter : public ProgressSink {
 public:
  StopAfter(std::atomic<bool>* stop, uint64_t after) : stop_(stop), after_(after) {}
  void OnPass(const nlohmann::json& record) override {
    if (record["pass"].get<uint64_t>() + 1 >= after_) stop_->store(true);
  }

 private:
  std::atomic<bool>* stop_;
  uint64_t after_;
};

TEST(PipelineTest, InterruptStopsAfterAPushedPassAndSavesExactlyThatModel) {
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 20000);
  for (bool pipelined : {true, false}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "sequential");
    JobConfig job = Job(dir.File("m"), data);
    job.pipeline.enabled = pipelined;
    job.pipeline.queue_depth = 2;
    UseTiers(&job, dir, 2 << 20);
    job.pipeline.size_by_memory = false;  // passes of exactly pass_examples, as counted below
    std::atomic<bool> stop{false};
    StopAfter sink(&stop, 3);
    auto r = TrainJson(Env::Posix(), job, &sink, &stop);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE((*r)["interrupted"].get<bool>());
    const uint64_t examples = (*r)["examples"];
    EXPECT_GE(examples, 3000u);
    EXPECT_LT(examples, 20000u);
    EXPECT_EQ(examples % 1024, 0u);  // whole passes only
    ASSERT_TRUE(ModelExists(Env::Posix(), dir.File("m")));

    // The saved model is exactly the model of the examples trained: nothing from the passes
    // read or pulled and then discarded (no default rows of their new keys) is in it.
    std::string text, head;
    ASSERT_TRUE(ReadFileToString(Env::Posix(), data, &text).ok());
    size_t pos = 0;
    for (uint64_t i = 0; i < examples; ++i) pos = text.find('\n', pos) + 1;
    const std::string part = dir.File("part.tsv");
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), part, text.substr(0, pos)).ok());
    JobConfig ref = Job(dir.File("ref"), part);
    ref.pipeline.enabled = false;
    auto r1 = TrainJson(Env::Posix(), ref, nullptr);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    EXPECT_EQ((*r)["digest"], (*r1)["digest"]);
    EXPECT_EQ((*r)["keys"], (*r1)["keys"]);
  }
}

TEST(PipelineTest, ReadsFromACommand) {
  TempDir dir;
  const std::string data = WriteOverlapping(dir, "train.tsv", 3000);
  JobConfig files = Job(dir.File("a"), data);
  auto r0 = TrainJson(Env::Posix(), files, nullptr);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  JobConfig cmd = Job(dir.File("b"), data);
  cmd.data.paths.clear();
  cmd.data.command = "cat '" + data + "'";
  auto r1 = TrainJson(Env::Posix(), cmd, nullptr);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ((*r0)["digest"], (*r1)["digest"]);
  EXPECT_EQ((*r1)["input"], "command");

  cmd.data.command = "head -n 100 '" + data + "'; exit 3";
  auto r2 = TrainJson(Env::Posix(), cmd, nullptr);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("exit status 3"), std::string::npos)
      << r2.status().ToString();
}

}  // namespace
}  // namespace ctrbox
