// Prediction over a stream of examples with a trained model: eval (metrics) and predict
// (one probability per input line).
#ifndef CTRBOX_PIPELINE_EVALUATOR_H_
#define CTRBOX_PIPELINE_EVALUATOR_H_

#include <cstdio>
#include <functional>
#include <vector>

#include "io/reader.h"
#include "metrics/metrics.h"
#include "model/ctr_model.h"
#include "table/sparse_table.h"
#include "util/thread_pool.h"

namespace ctrbox {

// Predicts every row of `chunk`: its keys are looked up in `table` (absent keys contribute
// nothing), minibatches of batch_size rows run on `pool`.
Status PredictChunk(const Batch& chunk, SparseTable& table, CtrModel* model, uint32_t batch_size,
                    ThreadPool* pool, std::vector<float>* predictions);

using ChunkFn = std::function<Status(const Batch& rows, const std::vector<float>& predictions)>;

// Predicts every example of `reader` in chunks of about chunk_rows rows, calling on_chunk (if
// set) for each in order, and returns the metrics over all of them.
StatusOr<MetricSummary> Evaluate(BatchReader* reader, SparseTable& table, CtrModel* model,
                                 uint32_t batch_size, uint64_t chunk_rows, ThreadPool* pool,
                                 const ChunkFn& on_chunk);

// Reads text records of data.format from data.paths (one path; "-" is standard input) and
// writes one probability per input line to `out`, in input order; a malformed line gets
// "nan" (and is counted and logged under the data.max_error_rate policy).
Status PredictLines(Env* env, const DataOptions& data, SparseTable& table, CtrModel* model,
                    uint32_t batch_size, ThreadPool* pool, std::FILE* out, RecordCounts* counts);

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_EVALUATOR_H_
