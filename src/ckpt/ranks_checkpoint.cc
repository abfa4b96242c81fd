#include "ckpt/ranks_checkpoint.h"

#include <fmt/format.h>

#include "ckpt/checkpoint.h"
#include "ckpt/model_files.h"

namespace ctrbox {
namespace {
constexpr const char* kRanks = "RANKS";
}  // namespace

std::string RankCheckpointDir(const std::string& dir, int rank, int ranks) {
  return JoinPath(dir, fmt::format("rank-{}-of-{}", rank, ranks));
}

Status CommitRanksCheckpoint(Env* env, const std::string& dir, const RanksCheckpoint& c) {
  const nlohmann::json j = {{"format", "ctrbox-ranks-checkpoint"},
                            {"version", 1},
                            {"ranks", c.ranks},
                            {"checkpoint", CheckpointName(c.id)},
                            {"id", c.id}};
  RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(dir, kRanks), ManifestText(j)));
  return env->SyncDir(dir);
}

StatusOr<RanksCheckpoint> ReadRanksCheckpoint(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kRanks);
  if (!env->FileExists(path)) return NotFoundError(path + ": no checkpoint of the ranks yet");
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(env, path, &text));
  ASSIGN_OR_RETURN(nlohmann::json j, ParseManifestText(path, std::move(text)));
  try {
    if (j.at("format") != "ctrbox-ranks-checkpoint" || j.at("version").get<int>() != 1) {
      return CorruptionError(path + ": not a ranks checkpoint of a version this build reads");
    }
    RanksCheckpoint c;
    c.ranks = j.at("ranks").get<uint32_t>();
    c.id = j.at("id").get<uint64_t>();
    return c;
  } catch (const std::exception& e) {
    return CorruptionError(path + ": " + e.what());
  }
}

}  // namespace ctrbox
