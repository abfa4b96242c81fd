// A distributed job's part of RunTrain (jobs/train_steps.h): the job shared and checked on
// every rank, a resume on the same or another number of ranks, the job's report over the ranks.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>

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
#include "util/json_text.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox::train_steps {

// A distributed job's report: this rank's figures become the job's — examples, keys and
// rows added up over the ranks, the progressive metrics of every rank's predictions, the
// global batch — and rank 0's report lists every rank's own (examples, stage times, bytes
// exchanged) under "per_rank".
Status GlobalReport(Comm* comm, const JobConfig& job, const PassStages& stages,
                    TrainReport* report) {
  const int n = comm->size();
  nlohmann::json mine = {{"rank", comm->rank()},
                         {"examples", report->examples},
                         {"seconds", report->seconds},
                         {"keys", report->keys},
                         {"stages", StagesJson(report->stages)},
                         {"exchange_bytes_sent", stages.exchange_bytes_sent()},
                         {"exchange_bytes_received", stages.exchange_bytes_received()},
                         {"exchange_seconds", stages.exchange_seconds()},
                         {"peak_rss_bytes", PeakRssBytes()}};
  if (report->extract_busy_seconds) {
    mine["stages"]["extract"] = {{"busy_seconds", *report->extract_busy_seconds}};
  }
  report->ranks = TrainReport::Ranks{n,
                                     comm->rank(),
                                     stages.exchange_bytes_sent(),
                                     stages.exchange_bytes_received(),
                                     stages.exchange_seconds(),
                                     {}};
  report->batch_size = uint64_t{job.train.batch_size} * n;
  TrainReport& r = *report;
  uint64_t* summed[] = {&r.examples,           &r.keys,         &r.keys_with_embedding,
                        &r.embeddings_created, &r.keys_shrunk,  &r.bytes_live,
                        &r.keys_in_memory,     &r.keys_on_disk, &r.job_examples};
  std::vector<uint64_t> sums;
  for (const uint64_t* v : summed) sums.push_back(*v);
  RETURN_IF_ERROR(AllReduceSum(comm, sums.data(), sums.size()));
  for (size_t i = 0; i < sums.size(); ++i) *summed[i] = sums[i];
  r.examples_per_s = static_cast<double>(r.examples) / std::max(r.seconds, 1e-9);
  // The extract stage's rows over every rank (each rank extracts its own files; its busy
  // times stay in per_rank).
  uint64_t extracting = r.extract ? 1 : 0;
  RETURN_IF_ERROR(AllReduceMax(comm, &extracting, 1));
  if (extracting != 0) {
    if (r.extract) mine["extract"] = ExtractJson(*r.extract);
    if (!r.extract) r.extract.emplace();
    ExtractTotals& x = *r.extract;
    uint64_t rows[] = {x.chunks, x.rows_in, x.rows_out, x.filtered, x.duplicates, x.bad_rows};
    RETURN_IF_ERROR(AllReduceSum(comm, rows, std::size(rows)));
    x.chunks = rows[0];
    x.rows_in = rows[1];
    x.rows_out = rows[2];
    x.filtered = rows[3];
    x.duplicates = rows[4];
    x.bad_rows = rows[5];
  }
  // Rank 0 gathers the metrics and the per-rank lines.
  ASSIGN_OR_RETURN(const MetricSummary s, MergeMetricsOnRank0(comm, stages.metrics()));
  std::vector<std::string> lines(n), got;
  lines[0] = JsonText(mine);
  RETURN_IF_ERROR(comm->AllToAll(lines, &got));
  if (comm->rank() != 0) return Status::OK();
  // (rank 0's own rows may have had one class only: the merged metrics decide)
  r.metrics.auc = s.auc;
  r.metrics.auc_undefined = s.auc_undefined;
  r.metrics.logloss = s.logloss;
  r.metrics.copc = s.copc;
  for (int k = 0; k < n; ++k) r.ranks->per_rank.push_back(nlohmann::json::parse(got[k]));
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
    if (!IsGenerated(job.data) && !job.segment_plan && !job.file_share) {
      return InternalError("a job of files resumed on another number of ranks without a plan");
    }
    // Repartitioned by RepartitionFromRanks; this rank's chain of an older job of N ranks goes.
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
// the number of ranks), as on files read by share (JobConfig::file_share); on other files its
// input is already the plan of what they had left (PlanResumedSegments), read from its start.
Status RepartitionFromRanks(Env* env, const JobConfig& job, const std::string& ranks_dir,
                            const RanksCheckpoint& c, const KeyFilter& owned, PassReader* reader,
                            ThreadPool* pool, TrainStart* start) {
  CheckpointManifest first;
  uint64_t examples = 0;
  ASSIGN_OR_RETURN(const nlohmann::json settings, ResultSettings(env, job));
  for (uint32_t m = 0; m < c.ranks; ++m) {
    const std::string dir = RankCheckpointDir(ranks_dir, static_cast<int>(m), c.ranks);
    // The settings first, as a resume on the same ranks checks them: another dimension or
    // batch is named as such, before any row is read.
    ASSIGN_OR_RETURN(const CheckpointManifest written, ReadCheckpointManifest(env, dir, c.id));
    const std::string why =
        ResumeMismatch(written, job.spec, settings, c.ranks, static_cast<uint32_t>(job.dist.ranks));
    if (!why.empty()) {
      return InvalidArgumentError(
          fmt::format("cannot resume the checkpoint of {} ranks in {} on {}: {}", c.ranks,
                      ranks_dir, job.dist.ranks, why));
    }
    CheckpointManifest mf;
    RETURN_IF_ERROR(
        LoadCheckpoint(env, dir, c.id, start->table.get(), start->model.get(), pool, &mf, owned));
    if (m == 0) first = mf;
    if (mf.position.passes != first.position.passes) {
      return CorruptionError(fmt::format("{}: the ranks' checkpoints {} hold {} and {} passes",
                                         ranks_dir, CheckpointName(c.id), first.position.passes,
                                         mf.position.passes));
    }
    examples += mf.position.examples;
  }
  start->resumed = first;
  if (job.segment_plan) {
    start->position = TrainPosition();
    start->position.passes = job.segment_plan->passes;
    start->position.grid_passes = first.position.grid_passes;
    start->position.examples = job.segment_plan->examples;
    start->position.trained_examples = job.segment_plan->examples;
    return Status::OK();
  }
  // This rank's share of the first `examples` rows of the stream (the ones the M ranks
  // trained): generated, or every file's rows read in order (train.deterministic). Each epoch
  // starts the shares anew, so past the first epoch it is what the skipped passes hold.
  const RowShare s = job.file_share.value_or(job.generated.share);
  std::optional<uint64_t> mine;
  if (job.train.epochs <= 1) {
    mine = 0;
    for (uint64_t b = s.index * s.unit; b < examples; b += uint64_t{s.count} * s.unit) {
      *mine += std::min(s.unit, examples - b);
    }
  }
  // Passes sized by memory cut other pieces on another number of ranks: skip whole grid
  // passes (a checkpoint is taken at the end of one).
  uint64_t seen = 0;
  if (reader->options().agree) {
    RETURN_IF_ERROR(reader->SkipGridPasses(first.position.grid_passes, mine,
                                           /*may_end_early=*/true, &seen));
  } else {
    RETURN_IF_ERROR(reader->Skip(first.position.passes, mine, /*may_end_early=*/true, &seen));
  }
  start->position = TrainPosition();
  start->position.passes = first.position.passes;
  start->position.grid_passes = first.position.grid_passes;
  start->position.examples = seen;
  start->position.trained_examples = seen;
  LOG_INFO("resuming {} of {} ranks with {}: {} passes, {} examples done ({} in this rank's share)",
           CheckpointName(c.id), c.ranks, job.dist.ranks, first.position.passes, examples, seen);
  return Status::OK();
}

// A job of files that resumes the checkpoint of its ranks reads a plan instead of its split
// of the files (docs/distributed.md, "Resuming files on another number of ranks"): planned now
// when another number of ranks committed it, or read back from this rank's checkpoint when
// ranks that ran such a plan did. `files`: the whole job's input files.
Status PlanResumedSegments(Env* env, Comm* comm, const std::vector<std::string>& files,
                           const std::string& ranks_dir, JobConfig* job) {
  // Every rank reads every file and skips its share of what was trained, as generated data.
  if (job->file_share) return Status::OK();
  StatusOr<RanksCheckpoint> c = ReadRanksCheckpoint(env, ranks_dir);
  if (!c.ok()) return c.status().code() == StatusCode::kNotFound ? Status::OK() : c.status();
  std::optional<SegmentPlan> plan;
  if (c->ranks != static_cast<uint32_t>(comm->size())) {
    ASSIGN_OR_RETURN(plan, PlanFileShares(env, comm, *job, files, ranks_dir, *c));
  } else {
    ASSIGN_OR_RETURN(CheckpointManifest mf, ReadCheckpointManifest(env, job->ckpt.dir, c->id));
    if (mf.settings.contains("data") && mf.settings["data"].contains("plan")) {
      ASSIGN_OR_RETURN(plan, SegmentPlan::FromJson(mf.settings["data"]["plan"]));
    }
  }
  if (!plan) return Status::OK();
  job->data.paths = files;  // the schema, and the files a later resume fingerprints
  job->data.byte_share = {};
  job->data.segments = plan->segments;
  job->segment_plan = std::move(plan);
  return Status::OK();
}

Status CheckRanksRunOneJob(Comm* comm, const JobConfig& job) {
  nlohmann::json mine(job.settings_given);
  if (job.features != nullptr) {
    mine["features (the graph's fingerprint)"] =
        fmt::format("{:016x}", job.features->Fingerprint());
  }
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(JsonText(mine), &all));
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; })) {
    return Status::OK();
  }
  std::vector<nlohmann::json> ranks;
  std::set<std::string> keys;
  for (const std::string& s : all) {
    ranks.push_back(nlohmann::json::parse(s));
    for (const auto& [key, value] : ranks.back().items()) keys.insert(key);
  }
  std::string differ;
  for (const std::string& key : keys) {
    std::vector<std::string> values;
    for (const nlohmann::json& r : ranks) {
      values.push_back(r.contains(key) ? r[key].get<std::string>() : "not set");
    }
    if (std::all_of(values.begin(), values.end(), [&](const auto& v) { return v == values[0]; })) {
      continue;
    }
    std::string per_rank;
    for (size_t i = 0; i < values.size(); ++i) {
      per_rank += fmt::format("{}rank {}: {}", i ? ", " : "", i, values[i]);
    }
    differ += fmt::format("{}{} ({})", differ.empty() ? "" : "; ", key, per_rank);
  }
  return InvalidArgumentError(fmt::format(
      "the ranks were started with different jobs, and every rank must run the same one (the "
      "same job file, --set and flags): {}",
      differ));
}

Status CheckRanksReadOneSchema(Comm* comm, const Schema& schema) {
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(
      fmt::format("{} slots and {} dense", schema.num_slots, schema.num_dense), &all));
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) {
      return InvalidArgumentError(
          fmt::format("the ranks read data of different schemas: rank 0's has {}, rank {}'s {}",
                      all[0], r, all[r]));
    }
  }
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
  // train.deterministic with canonical sums: one process's model on any n. Every rank then
  // reads the whole input and keeps its share of each global minibatch, as the generator
  // makes it for generated data.
  const bool canonical = job->train.deterministic && CanonicalDevice(*job) && CanonicalRanks(n, b);
  if (job->train.deterministic && me == 0 && !canonical) {
    LOG_WARNING(
        "train.deterministic on {} ranks{}: the same model run after run, not the one process's "
        "model (that takes the CPU train stage or at most {} GPUs per rank, and a number of ranks "
        "dividing the {} sum blocks of train.batch_size {}: docs/distributed.md, \"The same "
        "model on any number of ranks\")",
        n, CanonicalDevice(*job) ? "" : " with more GPUs per rank", kMaxCanonicalGpus,
        CtrModel::SumBlocksFor(b), b);
  }
  const RowShare share{static_cast<uint32_t>(me), static_cast<uint32_t>(n), b / n};
  if (IsGenerated(job->data)) {
    // Rank r generates the blocks of b / n rows whose index mod n is r: global minibatch m is
    // rows [m b, (m + 1) b) of the generated stream, as for one process.
    job->generated.share = share;
  } else {
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     ExpandDataPaths(env, job->data.paths, job->data.format));
    *all_files = files;
    if (canonical) {
      // Every file, every row parsed; the pass reader keeps this rank's blocks (io/row_share.h).
      job->data.paths = files;
      job->file_share = share;
      if (me == 0 && n > 1) {
        LOG_INFO(
            "train.deterministic on {} ranks reading files: every rank reads all {} files and "
            "trains its share of each global minibatch (docs/distributed.md, \"The same model "
            "on any number of ranks\")",
            n, files.size());
      }
    } else if (files.size() >= static_cast<size_t>(n)) {
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

}  // namespace ctrbox::train_steps
