#include "pipeline/trainer.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/model_dir.h"
#include "io/synth.h"
#include "model/blas.h"
#include "model/gpu_trainer.h"
#include "pipeline/evaluator.h"
#include "table/ssd_store.h"
#include "table/tiered_table.h"
#include "util/bounded_queue.h"
#include "util/logging.h"
#include "util/sys.h"
#include "working/working_set.h"
#include "working/working_table.h"

namespace ctrbox {
namespace {

// ---- passes and their stages (docs/pipeline.md) ---------------------------------------------

enum Stage { kRead, kPull, kTrain, kPush, kNumStages };
constexpr const char* kStageNames[kNumStages] = {"read", "pull", "train", "push"};

struct StageClock {
  double busy = 0, stalled = 0, idle = 0;
  void Add(const StageClock& o) {
    busy += o.busy;
    stalled += o.stalled;
    idle += o.idle;
  }
  nlohmann::json Json() const {
    return {{"busy_seconds", busy}, {"stalled_seconds", stalled}, {"idle_seconds", idle}};
  }
};

// Passes pulled and not yet pushed, with their working tables: what a new pull must patch
// its rows from (docs/pipeline.md, "Correctness across overlapping passes").
class InFlight {
 public:
  // `pushed`: the passes pushed before this run (a resumed job's).
  explicit InFlight(uint64_t pushed) : pushed_(pushed) {}
  // The working tables of the passes in flight now, ascending.
  std::vector<std::pair<uint64_t, std::shared_ptr<const WorkingTable>>> Snapshot() {
    std::lock_guard<std::mutex> l(mu_);
    return {tables_.begin(), tables_.end()};
  }
  void Add(uint64_t pass, std::shared_ptr<const WorkingTable> table) {
    std::lock_guard<std::mutex> l(mu_);
    tables_.emplace(pass, std::move(table));
  }
  // Pass `pass` was pushed (and shrunk after, if due), or discarded. Passes are pushed in
  // order, so after a discarded pass (Ctrl-C or a failure) no later one is: the barrier is
  // cancelled, or a pull waiting at it would wait forever.
  void Remove(uint64_t pass, bool pushed) {
    std::lock_guard<std::mutex> l(mu_);
    tables_.erase(pass);
    if (pushed) {
      pushed_ = pass + 1;
    } else {
      cancelled_ = true;
    }
    cv_.notify_all();
  }
  // The shrink barrier: waits until every pass before `pass` is pushed (false: cancelled).
  bool WaitPushed(uint64_t pass) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return cancelled_ || pushed_ >= pass; });
    return !cancelled_;
  }
  void Cancel() {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::shared_ptr<const WorkingTable>> tables_;
  uint64_t pushed_;
  bool cancelled_ = false;
};

struct Pass {
  explicit Pass(const ValueLayout& layout) : table(std::make_shared<WorkingTable>(layout)) {}
  ~Pass() {
    if (registry != nullptr) registry->Remove(index, /*pushed=*/false);  // discarded
  }

  uint64_t index = 0;
  Batch examples;
  WorkingSet ws;
  // The pass's rows; shared with later passes pulled while this one is in flight.
  std::shared_ptr<WorkingTable> table;
  PinnedRows pins;
  InFlight* registry = nullptr;  // set while registered as in flight
  // Rows to take from passes ahead of this one before training, ascending.
  std::vector<std::pair<std::shared_ptr<const WorkingTable>, SharedRows>> ahead;
  uint64_t patched_rows = 0;
  // This pass's time in each stage (stalled: written as the pass enters the next queue).
  StageClock clock[kNumStages];
  MetricSummary metrics;
  uint64_t embeddings_created = 0;
  // The dense state right after this pass trained, when a checkpoint is due after its push
  // (the train stage goes on with later passes meanwhile).
  std::string dense_snapshot;
};
using PassPtr = std::unique_ptr<Pass>;

using ReaderFactory = std::function<StatusOr<std::unique_ptr<BatchReader>>()>;

// The read stage's source: the epochs' examples cut into passes (a pass never spans epochs).
class PassReader {
 public:
  PassReader(ReaderFactory open, const JobConfig& job) : open_(std::move(open)), job_(job) {}

  // Opens the first reader up front so the schema is known before training starts.
  Status Open() {
    ASSIGN_OR_RETURN(reader_, open_());
    schema_ = reader_->schema();
    block_.Reset(schema_);
    return Status::OK();
  }
  Schema schema() const { return schema_; }
  const RecordCounts& counts() const { return counts_; }  // of the epochs read to the end

  // Fills *examples with the next pass; sets *eof (and leaves it empty) at the end.
  Status Next(Batch* examples, bool* eof) {
    examples->Reset(schema_);
    const uint64_t want = job_.pipeline.pass_examples;
    while (examples->rows() < want) {
      if (begin_ < block_.rows()) {
        const size_t take = std::min<size_t>(block_.rows() - begin_, want - examples->rows());
        examples->AppendRows(block_, begin_, begin_ + take);
        begin_ += take;
        continue;
      }
      if (!reader_) {
        if (epoch_ >= job_.train.epochs) break;
        ASSIGN_OR_RETURN(reader_, open_());
      }
      bool end = false;
      RETURN_IF_ERROR(reader_->Next(&block_, &end));
      begin_ = 0;
      if (end) {
        counts_.Add(reader_->counts());
        reader_.reset();
        block_.Reset(schema_);
        if (++epoch_ >= job_.train.epochs || examples->rows() > 0) break;
      }
    }
    *eof = examples->rows() == 0;
    return Status::OK();
  }

  // Reads past the first `passes` passes (a resumed job's trained data), which must hold
  // `examples` examples: the same passes the job cut before.
  Status Skip(uint64_t passes, uint64_t examples) {
    Batch scratch;
    uint64_t seen = 0;
    for (uint64_t p = 0; p < passes; ++p) {
      bool eof = false;
      RETURN_IF_ERROR(Next(&scratch, &eof));
      if (eof) {
        return FailedPreconditionError(fmt::format(
            "the input ended after {} passes, but the checkpoint was cut after {}: the data "
            "changed since",
            p, passes));
      }
      seen += scratch.rows();
    }
    if (seen != examples) {
      return FailedPreconditionError(fmt::format(
          "the first {} passes of the input hold {} examples, the checkpoint says {}: the data "
          "changed since",
          passes, seen, examples));
    }
    return Status::OK();
  }

 private:
  ReaderFactory open_;
  const JobConfig& job_;
  std::unique_ptr<BatchReader> reader_;
  Schema schema_;
  Batch block_;
  size_t begin_ = 0;
  uint32_t epoch_ = 0;
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
  if (!data.paths.empty() || !data.command.empty()) return OpenReader(env, data);
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

// The job settings besides the model spec that change what a resumed job computes: what the
// data is, and how it is cut into passes and minibatches. A checkpoint records them.
StatusOr<nlohmann::json> ResultSettings(Env* env, const JobConfig& job) {
  nlohmann::json data;
  if (job.data.paths.empty() && job.data.command.empty()) {
    const GeneratedData& g = job.generated;
    data = {{"generated",
             {{"layout", DataFormatName(g.layout)},
              {"rows", g.rows},
              {"seed", g.seed},
              {"vocab_scale", g.vocab_scale},
              {"zipf", g.zipf}}}};
  } else if (!job.data.command.empty()) {
    data = {{"format", DataFormatName(job.data.format)}, {"command", job.data.command}};
  } else {
    ASSIGN_OR_RETURN(auto files, ExpandDataPaths(env, job.data.paths, job.data.format));
    nlohmann::json list = nlohmann::json::array();
    for (const std::string& f : files) {
      nlohmann::json bytes = nullptr;  // standard input: nothing to compare
      if (f != "-") {
        ASSIGN_OR_RETURN(uint64_t size, env->GetFileSize(f));
        bytes = size;
      }
      list.push_back({{"path", f}, {"bytes", bytes}});
    }
    data = {{"format", DataFormatName(job.data.format)}, {"files", list}};
  }
  return nlohmann::json{{"data", data},
                        {"pipeline.pass_examples", job.pipeline.pass_examples},
                        {"train.batch_size", job.train.batch_size},
                        {"train.epochs", job.train.epochs},
                        {"table.shrink_every_passes", job.train.shrink_every_passes}};
}

// Why this job cannot continue from checkpoint `m`, or "".
std::string ResumeMismatch(const CheckpointManifest& m, const ModelSpec& spec,
                           const nlohmann::json& settings) {
  const std::string name = CheckpointName(m.id);
  if (m.spec.ToJson() != spec.ToJson()) {
    std::string key = m.spec.FirstIncompatibility(spec);
    if (key.empty()) key = m.spec.FirstDifference(spec);
    return fmt::format("{} was written with another {} than this job sets", name,
                       key.empty() ? "model spec" : key);
  }
  for (const auto& [key, value] : settings.items()) {
    const nlohmann::json old = m.settings.contains(key) ? m.settings[key] : nlohmann::json();
    if (old == value) continue;
    if (key == "data" && old.contains("files") && value.contains("files")) {
      const auto &a = old["files"], &b = value["files"];
      for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        if (i >= a.size() || i >= b.size() || a[i] != b[i]) {
          return fmt::format("the input differs from {}'s: {} there, {} now", name,
                             i < a.size() ? a[i].dump() : "no file",
                             i < b.size() ? b[i].dump() : "no file");
        }
      }
    }
    return fmt::format("{} was written with {} = {}, this job sets {}", name, key, old.dump(),
                       value.dump());
  }
  return "";
}

// ---- the train job ---------------------------------------------------------------------------

// One run of the train job: the four stage functions, and the two ways to run them.
class TrainRun {
 public:
  // `start`: where the job stood when this run began (a resumed job: its checkpoint);
  // `ckpt`: the checkpoint writer, or null.
  TrainRun(const JobConfig& job, PassReader* reader, SparseTable* table, CtrModel* model,
           const CtrAccessor* accessor, MetricsLog* log, ProgressSink* sink,
           const std::atomic<bool>* stop, ThreadPool* train_pool, const TrainPosition& start,
           CheckpointWriter* ckpt, GpuTrainer* gpu)
      : job_(job),
        reader_(reader),
        table_(table),
        model_(model),
        accessor_(accessor),
        log_(log),
        sink_(sink),
        stop_(stop),
        train_pool_(train_pool),
        start_(start),
        ckpt_(ckpt),
        gpu_(gpu),
        in_flight_(start.passes),
        next_index_(start.passes),
        predictions_(job.train.batch_size) {}

  // Runs every pass; returns the first error of any stage.
  Status Run(bool pipelined) {
    run_clock_.Reset();
    storage_before_ = table_->StorageReport();
    if (!pipelined) {
      RETURN_IF_ERROR(RunSequential());
    } else {
      RETURN_IF_ERROR(RunPipelined());
    }
    seconds_ = run_clock_.Seconds();
    for (int s = 0; s < kNumStages; ++s) {
      totals_[s].idle = std::max(0.0, seconds_ - totals_[s].busy - totals_[s].stalled);
    }
    return Status::OK();
  }

  double seconds() const { return seconds_; }
  uint64_t examples() const { return examples_; }
  uint64_t passes() const { return passes_; }
  uint64_t shrunk() const { return shrunk_; }
  uint64_t created() const { return created_; }
  uint64_t patched_rows() const { return patched_rows_; }
  double checkpoint_seconds() const { return checkpoint_seconds_; }
  // Where the job stands after the passes pushed so far.
  TrainPosition Position() const {
    TrainPosition p = start_;
    p.passes += passes_;
    p.examples += examples_;
    p.trained_examples += examples_;
    p.embeddings_created += created_;
    p.keys_shrunk += shrunk_;
    return p;
  }
  bool interrupted() const { return interrupted_; }
  MetricSummary summary() const { return total_.Summary(); }
  nlohmann::json StagesJson() const {
    nlohmann::json j;
    for (int s = 0; s < kNumStages; ++s) j[kStageNames[s]] = totals_[s].Json();
    return j;
  }

 private:
  bool Stopping() const { return stop_ != nullptr && stop_->load(std::memory_order_relaxed); }

  // ---- the stage functions; each adds its busy time to the pass's clock ----

  // Read: the next pass with its working set and working-table index; nullptr at the end.
  StatusOr<PassPtr> ReadStage() {
    Stopwatch clock;
    auto pass = std::make_unique<Pass>(model_->value_layout());
    bool eof = false;
    RETURN_IF_ERROR(reader_->Next(&pass->examples, &eof));
    if (eof) return PassPtr();
    pass->index = next_index_++;
    BuildWorkingSet(pass->examples, job_.train.batch_size, nullptr, &pass->ws);
    pass->table->Build(pass->ws.keys, nullptr);
    pass->clock[kRead].busy = clock.Seconds();
    return pass;
  }

  // Pull: the pass's rows resident, pinned and copied into its working table; the keys it
  // shares with the passes in flight found.
  Status PullStage(Pass* pass, ThreadPool* pool) {
    const uint32_t every = job_.train.shrink_every_passes;
    if (every > 0 && pass->index > 0 && pass->index % every == 0) {
      Stopwatch wait;  // the shrink barrier
      if (!in_flight_.WaitPushed(pass->index)) return CancelledError("the train job stopped");
      pass->clock[kPull].stalled += wait.Seconds();
    }
    Stopwatch clock;
    auto ahead = in_flight_.Snapshot();  // before the table is read
    ASSIGN_OR_RETURN(pass->pins, table_->Pull(pass->ws.keys.data(), pass->ws.keys.size(), accessor_,
                                              &pass->table->rows(), pool));
    for (auto& [index, t] : ahead) {
      SharedRows shared;
      pass->table->FindShared(*t, &shared, pool);
      if (!shared.empty()) pass->ahead.emplace_back(std::move(t), std::move(shared));
    }
    in_flight_.Add(pass->index, pass->table);
    pass->registry = &in_flight_;
    // The rows as pulled go to the GPUs now (copy streams), while an earlier pass trains.
    if (gpu_ != nullptr) {
      RETURN_IF_ERROR(gpu_->Stage(pass->index, pass->examples, pass->ws, pass->table->rows()));
    }
    pass->clock[kPull].busy = clock.Seconds();
    return Status::OK();
  }

  // Train: the newer rows of shared keys, then the minibatches (on the CPU, or the whole
  // pass on the GPUs). Returns Cancelled (the pass half trained) if the job failed meanwhile.
  Status TrainStage(Pass* pass, const std::atomic<bool>* failed) {
    Stopwatch clock;
    std::vector<uint32_t> patched;
    for (const auto& [from, shared] : pass->ahead) {
      pass->table->CopyRows(*from, shared, train_pool_);
      pass->patched_rows += shared.size();
      if (gpu_ != nullptr) {
        for (const auto& pair : shared) patched.push_back(pair.first);
      }
    }
    pass->ahead.clear();
    MetricAccumulator pass_metrics;
    if (gpu_ != nullptr) {
      const Batch& ex = pass->examples;
      pass_predictions_.resize(ex.rows());
      uint64_t created = 0;
      RETURN_IF_ERROR(gpu_->Train(pass->index, ex, pass->ws, patched, &pass->table->rows(),
                                  pass_predictions_.data(), &created));
      pass->embeddings_created += created;
      for (size_t r = 0; r < ex.rows(); ++r) {
        pass_metrics.Add(ex.labels[r], pass_predictions_[r]);
        total_.Add(ex.labels[r], pass_predictions_[r]);
      }
      trained_examples_ += ex.rows();
      ReportProgress();
    } else {
      for (const Minibatch& mb : pass->ws.batches) {
        if (failed != nullptr && failed->load(std::memory_order_relaxed)) {
          return CancelledError("the train job failed");
        }
        StepStats st = model_->TrainMinibatch(pass->examples, pass->ws, mb, &pass->table->rows(),
                                              *accessor_, train_pool_, predictions_.data());
        pass->embeddings_created += st.embeddings_created;
        for (uint32_t r = 0; r < mb.rows(); ++r) {
          const float y = pass->examples.labels[mb.row_begin + r];
          pass_metrics.Add(y, predictions_[r]);
          total_.Add(y, predictions_[r]);
        }
        trained_examples_ += mb.rows();
        ReportProgress();
      }
    }
    pass->metrics = pass_metrics.Summary();
    if (ckpt_ != nullptr && ckpt_->Due(pass->index + 1))
      pass->dense_snapshot = DensePayload(*model_);
    pass->clock[kTrain].busy = clock.Seconds();
    return Status::OK();
  }

  void ReportProgress() {
    if (!sink_ || progress_clock_.Seconds() < job_.train.progress_seconds) return;
    progress_clock_.Reset();
    const double s = run_clock_.Seconds();
    std::lock_guard<std::mutex> l(sink_mu_);
    sink_->OnProgress(TrainProgress{trained_examples_, s, trained_examples_ / s, total_.Summary()});
  }

  // Push: the rows back into the table and unpinned; shrink when due; the pass's metrics line.
  Status PushStage(Pass* pass, ThreadPool* pool) {
    Stopwatch clock;
    RETURN_IF_ERROR(table_->Push(&pass->pins, pass->table->rows(), pool));
    ++passes_;
    if (ckpt_ != nullptr) RETURN_IF_ERROR(ckpt_->OnPush(pass->table->rows()));
    const uint32_t every = job_.train.shrink_every_passes;
    if (every > 0 && (start_.passes + passes_) % every == 0) {
      ASSIGN_OR_RETURN(uint64_t deleted, table_->Shrink(*accessor_, pool));
      shrunk_ += deleted;
      if (ckpt_ != nullptr) ckpt_->OnShrink();
    }
    pass->registry = nullptr;
    in_flight_.Remove(pass->index, /*pushed=*/true);
    examples_ += pass->examples.rows();
    created_ += pass->embeddings_created;
    patched_rows_ += pass->patched_rows;

    // A checkpoint at this barrier: pass `index` is pushed, the next push waits for it.
    nlohmann::json checkpoint;
    if (ckpt_ != nullptr && ckpt_->Due(start_.passes + passes_)) {
      Stopwatch ckpt_clock;
      ASSIGN_OR_RETURN(CheckpointManifest m,
                       ckpt_->Commit(*table_, pass->dense_snapshot, Position(), nullptr, pool));
      checkpoint = {{"name", CheckpointName(m.id)},
                    {"kind", m.base ? "base" : "delta"},
                    {"rows", m.rows},
                    {"bytes", m.files[0].bytes + m.files[1].bytes},
                    {"seconds", ckpt_clock.Seconds()}};
      checkpoint_seconds_ += ckpt_clock.Seconds();
    }
    pass->clock[kPush].busy = clock.Seconds();
    const double now = run_clock_.Seconds();
    const double pass_seconds = now - last_push_;
    last_push_ = now;
    const MetricSummary& ps = pass->metrics;
    nlohmann::json stages;
    for (int s = 0; s < kNumStages; ++s) {
      stages[kStageNames[s]] = pass->clock[s].Json();
    }
    nlohmann::json record = {{"event", "pass"},
                             {"pass", pass->index},
                             {"examples", examples_},
                             {"pass_examples", ps.examples},
                             {"auc", ps.auc},
                             {"logloss", ps.logloss},
                             {"copc", ps.copc},
                             {"working_set_keys", pass->ws.keys.size()},
                             {"rows_from_passes_in_flight", pass->patched_rows},
                             {"table_keys", table_->Stats().keys},
                             {"seconds", pass_seconds},
                             {"examples_per_s", ps.examples / std::max(pass_seconds, 1e-9)},
                             {"stages", stages}};
    if (!checkpoint.is_null()) record["checkpoint"] = checkpoint;
    nlohmann::json storage_now = table_->StorageReport();
    record["storage"] = StorageDelta(storage_before_, storage_now);
    storage_before_ = std::move(storage_now);
    RETURN_IF_ERROR(log_->Write(record));
    if (sink_) {
      std::lock_guard<std::mutex> l(sink_mu_);
      sink_->OnPass(record);
    }
    return Status::OK();
  }

  // ---- sequential: the stages one after the other, pass by pass ----

  Status RunSequential() {
    while (true) {
      if (Stopping()) {
        interrupted_ = true;
        break;
      }
      ASSIGN_OR_RETURN(PassPtr pass, ReadStage());
      if (!pass) break;
      RETURN_IF_ERROR(PullStage(pass.get(), train_pool_));
      RETURN_IF_ERROR(TrainStage(pass.get(), nullptr));
      RETURN_IF_ERROR(PushStage(pass.get(), train_pool_));
      for (int s = 0; s < kNumStages; ++s) totals_[s].Add(pass->clock[s]);
    }
    return Status::OK();
  }

  // ---- pipelined: one thread per stage, bounded queues between them ----

  // The first error of any stage: closes every queue, discards the passes in them (their
  // pins are released) and cancels the shrink barrier, so every stage returns promptly.
  void Fail(const Status& s) {
    {
      std::lock_guard<std::mutex> l(error_mu_);
      if (first_error_.ok()) first_error_ = s;
    }
    failed_.store(true);
    for (auto& q : queues_) q->Close();
    in_flight_.Cancel();
    for (auto& q : queues_) {
      PassPtr dropped;
      while (q->Pop(&dropped)) dropped.reset();
    }
  }

  // Hands a finished pass to the next stage, timing the stall. Returns false if closed.
  bool Handoff(Stage stage, PassPtr pass, StageClock* total) {
    Stopwatch clock;
    const bool ok = queues_[stage]->Push(
        std::move(pass), [&](PassPtr& p) { p->clock[stage].stalled += clock.Seconds(); });
    total->stalled += clock.Seconds();
    return ok;
  }

  // Takes the next pass for a stage, timing the wait (the pass's idle time; a stage's total
  // idle time is what its busy and stalled time leave of the run). Returns false when the
  // input ended.
  bool Take(Stage stage, PassPtr* pass) {
    Stopwatch clock;
    const bool ok = queues_[stage - 1]->Pop(pass);
    if (ok) (*pass)->clock[stage].idle = clock.Seconds();
    return ok && !failed_.load();
  }

  Status RunPipelined() {
    for (auto& q : queues_) q = std::make_unique<BoundedQueue<PassPtr>>(job_.pipeline.queue_depth);
    ThreadPool pull_pool(job_.pipeline.pull_threads), push_pool(job_.pipeline.push_threads);
    StageClock clocks[kNumStages];

    std::thread read([&] {
      while (!failed_.load()) {
        if (Stopping()) {
          interrupted_flag_.store(true);
          break;
        }
        StatusOr<PassPtr> pass = ReadStage();
        if (!pass.ok()) {
          Fail(pass.status());
          break;
        }
        if (!*pass) break;
        clocks[kRead].busy += (*pass)->clock[kRead].busy;
        if (!Handoff(kRead, std::move(*pass), &clocks[kRead])) break;
      }
      queues_[kRead]->Close();
    });
    std::thread pull([&] {
      PassPtr pass;
      while (Take(kPull, &pass)) {
        if (Stopping()) {  // read but not pulled: discarded
          interrupted_flag_.store(true);
          pass.reset();
          continue;
        }
        Status s = PullStage(pass.get(), &pull_pool);
        clocks[kPull].busy += pass->clock[kPull].busy;
        clocks[kPull].stalled += pass->clock[kPull].stalled;
        if (s.code() == StatusCode::kCancelled && Stopping()) {  // Ctrl-C at the shrink barrier
          interrupted_flag_.store(true);
          pass.reset();
          continue;
        }
        if (!s.ok()) {
          Fail(s);
          break;
        }
        if (!Handoff(kPull, std::move(pass), &clocks[kPull])) break;
      }
      pass.reset();
      queues_[kPull]->Close();
    });
    std::thread push([&] {
      PassPtr pass;
      // Every trained pass is pushed, also after Ctrl-C; nothing after an error.
      while (Take(kPush, &pass)) {
        Status s = PushStage(pass.get(), &push_pool);
        clocks[kPush].busy += pass->clock[kPush].busy;
        if (!s.ok()) {
          Fail(s);
          break;
        }
        pass.reset();
      }
      pass.reset();
    });

    // The train stage runs here.
    {
      PassPtr pass;
      while (Take(kTrain, &pass)) {
        if (Stopping()) {  // pulled but not trained: discarded, its pins released
          interrupted_flag_.store(true);
          pass.reset();
          continue;
        }
        Status s = TrainStage(pass.get(), &failed_);
        if (!s.ok()) {
          if (!failed_.load()) Fail(s);  // else: another stage failed first
          break;
        }
        clocks[kTrain].busy += pass->clock[kTrain].busy;
        if (!Handoff(kTrain, std::move(pass), &clocks[kTrain])) break;
      }
      pass.reset();
      queues_[kTrain]->Close();
    }
    read.join();
    pull.join();
    push.join();
    for (int s = 0; s < kNumStages; ++s) totals_[s] = clocks[s];
    interrupted_ = interrupted_flag_.load();
    std::lock_guard<std::mutex> l(error_mu_);
    return first_error_;
  }

  const JobConfig& job_;
  PassReader* const reader_;
  SparseTable* const table_;
  CtrModel* const model_;
  const CtrAccessor* const accessor_;
  MetricsLog* const log_;
  ProgressSink* const sink_;
  const std::atomic<bool>* const stop_;
  ThreadPool* const train_pool_;
  const TrainPosition start_;
  CheckpointWriter* const ckpt_;  // push stage
  GpuTrainer* const gpu_;         // device: gpu (Stage in the pull stage, Train in the train stage)

  InFlight in_flight_;
  uint64_t next_index_;                                                               // read stage
  std::vector<float> predictions_;                                                    // train stage
  std::vector<float> pass_predictions_;                                               // train stage
  MetricAccumulator total_;                                                           // train stage
  uint64_t trained_examples_ = 0;                                                     // train stage
  Stopwatch progress_clock_;                                                          // train stage
  uint64_t examples_ = 0, passes_ = 0, shrunk_ = 0, created_ = 0, patched_rows_ = 0;  // push
  double last_push_ = 0;                                                              // push stage
  double checkpoint_seconds_ = 0;                                                     // push stage
  nlohmann::json storage_before_;                                                     // push stage
  std::mutex sink_mu_;

  std::unique_ptr<BoundedQueue<PassPtr>> queues_[kNumStages - 1];
  std::atomic<bool> failed_{false};
  std::atomic<bool> interrupted_flag_{false};
  std::mutex error_mu_;
  Status first_error_;

  Stopwatch run_clock_;
  double seconds_ = 0;
  StageClock totals_[kNumStages];
  bool interrupted_ = false;
};

// AIBox Table 1: each stage's busy time as a share of the run (the pass time in aggregate).
void LogStageTable(const nlohmann::json& stages, double seconds, uint64_t passes, bool pipelined) {
  std::string line;
  for (const char* name : kStageNames) {
    const double busy = stages[name]["busy_seconds"].get<double>();
    line += fmt::format("  {} {:.1f}% ({:.3f} s/pass)", name,
                        100.0 * busy / std::max(seconds, 1e-9), passes ? busy / passes : 0.0);
  }
  LOG_INFO("stage busy time / pass time ({}, {} passes, {:.3f} s/pass):{}",
           pipelined ? "pipelined" : "sequential", passes, passes ? seconds / passes : 0.0, line);
}

}  // namespace

StatusOr<nlohmann::json> RunTrain(Env* env, JobConfig job, ProgressSink* sink,
                                  const std::atomic<bool>* stop) {
  Stopwatch total_clock;
  const bool generated = job.data.paths.empty() && job.data.command.empty();
  if (job.pipeline.queue_depth < 1 || job.pipeline.pull_threads < 1 ||
      job.pipeline.push_threads < 1 || job.pipeline.pass_examples < 1) {
    return InvalidArgumentError(
        "pipeline.queue_depth, pipeline.pull_threads, pipeline.push_threads and "
        "pipeline.pass_examples must be >= 1");
  }
  PassReader reader([&] { return OpenData(env, job.data, job.generated, false); }, job);
  RETURN_IF_ERROR(reader.Open());
  job.spec.schema = reader.schema();
  job.spec.table.seed = job.train.seed;
  ThreadPool pool(job.train.threads);

  // The model: resume from the newest checkpoint, continue the one in model_dir, or start a
  // new one.
  std::unique_ptr<CtrModel> model;
  std::unique_ptr<SparseTable> table;
  TrainPosition start;
  nlohmann::json settings;
  std::optional<CheckpointManifest> resumed;
  std::vector<std::string> resume_warnings;
  if (job.resume && job.ckpt.dir.empty())
    return InvalidArgumentError("--resume needs ckpt.dir (--set ckpt.dir=DIR)");
  if (!job.ckpt.dir.empty()) {
    ASSIGN_OR_RETURN(settings, ResultSettings(env, job));
    if (job.resume) {
      StatusOr<ResumedState> r = ResumeNewestCheckpoint(
          env, job.ckpt.dir,
          [&](const ValueLayout& layout) -> StatusOr<std::unique_ptr<SparseTable>> {
            TieredOptions o = StorageFor(job, layout);
            o.reopen = false;  // the checkpoint is the state: start from empty files
            ASSIGN_OR_RETURN(auto t, TieredTable::Open(env, o));
            return std::unique_ptr<SparseTable>(std::move(t));
          },
          &pool);
      if (r.ok()) {
        const std::string why = ResumeMismatch(r->manifest, job.spec, settings);
        if (!why.empty()) return InvalidArgumentError("cannot resume: " + why);
        resumed = r->manifest;
        resume_warnings = std::move(r->warnings);
        model = std::move(r->model);
        table = std::move(r->table);
        start = resumed->position;
        LOG_INFO("resuming from {} in {}: {} passes, {} examples done", CheckpointName(resumed->id),
                 job.ckpt.dir, start.passes, start.examples);
      } else if (r.status().code() == StatusCode::kNotFound) {
        LOG_INFO("no checkpoint in {} yet: starting the job", job.ckpt.dir);
      } else {
        return r.status();
      }
    } else if (!job.fresh) {
      ASSIGN_OR_RETURN(auto ids, ListCheckpoints(env, job.ckpt.dir));
      if (!ids.empty()) {
        return InvalidArgumentError(fmt::format(
            "{} holds checkpoints of an earlier job (newest {}): pass --resume to continue it, "
            "or --fresh to start a new job there (its old checkpoints are pruned after the "
            "first new one)",
            job.ckpt.dir, CheckpointName(ids.back())));
      }
    }
  }
  if (resumed) {
    RETURN_IF_ERROR(reader.Skip(start.passes, start.examples));
  } else if (!job.model_dir.empty() && !job.fresh && ModelExists(env, job.model_dir)) {
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
    start.trained_examples = lm.manifest.trained_examples;
    model = std::move(lm.model);
    table = std::move(lm.table);
  } else {
    model = std::make_unique<CtrModel>(job.spec.schema, job.spec.model, job.spec.sparse_optimizer,
                                       job.spec.dense_optimizer, job.train.seed);
    ASSIGN_OR_RETURN(table, TieredTable::Open(env, StorageFor(job, model->value_layout())));
  }
  const CtrAccessor accessor(model->value_layout(), job.spec.table);
  std::unique_ptr<CheckpointWriter> ckpt;
  if (!job.ckpt.dir.empty()) {
    ASSIGN_OR_RETURN(
        ckpt, CheckpointWriter::Open(env, job.ckpt, job.spec, settings, model->value_layout(),
                                     resumed ? &*resumed : nullptr));
  }
  std::string metrics_path = job.train.metrics_path;
  if (metrics_path.empty() && !job.model_dir.empty())
    metrics_path = JoinPath(job.model_dir, "metrics.jsonl");
  ASSIGN_OR_RETURN(auto metrics_log, MetricsLog::Open(env, metrics_path));
  if (resumed) {
    // Pass lines logged after this checkpoint by the run that stopped follow in the log; the
    // passes from here on are logged again.
    RETURN_IF_ERROR(metrics_log->Write({{"event", "resume"},
                                        {"checkpoint", CheckpointName(resumed->id)},
                                        {"passes", start.passes},
                                        {"examples", start.examples}}));
  }

  // Train pass by pass: nothing is committed unless every stage succeeded (a read error or
  // too many malformed records included).
  nlohmann::json report;
  TrainPosition final_position;
  {
    std::unique_ptr<GpuTrainer> gpu;
    if (job.gpu) {
      if (job.train.deterministic && job.gpu_options.scatter == ScatterMode::kAtomic) {
        return InvalidArgumentError(
            "train.deterministic=true needs gpu.scatter=segment (atomic sums have no fixed order)");
      }
      GpuOptions go = job.gpu_options;
      go.slots = job.pipeline.queue_depth + 2;  // passes between the pull and the train stage
      ASSIGN_OR_RETURN(gpu, GpuTrainer::Create(model.get(), accessor, go, &pool));
      LOG_INFO("train stage on the GPU: {}", gpu->Describe());
    }
    TrainRun run(job, &reader, table.get(), model.get(), &accessor, metrics_log.get(), sink, stop,
                 &pool, start, ckpt.get(), gpu.get());
    RETURN_IF_ERROR(run.Run(job.pipeline.enabled));
    final_position = run.Position();
    if (sink) sink->OnDone();
    const nlohmann::json stages = run.StagesJson();
    LogStageTable(stages, run.seconds(), run.passes(), job.pipeline.enabled);
    RETURN_IF_ERROR(metrics_log->Write({{"event", "stages"},
                                        {"pipelined", job.pipeline.enabled},
                                        {"passes", run.passes()},
                                        {"seconds", run.seconds()},
                                        {"stages", stages}}));
    const MetricSummary summary = run.summary();
    const TableStats ts = table->Stats();
    report = {
        {"command", "train"},
        {"examples", run.examples()},
        {"seconds", run.seconds()},
        {"examples_per_s", run.examples() / std::max(run.seconds(), 1e-9)},
        {"auc", summary.auc},
        {"logloss", summary.logloss},
        {"copc", summary.copc},
        {"passes", run.passes()},
        {"epochs", job.train.epochs},
        {"threads", job.train.threads},
        {"device", gpu ? gpu->Describe() : std::string("cpu")},
        {"batch_size", job.train.batch_size},
        {"keys", ts.keys},
        {"keys_with_embedding", ts.keys_with_emb},
        {"embeddings_created", run.created()},
        {"keys_shrunk", run.shrunk()},
        {"bytes_live", ts.value_bytes},
        {"table_memory_bytes", ts.memory_bytes},
        {"keys_in_memory", ts.keys_in_memory},
        {"keys_on_disk", ts.keys_on_disk},
        {"storage", table->StorageReport()},
        {"table_bytes_per_key", ts.keys ? double(ts.memory_bytes) / ts.keys : 0.0},
        {"value_bytes_per_key", ts.keys ? double(ts.value_bytes) / ts.keys : 0.0},
        {"quant",
         {{"bits", job.spec.model.quant.bits},
          {"range", job.spec.model.quant.range},
          {"rounding", QuantRoundingName(job.spec.model.quant.rounding)}}},
        {"dense_params", model->dense_params().size()},
        {"input", generated ? "generated" : (job.data.command.empty() ? "files" : "command")},
        {"blas_core", blas::CoreName()},
        {"deterministic", job.train.deterministic},
        {"pipelined", job.pipeline.enabled},
        {"rows_from_passes_in_flight", run.patched_rows()},
        {"interrupted", run.interrupted()},
        {"stages", stages},
        {"checkpoint_seconds", run.checkpoint_seconds()},
        {"job_passes", final_position.passes},
        {"job_examples", final_position.examples},
    };
    if (resumed) {
      report["resumed_from"] = CheckpointName(resumed->id);
      report["resume_warnings"] = resume_warnings;
    }
    // An interrupted run read only part of the data; its record counts are partial.
    if (!run.interrupted()) report.update(CountsJson(reader.counts()));
  }
  const bool interrupted = report["interrupted"].get<bool>();

  // The final checkpoint (unless the last pass's checkpoint is it).
  if (ckpt) {
    Stopwatch clock;
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     ckpt->Commit(
                         *table, DensePayload(*model), final_position,
                         [&] { return ModelDigest(*table, *model, &pool); }, &pool));
    report["checkpoint"] = ckpt->Report();
    report["checkpoint"]["final_seconds"] = clock.Seconds();
    if (!m.digest.empty()) report["digest"] = m.digest;
  }

  if (!job.model_dir.empty()) {
    Stopwatch clock;
    ASSIGN_OR_RETURN(ModelManifest m, SaveModel(env, job.model_dir, job.spec, *table, *model,
                                                final_position.trained_examples, &pool));
    report["model_dir"] = job.model_dir;
    report["generation"] = m.generation;
    report["digest"] = m.digest;
    report["save_seconds"] = clock.Seconds();
  } else if (!report.contains("digest")) {
    ASSIGN_OR_RETURN(report["digest"], ModelDigest(*table, *model, &pool));
  }

  // Held-out evaluation: --eval-data, or the generated test rows (not after Ctrl-C).
  if (!interrupted && (generated || !job.eval_paths.empty())) {
    Stopwatch clock;
    DataOptions eval = job.data;
    eval.paths = job.eval_paths;
    eval.command.clear();
    ASSIGN_OR_RETURN(auto eval_reader, OpenData(env, eval, job.generated, true));
    ASSIGN_OR_RETURN(MetricSummary t,
                     Evaluate(eval_reader.get(), *table, model.get(), job.train.batch_size,
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
