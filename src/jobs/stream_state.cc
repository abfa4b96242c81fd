#include "jobs/stream_state.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <set>

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
