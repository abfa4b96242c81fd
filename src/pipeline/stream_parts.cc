#include "pipeline/stream_parts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>
#include <thread>

#include "ckpt/model_files.h"
#include "ckpt/ranks_checkpoint.h"
#include "util/logging.h"
#include "util/parse.h"

namespace ctrbox::stream_parts {
namespace {

constexpr char kAdmitPrefix[] = "admit-";

}  // namespace

void StreamState::Skip(int64_t first, int64_t last) {
  skipped += static_cast<uint64_t>(last - first + 1);
  if (!skipped_runs.empty() && skipped_runs.back().second + 1 == first) {
    skipped_runs.back().second = last;
  } else {
    skipped_runs.emplace_back(first, last);
  }
  if (skipped_runs.size() > kSkippedRuns) skipped_runs.erase(skipped_runs.begin());
}

nlohmann::json StreamState::ToJson() const {
  nlohmann::json j = {{"next", next},
                      {"last", last},
                      {"partitions", partitions},
                      {"skipped", skipped},
                      {"serving", serving}};
  if (!skipped_runs.empty()) j["skipped_runs"] = skipped_runs;
  if (!serving_dir.empty()) j["serving_dir"] = serving_dir;
  if (!admit.is_null()) j["admit"] = admit;
  return j;
}

StatusOr<StreamState> StreamState::FromJson(const nlohmann::json& j, const std::string& where) {
  try {
    StreamState s;
    s.next = j.at("next").get<int64_t>();
    s.last = j.at("last").get<std::string>();
    s.partitions = j.at("partitions").get<uint64_t>();
    s.skipped = j.at("skipped").get<uint64_t>();
    s.skipped_runs = j.value("skipped_runs", decltype(s.skipped_runs)());
    s.serving_dir = j.value("serving_dir", std::string());
    s.serving = j.at("serving");
    s.admit = j.value("admit", nlohmann::json());
    return s;
  } catch (const std::exception& e) {
    return CorruptionError(fmt::format("{}: its stream state: {}", where, e.what()));
  }
}

double NowSeconds(Env* env) { return static_cast<double>(env->NowMicros()) * 1e-6; }

bool Follower::Takeable(int64_t p, std::optional<int64_t> want) {
  std::string why;
  if (const std::optional<int64_t> begins = layout_.StartSeconds(p);
      begins && static_cast<double>(*begins) > NowSeconds(env_) + o_.max_ahead_seconds) {
    why = fmt::format(
        "it begins {:.0f} s after the clock, more than stream.max_ahead {} s: it is taken once "
        "the clock reaches it (a wrong name or a wrong clock?)",
        static_cast<double>(*begins) - NowSeconds(env_), o_.max_ahead_seconds);
  } else if (want && o_.max_gap > 0 && p - *want > static_cast<int64_t>(o_.max_gap)) {
    why = fmt::format(
        "it lies {} partitions after {}, the next one, more than stream.max_gap {}: it is "
        "taken once the stream reaches it (to move on to it now, start the job with "
        "stream.start={})",
        p - *want, layout_.Name(*want), o_.max_gap, layout_.Name(p));
  }
  if (why.empty()) return true;
  if (named_.insert("ahead " + std::to_string(p)).second) {
    LOG_WARNING("partition {} ({}) is ready but not taken: {}", layout_.Name(p), Dir(p), why);
  }
  return false;
}

void Follower::Notice(const PartitionScan& scan, int64_t want) {
  for (const std::string& name : scan.unreadable) {
    if (named_.insert("unreadable " + name).second) {
      LOG_WARNING("{}: not a partition of stream.layout '{}' (left alone)", JoinPath(o_.root, name),
                  layout_.text());
    }
  }
  if (skipped_ == nullptr) return;
  for (int64_t p : scan.ready) {
    if (p >= want) break;
    for (const auto& [first, last] : *skipped_) {
      if (p >= first && p <= last && named_.insert("landed " + std::to_string(p)).second) {
        LOG_WARNING(
            "partition {} is ready now, after the stream skipped it: it is not trained "
            "(stream.on_late: skip; docs/routine.md)",
            layout_.Name(p));
      }
    }
  }
}

StatusOr<std::optional<int64_t>> Follower::FirstReady() {
  ASSIGN_OR_RETURN(PartitionScan scan, ScanPartitions(env_, o_.root, layout_, o_.done_file));
  Notice(scan, std::numeric_limits<int64_t>::min());
  for (int64_t p : scan.ready) {
    if (Takeable(p, std::nullopt)) return std::optional<int64_t>(p);
  }
  return std::optional<int64_t>();
}

StatusOr<Follower::Take> Follower::Poll(int64_t want) {
  if (stop_ != nullptr && stop_->load()) return Take::kStop;
  ASSIGN_OR_RETURN(PartitionScan scan, ScanPartitions(env_, o_.root, layout_, o_.done_file));
  Notice(scan, want);
  const auto at = std::lower_bound(scan.ready.begin(), scan.ready.end(), want);
  if (at != scan.ready.end() && *at == want && Takeable(want, want)) {
    late_since_.reset();
    said_waiting_ = false;
    return Take::kTrain;
  }
  std::optional<int64_t> later;  // the first partition after `want` that may come next
  for (auto it = std::upper_bound(scan.ready.begin(), scan.ready.end(), want);
       it != scan.ready.end() && !later; ++it) {
    if (Takeable(*it, want)) later = *it;
  }
  if (later) {
    const double now = NowSeconds(env_);
    if (!late_since_) {
      late_since_ = now;
      LOG_WARNING(
          "partition {} is not ready but {} is: waiting up to {} s for it (stream.max_wait), "
          "then {}",
          layout_.Name(want), layout_.Name(*later), o_.max_wait_seconds,
          o_.on_late == LateRule::kSkip   ? "skipping it (stream.on_late: skip)"
          : o_.on_late == LateRule::kFail ? "failing (stream.on_late: fail)"
                                          : "waiting on (stream.on_late: wait)");
    }
    if (o_.on_late != LateRule::kWait && now - *late_since_ >= o_.max_wait_seconds) {
      if (o_.on_late == LateRule::kFail) {
        return FailedPreconditionError(
            fmt::format("partition {} ({}) is missing while {} is ready, after waiting {} s "
                        "(stream.max_wait; stream.on_late: fail): nothing of it was trained",
                        layout_.Name(want), JoinPath(Dir(want), o_.done_file), layout_.Name(*later),
                        o_.max_wait_seconds));
      }
      // The wait is spent for the partitions up to the first ready one: all are skipped.
      late_since_.reset();
      said_waiting_ = false;
      skip_to_ = *later;
      return Take::kSkip;
    }
  } else if (!said_waiting_) {
    LOG_INFO("waiting for partition {} ({})", layout_.Name(want),
             JoinPath(Dir(want), o_.done_file));
    said_waiting_ = true;
  }
  return Take::kWait;
}

StatusOr<Follower::Take> Follower::Wait(int64_t want) {
  while (true) {
    ASSIGN_OR_RETURN(Take t, Poll(want));
    if (t != Take::kWait) return t;
    Sleep(o_.poll_seconds);
  }
}

StatusOr<Follower::Take> Follower::WaitOnRanks(Comm* comm, int64_t want) {
  if (comm == nullptr) return Wait(want);
  while (true) {
    // Rank 0's look ("T" train, "S" skip, "W" wait, or "E" and why it failed), then each
    // rank's stop ("1": stopped).
    std::string mine;
    if (comm->rank() == 0) {
      StatusOr<Take> t = Poll(want);
      mine = !t.ok()              ? "E" + t.status().ToString()
             : *t == Take::kTrain ? "T"
             : *t == Take::kSkip  ? "S" + std::to_string(skip_to_)
                                  : "W";  // (a stop is each rank's own, below)
    }
    const bool stopped = stop_ != nullptr && stop_->load();
    mine = (stopped ? "1" : "0") + mine;
    std::vector<std::string> all;
    RETURN_IF_ERROR(comm->AllGather(mine, &all));
    for (const std::string& s : all) {
      if (!s.empty() && s[0] == '1') return Take::kStop;
    }
    const std::string& zero = all.at(0);
    if (zero.size() < 2) return InternalError("stream: rank 0 sent no decision");
    switch (zero[1]) {
      case 'T':
        return Take::kTrain;
      case 'S':
        skip_to_ = std::stoll(zero.substr(2));
        return Take::kSkip;
      case 'E':
        return FailedPreconditionError("rank 0: " + zero.substr(2));
      default:
        break;
    }
    Sleep(o_.poll_seconds);
  }
}

void Follower::Sleep(double seconds) const {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (stop_ != nullptr && stop_->load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

StatusOr<Partition> TakePartition(Env* env, const PartitionLayout& layout, int64_t p,
                                  const std::string& dir, const std::string& done_file) {
  Partition part{p, layout.Name(p), {}, {}, std::nullopt};
  std::vector<std::string> ignored;
  ASSIGN_OR_RETURN(part.files, PartitionFiles(env, dir, done_file, &ignored));
  if (!ignored.empty()) {
    LOG_WARNING("partition {}: {} left out (not regular files: subdirectories, FIFOs, sockets)",
                part.name, fmt::join(ignored, ", "));
  }
  const std::string done = JoinPath(dir, done_file);
  ASSIGN_OR_RETURN(const FileStat marked, env->Stat(done));
  part.done_at = marked.modified_ns * 1e-9;
  for (const std::string& f : part.files) {
    ASSIGN_OR_RETURN(FileStat st, env->Stat(f));
    if (st.modified_ns > marked.modified_ns) {
      return FailedPreconditionError(fmt::format(
          "partition {}: {} changed after its done file {} was written ({} ns later): the "
          "partition is not the one marked done, so none of it is trained. Write the partition "
          "again and its done file last, then start the job again",
          part.name, f, done, st.modified_ns - marked.modified_ns));
    }
    part.stats.push_back(st);
  }
  return part;
}

Status CheckUnchanged(Env* env, const Partition& p) {
  for (size_t i = 0; i < p.files.size(); ++i) {
    StatusOr<FileStat> now = env->Stat(p.files[i]);
    const FileStat& then = p.stats.at(i);
    if (!now.ok() || now->size != then.size || now->modified_ns != then.modified_ns) {
      return FailedPreconditionError(fmt::format(
          "partition {}: {} changed while it was read ({} bytes when taken, {} now): nothing of "
          "the partition is committed; the next start takes it again",
          p.name, p.files[i], then.size,
          now.ok() ? std::to_string(now->size) : now.status().ToString()));
    }
  }
  return Status::OK();
}

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

StatusOr<std::optional<CheckpointManifest>> NewestManifest(Env* env, const JobConfig& job,
                                                           int ranks) {
  if (!job.resume) return std::optional<CheckpointManifest>();
  std::string dir = job.ckpt.dir;
  if (ranks > 1) {
    StatusOr<RanksCheckpoint> r = ReadRanksCheckpoint(env, job.ckpt.dir);
    if (r.status().code() == StatusCode::kNotFound) return std::optional<CheckpointManifest>();
    RETURN_IF_ERROR(r.status());
    if (r->ranks != static_cast<uint32_t>(ranks)) {
      return InvalidArgumentError(fmt::format(
          "ckpt.dir {} holds a stream job of {} ranks: a stream job continues on the ranks that "
          "wrote it (mpirun -np {}), or starts over with --fresh",
          job.ckpt.dir, r->ranks, r->ranks));
    }
    dir = RankCheckpointDir(job.ckpt.dir, 0, ranks);
  }
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, ListCheckpoints(env, dir));
  // A damaged newest MANIFEST is the resume's to report (it falls back to an older one).
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    StatusOr<CheckpointManifest> m = ReadCheckpointManifest(env, dir, *it);
    if (m.ok()) return std::optional<CheckpointManifest>(std::move(*m));
  }
  return std::optional<CheckpointManifest>();
}

JobConfig PartitionJob(const JobConfig& job, const Partition& p, int rank) {
  JobConfig j = job;
  j.partition = p.name;
  j.data.paths = p.files;
  const int n = job.dist.ranks;
  if (n > 1) {
    if (p.files.size() >= static_cast<size_t>(n)) {
      j.data.paths.clear();
      for (size_t i = rank; i < p.files.size(); i += n) j.data.paths.push_back(p.files[i]);
    } else {
      j.data.byte_share = ByteShare{static_cast<uint32_t>(rank), static_cast<uint32_t>(n)};
    }
  }
  return j;
}

Status CheckSchema(const JobConfig& job, const Partition& p, const Schema& got) {
  if (got == job.spec.schema) return Status::OK();
  return InvalidArgumentError(fmt::format(
      "partition {}: its data has {} slots and {} dense values, the stream's model {} and {}",
      p.name, got.num_slots, got.num_dense, job.spec.schema.num_slots, job.spec.schema.num_dense));
}

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

}  // namespace ctrbox::stream_parts
