// The four stage functions of the train job — read, pull, train (on the CPU or the GPUs),
// push — and the state they keep across passes (docs/pipeline.md). A runner
// (stage_runner.h) calls them in order for each pass, one after the other or overlapped on
// consecutive passes; the rule that makes both give the same model bit for bit is
// docs/pipeline.md's "Correctness across overlapping passes", kept by InFlight.
//
// Thread safety: each stage function is called by one thread at a time, and for one pass
// after the previous stage's call for that pass returned (a runner hands passes over through
// queues); different stages run concurrently. Each field below is owned by the stage its
// comment names; what two stages share is atomic, under a lock, or InFlight.
#ifndef CTRBOX_PIPELINE_STAGES_H_
#define CTRBOX_PIPELINE_STAGES_H_

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/checkpoint.h"
#include "dist/comm.h"
#include "gpu/trainer.h"
#include "metrics/metrics.h"
#include "model/ctr_model.h"
#include "pipeline/in_flight.h"
#include "pipeline/options.h"
#include "pipeline/pass.h"
#include "pipeline/pass_reader.h"
#include "pipeline/progress_sink.h"
#include "table/accessor.h"
#include "table/sparse_table.h"
#include "util/mutex.h"
#include "util/sys.h"
#include "util/thread_pool.h"

namespace ctrbox {

// What the stages work with, owned by the caller and borrowed for the run.
// Sees the rows a pass pushed (the values the table now holds for its keys), in push order:
// a stream job's serving versions (jobs/stream.h).
using PushObserver = std::function<Status(const RowBlock& rows)>;

struct StageContext {
  PassStageOptions options;
  PassReader* reader = nullptr;
  SparseTable* table = nullptr;
  CtrModel* model = nullptr;
  const CtrAccessor* accessor = nullptr;
  MetricsLog* log = nullptr;
  ProgressSink* sink = nullptr;  // may be null
  ThreadPool* train_pool = nullptr;
  TrainPosition start;               // where the job stood when this run began
  CheckpointWriter* ckpt = nullptr;  // may be null: no checkpoints
  GpuTrainer* gpu = nullptr;         // may be null: the train stage runs on the CPU
  // May be null: one rank. Else the job's ranks (docs/distributed.md): `table` is this rank's
  // part, passes are this rank's share of the global passes, and the stages exchange keys,
  // rows and gradients (pipeline/rank_pass.h), each stage on its own channel (below); the
  // caller uses channel 0 (this comm) before and after the run.
  Comm* comm = nullptr;
  std::string ranks_ckpt_dir;  // with comm and ckpt: where the ranks' checkpoints commit
  Env* env = nullptr;          // ... on this file system
  PushObserver on_push;        // may be empty
};

// The channels of a distributed job's stages (Comm::channel).
constexpr int kReadChannel = 1, kPullChannel = 2, kTrainChannel = 3, kPushChannel = 4;

class PassStages {
 public:
  explicit PassStages(const StageContext& ctx);
  PassStages(const PassStages&) = delete;
  PassStages& operator=(const PassStages&) = delete;

  // Starts the run's clock and takes the storage counters the first pass line is relative to.
  // REQUIRES: no stage running.
  void Start();
  // Seconds since Start.
  double Seconds() const { return run_clock_.Seconds(); }

  // Read: the next pass with its working set and working-table index, built on `pool` (may
  // be null); nullptr at the end.
  StatusOr<PassPtr> Read(ThreadPool* pool);
  // Pull: the pass's rows resident, pinned and copied into its working table; the keys it
  // shares with the passes in flight found; with device: gpu, the rows staged to the GPUs.
  // After a shrink, first waits until every earlier pass is pushed (Cancelled if the job
  // stopped meanwhile).
  Status Pull(Pass* pass, ThreadPool* pool);
  // Train: the newer rows of shared keys, then the minibatches (or the whole pass on the
  // GPUs). Returns Cancelled, the pass half trained, if *failed becomes true meanwhile.
  Status Train(Pass* pass, const std::atomic<bool>* failed);
  // Push: the rows back into the table and unpinned; shrink and checkpoint when due; the
  // pass's metrics line.
  Status Push(Pass* pass, ThreadPool* pool);
  // Cancels the shrink barrier: a pull waiting at it returns Cancelled.
  void CancelBarrier() { in_flight_.Cancel(); }
  // A job of several ranks: tells the other ranks this one failed with `why` (Comm::Abort,
  // the rank named), so that neither their stages nor this rank's wait in an exchange the
  // failed stage will not join. No-op on one rank.
  void AbortRanks(const Status& why) {
    if (ctx_.comm != nullptr) ctx_.comm->Abort(OnRank(*ctx_.comm, why));
  }

  ThreadPool* train_pool() const { return ctx_.train_pool; }

  // Results of the passes pushed so far (read after the run).
  uint64_t examples() const { return examples_; }
  uint64_t passes() const { return passes_; }
  uint64_t shrunk() const { return shrunk_; }
  uint64_t created() const { return created_; }
  uint64_t patched_rows() const { return patched_rows_; }
  // The most bytes the passes in flight held at once (examples, working sets, rows).
  int64_t passes_peak_bytes() const { return passes_gauge_->peak(); }
  // The resident set and what the table and the passes in flight held at one instant: the
  // pass pushed with the largest resident set less its file pages so far (push stage; sampled
  // after each push, so that owners measured at different moments are not added up).
  struct MemorySample {
    uint64_t rss = 0, table = 0;
    int64_t passes = 0;
    uint64_t heap_free = 0;  // the allocator's free bytes then (HeapFreeBytes): part of "other"
    // The resident pages mapped from files then (ResidentSet::files: the program's code, the
    // SSD files with storage.mapped_reads): part of "other" too.
    uint64_t file_pages = 0;
  };
  const MemorySample& memory_at_peak() const { return memory_at_peak_; }
  double checkpoint_seconds() const { return checkpoint_seconds_; }
  // Where the read and pull stages' busy time went (read after the run): the input (the
  // reader's rows, decoded by its own threads), the working sets, the pass tables; the
  // table's pull, the keys shared with passes in flight, the GPU staging (plan and uploads).
  struct StageSplit {
    double read_input = 0, read_working_set = 0, read_pass_table = 0;
    double pull_table = 0, pull_shared = 0, pull_gpu_stage = 0;
  };
  const StageSplit& split() const { return split_; }
  // Progressive (test-then-train) metrics over the passes trained.
  MetricSummary summary() const { return total_.Summary(); }
  const MetricAccumulator& metrics() const { return total_; }
  // A distributed job: the bytes this rank sent to and received from the others (keys, rows,
  // gradients) over the passes pushed.
  uint64_t exchange_bytes_sent() const { return exchange_sent_; }
  uint64_t exchange_bytes_received() const { return exchange_received_; }
  double exchange_seconds() const { return exchange_seconds_; }
  // Where the job stands after the passes pushed so far.
  TrainPosition Position() const;

 private:
  Status TrainOnCpu(Pass* pass, const std::atomic<bool>* failed, MetricAccumulator* metrics);
  Status TrainOnRanks(Pass* pass, MetricAccumulator* metrics);
  // The predictions of a trained minibatch into the pass's and the run's metrics.
  void AddMetrics(const Pass& pass, const Minibatch& mb, MetricAccumulator* metrics);
  // The pass on the GPUs (ranks: the other ranks of a distributed job, or null).
  Status TrainOnGpu(Pass* pass, const std::vector<uint32_t>& patched, MetricAccumulator* metrics,
                    RankExchange* ranks);
  void ReportProgress();  // train stage
  // Keeps a pushed pass's buffers for the next Read (push stage).
  void ParkBuffers(Pass* pass) EXCLUDES(spare_mu_);
  // Commits a checkpoint after pass `pass` (push stage); returns its line for the metrics.
  bool CheckpointDue(const Pass& pass) const;
  StatusOr<nlohmann::json> Checkpoint(const Pass& pass, ThreadPool* pool);

  const StageContext ctx_;  // immutable after construction
  InFlight in_flight_;
  const std::shared_ptr<MemoryGauge> passes_gauge_ = std::make_shared<MemoryGauge>();
  // One process: the passes' working tables, each reused once its pass is done.
  const std::shared_ptr<TableRecycler> tables_;
  Stopwatch run_clock_;  // reset by Start; read by every stage

  uint64_t next_index_;           // read stage
  double extract_busy_ = 0;       // read stage: the extractor's busy seconds at the last pass
  bool local_eof_ = false;        // read stage: this rank's share of the input is read
  WorkingSetScratch ws_scratch_;  // read stage: the working sets' temporary buffers
  StageSplit split_;              // its read_* fields: read stage; pull_*: pull stage
  // Pull stage: the pass's rows train overwrites from the passes in flight (SparseTable::Pull).
  std::vector<uint8_t> pull_overwritten_;

  std::vector<float> predictions_;       // train stage
  std::vector<float> pass_predictions_;  // train stage
  MetricAccumulator total_;              // train stage
  uint64_t trained_examples_ = 0;        // train stage
  Stopwatch progress_clock_;             // train stage

  uint64_t examples_ = 0, passes_ = 0, shrunk_ = 0, created_ = 0, patched_rows_ = 0;  // push
  uint64_t grid_passes_ = 0;                                                          // push
  uint64_t exchange_sent_ = 0, exchange_received_ = 0;                                // push
  double exchange_seconds_ = 0;                                                       // push
  uint64_t global_examples_ = 0;   // push: a distributed job's examples over every rank
  double last_push_ = 0;           // push
  double checkpoint_seconds_ = 0;  // push
  StorageStats storage_before_;    // push
  MemorySample memory_at_peak_;    // push

  // A pushed pass's examples and working set, kept for the next pass the read stage makes
  // (its buffers reused: no reallocation as a pass grows, no fresh pages to fault in);
  // counted in passes_gauge_ while parked.
  struct SpareBuffers {
    Batch examples;
    WorkingSet ws;
  };
  Mutex spare_mu_;
  std::unique_ptr<SpareBuffers> spare_ GUARDED_BY(spare_mu_);
  int64_t spare_bytes_ GUARDED_BY(spare_mu_) = 0;

  // The train stage reports progress and the push stage passes: one call at a time.
  Mutex sink_mu_;
  ProgressSink* const sink_ PT_GUARDED_BY(sink_mu_);
};

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_STAGES_H_
