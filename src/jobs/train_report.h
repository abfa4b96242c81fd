// The train job's reports, made here and only here from plain structs: the pass lines and
// the final "stages" line of the metrics file, the JSON object `ctrbox train` prints, and
// AIBox Table 1 in the log (docs/pipeline.md, "Stage report").
#ifndef CTRBOX_JOBS_TRAIN_REPORT_H_
#define CTRBOX_JOBS_TRAIN_REPORT_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "feature/extractor.h"
#include "gpu/trainer.h"
#include "io/bad_input.h"
#include "jobs/job.h"
#include "model/ctr_model.h"
#include "pipeline/pass.h"
#include "pipeline/pass_reader.h"
#include "pipeline/pass_record.h"
#include "pipeline/stage_runner.h"
#include "pipeline/stages.h"
#include "table/sparse_table.h"

namespace ctrbox {

// The extract stage's totals (docs/features.md): rows in and out, filtered, duplicates, bad,
// worker seconds by part, join hit rates, the side views held.
nlohmann::json ExtractJson(const ExtractTotals& x);
// Its line beside the stage table: busy worker time against the run's wall time.
// `malformed`: the reader's bad records, the graph's bad rows among them.
void LogExtract(const ExtractTotals& x, double seconds, int reader_threads, uint64_t malformed);
// Why a job read no examples: "(N records malformed and skipped)", and with a feature graph
// what became of the rows it read (filtered, duplicates, bad), for the message that stops it.
std::string NoExamplesReason(const JobConfig& job, uint64_t records_malformed);

// The train job's report (docs/pipeline.md, "Stage report"): what `ctrbox train` prints and
// the metrics file's last line, typed; ToJson is its one writer. The run's steps fill it in
// order: the passes (ReportOfRun, then RunPasses), a distributed job's sums (GlobalReport),
// the commit, the held-out evaluation and the finish. Optional parts are left out of the JSON.
struct TrainReport {
  // The passes trained: this rank's (a distributed job's summed by GlobalReport).
  uint64_t examples = 0;
  double seconds = 0;
  double examples_per_s = 0;
  MetricSummary metrics;  // progressive (test-then-train): auc, logloss, copc
  uint64_t passes = 0;
  uint32_t epochs = 0;
  int threads = 0;
  std::string device;  // "cpu", or the GPUs' description
  uint64_t batch_size = 0;
  bool deterministic = false, pipelined = false, interrupted = false;
  uint64_t job_passes = 0, job_examples = 0;  // where the job stands (resumed runs included)
  // The table.
  uint64_t keys = 0, keys_with_embedding = 0, embeddings_created = 0, keys_shrunk = 0;
  uint64_t bytes_live = 0, table_memory_bytes = 0, keys_in_memory = 0, keys_on_disk = 0;
  double table_bytes_per_key = 0, value_bytes_per_key = 0;
  StorageStats storage;
  // The disk under the SSD files, measured at the job's end (storage.disk_probe).
  std::optional<DiskCeiling> disk_ceiling;
  // The model and the machine.
  QuantOptions quant;
  uint64_t dense_params = 0;
  std::string model_shape, input, blas_core, blas_core_chosen_by;
  // The stages.
  StageClocks stages;
  std::optional<double> extract_busy_seconds;  // the reader workers' extraction
  PassStages::StageSplit stage_split;
  double checkpoint_seconds = 0;
  uint64_t rows_from_passes_in_flight = 0, passes_peak_bytes = 0;
  PassStages::MemorySample memory_at_peak;  // memory_peak_by_owner's instant
  // How passes were cut, extraction, the GPUs, the input's records (a whole run only).
  nlohmann::json pass_sizing;
  std::optional<ExtractTotals> extract;
  struct Gpu {
    GpuStepStats stats;
    uint64_t staged_bytes = 0;
    double seconds = 0;
    uint64_t examples = 0;  // this GPU trainer's
  };
  std::optional<Gpu> gpu;
  std::optional<RecordCounts> counts;
  // A resumed run.
  std::optional<std::string> resumed_from;
  std::vector<std::string> resume_warnings;
  // A distributed job.
  struct Ranks {
    int ranks = 0, rank = 0;
    uint64_t bytes_sent = 0, bytes_received = 0;
    double exchange_seconds = 0;
    std::vector<nlohmann::json> per_rank;  // rank 0: every rank's own figures
  };
  std::optional<Ranks> ranks;
  // The commit.
  std::optional<nlohmann::json> checkpoint;  // Checkpointer::Report of the final commit
  std::optional<std::string> digest, model_dir;
  std::optional<uint64_t> generation;
  std::optional<double> save_seconds;
  // Per-epoch validation (jobs/train_steps.h, RunEpochs): the epochs' held-back metrics,
  // the best epoch, whether the epochs stopped early.
  std::optional<nlohmann::json> validation;
  // The held-out evaluation.
  std::optional<MetricSummary> test;
  double eval_seconds = 0;
  std::optional<double> oracle_auc;
  // The finish.
  bool saved = false, dry_run = false;
  std::optional<double> total_seconds;
  std::optional<int64_t> peak_rss_bytes;
  std::optional<nlohmann::json> memory_peak_by_owner;
  std::optional<nlohmann::json> memory_box;  // train_steps::MemoryBoxJson

  nlohmann::json ToJson() const;
};

// The facts of a finished run, before the final checkpoint, save and evaluation add theirs.
struct TrainRunFacts {
  const JobConfig* job = nullptr;
  const PassStages* stages = nullptr;
  const StageRunResult* run = nullptr;
  const SparseTable* table = nullptr;
  const CtrModel* model = nullptr;
  std::string device;  // "cpu", or the GPUs' description
  TrainPosition position;
};
TrainReport ReportOfRun(const TrainRunFacts& facts);

// How passes were cut ("pass_sizing" in the train JSON): by "examples" or by "memory" (the
// key window, its limit and the bytes per row it assumes), and the passes' sizes.
nlohmann::json PassSizingJson(const PassReaderOptions& options, const PassSizingStats& stats,
                              uint64_t row_bytes);

// The GPU train stage's work ("gpu" in the train JSON): passes, minibatches, the compute
// queues' kernel launches, copies and host synchronizations per minibatch, and GPU 0's time per
// phase of a minibatch with its share of the run's wall time (`examples` trained in `seconds`).
nlohmann::json GpuJson(const GpuStepStats& s, double seconds, uint64_t examples);
// Logs that phase split beside the stage table.
void LogGpuPhases(const GpuStepStats& s, double seconds);

// Logs each stage's busy time as a share of the pass time (AIBox Table 1).
void LogStageTable(const StageClocks& clocks, double seconds, uint64_t passes, bool pipelined);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_TRAIN_REPORT_H_
