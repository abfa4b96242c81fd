// The parts of a stream job (pipeline/stream.h, docs/routine.md) besides its loop: where it
// stands (the state a checkpoint records), the follower that waits for partitions, and the
// admission counts' files. Internal to src/pipeline.
#ifndef CTRBOX_PIPELINE_STREAM_PARTS_H_
#define CTRBOX_PIPELINE_STREAM_PARTS_H_

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "dist/comm.h"
#include "io/partitions.h"
#include "pipeline/admission.h"
#include "pipeline/job.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox::stream_parts {

// Where a stream job stands; a checkpoint records it (CheckpointManifest::stream).
struct StreamState {
  int64_t next = 0;         // the next partition's ordinal
  std::string last;         // the newest partition committed ("": none yet)
  uint64_t partitions = 0;  // partitions committed (trained, or empty)
  uint64_t skipped = 0;     // partitions skipped as late (stream.on_late: skip)
  nlohmann::json serving;   // the serving publisher's (null without serving.dir)
  nlohmann::json admit;     // the admission counts' file in ckpt.dir and its checksum, or null

  nlohmann::json ToJson() const;
  static StatusOr<StreamState> FromJson(const nlohmann::json& j, const std::string& where);
};

// When `path` was last modified (seconds since the epoch), or nullopt.
std::optional<double> ModifiedAt(const std::string& path);
double NowSeconds();

// Waits for the partitions in order (stream.poll_seconds, stream.max_wait, stream.on_late).
class Follower {
 public:
  enum class Take { kTrain, kSkip, kStop, kWait };

  Follower(Env* env, const StreamOptions& o, const PartitionLayout& layout,
           const std::atomic<bool>* stop)
      : env_(env), o_(o), layout_(layout), stop_(stop) {}

  std::string Dir(int64_t p) const { return JoinPath(o_.root, layout_.Name(p)); }
  bool Ready(int64_t p) const { return env_->FileExists(JoinPath(Dir(p), o_.done_file)); }

  // One look: partition `want` ready (kTrain), given up as late (kSkip), the job stopped
  // (kStop), or not yet (kWait: look again after stream.poll_seconds).
  StatusOr<Take> Poll(int64_t want);
  // Polls until it is not kWait.
  StatusOr<Take> Wait(int64_t want);
  // The same decided by rank 0 of `comm` and taken by every rank: rank 0 polls, and every
  // poll is an exchange (each rank's stop joins it: one rank stopped stops them all), so that
  // a long wait never outlasts dist.timeout_seconds. Without comm: Wait.
  StatusOr<Take> WaitOnRanks(Comm* comm, int64_t want);

  // Sleeps `seconds`, or less once the job is stopped.
  void Sleep(double seconds) const;

 private:
  Env* const env_;
  const StreamOptions& o_;
  const PartitionLayout& layout_;
  const std::atomic<bool>* const stop_;
  std::optional<double> late_since_;
  bool said_waiting_ = false;
};

// A partition name of stream.start / stream.until as an ordinal.
StatusOr<std::optional<int64_t>> OrdinalOf(const PartitionLayout& layout, const std::string& name,
                                           const char* key);

// The newest checkpoint of the job, read before the model is loaded: a resumed stream takes
// its schema from it (the load may fall back to an older checkpoint of the same job). On
// ranks (`ranks` > 1), rank 0's chain in the ranks' layout of ckpt.dir.
StatusOr<std::optional<CheckpointManifest>> NewestManifest(Env* env, const JobConfig& job,
                                                           int ranks);

struct Partition {
  int64_t ordinal = 0;
  std::string name;
  std::vector<std::string> files;
};

// The job reading partition p: its files, or on ranks (job.dist.ranks > 1) this rank's share
// of them by the rule of a job of files (whole files i with i mod ranks = rank; byte ranges
// of every file when there are fewer files than ranks).
JobConfig PartitionJob(const JobConfig& job, const Partition& p, int rank);
Status CheckSchema(const JobConfig& job, const Partition& p, const Schema& got);

// Admission by count (pipeline/admission.h): its counts are part of the state a partition
// commits, in a file of ckpt.dir (admit-<partition ordinal>.bin) the stream state names.
StatusOr<Admission> OpenAdmission(Env* env, const JobConfig& job, const StreamState& state);
StatusOr<nlohmann::json> SaveAdmission(Env* env, const JobConfig& job, const Admission& a,
                                       int64_t ordinal);
// Deletes the admission files no checkpoint in `dir` names (after a commit and its pruning).
Status PruneAdmission(Env* env, const std::string& dir);

}  // namespace ctrbox::stream_parts

#endif  // CTRBOX_PIPELINE_STREAM_PARTS_H_
