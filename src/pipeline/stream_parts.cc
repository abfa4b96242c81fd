#include "pipeline/stream_parts.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <chrono>
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

nlohmann::json StreamState::ToJson() const {
  nlohmann::json j = {{"next", next},
                      {"last", last},
                      {"partitions", partitions},
                      {"skipped", skipped},
                      {"serving", serving}};
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
    s.serving = j.at("serving");
    s.admit = j.value("admit", nlohmann::json());
    return s;
  } catch (const std::exception& e) {
    return CorruptionError(fmt::format("{}: its stream state: {}", where, e.what()));
  }
}

std::optional<double> ModifiedAt(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

StatusOr<Follower::Take> Follower::Poll(int64_t want) {
  if (stop_ != nullptr && stop_->load()) return Take::kStop;
  if (Ready(want)) {
    late_since_.reset();
    said_waiting_ = false;
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
      said_waiting_ = false;
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
             : *t == Take::kSkip  ? "S"
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
