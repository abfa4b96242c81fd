// One rank's side of a pass of a distributed train job (docs/distributed.md; HPS §3-4,
// Algorithms 1-2). The sparse table is partitioned by key over the ranks (dist/collectives.h
// OwnerOf); every rank trains its share of each global minibatch:
//
//   pull   PullRankPass: the pass's distinct keys go to their owners; each owner pulls (and
//          pins) the union it was asked for from its part — the *served* rows — and sends
//          every rank the rows it asked for, into the pass's working rows.
//   train  TrainRankMinibatch, per global minibatch: gradients of this rank's rows; the
//          dense gradient summed over the ranks (rank order); each key's gradient records
//          sent to its owner and summed in rank order; the owner's served copy takes the
//          update, and sends each rank the rows it uses in its next minibatch that changed
//          since it last had them (owner updates, the default). With replicated updates the
//          sums go to every rank holding the key and every copy takes the same update
//          instead. Either way the ranks train one model with the global minibatch, as one
//          rank would (up to the order of the sums), and the two are the same bit for bit.
//   push   PushRankPass: the owner writes its served rows back into its part; the holders'
//          copies are dropped.
//
// With the stages overlapped, an owner's served rows are its in-flight working table: at
// train start it copies the newer rows of its passes in flight into them and PatchHolders
// re-sends those to their holders (docs/distributed.md, "Overlap").
//
// Thread safety: the functions are collective calls (every rank, same order, on the same
// channel); one thread per rank and channel drives them.
#ifndef CTRBOX_PIPELINE_RANK_PASS_H_
#define CTRBOX_PIPELINE_RANK_PASS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/key_routes.h"
#include "gpu/trainer.h"
#include "io/reader.h"
#include "metrics/metrics.h"
#include "model/ctr_model.h"
#include "table/sparse_table.h"
#include "util/env.h"
#include "working/working_set.h"
#include "working/working_table.h"

namespace ctrbox {

struct RankPass {
  KeyRoutes routes;  // the pass's working-set keys to their owners
  // The rows this rank serves (local id = index into routes.served, ordered by partition as a
  // working table needs), pinned in this rank's part until the push. Shared with the later
  // passes pulled while this one is in flight (the owner's side of docs/pipeline.md's rule).
  std::shared_ptr<WorkingTable> served;
  PinnedRows served_pins;
  // Per global minibatch of the pass, its rows over all ranks (a rank whose share of the pass
  // has fewer minibatches trains empty ones).
  std::vector<uint32_t> global_rows;
  uint64_t global_examples = 0;  // the pass's rows over all ranks
  // dist.sparse_updates: only the owner's served copy takes the sparse updates and a holder's
  // copy is refreshed before the holder's next minibatch uses it (true, "owner"), or every
  // copy takes every update of its key ("replicated"). The same model bit for bit.
  bool owner_updates = true;
  // Seconds in the exchanges (pull and every minibatch's), waiting for the slowest rank
  // included: the part of the pull and train stages the network would carry.
  double exchange_seconds = 0;

  // Scratch of the minibatches.
  std::vector<float> records;
  ReducedRecords reduced;
};

// Pull: routes ws.keys, pulls and pins the served rows from `table` (new keys get
// accessor.InitRow), and fills *rows (resized to ws.keys.size()) with the rows of ws.keys.
// Also agrees on the pass's global minibatches. before_read (may be null) runs just before
// the table is read. Fails on a transport or table error.
Status PullRankPass(Comm* comm, SparseTable* table, const CtrAccessor* accessor,
                    const WorkingSet& ws, RowBlock* rows, RankPass* out, ThreadPool* pool,
                    const std::function<void()>& before_read = nullptr);

// Train start, after the owner copied into its served rows the newer values of the keys it
// shares with its passes in flight (`patched`: their served local ids): every holder takes
// those rows too (collective; with nothing patched anywhere it only exchanges empty messages).
// received (may be null) gets the local ids of this rank's rows the call rewrote.
Status PatchHolders(Comm* comm, RankPass* sp, std::vector<uint32_t> patched, RowBlock* rows,
                    const WorkingSet& ws, std::vector<uint32_t>* received = nullptr);

// The ranks as the GPU step meets them (device: gpu; gpu/trainer.h RankExchange): the
// owner-update half of TrainRankMinibatch — dense gradients summed over the ranks, each
// key's records reduced to its owner and applied to its served row, the changed rows of this
// rank's next minibatch refreshed into `rows` — for the pass `ws` whose pull filled *sp.
// REQUIRES: sp->owner_updates. The arguments outlive the exchange.
std::unique_ptr<RankExchange> RankPassExchange(Comm* comm, CtrModel* model, const WorkingSet& ws,
                                               RankPass* sp, const CtrAccessor& accessor,
                                               ThreadPool* pool);

// Trains global minibatch `m` of the pass: mb is this rank's share (empty past its last
// minibatch). predictions [mb.rows()] get p before the update.
StatusOr<StepStats> TrainRankMinibatch(Comm* comm, CtrModel* model, const Batch& pass,
                                       const WorkingSet& ws, const Minibatch& mb, uint32_t m,
                                       RowBlock* rows, RankPass* sp, const CtrAccessor& accessor,
                                       ThreadPool* pool, float* predictions);

// Push: the served rows into its part, pins released. Local: no exchange.
Status PushRankPass(SparseTable* table, RankPass* sp, ThreadPool* pool);

// The metrics of every rank's `mine`, merged on rank 0 (collective): rank 0 gets them, the
// other ranks their own. Fails if the transport fails or a rank's bytes do not decode.
StatusOr<MetricSummary> MergeMetricsOnRank0(Comm* comm, const MetricAccumulator& mine);

// Held-out evaluation by the ranks: each predicts its share of the rows `reader` gives, in
// chunks of about chunk_rows rows whose keys' rows come from their owners (lookups: an absent
// key has an empty row and is not inserted; keys hashed first as the model was trained). With
// chunk_keys > 0 a chunk holds whole prediction blocks of at most that many distinct keys (or
// one block), so that every owner's pinned rows stay within ranks x chunk_keys
// (pipeline/eval_chunks.h).
// Returns the metrics over every rank's rows on rank 0, this rank's own elsewhere.
StatusOr<MetricSummary> EvaluateOnRanks(Comm* comm, BatchReader* reader, SparseTable* table,
                                        CtrModel* model, uint32_t batch_size, uint64_t chunk_rows,
                                        uint64_t chunk_keys, ThreadPool* pool);

// The second phase of a checkpoint of the ranks (ckpt/ranks_checkpoint.h): every rank has
// committed checkpoint `id` in its own chain; rank 0 commits ranks_dir/RANKS naming it.
// Fails if the ranks committed different ids.
Status CommitRanksCheckpointOf(Comm* comm, Env* env, const std::string& ranks_dir, uint64_t id);

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_RANK_PASS_H_
