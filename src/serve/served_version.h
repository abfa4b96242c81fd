// What a server answers with (docs/serve.md): a version of the model — its dense parameters
// and its rows — immutable, shared by the requests it answers; and the source that loads the
// newest version and follows the trainer's donefile (versions.jsonl) or a model directory.
#ifndef CTRBOX_SERVE_SERVED_VERSION_H_
#define CTRBOX_SERVE_SERVED_VERSION_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/model_spec.h"
#include "ckpt/serving_files.h"
#include "serve/served_rows.h"
#include "util/env.h"

namespace ctrbox {

struct ServedVersion {
  uint64_t version = 0;  // the donefile's version (a model directory: its generation)
  std::string name;      // "v-000012", or "generation 3"
  bool base = true;      // loaded whole (a base, a model directory) or a delta applied
  std::string partition;
  double loaded_at = 0;     // when this server made it (unix seconds)
  double published_at = 0;  // when the trainer wrote it (unix seconds; 0: unknown)
  ModelSpec spec;
  ValueLayout layout;    // the rows' (a serving layout)
  nlohmann::json input;  // what the model reads (ModelManifest::input), null if unknown
  std::string dense_payload;
  // The rows: the base's, and the deltas applied since, over them (null: none), with the
  // keys they deleted from the base (sorted).
  std::shared_ptr<const ServedRows> base_rows, overlay;
  std::shared_ptr<const std::vector<uint64_t>> deleted;
  uint64_t keys = 0;

  // Row i of *out set to key's row; false (row i untouched) when the version has none.
  bool Lookup(uint64_t key, RowBlock* out, size_t i) const;
  size_t MemoryBytes() const;
  // Of them, the rows' (base, overlay, deleted keys).
  size_t RowBytes() const;
};

// Loads versions and follows the newest. Thread safety: one thread.
class VersionSource {
 public:
  // A trainer's serving directory (its donefile), or a model directory. With `rows_dir`, the
  // rows of each base (or model) go to a file there, mapped (ServedRows::Finish(file)).
  static std::unique_ptr<VersionSource> ServingDir(Env* env, std::string dir,
                                                   std::string rows_dir = "");
  static std::unique_ptr<VersionSource> ModelDir(Env* env, std::string dir,
                                                 std::string rows_dir = "");
  virtual ~VersionSource() = default;

  // The next version to serve after `current` (null: none yet): the newest one published,
  // reached by applying the deltas after `current` or by loading the newest base with its
  // deltas; nullopt when there is nothing newer. A version that fails to load (damaged,
  // half-written, its base pruned) is an error naming it; the caller keeps `current`, and the
  // same version is not tried again until the donefile lists a newer one.
  virtual StatusOr<std::shared_ptr<const ServedVersion>> Next(
      const std::shared_ptr<const ServedVersion>& current) = 0;
  virtual std::string Describe() const = 0;
};

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_SERVED_VERSION_H_
