// The end of RunTrain (jobs/train_steps.h): the model committed (one process or the ranks),
// the held-out evaluation, the table closed, the memory report.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <optional>

#include "ckpt/model_dir.h"
#include "ckpt/model_files.h"
#include "ckpt/ranks_checkpoint.h"
#include "dist/collectives.h"
#include "gpu/trainer.h"
#include "jobs/data.h"
#include "jobs/evaluator.h"
#include "jobs/file_shares.h"
#include "jobs/train_report.h"
#include "jobs/train_start.h"
#include "jobs/train_steps.h"
#include "pipeline/pass_reader.h"
#include "pipeline/rank_pass.h"
#include "pipeline/stage_runner.h"
#include "pipeline/stages.h"
#include "table/ssd_store.h"
#include "util/cleanup.h"
#include "util/logging.h"
#include "util/memory_box.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox::train_steps {
namespace {

// Held-out evaluation: --eval-data, or the generated test rows.
// A rank of a distributed job without held-out files of its own: no rows, the others' schema.
class NoRows final : public BatchReader {
 public:
  explicit NoRows(Schema schema) : schema_(schema) {}
  Schema schema() const override { return schema_; }
  Status Next(Batch*, bool* eof) override {
    *eof = true;
    return Status::OK();
  }
  RecordCounts counts() const override { return {}; }

 private:
  Schema schema_;
};

// The held-out data's reader: --eval-data as the main view reads its data (this rank's share),
// or the generated test rows; none (null) without either.
StatusOr<std::unique_ptr<BatchReader>> OpenHeldOut(Env* env, const JobConfig& job) {
  DataOptions eval = job.data;
  eval.paths = job.eval_paths;
  eval.byte_share = job.eval_byte_share;
  eval.command.clear();
  if (!IsGenerated(job.data) && eval.paths.empty()) return std::unique_ptr<BatchReader>();
  return OpenData(env, eval, job.generated, true);
}

}  // namespace

nlohmann::json InputRecord(const JobConfig& job) {
  if (job.features != nullptr) {
    return {{"format", "views"}, {"features", fmt::format("{:016x}", job.features->Fingerprint())}};
  }
  // (A stream job's partitions are files, even before its first is read.)
  if (IsGenerated(job.data) && !job.stream.enabled()) {
    return {{"format", DataFormatName(job.generated.layout)}, {"generated", true}};
  }
  nlohmann::json j = {{"format", DataFormatName(job.data.format)},
                      {"num_slots", job.spec.schema.num_slots},
                      {"num_dense", job.spec.schema.num_dense}};
  if (job.data.format == DataFormat::kLibsvm || job.data.format == DataFormat::kLibfm) {
    j["slot_from"] = SlotFromName(job.data.slot_from);
  }
  return j;
}

Status CheckHeldOut(Env* env, const JobConfig& job) {
  if (IsGenerated(job.data) || job.eval_paths.empty()) return Status::OK();
  if (job.extractor != nullptr) {
    // Through a feature graph the files and their headers are checked: a reader would start
    // extracting at once, into the extract stage's totals that the report gives for the
    // training data.
    DataOptions eval = job.data;
    eval.paths = job.eval_paths;
    eval.command.clear();
    return job.extractor->CheckHeaders(env, eval);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> reader, OpenHeldOut(env, job));
  if (!(reader->schema() == job.spec.schema)) {
    return InvalidArgumentError(fmt::format(
        "--eval-data has {} slots and {} dense values but the training data has {} and {}",
        reader->schema().num_slots, reader->schema().num_dense, job.spec.schema.num_slots,
        job.spec.schema.num_dense));
  }
  // Its first records too: a header that differs from the training files', a first file that
  // cannot be read, are found now rather than after training.
  Batch first;
  bool eof = false;
  return reader->Next(&first, &eof);
}

// Commits what the run trained: the final checkpoint (unless the last pass's checkpoint is
// it) and the model directory; adds the model's digest to the report.
Status CommitModel(Env* env, const JobConfig& job, TrainStart* start, const TrainPosition& position,
                   ThreadPool* pool, TrainReport* report) {
  SparseTable& table = *start->table;
  const CtrModel& model = *start->model;
  if (start->ckpt) {
    Stopwatch clock;
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     start->ckpt->Commit(
                         table, DensePayload(model), position,
                         [&] { return ModelDigest(table, model, pool); }, pool));
    report->checkpoint = start->ckpt->Report();
    (*report->checkpoint)["final_seconds"] = clock.Seconds();
    if (!m.digest.empty()) report->digest = m.digest;
  }
  if (!job.model_dir.empty()) {
    Stopwatch clock;
    ASSIGN_OR_RETURN(ModelManifest m, SaveModel(env, job.model_dir, job.spec, table, model,
                                                position.trained_examples, pool, InputRecord(job)));
    report->model_dir = job.model_dir;
    report->generation = m.generation;
    report->digest = m.digest;
    report->save_seconds = clock.Seconds();
  } else if (!report->digest) {
    ASSIGN_OR_RETURN(report->digest, ModelDigest(table, model, pool));
  }
  return Status::OK();
}

// A distributed job's commit (docs/distributed.md): the digest of the whole model (the
// ranks' sparse sums and key counts added up) and, with a model directory, one model saved
// by every rank: its part's sparse file each, the dense file and the MANIFEST by rank 0.
Status CommitModelOfRanks(Env* env, Comm* comm, const JobConfig& job,
                          const std::string& ranks_ckpt_dir, TrainStart* start,
                          const TrainPosition& position, ThreadPool* pool, TrainReport* report) {
  SparseTable& table = *start->table;
  const CtrModel& model = *start->model;
  if (start->ckpt) {  // the final checkpoint, as one process takes it
    Stopwatch clock;
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     start->ckpt->Commit(table, DensePayload(model), position, nullptr, pool));
    RETURN_IF_ERROR(CommitRanksCheckpointOf(comm, env, ranks_ckpt_dir, m.id));
    report->checkpoint = start->ckpt->Report();
    (*report->checkpoint)["final_seconds"] = clock.Seconds();
  }
  ASSIGN_OR_RETURN(uint64_t sparse_sum, table.SparseDigest(pool));
  uint64_t sums[3] = {sparse_sum, table.Stats().keys, position.trained_examples};
  RETURN_IF_ERROR(AllReduceSum(comm, sums, 3));
  report->digest = StateDigest(sums[0], sums[1], DensePayload(model));
  if (!report->ranks) report->ranks = TrainReport::Ranks{comm->size(), comm->rank(), 0, 0, 0.0, {}};
  if (job.model_dir.empty()) return Status::OK();
  Stopwatch clock;
  // Every rank reads the committed generation before any rank can commit the next one.
  ASSIGN_OR_RETURN(uint64_t generation, NextGeneration(env, job.model_dir));
  RETURN_IF_ERROR(AllReduceMax(comm, &generation, 1));
  ASSIGN_OR_RETURN(RankModelPart mine,
                   SaveRankModelPart(env, job.model_dir, generation, comm->rank(), table));
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(mine.Encode(), &all));
  std::string committed;  // rank 0: the digest it committed
  if (comm->rank() == 0) {
    std::vector<RankModelPart> parts;
    for (const std::string& bytes : all) {
      ASSIGN_OR_RETURN(RankModelPart s, RankModelPart::Decode(bytes));
      parts.push_back(std::move(s));
    }
    // The job's trained examples: every rank's.
    ASSIGN_OR_RETURN(ModelManifest m, CommitRanksModel(env, job.model_dir, job.spec, model, sums[2],
                                                       parts, InputRecord(job)));
    committed = m.digest;
  }
  // Everyone waits for the commit (and learns its digest).
  RETURN_IF_ERROR(comm->AllGather(committed, &all));
  if (all[0] != *report->digest) {
    return InternalError("the saved model's digest " + all[0] + " differs from the ranks' digest " +
                         *report->digest);
  }
  report->model_dir = job.model_dir;
  report->generation = generation;
  report->save_seconds = clock.Seconds();
  return Status::OK();
}

// Held-out evaluation: --eval-data, or the generated test rows. In a distributed job every
// rank evaluates its share (its files, or its blocks of the generated rows) with the rows
// looked up from their owners, and rank 0 reports the metrics over all of them.
Status EvaluateHeldOut(Env* env, const JobConfig& job, Comm* comm, TrainStart* start,
                       ThreadPool* pool, TrainReport* report) {
  const bool generated = IsGenerated(job.data);
  uint64_t evaluate = generated || !job.eval_paths.empty() ? 1 : 0;
  if (comm != nullptr) RETURN_IF_ERROR(AllReduceMax(comm, &evaluate, 1));
  if (evaluate == 0) return Status::OK();
  Stopwatch clock;
  // The commit's buffers (its rows' blocks, the files' writers) go back first.
  const uint64_t released = ReleaseFreeMemory();
  LOG_DEBUG("before the evaluation: {} MB of free memory back to the system", released >> 20);
  ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> eval_reader, OpenHeldOut(env, job));
  if (eval_reader == nullptr) eval_reader = std::make_unique<NoRows>(job.spec.schema);
  MetricSummary t;
  // train.deterministic: a row's prediction from that row alone, not from its place in a
  // prediction block (which starts at each rank's first row): the same on any number of ranks.
  std::optional<ScopedRowwisePredictions> rowwise;
  if (job.train.deterministic) rowwise.emplace(start->model.get());
  if (comm != nullptr) {
    ASSIGN_OR_RETURN(
        t, EvaluateOnRanks(comm, eval_reader.get(), start->table.get(), start->model.get(),
                           job.train.batch_size, job.pipeline.pass_examples,
                           // each rank's share: an owner pins the keys it owns of every chunk
                           job.EvalChunkKeys() / static_cast<uint64_t>(comm->size()), pool));
  } else {
    ASSIGN_OR_RETURN(
        t, Evaluate(eval_reader.get(), *start->table, start->model.get(), job.train.batch_size,
                    job.pipeline.pass_examples, job.EvalChunkKeys(), pool, nullptr));
  }
  report->test = t;
  report->eval_seconds = clock.Seconds();
  if (generated) report->oracle_auc = OracleAuc(job.generated);
  nlohmann::json line = t.ToJson();
  line["event"] = "test";
  return start->metrics_log->Write(line);
}

void ProbeTierDisk(Env* env, const JobConfig& job, const Comm* comm, TrainReport* report) {
  const std::string& dir = job.storage.ssd.dir;
  if (!report->storage.has_disk || dir.empty() || (comm != nullptr && comm->rank() != 0)) return;
  double seconds = job.storage.disk_probe_seconds;
  if (seconds < 0) seconds = report->seconds >= 10 ? 0.5 : 0;  // auto: at most 5 % of the job
  if (seconds == 0) return;
  StatusOr<DiskCeiling> c = ProbeDiskDir(env, dir, seconds);
  if (!c.ok()) {
    LOG_WARNING("storage.disk_probe: the disk under {} was not measured: {}", dir,
                c.status().ToString());
    return;
  }
  report->disk_ceiling = *c;
  if (!c->measured) {
    LOG_INFO("storage.disk_probe: the disk under {} was not measured: {}", dir, c->why_not);
    return;
  }
  const double reads_per_s =
      report->seconds > 0 ? static_cast<double>(report->storage.records_read) / report->seconds
                          : 0.0;
  LOG_INFO(
      "the disk under {}: {:.0f} random 4 KiB reads/s with 1 in flight, {:.0f} with 16, {:.0f} "
      "MB/s in order (O_DIRECT, {:.2f} s); the job read {:.0f} records/s, {:.1f} % of the "
      "16-in-flight ceiling",
      dir, c->random_reads_qd1_per_s, c->random_reads_qd16_per_s, c->seq_mb_per_s, c->seconds,
      reads_per_s, 100.0 * reads_per_s / std::max(c->random_reads_qd16_per_s, 1.0));
}

// The SSD files are this job's scratch space (the model is in the model directory) unless
// storage.keep_store asks for a cleanly closed store to inspect or reopen.
Status CloseTable(Env* env, const JobConfig& job, std::unique_ptr<SparseTable> table) {
  if (job.storage.keep_store) return table->Close();
  table.reset();
  if (job.storage.ssd.dir.empty()) return Status::OK();
  return SsdStore::RemoveFiles(env, job.storage.ssd.dir);
}

// The resident memory of the run split by owner at one instant (docs/storage.md, "Sizing the
// budget"): after the pushed pass with the largest resident set less its pages mapped from
// files (PassStages::memory_at_peak),
// the table's use (what storage.memory_budget bounds), the passes in flight, the dense model
// with its optimizer state, the reader's chunk buffers (files and commands; generated rows
// have none), and the rest (the allocator's slack, thread stacks, BLAS buffers, libraries).
// Owners measured at one moment add up to that moment's resident set; peaks taken at different
// moments did not (the demo's "other" came out at -56 MB). The run's own peak, which a
// held-out evaluation or the table's close may set, is peak_rss_bytes beside it.
nlohmann::json PeakMemoryByOwner(const JobConfig& job, const CtrModel& model,
                                 const TrainReport& report) {
  const PassStages::MemorySample& at = report.memory_at_peak;
  const auto table = static_cast<int64_t>(at.table);
  const int64_t passes = at.passes;
  // Weights and their gradients, and the optimizer's state (none for SGD).
  const DenseOptimizer& opt = model.dense_optimizer();
  const auto dense = static_cast<int64_t>(
      sizeof(float) * (2 * model.dense_params().size() + opt.m().size() + opt.v().size()));
  const auto reader = IsGenerated(job.data)
                          ? int64_t{0}
                          : static_cast<int64_t>(2 * job.data.threads * job.data.chunk_bytes);
  const auto rss = static_cast<int64_t>(at.rss);
  return {{"rss", rss},
          {"table", table},
          {"passes_in_flight", passes},
          {"dense_model", dense},
          {"reader_chunks", reader},
          {"other", rss - table - passes - dense - reader},
          // Of "other": what the allocator held free then (its arenas' slack; resident unless
          // trimmed, and nothing is trimmed while the passes run).
          {"other_heap_free", static_cast<int64_t>(at.heap_free)},
          // ... and the resident pages mapped from files (the program's code and libraries;
          // with storage.mapped_reads, the SSD files' pages the reads touched: page cache).
          {"other_file_pages", static_cast<int64_t>(at.file_pages)}};
}

nlohmann::json MemoryBoxJson(const JobConfig& job) {
  const MemoryBox box = FindMemoryBox();
  nlohmann::json j = {{"limit_bytes", box.limit}, {"source", box.source}};
  if (const uint64_t peak = MemoryBoxPeakBytes(box); peak > 0) j["peak_bytes"] = peak;
  if (box.limit > 0 && job.storage.memory_budget > 0) {
    j["budget_share"] =
        static_cast<double>(job.storage.memory_budget) / static_cast<double>(box.limit);
  }
  if (auto it = job.settings_given.find("storage.memory_budget");
      it != job.settings_given.end() && it->second.ends_with('%')) {
    j["budget_given_as"] = it->second;  // e.g. "45%"
  }
  return j;
}

}  // namespace ctrbox::train_steps
