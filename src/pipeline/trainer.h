// The train job: read examples, cut them into passes, run each pass through the stages
// read -> pull -> train -> push, overlapped on consecutive passes (pipeline.enabled) or one
// after the other; save the model. Stages, invariants and the stage report: docs/pipeline.md.
// Nothing is written to the model directory unless every pass succeeded.
#ifndef CTRBOX_PIPELINE_TRAINER_H_
#define CTRBOX_PIPELINE_TRAINER_H_

#include <atomic>
#include <nlohmann/json.hpp>

#include "metrics/metrics.h"
#include "pipeline/job.h"
#include "util/env.h"

namespace ctrbox {

struct TrainProgress {
  uint64_t examples = 0;
  double seconds = 0;
  double examples_per_s = 0;
  MetricSummary running;  // progressive (test-then-train) metrics so far
};

// Receives progress while a job runs. Called from the trainer thread.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void OnProgress(const TrainProgress& progress) {}
  virtual void OnPass(const nlohmann::json& pass_record) {}
  virtual void OnDone() {}
};

// Runs the train job and returns its report (the JSON object `ctrbox train` prints). When
// *stop becomes true (Ctrl-C), the job stops after the pass in training is pushed, saves the
// model and reports "interrupted": true (docs/pipeline.md).
StatusOr<nlohmann::json> RunTrain(Env* env, JobConfig job, ProgressSink* sink,
                                  const std::atomic<bool>* stop = nullptr);

// Evaluates the model in job.model_dir on job.data; returns the eval report.
StatusOr<nlohmann::json> RunEval(Env* env, const JobConfig& job);

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_TRAINER_H_
