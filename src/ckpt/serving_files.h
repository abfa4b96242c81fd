// The serving directory a stream job publishes (docs/routine.md): versions, each a base (every
// row) or a delta (the rows changed and the keys deleted since the version before it), as
// directories v-NNNNNN/, and the donefile versions.jsonl that lists them, one JSON line per
// published version. A version is published when its line is in the donefile; the donefile
// is replaced atomically (write, fsync, rename, fsync the directory), so a reader sees every
// version whole or not at all. Serving rows carry no optimizer state and may be stored at 16
// or 8 bits, and no counters (show, click, unseen: the trainer's).
#ifndef CTRBOX_CKPT_SERVING_FILES_H_
#define CTRBOX_CKPT_SERVING_FILES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/model_files.h"
#include "ckpt/model_spec.h"
#include "table/value.h"
#include "util/env.h"

namespace ctrbox {

// One line of versions.jsonl.
struct ServingVersion {
  uint64_t version = 0;       // 1, 2, ...: the order of publication
  bool base = true;           // a base holds every row; a delta applies on `parent`
  uint64_t base_version = 0;  // the base its chain starts with (its own number for a base)
  uint64_t parent = 0;        // the version a delta applies on (0 for a base)
  std::string partition;      // the last partition trained into it
  uint64_t rows = 0;          // rows in its sparse file
  uint64_t deleted = 0;       // keys it deletes (a delta)
  uint64_t keys = 0;          // rows of the model once it is applied
  uint64_t bytes = 0;         // its files' bytes, MANIFEST included
  std::string checksum;       // XXH3-64 (hex) of its MANIFEST, which holds its files' checksums
  std::string time;           // when it was written (UTC, ISO 8601)

  nlohmann::json ToJson() const;
  // Corruption naming `where` (the donefile and line) when `j` is no version line.
  static StatusOr<ServingVersion> FromJson(const nlohmann::json& j, const std::string& where);
};

// "v-000012".
std::string ServingVersionName(uint64_t version);
inline constexpr char kServingDonefile[] = "versions.jsonl";

// The layout serving rows are stored in: the table's rows without optimizer state, the
// embedding as `bits`-bit codes over [-range, range] (0: float32).
ValueLayout ServingLayout(const ValueLayout& table, uint32_t bits, float range);

// Writes one version's directory (not yet published: AppendVersion does that). A writer
// destroyed before its Finish succeeded deletes the directory: a version that failed to
// write (a full disk) is never left behind.
class ServingVersionWriter {
 public:
  ~ServingVersionWriter();
  // `table_layout`: the rows AddRows takes; `layout`: ServingLayout of it.
  static StatusOr<std::unique_ptr<ServingVersionWriter>> Create(Env* env, const std::string& dir,
                                                                ServingVersion v, ModelSpec spec,
                                                                const ValueLayout& table_layout,
                                                                const ValueLayout& layout);
  // Rows as the table holds them (their state and counters are left out).
  Status AddRows(const RowBlock& rows);
  // What the model reads (ModelManifest::input: the format, the schema), for a server that
  // takes text records; recorded in the MANIFEST.
  void SetInput(nlohmann::json input) { input_ = std::move(input); }
  // Keys a delta deletes.
  Status AddDeleted(const std::vector<uint64_t>& keys);
  // Writes the deleted keys, the dense payload and the MANIFEST, fsyncs all and the
  // directory; returns the version's donefile line (keys: the model's rows after it).
  StatusOr<ServingVersion> Finish(const std::string& dense_payload, uint64_t keys);

 private:
  ServingVersionWriter(Env* env, std::string path, ServingVersion v, ModelSpec spec,
                       const ValueLayout& layout);
  Env* const env_;
  const std::string path_;
  ServingVersion v_;
  const ModelSpec spec_;
  const ValueLayout layout_;
  std::unique_ptr<SparseFileWriter> sparse_;
  RowBlock scratch_;
  std::vector<uint64_t> deleted_;
  nlohmann::json input_;
  bool finished_ = false;
};

// The donefile's versions in order; none when it does not exist. Corruption naming the file
// and line for a line that is not a version, or versions out of order.
StatusOr<std::vector<ServingVersion>> ReadServingVersions(Env* env, const std::string& dir);
// Publishes `v`: the donefile with its line added, replaced atomically.
Status AppendServingVersion(Env* env, const std::string& dir, const ServingVersion& v);
// Verifies a listed version's MANIFEST checksum and every file's size and checksum.
Status VerifyServingVersion(Env* env, const std::string& dir, const ServingVersion& v);

// One version's contents, each file read once and verified against its MANIFEST (whose
// checksum the donefile holds): its rows go to on_rows block by block (in the serving layout),
// the rest is returned. The dense payload is read only when `dense` is set.
struct ServingVersionData {
  ModelSpec spec;
  ValueLayout layout;
  std::vector<uint64_t> deleted;  // a delta's
  std::string dense_payload;
  nlohmann::json input;  // what the model reads (null: not recorded)
};
using ServingRowsFn = std::function<Status(RowBlock& rows)>;
// Its MANIFEST alone, verified against the donefile: the spec, layout and input.
StatusOr<ServingVersionData> ReadServingVersionManifest(Env* env, const std::string& dir,
                                                        const ServingVersion& v);
StatusOr<ServingVersionData> ReadServingVersion(Env* env, const std::string& dir,
                                                const ServingVersion& v,
                                                const ServingRowsFn& on_rows, bool dense);

// A model as serving sees it after `version` is applied: its base, then its deltas in order.
struct ServingState {
  uint64_t version = 0;
  ModelSpec spec;
  ValueLayout layout;
  std::map<uint64_t, std::string> rows;  // key -> the row's encoding in `layout`
  std::string dense_payload;
};
// Loads version `version` (listed in the donefile) with its chain, reading each file once
// and verifying it against its MANIFEST (whose checksum the donefile holds).
StatusOr<ServingState> LoadServingState(Env* env, const std::string& dir, uint64_t version);

// Keeps the newest `keep_bases` bases and every version after the oldest of them: the others
// leave the donefile (atomically), then their directories are deleted. Also deletes version
// directories above the newest listed one that `keep_unlisted` does not name (a version
// written by a job that died before publishing it).
Status PruneServing(Env* env, const std::string& dir, uint32_t keep_bases,
                    uint64_t keep_unlisted = 0);

}  // namespace ctrbox

#endif  // CTRBOX_CKPT_SERVING_FILES_H_
