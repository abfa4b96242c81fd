#include "jobs/trainer.h"

#include <fmt/format.h>

#include <algorithm>
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
#include "jobs/job_frame.h"
#include "jobs/sizing.h"
#include "jobs/train_report.h"
#include "jobs/train_start.h"
#include "jobs/train_steps.h"
#include "pipeline/pass_reader.h"
#include "pipeline/rank_pass.h"
#include "pipeline/stage_runner.h"
#include "pipeline/stages.h"
#include "util/dir_lock.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace train_steps {

StatusOr<PassesRun> RunPasses(Env* env, const JobConfig& job, PassReader* reader, TrainStart* start,
                              ProgressSink* sink, const std::atomic<bool>* stop, ThreadPool* pool,
                              Comm* comm, const std::string& ranks_ckpt_dir,
                              const PushObserver& on_push) {
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
  ctx.options = job.StageOptions();
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
  ctx.on_push = on_push;
  PassStages stages(ctx);
  ASSIGN_OR_RETURN(StageRunResult run, RunStages(&stages, job.pipeline, stop));
  PassesRun out;
  out.position = stages.Position();
  out.interrupted = run.interrupted;
  if (sink) sink->OnDone();
  if (stages.passes() > 0) {  // a run that trained no pass has no stage times to show
    LogStageTable(run.totals, run.seconds, stages.passes(), job.pipeline.enabled);
    nlohmann::json line = {{"event", "stages"},
                           {"pipelined", job.pipeline.enabled},
                           {"passes", stages.passes()},
                           {"seconds", run.seconds},
                           {"stages", StagesJson(run.totals)}};
    if (job.extractor) {
      const ExtractTotals x = job.extractor->totals().Since(start->extracted_before);
      LogExtract(x, run.seconds, job.data.threads, reader->counts().bad_total());
      line["extract"] = ExtractJson(x);
      line["stages"]["extract"] = {
          {"busy_seconds", x.parse_seconds + x.graph_seconds + x.assemble_seconds}};
    }
    RETURN_IF_ERROR(start->metrics_log->Write(line));
  }
  TrainReport report = ReportOfRun({&job, &stages, &run, start->table.get(), start->model.get(),
                                    gpu ? gpu->Describe() : std::string("cpu"), out.position});
  if (start->resumed) {
    report.resumed_from = CheckpointName(start->resumed->id);
    report.resume_warnings = start->resume_warnings;
  }
  const uint64_t row_bytes = job.StorageFor(start->model->value_layout()).ResidentRowBytes();
  report.pass_sizing = PassSizingJson(reader->options(), reader->sizing(), row_bytes);
  if (job.extractor) {
    const ExtractTotals x = job.extractor->totals().Since(start->extracted_before);
    report.extract = x;
    // In the stage table: the reader workers' extraction (as in the stages line above).
    report.extract_busy_seconds = x.parse_seconds + x.graph_seconds + x.assemble_seconds;
  }
  // The staged passes' GPU buffers at their high-water mark (gpu.staged_memory bounds them).
  if (gpu) {
    report.gpu = TrainReport::Gpu{gpu->Stats(), gpu->StagedBytes(), run.seconds, stages.examples()};
    LogGpuPhases(report.gpu->stats, run.seconds);
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
        "passes sized by GPU memory: at most {} a pass ({} passes staged share gpu.staged_memory); "
        "{} passes of {} to {} examples, {} closed by it",
        FormatBytes(reader->options().device_pass_bytes), job.pipeline.queue_depth + 2, z.passes,
        z.min_examples, z.max_examples, z.closed_by_device);
  }
  // An interrupted run read only part of the data; its record counts are partial.
  if (!run.interrupted) report.counts = reader->counts();
  if (comm != nullptr) RETURN_IF_ERROR(GlobalReport(comm, job, stages, &report));
  out.examples = report.examples;
  out.job_examples = comm != nullptr ? report.job_examples : out.position.examples;
  out.records_malformed = report.counts ? report.counts->bad_total() : 0;
  out.report = std::move(report);
  return out;
}

namespace {

// A job of one process on a ckpt.dir that ranks committed together (ckpt.dir/RANKS): it would
// neither resume it nor see it (the ranks' chains are in their own directories), so it is
// refused unless --fresh starts over.
Status CheckNoRanksCheckpoint(Env* env, const JobConfig& job) {
  if (job.ckpt.dir.empty() || job.fresh) return Status::OK();
  StatusOr<RanksCheckpoint> ranks = ReadRanksCheckpoint(env, job.ckpt.dir);
  if (ranks.status().code() == StatusCode::kNotFound) return Status::OK();
  RETURN_IF_ERROR(ranks.status());
  if (job.stream.enabled()) {  // a stream continues on the ranks that wrote it (no re-shard)
    return FailedPreconditionError(fmt::format(
        "ckpt.dir {} holds a stream job of {} ranks (its RANKS file): continue it on {} ranks "
        "(mpirun -np {}, or --local-ranks {}), or start a new stream with --fresh",
        job.ckpt.dir, ranks->ranks, ranks->ranks, ranks->ranks, ranks->ranks));
  }
  return FailedPreconditionError(fmt::format(
      "ckpt.dir {} holds {} of a job of {} ranks (its RANKS file): {} it with {} ranks (mpirun "
      "-np {}, or --local-ranks {}; another number of ranks under mpirun re-shards it), or "
      "start over with --fresh",
      job.ckpt.dir, CheckpointName(ranks->id), ranks->ranks, job.resume ? "resume" : "--resume",
      ranks->ranks, ranks->ranks, ranks->ranks));
}

}  // namespace

// The job as it will run: validated, shared among the ranks (and their resumed stream
// planned), its features attached and its GPU memory resolved.
Status PrepareJob(Env* env, Comm* comm, const std::atomic<bool>* stop, JobData data, JobConfig* job,
                  std::string* ranks_ckpt_dir) {
  // (Validated with the ranks' count: what is not built for ranks is refused before anything
  // is written.)
  if (comm != nullptr) job->dist.ranks = comm->size();
  RETURN_IF_ERROR(job->Validate());
  if (comm != nullptr && job->train.dry_run) {
    return InvalidArgumentError("train.dry_run runs on one process (its ranks would not exchange)");
  }
  if (comm == nullptr) RETURN_IF_ERROR(CheckNoRanksCheckpoint(env, *job));
  if (comm != nullptr) RETURN_IF_ERROR(CheckRanksRunOneJob(comm, *job));
  // libsvm/libfm rows of one-hot fields pooled into one slot (the default): said, with the key
  // that gives each field its slot.
  if ((job->data.format == DataFormat::kLibfm || job->data.format == DataFormat::kLibsvm) &&
      job->data.slot_from == SlotFrom::kOne && !job->settings_given.contains("data.slot_from") &&
      job->features == nullptr) {
    if (StatusOr<uint32_t> k = OneHotFields(env, job->data); k.ok() && *k > 0) {
      LOG_INFO(
          "every row of {} has {} one-hot features, a feature per field: they go into one "
          "slot (data.slot_from: one, the default); data.slot_from: position gives each field "
          "its own slot, as libFM's field-aware files mean",
          job->data.paths[0], *k);
    }
  }
  // The job's batch (before the ranks divide it), from the data when the job leaves it.
  RETURN_IF_ERROR(SizeToTheData(env, comm != nullptr ? comm->size() : 1, job));
  // Canonical sums: passes of whole global minibatches, so that a pass's last minibatch holds
  // the same rows on any number of ranks (each rank's pass is its share of the pass).
  const uint64_t batch = job->train.batch_size, pass = job->pipeline.pass_examples;
  if (job->train.deterministic && pass % batch != 0) {
    job->pipeline.pass_examples = std::max(batch, pass - pass % batch);
    LOG_INFO(
        "pipeline.pass_examples {} for {}: whole minibatches of train.batch_size {} "
        "(train.deterministic: docs/distributed.md, \"The same model on any number of ranks\")",
        job->pipeline.pass_examples, pass, batch);
  }
  // data.slot_from: position with data.num_slots 0: counted once, from the job's first file
  // (not each rank's, not at every reader's open), and said.
  if (job->data.slot_from == SlotFrom::kPosition && job->data.num_slots == 0 &&
      job->features == nullptr) {
    ASSIGN_OR_RETURN(const Schema schema, ResolveSchema(env, job->data));
    job->data.num_slots = schema.num_slots;
    LOG_INFO(
        "data.num_slots {}: the most features of a row in the first 64 KB (data.slot_from: "
        "position); set it to choose",
        schema.num_slots);
  }
  if (comm != nullptr) {
    std::vector<std::string> files;
    RETURN_IF_ERROR(ShareJob(env, *comm, job, ranks_ckpt_dir, &files));
    // (A stream job's position is its partitions, not a plan of files.)
    if (job->resume && !ranks_ckpt_dir->empty() && !files.empty() && !job->stream.enabled()) {
      RETURN_IF_ERROR(PlanResumedSegments(env, comm, files, *ranks_ckpt_dir, job));
    }
  }
  const bool no_files = job->data.paths.empty() && job->data.command.empty();
  if (job->features != nullptr && no_files && data == JobData::kFiles) {
    return InvalidArgumentError(
        "features: the job has a feature graph but no main view: set data.paths (or "
        "data.command) to the main view's files (generated data has no views)");
  }
  // model.shared_slots: the readers key a group's slots with one seed.
  job->data.key_slots = job->spec.model.KeySlotMap();
  // The extract stage, side views loaded (a resumed stream job's: at its first partition).
  if (!no_files || data == JobData::kFiles) RETURN_IF_ERROR(AttachFeatures(env, job));
  if (job->gpu) RETURN_IF_ERROR(ResolveGpuStagedMemory(&job->gpu_options));
  job->data.cancel = stop;  // a stalled data.command or standard input gives way to Ctrl-C
  return Status::OK();
}

// One job per directory (util/dir_lock.h): the directories this job writes, held until it
// ends: the model directory and the ranks' checkpoint directory (rank 0), this rank's
// checkpoint chain and SSD tier (the table then takes the SSD directory as held).
Status HoldJobDirs(Env* env, const Comm* comm, const std::string& ranks_ckpt_dir, JobConfig* job,
                   DirLocks* held) {
  if (comm == nullptr || comm->rank() == 0) {
    RETURN_IF_ERROR(held->Add(env, job->model_dir, "the model directory"));
    RETURN_IF_ERROR(held->Add(env, ranks_ckpt_dir, "ckpt.dir"));
  }
  RETURN_IF_ERROR(held->Add(env, job->ckpt.dir, "ckpt.dir"));
  if (!job->storage.ssd.dir.empty()) {
    RETURN_IF_ERROR(held->Add(env, job->storage.ssd.dir, "storage.ssd_dir"));
    job->storage.dir_held = true;
  }
  return Status::OK();
}

// How the reader cuts passes; with passes sized by memory the ranks agree on every cut
// (docs/distributed.md, "Pass sizing").
PassReaderOptions PassOptionsOnRanks(const JobConfig& job, Comm* comm) {
  PassReaderOptions options =
      job.PassOptions(comm != nullptr ? static_cast<uint32_t>(comm->size()) : 1);
  if (comm != nullptr && options.window_keys + options.device_pass_bytes > 0) {
    options.agree = [read = comm->channel(kReadChannel)](uint64_t* v, size_t n) {
      return AllReduceSum(read, v, n);
    };
    options.owners = static_cast<uint32_t>(comm->size());
    options.owner_of = [n = comm->size()](uint64_t key) {
      return static_cast<uint32_t>(OwnerOf(key, n));
    };
  }
  return options;
}

// The model the data's schema allows.
Status CheckModelAgainstSchema(const JobConfig& job) {
  const Schema& schema = job.spec.schema;
  if (std::string e = job.spec.model.SharedSlotsError(schema.num_slots); !e.empty()) {
    return InvalidArgumentError(e);
  }
  if (std::string e = TowersError(job.spec.model, schema.num_dense); !e.empty()) {
    return InvalidArgumentError(e);
  }
  if (std::string e = job.spec.model.SlotDimsError(schema.num_slots); !e.empty()) {
    return InvalidArgumentError(e);
  }
  if (!job.spec.model.bottom_mlp.empty() && schema.num_dense == 0) {
    return InvalidArgumentError(
        "model.bottom_mlp is set but the data has no dense features (the bottom MLP's input)");
  }
  return Status::OK();
}

CtrModel::SumOrder SumOrderOf(const JobConfig& job, const Comm* comm) {
  return comm == nullptr ? SumOrderFor(job, 1, 0)
                         : SumOrderFor(job, static_cast<uint32_t>(comm->size()),
                                       static_cast<uint32_t>(comm->rank()));
}

// Start: resume, continue the model in model_dir, or a new model; on ranks resumed from
// another number of ranks, a new model with the rows this rank owns now.
StatusOr<TrainStart> StartOnRanks(Env* env, const JobConfig& job, Comm* comm,
                                  const std::string& ranks_ckpt_dir, PassReader* reader,
                                  ThreadPool* pool) {
  KeyFilter owned;  // a rank continues a model with the rows it owns
  if (comm != nullptr) {
    owned = [n = comm->size(), me = comm->rank()](uint64_t key) { return OwnerOf(key, n) == me; };
  }
  std::optional<RanksCheckpoint> ranks_ckpt;
  if (!ranks_ckpt_dir.empty()) {
    ASSIGN_OR_RETURN(ranks_ckpt, PrepareRanksResume(env, *comm, job, ranks_ckpt_dir));
  }
  const bool repartition =
      ranks_ckpt && job.resume && ranks_ckpt->ranks != uint32_t(job.dist.ranks);
  JobConfig start_job = job;
  if (repartition) {  // a new model here, then the M ranks' rows and state into it
    start_job.resume = false;
    start_job.fresh = true;
  }
  ASSIGN_OR_RETURN(TrainStart start, StartTrain(env, start_job, reader, pool, owned));
  if (repartition) {
    RETURN_IF_ERROR(
        RepartitionFromRanks(env, job, ranks_ckpt_dir, *ranks_ckpt, owned, reader, pool, &start));
  } else if (ranks_ckpt && job.resume && (!start.resumed || start.resumed->id != ranks_ckpt->id)) {
    return InternalError(fmt::format("rank {} resumed from {}, but the ranks committed {} together",
                                     comm->rank(),
                                     start.resumed ? CheckpointName(start.resumed->id) : "nothing",
                                     CheckpointName(ranks_ckpt->id)));
  }
  start.model->set_sum_order(SumOrderOf(job, comm));
  return start;
}

}  // namespace train_steps

namespace {

using namespace train_steps;  // NOLINT: the job's own steps

// Finish: commit, evaluate (not after Ctrl-C), and close the metrics log with the report.
// Interrupted before this run trained anything, it commits nothing: the model and the
// checkpoints are as they were (no empty model where there was none).
Status FinishRun(Env* env, const JobConfig& job, Comm* comm, const std::string& ranks_ckpt_dir,
                 const PassesRun& run, TrainStart* start, ThreadPool* pool, TrainReport* report) {
  const bool saved = !(run.interrupted && run.examples == 0) && !job.train.dry_run;
  report->saved = saved;
  report->dry_run = job.train.dry_run;  // nothing trained, saved or evaluated
  if (saved) {
    if (comm != nullptr) {
      RETURN_IF_ERROR(
          CommitModelOfRanks(env, comm, job, ranks_ckpt_dir, start, run.position, pool, report));
    } else {
      RETURN_IF_ERROR(CommitModel(env, job, start, run.position, pool, report));
    }
    if (!run.interrupted) {
      // (The model is committed already: an error of the test data says so, and where.)
      if (Status s = EvaluateHeldOut(env, job, comm, start, pool, report); !s.ok()) {
        return Status(s.code(),
                      fmt::format("{} (the trained model was saved before the test data was "
                                  "scored: {}{}; `ctrbox eval` scores it once the data is fixed)",
                                  s.message(), report->model_dir.value_or("ckpt.dir"),
                                  report->digest ? ", digest " + *report->digest : ""));
      }
    }
    ProbeTierDisk(env, job, comm, report);
    // The report closes the metrics log too (`ctrbox report` draws memory and totals from
    // it), with the peak memory so far: the table's close comes after. A run that saved
    // nothing writes nothing.
    TrainReport last = *report;
    last.peak_rss_bytes = std::max(PeakRssBytes(), last.memory_at_peak.rss);
    last.memory_peak_by_owner = PeakMemoryByOwner(job, *start->model, last);
    last.memory_box = MemoryBoxJson(job);
    nlohmann::json line = last.ToJson();
    line["event"] = "report";
    RETURN_IF_ERROR(start->metrics_log->Write(line));
  }
  return start->metrics_log->Close();
}

}  // namespace

StatusOr<TrainReport> RunTrain(Env* env, JobConfig job, ProgressSink* sink,
                               const std::atomic<bool>* stop, Comm* comm) {
  if (job.stream.enabled()) {
    return InternalError("RunTrain was given a stream job (stream.root): RunStream runs those");
  }
  JobFrame frame(env, comm, stop, &job);
  // Validate, and learn the schema from the data.
  RETURN_IF_ERROR(frame.Prepare(JobData::kFiles));
  PassReader reader([&] { return OpenData(env, job.data, job.generated, false); },
                    PassOptionsOnRanks(job, comm));
  RETURN_IF_ERROR(reader.Open());
  RETURN_IF_ERROR(frame.Adopt(reader.schema()));
  RETURN_IF_ERROR(CheckHeldOut(env, job));
  ThreadPool* pool = frame.pool();
  // A job validated per epoch runs its epochs one at a time from the epoch its checkpoint
  // names (its reader is only this probe of the schema).
  const bool by_epoch = job.train.validating();
  if (by_epoch) {
    job.ckpt.every_passes = 0;  // it commits after epochs, not passes
    reader.Close();             // (the probe reads no further: each epoch reads anew)
  }
  ASSIGN_OR_RETURN(TrainStart start, StartOnRanks(env, job, comm, frame.ranks_ckpt_dir(),
                                                  by_epoch ? nullptr : &reader, pool));

  // Run pass by pass: nothing is committed unless every stage succeeded (a read error or too
  // many malformed records included).
  PassesRun run;
  if (by_epoch) {
    ASSIGN_OR_RETURN(EpochsRun epochs, RunEpochs(env, job, &start, sink, stop, pool));
    run = std::move(epochs.run);
    run.report.validation = std::move(epochs.validation);
    if (epochs.abandoned) {  // the table holds part of an epoch: the checkpoints are the job
      run.report.interrupted = true;
      run.report.saved = false;
      RETURN_IF_ERROR(start.metrics_log->Close());
      RETURN_IF_ERROR(frame.Close(std::move(start.table)));
      return std::move(run.report);
    }
    // A resumed job whose epochs were all done: it commits and saves what they left.
    if (run.job_examples == 0) run.job_examples = start.position.examples;
  } else {
    ASSIGN_OR_RETURN(run, RunPasses(env, job, &reader, &start, sink, stop, pool, comm,
                                    frame.ranks_ckpt_dir(), nullptr));
  }
  TrainReport& report = run.report;

  // A job that trained nothing has no model to save (an interrupted one stops as usual).
  // (A rank of several may have had none: the job's count decides, summed over the ranks.)
  if (run.job_examples == 0 && !run.interrupted) {
    return FailedPreconditionError(
        fmt::format("no examples in the input ({}): nothing was trained and nothing is saved",
                    NoExamplesReason(job, run.records_malformed)));
  }
  // Training's memory goes back before the commit and the evaluation: the reader's blocks,
  // and the passes' buffers left free in the allocator's arenas (at 1 M generated rows under
  // a 256 MB budget, ~90 MB that the evaluation's allocations, from other threads' arenas,
  // did not reuse: it was the run's peak; docs/storage.md, "Memory beside the budget").
  reader.Close();
  const uint64_t released = ReleaseFreeMemory();
  LOG_DEBUG("after training: {} MB of free memory back to the system", released >> 20);
  RETURN_IF_ERROR(FinishRun(env, job, comm, frame.ranks_ckpt_dir(), run, &start, pool, &report));
  RETURN_IF_ERROR(PruneEpochCopies(env, job));
  RETURN_IF_ERROR(frame.Close(std::move(start.table)));
  report.total_seconds = frame.Seconds();
  // (The kernel's high-water mark lags the resident set it counts: a pass's sample may be
  // a little above it.)
  report.peak_rss_bytes = std::max(PeakRssBytes(), report.memory_at_peak.rss);
  report.memory_peak_by_owner = PeakMemoryByOwner(job, *start.model, report);
  report.memory_box = MemoryBoxJson(job);
  return std::move(report);
}

}  // namespace ctrbox
