// RunTrain's steps by concern (jobs/trainer.h is the entry point; trainer.cc runs the
// passes and the job): train_ranks.cc a distributed job's sharing of the job, its resume and
// repartition and its report; train_finish.cc committing the model, the held-out evaluation,
// the table's close and the memory report. Internal to src/pipeline.
#ifndef CTRBOX_JOBS_TRAIN_STEPS_H_
#define CTRBOX_JOBS_TRAIN_STEPS_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/ranks_checkpoint.h"
#include "dist/comm.h"
#include "jobs/job.h"
#include "jobs/train_report.h"
#include "jobs/train_start.h"
#include "pipeline/stages.h"
#include "table/sparse_table.h"
#include "util/dir_lock.h"
#include "util/env.h"

namespace ctrbox::train_steps {

// ---- trainer.cc ----
// What the passes of a run did: the report so far, and the facts the job's finish acts on
// (read here, not back from the report).
struct PassesRun {
  TrainReport report;
  TrainPosition position;     // where the run stopped
  bool interrupted = false;   // stopped by Ctrl-C or --stop-after
  uint64_t examples = 0;      // trained by this run (this rank)
  uint64_t job_examples = 0;  // ... by the job (summed over the ranks)
  uint64_t records_malformed = 0;
};
// Runs every pass of `reader` from `start` (on the GPUs with device: gpu); on_push (may be
// null) sees the rows each pass pushed.
StatusOr<PassesRun> RunPasses(Env* env, const JobConfig& job, PassReader* reader, TrainStart* start,
                              ProgressSink* sink, const std::atomic<bool>* stop, ThreadPool* pool,
                              Comm* comm, const std::string& ranks_ckpt_dir,
                              const PushObserver& on_push);
// The job as it will run: validated, shared among the ranks (and their resumed stream
// planned), its features attached and its GPU memory resolved.
Status PrepareJob(Env* env, Comm* comm, const std::atomic<bool>* stop, JobData data, JobConfig* job,
                  std::string* ranks_ckpt_dir);
// Holds the directories the job writes until it ends (util/dir_lock.h).
Status HoldJobDirs(Env* env, const Comm* comm, const std::string& ranks_ckpt_dir, JobConfig* job,
                   DirLocks* held);
// How the reader cuts passes (the ranks agree on every cut).
PassReaderOptions PassOptionsOnRanks(const JobConfig& job, Comm* comm);
// The model the data's schema allows.
Status CheckModelAgainstSchema(const JobConfig& job);
// Start: resume, continue the model in model_dir, or a new model.
StatusOr<TrainStart> StartOnRanks(Env* env, const JobConfig& job, Comm* comm,
                                  const std::string& ranks_ckpt_dir, PassReader* reader,
                                  ThreadPool* pool);

// ---- epochs.cc ----
// A job of files validated per epoch (docs/model.md, "Validation and early stopping"): the
// epochs one at a time from where `start` stands, the rows held back (jobs/holdout.h)
// scored after each, a copy of the best epoch's model kept (beside the checkpoints, or in a
// scratch directory) and a checkpoint committed per epoch; with epochs: auto it stops after
// train.early_stop_patience epochs without a lower validation logloss. At the end `start`
// holds the best epoch's model and the checkpoint writer the record the final commit takes.
struct EpochsRun {
  PassesRun run;  // the epochs' passes together (the last epoch's report, with their sums)
  nlohmann::json validation;  // the report's "validation"
  bool abandoned = false;     // stopped inside an epoch: nothing of it is committed
};
StatusOr<EpochsRun> RunEpochs(Env* env, const JobConfig& job, TrainStart* start, ProgressSink* sink,
                              const std::atomic<bool>* stop, ThreadPool* pool);
// After the final commit: the copies of best epochs in ckpt.dir that no checkpoint kept names.
Status PruneEpochCopies(Env* env, const JobConfig& job);

// ---- train_ranks.cc ----
// A distributed job's report from this rank's (figures summed over the ranks; rank 0 lists
// each rank's own under "per_rank").
Status GlobalReport(Comm* comm, const JobConfig& job, const PassStages& stages,
                    TrainReport* report);
// This rank's place among the ranks on its machine.
uint32_t LocalRank(const Comm& comm);
// The checkpoint the ranks committed together (none: nullopt), this rank's newer ones removed.
StatusOr<std::optional<RanksCheckpoint>> PrepareRanksResume(Env* env, const Comm& comm,
                                                            const JobConfig& job,
                                                            const std::string& ranks_dir);
// A job resumed on another number of ranks: the checkpoint's rows this rank owns now, into
// the started table.
Status RepartitionFromRanks(Env* env, const JobConfig& job, const std::string& ranks_dir,
                            const RanksCheckpoint& ckpt, const KeyFilter& owned, PassReader* reader,
                            ThreadPool* pool, TrainStart* start);
// A job of files resumed on another number of ranks: this rank's segments of the files.
Status PlanResumedSegments(Env* env, Comm* comm, const std::vector<std::string>& files,
                           const std::string& ranks_dir, JobConfig* job);
// Every rank was started with the same job (its settings as given, its feature graph);
// otherwise InvalidArgument on every rank naming each key that differs with every rank's value.
Status CheckRanksRunOneJob(Comm* comm, const JobConfig& job);
// Every rank's data has the same schema.
Status CheckRanksReadOneSchema(Comm* comm, const Schema& schema);
// The job as every rank must run it: checked alike on every rank, this rank's share of the
// input, its checkpoint directory and metrics path.
Status ShareJob(Env* env, const Comm& comm, JobConfig* job, std::string* ranks_ckpt_dir,
                std::vector<std::string>* files);

// ---- train_finish.cc ----
// Commits the final checkpoint and the model directory; the digest into the report.
Status CommitModel(Env* env, const JobConfig& job, TrainStart* start, const TrainPosition& position,
                   ThreadPool* pool, TrainReport* report);
// The same for the ranks of a distributed job (one model saved by every rank).
Status CommitModelOfRanks(Env* env, Comm* comm, const JobConfig& job,
                          const std::string& ranks_ckpt_dir, TrainStart* start,
                          const TrainPosition& position, ThreadPool* pool, TrainReport* report);
// What the model directory records of the input it was trained on (ModelManifest::input).
nlohmann::json InputRecord(const JobConfig& job);
// The held-out files open, with the training data's schema and a readable first chunk: checked
// before training, so that a typo in --eval-data costs no training run.
Status CheckHeldOut(Env* env, const JobConfig& job);
// Held-out evaluation (--eval-data or the generated test rows) into the report.
Status EvaluateHeldOut(Env* env, const JobConfig& job, Comm* comm, TrainStart* start,
                       ThreadPool* pool, TrainReport* report);
// The disk under this rank's SSD files measured into the report (storage.disk_probe; rank 0
// only: ranks sharing a disk would measure each other). A probe that fails is logged, not
// the job's error.
void ProbeTierDisk(Env* env, const JobConfig& job, const Comm* comm, TrainReport* report);
// Closes (storage.keep_store) or drops the table and its SSD files.
Status CloseTable(Env* env, const JobConfig& job, std::unique_ptr<SparseTable> table);
// The run's peak resident memory split by owner.
nlohmann::json PeakMemoryByOwner(const JobConfig& job, const CtrModel& model,
                                 const TrainReport& report);
// The job's memory box (util/memory_box.h): its limit and where it comes from, the box's peak
// use so far where its cgroup counts one (the process and the page cache: the SSD files' pages,
// the input's, the writes not yet on disk), and the memory budget's share of the box.
nlohmann::json MemoryBoxJson(const JobConfig& job);

}  // namespace ctrbox::train_steps

#endif  // CTRBOX_JOBS_TRAIN_STEPS_H_
