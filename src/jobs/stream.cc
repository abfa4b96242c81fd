#include "jobs/stream.h"

#include <fmt/format.h>

#include <optional>

#include "ckpt/checkpoint.h"
#include "ckpt/model_files.h"
#include "dist/collectives.h"
#include "io/partitions.h"
#include "jobs/admission.h"
#include "jobs/data.h"
#include "jobs/evaluator.h"
#include "jobs/follower.h"
#include "jobs/job_frame.h"
#include "jobs/serving_publisher.h"
#include "jobs/stream_rules.h"
#include "jobs/stream_state.h"
#include "jobs/train_start.h"
#include "jobs/train_steps.h"
#include "pipeline/rank_pass.h"
#include "util/blas.h"
#include "util/logging.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using namespace train_steps;   // NOLINT: the train job's steps
using namespace stream_parts;  // NOLINT: its parts

// The partition in hand, from its take to its log line.
struct PartitionRun {
  Partition p;
  JobConfig job;  // the stream's job reading p's files (this rank's share of them)
  Stopwatch clock;
  nlohmann::json line;  // its metrics line, filled in step by step
  MetricSummary online;
  uint64_t examples = 0, evicted = 0;
  std::optional<ServingVersion> version;
  CheckpointManifest manifest;
  double published_at = 0;
};

// The stream job as docs/routine.md's loop: Start (the prologue shared with the train job, the
// stream state resumed), then per partition Wait, Test, Train, Evict, WriteVersion, Commit,
// Publish, Log; Finish (the model saved, the report).
class StreamJob {
 public:
  StreamJob(Env* env, JobConfig job, ProgressSink* sink, const std::atomic<bool>* stop, Comm* comm)
      : env_(env),
        job_(std::move(job)),
        sink_(sink),
        stop_(stop),
        comm_(comm),
        ranks_(comm != nullptr ? comm->size() : 1),
        rank0_(comm == nullptr || comm->rank() == 0),
        frame_(env, comm, stop, &job_) {}

  StatusOr<StreamReport> Run();

 private:
  // ---- Start ----
  // The stream's own keys: OK on these ranks, the layout, start and until.
  Status CheckOptions();
  // The first partition of a new stream: stream.start, or the first ready one; false when the
  // job was stopped while waiting for it.
  StatusOr<bool> FindFirst();
  // Its first partition with files, for the schema (a resumed stream has it in its checkpoint).
  StatusOr<bool> ProbeFirst();
  Status Prepare();
  // The stream state: a resumed stream's from its checkpoint.
  Status ResumeState();
  Status OpenPublisher();

  // ---- The loop, one partition ----
  // 1. Wait: false when the job stopped. A partition given up as late is skipped here.
  StatusOr<bool> Wait(Follower::Take* take);
  void Skip();
  StatusOr<PartitionRun> Take();
  // 2. Test: the model as it stands scores the partition.
  Status Test(PartitionRun* run);
  // 3. Train: false when the job stopped inside the partition (abandoned, not committed).
  StatusOr<bool> Train(PartitionRun* run);
  // 4. Evict keys unseen for table.ttl_partitions partitions.
  Status Evict(PartitionRun* run);
  // 5. Write the serving version due (not listed yet).
  Status WriteVersion(PartitionRun* run);
  // 6. Commit the checkpoint that records the partition: its commit point.
  Status Commit(PartitionRun* run);
  // 7. Publish the version.
  Status Publish(PartitionRun* run);
  // 8. Log the partition's line.
  Status Log(PartitionRun* run);

  // ---- Finish ----
  StatusOr<StreamReport> Finish();

  Env* const env_;
  JobConfig job_;
  ProgressSink* const sink_;
  const std::atomic<bool>* const stop_;
  Comm* const comm_;
  const int ranks_;
  const bool rank0_;
  JobFrame frame_;  // before start_: the table goes first

  std::optional<PartitionLayout> layout_;
  std::optional<int64_t> start_at_, until_, first_;
  std::optional<CheckpointManifest> newest_;
  StreamState state_;
  std::optional<Follower> follower_;
  std::optional<TrainStart> start_;
  std::optional<ServingPublisher> publisher_;
  std::optional<Admission> admission_;
  PushObserver on_push_;
  AccessorOptions ttl_options_;
  std::optional<CtrAccessor> ttl_;

  StreamReport report_;
  bool abandoned_ = false;  // stopped inside a partition: the table holds uncommitted training
};

Status StreamJob::CheckOptions() {
  // (Not in JobConfig::Validate: the job validated again later reads its first partition's.)
  if (!job_.data.paths.empty()) {
    return InvalidArgumentError(
        "stream.root is the job's data: leave data.paths and data.command (and --data) unset");
  }
  RETURN_IF_ERROR(job_.Validate());
  RETURN_IF_ERROR(CheckAdmissionCost(job_));
  if (comm_ != nullptr) {
    if (job_.stream.admit_min_count > 1) {
      return InvalidArgumentError(
          "table.admit.min_count on ranks is not built yet: each rank would count only the "
          "occurrences in its share of the rows (docs/routine.md, \"Ranks\")");
    }
    if (job_.stream.poll_seconds >= job_.dist.timeout_seconds) {
      return InvalidArgumentError(fmt::format(
          "stream.poll_seconds {} on ranks must be below dist.timeout {} (every poll is an "
          "exchange of the ranks)",
          job_.stream.poll_seconds, job_.dist.timeout_seconds));
    }
  }
  ASSIGN_OR_RETURN(layout_, PartitionLayout::Parse(job_.stream.layout));
  ASSIGN_OR_RETURN(start_at_, OrdinalOf(*layout_, job_.stream.start, "stream.start"));
  ASSIGN_OR_RETURN(until_, OrdinalOf(*layout_, job_.stream.until, "stream.until"));
  if (start_at_ && until_ && *until_ < *start_at_) {
    return InvalidArgumentError(
        fmt::format("stream.until {} comes before stream.start {}: the job would train nothing",
                    job_.stream.until, job_.stream.start));
  }
  return Status::OK();
}

StatusOr<bool> StreamJob::FindFirst() {
  for (bool said = false; !newest_ && !first_; said = true) {
    std::vector<int64_t> ready;
    if (rank0_) {
      ASSIGN_OR_RETURN(const std::optional<int64_t> p, follower_->FirstReady());
      if (p) ready.push_back(*p);
    }
    bool stopped = stop_ != nullptr && stop_->load();
    if (comm_ != nullptr) {  // rank 0's first ready partition, and any rank's stop
      uint64_t v[2] = {ready.empty() ? 0 : uint64_t(ready.front()) ^ (uint64_t{1} << 63),
                       stopped ? 1u : 0u};
      RETURN_IF_ERROR(AllReduceMax(comm_, v, 2));
      ready.clear();
      if (v[0] != 0) ready.push_back(static_cast<int64_t>(v[0] ^ (uint64_t{1} << 63)));
      stopped = v[1] != 0;
    }
    if (stopped) return false;
    if (!ready.empty()) {
      first_ = ready.front();
      break;
    }
    if (!said) {
      LOG_INFO("no partition of {} is ready under {} yet ({} marks a ready one): waiting",
               layout_->text(), job_.stream.root, job_.stream.done_file);
    }
    follower_->Sleep(job_.stream.poll_seconds);
  }
  return true;
}

StatusOr<bool> StreamJob::ProbeFirst() {
  if (newest_) return true;
  Partition probe{*first_, "", {}, {}, std::nullopt};
  for (int64_t p = *first_; probe.files.empty(); ++p) {
    ASSIGN_OR_RETURN(Follower::Take t, follower_->WaitOnRanks(comm_, p));
    if (t == Follower::Take::kStop) return false;
    if (t == Follower::Take::kTrain) {
      ASSIGN_OR_RETURN(probe,
                       TakePartition(env_, *layout_, p, follower_->Dir(p), job_.stream.done_file));
    }
  }
  job_.data.paths = probe.files;
  return true;
}

// The job prepared as the train job's (on ranks shared from the first partition's files; each
// partition is shared alike later), the schema adopted, the model started.
Status StreamJob::Prepare() {
  const std::vector<std::string> probe_files = job_.data.paths;
  RETURN_IF_ERROR(frame_.Prepare(JobData::kStream));
  job_.data.paths = probe_files;
  job_.data.byte_share = ByteShare{};
  if (!job_.serving.dir.empty() && rank0_) {
    RETURN_IF_ERROR(frame_.Hold(job_.serving.dir, "serving.dir"));
  }
  Schema schema = job_.spec.schema;  // a resumed stream's, from its checkpoint
  if (!newest_) {
    PassReader probe([&] { return OpenData(env_, job_.data, job_.generated, false); },
                     PassOptionsOnRanks(job_, nullptr));
    RETURN_IF_ERROR(probe.Open());
    schema = probe.schema();
  }
  RETURN_IF_ERROR(frame_.Adopt(schema));
  job_.ckpt.every_passes = 0;  // a stream job commits after partitions, not passes
  ASSIGN_OR_RETURN(
      start_, StartOnRanks(env_, job_, comm_, frame_.ranks_ckpt_dir(), nullptr, frame_.pool()));
  return Status::OK();
}

Status StreamJob::ResumeState() {
  if (first_) state_.next = *first_;
  state_.serving_dir = job_.serving.dir;
  const std::optional<CheckpointManifest>& resumed = start_->resumed;
  if (resumed && !resumed->stream.is_null()) {
    ASSIGN_OR_RETURN(state_, StreamState::FromJson(resumed->stream, CheckpointName(resumed->id)));
    RETURN_IF_ERROR(CheckServingDir(job_, state_, CheckpointName(resumed->id)));
  } else if (resumed) {
    return InvalidArgumentError(fmt::format(
        "{} in {} is a checkpoint of a job of files, not of a stream: give the stream its own "
        "ckpt.dir (or --fresh)",
        CheckpointName(resumed->id), job_.ckpt.dir));
  }
  if (resumed) {
    LOG_INFO("stream: {} partitions committed (the last {}); continuing at {}", state_.partitions,
             state_.last.empty() ? "none" : state_.last, layout_->Name(state_.next));
    MoveToStart(*layout_, start_at_, &state_);
  }
  return Status::OK();
}

Status StreamJob::OpenPublisher() {
  if (job_.serving.dir.empty()) return Status::OK();
  if (!start_->resumed && rank0_) {
    ASSIGN_OR_RETURN(std::vector<ServingVersion> listed,
                     ReadServingVersions(env_, job_.serving.dir));
    if (!listed.empty()) {
      return FailedPreconditionError(fmt::format(
          "serving.dir {} holds versions of another job (up to {}): a new stream job{} needs "
          "a new serving.dir (published versions are never changed or removed by another job)",
          job_.serving.dir, ServingVersionName(listed.back().version),
          job_.fresh ? " (--fresh)" : ""));
    }
  }
  publisher_.emplace(env_, job_.serving, job_.spec, start_->model->value_layout());
  publisher_->SetInput(InputRecord(job_));  // what the model reads: the partitions' format
  RETURN_IF_ERROR(publisher_->Recover(state_.serving, rank0_));
  on_push_ = [this](const RowBlock& rows) { return publisher_->OnPush(rows); };
  return Status::OK();
}

StatusOr<bool> StreamJob::Wait(Follower::Take* take) {
  ASSIGN_OR_RETURN(*take, follower_->WaitOnRanks(comm_, state_.next));
  return *take != Follower::Take::kStop;
}

void StreamJob::Skip() {
  const int64_t from = state_.next, to = follower_->skip_to();
  LOG_WARNING(
      "{} skipped: still missing after stream.max_wait while {} is ready (never "
      "trained, even if they arrive later)",
      to - from == 1 ? "partition " + layout_->Name(from)
                     : fmt::format("{} partitions, {} to {},", to - from, layout_->Name(from),
                                   layout_->Name(to - 1)),
      layout_->Name(to));
  state_.Skip(from, to - 1);
  report_.skipped_now += static_cast<uint64_t>(to - from);
  state_.next = to;
}

StatusOr<PartitionRun> StreamJob::Take() {
  PartitionRun run;
  ASSIGN_OR_RETURN(run.p, TakePartition(env_, *layout_, state_.next, follower_->Dir(state_.next),
                                        job_.stream.done_file));
  if (job_.features != nullptr && job_.extractor == nullptr) {
    // A resumed stream job's extract stage, opened on the first partition it reads.
    job_.data.paths = run.p.files;
    RETURN_IF_ERROR(AttachFeatures(env_, &job_));
  }
  run.job = PartitionJob(job_, run.p, comm_ != nullptr ? comm_->rank() : 0);
  run.line = {{"event", "partition"}, {"partition", run.p.name}, {"files", run.p.files.size()}};
  return run;
}

Status StreamJob::Test(PartitionRun* run) {
  ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> test,
                   OpenData(env_, run->job.data, run->job.generated, true));
  RETURN_IF_ERROR(CheckSchema(job_, run->p, test->schema()));
  Stopwatch clock;
  if (comm_ != nullptr) {
    ASSIGN_OR_RETURN(run->online,
                     EvaluateOnRanks(comm_, test.get(), start_->table.get(), start_->model.get(),
                                     job_.train.batch_size, job_.pipeline.pass_examples,
                                     job_.EvalChunkKeys() / ranks_, frame_.pool()));
  } else {
    ASSIGN_OR_RETURN(run->online, Evaluate(test.get(), *start_->table, start_->model.get(),
                                           job_.train.batch_size, job_.pipeline.pass_examples,
                                           job_.EvalChunkKeys(), frame_.pool(), nullptr));
  }
  report_.test_seconds += clock.Seconds();
  run->line["test_seconds"] = clock.Seconds();
  return Status::OK();
}

StatusOr<bool> StreamJob::Train(PartitionRun* run) {
  // Its extraction counted from here: not the test's reads, nor the partitions' before.
  if (job_.extractor) start_->extracted_before = job_.extractor->totals();
  PassReaderOptions passes = PassOptionsOnRanks(run->job, comm_);
  if (admission_) passes.filter = [this](Batch* b) { admission_->Filter(b); };
  const JobConfig& pjob = run->job;
  PassReader reader([&] { return OpenData(env_, pjob.data, pjob.generated, false); }, passes);
  RETURN_IF_ERROR(reader.Open());
  RETURN_IF_ERROR(CheckSchema(job_, run->p, reader.schema()));
  ASSIGN_OR_RETURN(PassesRun passes_run,
                   RunPasses(env_, pjob, &reader, &*start_, sink_, stop_, frame_.pool(), comm_,
                             frame_.ranks_ckpt_dir(), on_push_));
  if (passes_run.interrupted) {
    LOG_WARNING(
        "stopped while training partition {}: it is not committed; the next start "
        "trains it again from the last commit",
        run->p.name);
    return false;
  }
  start_->position = passes_run.position;
  run->examples = passes_run.examples;  // (on ranks summed over them: GlobalReport)
  report_.train_seconds += passes_run.report.seconds;
  run->line["train_seconds"] = passes_run.report.seconds;
  run->line["examples_per_s"] = passes_run.report.examples_per_s;
  return true;
}

Status StreamJob::Evict(PartitionRun* run) {
  if (job_.stream.ttl_partitions > 0) {
    std::vector<uint64_t> deleted;
    ASSIGN_OR_RETURN(run->evicted, start_->table->Shrink(*ttl_, frame_.pool(), &deleted));
    start_->position.keys_shrunk += run->evicted;
    // Every row's counters changed: the checkpoint's delta records the shrink to replay.
    start_->ckpt->OnShrink(&ttl_options_);
    if (publisher_) publisher_->OnDeleted(deleted);
  }
  if (comm_ != nullptr) RETURN_IF_ERROR(AllReduceSum(comm_, &run->evicted, 1));
  return Status::OK();
}

Status StreamJob::WriteVersion(PartitionRun* run) {
  // What was tested and trained is the partition as it was taken, or nothing is committed.
  RETURN_IF_ERROR(CheckUnchangedOnRanks(env_, comm_, run->p));
  if (publisher_) {
    ASSIGN_OR_RETURN(run->version,
                     publisher_->Prepare(*start_->table, *start_->model, run->p.name, comm_));
  }
  return Status::OK();
}

Status StreamJob::Commit(PartitionRun* run) {
  state_.last = run->p.name;
  ++state_.next;
  ++state_.partitions;
  state_.serving = publisher_ ? publisher_->State() : nlohmann::json();
  if (admission_) {
    ASSIGN_OR_RETURN(state_.admit, SaveAdmission(env_, job_, *admission_, run->p.ordinal));
    run->line["admission"] = {{"occurrences", admission_->counts().occurrences},
                              {"dropped", admission_->counts().dropped}};
  }
  start_->ckpt->SetStream(state_.ToJson());
  ASSIGN_OR_RETURN(run->manifest, start_->ckpt->Commit(*start_->table, DensePayload(*start_->model),
                                                       start_->position, nullptr, frame_.pool()));
  if (comm_ != nullptr) {  // the ranks' commit point: rank 0's RANKS file names it
    RETURN_IF_ERROR(
        CommitRanksCheckpointOf(comm_, env_, frame_.ranks_ckpt_dir(), run->manifest.id));
  }
  return Status::OK();
}

Status StreamJob::Publish(PartitionRun* run) {
  if (publisher_) RETURN_IF_ERROR(publisher_->Publish());
  run->published_at = env_->NowSeconds();
  if (admission_) RETURN_IF_ERROR(PruneAdmission(env_, job_.ckpt.dir));
  return Status::OK();
}

Status StreamJob::Log(PartitionRun* run) {
  ++report_.partitions_trained_now;
  report_.examples += run->examples;
  report_.checkpoint_seconds += run->manifest.write_seconds;
  nlohmann::json& line = run->line;
  const MetricSummary& online = run->online;
  if (online.examples > 0) line["online"] = online.ToJson();  // (none: nothing to test)
  line["examples"] = run->examples;
  uint64_t keys = start_->table->Stats().keys;
  if (comm_ != nullptr) RETURN_IF_ERROR(AllReduceSum(comm_, &keys, 1));
  line["keys"] = keys;
  line["evicted"] = run->evicted;
  line["checkpoint"] = CheckpointName(run->manifest.id);
  line["seconds"] = run->clock.Seconds();
  line["rss_bytes"] = CurrentRssBytes();
  const std::optional<ServingVersion>& version = run->version;
  if (version) {
    line["serving"] = version->ToJson();
    if (run->p.done_at) line["ready_to_published_seconds"] = run->published_at - *run->p.done_at;
  }
  RETURN_IF_ERROR(start_->metrics_log->Write(line));
  // (On ranks rank 0 has the job's online metrics and publishes: it says so.)
  if (rank0_) {
    LOG_INFO("partition {}: {}; trained; {} keys ({} evicted){}", run->p.name,
             online.examples > 0
                 ? fmt::format("online AUC {} logloss {:.4f} COPC {:.3f} over {} examples",
                               online.AucText(), online.logloss, online.copc, online.examples)
                 : std::string("no examples (nothing to test)"),
             keys, run->evicted,
             version
                 ? fmt::format("; published {} ({}, {} rows, {} deleted)",
                               ServingVersionName(version->version),
                               version->base ? "base" : "delta", version->rows, version->deleted)
                 : "");
  }
  report_.last_partition = std::move(line);
  return Status::OK();
}

StatusOr<StreamReport> StreamJob::Finish() {
  report_.partitions_committed = state_.partitions;
  report_.skipped = state_.skipped;
  report_.last = state_.last;
  report_.next = layout_->Name(state_.next);
  report_.examples_per_s =
      report_.train_seconds > 0 ? report_.examples / report_.train_seconds : 0.0;
  report_.interrupted = abandoned_ || (stop_ != nullptr && stop_->load());
  if (abandoned_) {
    // The table holds part of a partition: nothing more is saved (the checkpoint is the job).
    RETURN_IF_ERROR(start_->metrics_log->Close());
    report_.saved = false;
    return report_;
  }
  TrainReport finish;
  if (comm_ != nullptr) {
    RETURN_IF_ERROR(CommitModelOfRanks(env_, comm_, job_, frame_.ranks_ckpt_dir(), &*start_,
                                       start_->position, frame_.pool(), &finish));
  } else {
    RETURN_IF_ERROR(CommitModel(env_, job_, &*start_, start_->position, frame_.pool(), &finish));
  }
  report_.digest = finish.digest;
  report_.model_dir = finish.model_dir;
  report_.keys = start_->table->Stats().keys;
  if (comm_ != nullptr) RETURN_IF_ERROR(AllReduceSum(comm_, &report_.keys, 1));
  if (comm_ != nullptr) report_.ranks = ranks_;
  report_.saved = true;
  RETURN_IF_ERROR(start_->metrics_log->Close());
  RETURN_IF_ERROR(frame_.Close(std::move(start_->table)));
  report_.total_seconds = frame_.Seconds();
  report_.blas_core = blas::CoreName();
  report_.peak_rss_bytes = PeakRssBytes();
  return report_;
}

StatusOr<StreamReport> StreamJob::Run() {
  report_.root = job_.stream.root;
  RETURN_IF_ERROR(CheckOptions());
  // The same command starts the job and continues it (--fresh starts over).
  job_.resume = !job_.fresh;
  job_.size_to_data = false;  // partitions differ in size; the batch is the job's
  follower_.emplace(env_, job_.stream, *layout_, stop_, &state_.skipped_runs);
  // A resumed stream has its schema in its checkpoint; a new one learns it from its first
  // partition with files: stream.start, or the first ready one.
  ASSIGN_OR_RETURN(newest_, NewestManifest(env_, job_, ranks_));
  first_ = start_at_;
  if (newest_) {
    job_.spec.schema = newest_->spec.schema;
    if (job_.data.slot_from == SlotFrom::kPosition && job_.data.num_slots == 0) {
      job_.data.num_slots = newest_->spec.schema.num_slots;
    }
  }
  if (!env_->IsDirectory(job_.stream.root)) {
    return NotFoundError(fmt::format(
        "stream.root {}: no such directory (the data root partitions land in; create it first)",
        job_.stream.root));
  }
  auto stopped_waiting = [&] {
    report_.stopped_waiting = true;
    report_.interrupted = true;
    return report_;
  };
  ASSIGN_OR_RETURN(bool go, FindFirst());
  if (!go) return stopped_waiting();
  ASSIGN_OR_RETURN(go, ProbeFirst());
  if (!go) return stopped_waiting();
  RETURN_IF_ERROR(Prepare());
  RETURN_IF_ERROR(ResumeState());
  RETURN_IF_ERROR(OpenPublisher());
  if (job_.stream.admit_min_count > 1) {
    ASSIGN_OR_RETURN(admission_, OpenAdmission(env_, job_, state_));
  }
  ttl_options_ = job_.spec.table;
  ttl_options_.delete_after_unseen_passes = job_.stream.ttl_partitions;
  ttl_.emplace(start_->model->value_layout(), ttl_options_);

  while (!until_ || state_.next <= *until_) {
    Follower::Take take = Follower::Take::kStop;
    ASSIGN_OR_RETURN(go, Wait(&take));
    if (!go) break;
    if (take == Follower::Take::kSkip) {
      Skip();
      continue;
    }
    ASSIGN_OR_RETURN(PartitionRun run, Take());
    if (!run.p.files.empty()) {
      RETURN_IF_ERROR(Test(&run));
      ASSIGN_OR_RETURN(go, Train(&run));
      if (!go) {
        abandoned_ = true;
        break;
      }
    } else {
      LOG_WARNING(
          "partition {} has its done file but no data files: committed with nothing "
          "trained",
          run.p.name);
    }
    RETURN_IF_ERROR(Evict(&run));
    RETURN_IF_ERROR(WriteVersion(&run));
    RETURN_IF_ERROR(Commit(&run));
    RETURN_IF_ERROR(Publish(&run));
    RETURN_IF_ERROR(Log(&run));
  }
  return Finish();
}

}  // namespace

nlohmann::json StreamReport::ToJson() const {
  if (stopped_waiting) return {{"stream", {{"root", root}}}, {"interrupted", true}};
  nlohmann::json j = {{"stream",
                       {{"root", root},
                        {"partitions_committed", partitions_committed},
                        {"partitions_trained_now", partitions_trained_now},
                        {"skipped", skipped},
                        {"skipped_now", skipped_now},
                        {"last", last},
                        {"next", next},
                        {"test_seconds", test_seconds},
                        {"train_seconds", train_seconds},
                        {"checkpoint_seconds", checkpoint_seconds}}},
                      {"examples", examples},
                      {"examples_per_s", examples_per_s},
                      {"interrupted", interrupted},
                      {"last_partition", last_partition},
                      {"saved", saved}};
  if (!saved) return j;
  if (digest) j["digest"] = *digest;
  if (model_dir) j["model_dir"] = *model_dir;
  j["keys"] = keys;
  if (ranks > 0) j["ranks"] = ranks;
  j["total_seconds"] = total_seconds;
  j["blas_core"] = blas_core;
  j["peak_rss_bytes"] = peak_rss_bytes;
  return j;
}

StatusOr<StreamReport> RunStream(Env* env, JobConfig job, ProgressSink* sink,
                                 const std::atomic<bool>* stop, Comm* comm) {
  StreamJob stream(env, std::move(job), sink, stop, comm);
  return stream.Run();
}

}  // namespace ctrbox
