#include "jobs/job_frame.h"

#include "dist/collectives.h"
#include "jobs/train_steps.h"
#include "table/ssd_store.h"
#include "util/sys.h"

namespace ctrbox {

using namespace train_steps;  // NOLINT: the train job's steps

JobFrame::JobFrame(Env* env, Comm* comm, const std::atomic<bool>* stop, JobConfig* job)
    : env_(env), comm_(comm), stop_(stop), job_(job) {}

JobFrame::~JobFrame() {
  SetBackgroundNice(0);  // the job's threads have ended; a later job in the process sets its own
  // On any error a full disk is given back (a kept store, storage.keep_store, is left).
  if (!scratch_kept_ && !job_->storage.keep_store && !job_->storage.ssd.dir.empty()) {
    SsdStore::RemoveFiles(env_, job_->storage.ssd.dir).IgnoreError();
  }
}

Status JobFrame::Prepare(JobData data) {
  RETURN_IF_ERROR(PrepareJob(env_, comm_, stop_, data, job_, &ranks_ckpt_dir_));
  // Before the reader's decoders and the SSD tier's threads start (docs/pipeline.md, "Threads").
  SetBackgroundNice(job_->pipeline.background_nice);
  // Before anything is written, and released last (after the SSD scratch is removed).
  return HoldJobDirs(env_, comm_, ranks_ckpt_dir_, job_, &held_);
}

Status JobFrame::Adopt(const Schema& schema) {
  job_->spec.schema = schema;
  if (comm_ != nullptr) RETURN_IF_ERROR(CheckRanksReadOneSchema(comm_, schema));
  RETURN_IF_ERROR(CheckModelAgainstSchema(*job_));
  job_->spec.table.seed = job_->train.seed;
  pool_ = std::make_unique<ThreadPool>(job_->train.threads, "ctrbox-train");
  scratch_kept_ = false;
  return Status::OK();
}

Status JobFrame::Close(std::unique_ptr<SparseTable> table) {
  Status s = CloseTable(env_, *job_, std::move(table));
  // Removed by the close, or kept by storage.keep_store; a close that failed (the removal
  // half done) leaves it to the destructor to try again.
  if (s.ok()) scratch_kept_ = true;
  return s;
}

}  // namespace ctrbox
