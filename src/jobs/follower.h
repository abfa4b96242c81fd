// How a stream job meets its data root (docs/routine.md, "Partitions"): the follower that
// waits for partitions in order, and a partition as the job takes it, its files checked
// against its done file and against what was read. Internal to src/jobs.
#ifndef CTRBOX_JOBS_FOLLOWER_H_
#define CTRBOX_JOBS_FOLLOWER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "io/partitions.h"
#include "jobs/job.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox::stream_parts {

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

}  // namespace ctrbox::stream_parts

#endif  // CTRBOX_JOBS_FOLLOWER_H_
