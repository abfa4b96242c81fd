#include "pipeline/stream.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/model_files.h"
#include "io/partitions.h"
#include "pipeline/admission.h"
#include "pipeline/data.h"
#include "pipeline/evaluator.h"
#include "pipeline/serving_publisher.h"
#include "pipeline/train_start.h"
#include "pipeline/train_steps.h"
#include "table/ssd_store.h"
#include "util/blas.h"
#include "util/cleanup.h"
#include "util/logging.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using namespace train_steps;  // NOLINT: the train job's steps

// Where a stream job stands; a checkpoint records it (CheckpointManifest::stream).
struct StreamState {
  int64_t next = 0;         // the next partition's ordinal
  std::string last;         // the newest partition committed ("": none yet)
  uint64_t partitions = 0;  // partitions committed (trained, or empty)
  uint64_t skipped = 0;     // partitions skipped as late (stream.on_late: skip)
  nlohmann::json serving;   // the serving publisher's (null without serving.dir)
  nlohmann::json admit;     // the admission counts' file in ckpt.dir and its checksum, or null

  nlohmann::json ToJson() const {
    nlohmann::json j = {{"next", next},
                        {"last", last},
                        {"partitions", partitions},
                        {"skipped", skipped},
                        {"serving", serving}};
    if (!admit.is_null()) j["admit"] = admit;
    return j;
  }
  static StatusOr<StreamState> FromJson(const nlohmann::json& j, const std::string& where) {
    try {
      StreamState s;
      s.next = j.at("next").get<int64_t>();
      s.last = j.at("last").get<std::string>();
      s.partitions = j.at("partitions").get<uint64_t>();
      s.skipped = j.at("skipped").get<uint64_t>();
      s.serving = j.at("serving");
      s.admit = j.value("admit", nlohmann::json());
      return s;
    } catch (const std::exception& e) {
      return CorruptionError(fmt::format("{}: its stream state: {}", where, e.what()));
    }
  }
};

// When `path` was last modified (seconds since the epoch), or nullopt.
std::optional<double> ModifiedAt(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Waits for the partitions in order (stream.poll_seconds, stream.max_wait, stream.on_late).
class Follower {
 public:
  enum class Take { kTrain, kSkip, kStop };

  Follower(Env* env, const StreamOptions& o, const PartitionLayout& layout,
           const std::atomic<bool>* stop)
      : env_(env), o_(o), layout_(layout), stop_(stop) {}

  std::string Dir(int64_t p) const { return JoinPath(o_.root, layout_.Name(p)); }
  bool Ready(int64_t p) const { return env_->FileExists(JoinPath(Dir(p), o_.done_file)); }

  // Partition `want` ready (kTrain), given up as late (kSkip), or the job stopped (kStop).
  StatusOr<Take> Wait(int64_t want) {
    bool said_waiting = false;
    while (true) {
      if (stop_ != nullptr && stop_->load()) return Take::kStop;
      if (Ready(want)) {
        late_since_.reset();
        return Take::kTrain;
      }
      ASSIGN_OR_RETURN(std::vector<int64_t> later,
                       ReadyPartitions(env_, o_.root, layout_, o_.done_file, want));
      if (!later.empty()) {
        const double now = NowSeconds();
        if (!late_since_) {
          late_since_ = now;
          LOG_WARNING(
              "partition {} is not ready but {} is: waiting up to {} s for it (stream.max_wait), "
              "then {}",
              layout_.Name(want), layout_.Name(later.front()), o_.max_wait_seconds,
              o_.on_late == LateRule::kSkip   ? "skipping it (stream.on_late: skip)"
              : o_.on_late == LateRule::kFail ? "failing (stream.on_late: fail)"
                                              : "waiting on (stream.on_late: wait)");
        }
        if (o_.on_late != LateRule::kWait && now - *late_since_ >= o_.max_wait_seconds) {
          if (o_.on_late == LateRule::kFail) {
            return FailedPreconditionError(
                fmt::format("partition {} ({}) is missing while {} is ready, after waiting {} s "
                            "(stream.max_wait; stream.on_late: fail): nothing of it was trained",
                            layout_.Name(want), JoinPath(Dir(want), o_.done_file),
                            layout_.Name(later.front()), o_.max_wait_seconds));
          }
          // The wait is spent for the partitions up to the first ready one: no new wait.
          return Take::kSkip;
        }
      } else if (!said_waiting) {
        LOG_INFO("waiting for partition {} ({})", layout_.Name(want),
                 JoinPath(Dir(want), o_.done_file));
        said_waiting = true;
      }
      Sleep(o_.poll_seconds);
    }
  }

  // Sleeps `seconds`, or less once the job is stopped.
  void Sleep(double seconds) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (stop_ != nullptr && stop_->load()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  Env* const env_;
  const StreamOptions& o_;
  const PartitionLayout& layout_;
  const std::atomic<bool>* const stop_;
  std::optional<double> late_since_;
};

// A partition name of stream.start / stream.until as an ordinal.
StatusOr<std::optional<int64_t>> OrdinalOf(const PartitionLayout& layout, const std::string& name,
                                           const char* key) {
  if (name.empty()) return std::optional<int64_t>();
  std::optional<int64_t> o = layout.Ordinal(name);
  if (!o) {
    return InvalidArgumentError(
        fmt::format("{} '{}' is no partition of stream.layout '{}'", key, name, layout.text()));
  }
  return o;
}

// The newest checkpoint in ckpt.dir, read before the model is loaded: a resumed stream takes
// its schema from it (the load may fall back to an older checkpoint of the same job).
StatusOr<std::optional<CheckpointManifest>> NewestManifest(Env* env, const JobConfig& job) {
  if (!job.resume) return std::optional<CheckpointManifest>();
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, ListCheckpoints(env, job.ckpt.dir));
  // A damaged newest MANIFEST is the resume's to report (it falls back to an older one).
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    StatusOr<CheckpointManifest> m = ReadCheckpointManifest(env, job.ckpt.dir, *it);
    if (m.ok()) return std::optional<CheckpointManifest>(std::move(*m));
  }
  return std::optional<CheckpointManifest>();
}

struct Partition {
  int64_t ordinal = 0;
  std::string name;
  std::vector<std::string> files;
};

// The job reading partition p.
JobConfig PartitionJob(const JobConfig& job, const Partition& p) {
  JobConfig j = job;
  j.partition = p.name;
  j.data.paths = p.files;
  return j;
}

Status CheckSchema(const JobConfig& job, const Partition& p, const Schema& got) {
  if (got == job.spec.schema) return Status::OK();
  return InvalidArgumentError(fmt::format(
      "partition {}: its data has {} slots and {} dense values, the stream's model {} and {}",
      p.name, got.num_slots, got.num_dense, job.spec.schema.num_slots, job.spec.schema.num_dense));
}

// Admission by count (pipeline/admission.h): its counts are part of the state a partition
// commits, in a file of ckpt.dir (admit-<partition ordinal>.bin) the stream state names.
constexpr char kAdmitPrefix[] = "admit-";

StatusOr<Admission> OpenAdmission(Env* env, const JobConfig& job, const StreamState& state) {
  const uint32_t min_count = job.stream.admit_min_count;
  if (state.admit.is_null()) {
    if (state.partitions > 0) {
      LOG_WARNING("table.admit.min_count is new to this stream: counting starts now");
    }
    return Admission(min_count, job.stream.admit_bloom_bits);
  }
  std::string name, checksum;
  try {
    name = state.admit.at("file").get<std::string>();
    checksum = state.admit.at("checksum").get<std::string>();
  } catch (const std::exception& e) {
    return CorruptionError(std::string("the stream state's admission record: ") + e.what());
  }
  const std::string path = JoinPath(job.ckpt.dir, name);
  std::string bytes;
  RETURN_IF_ERROR(ReadFileToString(env, path, &bytes));
  if (Hex(XXH3_64bits(bytes.data(), bytes.size())) != checksum) {
    return CorruptionError(path + ": its checksum differs from the checkpoint's record");
  }
  ASSIGN_OR_RETURN(CountingBloom bloom, CountingBloom::Decode(bytes, path));
  if (bloom.log2_counters() != job.stream.admit_bloom_bits) {
    return InvalidArgumentError(
        fmt::format("table.admit.bloom_bits: the stream's counts have {} bits, this job sets {}",
                    bloom.log2_counters(), job.stream.admit_bloom_bits));
  }
  return Admission(min_count, std::move(bloom));
}

StatusOr<nlohmann::json> SaveAdmission(Env* env, const JobConfig& job, const Admission& a,
                                       int64_t ordinal) {
  const std::string name = fmt::format("{}{}.bin", kAdmitPrefix, ordinal);
  const std::string bytes = a.bloom().Encode();
  RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(job.ckpt.dir, name), bytes));
  return nlohmann::json{{"file", name}, {"checksum", Hex(XXH3_64bits(bytes.data(), bytes.size()))}};
}

// Deletes the admission files no checkpoint in `dir` names (after a commit and its pruning).
Status PruneAdmission(Env* env, const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, ListCheckpoints(env, dir));
  std::set<std::string> named;
  for (uint64_t id : ids) {
    StatusOr<CheckpointManifest> m = ReadCheckpointManifest(env, dir, id);
    if (!m.ok()) return Status::OK();  // nothing deleted on a guess
    if (m->stream.is_object() && m->stream.contains("admit")) {
      named.insert(m->stream["admit"].value("file", ""));
    }
  }
  ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
  for (const std::string& n : names) {
    if (n.rfind(kAdmitPrefix, 0) == 0 && !named.count(n)) {
      RETURN_IF_ERROR(env->DeleteFile(JoinPath(dir, n)));
    }
  }
  return Status::OK();
}

}  // namespace

StatusOr<nlohmann::json> RunStream(Env* env, JobConfig job, ProgressSink* sink,
                                   const std::atomic<bool>* stop, Comm* comm) {
  Stopwatch total_clock;
  if (comm != nullptr) {
    return FailedPreconditionError(
        "a stream job runs on one process for now (docs/routine.md): ranks would each take "
        "their share of every partition, which is not built yet");
  }
  RETURN_IF_ERROR(job.Validate());
  ASSIGN_OR_RETURN(const PartitionLayout layout, PartitionLayout::Parse(job.stream.layout));
  ASSIGN_OR_RETURN(const std::optional<int64_t> start_at,
                   OrdinalOf(layout, job.stream.start, "stream.start"));
  ASSIGN_OR_RETURN(const std::optional<int64_t> until,
                   OrdinalOf(layout, job.stream.until, "stream.until"));
  // The same command starts the job and continues it (--fresh starts over).
  job.resume = !job.fresh;
  job.size_to_data = false;  // partitions differ in size; the batch is the job's
  Follower follower(env, job.stream, layout, stop);

  nlohmann::json report = {{"stream", {{"root", job.stream.root}}}};
  auto interrupted = [&] {
    report["interrupted"] = true;
    return report;
  };
  // A resumed stream has its schema in its checkpoint; a new one learns it from its first
  // partition with files: stream.start, or the first ready one.
  ASSIGN_OR_RETURN(std::optional<CheckpointManifest> newest, NewestManifest(env, job));
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
    ASSIGN_OR_RETURN(std::vector<int64_t> ready,
                     ReadyPartitions(env, job.stream.root, layout, job.stream.done_file,
                                     std::numeric_limits<int64_t>::min()));
    if (!ready.empty()) {
      first = ready.front();
      break;
    }
    if (stop != nullptr && stop->load()) return interrupted();
    if (!said) {
      LOG_INFO("no partition of {} is ready under {} yet ({} marks a ready one): waiting",
               layout.text(), job.stream.root, job.stream.done_file);
    }
    follower.Sleep(job.stream.poll_seconds);
  }
  if (!newest) {
    Partition probe{*first, "", {}};
    for (int64_t p = *first; probe.files.empty(); ++p) {
      ASSIGN_OR_RETURN(Follower::Take t, follower.Wait(p));
      if (t == Follower::Take::kStop) return interrupted();
      if (t == Follower::Take::kTrain) {
        probe = {p, layout.Name(p), {}};
        ASSIGN_OR_RETURN(probe.files, PartitionFiles(env, follower.Dir(p), job.stream.done_file));
      }
    }
    job.partition = probe.name;
    job.data.paths = probe.files;
  }
  std::string ranks_ckpt_dir;
  RETURN_IF_ERROR(PrepareJob(env, nullptr, stop, &job, &ranks_ckpt_dir));
  DirLocks held;
  RETURN_IF_ERROR(HoldJobDirs(env, nullptr, ranks_ckpt_dir, &job, &held));
  if (!job.serving.dir.empty()) RETURN_IF_ERROR(held.Add(env, job.serving.dir, "serving.dir"));
  if (!newest) {
    PassReader probe([&] { return OpenData(env, job.data, job.generated, false); },
                     PassOptionsOnRanks(job, nullptr));
    RETURN_IF_ERROR(probe.Open());
    job.spec.schema = probe.schema();
  }
  RETURN_IF_ERROR(CheckModelAgainstSchema(job));
  job.spec.table.seed = job.train.seed;
  job.ckpt.every_passes = 0;  // a stream job commits after partitions, not passes
  ThreadPool pool(job.train.threads);
  Cleanup remove_scratch([&] {
    if (!job.storage.keep_store && !job.storage.ssd.dir.empty()) {
      SsdStore::RemoveFiles(env, job.storage.ssd.dir).IgnoreError();
    }
  });
  ASSIGN_OR_RETURN(TrainStart start, StartOnRanks(env, job, nullptr, "", nullptr, &pool));
  StreamState state;
  if (first) state.next = *first;
  if (start.resumed && !start.resumed->stream.is_null()) {
    ASSIGN_OR_RETURN(
        state, StreamState::FromJson(start.resumed->stream, CheckpointName(start.resumed->id)));
  } else if (start.resumed) {
    return InvalidArgumentError(fmt::format(
        "{} in {} is a checkpoint of a job of files, not of a stream: give the stream its own "
        "ckpt.dir (or --fresh)",
        CheckpointName(start.resumed->id), job.ckpt.dir));
  }
  if (start.resumed) {
    LOG_INFO("stream: {} partitions committed (the last {}); continuing at {}", state.partitions,
             state.last.empty() ? "none" : state.last, layout.Name(state.next));
  }
  std::optional<ServingPublisher> publisher;
  if (!job.serving.dir.empty() && !start.resumed) {
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
    RETURN_IF_ERROR(publisher->Recover(state.serving));
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
    ASSIGN_OR_RETURN(Follower::Take take, follower.Wait(state.next));
    if (take == Follower::Take::kStop) break;
    Partition p{state.next, layout.Name(state.next), {}};
    if (take == Follower::Take::kSkip) {
      LOG_WARNING(
          "partition {} skipped: still missing after stream.max_wait (it will not be "
          "trained, even if it arrives later)",
          p.name);
      ++state.skipped;
      ++skipped_now;
      ++state.next;
      continue;
    }
    Stopwatch clock;
    const std::optional<double> ready_at =
        ModifiedAt(JoinPath(follower.Dir(p.ordinal), job.stream.done_file));
    ASSIGN_OR_RETURN(p.files, PartitionFiles(env, follower.Dir(p.ordinal), job.stream.done_file));
    if (job.features != nullptr && job.extractor == nullptr) {
      // A resumed stream job's extract stage, opened on the first partition it reads.
      job.data.paths = p.files;
      RETURN_IF_ERROR(AttachFeatures(env, &job));
    }
    JobConfig pjob = PartitionJob(job, p);
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
        ASSIGN_OR_RETURN(online,
                         Evaluate(test.get(), *start.table, start.model.get(), job.train.batch_size,
                                  job.pipeline.pass_examples, job.EvalChunkKeys(), &pool, nullptr));
        test_seconds += test_clock.Seconds();
        line["test_seconds"] = test_clock.Seconds();
      }
      // Then train.
      PassReaderOptions passes = PassOptionsOnRanks(pjob, nullptr);
      if (admission) passes.filter = [&](Batch* b) { admission->Filter(b); };
      PassReader reader([&] { return OpenData(env, pjob.data, pjob.generated, false); }, passes);
      RETURN_IF_ERROR(reader.Open());
      RETURN_IF_ERROR(CheckSchema(job, p, reader.schema()));
      ASSIGN_OR_RETURN(PassesRun run, RunPasses(env, pjob, &reader, &start, sink, stop, &pool,
                                                nullptr, "", on_push));
      if (run.interrupted) {
        LOG_WARNING(
            "stopped while training partition {}: it is not committed; the next start "
            "trains it again from the last commit",
            p.name);
        abandoned = true;
        break;
      }
      start.position = run.position;
      examples = run.examples;
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
    std::optional<ServingVersion> version;
    if (publisher) {
      ASSIGN_OR_RETURN(version, publisher->Prepare(*start.table, *start.model, p.name));
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
    if (publisher) RETURN_IF_ERROR(publisher->Publish());
    const double published_at = NowSeconds();
    if (admission) RETURN_IF_ERROR(PruneAdmission(env, job.ckpt.dir));
    ++trained_now;
    examples_now += examples;
    commit_seconds += m.write_seconds;
    line["online"] = online.ToJson();
    line["examples"] = examples;
    line["keys"] = start.table->Stats().keys;
    line["evicted"] = evicted;
    line["checkpoint"] = CheckpointName(m.id);
    line["seconds"] = clock.Seconds();
    line["rss_bytes"] = CurrentRssBytes();
    if (version) {
      line["serving"] = version->ToJson();
      if (ready_at) line["ready_to_published_seconds"] = published_at - *ready_at;
    }
    RETURN_IF_ERROR(start.metrics_log->Write(line));
    LOG_INFO(
        "partition {}: online AUC {} logloss {:.4f} COPC {:.3f} over {} examples; trained; "
        "{} keys ({} evicted){}",
        p.name, online.AucText(), online.logloss, online.copc, online.examples,
        line["keys"].get<uint64_t>(), evicted,
        version ? fmt::format("; published {} ({}, {} rows, {} deleted)",
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
  RETURN_IF_ERROR(CommitModel(env, job, &start, start.position, &pool, &finish));
  if (finish.digest) report["digest"] = *finish.digest;
  if (finish.model_dir) report["model_dir"] = *finish.model_dir;
  report["keys"] = start.table->Stats().keys;
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
