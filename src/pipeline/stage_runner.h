// The two ways to run the stages over every pass (docs/pipeline.md): one after the other on
// the caller's thread (the sequential reference), or overlapped — one thread per stage,
// bounded queues of pipeline.queue_depth passes between them. Both give the same model bit
// for bit.
//
// Errors: the first error of any stage closes every queue, discards the passes in them (their
// pins are released) and cancels the shrink barrier, so every stage returns promptly; it is
// what RunStages returns, after every stage thread is joined.
// Ctrl-C (*stop): no pass is read or pulled after it, the passes read or pulled and not
// trained are discarded, the pass in training finishes and every trained pass is pushed.
#ifndef CTRBOX_PIPELINE_STAGE_RUNNER_H_
#define CTRBOX_PIPELINE_STAGE_RUNNER_H_

#include <atomic>

#include "pipeline/options.h"
#include "pipeline/pass.h"
#include "pipeline/stages.h"

namespace ctrbox {

struct StageRunResult {
  StageClocks totals;  // per stage, over the run; idle: what busy and stalled leave of it
  double seconds = 0;  // the run's wall time
  bool interrupted = false;
};

// Runs every pass of `stages` (overlapped when options.enabled). stop may be null.
StatusOr<StageRunResult> RunStages(PassStages* stages, const PipelineOptions& options,
                                   const std::atomic<bool>* stop);

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_STAGE_RUNNER_H_
