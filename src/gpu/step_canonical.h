// GpuStep (gpu/step.h), canonical sums: train.deterministic on the GPUs of a rank. The step
// sums its gradients as the CPU model's canonical sums do (CtrModel::SumOrder;
// docs/distributed.md, "The same model on any number of ranks"), so that its model depends on
// neither the number of ranks nor the number of GPUs:
//   - the minibatch's rows run through forward and backward one sum block at a time (the
//     CPU model's row blocks: the same GEMM shapes, so a row's values do not depend on
//     where the rank's share or a GPU's slice starts); several GPUs take whole blocks each
//     (GPU g: blocks [g n / G, (g + 1) n / G) of the minibatch's n);
//   - each block's dense weight gradients are a leaf of the pairwise tree (util/pairwise_sum.h),
//     added up per node (one GPU: the rank's share's nodes; several: each GPU's largest nodes,
//     which lie inside the rank's, then added up the tree on GPU 0 into the rank's);
//   - each key's record sums its occurrences per block in row order, and the blocks up the
//     same tree, one record per node; with several GPUs each owner adds the asking GPUs'
//     node records of a row up the tree into the rank's nodes;
//   - across ranks the nodes' sums go through RankExchange's tree sums (AllReduceDenseTree,
//     and ReduceSparse with a record per node), as the CPU ranks' do.
// Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_CANONICAL_H_
#define CTRBOX_GPU_STEP_CANONICAL_H_

#include <algorithm>
#include <cassert>
#include <vector>

#include "gpu/step.h"
#include "util/pairwise_sum.h"

namespace ctrbox {

static_assert(GpuSumCut::kMax == CtrModel::kMaxSumBlocks);

// The sum blocks of this rank's minibatch of `rows` rows and its share's nodes (*rank), and
// with several GPUs each GPU's blocks, rows from its slice's first, and nodes: the largest
// aligned pieces of the tree its positions make (every dyadic piece of a range lies inside
// one of the range's largest, so each GPU node lies inside one node of the rank's, and their
// sums pushed at their positions add up to the rank's: util/pairwise_sum.h). A GPU without
// blocks (a short minibatch) has no node.
template <class Exec>
void GpuStep<Exec>::CutSums(uint32_t rows, GpuSumCut* rank, std::vector<GpuSumCut>* per_gpu) const {
  std::vector<uint32_t> blocks, leaves;
  model_->SumBlocks(rows, &blocks, &leaves);
  const std::vector<uint32_t>& firsts = model_->sum_nodes();
  const std::vector<uint32_t>& ends = model_->sum_node_ends();
  assert(leaves.size() <= GpuSumCut::kMax && ends.size() <= GpuSumCut::kMax);
  GpuSumCut& c = *rank;
  c = GpuSumCut();
  c.blocks = static_cast<uint32_t>(leaves.size());
  for (uint32_t i = 0; i < c.blocks; ++i) {
    c.begin[i] = blocks[i];
    c.pos[i] = leaves[i];
  }
  c.begin[c.blocks] = blocks.back();
  c.nodes = static_cast<uint32_t>(ends.size());
  for (uint32_t n = 0; n < c.nodes; ++n) {
    c.node_first[n] = firsts[n];
    c.node_end[n] = ends[n];
  }
  per_gpu->assign(gpus_ > 1 ? gpus_ : 0, GpuSumCut());
  for (uint32_t g = 0; g < per_gpu->size(); ++g) {
    const uint32_t lo = c.blocks * g / gpus_, hi = c.blocks * (g + 1) / gpus_;
    GpuSumCut& d = (*per_gpu)[g];
    d.blocks = hi - lo;
    for (uint32_t i = lo; i <= hi; ++i) d.begin[i - lo] = c.begin[i] - c.begin[lo];
    for (uint32_t i = lo; i < hi; ++i) d.pos[i - lo] = c.pos[i];
    CutNodes(c.pos, lo, hi, &d);
  }
}

// Where the GPUs' slices of a minibatch of `rows` rows start (HbmPlanOptions::cut): at their
// first sum blocks.
template <class Exec>
void GpuStep<Exec>::SliceStarts(uint32_t rows, std::vector<uint32_t>* starts) const {
  GpuSumCut rank;
  std::vector<GpuSumCut> per_gpu;
  CutSums(rows, &rank, &per_gpu);
  starts->assign(gpus_ + 1, rows);
  uint32_t at = 0;
  for (uint32_t g = 0; g < gpus_; ++g) {
    (*starts)[g] = rank.begin[at];
    at += gpus_ == 1 ? rank.blocks : per_gpu[g].blocks;
  }
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

// Forward and backward of GPU g's slice of minibatch b, block by block (after CutSums): the
// dense gradient of each node of its cut (node 0's in the replica's grads, node n's in its
// node_grads[n - 1]; zeros for a node without rows), the predictions, and the whole slice's
// dx and dlogit for the per-key sums (the returned run points at them; B = 0 for a GPU
// without blocks, which runs nothing).
template <class Exec>
typename GpuStep<Exec>::SliceRun GpuStep<Exec>::CanonicalForwardBackward(Staged& s,
                                                                         const Batch& pass,
                                                                         size_t b, uint32_t g) {
  Exec& e = *compute_[g];
  Replica& rep = replicas_[g];
  const GpuSumCut& c = CutOf(g);
  const size_t P = NumParams();
  const uint32_t E = model_->emb_width();
  SliceRun whole;
  whole.b = b;
  whole.si = b * gpus_ + g;
  whole.g = g;
  whole.B = c.blocks == 0 ? 0 : s.plan.slice(b, g).rows();
  whole.dx = rep.dx_all.data();
  whole.dlogit = rep.dlogit_all.data();
  GpuMinibatchArgs* now = rep.now.data();
  uint32_t at = 0;  // where now->row0 points, from the slice's first row
  uint32_t i = 0;   // the next block
  for (uint32_t n = 0; n < c.nodes; ++n) {
    float* out = n == 0 ? rep.grads.data() : rep.node_grads[n - 1].data();
    auto slot = [&](int k) { return k == 0 ? out : rep.sum_slots[k - 1].data(); };
    auto merge = [&](int into, int from) { AddInto(e, slot(into), slot(from), P); };
    PairwiseStack stack;
    for (; i < c.blocks && (n + 1 == c.nodes || c.pos[i] < c.node_end[n]); ++i) {
      const int k = stack.Push(c.pos[i], merge);
      const uint32_t r0 = c.begin[i], r1 = c.begin[i + 1];
      if (r0 != at) MoveRow0(e, now, r0 - at);
      at = r0;
      SliceRun run = Forward(s, pass, b, g, r1 - r0);
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

// Several GPUs, after CanonicalForwardBackward on each: the GPUs' node gradients pushed at
// their positions, in GPU order, up the tree into the rank's nodes on GPU 0 (node 0's into
// replica 0's grads, node n's into its node_grads[n - 1]; zeros for a node without rows).
// GPU 0's own nodes come first and its node m lies in a rank node n <= m, so a rank node's
// buffer is written only once GPU 0's node of that number has been added.
template <class Exec>
void GpuStep<Exec>::CanonicalGpuDense() {
  Exec& e0 = *compute_[0];
  Replica& r0 = replicas_[0];
  const size_t P = NumParams();
  for (uint32_t g = 1; g < gpus_; ++g) e0.Wait(compute_[g]->Record());
  auto node_grads = [&](uint32_t g, uint32_t m) {
    Replica& r = replicas_[g];
    return m == 0 ? r.grads.data() : r.node_grads[m - 1].data();
  };
  uint32_t g = 0, m = 0;  // the next GPU node
  for (uint32_t n = 0; n < cut_.nodes; ++n) {
    float* out = node_grads(0, n);
    auto slot = [&](int k) { return k == 0 ? out : r0.sum_slots[k - 1].data(); };
    auto merge = [&](int into, int from) { AddInto(e0, slot(into), slot(from), P); };
    PairwiseStack stack;
    for (;; ++m) {
      while (g < gpus_ && m >= gpu_cuts_[g].nodes) {
        ++g;
        m = 0;
      }
      if (g == gpus_) break;
      const uint32_t first = gpu_cuts_[g].node_first[m];
      if (n + 1 < cut_.nodes && first >= cut_.node_end[n]) break;
      const int k = stack.Push(first, merge);
      const float* from = node_grads(g, m);
      if (slot(k) != from) e0.Copy(slot(k), from, P);
    }
    if (stack.empty()) e0.Fill(out, 0.0f, P);
    stack.Finish(merge);
  }
  // The other GPUs reuse their node buffers only after GPU 0 has read them.
  const Event done = e0.Record();
  for (uint32_t h = 1; h < gpus_; ++h) compute_[h]->Wait(done);
}

// The per-key sums of a slice of minibatch b (KeyGradients, after the occurrences' records are
// in rep.occ_grads): key u's record for node n of its cut at feed.grad[(u nodes + n) gs]: its
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
  const GpuSumCut cut = CutOf(run.g);
  e.ForEach(size_t{s.extents.uniq} * gs, [=] CTRBOX_HD(size_t i) {
    const SegmentShape sh = now->seg;
    const uint32_t u = static_cast<uint32_t>(i / gs), j = static_cast<uint32_t>(i % gs);
    if (u >= sh.segments) return;
    float* rec = grad + size_t{u} * cut.nodes * gs + j;
    for (uint32_t n = 0; n < cut.nodes; ++n) rec[size_t{n} * gs] = 0.0f;
    float slot[PairwiseStack::Depth(5)] = {};
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

// Several GPUs, owner o of minibatch b (after every GPU's CanonicalKeySums): the asking GPUs'
// records of each row it owns, copied over (GPU g's segment o, a record per node of g's cut
// per key) and pushed at their nodes' positions in GPU order up the tree, one thread per
// (touched row, record column): the row's record per node of the rank's share, into
// part.sums at (i nodes + n) gs for the minibatch's touched row i. A GPU node without an
// occurrence of the key (its show count 0) is skipped, not added as zero (a -0 would become
// +0), and a rank node without one is zeros, as the CPU model's.
template <class Exec>
void GpuStep<Exec>::CanonicalOwnerSums(Staged& s, size_t b, uint32_t o,
                                       const std::vector<Event>& reduced) {
  const HbmPlan& plan = s.plan;
  const uint32_t N = gpus_, gs = GradStride(), show_col = RowDim() + 1;
  Exec& e = *compute_[o];
  Part& part = s.parts[o];
  GpuNodeMap map;
  map.gpus = N;
  uint32_t at = 0;
  for (uint32_t g = 0; g < N; ++g) {
    const GpuSumCut& c = gpu_cuts_[g];
    map.nodes[g] = c.nodes;
    for (uint32_t m = 0; m < c.nodes; ++m) map.first[g][m] = c.node_first[m];
    map.rec_at[g] = at;
    if (g != o) e.Wait(reduced[g]);
    const HbmSlice& sl = plan.slice(b, g);
    const uint32_t n = (sl.seg[o + 1] - sl.seg[o]) * c.nodes;
    if (n == 0) continue;
    e.Copy(part.recv_grad.data() + size_t{at} * gs,
           s.feeds[g].grad.data() + size_t{sl.seg[o]} * c.nodes * gs, size_t{n} * gs);
    at += n;
  }
  const uint32_t t0 = plan.touched_begin[o][b], nt = plan.touched_begin[o][b + 1] - t0;
  if (nt == 0) return;
  const GpuSumCut rank = cut_;
  const uint32_t* src = part.touched_src.data() + size_t{t0} * N;
  const float* in = part.recv_grad.data();
  float* out = part.sums.data();
  e.ForEach(size_t{nt} * gs, [=] CTRBOX_HD(size_t idx) {
    const uint32_t i = static_cast<uint32_t>(idx / gs), j = static_cast<uint32_t>(idx % gs);
    const uint32_t* from = src + size_t{i} * map.gpus;
    float slot[PairwiseStack::Depth(5)] = {};
    auto merge = [&](int into, int k) { slot[into] += slot[k]; };
    uint32_t g = 0, m = 0;  // the next GPU node
    for (uint32_t n = 0; n < rank.nodes; ++n) {
      PairwiseStack stack;
      for (;; ++m) {
        while (g < map.gpus && (m >= map.nodes[g] || from[g] == HbmPlan::kNoSource)) {
          ++g;
          m = 0;
        }
        if (g == map.gpus) break;
        const uint32_t first = map.first[g][m];
        if (n + 1 < rank.nodes && first >= rank.node_end[n]) break;
        const float* rec = in + (size_t{map.rec_at[g]} + size_t{from[g]} * map.nodes[g] + m) * gs;
        if (rec[show_col] == 0.0f) continue;  // no occurrence of the key in this node
        const int k = stack.Push(first, merge);
        slot[k] = rec[j];
      }
      stack.Finish(merge);
      out[(size_t{i} * rank.nodes + n) * gs + j] = stack.empty() ? 0.0f : slot[0];
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
  std::vector<uint32_t> leaves;
  std::vector<const float*> grads;
  rank_nodes_.resize(cut_.nodes);
  for (uint32_t n = 0; mine && n < cut_.nodes; ++n) {
    if (!cut_.NodeHasRows(n)) continue;
    rank_nodes_[n].resize(P);
    e0.Download(rank_nodes_[n].data(), n == 0 ? rep.grads.data() : rep.node_grads[n - 1].data(), P);
    leaves.push_back(cut_.node_first[n]);
    grads.push_back(rank_nodes_[n].data());
  }
  RETURN_IF_ERROR(e0.status());
  rank_dense_.resize(P);
  return ranks->AllReduceDenseTree(leaves.data(), grads.data(), leaves.size(), P,
                                   rank_dense_.data());
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_CANONICAL_H_
