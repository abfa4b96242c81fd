#include "pipeline/rank_pass.h"

#include <algorithm>
#include <cstring>

#include "ckpt/ranks_checkpoint.h"
#include "dist/collectives.h"
#include "io/key_hashing.h"
#include "pipeline/eval_chunks.h"
#include "util/cleanup.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

// Every rank's minibatch sizes, so all agree on the pass's global minibatches.
Status AgreeOnMinibatches(Comm* comm, const WorkingSet& ws, RankPass* out) {
  std::string mine;
  for (const Minibatch& mb : ws.batches) {
    const uint32_t rows = mb.rows();
    mine.append(reinterpret_cast<const char*>(&rows), sizeof(rows));
  }
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(mine, &all));
  out->global_rows.clear();
  out->global_examples = 0;
  const size_t N = all.size();
  for (size_t r = 0; r < N; ++r) {
    const std::string& ranks = all[r];
    const size_t m = ranks.size() / sizeof(uint32_t);
    if (out->global_rows.size() < m) out->global_rows.resize(m, 0);
    for (size_t i = 0; i < m; ++i) {
      uint32_t rows;
      std::memcpy(&rows, ranks.data() + i * sizeof(uint32_t), sizeof(rows));
      out->global_rows[i] += rows;
      out->global_examples += rows;
    }
  }
  return Status::OK();
}

// Decodes an owner's row (whole, or its values alone: RowBlock::DecodeValues) into row i of
// the holder's rows; a row of another key than ws.keys[i] is malformed (0).
std::function<size_t(uint32_t, const char*, size_t)> DecodeInto(
    RowBlock* rows, const WorkingSet& ws,
    size_t (RowBlock::*decode)(const char*, size_t, size_t) = &RowBlock::DecodeRow) {
  return [rows, &ws, decode](uint32_t i, const char* p, size_t n) -> size_t {
    const size_t used = (rows->*decode)(p, n, i);
    return used > 0 && rows->key(i) == ws.keys[i] ? used : 0;
  };
}

// decode, which also appends the local id of every row it decoded to *ids (when not null).
std::function<size_t(uint32_t, const char*, size_t)> Noting(
    std::function<size_t(uint32_t, const char*, size_t)> decode, std::vector<uint32_t>* ids) {
  if (ids == nullptr) return decode;
  return [decode = std::move(decode), ids](uint32_t i, const char* p, size_t n) -> size_t {
    const size_t used = decode(i, p, n);
    if (used > 0) ids->push_back(i);
    return used;
  };
}

// Owner updates with this rank's records of minibatch m: its touched[0..n) (indices into
// ws.keys) with records (n x the model's record width) go to their owners, this rank applies
// the sums of the keys it serves, and the changed rows of minibatch m + 1's keys come back into
// *rows (decode). Returns the embeddings the served rows created.
StatusOr<uint32_t> UpdateAtOwners(
    Comm* comm, CtrModel* model, const WorkingSet& ws, uint32_t m, const uint32_t* touched,
    const float* records, size_t n, RankPass* sp, const CtrAccessor& accessor, ThreadPool* pool,
    const std::function<size_t(uint32_t, const char*, size_t)>& decode) {
  const Minibatch* next = m + 1 < ws.batches.size() ? &ws.batches[m + 1] : nullptr;
  Stopwatch exchange;
  RETURN_IF_ERROR(ReduceToOwners(comm, &sp->routes, touched, records, n, model->SparseRecordWidth(),
                                 next ? next->uniq.data() : nullptr, next ? next->uniq.size() : 0,
                                 &sp->reduced));
  sp->exchange_seconds += exchange.Seconds();
  const ReducedRecords& r = sp->reduced;
  RowBlock& served = sp->served->rows();
  const uint32_t created = model->ApplySparse(r.served.data(), r.served_records.data(),
                                              r.served.size(), &served, accessor, pool);
  exchange.Reset();
  RETURN_IF_ERROR(RefreshHolders(
      comm, &sp->routes, r.next,
      [&](uint32_t s, std::string* bytes) { served.EncodeValues(s, bytes); }, decode));
  sp->exchange_seconds += exchange.Seconds();
  return created;
}

// Canonical sums (train.deterministic): the owners add each key's node records up the tree,
// from the first leaf of every node of the rank's share.
void UsePairwiseRoutes(const CtrModel& model, RankPass* sp) {
  sp->routes.pairwise = model.sum_order().canonical;
  if (sp->routes.pairwise) sp->routes.leaves = model.sum_nodes();
}

class RankExchangeOfPass : public RankExchange {
 public:
  RankExchangeOfPass(Comm* comm, CtrModel* model, const WorkingSet& ws, RankPass* sp,
                     const CtrAccessor& accessor, ThreadPool* pool)
      : comm_(comm), model_(model), ws_(ws), sp_(sp), accessor_(accessor), pool_(pool) {}

  uint32_t minibatches() const override { return static_cast<uint32_t>(sp_->global_rows.size()); }
  uint32_t global_rows(uint32_t m) const override { return sp_->global_rows[m]; }
  Status AllReduceDense(float* grads, size_t n) override {
    Stopwatch exchange;
    Status s = AllReduceSum(comm_, grads, n);
    sp_->exchange_seconds += exchange.Seconds();
    return s;
  }
  Status AllReduceDenseTree(const uint32_t* leaves, const float* const* grads, size_t nodes,
                            size_t n, float* out) override {
    Stopwatch exchange;
    std::vector<TreeNodeSum> mine(nodes);
    for (size_t i = 0; i < nodes; ++i) mine[i] = {leaves[i], grads[i]};
    Status s = AllReduceSumPairwise(comm_, mine, n, out);
    sp_->exchange_seconds += exchange.Seconds();
    return s;
  }
  Status ReduceSparse(uint32_t m, const uint32_t* locals, const float* records, size_t n,
                      RowBlock* rows, std::vector<uint32_t>* refreshed,
                      uint64_t* created) override {
    UsePairwiseRoutes(*model_, sp_);
    ASSIGN_OR_RETURN(
        uint32_t c,
        UpdateAtOwners(comm_, model_, ws_, m, locals, records, n, sp_, accessor_, pool_,
                       Noting(DecodeInto(rows, ws_, &RowBlock::DecodeValues), refreshed)));
    *created = c;
    return Status::OK();
  }

 private:
  Comm* const comm_;
  CtrModel* const model_;
  const WorkingSet& ws_;
  RankPass* const sp_;
  const CtrAccessor& accessor_;
  ThreadPool* const pool_;
};

}  // namespace

std::unique_ptr<RankExchange> RankPassExchange(Comm* comm, CtrModel* model, const WorkingSet& ws,
                                               RankPass* sp, const CtrAccessor& accessor,
                                               ThreadPool* pool) {
  return std::make_unique<RankExchangeOfPass>(comm, model, ws, sp, accessor, pool);
}

Status PullRankPass(Comm* comm, SparseTable* table, const CtrAccessor* accessor,
                    const WorkingSet& ws, RowBlock* rows, RankPass* out, ThreadPool* pool,
                    const std::function<void()>& before_read) {
  Stopwatch exchange;
  RETURN_IF_ERROR(AgreeOnMinibatches(comm, ws, out));
  // Served keys grouped by key range, as a working table's local ids are.
  const KeyOrder by_key_range = [](uint64_t a, uint64_t b) {
    const size_t pa = KeyRangeOf(a), pb = KeyRangeOf(b);
    return pa != pb ? pa < pb : a < b;
  };
  ASSIGN_OR_RETURN(out->routes, RouteKeys(comm, ws.keys.data(), ws.keys.size(), by_key_range));
  out->exchange_seconds += exchange.Seconds();
  out->served = std::make_shared<WorkingTable>(table->layout());
  out->served->Build(out->routes.served, pool);
  if (before_read) before_read();
  ASSIGN_OR_RETURN(out->served_pins,
                   table->Pull(out->routes.served.data(), out->routes.served.size(), accessor,
                               &out->served->rows(), pool));
  rows->Resize(ws.keys.size());
  exchange.Reset();
  Cleanup count([&] { out->exchange_seconds += exchange.Seconds(); });
  const RowBlock& served = out->served->rows();
  return SendToHolders(
      comm, &out->routes, [&](uint32_t s, std::string* bytes) { served.EncodeRow(s, bytes); },
      DecodeInto(rows, ws));
}

Status PatchHolders(Comm* comm, RankPass* sp, std::vector<uint32_t> patched, RowBlock* rows,
                    const WorkingSet& ws, std::vector<uint32_t>* received) {
  std::sort(patched.begin(), patched.end());
  patched.erase(std::unique(patched.begin(), patched.end()), patched.end());
  Stopwatch exchange;
  const RowBlock& served = sp->served->rows();
  Status s = SendSomeToHolders(
      comm, &sp->routes, patched,
      [&](uint32_t i, std::string* bytes) { served.EncodeRow(i, bytes); },
      Noting(DecodeInto(rows, ws), received));
  sp->exchange_seconds += exchange.Seconds();
  return s;
}

StatusOr<StepStats> TrainRankMinibatch(Comm* comm, CtrModel* model, const Batch& pass,
                                       const WorkingSet& ws, const Minibatch& mb, uint32_t m,
                                       RowBlock* rows, RankPass* sp, const CtrAccessor& accessor,
                                       ThreadPool* pool, float* predictions) {
  StepStats stats = model->ComputeGradients(pass, ws, mb, *rows, pool, predictions,
                                            sp->global_rows[m], &sp->records);
  std::vector<float>& dense = model->dense_grads();
  Stopwatch exchange;
  // Canonical sums (train.deterministic): the ranks' shares added up the tree one process
  // adds its blocks up (CtrModel::SumOrder), dense and sparse alike.
  UsePairwiseRoutes(*model, sp);
  if (sp->routes.pairwise) {
    std::vector<TreeNodeSum> nodes;  // the nodes with rows (one process has no empty block)
    for (size_t i = 0; i < model->sum_nodes().size(); ++i) {
      if (model->node_has_rows(i))
        nodes.push_back({model->sum_nodes()[i], model->node_grads(i).data()});
    }
    RETURN_IF_ERROR(AllReduceSumPairwise(comm, nodes, dense.size(), dense.data()));
  } else {
    RETURN_IF_ERROR(AllReduceSum(comm, dense.data(), dense.size()));
  }
  // mb.uniq holds local ids: indices into ws.keys, as given to RouteKeys.
  if (sp->owner_updates) {
    sp->exchange_seconds += exchange.Seconds();
    model->ApplyDense(pool);
    ASSIGN_OR_RETURN(
        stats.embeddings_created,
        UpdateAtOwners(comm, model, ws, m, mb.uniq.data(), sp->records.data(), mb.uniq.size(), sp,
                       accessor, pool, DecodeInto(rows, ws, &RowBlock::DecodeValues)));
    return stats;
  }
  RETURN_IF_ERROR(ReduceToHolders(comm, &sp->routes, mb.uniq.data(), sp->records.data(),
                                  mb.uniq.size(), model->SparseRecordWidth(), &sp->reduced));
  sp->exchange_seconds += exchange.Seconds();
  model->ApplyDense(pool);
  const ReducedRecords& r = sp->reduced;
  model->ApplySparse(r.keys.data(), r.records.data(), r.keys.size(), rows, accessor, pool);
  // The served copy is the one that is kept: its embeddings created are the job's.
  stats.embeddings_created =
      model->ApplySparse(r.served.data(), r.served_records.data(), r.served.size(),
                         &sp->served->rows(), accessor, pool);
  return stats;
}

Status PushRankPass(SparseTable* table, RankPass* sp, ThreadPool* pool) {
  return table->Push(&sp->served_pins, sp->served->rows(), pool);
}

StatusOr<MetricSummary> EvaluateOnRanks(Comm* comm, BatchReader* reader, SparseTable* table,
                                        CtrModel* model, uint32_t batch_size, uint64_t chunk_rows,
                                        uint64_t chunk_keys, ThreadPool* pool) {
  MetricAccumulator metrics;
  // Minibatches of whole prediction blocks (as Evaluate's: pipeline/eval_chunks.h).
  const uint32_t minibatch = CtrModel::PredictMinibatchRows(batch_size);
  std::vector<float> predictions(minibatch);
  EvalChunks chunks(reader, chunk_rows, chunk_keys);
  for (;;) {
    // The next chunk of this rank's rows (maybe none), while any rank has rows.
    Batch chunk;
    RETURN_IF_ERROR(chunks.Next(&chunk));
    uint64_t more = chunk.rows() > 0 ? 1 : 0;
    RETURN_IF_ERROR(AllReduceMax(comm, &more, 1));
    if (more == 0) break;
    ModelKeys(model->options().hashing, model->options().KeyTableMap(), &chunk);
    WorkingSet ws;
    BuildWorkingSet(chunk, minibatch, pool, &ws);
    RankPass sp;  // its pins go with it
    RowBlock rows(table->layout());
    RETURN_IF_ERROR(PullRankPass(comm, table, /*accessor=*/nullptr, ws, &rows, &sp, pool));
    for (const Minibatch& mb : ws.batches) {
      model->Predict(chunk, ws, mb, rows, pool, predictions.data());
      for (uint32_t r = 0; r < mb.rows(); ++r) {
        metrics.Add(chunk.labels[mb.row_begin + r], predictions[r]);
      }
    }
  }
  return MergeMetricsOnRank0(comm, metrics);
}

StatusOr<MetricSummary> MergeMetricsOnRank0(Comm* comm, const MetricAccumulator& mine) {
  std::vector<std::string> send(comm->size()), recv;
  send[0] = mine.Encode();
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  if (comm->rank() != 0) return mine.Summary();
  MetricAccumulator all;
  for (int r = 0; r < comm->size(); ++r) {
    if (!all.MergeEncoded(recv[r])) {
      return InternalError("rank " + std::to_string(r) + " sent metrics rank 0 cannot read");
    }
  }
  return all.Summary();
}

Status CommitRanksCheckpointOf(Comm* comm, Env* env, const std::string& ranks_dir, uint64_t id) {
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(std::to_string(id), &all));
  for (int r = 0; r < comm->size(); ++r) {
    if (all[r] != all[0]) {
      return InternalError("the ranks committed different checkpoints: rank 0 " + all[0] +
                           ", rank " + std::to_string(r) + " " + all[r]);
    }
  }
  if (comm->rank() != 0) return Status::OK();
  return CommitRanksCheckpoint(env, ranks_dir, {static_cast<uint32_t>(comm->size()), id});
}

}  // namespace ctrbox
