// A stream job (docs/routine.md): `ctrbox train` with stream.root follows a data root whose
// partitions land one after another (day/hour directories with a done file). It takes them in
// order, each exactly once whatever the restarts: first tests the current model on the
// partition (the online AUC, logloss and COPC), then trains on it, evicts keys unseen for
// table.ttl_partitions partitions, writes the serving version due (serving.dir), commits a
// checkpoint that records the partition, and publishes the version. The same command after a
// crash continues at the first partition not committed.
#ifndef CTRBOX_PIPELINE_STREAM_H_
#define CTRBOX_PIPELINE_STREAM_H_

#include <atomic>
#include <nlohmann/json.hpp>

#include "dist/comm.h"
#include "pipeline/job.h"
#include "pipeline/progress_sink.h"
#include "util/env.h"

namespace ctrbox {

// Runs the stream job until stream.until is committed or *stop becomes true (Ctrl-C: a
// partition in training is abandoned, not committed; it is trained again at the next start);
// returns the report. REQUIRES: job.stream.enabled(); one process (comm null).
StatusOr<nlohmann::json> RunStream(Env* env, JobConfig job, ProgressSink* sink,
                                   const std::atomic<bool>* stop, Comm* comm = nullptr);

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_STREAM_H_
