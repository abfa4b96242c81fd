// Helpers of the distributed train job's tests (distributed_train_test.cc,
// distributed_resume_test.cc): N ranks as threads of this process over LocalGroup, their input
// files, the one-rank input of the same global minibatches, and the saved models compared.
#ifndef CTRBOX_JOBS_DISTRIBUTED_TEST_UTIL_H_
#define CTRBOX_JOBS_DISTRIBUTED_TEST_UTIL_H_

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
namespace dist_testing {

using testing::SmallJob;
using testing::TempDir;
using testing::TrainJson;

constexpr int kFiles = 4;
constexpr uint64_t kRowsPerFile = 2048;
constexpr uint32_t kBatch = 256;
constexpr uint64_t kPass = 2048;

inline std::vector<std::string> Lines(uint64_t begin, uint64_t end) {
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

inline Data WriteFiles(const TempDir& dir) {
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
inline std::string InterleavedFile(const TempDir& dir, const Data& d, int n) {
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
inline JobConfig Job(const std::string& model_dir, bool sgd) {
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
inline std::vector<StatusOr<nlohmann::json>> RunRanks(int n, const JobConfig& job,
                                                      Env* env = Env::Posix(),
                                                      Status* stopped_by = nullptr,
                                                      double timeout = 600) {
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
inline Model Load(const std::string& dir) {
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
inline double TestAuc(const std::string& dir, const std::string& test_file) {
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
inline double Distance(const Model& a, const Model& b) {
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

}  // namespace dist_testing
}  // namespace ctrbox

#endif  // CTRBOX_JOBS_DISTRIBUTED_TEST_UTIL_H_
