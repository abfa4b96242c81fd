// GpuStep (gpu/step.h), canonical sums: train.deterministic on one GPU (per rank). The step
// sums its gradients as the CPU model's canonical sums do (CtrModel::SumOrder;
// docs/distributed.md, "The same model on any number of ranks"), so that its model does not
// depend on the number of ranks:
//   - the minibatch's rows run through forward and backward one sum block at a time (the
//     CPU model's row blocks: the same GEMM shapes, so a row's values do not depend on
//     where the rank's share starts);
//   - each block's dense weight gradients are a leaf of the pairwise tree (util/pairwise_sum.h),
//     added up per node of the rank's share on the GPU;
//   - each key's record sums its occurrences per block in row order, and the blocks up the
//     same tree, one record per node;
//   - across ranks the nodes' sums go through RankExchange's tree sums (AllReduceDenseTree,
//     and ReduceSparse with a record per node), as the CPU ranks' do.
// Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_CANONICAL_H_
#define CTRBOX_GPU_STEP_CANONICAL_H_

#include <cassert>
#include <vector>

#include "gpu/step.h"
#include "util/pairwise_sum.h"

namespace ctrbox {

static_assert(GpuSumCut::kMax == CtrModel::kMaxSumBlocks);

// cut_ = the sum blocks of this rank's minibatch of `rows` rows, and its share's nodes.
template <class Exec>
void GpuStep<Exec>::CutSums(uint32_t rows) {
  std::vector<uint32_t> blocks, leaves;
  model_->SumBlocks(rows, &blocks, &leaves);
  const std::vector<uint32_t>& ends = model_->sum_node_ends();
  assert(leaves.size() <= GpuSumCut::kMax && ends.size() <= GpuSumCut::kMax);
  GpuSumCut c;
  c.blocks = static_cast<uint32_t>(leaves.size());
  for (uint32_t i = 0; i < c.blocks; ++i) {
    c.begin[i] = blocks[i];
    c.pos[i] = leaves[i];
  }
  c.begin[c.blocks] = blocks.back();
  c.nodes = static_cast<uint32_t>(ends.size());
  for (uint32_t n = 0; n < c.nodes; ++n) c.node_end[n] = ends[n];
  cut_ = c;
}

// a[i] += b[i] for i < n (a merge of the tree's pending sums; the lower positions' on the left).
template <class Exec>
void GpuStep<Exec>::AddInto(Exec& e, float* a, const float* b, size_t n) {
  e.ForEach(n, [=] CTRBOX_HD(size_t i) { a[i] += b[i]; });
}

// The kernels read the slice's first row from the current arguments: moved by `by` rows.
template <class Exec>
void GpuStep<Exec>::MoveRow0(Exec& e, GpuMinibatchArgs* now, uint32_t by) {
  e.ForEach(1, [=] CTRBOX_HD(size_t) { now->row0 += by; });  // (mod 2^32: back by -by)
}

// Forward and backward of minibatch b on GPU 0, block by block: the dense gradient of each node
// of the rank's share (node 0's in rep.grads, node n's in rep.node_grads[n - 1]; zeros for a
// node without rows), the predictions, and the whole slice's dx and dlogit for the per-key
// sums (the returned run points at them).
template <class Exec>
typename GpuStep<Exec>::SliceRun GpuStep<Exec>::CanonicalForwardBackward(Staged& s,
                                                                         const Batch& pass,
                                                                         size_t b) {
  Exec& e = *compute_[0];
  Replica& rep = replicas_[0];
  const size_t P = NumParams();
  const uint32_t E = model_->emb_width();
  SliceRun whole;
  whole.b = b;
  whole.si = b;
  whole.B = s.plan.slices[b].rows();
  whole.dx = rep.dx_all.data();
  whole.dlogit = rep.dlogit_all.data();
  CutSums(whole.B);
  GpuMinibatchArgs* now = rep.now.data();
  uint32_t at = 0;  // where now->row0 points, from the slice's first row
  uint32_t i = 0;   // the next block
  for (uint32_t n = 0; n < cut_.nodes; ++n) {
    float* out = n == 0 ? rep.grads.data() : rep.node_grads[n - 1].data();
    auto slot = [&](int k) { return k == 0 ? out : rep.sum_slots[k - 1].data(); };
    auto merge = [&](int into, int from) { AddInto(e, slot(into), slot(from), P); };
    PairwiseStack stack;
    for (; i < cut_.blocks && (n + 1 == cut_.nodes || cut_.pos[i] < cut_.node_end[n]); ++i) {
      const int k = stack.Push(cut_.pos[i], merge);
      const uint32_t r0 = cut_.begin[i], r1 = cut_.begin[i + 1];
      if (r0 != at) MoveRow0(e, now, r0 - at);
      at = r0;
      SliceRun run = Forward(s, pass, b, 0, r1 - r0);
      run.grads = slot(k);  // the GEMMs overwrite: a leaf needs no zeroing
      Backward(run);
      e.Copy(rep.dx_all.data() + size_t{r0} * E, rep.dx.data(), size_t{r1 - r0} * E);
      e.Copy(rep.dlogit_all.data() + r0, rep.dlogit.data(), r1 - r0);
    }
    if (stack.empty()) e.Fill(out, 0.0f, P);  // no rows: a zero gradient
    stack.Finish(merge);
  }
  if (at != 0) MoveRow0(e, now, 0u - at);
  return whole;
}

// The per-key sums of minibatch b (KeyGradients, after the occurrences' records are in
// rep.occ_grads): key u's record for node n of the share at feed.grad[(u nodes + n) gs]: its
// occurrences (in row order) summed per sum block from +0, the blocks added up the tree (a
// node without an occurrence of the key: zeros). One thread per (key, record column): the CPU
// model's additions (CtrModel::SparseRecordCanonical), the same bits.
template <class Exec>
void GpuStep<Exec>::CanonicalKeySums(Staged& s, const Batch& pass, const SliceRun& run) {
  Exec& e = *compute_[run.g];
  Replica& rep = replicas_[run.g];
  Feed& f = s.feeds[run.g];
  const uint32_t gs = GradStride(), S = pass.schema.num_slots;
  const GpuMinibatchArgs* now = rep.now.data();
  const uint32_t *offsets = f.uniq_occ_begin.data(), *uniq_occ = f.uniq_occ.data(),
                 *cells = f.cell.data();
  const float* vals = rep.occ_grads.data();  // record column j of occurrence q at j n_occ + q
  float* grad = f.grad.data();
  const GpuSumCut cut = cut_;
  e.ForEach(size_t{s.extents.uniq} * gs, [=] CTRBOX_HD(size_t i) {
    const SegmentShape sh = now->seg;
    const uint32_t u = static_cast<uint32_t>(i / gs), j = static_cast<uint32_t>(i % gs);
    if (u >= sh.segments) return;
    float* rec = grad + size_t{u} * cut.nodes * gs + j;
    for (uint32_t n = 0; n < cut.nodes; ++n) rec[size_t{n} * gs] = 0.0f;
    float slot[PairwiseStack::Depth(5)];
    auto merge = [&](int into, int from) { slot[into] += slot[from]; };
    PairwiseStack stack;
    uint32_t node = 0, block = 0, leaf = ~0u;
    int k = 0;
    const uint32_t* off = offsets + sh.at;
    for (uint32_t q = off[u] - sh.base; q < off[u + 1] - sh.base; ++q) {
      const uint32_t r = (cells[uniq_occ[sh.base + q]] - now->cell_shift) / S;
      while (block + 1 < cut.blocks && r >= cut.begin[block + 1]) ++block;
      if (cut.pos[block] != leaf) {  // a new leaf (occurrences come in row order)
        leaf = cut.pos[block];
        while (node + 1 < cut.nodes && leaf >= cut.node_end[node]) {
          if (!stack.empty()) {
            stack.Finish(merge);
            rec[size_t{node} * gs] = slot[0];
            stack.Reset();
          }
          ++node;
        }
        k = stack.Push(leaf, merge);
        slot[k] = 0.0f;
      }
      slot[k] += vals[size_t{j} * sh.n + q];
    }
    if (!stack.empty()) {
      stack.Finish(merge);
      rec[size_t{node} * gs] = slot[0];
    }
  });
}

// With ranks: the minibatch's dense gradient summed over the ranks up the tree, into
// rank_dense_: this rank's nodes with rows (none past its share: `mine` false) go to
// RankExchange::AllReduceDenseTree at their first positions.
template <class Exec>
Status GpuStep<Exec>::CanonicalRankSums(bool mine, RankExchange* ranks) {
  Exec& e0 = *compute_[0];
  Replica& rep = replicas_[0];
  const size_t P = NumParams();
  const std::vector<uint32_t>& firsts = model_->sum_nodes();
  std::vector<uint32_t> leaves;
  std::vector<const float*> grads;
  rank_nodes_.resize(firsts.size());
  for (uint32_t n = 0; mine && n < cut_.nodes; ++n) {
    if (!cut_.NodeHasRows(n, firsts[n])) continue;
    rank_nodes_[n].resize(P);
    e0.Download(rank_nodes_[n].data(), n == 0 ? rep.grads.data() : rep.node_grads[n - 1].data(), P);
    leaves.push_back(firsts[n]);
    grads.push_back(rank_nodes_[n].data());
  }
  RETURN_IF_ERROR(e0.status());
  rank_dense_.resize(P);
  return ranks->AllReduceDenseTree(leaves.data(), grads.data(), leaves.size(), P,
                                   rank_dense_.data());
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_CANONICAL_H_
