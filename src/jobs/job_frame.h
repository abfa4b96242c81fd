// JobFrame: the prologue and epilogue the train job and the stream job share (docs/pipeline.md,
// "The jobs"). Before anything is read: the job validated and shared among the ranks
// (train_steps::PrepareJob) and its directories held (HoldJobDirs). Once the data's schema is
// known: the ranks agree on it, the model fits it, the table's seed is the job's, the pool is
// opened. From then on the SSD files, the job's scratch, are deleted on any error once the
// table is gone; Close closes the table and keeps them as storage.keep_store says.
//
// Declare the frame before the TrainStart it serves: the table is destroyed first, then the
// scratch removed, then the directories released.
//
// Thread safety: not thread-safe.
#ifndef CTRBOX_JOBS_JOB_FRAME_H_
#define CTRBOX_JOBS_JOB_FRAME_H_

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "dist/comm.h"
#include "io/batch.h"
#include "jobs/job.h"
#include "table/sparse_table.h"
#include "util/dir_lock.h"
#include "util/env.h"
#include "util/status.h"
#include "util/sys.h"
#include "util/thread_pool.h"

namespace ctrbox {

class JobFrame {
 public:
  // `job` (the job being run) must outlive the frame; comm may be null (one process).
  JobFrame(Env* env, Comm* comm, const std::atomic<bool>* stop, JobConfig* job);
  ~JobFrame();
  JobFrame(const JobFrame&) = delete;
  JobFrame& operator=(const JobFrame&) = delete;

  // Validated, shared among the ranks, its features attached; its directories held.
  Status Prepare(JobData data);
  // Holds one more directory the job writes (`role` names it in the error of a second job).
  Status Hold(const std::string& dir, std::string_view role) { return held_.Add(env_, dir, role); }
  // The data's schema adopted (see the file comment); the pool opened.
  Status Adopt(const Schema& schema);
  // Closes the table: kept with storage.keep_store, else its SSD files deleted.
  Status Close(std::unique_ptr<SparseTable> table);

  ThreadPool* pool() const { return pool_.get(); }
  const std::string& ranks_ckpt_dir() const { return ranks_ckpt_dir_; }
  double Seconds() const { return clock_.Seconds(); }

 private:
  Env* const env_;
  Comm* const comm_;
  const std::atomic<bool>* const stop_;
  JobConfig* const job_;
  Stopwatch clock_;
  std::string ranks_ckpt_dir_;
  DirLocks held_;  // released last
  std::unique_ptr<ThreadPool> pool_;
  bool scratch_kept_ = true;  // until Adopt: nothing of this job's is there to remove
};

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_JOB_FRAME_H_
