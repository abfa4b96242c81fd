// CtrModel (model/ctr_model.h): canonical sums (SumOrder), the row blocks they cut and the
// sparse records they add up.
#include <algorithm>
#include <vector>

#include "model/ctr_model.h"
#include "util/pairwise_sum.h"

namespace ctrbox {

uint32_t CtrModel::SumBlocksFor(uint32_t batch_rows, uint32_t block_rows) {
  uint32_t k = 1;
  while (k < kMaxSumBlocks && uint64_t{2} * k * block_rows <= batch_rows) k *= 2;
  return k;
}

void CtrModel::set_sum_order(const SumOrder& o) {
  sum_order_ = o;
  if (o.batch_rows == 0) sum_order_.canonical = false;  // (no minibatch to cut)
  sum_blocks_ = SumBlocksFor(o.batch_rows, std::max(o.block_rows, 1u));
  sum_slots_.clear();
  if (!sum_order_.canonical) return;
  // At most 16 leaves: 5 pending sums, slot 0 being grads_.
  sum_slots_.assign(PairwiseStack::Depth(4) - 1, std::vector<float>(grads_.size(), 0.0f));
}

uint32_t CtrModel::SumBlockBegin(uint32_t block) const {
  return static_cast<uint32_t>(uint64_t{block} * sum_order_.batch_rows / sum_blocks_);
}

uint32_t CtrModel::SumBlockOf(uint32_t row) const {
  // The block b with b B / K <= row < (b + 1) B / K.
  const uint64_t b = (uint64_t{sum_blocks_} * (uint64_t{row} + 1) - 1) / sum_order_.batch_rows;
  return static_cast<uint32_t>(std::min<uint64_t>(b, sum_blocks_ - 1));
}

void CtrModel::RowBlocks(uint32_t rows, std::vector<uint32_t>* blocks,
                         std::vector<uint32_t>* leaf) const {
  blocks->assign(1, 0);
  leaf->clear();
  if (!sum_order_.canonical) {
    for (uint32_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      blocks->push_back(std::min(rows, r0 + kRowBlock));
      leaf->push_back(static_cast<uint32_t>(leaf->size()));
    }
    return;
  }
  const uint32_t first = sum_order_.first_row;
  for (uint32_t r0 = 0; r0 < rows;) {
    const uint32_t b = SumBlockOf(first + r0);
    // (Rows past the global minibatch's last block stay in it: the caller's batch is wrong.)
    const uint32_t end = b + 1 < sum_blocks_ ? SumBlockBegin(b + 1) - first : rows;
    r0 = std::min(rows, std::max(end, r0 + 1));
    blocks->push_back(r0);
    leaf->push_back(b);
  }
}

void CtrModel::SparseRecordCanonical(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                     size_t u, float* record) const {
  const uint32_t S = schema_.num_slots, E = emb_width_, rd = row_dim_, width = SparseRecordWidth();
  const bool weighted = pass.has_weights();
  thread_local std::vector<float> slots;
  slots.resize(size_t{PairwiseStack::Depth(4)} * width);
  auto slot = [&](int i) { return slots.data() + size_t(i) * width; };
  auto merge = [&](int into, int from) {
    float* a = slot(into);
    const float* b = slot(from);
    for (uint32_t d = 0; d < width; ++d) a[d] += b[d];
  };
  PairwiseStack stack;
  float* g = nullptr;    // the current block's record
  uint32_t block = ~0u;  // none yet
  for (uint32_t q = mb.occ_begin[u]; q < mb.occ_begin[u + 1]; ++q) {
    const uint32_t p = mb.key_begin + mb.occ[q];
    const uint32_t cell = ws.cell[p], r = cell / S, s = cell - r * S;
    const uint32_t b = SumBlockOf(sum_order_.first_row + r);
    if (b != block) {  // the occurrences are in row order: a new leaf
      block = b;
      g = slot(stack.Push(b, merge));
      std::fill(g, g + width, 0.0f);
    }
    const float w = weighted ? pass.weights[p] : 1.0f;
    const uint32_t dim = slot_dim_[s];
    const float* gx = dx_.data() + size_t{r} * E + slot_col_[s];
    for (uint32_t d = 0; d < dim; ++d) g[d] += w * gx[d];
    g[rd] += w * dlogit_[r];
    g[rd + 1] += 1.0f;
    g[rd + 2] += pass.labels[mb.row_begin + r];
  }
  stack.Finish(merge);
  if (stack.empty()) {
    std::fill(record, record + width, 0.0f);
    return;
  }
  std::copy(slot(0), slot(0) + width, record);
}

}  // namespace ctrbox
