#include "pipeline/trainer.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <optional>

#include "ckpt/model_dir.h"
#include "ckpt/model_files.h"
#include "ckpt/ranks_checkpoint.h"
#include "dist/collectives.h"
#include "gpu/trainer.h"
#include "pipeline/data.h"
#include "pipeline/evaluator.h"
#include "pipeline/file_reshard.h"
#include "pipeline/pass_reader.h"
#include "pipeline/sharded_pass.h"
#include "pipeline/stage_runner.h"
#include "pipeline/stages.h"
#include "pipeline/train_report.h"
#include "pipeline/train_start.h"
#include "table/ssd_store.h"
#include "util/cleanup.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

// A distributed job's report: this rank's figures become the job's — examples, keys and
// rows added up over the ranks, the progressive metrics of every rank's predictions, the
// global batch — and rank 0's report lists every rank's own (examples, stage times, bytes
// exchanged) under "per_rank".
Status GlobalReport(Comm* comm, const JobConfig& job, const PassStages& stages,
                    nlohmann::json* report) {
  const int n = comm->size();
  nlohmann::json mine = {{"rank", comm->rank()},
                         {"examples", (*report)["examples"]},
                         {"seconds", (*report)["seconds"]},
                         {"keys", (*report)["keys"]},
                         {"stages", (*report)["stages"]},
                         {"exchange_bytes_sent", stages.exchange_bytes_sent()},
                         {"exchange_bytes_received", stages.exchange_bytes_received()},
                         {"exchange_seconds", stages.exchange_seconds()},
                         {"peak_rss_bytes", PeakRssBytes()}};
  (*report)["ranks"] = n;
  (*report)["rank"] = comm->rank();
  (*report)["batch_size"] = job.train.batch_size * n;
  (*report)["exchange"] = {{"bytes_sent", stages.exchange_bytes_sent()},
                           {"bytes_received", stages.exchange_bytes_received()},
                           {"seconds", stages.exchange_seconds()}};
  const char* summed[] = {"examples",           "keys",         "keys_with_embedding",
                          "embeddings_created", "keys_shrunk",  "bytes_live",
                          "keys_in_memory",     "keys_on_disk", "job_examples"};
  std::vector<uint64_t> sums;
  for (const char* k : summed) sums.push_back((*report)[k].get<uint64_t>());
  RETURN_IF_ERROR(AllReduceSum(comm, sums.data(), sums.size()));
  for (size_t i = 0; i < sums.size(); ++i) (*report)[summed[i]] = sums[i];
  (*report)["examples_per_s"] =
      static_cast<double>(sums[0]) / std::max((*report)["seconds"].get<double>(), 1e-9);
  // The extract stage's rows over every rank (each rank extracts its own files; its busy
  // times stay in per_rank).
  uint64_t extracting = report->contains("extract") ? 1 : 0;
  RETURN_IF_ERROR(AllReduceMax(comm, &extracting, 1));
  if (extracting != 0) {
    const char* rows[] = {"chunks", "rows_in", "rows_out", "filtered", "duplicates", "bad_rows"};
    std::vector<uint64_t> x;
    for (const char* k : rows) {
      x.push_back(report->contains("extract") ? (*report)["extract"][k].get<uint64_t>() : 0);
    }
    RETURN_IF_ERROR(AllReduceSum(comm, x.data(), x.size()));
    if (report->contains("extract")) mine["extract"] = (*report)["extract"];
    for (size_t i = 0; i < x.size(); ++i) (*report)["extract"][rows[i]] = x[i];
  }
  // Rank 0 gathers the metrics and the per-rank lines.
  ASSIGN_OR_RETURN(const MetricSummary s, MergeMetricsOnRank0(comm, stages.metrics()));
  std::vector<std::string> lines(n), got;
  lines[0] = mine.dump();
  RETURN_IF_ERROR(comm->AllToAll(lines, &got));
  if (comm->rank() != 0) return Status::OK();
  (*report)["auc"] = s.AucJson();
  (*report)["logloss"] = s.logloss;
  (*report)["copc"] = s.copc;
  if (s.auc_undefined) {
    (*report)["auc_undefined"] = s.auc_undefined;
  } else {
    report->erase("auc_undefined");  // rank 0's own rows may have had one class only
  }
  nlohmann::json per_rank = nlohmann::json::array();
  for (int r = 0; r < n; ++r) per_rank.push_back(nlohmann::json::parse(got[r]));
  (*report)["per_rank"] = per_rank;
  return Status::OK();
}

// This rank's place among the ranks on its machine: Open MPI's local rank under mpirun, else
// the rank (the thread ranks of the tests share one process).
uint32_t LocalRank(const Comm& comm) {
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    return static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  }
  return static_cast<uint32_t>(comm.rank());
}

// Runs every pass from `start` (on the GPUs with device: gpu) and returns the run's report.
StatusOr<nlohmann::json> RunPasses(Env* env, const JobConfig& job, PassReader* reader,
                                   TrainStart* start, ProgressSink* sink,
                                   const std::atomic<bool>* stop, ThreadPool* pool, Comm* comm,
                                   const std::string& ranks_ckpt_dir,
                                   TrainPosition* final_position) {
  const CtrAccessor accessor(start->model->value_layout(), job.spec.table);
  std::unique_ptr<GpuTrainer> gpu;
  if (job.gpu) {
    GpuOptions go = job.gpu_options;
    go.staged_passes = job.pipeline.queue_depth + 2;  // passes between the pull and the train stage
    if (comm != nullptr) go.first_device = LocalRank(*comm) * go.gpus;
    ASSIGN_OR_RETURN(gpu, GpuTrainer::Create(start->model.get(), accessor, go, pool));
    LOG_INFO("train stage on the GPU: {}", gpu->Describe());
  }
  StageContext ctx;
  ctx.job = &job;
  ctx.reader = reader;
  ctx.table = start->table.get();
  ctx.model = start->model.get();
  ctx.accessor = &accessor;
  ctx.log = start->metrics_log.get();
  ctx.sink = sink;
  ctx.train_pool = pool;
  ctx.start = start->position;
  ctx.ckpt = start->ckpt.get();
  ctx.gpu = gpu.get();
  ctx.comm = comm;
  ctx.ranks_ckpt_dir = ranks_ckpt_dir;
  ctx.env = env;
  PassStages stages(ctx);
  ASSIGN_OR_RETURN(StageRunResult run, RunStages(&stages, job.pipeline, stop));
  *final_position = stages.Position();
  if (sink) sink->OnDone();
  if (stages.passes() > 0) {  // a run that trained no pass has no stage times to show
    LogStageTable(run.totals, run.seconds, stages.passes(), job.pipeline.enabled);
    nlohmann::json line = {{"event", "stages"},
                           {"pipelined", job.pipeline.enabled},
                           {"passes", stages.passes()},
                           {"seconds", run.seconds},
                           {"stages", StagesJson(run.totals)}};
    if (job.extractor) {
      const ExtractTotals x = job.extractor->totals();
      LogExtract(x, run.seconds, job.data.threads);
      line["extract"] = ExtractJson(x);
      line["stages"]["extract"] = {
          {"busy_seconds", x.parse_seconds + x.graph_seconds + x.assemble_seconds}};
    }
    RETURN_IF_ERROR(start->metrics_log->Write(line));
  }
  nlohmann::json report =
      TrainReport({&job, &stages, &run, start->table.get(), start->model.get(),
                   gpu ? gpu->Describe() : std::string("cpu"), *final_position});
  if (start->resumed) {
    report["resumed_from"] = CheckpointName(start->resumed->id);
    report["resume_warnings"] = start->resume_warnings;
  }
  const uint64_t row_bytes = job.StorageFor(start->model->value_layout()).ResidentRowBytes();
  report["pass_sizing"] = PassSizingJson(reader->options(), reader->sizing(), row_bytes);
  if (job.extractor) {
    const ExtractTotals x = job.extractor->totals();
    report["extract"] = ExtractJson(x);
    // In the stage table: the reader workers' extraction (as in the stages line above).
    report["stages"]["extract"] = {
        {"busy_seconds", x.parse_seconds + x.graph_seconds + x.assemble_seconds}};
  }
  // The staged passes' GPU buffers at their high-water mark (gpu.pass_memory bounds them).
  if (gpu) {
    report["gpu_staged_bytes"] = gpu->StagedBytes();
    const GpuStepStats gs = gpu->Stats();
    report["gpu"] = GpuJson(gs, run.seconds, stages.examples());
    LogGpuPhases(gs, run.seconds);
  }
  if (reader->options().window_keys > 0) {
    const PassSizingStats& z = reader->sizing();
    LOG_INFO(
        "passes sized by memory: at most {} distinct keys over {} passes in flight ({} of "
        "{} B rows) and {} of pass buffers over {} passes alive; {} passes of {} to {} "
        "examples, {} closed by the key limit, {} by the pass memory",
        reader->options().window_keys, reader->options().window_passes,
        FormatBytes(reader->options().window_keys * row_bytes), row_bytes,
        FormatBytes(reader->options().pass_memory), reader->options().memory_passes, z.passes,
        z.min_examples, z.max_examples, z.closed_by_keys, z.closed_by_memory);
  }
  if (reader->options().device_pass_bytes > 0) {
    const PassSizingStats& z = reader->sizing();
    LOG_INFO(
        "passes sized by GPU memory: at most {} a pass ({} passes staged share gpu.pass_memory); "
        "{} passes of {} to {} examples, {} closed by it",
        FormatBytes(reader->options().device_pass_bytes), job.pipeline.queue_depth + 2, z.passes,
        z.min_examples, z.max_examples, z.closed_by_device);
  }
  // An interrupted run read only part of the data; its record counts are partial.
  if (!run.interrupted) report.update(CountsJson(reader->counts()));
  if (comm != nullptr) RETURN_IF_ERROR(GlobalReport(comm, job, stages, &report));
  return report;
}

// Commits what the run trained: the final checkpoint (unless the last pass's checkpoint is
// it) and the model directory; adds the model's digest to the report.
Status CommitModel(Env* env, const JobConfig& job, TrainStart* start, const TrainPosition& position,
                   ThreadPool* pool, nlohmann::json* report) {
  SparseTable& table = *start->table;
  const CtrModel& model = *start->model;
  if (start->ckpt) {
    Stopwatch clock;
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     start->ckpt->Commit(
                         table, DensePayload(model), position,
                         [&] { return ModelDigest(table, model, pool); }, pool));
    (*report)["checkpoint"] = start->ckpt->Report();
    (*report)["checkpoint"]["final_seconds"] = clock.Seconds();
    if (!m.digest.empty()) (*report)["digest"] = m.digest;
  }
  if (!job.model_dir.empty()) {
    Stopwatch clock;
    ASSIGN_OR_RETURN(ModelManifest m, SaveModel(env, job.model_dir, job.spec, table, model,
                                                position.trained_examples, pool));
    (*report)["model_dir"] = job.model_dir;
    (*report)["generation"] = m.generation;
    (*report)["digest"] = m.digest;
    (*report)["save_seconds"] = clock.Seconds();
  } else if (!report->contains("digest")) {
    ASSIGN_OR_RETURN((*report)["digest"], ModelDigest(table, model, pool));
  }
  return Status::OK();
}

// A distributed job's commit (docs/distributed.md): the digest of the whole model (the
// ranks' sparse sums and key counts added up) and, with a model directory, one model saved
// by every rank: its shard's sparse file each, the dense file and the MANIFEST by rank 0.
Status CommitShardedModelOfRanks(Env* env, Comm* comm, const JobConfig& job,
                                 const std::string& ranks_ckpt_dir, TrainStart* start,
                                 const TrainPosition& position, ThreadPool* pool,
                                 nlohmann::json* report) {
  SparseTable& table = *start->table;
  const CtrModel& model = *start->model;
  if (start->ckpt) {  // the final checkpoint, as one process takes it
    Stopwatch clock;
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     start->ckpt->Commit(table, DensePayload(model), position, nullptr, pool));
    RETURN_IF_ERROR(CommitRanksCheckpointOf(comm, env, ranks_ckpt_dir, m.id));
    (*report)["checkpoint"] = start->ckpt->Report();
    (*report)["checkpoint"]["final_seconds"] = clock.Seconds();
  }
  ASSIGN_OR_RETURN(uint64_t sparse_sum, table.SparseDigest(pool));
  uint64_t sums[3] = {sparse_sum, table.Stats().keys, position.trained_examples};
  RETURN_IF_ERROR(AllReduceSum(comm, sums, 3));
  (*report)["digest"] = StateDigest(sums[0], sums[1], DensePayload(model));
  (*report)["ranks"] = comm->size();
  (*report)["rank"] = comm->rank();
  if (job.model_dir.empty()) return Status::OK();
  Stopwatch clock;
  // Every rank reads the committed generation before any rank can commit the next one.
  ASSIGN_OR_RETURN(uint64_t generation, NextGeneration(env, job.model_dir));
  RETURN_IF_ERROR(AllReduceMax(comm, &generation, 1));
  ASSIGN_OR_RETURN(ModelShard mine,
                   SaveModelShard(env, job.model_dir, generation, comm->rank(), table));
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(mine.Encode(), &all));
  std::string committed;  // rank 0: the digest it committed
  if (comm->rank() == 0) {
    std::vector<ModelShard> shards;
    for (const std::string& bytes : all) {
      ASSIGN_OR_RETURN(ModelShard s, ModelShard::Decode(bytes));
      shards.push_back(std::move(s));
    }
    // The job's trained examples: every rank's.
    ASSIGN_OR_RETURN(ModelManifest m,
                     CommitShardedModel(env, job.model_dir, job.spec, model, sums[2], shards));
    committed = m.digest;
  }
  // Everyone waits for the commit (and learns its digest).
  RETURN_IF_ERROR(comm->AllGather(committed, &all));
  if (all[0] != (*report)["digest"].get<std::string>()) {
    return InternalError("the saved model's digest " + all[0] + " differs from the ranks' digest " +
                         (*report)["digest"].get<std::string>());
  }
  (*report)["model_dir"] = job.model_dir;
  (*report)["generation"] = generation;
  (*report)["save_seconds"] = clock.Seconds();
  return Status::OK();
}

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

// Held-out evaluation: --eval-data, or the generated test rows. In a distributed job every
// rank evaluates its share (its files, or its blocks of the generated rows) with the rows
// looked up from their owners, and rank 0 reports the metrics over all of them.
Status EvaluateHeldOut(Env* env, const JobConfig& job, Comm* comm, TrainStart* start,
                       ThreadPool* pool, nlohmann::json* report) {
  const bool generated = IsGenerated(job.data);
  uint64_t evaluate = generated || !job.eval_paths.empty() ? 1 : 0;
  if (comm != nullptr) RETURN_IF_ERROR(AllReduceMax(comm, &evaluate, 1));
  if (evaluate == 0) return Status::OK();
  Stopwatch clock;
  DataOptions eval = job.data;
  eval.paths = job.eval_paths;
  eval.byte_share = job.eval_byte_share;
  eval.command.clear();
  std::unique_ptr<BatchReader> eval_reader;
  if (generated || !eval.paths.empty()) {
    ASSIGN_OR_RETURN(eval_reader, OpenData(env, eval, job.generated, true));
  } else {
    eval_reader = std::make_unique<NoRows>(job.spec.schema);
  }
  MetricSummary t;
  if (comm != nullptr) {
    ASSIGN_OR_RETURN(
        t, EvaluateSharded(comm, eval_reader.get(), start->table.get(), start->model.get(),
                           job.train.batch_size, job.pipeline.pass_examples,
                           // each rank's share: an owner pins the keys it owns of every chunk
                           job.EvalChunkKeys() / static_cast<uint64_t>(comm->size()), pool));
  } else {
    ASSIGN_OR_RETURN(
        t, Evaluate(eval_reader.get(), *start->table, start->model.get(), job.train.batch_size,
                    job.pipeline.pass_examples, job.EvalChunkKeys(), pool, nullptr));
  }
  (*report)["test_examples"] = t.examples;
  (*report)["test_auc"] = t.AucJson();
  if (t.auc_undefined) (*report)["test_auc_undefined"] = t.auc_undefined;
  (*report)["test_logloss"] = t.logloss;
  (*report)["test_copc"] = t.copc;
  (*report)["eval_seconds"] = clock.Seconds();
  if (generated) (*report)["oracle_auc"] = OracleAuc(job.generated);
  nlohmann::json line = t.ToJson();
  line["event"] = "test";
  return start->metrics_log->Write(line);
}

// The SSD files are this job's scratch space (the model is in the model directory) unless
// storage.keep_store asks for a cleanly closed store to inspect or reopen.
Status CloseTable(Env* env, const JobConfig& job, std::unique_ptr<SparseTable> table) {
  if (job.storage.keep_store) return table->Close();
  table.reset();
  if (job.storage.ssd.dir.empty()) return Status::OK();
  return SsdStore::RemoveFiles(env, job.storage.ssd.dir);
}

// The peak resident memory of the run split by owner (docs/storage.md, "Sizing the budget"):
// the table's peak (what storage.memory_budget bounds), the passes in flight at their peak,
// the dense model with its optimizer state, the reader's chunk buffers, and the rest (the
// allocator's slack, thread stacks, BLAS buffers, libraries, held-out evaluation). The owners'
// peaks need not coincide, so `other` is a lower bound of what is not attributed.
nlohmann::json PeakMemoryByOwner(const JobConfig& job, const CtrModel& model,
                                 const nlohmann::json& report) {
  const auto table = report["storage"]["peak_memory_bytes"].get<int64_t>();
  const auto passes = report.value("passes_peak_bytes", int64_t{0});
  // Weights and their gradients, and the optimizer's state (none for SGD).
  const DenseOptimizer& opt = model.dense_optimizer();
  const auto dense = static_cast<int64_t>(
      sizeof(float) * (2 * model.dense_params().size() + opt.m().size() + opt.v().size()));
  const auto reader = static_cast<int64_t>(2 * job.data.threads * job.data.chunk_bytes);
  const auto rss = report["peak_rss_bytes"].get<int64_t>();
  return {{"table", table},
          {"passes_in_flight", passes},
          {"dense_model", dense},
          {"reader_chunks", reader},
          {"other", rss - table - passes - dense - reader}};
}

// Before a rank's start: the checkpoint the ranks committed together (none: nullopt), after
// removing this rank's newer ones, which the others never committed. A job of another number
// of ranks is refused.
StatusOr<std::optional<RanksCheckpoint>> PrepareRanksResume(Env* env, const Comm& comm,
                                                            const JobConfig& job,
                                                            const std::string& ranks_dir) {
  StatusOr<RanksCheckpoint> c = ReadRanksCheckpoint(env, ranks_dir);
  if (!c.ok() && c.status().code() != StatusCode::kNotFound) return c.status();
  if (c.ok() && c->ranks != static_cast<uint32_t>(comm.size())) {
    if (!job.resume) return std::optional<RanksCheckpoint>();
    if (!IsGenerated(job.data) && !job.stream_plan) {
      return InternalError("a job of files resumed on another number of ranks without a plan");
    }
    // Re-sharded by ReshardFromRanks; this rank's chain of an older job of N ranks goes.
    RETURN_IF_ERROR(RemoveCheckpointsAfter(env, job.ckpt.dir, 0));
    return std::optional<RanksCheckpoint>(*c);
  }
  if (!job.resume) return c.ok() ? std::optional<RanksCheckpoint>(*c) : std::nullopt;
  RETURN_IF_ERROR(RemoveCheckpointsAfter(env, job.ckpt.dir, c.ok() ? c->id : 0));
  return c.ok() ? std::optional<RanksCheckpoint>(*c) : std::nullopt;
}

// --resume by N ranks of the checkpoint that M != N ranks committed (docs/distributed.md,
// "Checkpoints"): this rank loads the rows it owns from each of the M chains, so every row
// goes to exactly one rank, and the dense state (the same in every chain). On generated data
// its reader skips its share of the rows the M ranks trained (they are one stream whatever
// the number of ranks); on files its input is already the plan of what they had left
// (PlanResumedStream), read from its start.
Status ReshardFromRanks(Env* env, const JobConfig& job, const std::string& ranks_dir,
                        const RanksCheckpoint& c, const KeyFilter& owned, PassReader* reader,
                        ThreadPool* pool, TrainStart* start) {
  CheckpointManifest first;
  uint64_t examples = 0;
  for (uint32_t m = 0; m < c.ranks; ++m) {
    const std::string dir = RankCheckpointDir(ranks_dir, static_cast<int>(m), c.ranks);
    CheckpointManifest mf;
    RETURN_IF_ERROR(
        LoadCheckpoint(env, dir, c.id, start->table.get(), start->model.get(), pool, &mf, owned));
    if (mf.spec.ToJson() != job.spec.ToJson()) {
      return InvalidArgumentError(fmt::format(
          "cannot resume: {} in {} was written with another model spec than this job sets",
          CheckpointName(c.id), dir));
    }
    if (m == 0) first = mf;
    if (mf.position.passes != first.position.passes) {
      return CorruptionError(fmt::format("{}: the ranks' checkpoints {} hold {} and {} passes",
                                         ranks_dir, CheckpointName(c.id), first.position.passes,
                                         mf.position.passes));
    }
    examples += mf.position.examples;
  }
  start->resumed = first;
  if (job.stream_plan) {
    start->position = TrainPosition();
    start->position.passes = job.stream_plan->passes;
    start->position.grid_passes = first.position.grid_passes;
    start->position.examples = job.stream_plan->examples;
    start->position.trained_examples = job.stream_plan->examples;
    return Status::OK();
  }
  // This rank's share of the first `examples` generated rows (the ones the M ranks trained).
  const RowShare& s = job.generated.share;
  uint64_t mine = 0;
  for (uint64_t b = s.index * s.unit; b < examples; b += uint64_t{s.count} * s.unit) {
    mine += std::min(s.unit, examples - b);
  }
  start->position = TrainPosition();
  start->position.passes = first.position.passes;
  start->position.grid_passes = first.position.grid_passes;
  start->position.examples = mine;
  start->position.trained_examples = mine;
  LOG_INFO("resuming {} of {} ranks with {}: {} passes, {} examples done ({} in this rank's share)",
           CheckpointName(c.id), c.ranks, job.dist.ranks, first.position.passes, examples, mine);
  // Passes sized by memory cut other pieces on another number of ranks: skip whole grid
  // passes (a checkpoint is taken at the end of one).
  if (reader->options().agree) {
    return reader->SkipGridPasses(first.position.grid_passes, mine, /*may_end_early=*/true);
  }
  return reader->Skip(first.position.passes, mine, /*may_end_early=*/true);
}

// A job of files that resumes the checkpoint of its ranks reads a plan instead of its split
// of the files (docs/distributed.md, "Resuming files on another number of ranks"): planned now
// when another number of ranks committed it, or read back from this rank's checkpoint when
// ranks that ran such a plan did. `files`: the whole job's input files.
Status PlanResumedStream(Env* env, Comm* comm, const std::vector<std::string>& files,
                         const std::string& ranks_dir, JobConfig* job) {
  StatusOr<RanksCheckpoint> c = ReadRanksCheckpoint(env, ranks_dir);
  if (!c.ok()) return c.status().code() == StatusCode::kNotFound ? Status::OK() : c.status();
  std::optional<StreamPlan> plan;
  if (c->ranks != static_cast<uint32_t>(comm->size())) {
    ASSIGN_OR_RETURN(plan, PlanFilesReshard(env, comm, *job, files, ranks_dir, *c));
  } else {
    ASSIGN_OR_RETURN(CheckpointManifest mf, ReadCheckpointManifest(env, job->ckpt.dir, c->id));
    if (mf.settings.contains("data") && mf.settings["data"].contains("plan")) {
      ASSIGN_OR_RETURN(plan, StreamPlan::FromJson(mf.settings["data"]["plan"]));
    }
  }
  if (!plan) return Status::OK();
  job->data.paths = files;  // the schema, and the files a later resume fingerprints
  job->data.byte_share = {};
  job->data.segments = plan->segments;
  job->stream_plan = std::move(plan);
  return Status::OK();
}

// One rank's share of a distributed job (docs/distributed.md): its files, its share of every
// pass and minibatch; what is not built for several ranks yet is refused or turned off here.
// *all_files: the whole job's input files (none for generated data).
Status ShareJob(Env* env, const Comm& comm, JobConfig* job, std::string* ranks_ckpt_dir,
                std::vector<std::string>* all_files) {
  const int n = comm.size(), me = comm.rank();
  job->dist.ranks = n;
  if (job->gpu && !job->dist.owner_updates) {
    return InvalidArgumentError(
        "dist.sparse_updates: replicated is not built with device: gpu (the ranks' GPUs use "
        "owner updates: docs/distributed.md, \"GPUs across ranks\")");
  }
  if (!job->data.command.empty()) {
    return InvalidArgumentError(
        "data.command: a job of several ranks reads files (or generated data), not a command");
  }
  const uint32_t b = job->train.batch_size;
  if (b % n != 0) {
    return InvalidArgumentError(fmt::format(
        "train.batch_size: {} is not a multiple of the {} ranks (each trains an equal share "
        "of every minibatch)",
        b, n));
  }
  if (IsGenerated(job->data)) {
    // Rank r generates the blocks of b / n rows whose index mod n is r: global minibatch m is
    // rows [m b, (m + 1) b) of the generated stream, as for one process.
    job->generated.share = RowShare{static_cast<uint32_t>(me), static_cast<uint32_t>(n), b / n};
  } else {
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     ExpandDataPaths(env, job->data.paths, job->data.format));
    *all_files = files;
    if (files.size() >= static_cast<size_t>(n)) {
      // Whole files: rank r reads files i with i mod n = r.
      job->data.paths.clear();
      for (size_t i = me; i < files.size(); i += n) job->data.paths.push_back(files[i]);
    } else if (job->data.format == DataFormat::kShards) {
      return InvalidArgumentError(fmt::format(
          "data.paths: {} shard files for {} ranks; each rank reads whole shard files (files i "
          "with i mod ranks = rank), so give at least one per rank",
          files.size(), n));
    } else {
      // Fewer files than ranks: rank r reads the lines that start in part r of n equal byte
      // ranges of every file (docs/distributed.md, "Byte ranges").
      job->data.paths = files;
      job->data.byte_share = ByteShare{static_cast<uint32_t>(me), static_cast<uint32_t>(n)};
    }
  }
  // Held-out files likewise (a rank may have none: it takes part in every chunk with none).
  if (!job->eval_paths.empty()) {
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     ExpandDataPaths(env, job->eval_paths, job->data.format));
    if (files.size() >= static_cast<size_t>(n) || job->data.format == DataFormat::kShards) {
      job->eval_paths.clear();
      for (size_t i = me; i < files.size(); i += n) job->eval_paths.push_back(files[i]);
    } else {
      job->eval_paths = files;
      job->eval_byte_share = ByteShare{static_cast<uint32_t>(me), static_cast<uint32_t>(n)};
    }
  }
  job->train.batch_size = b / n;
  const uint64_t pass = job->pipeline.pass_examples / n;
  job->pipeline.pass_examples = std::max<uint64_t>(job->train.batch_size, pass);
  // Each rank's checkpoint chain in its own directory; the ranks commit together in ckpt.dir
  // (ckpt/ranks_checkpoint.h). The chain a crash may leave one checkpoint ahead keeps the one
  // before.
  if (!job->ckpt.dir.empty()) {
    *ranks_ckpt_dir = job->ckpt.dir;
    job->ckpt.dir = RankCheckpointDir(job->ckpt.dir, me, n);
    job->ckpt.keep = std::max<uint32_t>(job->ckpt.keep, 2);
  }
  // Each rank's SSD tier in its own directory (ranks may share a machine and a disk).
  if (!job->storage.ssd.dir.empty() && n > 1) {
    job->storage.ssd.dir = JoinPath(job->storage.ssd.dir, fmt::format("rank-{}-of-{}", me, n));
  }
  // Rank 0 logs to the usual metrics file, the others beside it.
  if (me > 0) {
    std::string& path = job->train.metrics_path;
    if (path.empty() && !job->model_dir.empty()) path = JoinPath(job->model_dir, "metrics.jsonl");
    if (!path.empty()) path += fmt::format(".rank{}", me);
  }
  return Status::OK();
}

}  // namespace

StatusOr<nlohmann::json> RunTrain(Env* env, JobConfig job, ProgressSink* sink,
                                  const std::atomic<bool>* stop, Comm* comm) {
  Stopwatch total_clock;
  // Validate, and learn the schema from the data.
  RETURN_IF_ERROR(job.Validate());
  if (comm != nullptr && job.train.dry_run) {
    return InvalidArgumentError("train.dry_run runs on one process (its ranks would not exchange)");
  }
  std::string ranks_ckpt_dir;
  if (comm != nullptr) {
    std::vector<std::string> files;
    RETURN_IF_ERROR(ShareJob(env, *comm, &job, &ranks_ckpt_dir, &files));
    if (job.resume && !ranks_ckpt_dir.empty() && !files.empty()) {
      RETURN_IF_ERROR(PlanResumedStream(env, comm, files, ranks_ckpt_dir, &job));
    }
  }
  if (job.features != nullptr && job.data.paths.empty() && job.data.command.empty()) {
    return InvalidArgumentError(
        "features: the job has a feature graph but no main view: set data.paths (or "
        "data.command) to the main view's files (generated data has no views)");
  }
  // model.shared_slots: the readers key a group's slots with one seed.
  job.data.key_slots = job.spec.model.KeySlotMap();
  RETURN_IF_ERROR(AttachFeatures(env, &job));  // the extract stage: side views loaded
  if (job.gpu) RETURN_IF_ERROR(ResolveGpuPassMemory(&job.gpu_options));
  job.data.cancel = stop;  // a stalled data.command or standard input gives way to Ctrl-C
  PassReaderOptions pass_options = job.PassOptions();
  if (comm != nullptr && pass_options.window_keys + pass_options.device_pass_bytes > 0) {
    // Passes sized by memory: the ranks agree on every cut (docs/distributed.md, "Pass sizing").
    pass_options.agree = [read = comm->channel(kReadChannel)](uint64_t* v, size_t n) {
      return AllReduceSum(read, v, n);
    };
    pass_options.owners = static_cast<uint32_t>(comm->size());
    pass_options.owner_of = [n = comm->size()](uint64_t key) {
      return static_cast<uint32_t>(OwnerOf(key, n));
    };
  }
  PassReader reader([&] { return OpenData(env, job.data, job.generated, false); },
                    std::move(pass_options));
  RETURN_IF_ERROR(reader.Open());
  job.spec.schema = reader.schema();
  if (std::string e = job.spec.model.SharedSlotsError(job.spec.schema.num_slots); !e.empty()) {
    return InvalidArgumentError(e);
  }
  if (std::string e = TowersError(job.spec.model, job.spec.schema.num_dense); !e.empty()) {
    return InvalidArgumentError(e);
  }
  if (std::string e = job.spec.model.SlotDimsError(job.spec.schema.num_slots); !e.empty()) {
    return InvalidArgumentError(e);
  }
  if (!job.spec.model.bottom_mlp.empty() && job.spec.schema.num_dense == 0) {
    return InvalidArgumentError(
        "model.bottom_mlp is set but the data has no dense features (the bottom MLP's input)");
  }
  job.spec.table.seed = job.train.seed;
  ThreadPool pool(job.train.threads);

  // On any error the SSD files, this job's scratch, are deleted once the table is gone
  // (declared before `start`, so it runs after the table's destruction): a full disk is given
  // back. A kept store (storage.keep_store) is left.
  Cleanup remove_scratch([&] {
    if (!job.storage.keep_store && !job.storage.ssd.dir.empty()) {
      SsdStore::RemoveFiles(env, job.storage.ssd.dir).IgnoreError();
    }
  });

  // Start: resume, continue the model in model_dir, or a new model.
  KeyFilter owned;  // a rank continues a model with the rows it owns
  if (comm != nullptr) {
    owned = [n = comm->size(), me = comm->rank()](uint64_t key) { return OwnerOf(key, n) == me; };
  }
  std::optional<RanksCheckpoint> ranks_ckpt;
  if (!ranks_ckpt_dir.empty()) {
    ASSIGN_OR_RETURN(ranks_ckpt, PrepareRanksResume(env, *comm, job, ranks_ckpt_dir));
  }
  const bool reshard = ranks_ckpt && job.resume && ranks_ckpt->ranks != uint32_t(job.dist.ranks);
  JobConfig start_job = job;
  if (reshard) {  // a new model here, then the M ranks' rows and state into it
    start_job.resume = false;
    start_job.fresh = true;
  }
  ASSIGN_OR_RETURN(TrainStart start, StartTrain(env, start_job, &reader, &pool, owned));
  if (reshard) {
    RETURN_IF_ERROR(
        ReshardFromRanks(env, job, ranks_ckpt_dir, *ranks_ckpt, owned, &reader, &pool, &start));
  } else if (ranks_ckpt && job.resume && (!start.resumed || start.resumed->id != ranks_ckpt->id)) {
    return InternalError(fmt::format("rank {} resumed from {}, but the ranks committed {} together",
                                     comm->rank(),
                                     start.resumed ? CheckpointName(start.resumed->id) : "nothing",
                                     CheckpointName(ranks_ckpt->id)));
  }

  // Run pass by pass: nothing is committed unless every stage succeeded (a read error or too
  // many malformed records included).
  TrainPosition position;
  ASSIGN_OR_RETURN(nlohmann::json report, RunPasses(env, job, &reader, &start, sink, stop, &pool,
                                                    comm, ranks_ckpt_dir, &position));

  // A job that trained nothing has no model to save (an interrupted one stops as usual).
  // (A rank of several may have had none: the job's count decides, summed over the ranks.)
  const uint64_t trained =
      comm != nullptr ? report["job_examples"].get<uint64_t>() : position.examples;
  if (trained == 0 && !report["interrupted"].get<bool>()) {
    return FailedPreconditionError(fmt::format(
        "no examples in the input ({} records malformed and skipped): nothing was trained and "
        "nothing is saved",
        report.value("records_malformed", uint64_t{0})));
  }

  // Finish: commit, evaluate (not after Ctrl-C), close. Interrupted before this run trained
  // anything, it commits nothing: the model and the checkpoints are as they were (no empty
  // model where there was none).
  const bool interrupted = report["interrupted"].get<bool>();
  report["saved"] = !(interrupted && report["examples"].get<uint64_t>() == 0) && !job.train.dry_run;
  if (job.train.dry_run) report["dry_run"] = true;  // nothing trained, saved or evaluated
  if (report["saved"].get<bool>()) {
    if (comm != nullptr) {
      RETURN_IF_ERROR(CommitShardedModelOfRanks(env, comm, job, ranks_ckpt_dir, &start, position,
                                                &pool, &report));
    } else {
      RETURN_IF_ERROR(CommitModel(env, job, &start, position, &pool, &report));
    }
    if (!interrupted) RETURN_IF_ERROR(EvaluateHeldOut(env, job, comm, &start, &pool, &report));
  }
  if (report["saved"].get<bool>()) {
    // The report closes the metrics log too (`ctrbox report` draws memory and totals from
    // it), with the peak memory so far: the table's close comes after. A run that saved
    // nothing writes nothing.
    nlohmann::json last = report;
    last["event"] = "report";
    last["peak_rss_bytes"] = PeakRssBytes();
    last["memory_peak_by_owner"] = PeakMemoryByOwner(job, *start.model, last);
    RETURN_IF_ERROR(start.metrics_log->Write(last));
  }
  RETURN_IF_ERROR(start.metrics_log->Close());
  RETURN_IF_ERROR(CloseTable(env, job, std::move(start.table)));
  remove_scratch.Cancel();
  report["total_seconds"] = total_clock.Seconds();
  report["peak_rss_bytes"] = PeakRssBytes();
  report["memory_peak_by_owner"] = PeakMemoryByOwner(job, *start.model, report);
  return report;
}

}  // namespace ctrbox
