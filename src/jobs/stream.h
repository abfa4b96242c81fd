// A stream job (docs/routine.md): `ctrbox train` with stream.root follows a data root whose
// partitions land one after another (day/hour directories with a done file). It takes them in
// order, each exactly once whatever the restarts: first tests the current model on the
// partition (the online AUC, logloss and COPC), then trains on it, evicts keys unseen for
// table.ttl_partitions partitions, writes the serving version due (serving.dir), commits a
// checkpoint that records the partition, and publishes the version. The same command after a
// crash continues at the first partition not committed.
#ifndef CTRBOX_JOBS_STREAM_H_
#define CTRBOX_JOBS_STREAM_H_

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "dist/comm.h"
#include "jobs/job.h"
#include "pipeline/progress_sink.h"
#include "util/env.h"

namespace ctrbox {

// What a stream job's run did: the JSON object `ctrbox train` prints for it (ToJson, its one
// writer; docs/routine.md).
struct StreamReport {
  std::string root;  // stream.root
  // Stopped before the first partition was known (a new stream waiting for data): nothing
  // else is set.
  bool stopped_waiting = false;
  uint64_t partitions_committed = 0, partitions_trained_now = 0;  // the job's, this run's
  uint64_t skipped = 0, skipped_now = 0;
  std::string last, next;  // partition names: the newest committed, the next one
  uint64_t examples = 0;   // this run's (on ranks summed over them)
  double examples_per_s =
      0;  // over the partitions' passes (the tests, evictions and commits apart)
  double test_seconds = 0, train_seconds = 0, checkpoint_seconds = 0;
  bool interrupted = false;
  nlohmann::json last_partition;  // the metrics line of the last partition (null: none)
  bool saved = false;             // the model saved (not when stopped inside a partition)
  std::optional<std::string> digest, model_dir;
  uint64_t keys = 0;  // on ranks summed over them
  int ranks = 0;      // 0: one process
  double total_seconds = 0;
  std::string blas_core;
  int64_t peak_rss_bytes = 0;

  nlohmann::json ToJson() const;
};

// Runs the stream job until stream.until is committed or *stop becomes true (Ctrl-C: a
// partition in training is abandoned, not committed; it is trained again at the next start);
// returns the report. REQUIRES: job.stream.enabled().
StatusOr<StreamReport> RunStream(Env* env, JobConfig job, ProgressSink* sink,
                                 const std::atomic<bool>* stop, Comm* comm = nullptr);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_STREAM_H_
