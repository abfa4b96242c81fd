#include "pipeline/stream.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/model_files.h"
#include "dist/collectives.h"
#include "io/partitions.h"
#include "pipeline/admission.h"
#include "pipeline/data.h"
#include "pipeline/evaluator.h"
#include "pipeline/rank_pass.h"
#include "pipeline/serving_publisher.h"
#include "pipeline/stream_parts.h"
#include "pipeline/train_start.h"
#include "pipeline/train_steps.h"
#include "table/ssd_store.h"
#include "util/blas.h"
#include "util/cleanup.h"
#include "util/logging.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using namespace train_steps;   // NOLINT: the train job's steps
using namespace stream_parts;  // NOLINT: its parts

// A stream publishes into one serving.dir for its whole life: a resumed job naming another
// one (or none) would write versions that follow no base there.
Status CheckServingDir(const JobConfig& job, const StreamState& state, const std::string& ckpt) {
  if (state.serving_dir.empty() || state.serving_dir == job.serving.dir) return Status::OK();
  return InvalidArgumentError(fmt::format(
      "serving.dir: this stream publishes into {} ({} of ckpt.dir {} says so), but this start "
      "names {}: give it {} again, or start a new stream (--fresh, a new serving.dir)",
      state.serving_dir, ckpt, job.ckpt.dir,
      job.serving.dir.empty() ? std::string("none") : job.serving.dir, state.serving_dir));
}

// stream.start on a resumed stream: past `next`, the partitions between are skipped (a way
// past a partition the stream cannot take); before it, the stream goes on at `next`.
void MoveToStart(const PartitionLayout& layout, std::optional<int64_t> start_at,
                 StreamState* state) {
  if (!start_at || *start_at == state->next) return;
  if (*start_at < state->next) {
    LOG_INFO("stream.start {}: the stream is past it already (it continues at {})",
             layout.Name(*start_at), layout.Name(state->next));
    return;
  }
  LOG_WARNING("stream.start {}: moving on from {}: {} partitions skipped (never trained)",
              layout.Name(*start_at), layout.Name(state->next), *start_at - state->next);
  state->Skip(state->next, *start_at - 1);
  state->next = *start_at;
}

// table.admit.bloom_bits costs 2^bits bytes of counters, encoded again and written with every
// partition's commit: said when it is large, refused when it cannot fit in this machine.
Status CheckAdmissionCost(const JobConfig& job) {
  if (job.stream.admit_min_count <= 1) return Status::OK();
  const uint64_t counters = uint64_t{1} << job.stream.admit_bloom_bits;
  const uint64_t peak = 2 * counters;  // the counters and their encoding at a commit
  const uint64_t memory = PhysicalMemoryBytes();
  if (memory > 0 && peak > memory / 2) {
    return InvalidArgumentError(fmt::format(
        "table.admit.bloom_bits {}: {:.1f} GiB of counters, at least {:.1f} GiB while a "
        "partition commits, is more than half of this machine's {:.1f} GiB: give fewer bits (24: "
        "16 MiB "
        "counts ~5 M keys with few false admissions; docs/routine.md)",
        job.stream.admit_bloom_bits, counters / 1073741824.0, peak / 1073741824.0,
        memory / 1073741824.0));
  }
  if (counters >= (uint64_t{1} << 28)) {
    LOG_WARNING(
        "table.admit.bloom_bits {}: {:.2f} GiB of counters in memory (at least {:.2f} GiB "
        "while a partition commits), and {:.2f} GiB written to ckpt.dir with every partition",
        job.stream.admit_bloom_bits, counters / 1073741824.0, peak / 1073741824.0,
        counters / 1073741824.0);
  }
  return Status::OK();
}

// CheckUnchanged on every rank: one rank's changed file stops them all, before the commit.
Status CheckUnchangedOnRanks(Env* env, Comm* comm, const Partition& p) {
  Status mine = CheckUnchanged(env, p);
  if (comm == nullptr) return mine;
  uint64_t bad = mine.ok() ? 0 : 1;
  RETURN_IF_ERROR(AllReduceMax(comm, &bad, 1));
  if (!mine.ok()) return mine;
  if (bad != 0) {
    return FailedPreconditionError(fmt::format(
        "partition {}: another rank found a file changed while it was read (its log names "
        "it): nothing of the partition is committed",
        p.name));
  }
  return Status::OK();
}

}  // namespace

StatusOr<nlohmann::json> RunStream(Env* env, JobConfig job, ProgressSink* sink,
                                   const std::atomic<bool>* stop, Comm* comm) {
  Stopwatch total_clock;
  const int ranks = comm != nullptr ? comm->size() : 1;
  const bool rank0 = comm == nullptr || comm->rank() == 0;
  RETURN_IF_ERROR(job.Validate());
  RETURN_IF_ERROR(CheckAdmissionCost(job));
  if (comm != nullptr) {
    if (job.stream.admit_min_count > 1) {
      return InvalidArgumentError(
          "table.admit.min_count on ranks is not built yet: each rank would count only the "
          "occurrences in its share of the rows (docs/routine.md, \"Ranks\")");
    }
    if (job.stream.poll_seconds >= job.dist.timeout_seconds) {
      return InvalidArgumentError(fmt::format(
          "stream.poll_seconds {} on ranks must be below dist.timeout {} (every poll is an "
          "exchange of the ranks)",
          job.stream.poll_seconds, job.dist.timeout_seconds));
    }
  }
  ASSIGN_OR_RETURN(const PartitionLayout layout, PartitionLayout::Parse(job.stream.layout));
  ASSIGN_OR_RETURN(const std::optional<int64_t> start_at,
                   OrdinalOf(layout, job.stream.start, "stream.start"));
  ASSIGN_OR_RETURN(const std::optional<int64_t> until,
                   OrdinalOf(layout, job.stream.until, "stream.until"));
  if (start_at && until && *until < *start_at) {
    return InvalidArgumentError(
        fmt::format("stream.until {} comes before stream.start {}: the job would train nothing",
                    job.stream.until, job.stream.start));
  }
  // The same command starts the job and continues it (--fresh starts over).
  job.resume = !job.fresh;
  job.size_to_data = false;  // partitions differ in size; the batch is the job's
  StreamState state;
  Follower follower(env, job.stream, layout, stop, &state.skipped_runs);

  nlohmann::json report = {{"stream", {{"root", job.stream.root}}}};
  auto interrupted = [&] {
    report["interrupted"] = true;
    return report;
  };
  // A resumed stream has its schema in its checkpoint; a new one learns it from its first
  // partition with files: stream.start, or the first ready one.
  ASSIGN_OR_RETURN(std::optional<CheckpointManifest> newest, NewestManifest(env, job, ranks));
  std::optional<int64_t> first = start_at;
  if (newest) {
    job.partition = "(resumed)";
    job.spec.schema = newest->spec.schema;
    if (job.data.slot_from == SlotFrom::kPosition && job.data.num_slots == 0) {
      job.data.num_slots = newest->spec.schema.num_slots;
    }
  }
  if (!env->IsDirectory(job.stream.root)) {
    return NotFoundError(fmt::format(
        "stream.root {}: no such directory (the data root partitions land in; create it first)",
        job.stream.root));
  }
  for (bool said = false; !newest && !first; said = true) {
    std::vector<int64_t> ready;
    if (rank0) {
      ASSIGN_OR_RETURN(const std::optional<int64_t> p, follower.FirstReady());
      if (p) ready.push_back(*p);
    }
    bool stopped = stop != nullptr && stop->load();
    if (comm != nullptr) {  // rank 0's first ready partition, and any rank's stop
      uint64_t v[2] = {ready.empty() ? 0 : uint64_t(ready.front()) ^ (uint64_t{1} << 63),
                       stopped ? 1u : 0u};
      RETURN_IF_ERROR(AllReduceMax(comm, v, 2));
      ready.clear();
      if (v[0] != 0) ready.push_back(static_cast<int64_t>(v[0] ^ (uint64_t{1} << 63)));
      stopped = v[1] != 0;
    }
    if (stopped) return interrupted();
    if (!ready.empty()) {
      first = ready.front();
      break;
    }
    if (!said) {
      LOG_INFO("no partition of {} is ready under {} yet ({} marks a ready one): waiting",
               layout.text(), job.stream.root, job.stream.done_file);
    }
    follower.Sleep(job.stream.poll_seconds);
  }
  if (!newest) {
    Partition probe{*first, "", {}, {}, std::nullopt};
    for (int64_t p = *first; probe.files.empty(); ++p) {
      ASSIGN_OR_RETURN(Follower::Take t, follower.WaitOnRanks(comm, p));
      if (t == Follower::Take::kStop) return interrupted();
      if (t == Follower::Take::kTrain) {
        ASSIGN_OR_RETURN(probe,
                         TakePartition(env, layout, p, follower.Dir(p), job.stream.done_file));
      }
    }
    job.partition = probe.name;
    job.data.paths = probe.files;
  }
  std::string ranks_ckpt_dir;
  const std::vector<std::string> probe_files = job.data.paths;
  RETURN_IF_ERROR(PrepareJob(env, comm, stop, &job, &ranks_ckpt_dir));
  // (On ranks PrepareJob shared the first partition's files; each partition is shared alike.)
  job.data.paths = probe_files;
  job.data.byte_share = ByteShare{};
  DirLocks held;
  RETURN_IF_ERROR(HoldJobDirs(env, comm, ranks_ckpt_dir, &job, &held));
  if (!job.serving.dir.empty() && rank0) {
    RETURN_IF_ERROR(held.Add(env, job.serving.dir, "serving.dir"));
  }
  if (!newest) {
    PassReader probe([&] { return OpenData(env, job.data, job.generated, false); },
                     PassOptionsOnRanks(job, nullptr));
    RETURN_IF_ERROR(probe.Open());
    job.spec.schema = probe.schema();
  }
  if (comm != nullptr) RETURN_IF_ERROR(CheckRanksReadOneSchema(comm, job.spec.schema));
  RETURN_IF_ERROR(CheckModelAgainstSchema(job));
  job.spec.table.seed = job.train.seed;
  job.ckpt.every_passes = 0;  // a stream job commits after partitions, not passes
  ThreadPool pool(job.train.threads);
  Cleanup remove_scratch([&] {
    if (!job.storage.keep_store && !job.storage.ssd.dir.empty()) {
      SsdStore::RemoveFiles(env, job.storage.ssd.dir).IgnoreError();
    }
  });
  ASSIGN_OR_RETURN(TrainStart start, StartOnRanks(env, job, comm, ranks_ckpt_dir, nullptr, &pool));
  if (first) state.next = *first;
  state.serving_dir = job.serving.dir;
  if (start.resumed && !start.resumed->stream.is_null()) {
    ASSIGN_OR_RETURN(
        state, StreamState::FromJson(start.resumed->stream, CheckpointName(start.resumed->id)));
    RETURN_IF_ERROR(CheckServingDir(job, state, CheckpointName(start.resumed->id)));
  } else if (start.resumed) {
    return InvalidArgumentError(fmt::format(
        "{} in {} is a checkpoint of a job of files, not of a stream: give the stream its own "
        "ckpt.dir (or --fresh)",
        CheckpointName(start.resumed->id), job.ckpt.dir));
  }
  if (start.resumed) {
    LOG_INFO("stream: {} partitions committed (the last {}); continuing at {}", state.partitions,
             state.last.empty() ? "none" : state.last, layout.Name(state.next));
    MoveToStart(layout, start_at, &state);
  }
  std::optional<ServingPublisher> publisher;
  if (!job.serving.dir.empty() && !start.resumed && rank0) {
    ASSIGN_OR_RETURN(std::vector<ServingVersion> listed, ReadServingVersions(env, job.serving.dir));
    if (!listed.empty()) {
      return FailedPreconditionError(fmt::format(
          "serving.dir {} holds versions of another job (up to {}): a new stream job{} needs "
          "a new serving.dir (published versions are never changed or removed by another job)",
          job.serving.dir, ServingVersionName(listed.back().version),
          job.fresh ? " (--fresh)" : ""));
    }
  }
  if (!job.serving.dir.empty()) {
    publisher.emplace(env, job.serving, job.spec, start.model->value_layout());
    publisher->SetInput(InputRecord(job));  // what the model reads: the partitions' format
    RETURN_IF_ERROR(publisher->Recover(state.serving, rank0));
  }
  std::optional<Admission> admission;
  if (job.stream.admit_min_count > 1) {
    ASSIGN_OR_RETURN(admission, OpenAdmission(env, job, state));
  }
  const PushObserver on_push =
      publisher ? PushObserver([&](const RowBlock& rows) { return publisher->OnPush(rows); })
                : PushObserver();
  AccessorOptions ttl_options = job.spec.table;
  ttl_options.delete_after_unseen_passes = job.stream.ttl_partitions;
  const CtrAccessor ttl(start.model->value_layout(), ttl_options);

  uint64_t trained_now = 0, skipped_now = 0, examples_now = 0;
  double test_seconds = 0, train_seconds = 0, commit_seconds = 0;  // this run's, summed
  bool abandoned = false;  // stopped inside a partition: the table holds uncommitted training
  nlohmann::json last_line;
  while (!until || state.next <= *until) {
    ASSIGN_OR_RETURN(Follower::Take take, follower.WaitOnRanks(comm, state.next));
    if (take == Follower::Take::kStop) break;
    Partition p{state.next, layout.Name(state.next), {}, {}, std::nullopt};
    if (take == Follower::Take::kSkip) {
      const int64_t to = follower.skip_to();
      LOG_WARNING(
          "{} skipped: still missing after stream.max_wait while {} is ready (never "
          "trained, even if they arrive later)",
          to - p.ordinal == 1 ? "partition " + p.name
                              : fmt::format("{} partitions, {} to {},", to - p.ordinal, p.name,
                                            layout.Name(to - 1)),
          layout.Name(to));
      state.Skip(p.ordinal, to - 1);
      skipped_now += static_cast<uint64_t>(to - p.ordinal);
      state.next = to;
      continue;
    }
    Stopwatch clock;
    ASSIGN_OR_RETURN(
        p, TakePartition(env, layout, state.next, follower.Dir(state.next), job.stream.done_file));
    const std::optional<double> ready_at = p.done_at;
    if (job.features != nullptr && job.extractor == nullptr) {
      // A resumed stream job's extract stage, opened on the first partition it reads.
      job.data.paths = p.files;
      RETURN_IF_ERROR(AttachFeatures(env, &job));
    }
    JobConfig pjob = PartitionJob(job, p, comm != nullptr ? comm->rank() : 0);
    nlohmann::json line = {
        {"event", "partition"}, {"partition", p.name}, {"files", p.files.size()}};
    MetricSummary online;
    uint64_t examples = 0, evicted = 0;
    if (!p.files.empty()) {
      // Test: the model as it stands scores the partition before it learns from it.
      {
        ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> test,
                         OpenData(env, pjob.data, pjob.generated, true));
        RETURN_IF_ERROR(CheckSchema(job, p, test->schema()));
        Stopwatch test_clock;
        if (comm != nullptr) {
          ASSIGN_OR_RETURN(online,
                           EvaluateOnRanks(comm, test.get(), start.table.get(), start.model.get(),
                                           job.train.batch_size, job.pipeline.pass_examples,
                                           job.EvalChunkKeys() / ranks, &pool));
        } else {
          ASSIGN_OR_RETURN(
              online, Evaluate(test.get(), *start.table, start.model.get(), job.train.batch_size,
                               job.pipeline.pass_examples, job.EvalChunkKeys(), &pool, nullptr));
        }
        test_seconds += test_clock.Seconds();
        line["test_seconds"] = test_clock.Seconds();
      }
      // Then train (its extraction counted from here: not the test's reads, nor the
      // partitions' before).
      if (job.extractor) start.extracted_before = job.extractor->totals();
      PassReaderOptions passes = PassOptionsOnRanks(pjob, comm);
      if (admission) passes.filter = [&](Batch* b) { admission->Filter(b); };
      PassReader reader([&] { return OpenData(env, pjob.data, pjob.generated, false); }, passes);
      RETURN_IF_ERROR(reader.Open());
      RETURN_IF_ERROR(CheckSchema(job, p, reader.schema()));
      ASSIGN_OR_RETURN(PassesRun run, RunPasses(env, pjob, &reader, &start, sink, stop, &pool, comm,
                                                ranks_ckpt_dir, on_push));
      if (run.interrupted) {
        LOG_WARNING(
            "stopped while training partition {}: it is not committed; the next start "
            "trains it again from the last commit",
            p.name);
        abandoned = true;
        break;
      }
      start.position = run.position;
      examples = run.examples;  // (on ranks summed over them: GlobalReport)
      train_seconds += run.report.seconds;
      line["train_seconds"] = run.report.seconds;
      line["examples_per_s"] = run.report.examples_per_s;
    } else {
      LOG_WARNING(
          "partition {} has its done file but no data files: committed with nothing "
          "trained",
          p.name);
    }
    if (job.stream.ttl_partitions > 0) {
      std::vector<uint64_t> deleted;
      ASSIGN_OR_RETURN(evicted, start.table->Shrink(ttl, &pool, &deleted));
      start.position.keys_shrunk += evicted;
      // Every row's counters changed: the checkpoint's delta records the shrink to replay.
      start.ckpt->OnShrink(&ttl_options);
      if (publisher) publisher->OnDeleted(deleted);
    }
    if (comm != nullptr) RETURN_IF_ERROR(AllReduceSum(comm, &evicted, 1));
    // What was tested and trained is the partition as it was taken, or nothing is committed.
    RETURN_IF_ERROR(CheckUnchangedOnRanks(env, comm, p));
    std::optional<ServingVersion> version;
    if (publisher) {
      ASSIGN_OR_RETURN(version, publisher->Prepare(*start.table, *start.model, p.name, comm));
    }
    // The commit point of the partition.
    state.last = p.name;
    ++state.next;
    ++state.partitions;
    state.serving = publisher ? publisher->State() : nlohmann::json();
    if (admission) {
      ASSIGN_OR_RETURN(state.admit, SaveAdmission(env, job, *admission, p.ordinal));
      line["admission"] = {{"occurrences", admission->counts().occurrences},
                           {"dropped", admission->counts().dropped}};
    }
    start.ckpt->SetStream(state.ToJson());
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     start.ckpt->Commit(*start.table, DensePayload(*start.model), start.position,
                                        nullptr, &pool));
    if (comm != nullptr) {  // the ranks' commit point: rank 0's RANKS file names it
      RETURN_IF_ERROR(CommitRanksCheckpointOf(comm, env, ranks_ckpt_dir, m.id));
    }
    if (publisher) RETURN_IF_ERROR(publisher->Publish());
    const double published_at = NowSeconds(env);
    if (admission) RETURN_IF_ERROR(PruneAdmission(env, job.ckpt.dir));
    ++trained_now;
    examples_now += examples;
    commit_seconds += m.write_seconds;
    if (online.examples > 0) line["online"] = online.ToJson();  // (none: nothing to test)
    line["examples"] = examples;
    uint64_t keys = start.table->Stats().keys;
    if (comm != nullptr) RETURN_IF_ERROR(AllReduceSum(comm, &keys, 1));
    line["keys"] = keys;
    line["evicted"] = evicted;
    line["checkpoint"] = CheckpointName(m.id);
    line["seconds"] = clock.Seconds();
    line["rss_bytes"] = CurrentRssBytes();
    if (version) {
      line["serving"] = version->ToJson();
      if (ready_at) line["ready_to_published_seconds"] = published_at - *ready_at;
    }
    RETURN_IF_ERROR(start.metrics_log->Write(line));
    // (On ranks rank 0 has the job's online metrics and publishes: it says so.)
    if (rank0)
      LOG_INFO("partition {}: {}; trained; {} keys ({} evicted){}", p.name,
               online.examples > 0
                   ? fmt::format("online AUC {} logloss {:.4f} COPC {:.3f} over {} examples",
                                 online.AucText(), online.logloss, online.copc, online.examples)
                   : std::string("no examples (nothing to test)"),
               line["keys"].get<uint64_t>(), evicted,
               version
                   ? fmt::format("; published {} ({}, {} rows, {} deleted)",
                                 ServingVersionName(version->version),
                                 version->base ? "base" : "delta", version->rows, version->deleted)
                   : "");
    last_line = std::move(line);
  }

  report["stream"]["partitions_committed"] = state.partitions;
  report["stream"]["partitions_trained_now"] = trained_now;
  report["stream"]["skipped"] = state.skipped;
  report["stream"]["skipped_now"] = skipped_now;
  report["stream"]["last"] = state.last;
  report["stream"]["next"] = layout.Name(state.next);
  report["examples"] = examples_now;
  // The training rate over the partitions' passes (the tests, evictions and commits apart).
  report["examples_per_s"] = train_seconds > 0 ? examples_now / train_seconds : 0.0;
  report["stream"]["test_seconds"] = test_seconds;
  report["stream"]["train_seconds"] = train_seconds;
  report["stream"]["checkpoint_seconds"] = commit_seconds;
  report["interrupted"] = abandoned || (stop != nullptr && stop->load());
  report["last_partition"] = last_line;
  if (abandoned) {
    // The table holds part of a partition: nothing more is saved (the checkpoint is the job).
    RETURN_IF_ERROR(start.metrics_log->Close());
    report["saved"] = false;
    return report;
  }
  TrainReport finish;
  if (comm != nullptr) {
    RETURN_IF_ERROR(
        CommitModelOfRanks(env, comm, job, ranks_ckpt_dir, &start, start.position, &pool, &finish));
  } else {
    RETURN_IF_ERROR(CommitModel(env, job, &start, start.position, &pool, &finish));
  }
  if (finish.digest) report["digest"] = *finish.digest;
  if (finish.model_dir) report["model_dir"] = *finish.model_dir;
  uint64_t keys = start.table->Stats().keys;
  if (comm != nullptr) RETURN_IF_ERROR(AllReduceSum(comm, &keys, 1));
  report["keys"] = keys;
  if (comm != nullptr) report["ranks"] = ranks;
  report["saved"] = true;
  RETURN_IF_ERROR(start.metrics_log->Close());
  RETURN_IF_ERROR(CloseTable(env, job, std::move(start.table)));
  remove_scratch.Cancel();
  report["total_seconds"] = total_clock.Seconds();
  report["blas_core"] = blas::CoreName();
  report["peak_rss_bytes"] = PeakRssBytes();
  return report;
}

}  // namespace ctrbox
