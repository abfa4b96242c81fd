// The train job's reports, made here and only here from plain structs: the pass lines and
// the final "stages" line of the metrics file, the JSON object `ctrbox train` prints, and
// AIBox Table 1 in the log (docs/pipeline.md, "Stage report").
#ifndef CTRBOX_PIPELINE_TRAIN_REPORT_H_
#define CTRBOX_PIPELINE_TRAIN_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/checkpoint.h"
#include "feature/extractor.h"
#include "gpu/trainer.h"
#include "io/bad_input.h"
#include "model/ctr_model.h"
#include "pipeline/job.h"
#include "pipeline/pass.h"
#include "pipeline/pass_reader.h"
#include "pipeline/stage_runner.h"
#include "pipeline/stages.h"
#include "table/sparse_table.h"

namespace ctrbox {

// {"records_good", "records_malformed", "malformed": {kind: count}}.
nlohmann::json CountsJson(const RecordCounts& counts);
// The table's storage counters ("storage" in the train report).
nlohmann::json StorageJson(const StorageStats& s);
// The counters that change per pass, as differences, with the current byte figures.
nlohmann::json StorageDeltaJson(const StorageStats& before, const StorageStats& after);
// {"read": {"busy_seconds", "stalled_seconds", "idle_seconds"}, "pull": ..., ...}.
nlohmann::json StagesJson(const StageClocks& clocks);
// The extract stage's totals (docs/features.md): rows in and out, filtered, duplicates, bad,
// worker seconds by part, join hit rates, the side views held.
nlohmann::json ExtractJson(const ExtractTotals& x);
// Its line beside the stage table: busy worker time against the run's wall time.
void LogExtract(const ExtractTotals& x, double seconds, int reader_threads);
// A committed checkpoint in a pass line.
nlohmann::json CheckpointJson(const CheckpointManifest& m, double seconds);

// The metrics line of a pushed pass. `examples`: the run's examples so far; `checkpoint`:
// null, or CheckpointJson of the checkpoint committed after it.
nlohmann::json PassRecord(const Pass& pass, uint64_t examples, uint64_t table_keys,
                          double pass_seconds, const nlohmann::json& checkpoint,
                          nlohmann::json storage_delta);

// The report of a finished run, before the final checkpoint, save and evaluation add theirs.
struct TrainRunFacts {
  const JobConfig* job = nullptr;
  const PassStages* stages = nullptr;
  const StageRunResult* run = nullptr;
  const SparseTable* table = nullptr;
  const CtrModel* model = nullptr;
  std::string device;  // "cpu", or the GPUs' description
  TrainPosition position;
};
nlohmann::json TrainReport(const TrainRunFacts& facts);

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

#endif  // CTRBOX_PIPELINE_TRAIN_REPORT_H_
