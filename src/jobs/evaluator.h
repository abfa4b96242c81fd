// Prediction with a trained model over a stream of examples: eval (metrics over labelled
// data) and predict (one probability per input line) — the jobs behind `ctrbox eval` and
// `ctrbox predict`, and the held-out evaluation at the end of a train job.
#ifndef CTRBOX_JOBS_EVALUATOR_H_
#define CTRBOX_JOBS_EVALUATOR_H_

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/model_dir.h"
#include "io/bad_input.h"
#include "io/reader.h"
#include "jobs/job.h"
#include "metrics/metrics.h"
#include "model/ctr_model.h"
#include "table/sparse_table.h"
#include "util/env.h"
#include "util/thread_pool.h"

namespace ctrbox {

// The eval job's report; ToJson is the JSON object `ctrbox eval` prints.
struct EvalReport {
  MetricSummary metrics;  // streaming AUC (as train's test_auc), logloss, COPC, CTR
  // The exact AUC over the first exact_auc_examples examples (unset: undefined, one class).
  std::optional<double> exact_auc;
  uint64_t exact_auc_examples = 0;
  double seconds = 0;                  // the evaluation's
  std::optional<double> load_seconds;  // the model's load (RunEval)
  std::string model_dir, digest;
  int64_t peak_rss_bytes = 0;
  RecordCounts counts;  // the input's records

  nlohmann::json ToJson() const;
};

// Evaluates the model in job.model_dir on job.data (or the generated test rows); returns the
// eval report: streaming and exact AUC, logloss, COPC, record counts.
StatusOr<EvalReport> RunEval(Env* env, const JobConfig& job);

// The same report for a model already open (`lm`, with job.model_dir naming it), without
// load_seconds: eval from a process that keeps the model (the Python module's Model.eval).
StatusOr<EvalReport> EvalLoadedModel(Env* env, const JobConfig& job, LoadedModel& lm,
                                     ThreadPool* pool);

// Writes one probability per line of job.data (one text file, or standard input when it
// names none) to `out` with the model in job.model_dir; see PredictLines. With a feature
// graph (job.features), `id<TAB>probability` per row the graph keeps (job.id_column).
Status RunPredict(Env* env, const JobConfig& job, std::FILE* out);

// Scores the raw views of job.data through job.features with the open model `lm`: the rows
// the graph keeps, chunk by chunk in input order, each with its job.id_column value; logs the
// rows each reason dropped. InvalidArgument without job.id_column.
using RowScoresFn =
    std::function<Status(const std::vector<std::string>& ids, const std::vector<float>& p)>;
Status PredictThroughGraph(Env* env, JobConfig job, LoadedModel& lm, ThreadPool* pool,
                           const RowScoresFn& on_rows);

// Predicts every row of `chunk`: its keys (hashed first when the model was trained with
// features.hashing) are looked up in `table` (absent keys contribute nothing), minibatches
// of batch_size rows (rounded up to whole prediction blocks) run on `pool`. With chunk_keys
// > 0, a chunk of more distinct keys is pulled in parts of at most that many (for a single
// prediction block under a small memory budget) and predicted the same.
Status PredictChunk(const Batch& chunk, SparseTable& table, CtrModel* model, uint32_t batch_size,
                    uint64_t chunk_keys, ThreadPool* pool, std::vector<float>* predictions);

using ChunkFn = std::function<Status(const Batch& rows, const std::vector<float>& predictions)>;

// Predicts every example of `reader` in chunks of about chunk_rows rows, and, when chunk_keys
// is not 0, of at most chunk_keys distinct keys, so that a chunk's rows fit the memory budget
// (pipeline/eval_chunks.h: whole prediction blocks, so that every row's prediction is the
// same whatever batch_size and the limits). Calls on_chunk (if set) for each in order, and
// returns the metrics over all of them.
StatusOr<MetricSummary> Evaluate(BatchReader* reader, SparseTable& table, CtrModel* model,
                                 uint32_t batch_size, uint64_t chunk_rows, uint64_t chunk_keys,
                                 ThreadPool* pool, const ChunkFn& on_chunk);

// Reads text records of data.format from data.paths (one path; "-" is standard input) and
// writes one probability per input line to `out`, in input order; a malformed line gets
// "nan" (and is counted and logged under the data.max_error_rate policy).
Status PredictLines(Env* env, const DataOptions& data, SparseTable& table, CtrModel* model,
                    uint32_t batch_size, ThreadPool* pool, std::FILE* out, RecordCounts* counts);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_EVALUATOR_H_
