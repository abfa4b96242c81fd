#include "jobs/evaluator.h"

#include <fmt/format.h>

#include <algorithm>

#include "ckpt/model_dir.h"
#include "io/compressed_file.h"
#include "io/line_chunker.h"
#include "io/text_format.h"
#include "jobs/data.h"
#include "jobs/train_report.h"
#include "metrics/auc.h"
#include "pipeline/eval_chunks.h"
#include "pipeline/key_window.h"
#include "util/logging.h"
#include "util/sys.h"
#include "working/working_set.h"

namespace ctrbox {

namespace {

// A chunk whose keys' rows do not fit chunk_keys at once (a single prediction block under a
// small memory budget): its rows in parts of at most chunk_keys distinct keys (or one row),
// each pulled and built into the model's prediction rows and released, then predicted whole,
// so that the block is predicted as it is without a budget.
Status PredictInParts(const Batch& chunk, SparseTable& table, CtrModel* model, uint64_t chunk_keys,
                      ThreadPool* pool, float* predictions) {
  const size_t slots = chunk.schema.num_slots, n = chunk.rows();
  KeyWindow keys(1);
  for (size_t begin = 0; begin < n;) {
    size_t end = begin;
    for (; end < n; ++end) {
      const uint64_t* k = chunk.keys.data() + chunk.offsets[end * slots];
      const size_t count = chunk.offsets[(end + 1) * slots] - chunk.offsets[end * slots];
      if (end > begin && keys.DistinctWith(k, count) > chunk_keys) break;
      keys.Add(k, count);
    }
    Batch part;
    part.Reset(chunk.schema);
    part.AppendRows(chunk, begin, end);
    WorkingSet ws;
    BuildWorkingSet(part, part.rows(), nullptr, &ws);  // one minibatch
    RowBlock rows(table.layout());
    ASSIGN_OR_RETURN(PinnedRows pins,
                     table.Pull(ws.keys.data(), ws.keys.size(), /*accessor=*/nullptr, &rows, pool));
    model->PredictInputs(part, ws, ws.batches[0], rows, static_cast<uint32_t>(begin));
    keys.NextPass();
    begin = end;
  }
  model->PredictBuilt(static_cast<uint32_t>(n), pool, predictions);
  return Status::OK();
}

}  // namespace

Status PredictChunk(const Batch& input, SparseTable& table, CtrModel* model, uint32_t batch_size,
                    uint64_t chunk_keys, ThreadPool* pool, std::vector<float>* predictions) {
  // A model trained on hashed keys predicts from the same hashing.
  // A multi-table model's keys carry their tables (model.slot_dims) likewise.
  const KeyTables tables = model->options().KeyTableMap();
  const bool rewrite = model->options().hashing.enabled() || tables.enabled();
  Batch hashed;
  if (rewrite) {
    hashed = input;
    ModelKeys(model->options().hashing, tables, &hashed);
  }
  const Batch& chunk = rewrite ? hashed : input;
  predictions->resize(chunk.rows());
  // Minibatches of whole prediction blocks (a row's prediction does not depend on them).
  WorkingSet ws;
  BuildWorkingSet(chunk, CtrModel::PredictMinibatchRows(batch_size), pool, &ws);
  if (chunk_keys > 0 && ws.keys.size() > chunk_keys) {
    return PredictInParts(chunk, table, model, chunk_keys, pool, predictions->data());
  }
  RowBlock rows(table.layout());
  // Lookups: absent keys come back empty and are not inserted; the pins go with `pins`.
  ASSIGN_OR_RETURN(PinnedRows pins,
                   table.Pull(ws.keys.data(), ws.keys.size(), /*accessor=*/nullptr, &rows, pool));
  for (const Minibatch& mb : ws.batches) {
    model->Predict(chunk, ws, mb, rows, pool, predictions->data() + mb.row_begin);
  }
  return Status::OK();
}

StatusOr<MetricSummary> Evaluate(BatchReader* reader, SparseTable& table, CtrModel* model,
                                 uint32_t batch_size, uint64_t chunk_rows, uint64_t chunk_keys,
                                 ThreadPool* pool, const ChunkFn& on_chunk) {
  MetricAccumulator metrics;
  EvalChunks chunks(reader, chunk_rows, chunk_keys);
  Batch chunk;
  std::vector<float> predictions;
  for (;;) {
    RETURN_IF_ERROR(chunks.Next(&chunk));
    if (chunk.rows() == 0) break;
    RETURN_IF_ERROR(PredictChunk(chunk, table, model, batch_size, chunk_keys, pool, &predictions));
    for (size_t r = 0; r < chunk.rows(); ++r) metrics.Add(chunk.labels[r], predictions[r]);
    if (on_chunk) RETURN_IF_ERROR(on_chunk(chunk, predictions));
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
  text.slot_from = data.slot_from;
  text.schema = schema;
  text.labels_optional = true;
  text.max_line_bytes = data.max_line_bytes;
  text.key_slots = model->options().KeySlotMap();  // as the model's training data was keyed
  ASSIGN_OR_RETURN(auto raw, env->NewSequentialFile(data.paths[0]));
  ASSIGN_OR_RETURN(auto file, OpenDecompressed(std::move(raw)));
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
      RETURN_IF_ERROR(PredictChunk(parsed.batch, table, model, batch_size, 0, pool, &predictions));
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
        fmt::format_to(std::back_inserter(text_out), "{}\n", predictions[next_row++]);
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

StatusOr<EvalReport> RunEval(Env* env, const JobConfig& job_in) {
  RETURN_IF_ERROR(job_in.Validate());
  JobConfig job = job_in;
  ThreadPool pool(job.train.threads);
  Stopwatch clock;
  ASSIGN_OR_RETURN(LoadedModel lm, OpenModel(env, job.model_dir, job.StorageFor({}), &pool));
  const double load_seconds = clock.Seconds();
  // The model's shared slots key the data as they keyed its training data.
  job.data.key_slots = lm.manifest.spec.model.KeySlotMap();
  RETURN_IF_ERROR(AttachFeatures(env, &job));
  ASSIGN_OR_RETURN(EvalReport report, EvalLoadedModel(env, job, lm, &pool));
  report.load_seconds = load_seconds;
  return report;
}

namespace {

// Eval and predict read their data as the model's training data was read (the format and
// data.slot_from its MANIFEST records), unless the job sets them. Shards describe themselves,
// and a model of views reads through its graph.
void ReadAsTrained(const ModelManifest& m, const JobConfig& job, DataOptions* data) {
  const nlohmann::json& in = m.input;
  if (!in.is_object() || !in.contains("format") || in.value("generated", false)) return;
  DataFormat f;
  if (!ParseDataFormat(in["format"].get<std::string>(), &f) || f == DataFormat::kShards) return;
  if (!job.settings_given.contains("data.format") && data->format != f &&
      data->format != DataFormat::kShards) {
    LOG_INFO(
        "reading the data as {}, the format the model was trained on (--format chooses "
        "another)",
        DataFormatName(f));
    data->format = f;
  }
  SlotFrom s;
  if (!job.settings_given.contains("data.slot_from") && in.contains("slot_from") &&
      ParseSlotFrom(in["slot_from"].get<std::string>(), &s)) {
    data->slot_from = s;
  }
}

// "(read as libsvm; the model was trained on criteo files)" for a schema that differs.
std::string HowRead(const ModelManifest& m, const JobConfig& job, const DataOptions& data) {
  std::string s = fmt::format(" (read as {}{}", DataFormatName(data.format),
                              job.settings_given.contains("data.format") ? "" : ", the default");
  if (m.input.is_object() && m.input.contains("format")) {
    s += fmt::format("; the model was trained on {} input", m.input["format"].get<std::string>());
  }
  return s + ")";
}

}  // namespace

StatusOr<EvalReport> EvalLoadedModel(Env* env, const JobConfig& job, LoadedModel& lm,
                                     ThreadPool* pool) {
  Stopwatch clock;
  DataOptions data = job.data;
  if (job.features == nullptr) ReadAsTrained(lm.manifest, job, &data);
  data.key_slots = lm.manifest.spec.model.KeySlotMap();
  if (data.format != DataFormat::kShards) {
    data.num_slots = lm.manifest.spec.schema.num_slots;
    data.num_dense = lm.manifest.spec.schema.num_dense;
  }
  ASSIGN_OR_RETURN(auto reader, OpenData(env, data, job.generated, true));
  if (!(reader->schema() == lm.model->schema())) {
    return InvalidArgumentError(fmt::format(
        "the data has {} slots and {} dense values but the model was trained on {} and {}{}",
        reader->schema().num_slots, reader->schema().num_dense, lm.model->schema().num_slots,
        lm.model->schema().num_dense, HowRead(lm.manifest, job, data)));
  }
  clock.Reset();
  // Besides the streaming (bucketed) AUC, the exact AUC over the first kExactAucRows examples.
  constexpr size_t kExactAucRows = size_t{1} << 24;
  std::vector<float> labels;
  std::vector<double> scores;
  ChunkFn keep = [&](const Batch& rows, const std::vector<float>& p) {
    for (size_t r = 0; r < rows.rows() && labels.size() < kExactAucRows; ++r) {
      labels.push_back(rows.labels[r]);
      scores.push_back(p[r]);
    }
    return Status::OK();
  };
  ASSIGN_OR_RETURN(MetricSummary s,
                   Evaluate(reader.get(), *lm.table, lm.model.get(), job.train.batch_size,
                            job.pipeline.pass_examples, job.EvalChunkKeys(), pool, keep));
  const double seconds = clock.Seconds();
  if (s.examples == 0) {
    const RecordCounts c = reader->counts();
    return FailedPreconditionError(fmt::format(
        "no examples to evaluate in the input ({} records malformed and skipped): no metric "
        "is defined",
        c.bad_total()));
  }
  // The exact AUC is undefined as the streaming one is, over its own (first) examples.
  const size_t positives = static_cast<size_t>(
      std::count_if(labels.begin(), labels.end(), [](float y) { return y > 0.5f; }));
  const bool exact_defined = positives > 0 && positives < labels.size();
  EvalReport report;
  report.metrics = s;
  report.exact_auc = exact_defined ? std::optional<double>(ExactAuc(labels, scores)) : std::nullopt;
  report.exact_auc_examples = labels.size();
  report.seconds = seconds;
  report.model_dir = job.model_dir;
  report.digest = lm.manifest.digest;
  report.peak_rss_bytes = PeakRssBytes();
  report.counts = reader->counts();
  return report;
}

nlohmann::json EvalReport::ToJson() const {
  const MetricSummary& s = metrics;
  nlohmann::json j = {
      {"command", "eval"},
      {"examples", s.examples},
      {"auc", s.AucJson()},
      {"auc_exact", exact_auc ? nlohmann::json(*exact_auc) : nlohmann::json()},
      {"auc_exact_examples", exact_auc_examples},
      // Two AUCs: said once, in the report itself.
      {"auc_note",
       "auc: streaming, from score buckets, as train reports test_auc (it may differ from the "
       "exact value in the 5th or 6th digit); auc_exact: exact, over the first "
       "auc_exact_examples examples"},
      {"logloss", s.logloss},
      {"copc", s.copc},
      {"ctr", s.ctr},
      {"seconds", seconds},
      {"examples_per_s", s.examples / std::max(seconds, 1e-9)},
      {"model_dir", model_dir},
      {"digest", digest},
      {"peak_rss_bytes", peak_rss_bytes}};
  if (s.auc_undefined) j["auc_undefined"] = s.auc_undefined;
  if (load_seconds) j["load_seconds"] = *load_seconds;
  j.update(CountsJson(counts));
  return j;
}

Status PredictThroughGraph(Env* env, JobConfig job, LoadedModel& lm, ThreadPool* pool,
                           const RowScoresFn& on_rows) {
  if (job.id_column.empty()) {
    return InvalidArgumentError(
        "predict through a feature graph needs --id-column COLUMN (data.id_column): the graph "
        "can drop rows (filter, dedupe, bad rows), so each probability is written beside its "
        "row's id, `id<TAB>probability`");
  }
  job.data.key_slots = lm.manifest.spec.model.KeySlotMap();  // as the model's data was keyed
  if (job.data.paths.empty() && job.data.command.empty()) job.data.paths = {"-"};
  RETURN_IF_ERROR(AttachFeatures(env, &job));
  std::shared_ptr<Extractor> x = job.extractor;
  if (!(x->schema() == lm.model->schema())) {
    return InvalidArgumentError(fmt::format(
        "the graph makes {} slots and {} dense values but the model was trained on {} and {}",
        x->schema().num_slots, x->schema().num_dense, lm.model->schema().num_slots,
        lm.model->schema().num_dense));
  }
  // In input order, one chunk at a time: each row's id stays beside its probability.
  ASSIGN_OR_RETURN(auto source, OpenTextChunks(env, job.data));
  BadInputTracker tracker(job.data.bad_input);
  auto in_order = Extractor::InOrderStep(x);
  std::vector<float> p;
  while (true) {
    TextChunk chunk;
    bool eof = false;
    RETURN_IF_ERROR(source->Next(&chunk, &eof));
    if (eof) break;
    ChunkParseResult r;
    x->ExtractChunk(chunk, &r);
    RETURN_IF_ERROR(r.status);
    RETURN_IF_ERROR(tracker.Add(r.counts, r.samples));
    if (in_order) RETURN_IF_ERROR(in_order(&r));
    if (r.batch.rows() == 0) continue;
    if (r.row_ids.size() != r.batch.rows()) {
      return InternalError(
          fmt::format("predict: {} ids for {} rows", r.row_ids.size(), r.batch.rows()));
    }
    RETURN_IF_ERROR(
        PredictChunk(r.batch, *lm.table, lm.model.get(), job.train.batch_size, 0, pool, &p));
    RETURN_IF_ERROR(on_rows(r.row_ids, p));
  }
  RETURN_IF_ERROR(tracker.Finish());
  const ExtractTotals t = x->totals();
  LOG_INFO(
      "predict: {} rows scored of {} read; dropped: {} by the filters, {} duplicates, {} bad "
      "(the graph), {} malformed lines",
      t.rows_out, t.rows_in, t.filtered, t.duplicates, t.bad_rows,
      tracker.counts().bad_total() - t.bad_rows);
  return Status::OK();
}

Status RunPredict(Env* env, const JobConfig& job, std::FILE* out) {
  RETURN_IF_ERROR(job.Validate());
  ThreadPool pool(job.train.threads);
  ASSIGN_OR_RETURN(LoadedModel lm, OpenModel(env, job.model_dir, job.StorageFor({}), &pool));
  // Each row's probability from that row alone (the server's, bit for bit: docs/serve.md).
  ScopedRowwisePredictions rowwise(lm.model.get());
  if (job.features != nullptr) {
    std::string text;
    RETURN_IF_ERROR(PredictThroughGraph(
        env, job, lm, &pool,
        [&](const std::vector<std::string>& ids, const std::vector<float>& p) -> Status {
          text.clear();
          for (size_t i = 0; i < p.size(); ++i) {
            fmt::format_to(std::back_inserter(text), "{}\t{}\n", ids[i], p[i]);
          }
          if (std::fwrite(text.data(), 1, text.size(), out) != text.size()) {
            return IOError("predict: writing the scores failed");
          }
          return Status::OK();
        }));
    std::fflush(out);
    return Status::OK();
  }
  if (!job.id_column.empty()) {
    return InvalidArgumentError(
        "--id-column is for predict through a feature graph (-c job.yaml with features:); "
        "without one, each input line gets its probability on the same output line");
  }
  DataOptions data = job.data;
  if (data.paths.empty()) data.paths = {"-"};
  ReadAsTrained(lm.manifest, job, &data);
  data.num_slots = lm.manifest.spec.schema.num_slots;
  data.num_dense = lm.manifest.spec.schema.num_dense;
  if (data.format != DataFormat::kShards) {
    const Schema schema =
        SchemaForFormat(data.format, data.num_slots, data.num_dense, data.slot_from);
    if (!(schema == lm.model->schema())) {
      return InvalidArgumentError(fmt::format(
          "the input has {} slots and {} dense values but the model was trained on {} and {}{}",
          schema.num_slots, schema.num_dense, lm.model->schema().num_slots,
          lm.model->schema().num_dense, HowRead(lm.manifest, job, data)));
    }
  }
  RecordCounts counts;
  return PredictLines(env, data, *lm.table, lm.model.get(), job.train.batch_size, &pool, out,
                      &counts);
}

}  // namespace ctrbox
