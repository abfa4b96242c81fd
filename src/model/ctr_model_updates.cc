// CtrModel (model/ctr_model.h): the sparse records and their updates, the distributed step
// (gradients computed, then applied at the owners).
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "exec/exec.h"
#include "model/ctr_model.h"
#include "model/ctr_model_internal.h"
#include "util/blas.h"
#include "util/hash.h"
#include "util/random.h"
#include "util/rowwise_gemm.h"

namespace ctrbox {

using model_internal::LogLoss;
using model_internal::Sigmoid;

void CtrModel::UpdateSparseChunk(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                 size_t u0, size_t u1, RowBlock* rows, const CtrAccessor& accessor,
                                 uint32_t* created) {
  std::vector<float> record(SparseRecordWidth());
  for (size_t u = u0; u < u1; ++u) {
    SparseRecord(pass, ws, mb, u, record.data());
    if (ApplyRecord(mb.uniq[u], record.data(), rows, accessor)) ++*created;
  }
}

void CtrModel::SparseRecord(const Batch& pass, const WorkingSet& ws, const Minibatch& mb, size_t u,
                            float* record) const {
  if (sum_order_.canonical) {
    SparseRecordCanonical(pass, ws, mb, u, record);
    return;
  }
  // (A smaller table's key leaves the columns past its dimension zero.)
  std::fill(record, record + SparseRecordWidth(), 0.0f);
  AddOccurrences(pass, ws, mb, mb.occ_begin[u], mb.occ_begin[u + 1], record);
}

void CtrModel::AddOccurrences(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                              uint32_t q0, uint32_t q1, float* g) const {
  // (The minibatch's constants loaded once: the record's stores cannot change them.)
  const uint32_t S = schema_.num_slots, rd = row_dim_, E = emb_width_;
  const uint32_t *occ = mb.occ.data(), *cells = ws.cell.data() + mb.key_begin;
  const uint32_t *slot_dim = slot_dim_.data(), *slot_col = slot_col_.data();
  const float *dx = dx_.data(), *dlogit = dlogit_.data(),
              *labels = pass.labels.data() + mb.row_begin;
  const float* weights = pass.has_weights() ? pass.weights.data() + mb.key_begin : nullptr;
  for (uint32_t q = q0; q < q1; ++q) {
    const uint32_t p = occ[q];
    const uint32_t cell = cells[p], r = cell / S, s = cell - r * S;
    const float w = weights != nullptr ? weights[p] : 1.0f;
    const uint32_t dim = slot_dim[s];
    const float* gx = dx + size_t{r} * E + slot_col[s];
    for (uint32_t d = 0; d < dim; ++d) g[d] += w * gx[d];
    g[rd] += w * dlogit[r];
    g[rd + 1] += 1.0f;
    g[rd + 2] += labels[r];
  }
}

bool CtrModel::ApplyRecord(uint32_t l, const float* record, RowBlock* rows,
                           const CtrAccessor& accessor) {
  const uint32_t rd = row_dim_;
  rows->show(l) += record[rd + 1];
  rows->click(l) += record[rd + 2];
  rows->unseen(l) = 0;
  if (rows->has_emb(l)) {
    // The key's table's dimension and state (model.slot_dims; else every row's).
    const uint64_t key = rows->key(l);
    const uint32_t dim = rows->layout().DimOf(key);
    sparse_opt_.Update(rows->emb(l), rows->emb_state(l), record, dim);
    // x <- Q(x + update): u drawn from (seed, key, step), independent of the threads.
    quant_.Round(rows->emb(l), dim, options_.quant.rounding, quant_seed_,
                 Mix64(key) + dense_opt_.step());
    // The state likewise, on another stream (a no-op unless state_bits is 16).
    sparse_opt_.RoundState(rows->emb_state(l), rows->layout().StateOf(key),
                           quant_seed_ ^ kStateSalt, Mix64(key) + dense_opt_.step());
  }
  if (options_.wide) {
    float g_wide = record[rd];
    sparse_opt_.Update(&rows->wide(l), rows->wide_state(l), &g_wide, 1);
  }
  return accessor.MaybeCreateEmbedding(rows, l);
}

// ---- the distributed step ---------------------------------------------------------------------

StepStats CtrModel::ComputeGradients(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                     const RowBlock& rows, ThreadPool* pool, float* predictions,
                                     uint32_t global_rows, std::vector<float>* records) {
  const uint32_t B = mb.rows();
  StepStats stats;
  stats.loss_sum = ForwardBackward(pass, ws, mb, rows, pool, predictions, global_rows);
  if (B == 0) {
    // (ForwardBackward marked every node without rows.)
    for (size_t i = 0; i < sum_nodes_.size(); ++i) {
      std::fill(node_grads(i).begin(), node_grads(i).end(), 0.0f);
    }
  } else {
    RunParallel(pool, tiles_.size(), [&](size_t t, int) { DenseTileGrad(t, B); });
  }
  const size_t width = size_t{SparseRecordWidth()} * sum_nodes_.size();  // a key's records
  records->resize(mb.uniq.size() * width);
  const size_t chunks = (mb.uniq.size() + kSparseChunk - 1) / kSparseChunk;
  RunParallel(pool, chunks, [&](size_t c, int) {
    const size_t u1 = std::min(mb.uniq.size(), (c + 1) * kSparseChunk);
    for (size_t u = c * kSparseChunk; u < u1; ++u) {
      SparseRecord(pass, ws, mb, u, records->data() + u * width);
    }
  });
  return stats;
}

void CtrModel::ApplyDense(ThreadPool* pool) {
  dense_opt_.BeginStep();
  RunParallel(pool, tiles_.size(), [&](size_t t, int) { DenseTileUpdate(t); });
}

uint32_t CtrModel::ApplySparse(const uint32_t* local, const float* records, size_t n,
                               RowBlock* rows, const CtrAccessor& accessor, ThreadPool* pool) {
  const uint32_t width = SparseRecordWidth();
  const size_t chunks = (n + kSparseChunk - 1) / kSparseChunk;
  std::vector<uint32_t> created(chunks, 0);
  RunParallel(pool, chunks, [&](size_t c, int) {
    const size_t i1 = std::min(n, (c + 1) * kSparseChunk);
    for (size_t i = c * kSparseChunk; i < i1; ++i) {
      created[c] += ApplyRecord(local[i], records + i * width, rows, accessor);
    }
  });
  uint32_t total = 0;
  for (uint32_t c : created) total += c;
  return total;
}

}  // namespace ctrbox
