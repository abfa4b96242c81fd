// Checkpoints of a train job (docs/checkpoints.md): every ckpt.every_passes passes and at the
// end, the whole training state is committed as a directory ckpt.dir/ckpt-NNNNNN, either a
// base (every row) or a delta (the rows pushed since the previous checkpoint). A resumed job
// loads the newest checkpoint whose chain verifies and continues exactly.
//
// Commit (leveldb style): sparse.bin and dense.bin are written into ckpt-N/ and fsynced, then
// MANIFEST is written to MANIFEST.tmp, fsynced, renamed into place, ckpt-N/ is fsynced and
// then ckpt.dir/. A checkpoint directory without a MANIFEST is incomplete: never read, and
// removed when the next job starts. Old checkpoints are pruned only after a commit.
#ifndef CTRBOX_CKPT_CHECKPOINT_H_
#define CTRBOX_CKPT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/model_files.h"
#include "ckpt/model_spec.h"
#include "model/ctr_model.h"
#include "table/sparse_table.h"
#include "util/env.h"
#include "util/thread_pool.h"

namespace ctrbox {

struct CheckpointOptions {
  std::string dir;            // "": no checkpoints
  uint32_t every_passes = 1;  // a checkpoint after every this many passes (and at the end)
  uint32_t base_every = 8;    // at least every this many checkpoints is a base
  uint32_t keep = 2;          // the newest checkpoints kept, with the chains they need
};

// Where a train job stands after a number of pushed passes, over all its runs.
struct TrainPosition {
  uint64_t passes = 0;            // passes pushed
  uint64_t grid_passes = 0;       // ... the passes of pipeline.pass_examples they make up
  uint64_t examples = 0;          // examples in those passes
  uint64_t trained_examples = 0;  // plus the examples of the model the job continued
  uint64_t embeddings_created = 0;
  uint64_t keys_shrunk = 0;

  nlohmann::json ToJson() const;
};

struct CheckpointManifest {
  uint64_t id = 0;
  bool base = true;
  uint64_t base_id = 0;  // where its chain starts (its own id for a base)
  uint64_t parent = 0;   // the checkpoint before it in the job (0: none); a delta applies on it
  ModelSpec spec;
  nlohmann::json settings;  // the job settings that change results (resume compares them)
  TrainPosition position;
  std::vector<ModelFileInfo> files;  // sparse.bin, dense.bin
  uint64_t rows = 0;                 // rows in sparse.bin
  uint64_t keys = 0;                 // rows in the table once it is applied
  std::string digest;                // of the state; "" when not recorded (mid-run deltas)
  uint32_t depth = 0;                // deltas between it and its base (0: a base)
  double write_seconds = 0;
  // A stream job's place in its stream (docs/routine.md): the partitions committed and the
  // serving version published with them; null for a job of files.
  nlohmann::json stream;
  // A job validated per epoch (docs/model.md, "Validation and early stopping"): the epochs
  // done, their validation metrics, the best one and its saved copy; null otherwise.
  nlohmann::json epochs;
  // A delta after which the table was shrunk (a stream job's TTL eviction): the shrink's
  // settings, replayed by the loader after the delta's rows (decay, delete_threshold,
  // delete_after_unseen, nonclk_coeff, click_coeff); null: none. Shrinking is a function of
  // the rows, so the replay gives the state bit for bit, without a base.
  nlohmann::json shrink;

  nlohmann::json ToJson() const;
};

// "ckpt-000012".
std::string CheckpointName(uint64_t id);

// The ids of the complete checkpoints in `dir` (a MANIFEST is there), ascending; none if `dir`
// does not exist.
StatusOr<std::vector<uint64_t>> ListCheckpoints(Env* env, const std::string& dir);
StatusOr<CheckpointManifest> ReadCheckpointManifest(Env* env, const std::string& dir, uint64_t id);

// Deletes the incomplete checkpoint directories in `dir` (those without a MANIFEST).
Status RemoveIncompleteCheckpoints(Env* env, const std::string& dir);
// Deletes every checkpoint in `dir` whose id is above `id` (0: all), complete or not (a rank's
// checkpoints that the ranks never committed together: ranks_checkpoint.h).
Status RemoveCheckpointsAfter(Env* env, const std::string& dir, uint64_t id);

// Loads checkpoint `id` into an empty table and a model built from its spec: its base, then
// every delta of its chain in order, then its dense state. Verifies every file's checksum,
// the row counts after each step and, where recorded, the digest.
// With `keep`, only the rows it keeps go into the table (a rank of another number of ranks
// taking its share; docs/distributed.md): the files' checksums and row counts are verified,
// the table's key count and the digest, which describe the whole chain, are not.
Status LoadCheckpoint(Env* env, const std::string& dir, uint64_t id, SparseTable* table,
                      CtrModel* model, ThreadPool* pool, CheckpointManifest* manifest,
                      const KeyFilter& keep = nullptr);

struct ResumedState {
  CheckpointManifest manifest;
  std::vector<std::string> warnings;  // the newer checkpoints that did not load, and why
  std::unique_ptr<CtrModel> model;
  std::unique_ptr<SparseTable> table;
};
// Builds an empty table for a model (a fresh one per attempt).
using TableFactory =
    std::function<StatusOr<std::unique_ptr<SparseTable>>(const ValueLayout& layout)>;

// Loads the newest checkpoint in `dir` that loads and verifies. Each one that fails is
// reported with a warning naming it, the file and the failure, and the one before it is
// tried. NotFound if `dir` holds no complete checkpoint; an error listing every failure if
// none loads.
StatusOr<ResumedState> ResumeNewestCheckpoint(Env* env, const std::string& dir,
                                              const TableFactory& new_table, ThreadPool* pool);

// Verifies every file of every checkpoint in `dir` without loading it, and reports each
// (inspect).
StatusOr<nlohmann::json> InspectCheckpoints(Env* env, const std::string& dir);

// Writes a job's checkpoints. Thread safety: one thread (the push stage) at a time.
class CheckpointWriter {
 public:
  // `last`: the newest checkpoint of this job (the one it resumed from), or null for a new job.
  // Checkpoint ids continue after every id in options.dir.
  static StatusOr<std::unique_ptr<CheckpointWriter>> Open(Env* env, CheckpointOptions options,
                                                          ModelSpec spec, nlohmann::json settings,
                                                          const ValueLayout& layout,
                                                          const CheckpointManifest* last);
  ~CheckpointWriter();

  // Whether a checkpoint is due after `passes` pushed passes.
  bool Due(uint64_t passes) const {
    return options_.every_passes > 0 && passes % options_.every_passes == 0;
  }
  // A pass pushed `rows` (the values the table now holds for its keys): they go into the
  // next checkpoint if it is a delta.
  Status OnPush(const RowBlock& rows);
  // The table was shrunk (every row may have changed): the next checkpoint is a base. With
  // `replay`, the shrink's settings, a delta records the shrink instead and its loader replays
  // it (CheckpointManifest::shrink), unless a pass is pushed after it before the commit.
  void OnShrink(const AccessorOptions* replay = nullptr);
  // The stream state the next checkpoint records (CheckpointManifest::stream). A commit whose
  // stream state changed is written even when no pass was pushed since the last one.
  void SetStream(nlohmann::json stream) { stream_ = std::move(stream); }
  // The same for a job validated per epoch (CheckpointManifest::epochs).
  void SetEpochs(nlohmann::json epochs) { epochs_ = std::move(epochs); }
  // The state's digest, when a caller can afford it (a full table scan).
  using DigestFn = std::function<StatusOr<std::string>()>;
  // Commits a checkpoint of the table (its pushed rows) and the dense state `dense_payload`
  // at `position`. A base computes its own digest while writing; a delta records digest()
  // when one is given (the final checkpoint), none otherwise. No-op returning the last one if
  // nothing was pushed since it.
  StatusOr<CheckpointManifest> Commit(SparseTable& table, const std::string& dense_payload,
                                      const TrainPosition& position, const DigestFn& digest,
                                      ThreadPool* pool);
  const CheckpointManifest& last() const { return last_; }
  // Checkpoints written, their kinds, bytes and seconds.
  nlohmann::json Report() const;

 private:
  CheckpointWriter(Env* env, CheckpointOptions options, ModelSpec spec, nlohmann::json settings,
                   const ValueLayout& layout);
  bool NextIsBase() const;
  std::string Path(uint64_t id) const;
  Status Prune();

  Env* const env_;
  const CheckpointOptions options_;
  const ModelSpec spec_;
  const nlohmann::json settings_;
  const ValueLayout layout_;
  bool has_last_ = false;
  CheckpointManifest last_;
  uint64_t next_id_ = 1;
  bool shrunk_ = false;  // since the last checkpoint
  nlohmann::json stream_;
  nlohmann::json epochs_;
  nlohmann::json shrink_;  // a shrink after the pushes since the last checkpoint, to replay
  std::unique_ptr<SparseFileWriter> delta_;  // the next delta's sparse.bin, being written
  // Report.
  uint64_t bases_ = 0, deltas_ = 0, base_bytes_ = 0, delta_bytes_ = 0, base_rows_ = 0,
           delta_rows_ = 0;
  double base_seconds_ = 0, delta_seconds_ = 0, push_seconds_ = 0;
};

}  // namespace ctrbox

#endif  // CTRBOX_CKPT_CHECKPOINT_H_
