// Where a train job starts (docs/checkpoints.md, "Resume"): from the newest checkpoint that
// loads (--resume), from the model in the model directory (continued training), or from a new
// model — and what its run writes to: the checkpoint writer and the metrics log.
#ifndef CTRBOX_JOBS_TRAIN_START_H_
#define CTRBOX_JOBS_TRAIN_START_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/model_dir.h"
#include "feature/extractor.h"
#include "jobs/job.h"
#include "metrics/metrics.h"
#include "model/ctr_model.h"
#include "pipeline/pass_reader.h"
#include "table/sparse_table.h"
#include "util/thread_pool.h"

namespace ctrbox {

struct TrainStart {
  std::unique_ptr<CtrModel> model;
  std::unique_ptr<SparseTable> table;
  TrainPosition position;                     // the job's passes and examples before this run
  std::optional<CheckpointManifest> resumed;  // the checkpoint resumed from, if any
  std::vector<std::string> resume_warnings;   // newer checkpoints that did not load, and why
  std::unique_ptr<CheckpointWriter> ckpt;     // null without ckpt.dir
  std::unique_ptr<MetricsLog> metrics_log;
  // The extract stage's totals before this run's reader opened (a job of epochs, a stream's
  // partition: the job's extractor also counted the reads before, and every read to score):
  // the run's log and report count from here. Zero: the whole job's.
  ExtractTotals extracted_before;
};

// Chooses and opens the start. A resumed job's reader is moved past the passes its
// checkpoint holds. Fails with InvalidArgument when the checkpoint or the model in the model
// directory was written with another model spec (or, for a checkpoint, other data or pass
// settings) than this job sets, or when ckpt.dir holds another job's checkpoints and neither
// --resume nor --fresh is given; with the loaders' errors otherwise.
// A stream job passes no reader (its position is its partitions, docs/routine.md).
// A model continued from model_dir keeps the rows `owned` keeps (a rank of a distributed
// job: its part; empty: all).
// REQUIRES: job.Validate() passed; job.spec.schema is the reader's.
StatusOr<TrainStart> StartTrain(Env* env, const JobConfig& job, PassReader* reader,
                                ThreadPool* pool, const KeyFilter& owned = nullptr);

// The job settings besides the model spec that change what a resumed job computes: what the
// data is, and how it is cut into passes and minibatches. A checkpoint records them (a rank's
// checkpoint: its share of the job, with its own files).
StatusOr<nlohmann::json> ResultSettings(Env* env, const JobConfig& job);

// Why a job with `spec` and `settings` cannot continue from checkpoint m, or "". ranks_then:
// the ranks that wrote m, ranks_now: this job's. Settings divided among the ranks (the batch,
// the pass) are compared and named as the job sets them, not as a rank's share; across
// another number of ranks each rank's files are its own and are not compared.
std::string ResumeMismatch(const CheckpointManifest& m, const ModelSpec& spec,
                           const nlohmann::json& settings, uint32_t ranks_then = 1,
                           uint32_t ranks_now = 1);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_TRAIN_START_H_
