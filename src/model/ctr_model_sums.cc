// CtrModel (model/ctr_model.h): canonical sums (SumOrder), the row blocks they cut and the
// sparse records they add up.
#include <algorithm>
#include <bit>
#include <utility>
#include <vector>

#include "model/ctr_model.h"
#include "util/pairwise_sum.h"

namespace ctrbox {

uint32_t CtrModel::SumBlocksFor(uint32_t batch_rows, uint32_t block_rows) {
  const bool three = batch_rows % 3 == 0 && uint64_t{3} * block_rows <= batch_rows;
  const uint32_t most = three ? 24 : 16;
  uint32_t k = three ? 3 : 1;
  while (2 * k <= most && uint64_t{2} * k * block_rows <= batch_rows) k *= 2;
  return k;
}

void CtrModel::set_sum_order(const SumOrder& o) {
  sum_order_ = o;
  if (o.batch_rows == 0) sum_order_.canonical = false;  // (no minibatch to cut)
  sum_blocks_ = SumBlocksFor(o.batch_rows, std::max(o.block_rows, 1u));
  sum_slots_.clear();
  node_grads_.clear();
  sum_nodes_.assign(1, 0);
  node_end_.assign(1, ~0u);
  node_rows_.assign(1, 1);
  if (!sum_order_.canonical) return;
  // At most 24 leaves (positions below 32): 6 pending sums, slot 0 being the node's output.
  sum_slots_.assign(PairwiseStack::Depth(5) - 1, std::vector<float>(grads_.size(), 0.0f));
  ShareNodes(sum_order_, &sum_nodes_, &node_end_);
  node_grads_.assign(sum_nodes_.size() - 1, std::vector<float>(grads_.size(), 0.0f));
  node_rows_.assign(sum_nodes_.size(), 0);
}

void CtrModel::MarkNodeRows() {
  std::fill(node_rows_.begin(), node_rows_.end(), 0);
  size_t node = 0;
  for (uint32_t leaf : step_leaves_) {
    while (node + 1 < node_end_.size() && leaf >= node_end_[node]) ++node;
    node_rows_[node] = 1;
  }
}

namespace {

// CtrModel::SumPosition of block `block` of K.
uint32_t PositionOf(uint32_t K, uint32_t block) {
  if (K % 3 != 0) return block;
  const uint32_t t = block / 3, i = block - 3 * t;
  return 4 * t + (i == 0 ? 0 : i + 1);
}

// CtrModel::SumBlockOf: the block b of K with b B / K <= row < (b + 1) B / K.
uint32_t BlockOf(uint32_t K, uint32_t B, uint32_t row) {
  const uint64_t b = (uint64_t{K} * (uint64_t{row} + 1) - 1) / B;
  return static_cast<uint32_t>(std::min<uint64_t>(b, K - 1));
}

// The rows [first, end) of the global minibatch a share of `o` holds.
std::pair<uint32_t, uint32_t> ShareRows(const CtrModel::SumOrder& o) {
  const uint32_t end =
      o.share_rows == 0 ? o.batch_rows : std::min(o.batch_rows, o.first_row + o.share_rows);
  return {o.first_row, end};
}

}  // namespace

void CtrModel::ShareNodes(const SumOrder& o, std::vector<uint32_t>* firsts,
                          std::vector<uint32_t>* ends) {
  // The share's positions [p0, p1), made of the tree's largest nodes. A share that reaches the
  // last block reaches the tree's end, and one whose last block starts a triple reaches the
  // triple's empty position (no block is there), so that a whole batch is one node, the root.
  const uint32_t K = SumBlocksFor(o.batch_rows, std::max(o.block_rows, 1u));
  const auto [first, end] = ShareRows(o);
  const uint32_t p0 = PositionOf(K, BlockOf(K, o.batch_rows, first));
  const uint32_t last = BlockOf(K, o.batch_rows, end - 1);
  const uint32_t positions = K % 3 == 0 ? K / 3 * 4 : std::bit_ceil(K);
  uint32_t p1 = PositionOf(K, last) + 1;
  if (end >= o.batch_rows) p1 = positions;
  if (K % 3 == 0 && last % 3 == 0) p1 = std::max(p1, PositionOf(K, last) + 2);
  firsts->clear();
  ends->clear();
  ForEachTreeNode(p0, p1, [&](uint32_t first, uint32_t end) {
    firsts->push_back(first);
    ends->push_back(end);
  });
  if (firsts->empty()) {  // (a share of no rows)
    firsts->push_back(p0);
    ends->push_back(p0 + 1);
  }
}

std::vector<uint32_t> CtrModel::ShareLeaves(const SumOrder& o) {
  const uint32_t K = SumBlocksFor(o.batch_rows, std::max(o.block_rows, 1u));
  const auto [first, end] = ShareRows(o);
  std::vector<uint32_t> leaves;
  if (end <= first) return leaves;
  for (uint32_t b = BlockOf(K, o.batch_rows, first); b <= BlockOf(K, o.batch_rows, end - 1); ++b) {
    leaves.push_back(PositionOf(K, b));
  }
  return leaves;
}

uint32_t CtrModel::SumPosition(uint32_t block) const { return PositionOf(sum_blocks_, block); }

uint32_t CtrModel::SumBlockBegin(uint32_t block) const {
  return static_cast<uint32_t>(uint64_t{block} * sum_order_.batch_rows / sum_blocks_);
}

uint32_t CtrModel::SumBlockOf(uint32_t row) const {
  return BlockOf(sum_blocks_, sum_order_.batch_rows, row);
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
    leaf->push_back(SumPosition(b));
  }
}

void CtrModel::SparseRecordCanonical(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                     size_t u, float* record) const {
  const uint32_t S = schema_.num_slots, width = SparseRecordWidth();
  const uint32_t q0 = mb.occ_begin[u], q1 = mb.occ_begin[u + 1];
  // Occurrence q's row, and its sum block's position.
  auto row_of = [&](uint32_t q) { return ws.cell[mb.key_begin + mb.occ[q]] / S; };
  auto position = [&](uint32_t r) { return SumPosition(SumBlockOf(sum_order_.first_row + r)); };
  std::fill(record, record + sum_nodes_.size() * width, 0.0f);  // (a node without the key)
  if (q0 == q1) return;
  size_t node = 0;
  // Most keys of a minibatch occur in one block (the occurrences are in row order: the first
  // and the last tell): their leaf is the node's record, summed in place (the same additions
  // as through the stack, whose one slot would start at zero and be copied out).
  if (const uint32_t b = position(row_of(q0)); b == position(row_of(q1 - 1))) {
    while (node + 1 < node_end_.size() && b >= node_end_[node]) ++node;
    AddOccurrences(pass, ws, mb, q0, q1, record + node * width);
    return;
  }
  thread_local std::vector<float> slots;
  slots.resize(size_t{PairwiseStack::Depth(5)} * width);
  auto slot = [&](int i) { return slots.data() + size_t(i) * width; };
  auto merge = [&](int into, int from) {
    float* a = slot(into);
    const float* b = slot(from);
    for (uint32_t d = 0; d < width; ++d) a[d] += b[d];
  };
  PairwiseStack stack;
  auto close_node = [&] {  // the node's sum into its record
    if (stack.empty()) return;
    stack.Finish(merge);
    std::copy(slot(0), slot(0) + width, record + node * width);
    stack.Reset();
  };
  // The occurrences are in row order: each block's are a run, a leaf of the tree.
  const uint32_t first = sum_order_.first_row;
  for (uint32_t q = q0; q < q1;) {
    const uint32_t block = SumBlockOf(first + row_of(q)), b = SumPosition(block);
    const uint32_t end = SumBlockBegin(block + 1) - first;  // the block's rows end (this rank's)
    uint32_t run = q + 1;
    while (run < q1 && row_of(run) < end) ++run;
    while (node + 1 < node_end_.size() && b >= node_end_[node]) {
      close_node();
      ++node;
    }
    float* g = slot(stack.Push(b, merge));
    std::fill(g, g + width, 0.0f);
    AddOccurrences(pass, ws, mb, q, run, g);
    q = run;
  }
  close_node();
}

}  // namespace ctrbox
