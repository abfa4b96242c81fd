// A train job of N ranks (threads of this process over LocalGroup; the MPI transport is
// tested by cli/mpi_train_test) against one rank on the same global minibatches
// (docs/distributed.md, "N ranks = 1 rank").
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
#include "jobs/evaluator.h"
#include "jobs/trainer.h"
#include "jobs/trainer_test_util.h"
#include "util/logging.h"
#include "util/mem_env.h"

namespace ctrbox {
namespace {

using testing::SmallJob;
using testing::TempDir;
using testing::TrainJson;

constexpr int kFiles = 4;
constexpr uint64_t kRowsPerFile = 2048;
constexpr uint32_t kBatch = 256;
constexpr uint64_t kPass = 2048;

std::vector<std::string> Lines(uint64_t begin, uint64_t end) {
  SynthOptions o;
  o.seed = 5;
  std::string text;
  SynthGenerator(o).GenerateText(begin, end, &text, nullptr);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line + "\n");
  return lines;
}

struct Data {
  std::vector<std::string> files;              // what the ranks read
  std::vector<std::vector<std::string>> rows;  // each file's lines
};

Data WriteFiles(const TempDir& dir) {
  Data d;
  for (int f = 0; f < kFiles; ++f) {
    d.rows.push_back(Lines(f * kRowsPerFile, (f + 1) * kRowsPerFile));
    std::string text;
    for (const auto& l : d.rows.back()) text += l;
    d.files.push_back(dir.File("part-" + std::to_string(f) + ".tsv"));
    EXPECT_TRUE(WriteFileAtomic(Env::Posix(), d.files.back(), text).ok());
  }
  return d;
}

// The one-rank input with the global minibatches of n ranks: rank r reads files r, r + n, ...
// and trains minibatches of kBatch / n rows, passes of kPass / n; global minibatch m of a pass
// is rank 0's minibatch m, then rank 1's, ...
std::string InterleavedFile(const TempDir& dir, const Data& d, int n) {
  std::vector<std::vector<std::string>> stream(n);
  for (int f = 0; f < kFiles; ++f) {
    for (const auto& l : d.rows[f]) stream[f % n].push_back(l);
  }
  const size_t b = kBatch / n;
  std::string text;
  for (size_t at = 0; at < stream[0].size(); at += b) {
    for (int r = 0; r < n; ++r) {
      for (size_t i = at; i < at + b; ++i) text += stream[r][i];
    }
  }
  std::string path = dir.File("one-rank-" + std::to_string(n) + ".tsv");
  EXPECT_TRUE(WriteFileAtomic(Env::Posix(), path, text).ok());
  return path;
}

// sgd: both optimizers plain SGD, whose updates are linear in the gradient, so the ranks'
// other summation order stays at float rounding. Adagrad and Adam take g / sqrt(sum g^2): a
// key or weight whose first gradient is a near-cancelling sum can change sign with the order,
// and the first step is then lr the other way (docs/distributed.md).
JobConfig Job(const std::string& model_dir, bool sgd) {
  JobConfig job = SmallJob(model_dir);
  job.train.batch_size = kBatch;
  job.pipeline.pass_examples = kPass;
  job.spec.model.wide = true;
  job.fresh = true;
  if (sgd) {
    job.spec.dense_optimizer.kind = OptimizerKind::kSgd;
    job.spec.dense_optimizer.lr = 0.05f;
    job.spec.sparse_optimizer.kind = OptimizerKind::kSgd;
  }
  return job;
}

// Runs the job on n thread-ranks, which save one model in job.model_dir (in `env`: the
// machines' shared file system).
// *stopped_by (may be null) gets why the group stopped (LocalGroup::aborted); an exchange
// waiting `timeout` seconds stops it.
std::vector<StatusOr<nlohmann::json>> RunRanks(int n, const JobConfig& job, Env* env = Env::Posix(),
                                               Status* stopped_by = nullptr, double timeout = 600) {
  LocalGroup group(n, timeout);
  // spdlog's default logger is made on its first use; made here, before the ranks' threads
  // log at once (TSan cannot see the uninstrumented library's guard of that first use).
  LOG_INFO("{} ranks as threads", n);
  std::vector<StatusOr<nlohmann::json>> reports(n, InternalError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      reports[r] = TrainJson(env, job, nullptr, nullptr, group.rank(r));
      if (!reports[r].ok()) group.rank(r)->Abort(reports[r].status());
    });
  }
  for (auto& t : threads) t.join();
  if (stopped_by != nullptr) *stopped_by = group.aborted();
  return reports;
}

struct Model {
  std::map<uint64_t, std::vector<float>> rows;  // key -> show, click, wide, emb...
  std::vector<float> dense;
};

// The rows and dense parameters of the model in `dir`.
Model Load(const std::string& dir) {
  Model m;
  ThreadPool pool(1);
  {
    auto loaded = OpenModel(Env::Posix(), dir, TieredOptions(), &pool);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    if (!loaded.ok()) return m;
    m.dense = loaded->model->dense_params();
    for (size_t s = 0; s < loaded->table->num_stripes(); ++s) {
      RowBlock rows(loaded->table->layout());
      EXPECT_TRUE(loaded->table->ExportStripe(s, &rows).ok());
      for (size_t i = 0; i < rows.size(); ++i) {
        std::vector<float> v = {rows.show(i), rows.click(i), rows.wide(i)};
        if (rows.has_emb(i)) {  // the key's own table's values (model.slot_dims)
          v.insert(v.end(), rows.emb(i), rows.emb(i) + rows.layout().DimOf(rows.key(i)));
        }
        EXPECT_TRUE(m.rows.emplace(rows.key(i), v).second) << "key twice";
      }
    }
  }
  return m;
}

// The test AUC on held-out rows of the model in `dir`.
double TestAuc(const std::string& dir, const std::string& test_file) {
  ThreadPool pool(2);
  auto loaded = OpenModel(Env::Posix(), dir, TieredOptions(), &pool);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  if (!loaded.ok()) return 0;
  DataOptions data;
  data.paths = {test_file};
  auto reader = OpenData(Env::Posix(), data, GeneratedData(), true);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return 0;
  auto m =
      Evaluate(reader->get(), *loaded->table, loaded->model.get(), 1024, 65536, 0, &pool, nullptr);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? m->auc : 0;
}

// Largest |a - b| / (1 + |b|) over every value, or +inf if the keys or shapes differ.
double Distance(const Model& a, const Model& b) {
  if (a.rows.size() != b.rows.size() || a.dense.size() != b.dense.size()) return INFINITY;
  double worst = 0;
  auto close = [&](float x, float y) {
    worst = std::max(worst, std::fabs(double(x) - double(y)) / (1.0 + std::fabs(double(y))));
  };
  for (size_t i = 0; i < a.dense.size(); ++i) close(a.dense[i], b.dense[i]);
  for (const auto& [key, v] : a.rows) {
    auto it = b.rows.find(key);
    if (it == b.rows.end() || it->second.size() != v.size()) return INFINITY;
    for (size_t i = 0; i < v.size(); ++i) close(v[i], it->second[i]);
  }
  return worst;
}

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
