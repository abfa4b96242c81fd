// The train job: read examples, cut them into passes, train pass by pass, save the model.
//
// Data flow (DESIGN.md §2), one pass at a time on the trainer thread:
//   read + prepare (own thread: parse, assemble the pass, build its working set)
//     -> pull (copy the pass's rows out of the table, creating new keys)
//     -> train (minibatches on the pass's rows: pool, MLP, sparse + dense updates)
//     -> push (write the rows back), shrink every table.shrink_every_passes passes.
// The reader thread prepares pass i+1 while pass i trains (a bounded queue of
// pipeline.queue_depth passes between them). Nothing is written to the model directory
// unless every pass succeeded.
#ifndef CTRBOX_PIPELINE_TRAINER_H_
#define CTRBOX_PIPELINE_TRAINER_H_

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

// Runs the train job and returns its report (the JSON object `ctrbox train` prints).
StatusOr<nlohmann::json> RunTrain(Env* env, JobConfig job, ProgressSink* sink);

// Evaluates the model in job.model_dir on job.data; returns the eval report.
StatusOr<nlohmann::json> RunEval(Env* env, const JobConfig& job);

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_TRAINER_H_
