// The versions a stream job publishes for serving (docs/routine.md): it collects the rows the
// passes push and the keys TTL eviction deletes, and after a partition writes a delta (those
// rows and keys) or a base (every row) into serving.dir. Writing a version and publishing it
// are two steps with the partition's checkpoint between them, so that a crash never publishes
// a version of a partition that was not committed, and never loses one that was.
#ifndef CTRBOX_JOBS_SERVING_PUBLISHER_H_
#define CTRBOX_JOBS_SERVING_PUBLISHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ckpt/model_spec.h"
#include "ckpt/serving_files.h"
#include "dist/comm.h"
#include "jobs/job.h"
#include "model/ctr_model.h"
#include "table/sparse_table.h"
#include "util/env.h"

namespace ctrbox {

// Thread safety: OnPush runs on the push stage's thread; everything else between passes.
class ServingPublisher {
 public:
  ServingPublisher(Env* env, ServingOptions options, ModelSpec spec, const ValueLayout& table);

  // Where the job stood (the `serving` part of the newest checkpoint's stream state; null for
  // a new job). A version the checkpoint names but the donefile lacks (the job died between
  // the two) is published now; version directories written after it and never published are
  // deleted. Rows pushed by partitions committed since the last version are not known any
  // more: the next version is a base.
  // On ranks, rank 0 writes the versions (`writes`) and publishes them; the other ranks send
  // it their rows and keep the same chain.
  Status Recover(const nlohmann::json& state, bool writes = true);

  // What the model reads (train_steps::InputRecord), recorded in every version written.
  void SetInput(nlohmann::json input) { input_ = std::move(input); }
  // A pass pushed `rows` (the values the table now holds).
  Status OnPush(const RowBlock& rows);
  // TTL eviction deleted `keys`.
  void OnDeleted(const std::vector<uint64_t>& keys);

  // After a partition is trained (and evicted): writes the version due now, not yet
  // published; nullopt when none is due (serving.delta_every).
  // On ranks (comm), every rank calls it: each rank's rows (its table's part) go to rank 0,
  // which writes them rank after rank, and every rank gets the version's line.
  StatusOr<std::optional<ServingVersion>> Prepare(SparseTable& table, const CtrModel& model,
                                                  const std::string& partition,
                                                  Comm* comm = nullptr);
  // The state a checkpoint records, with the version Prepare wrote (if any).
  nlohmann::json State() const;
  // Publishes the version Prepare wrote (its donefile line) and prunes old ones.
  Status Publish();

 private:
  static constexpr size_t kChunk = 65536;  // a delta's rows per block
  // This rank's rows of the version in `blocks` blocks: a base's stripes (sorted by key), or a
  // delta's pending rows sorted by key, kChunk a block (blocks past its own are empty).
  using BlockFn = std::function<Status(const RowBlock&)>;
  Status ForEachBlock(SparseTable& table, bool base, uint64_t blocks, const BlockFn& fn);
  // Into `w` (null on a rank that does not write): the rows and deleted keys, on ranks every
  // rank's.
  Status WriteRows(ServingVersionWriter* w, SparseTable& table, bool base, Comm* comm);

  Env* const env_;
  const ServingOptions options_;
  const ModelSpec spec_;
  const ValueLayout table_layout_;
  const ValueLayout layout_;
  // Since the last version: the rows pushed (key -> row of pending_) and the keys deleted.
  std::unordered_map<uint64_t, size_t> pending_index_;
  RowBlock pending_;
  std::unordered_set<uint64_t> deleted_;
  // The chain.
  uint64_t version_ = 0;           // the newest written (and, after Publish, published) version
  uint64_t base_ = 0;              // its base
  uint32_t since_base_ = 0;        // versions since that base
  uint32_t partitions_since_ = 0;  // partitions trained since the last version
  bool next_base_ = true;          // the pending rows are not the whole change: write a base
  std::optional<ServingVersion> prepared_;  // written, not yet published
  std::optional<ServingVersion> last_;      // the newest version written
  // Versions the donefile lists after the checkpoint resumed from (a fall back to an older
  // one): each is written again aside and compared, never republished.
  std::map<uint64_t, ServingVersion> ahead_;
  bool republished_ = false;  // the prepared version is one of them
  bool writes_ = true;
  nlohmann::json input_;  // this process writes and publishes (rank 0)
};

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_SERVING_PUBLISHER_H_
