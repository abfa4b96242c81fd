// The model directory (docs/formats/model_dir.md): save a model as a new generation with an
// atomic MANIFEST commit, load it back with every checksum verified, and verify a directory
// without loading it (inspect).
#ifndef CTRBOX_CKPT_MODEL_DIR_H_
#define CTRBOX_CKPT_MODEL_DIR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/model_files.h"
#include "ckpt/model_spec.h"
#include "model/ctr_model.h"
#include "table/sparse_table.h"
#include "table/tiered_table.h"
#include "util/env.h"
#include "util/thread_pool.h"

namespace ctrbox {

struct ModelManifest {
  uint64_t generation = 0;
  ModelSpec spec;
  std::vector<ModelFileInfo> files;  // sparse, then dense
  uint64_t keys = 0, keys_with_embedding = 0, bytes_live = 0, dense_params = 0;
  std::string digest;
  uint64_t trained_examples = 0;
  // The input it was trained on, for eval and predict to read theirs alike: {"format",
  // "slot_from", "num_slots", "num_dense"} or {"format": "views", "features"}; null in
  // models saved before it was recorded.
  nlohmann::json input;

  nlohmann::json ToJson() const;
};

// True when `dir` holds a MANIFEST.
bool ModelExists(Env* env, const std::string& dir);

// The model files (sparse-*.bin, dense-*.bin) in `dir`, by name; empty when `dir` does not
// exist. With no MANIFEST beside them they are a model whose MANIFEST was lost, or a first
// save that did not finish: nothing a job should overwrite without being told (--fresh).
StatusOr<std::vector<std::string>> ModelFilesIn(Env* env, const std::string& dir);

StatusOr<ModelManifest> ReadManifest(Env* env, const std::string& dir);

// Saves the table and the dense state as the next generation in `dir` (created if needed)
// and commits it; then deletes the previous generation's files.
StatusOr<ModelManifest> SaveModel(Env* env, const std::string& dir, const ModelSpec& spec,
                                  SparseTable& table, const CtrModel& model,
                                  uint64_t trained_examples, ThreadPool* pool,
                                  const nlohmann::json& input = nullptr);

// ---- A model saved by the ranks of a distributed job (docs/distributed.md): one directory
// whose MANIFEST (version 2) names one sparse file per rank, then the dense file. Every rank
// writes its part's file (SaveRankModelPart), the ranks exchange what they wrote (the caller's
// transport: RankModelPart::Encode / Decode), and rank 0 writes the dense file and commits the
// MANIFEST (CommitRanksModel). Readers load every sparse file; the digest is the one a
// single process computes over the same rows.
struct RankModelPart {
  uint64_t generation = 0;  // the generation the part belongs to
  ModelFileInfo file;
  SparseCounts counts;

  std::string Encode() const;
  static StatusOr<RankModelPart> Decode(std::string_view bytes);
};
// The generation the next save of `dir` writes (1 + the committed one, or 1).
StatusOr<uint64_t> NextGeneration(Env* env, const std::string& dir);
// Writes rank `rank`'s file of generation `generation` (sparse-G-rRRRR.bin) and fsyncs it.
StatusOr<RankModelPart> SaveRankModelPart(Env* env, const std::string& dir, uint64_t generation,
                                          int rank, SparseTable& table);
// Writes the dense file and commits the MANIFEST naming `parts` (in rank order); then deletes
// the files of older generations. REQUIRES: every part of the same generation.
StatusOr<ModelManifest> CommitRanksModel(Env* env, const std::string& dir, const ModelSpec& spec,
                                         const CtrModel& model, uint64_t trained_examples,
                                         const std::vector<RankModelPart>& parts,
                                         const nlohmann::json& input = nullptr);

// Loads the model named by `manifest` into `table` and `model`, which must have been built
// from manifest.spec (empty table): the rows `keep` keeps. Verifies checksums, counts and the
// digest (over every row read, kept or not).
Status LoadModel(Env* env, const std::string& dir, const ModelManifest& manifest,
                 SparseTable* table, CtrModel* model, ThreadPool* pool,
                 const KeyFilter& keep = nullptr);

// Streams the model named by `manifest` without a table: every row to on_block (blocks of
// `layout`, the model's value layout), the dense payload applied to *model (built from
// manifest.spec). Verifies checksums, counts and the digest as LoadModel does; an error
// names the file.
Status StreamModel(Env* env, const std::string& dir, const ModelManifest& manifest,
                   const ValueLayout& layout, CtrModel* model,
                   const std::function<Status(RowBlock&)>& on_block);

// Reads every file of the model in `dir`, verifying checksums and recomputing the counts and
// the digest, which must match the MANIFEST. Returns the manifest.
StatusOr<ModelManifest> VerifyModel(Env* env, const std::string& dir);

// A model read back from a directory, ready to predict or to continue training.
struct LoadedModel {
  ModelManifest manifest;
  std::unique_ptr<CtrModel> model;
  std::unique_ptr<SparseTable> table;
};
// `storage` says where the rows go (its layout is set from the model's spec).
StatusOr<LoadedModel> OpenModel(Env* env, const std::string& dir, TieredOptions storage,
                                ThreadPool* pool, const KeyFilter& keep = nullptr);

// The digest of a model in memory (equal to the saved model's digest).
StatusOr<std::string> ModelDigest(SparseTable& table, const CtrModel& model, ThreadPool* pool);

}  // namespace ctrbox

#endif  // CTRBOX_CKPT_MODEL_DIR_H_
