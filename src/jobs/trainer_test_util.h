// Helpers of the train job's tests (trainer_test.cc, train_resume_test.cc).
#ifndef CTRBOX_JOBS_TRAINER_TEST_UTIL_H_
#define CTRBOX_JOBS_TRAINER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "io/synth.h"
#include "io/test_util.h"
#include "jobs/evaluator.h"
#include "jobs/trainer.h"
#include "util/parse.h"

namespace ctrbox {
namespace testing {

// The train job's report as `ctrbox train` prints it: the tests check the printed keys.
inline StatusOr<nlohmann::json> TrainJson(Env* env, const JobConfig& job, ProgressSink* sink,
                                          const std::atomic<bool>* stop = nullptr,
                                          Comm* comm = nullptr) {
  StatusOr<TrainReport> r = RunTrain(env, job, sink, stop, comm);
  if (!r.ok()) return r.status();
  return r->ToJson();
}
// The eval job's, as `ctrbox eval` prints it.
inline StatusOr<nlohmann::json> EvalJson(Env* env, const JobConfig& job) {
  StatusOr<EvalReport> r = RunEval(env, job);
  if (!r.ok()) return r.status();
  return r->ToJson();
}

inline std::string WriteCriteo(const TempDir& dir, const std::string& name, uint64_t begin,
                               uint64_t end, uint64_t seed) {
  SynthOptions o;
  o.seed = seed;
  std::string text;
  SynthGenerator(o).GenerateText(begin, end, &text, nullptr);
  std::string path = dir.File(name);
  EXPECT_TRUE(WriteFileAtomic(Env::Posix(), path, text).ok());
  return path;
}

inline JobConfig SmallJob(const std::string& model_dir) {
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
inline JobConfig SmallSsdJobInMemEnv(const std::string& model_dir) {
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
  job.storage.device_io_threads = 0;  // one from the device too
  job.storage.evict_threads = 1;
  job.storage.evict_start = 0.3;  // evict early: the SSD tier takes part
  job.storage.evict_stop = 0.2;
  return job;
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

}  // namespace testing
}  // namespace ctrbox

#endif  // CTRBOX_JOBS_TRAINER_TEST_UTIL_H_
