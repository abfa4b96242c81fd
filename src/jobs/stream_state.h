// Where a stream job stands (docs/routine.md, "Checkpoints of a stream"): the state each
// partition's checkpoint records, the newest checkpoint a resumed stream reads its schema
// from, and the admission counts' files the state names. Internal to src/jobs.
#ifndef CTRBOX_JOBS_STREAM_STATE_H_
#define CTRBOX_JOBS_STREAM_STATE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"
#include "jobs/admission.h"
#include "jobs/job.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox::stream_parts {

// Where a stream job stands; a checkpoint records it (CheckpointManifest::stream).
struct StreamState {
  int64_t next = 0;         // the next partition's ordinal
  std::string last;         // the newest partition committed ("": none yet)
  uint64_t partitions = 0;  // partitions committed (trained, or empty)
  uint64_t skipped = 0;     // partitions skipped as late (stream.on_late: skip) or by a start
  // The newest runs of skipped partitions, [first, last] ordinals, oldest first (at most
  // kSkippedRuns): one of them that lands later is named once, never trained.
  std::vector<std::pair<int64_t, int64_t>> skipped_runs;
  static constexpr size_t kSkippedRuns = 64;
  std::string serving_dir;  // serving.dir as the stream's first start gave it ("": none)
  nlohmann::json serving;   // the serving publisher's (null without serving.dir)
  nlohmann::json admit;     // the admission counts' file in ckpt.dir and its checksum, or null

  // Records partitions [first, last] as skipped.
  void Skip(int64_t first, int64_t last);

  nlohmann::json ToJson() const;
  static StatusOr<StreamState> FromJson(const nlohmann::json& j, const std::string& where);
};

// The newest checkpoint of the job, read before the model is loaded: a resumed stream takes
// its schema from it (the load may fall back to an older checkpoint of the same job). On
// ranks (`ranks` > 1), rank 0's chain in the ranks' layout of ckpt.dir.
StatusOr<std::optional<CheckpointManifest>> NewestManifest(Env* env, const JobConfig& job,
                                                           int ranks);

// Admission by count (jobs/admission.h): its counts are part of the state a partition
// commits, in a file of ckpt.dir (admit-<partition ordinal>.bin) the stream state names.
StatusOr<Admission> OpenAdmission(Env* env, const JobConfig& job, const StreamState& state);
StatusOr<nlohmann::json> SaveAdmission(Env* env, const JobConfig& job, const Admission& a,
                                       int64_t ordinal);
// Deletes the admission files no checkpoint in `dir` names (after a commit and its pruning).
Status PruneAdmission(Env* env, const std::string& dir);

}  // namespace ctrbox::stream_parts

#endif  // CTRBOX_JOBS_STREAM_STATE_H_
