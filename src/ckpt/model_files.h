// The file formats the model directory and checkpoints share (docs/formats/model_dir.md):
// the sparse file (blocks of canonical row encodings), the dense file, and a JSON MANIFEST
// with a checksum line. Internal to the ckpt module.
#ifndef CTRBOX_CKPT_MODEL_FILES_H_
#define CTRBOX_CKPT_MODEL_FILES_H_

#include <xxhash.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/ctr_model.h"
#include "table/sparse_table.h"
#include "table/value.h"
#include "util/env.h"

namespace ctrbox {

struct ModelFileInfo {
  std::string name;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the whole file
};

std::string Hex(uint64_t v);
StatusOr<uint64_t> ParseHex(const std::string& path, const std::string& field,
                            const std::string& text);

// A MANIFEST's "files" array, and back (a bad entry is corruption of `path`).
nlohmann::json FilesToJson(const std::vector<ModelFileInfo>& files);
StatusOr<std::vector<ModelFileInfo>> FilesFromJson(const std::string& path,
                                                   const nlohmann::json& j);

// What a sparse file holds: rows, rows with an embedding, row bytes without keys, and the
// wrapping sum of every row encoding's Checksum64 (the sparse part of a digest).
// Which keys' rows a load keeps (all when empty): a rank of a distributed job keeps those it
// owns (docs/distributed.md), whatever the number of ranks that saved the model.
using KeyFilter = std::function<bool(uint64_t key)>;

struct SparseCounts {
  uint64_t rows = 0, with_emb = 0, bytes_live = 0, sum = 0;
};

// Writes a sparse file: Add appends rows in blocks of at most 65 536 (a block never spans two
// Add calls), Finish writes the footer, fsyncs and closes.
class SparseFileWriter {
 public:
  static StatusOr<std::unique_ptr<SparseFileWriter>> Create(Env* env, const std::string& path,
                                                            const ValueLayout& layout);
  ~SparseFileWriter();
  Status Add(const RowBlock& rows);
  Status Finish();
  const SparseCounts& counts() const { return counts_; }
  // After Finish: the file's size and checksum, under `name`.
  ModelFileInfo Info(const std::string& name) const;

 private:
  SparseFileWriter(std::unique_ptr<WritableFile> file);
  Status Append(std::string_view d);

  std::unique_ptr<WritableFile> file_;
  XXH3_state_t state_;
  uint64_t bytes_ = 0, blocks_ = 0;
  SparseCounts counts_;
  std::string enc_;
};

// Inserts the rows of `rows` that `keep` keeps (all when empty) into `table`; scratch holds
// the kept rows between calls.
Status InsertKept(SparseTable* table, const RowBlock& rows, const KeyFilter& keep,
                  RowBlock* scratch, ThreadPool* pool);

// Writes every row of `table` (all tiers, stripe by stripe) as the sparse file `dir`/`name`,
// fsynced; *info and *counts describe it.
Status WriteTableSparseFile(Env* env, const std::string& dir, const std::string& name,
                            SparseTable& table, ModelFileInfo* info, SparseCounts* counts);

// Streams the sparse file at `path`, verifying every checksum and the layout; calls on_block
// with each block's rows. *file_checksum is the whole file's XXH3-64.
Status ReadSparseFile(Env* env, const std::string& path, const ValueLayout& layout,
                      const std::function<Status(RowBlock&)>& on_block, SparseCounts* counts,
                      uint64_t* file_checksum);

// The dense file's payload (everything before its trailing checksum).
std::string DensePayload(const CtrModel& model);
// The parameters alone, for serving (docs/routine.md): the same header, no optimizer state.
std::string DenseParamsPayload(const CtrModel& model);
// Writes payload + checksum to `path`, fsynced; *info gets its size and checksum.
Status WriteDenseFile(Env* env, const std::string& path, const std::string& payload,
                      ModelFileInfo* info);
// Reads and verifies a dense file; returns its payload.
StatusOr<std::string> ReadDenseFile(Env* env, const std::string& path, uint64_t* file_checksum);
// Sets the model's dense parameters and optimizer state from a payload read from `path` (of
// DensePayload; or of DenseParamsPayload: the parameters alone, the state left as it is).
Status ApplyDensePayload(const std::string& payload, const std::string& path, CtrModel* model);

// The digest of a model state: XXH3(sparse_sum u64 | keys u64 | dense payload), hex.
std::string StateDigest(uint64_t sparse_sum, uint64_t keys, const std::string& dense_payload);

// A MANIFEST's text: the JSON, then "#checksum <hex>" of everything before it.
std::string ManifestText(const nlohmann::json& j);
// Verifies the checksum line of a MANIFEST read from `path` and parses the JSON.
StatusOr<nlohmann::json> ParseManifestText(const std::string& path, std::string text);

}  // namespace ctrbox

#endif  // CTRBOX_CKPT_MODEL_FILES_H_
