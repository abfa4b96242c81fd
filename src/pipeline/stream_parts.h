// The parts of a stream job (pipeline/stream.h, docs/routine.md) besides its loop: where it
// stands (the state a checkpoint records), the follower that waits for partitions, and the
// admission counts' files. Internal to src/pipeline.
#ifndef CTRBOX_PIPELINE_STREAM_PARTS_H_
#define CTRBOX_PIPELINE_STREAM_PARTS_H_

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
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

// The wall clock through `env`, in seconds since the epoch.
double NowSeconds(Env* env);

// Waits for the partitions in order (stream.poll_seconds, stream.max_wait, stream.on_late),
// taking only partitions that can come next: none from the future (stream.max_ahead) or past
// a gap (stream.max_gap). What it passes over it names once: such partitions, directories
// the layout cannot read, and skipped partitions that landed after all.
class Follower {
 public:
  enum class Take { kTrain, kSkip, kStop, kWait };

  // `skipped`: the stream's runs of skipped partitions (StreamState::skipped_runs).
  Follower(Env* env, const StreamOptions& o, const PartitionLayout& layout,
           const std::atomic<bool>* stop,
           const std::vector<std::pair<int64_t, int64_t>>* skipped = nullptr)
      : env_(env), o_(o), layout_(layout), stop_(stop), skipped_(skipped) {}

  std::string Dir(int64_t p) const { return JoinPath(o_.root, layout_.Name(p)); }

  // The first ready partition that is not from the future, or nullopt (a new stream's start).
  StatusOr<std::optional<int64_t>> FirstReady();
  // One look: partition `want` ready (kTrain), given up as late (kSkip: every partition from
  // `want` to skip_to() - 1), the job stopped (kStop), or not yet (kWait: look again after
  // stream.poll_seconds).
  StatusOr<Take> Poll(int64_t want);
  int64_t skip_to() const { return skip_to_; }
  // Polls until it is not kWait.
  StatusOr<Take> Wait(int64_t want);
  // The same decided by rank 0 of `comm` and taken by every rank: rank 0 polls, and every
  // poll is an exchange (each rank's stop joins it: one rank stopped stops them all), so that
  // a long wait never outlasts dist.timeout_seconds. Without comm: Wait. After kSkip every
  // rank's skip_to() is rank 0's.
  StatusOr<Take> WaitOnRanks(Comm* comm, int64_t want);

  // Sleeps `seconds`, or less once the job is stopped.
  void Sleep(double seconds) const;

 private:
  // Whether ready partition `p` may come next after `want` (nullopt: any); names once
  // the ones that may not.
  bool Takeable(int64_t p, std::optional<int64_t> want);
  // Names once what a look at the root passes over (see the class comment).
  void Notice(const PartitionScan& scan, int64_t want);

  Env* const env_;
  const StreamOptions& o_;
  const PartitionLayout& layout_;
  const std::atomic<bool>* const stop_;
  const std::vector<std::pair<int64_t, int64_t>>* const skipped_;
  std::optional<double> late_since_;
  bool said_waiting_ = false;
  int64_t skip_to_ = 0;
  std::set<std::string> named_;  // what Notice and Takeable said, once each
};

// A partition name of stream.start / stream.until as an ordinal.
StatusOr<std::optional<int64_t>> OrdinalOf(const PartitionLayout& layout, const std::string& name,
                                           const char* key);

// The newest checkpoint of the job, read before the model is loaded: a resumed stream takes
// its schema from it (the load may fall back to an older checkpoint of the same job). On
// ranks (`ranks` > 1), rank 0's chain in the ranks' layout of ckpt.dir.
StatusOr<std::optional<CheckpointManifest>> NewestManifest(Env* env, const JobConfig& job,
                                                           int ranks);

// A partition as the job takes it: its data files, each with its size and time then.
struct Partition {
  int64_t ordinal = 0;
  std::string name;
  std::vector<std::string> files;
  std::vector<FileStat> stats;    // files[i]'s when taken
  std::optional<double> done_at;  // its done file's time (seconds since the epoch)
};

// Takes ready partition p in `dir`: its data files (PartitionFiles; entries it leaves out are
// named in a warning) and their stats. A file changed after the done file was written fails
// (FailedPrecondition naming the file and both times): the partition is not the one marked
// done.
StatusOr<Partition> TakePartition(Env* env, const PartitionLayout& layout, int64_t p,
                                  const std::string& dir, const std::string& done_file);
// FailedPrecondition naming the file when a file of p changed (size or time) since it was
// taken: what the job read is not the partition, so nothing of it may be committed.
Status CheckUnchanged(Env* env, const Partition& p);

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
