// ProgressSink: what a train job tells its caller while it runs (the CLI's progress line, a
// notebook's callback).
#ifndef CTRBOX_PIPELINE_PROGRESS_SINK_H_
#define CTRBOX_PIPELINE_PROGRESS_SINK_H_

#include <cstdint>
#include <nlohmann/json.hpp>

#include "metrics/metrics.h"

namespace ctrbox {

struct TrainProgress {
  uint64_t examples = 0;
  double seconds = 0;
  double examples_per_s = 0;
  MetricSummary running;  // progressive (test-then-train) metrics so far
  // The share of the whole job done (every epoch, the passes a resume skipped included) and
  // the seconds left at the current rate; both < 0 when the input's size is unknown (a pipe,
  // a command). Estimated from the bytes (or generated rows) read per row read so far.
  double fraction = -1;
  double eta_seconds = -1;
};

// Receives progress while a job runs: OnProgress from the train stage, OnPass (the pass's
// metrics line) from the push stage, never two calls at once; OnDone from the caller's thread
// after the last pass.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void OnProgress(const TrainProgress& progress) {}
  virtual void OnPass(const nlohmann::json& pass_record) {}
  virtual void OnDone() {}
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_PROGRESS_SINK_H_
