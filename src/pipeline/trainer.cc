#include "pipeline/trainer.h"

#include <fmt/format.h>

#include <thread>

#include "ckpt/model_dir.h"
#include "io/synth.h"
#include "model/blas.h"
#include "pipeline/evaluator.h"
#include "table/ssd_store.h"
#include "table/tiered_table.h"
#include "util/bounded_queue.h"
#include "util/logging.h"
#include "util/sys.h"
#include "working/working_set.h"

namespace ctrbox {
namespace {

struct Pass {
  uint64_t index = 0;
  Batch examples;
  WorkingSet ws;
  double read_seconds = 0, prepare_seconds = 0;
};

using ReaderFactory = std::function<StatusOr<std::unique_ptr<BatchReader>>()>;

// Reads the epochs' examples on its own thread and hands out prepared passes.
class PassProducer {
 public:
  PassProducer(ReaderFactory open, const JobConfig& job)
      : open_(std::move(open)), job_(job), queue_(job.pipeline.queue_depth) {}
  ~PassProducer() { Stop().IgnoreError(); }  // errors were reported by the explicit Stop()

  void Start() {
    thread_ = std::thread([this] {
      status_ = Run();
      queue_.Close();
    });
  }
  bool Next(std::unique_ptr<Pass>* pass) { return queue_.Pop(pass); }
  // Stops reading (if still running) and returns the first error, if any.
  Status Stop() {
    queue_.Close();
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  const RecordCounts& counts() const { return counts_; }  // valid after Stop()
  Schema schema() const { return schema_; }

  // Opens the first reader up front so the schema is known before training starts.
  Status Open() {
    ASSIGN_OR_RETURN(reader_, open_());
    schema_ = reader_->schema();
    return Status::OK();
  }

 private:
  Status Run() {
    uint64_t index = 0;
    for (uint32_t epoch = 0; epoch < job_.train.epochs; ++epoch) {
      if (!reader_) {
        ASSIGN_OR_RETURN(reader_, open_());
      }
      auto pass = std::make_unique<Pass>();
      pass->examples.Reset(schema_);
      Stopwatch read_clock;
      Batch block;
      bool eof = false;
      while (!eof) {
        RETURN_IF_ERROR(reader_->Next(&block, &eof));
        size_t begin = 0;
        while (!eof && begin < block.rows()) {
          size_t take = std::min<size_t>(block.rows() - begin,
                                         job_.pipeline.pass_examples - pass->examples.rows());
          pass->examples.AppendRows(block, begin, begin + take);
          begin += take;
          if (pass->examples.rows() == job_.pipeline.pass_examples) {
            pass->read_seconds = read_clock.Seconds();
            if (!Emit(std::move(pass), index++)) return Status::OK();
            pass = std::make_unique<Pass>();
            pass->examples.Reset(schema_);
            read_clock.Reset();
          }
        }
      }
      if (pass->examples.rows() > 0) {
        pass->read_seconds = read_clock.Seconds();
        if (!Emit(std::move(pass), index++)) return Status::OK();
      }
      counts_.Add(reader_->counts());
      reader_.reset();
    }
    return Status::OK();
  }

  bool Emit(std::unique_ptr<Pass> pass, uint64_t index) {
    Stopwatch clock;
    pass->index = index;
    BuildWorkingSet(pass->examples, job_.train.batch_size, nullptr, &pass->ws);
    pass->prepare_seconds = clock.Seconds();
    return queue_.Push(std::move(pass));
  }

  ReaderFactory open_;
  const JobConfig& job_;
  BoundedQueue<std::unique_ptr<Pass>> queue_;
  std::thread thread_;
  std::unique_ptr<BatchReader> reader_;
  Schema schema_;
  Status status_;
  RecordCounts counts_;
};

nlohmann::json CountsJson(const RecordCounts& c) {
  nlohmann::json bad = nlohmann::json::object();
  for (int k = 0; k < kNumBadKinds; ++k)
    bad[std::string(BadKindName(static_cast<BadKind>(k)))] = c.bad[k];
  return {{"records_good", c.good}, {"records_malformed", c.bad_total()}, {"malformed", bad}};
}

StatusOr<std::unique_ptr<BatchReader>> OpenData(Env* env, const DataOptions& data,
                                                const GeneratedData& gen, bool test) {
  if (!data.paths.empty()) return OpenReader(env, data);
  SynthOptions o;
  o.format = gen.layout;
  o.seed = test ? gen.seed + 1 : gen.seed;
  o.vocab_scale = gen.vocab_scale;
  o.zipf = gen.zipf;
  return NewSynthReader(o, test ? gen.test_rows : gen.rows, data.threads);
}

// The planted model's AUC on the generated test rows: the best any model can reach.
double OracleAuc(const GeneratedData& gen) {
  SynthOptions o;
  o.format = gen.layout;
  o.seed = gen.seed + 1;
  o.vocab_scale = gen.vocab_scale;
  o.zipf = gen.zipf;
  SynthGenerator g(o);
  MetricAccumulator m;
  Batch b;
  std::vector<double> probs;
  for (uint64_t r = 0; r < gen.test_rows; r += 65536) {
    probs.clear();
    g.GenerateBatch(r, std::min(gen.test_rows, r + 65536), &b, &probs);
    for (size_t i = 0; i < b.rows(); ++i) m.Add(b.labels[i], probs[i]);
  }
  return m.Summary().auc;
}

// The storage counters that change per pass, as differences between two reports.
nlohmann::json StorageDelta(const nlohmann::json& before, const nlohmann::json& after) {
  nlohmann::json d;
  for (const char* k :
       {"pulled_keys", "hits", "loaded_from_ssd", "new_keys", "bloom_prunes", "ssd_bytes_read",
        "ssd_bytes_written", "evicted_dirty", "evicted_clean", "compactions"}) {
    if (after.contains(k)) d[k] = after[k].get<uint64_t>() - before.value(k, uint64_t{0});
  }
  const uint64_t hits = d.value("hits", uint64_t{0}),
                 loaded = d.value("loaded_from_ssd", uint64_t{0});
  d["hit_rate"] =
      hits + loaded ? static_cast<double>(hits) / static_cast<double>(hits + loaded) : 1.0;
  for (const char* k : {"memory_bytes", "file_bytes", "live_bytes", "keys_on_disk"}) {
    if (after.contains(k)) d[k] = after[k];
  }
  return d;
}

TieredOptions StorageFor(const JobConfig& job, const ValueLayout& layout) {
  TieredOptions o = job.storage;
  o.layout = layout;
  o.shard_bits = job.table_shard_bits;
  return o;
}

}  // namespace

StatusOr<nlohmann::json> RunTrain(Env* env, JobConfig job, ProgressSink* sink) {
  Stopwatch total_clock;
  const bool generated = job.data.paths.empty();
  PassProducer producer([&] { return OpenData(env, job.data, job.generated, false); }, job);
  RETURN_IF_ERROR(producer.Open());
  job.spec.schema = producer.schema();
  job.spec.table.seed = job.train.seed;
  ThreadPool pool(job.train.threads);

  // The model: continue the one in model_dir, or start a new one.
  std::unique_ptr<CtrModel> model;
  std::unique_ptr<SparseTable> table;
  uint64_t trained_before = 0;
  if (!job.model_dir.empty() && !job.fresh && ModelExists(env, job.model_dir)) {
    ASSIGN_OR_RETURN(LoadedModel lm, OpenModel(env, job.model_dir, StorageFor(job, {}), &pool));
    std::string diff = lm.manifest.spec.FirstIncompatibility(job.spec);
    if (!diff.empty()) {
      return InvalidArgumentError(fmt::format(
          "the model in {} was trained with a different {} than this job sets; use --fresh to "
          "start a new model there",
          job.model_dir, diff));
    }
    diff = lm.manifest.spec.FirstDifference(job.spec);
    if (!diff.empty()) LOG_INFO("continuing with this job's {} (and other hyperparameters)", diff);
    LOG_INFO("continuing training of the model in {} ({} keys, {} examples trained)", job.model_dir,
             lm.manifest.keys, lm.manifest.trained_examples);
    trained_before = lm.manifest.trained_examples;
    model = std::move(lm.model);
    table = std::move(lm.table);
  } else {
    model = std::make_unique<CtrModel>(job.spec.schema, job.spec.model, job.spec.sparse_optimizer,
                                       job.spec.dense_optimizer, job.train.seed);
    ASSIGN_OR_RETURN(table, TieredTable::Open(env, StorageFor(job, model->value_layout())));
  }
  const CtrAccessor accessor(model->value_layout(), job.spec.table);
  std::string metrics_path = job.train.metrics_path;
  if (metrics_path.empty() && !job.model_dir.empty())
    metrics_path = JoinPath(job.model_dir, "metrics.jsonl");
  ASSIGN_OR_RETURN(auto metrics_log, MetricsLog::Open(env, metrics_path));

  // Train pass by pass.
  Stopwatch train_clock;
  producer.Start();
  MetricAccumulator total, pass_metrics;
  RowBlock rows(model->value_layout());
  std::vector<float> predictions(job.train.batch_size);
  uint64_t examples = 0, passes = 0, shrunk = 0, created = 0;
  double wait_s = 0, prepare_s = 0, read_s = 0, pull_s = 0, step_s = 0, push_s = 0, shrink_s = 0;
  Stopwatch progress_clock;
  nlohmann::json storage_before = table->StorageReport();
  while (true) {
    Stopwatch clock;
    std::unique_ptr<Pass> pass;
    if (!producer.Next(&pass)) break;
    wait_s += clock.Seconds();
    prepare_s += pass->prepare_seconds;
    read_s += pass->read_seconds;
    Stopwatch pass_clock;
    clock.Reset();
    ASSIGN_OR_RETURN(PinnedRows pins, table->Pull(pass->ws.keys.data(), pass->ws.keys.size(),
                                                  &accessor, &rows, &pool));
    const double pull = clock.Seconds();
    clock.Reset();
    pass_metrics.Reset();
    for (const Minibatch& mb : pass->ws.batches) {
      StepStats st = model->TrainMinibatch(pass->examples, pass->ws, mb, &rows, accessor, &pool,
                                           predictions.data());
      created += st.embeddings_created;
      for (uint32_t r = 0; r < mb.rows(); ++r) {
        const float y = pass->examples.labels[mb.row_begin + r];
        pass_metrics.Add(y, predictions[r]);
        total.Add(y, predictions[r]);
      }
      examples += mb.rows();
      if (sink && progress_clock.Seconds() >= job.train.progress_seconds) {
        progress_clock.Reset();
        const double s = train_clock.Seconds();
        sink->OnProgress(TrainProgress{examples, s, examples / s, total.Summary()});
      }
    }
    const double step = clock.Seconds();
    clock.Reset();
    RETURN_IF_ERROR(table->Push(&pins, rows, &pool));
    const double push = clock.Seconds();
    pull_s += pull;
    step_s += step;
    push_s += push;
    ++passes;
    if (job.train.shrink_every_passes > 0 && passes % job.train.shrink_every_passes == 0) {
      clock.Reset();
      ASSIGN_OR_RETURN(uint64_t deleted, table->Shrink(accessor, &pool));
      shrunk += deleted;
      shrink_s += clock.Seconds();
    }
    const MetricSummary ps = pass_metrics.Summary();
    const double pass_seconds = pass_clock.Seconds();
    nlohmann::json record = {{"event", "pass"},
                             {"pass", pass->index},
                             {"examples", examples},
                             {"pass_examples", ps.examples},
                             {"auc", ps.auc},
                             {"logloss", ps.logloss},
                             {"copc", ps.copc},
                             {"working_set_keys", pass->ws.keys.size()},
                             {"table_keys", table->Stats().keys},
                             {"seconds", pass_seconds},
                             {"examples_per_s", ps.examples / std::max(pass_seconds, 1e-9)},
                             {"pull_seconds", pull},
                             {"train_seconds", step},
                             {"push_seconds", push}};
    nlohmann::json storage_now = table->StorageReport();
    record["storage"] = StorageDelta(storage_before, storage_now);
    storage_before = std::move(storage_now);
    RETURN_IF_ERROR(metrics_log->Write(record));
    if (sink) sink->OnPass(record);
  }
  RETURN_IF_ERROR(producer.Stop());  // a read error or too many malformed records: no commit
  const double train_seconds = train_clock.Seconds();
  if (sink) sink->OnDone();

  const MetricSummary summary = total.Summary();
  const TableStats ts = table->Stats();
  nlohmann::json report = {
      {"command", "train"},
      {"examples", examples},
      {"seconds", train_seconds},
      {"examples_per_s", examples / std::max(train_seconds, 1e-9)},
      {"auc", summary.auc},
      {"logloss", summary.logloss},
      {"copc", summary.copc},
      {"passes", passes},
      {"epochs", job.train.epochs},
      {"threads", job.train.threads},
      {"batch_size", job.train.batch_size},
      {"keys", ts.keys},
      {"keys_with_embedding", ts.keys_with_emb},
      {"embeddings_created", created},
      {"keys_shrunk", shrunk},
      {"bytes_live", ts.value_bytes},
      {"table_memory_bytes", ts.memory_bytes},
      {"keys_in_memory", ts.keys_in_memory},
      {"keys_on_disk", ts.keys_on_disk},
      {"storage", table->StorageReport()},
      {"table_bytes_per_key", ts.keys ? double(ts.memory_bytes) / ts.keys : 0.0},
      {"value_bytes_per_key", ts.keys ? double(ts.value_bytes) / ts.keys : 0.0},
      {"dense_params", model->dense_params().size()},
      {"input", generated ? "generated" : "files"},
      {"blas_core", blas::CoreName()},
      {"deterministic", job.train.deterministic},
      {"stages",
       {{"read_seconds", read_s},
        {"prepare_seconds", prepare_s},
        {"wait_seconds", wait_s},
        {"pull_seconds", pull_s},
        {"train_seconds", step_s},
        {"push_seconds", push_s},
        {"shrink_seconds", shrink_s}}},
  };
  report.update(CountsJson(producer.counts()));

  if (!job.model_dir.empty()) {
    Stopwatch clock;
    ASSIGN_OR_RETURN(ModelManifest m, SaveModel(env, job.model_dir, job.spec, *table, *model,
                                                trained_before + examples, &pool));
    report["model_dir"] = job.model_dir;
    report["generation"] = m.generation;
    report["digest"] = m.digest;
    report["save_seconds"] = clock.Seconds();
  } else {
    ASSIGN_OR_RETURN(report["digest"], ModelDigest(*table, *model, &pool));
  }

  // Held-out evaluation: --eval-data, or the generated test rows.
  if (generated || !job.eval_paths.empty()) {
    Stopwatch clock;
    DataOptions eval = job.data;
    eval.paths = job.eval_paths;
    ASSIGN_OR_RETURN(auto reader, OpenData(env, eval, job.generated, true));
    ASSIGN_OR_RETURN(MetricSummary t,
                     Evaluate(reader.get(), *table, model.get(), job.train.batch_size,
                              job.pipeline.pass_examples, &pool, nullptr));
    report["test_examples"] = t.examples;
    report["test_auc"] = t.auc;
    report["test_logloss"] = t.logloss;
    report["test_copc"] = t.copc;
    report["eval_seconds"] = clock.Seconds();
    if (generated) report["oracle_auc"] = OracleAuc(job.generated);
    RETURN_IF_ERROR(metrics_log->Write({{"event", "test"},
                                        {"examples", t.examples},
                                        {"auc", t.auc},
                                        {"logloss", t.logloss},
                                        {"copc", t.copc}}));
  }
  RETURN_IF_ERROR(metrics_log->Close());
  // The SSD files are this job's scratch space (the model is in the model directory) unless
  // storage.keep_store asks for a cleanly closed store to inspect or reopen.
  if (job.storage.keep_store) {
    RETURN_IF_ERROR(table->Close());
    table.reset();
  } else {
    table.reset();
    if (!job.storage.ssd.dir.empty())
      RETURN_IF_ERROR(SsdStore::RemoveFiles(env, job.storage.ssd.dir));
  }
  report["total_seconds"] = total_clock.Seconds();
  report["peak_rss_bytes"] = PeakRssBytes();
  return report;
}

StatusOr<nlohmann::json> RunEval(Env* env, const JobConfig& job) {
  ThreadPool pool(job.train.threads);
  Stopwatch clock;
  ASSIGN_OR_RETURN(LoadedModel lm, OpenModel(env, job.model_dir, StorageFor(job, {}), &pool));
  const double load_seconds = clock.Seconds();
  DataOptions data = job.data;
  if (data.format != DataFormat::kShards) {
    data.num_slots = lm.manifest.spec.schema.num_slots;
    data.num_dense = lm.manifest.spec.schema.num_dense;
  }
  ASSIGN_OR_RETURN(auto reader, OpenData(env, data, job.generated, true));
  if (!(reader->schema() == lm.model->schema())) {
    return InvalidArgumentError(fmt::format(
        "the data has {} slots and {} dense values but the model was trained on {} and {}",
        reader->schema().num_slots, reader->schema().num_dense, lm.model->schema().num_slots,
        lm.model->schema().num_dense));
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
                            job.pipeline.pass_examples, &pool, keep));
  const double seconds = clock.Seconds();
  nlohmann::json report = {{"command", "eval"},
                           {"examples", s.examples},
                           {"auc", s.auc},
                           {"auc_exact", ExactAuc(labels, scores)},
                           {"auc_exact_examples", labels.size()},
                           {"logloss", s.logloss},
                           {"copc", s.copc},
                           {"ctr", s.ctr},
                           {"seconds", seconds},
                           {"examples_per_s", s.examples / std::max(seconds, 1e-9)},
                           {"load_seconds", load_seconds},
                           {"model_dir", job.model_dir},
                           {"digest", lm.manifest.digest},
                           {"peak_rss_bytes", PeakRssBytes()}};
  report.update(CountsJson(reader->counts()));
  return report;
}

}  // namespace ctrbox
