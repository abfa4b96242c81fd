#include "pipeline/evaluator.h"

#include <fmt/format.h>

#include <algorithm>

#include "io/line_chunker.h"
#include "io/text_format.h"
#include "working/working_set.h"

namespace ctrbox {

Status PredictChunk(const Batch& chunk, SparseTable& table, CtrModel* model, uint32_t batch_size,
                    ThreadPool* pool, std::vector<float>* predictions) {
  WorkingSet ws;
  BuildWorkingSet(chunk, batch_size, pool, &ws);
  RowBlock rows(table.layout());
  // Lookups: absent keys come back empty and are not inserted; the pins go with `pins`.
  ASSIGN_OR_RETURN(PinnedRows pins,
                   table.Pull(ws.keys.data(), ws.keys.size(), /*accessor=*/nullptr, &rows, pool));
  predictions->resize(chunk.rows());
  for (const Minibatch& mb : ws.batches) {
    model->Predict(chunk, ws, mb, rows, pool, predictions->data() + mb.row_begin);
  }
  return Status::OK();
}

StatusOr<MetricSummary> Evaluate(BatchReader* reader, SparseTable& table, CtrModel* model,
                                 uint32_t batch_size, uint64_t chunk_rows, ThreadPool* pool,
                                 const ChunkFn& on_chunk) {
  MetricAccumulator metrics;
  Batch chunk, block;
  chunk.Reset(reader->schema());
  std::vector<float> predictions;
  bool eof = false;
  while (!eof) {
    RETURN_IF_ERROR(reader->Next(&block, &eof));
    if (!eof) chunk.AppendRows(block, 0, block.rows());
    if (chunk.rows() == 0 || (!eof && chunk.rows() < chunk_rows)) continue;
    RETURN_IF_ERROR(PredictChunk(chunk, table, model, batch_size, pool, &predictions));
    for (size_t r = 0; r < chunk.rows(); ++r) metrics.Add(chunk.labels[r], predictions[r]);
    if (on_chunk) RETURN_IF_ERROR(on_chunk(chunk, predictions));
    chunk.Reset(reader->schema());
  }
  return metrics.Summary();
}

Status PredictLines(Env* env, const DataOptions& data, SparseTable& table, CtrModel* model,
                    uint32_t batch_size, ThreadPool* pool, std::FILE* out, RecordCounts* counts) {
  if (data.format == DataFormat::kShards) {
    return InvalidArgumentError("predict reads text records; for shards use eval");
  }
  if (data.paths.size() != 1) return InvalidArgumentError("predict reads one input (a file or -)");
  ASSIGN_OR_RETURN(Schema schema, ResolveSchema(env, data));
  if (!(schema == model->schema())) {
    return InvalidArgumentError(fmt::format(
        "the input has {} slots and {} dense values but the model was trained on {} and {}",
        schema.num_slots, schema.num_dense, model->schema().num_slots, model->schema().num_dense));
  }
  TextFormatOptions text;
  text.format = data.format;
  text.schema = schema;
  text.labels_optional = true;
  text.max_line_bytes = data.max_line_bytes;
  ASSIGN_OR_RETURN(auto file, env->NewSequentialFile(data.paths[0]));
  LineChunker chunker(std::move(file), data.chunk_bytes, data.max_line_bytes);
  BadInputTracker tracker(data.bad_input);
  TextChunk chunk;
  ChunkParseResult parsed;
  std::vector<float> predictions;
  std::string line;
  while (true) {
    bool eof = false;
    RETURN_IF_ERROR(chunker.Next(&chunk, &eof));
    if (eof) break;
    ParseTextChunk(text, chunk, &parsed);
    RETURN_IF_ERROR(tracker.Add(parsed.counts, parsed.samples));
    if (parsed.batch.rows() > 0) {
      RETURN_IF_ERROR(PredictChunk(parsed.batch, table, model, batch_size, pool, &predictions));
    }
    const uint64_t lines =
        static_cast<uint64_t>(std::count(chunk.data.begin(), chunk.data.end(), '\n')) +
        chunk.overlong_lines.size();
    size_t next_bad = 0, next_row = 0;
    std::string text_out;
    for (uint64_t l = chunk.first_line; l < chunk.first_line + lines; ++l) {
      if (next_bad < parsed.bad_lines.size() && parsed.bad_lines[next_bad] == l) {
        ++next_bad;
        text_out += "nan\n";
      } else {
        fmt::format_to(std::back_inserter(text_out), "{:.7g}\n", predictions[next_row++]);
      }
    }
    if (std::fwrite(text_out.data(), 1, text_out.size(), out) != text_out.size()) {
      return IOError("writing predictions failed");
    }
  }
  std::fflush(out);
  if (counts) *counts = tracker.counts();
  return tracker.Finish();
}

}  // namespace ctrbox
