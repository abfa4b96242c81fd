// A directory of shards, as `ctrbox convert` writes it: part-NNNNN.ctrshard files and a SHARDS
// manifest, the completion marker, written last (after every shard file and the directory are
// synced; leveldb's CURRENT). A directory without one is a conversion that did not finish, and
// no reader uses it. The layout is specified in docs/formats/shard.md.
#ifndef CTRBOX_IO_SHARD_DIR_H_
#define CTRBOX_IO_SHARD_DIR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/batch.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

inline constexpr std::string_view kShardManifestName = "SHARDS";
inline constexpr std::string_view kShardSuffix = ".ctrshard";

struct ShardFileEntry {
  std::string name;  // within the directory
  uint64_t rows = 0;
  uint64_t bytes = 0;
};

struct ShardDirManifest {
  Schema schema;
  std::vector<ShardFileEntry> files;
  uint64_t rows() const;
};

// The manifest's text: a version line, the schema, one line per file, the totals and a
// checksum line over all of it.
std::string EncodeShardManifest(const ShardDirManifest& m);
// Parses a manifest; errors name `where` (the manifest's path) and the line at fault.
StatusOr<ShardDirManifest> DecodeShardManifest(std::string_view text, const std::string& where);

// Writes `dir`/SHARDS atomically and durably. Call only once every listed file is synced.
Status WriteShardManifest(Env* env, const std::string& dir, const ShardDirManifest& m);

// Reads `dir`/SHARDS and checks the directory against it: every listed file present with its
// listed size, and no *.ctrshard file it does not list. A missing manifest is an error that
// says the conversion did not finish.
StatusOr<ShardDirManifest> ReadShardManifest(Env* env, const std::string& dir);

// Makes `dir` ready for a new conversion: creates it, or, when it holds an earlier
// conversion, deletes that conversion's manifest first (from then on the directory reads as
// unfinished) and then its shard files. Refuses a directory that holds anything else, so a
// mistyped --out never deletes a user's files. Returns the number of shard files deleted.
StatusOr<size_t> ClearShardDir(Env* env, const std::string& dir);

// Deletes the shard files (finished or *.tmp) of a conversion that failed, so that a full disk
// is given back; the directory itself is deleted if it is then empty and was created by it.
void RemoveFailedConversion(Env* env, const std::string& dir, bool created_dir);

}  // namespace ctrbox

#endif  // CTRBOX_IO_SHARD_DIR_H_
