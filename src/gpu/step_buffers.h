// The GPU step's buffers (gpu/step.h): what a staged pass holds on each GPU, and each GPU's
// replica of the dense model with its minibatch buffers. Device buffers are Exec's
// (exec/exec.h); every one is sized by Reserve before use and only grows.
#ifndef CTRBOX_GPU_STEP_BUFFERS_H_
#define CTRBOX_GPU_STEP_BUFFERS_H_

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "exec/exec.h"
#include "exec/options.h"
#include "gpu/hbm_index.h"
#include "gpu/hbm_plan.h"
#include "model/optimizer.h"
#include "table/value.h"
#include "util/pairwise_sum.h"
#include "util/thread_pool.h"

namespace ctrbox {

// An MLP layer's place in the dense parameters.
struct GpuLayer {
  uint32_t in = 0, out = 0;
  size_t w = 0, b = 0;  // offsets of the weights [in x out] and the bias [out]
};

// What one GPU's kernels of minibatch b read from device memory rather than take as
// arguments: the values that change from minibatch to minibatch, so that one recorded step
// replays for every minibatch of its shape (docs/gpu.md, "A replayed step"). Made on the host
// for the whole pass before it trains (GpuStep::PrepareArgs), uploaded once; at the start of
// each minibatch a kernel copies the next one into the GPU's current record (GpuReplica::now).
struct GpuMinibatchArgs {
  // The minibatch: the dense optimizer's constants and step (quantized rounding's counter),
  // and the global minibatch's rows (the loss is their mean).
  DenseStep step;
  uint64_t t = 0;
  float rows_f = 1;
  // This GPU's slice: its first row in the pass, its first cell's place from the minibatch's
  // first row, its distinct keys and their occurrences (first in the feed's occurrence list,
  // count, first CSR offset: `seg`, the per-key sums' shape; occ0, occ_n: the slice's
  // occurrences in the pass, for atomic scatter).
  uint32_t row0 = 0, cell_shift = 0, uniq = 0, occ_first = 0, n_occ = 0, occ0 = 0, occ_n = 0;
  SegmentShape seg;
  // This GPU as owner: the rows it gathers for the asking GPUs (first in recv_rows, count),
  // and the rows the minibatch touches (first in touched, count).
  uint32_t gather_first = 0, gather_n = 0, t0 = 0, nt = 0;
};

// Canonical sums (train.deterministic; docs/distributed.md, "The same model on any number of
// ranks"): the sum blocks of a minibatch, as CtrModel cuts them (CtrModel::SumBlocks): block i
// holds rows [begin[i], begin[i + 1]) (from the minibatch's first, or the GPU's slice's) and
// is the tree's leaf at position pos[i]; its rows make `nodes` nodes of the tree, node n's
// positions [node_first[n], node_end[n]). The rank's cut: the nodes of its share; a GPU's
// (several GPUs): the largest nodes its blocks' positions make, each inside one of the
// rank's. Taken by value into kernels (the same for every minibatch of one shape, so a
// recorded step replays it).
struct GpuSumCut {
  static constexpr uint32_t kMax = 24;  // CtrModel::kMaxSumBlocks
  uint32_t blocks = 0, nodes = 1;
  uint32_t begin[kMax + 1] = {};
  uint32_t pos[kMax] = {};
  uint32_t node_first[kMax] = {};
  uint32_t node_end[kMax] = {};
  // Whether node n has rows of the minibatch (a node without is left out of the ranks' sums).
  bool NodeHasRows(uint32_t n) const {
    for (uint32_t i = 0; i < blocks; ++i) {
      if (pos[i] >= node_first[n] && pos[i] < node_end[n]) return true;
    }
    return false;
  }
};

// Canonical sums on several GPUs: each GPU's nodes (first positions), and where its records
// start in an owner's received records (per minibatch and owner: the asking GPUs' segments in
// GPU order, a record per node per key). Taken by value into the owners' sums.
struct GpuNodeMap {
  static constexpr uint32_t kMaxGpus = kMaxCanonicalGpus, kMaxNodes = 12;
  uint32_t gpus = 0;
  uint32_t nodes[kMaxGpus] = {};
  uint32_t first[kMaxGpus][kMaxNodes] = {};
  uint32_t rec_at[kMaxGpus] = {};
};

// The nodes of the sums' tree a GPU's blocks [lo, hi) of a cut at leaf positions pos[] are
// made of (the largest aligned pieces of [pos[lo], pos[hi - 1] + 1)) into d's node_first and
// node_end; d.nodes their count (0 for no block).
inline void CutNodes(const uint32_t* pos, uint32_t lo, uint32_t hi, GpuSumCut* d) {
  d->nodes = 0;
  if (lo == hi) return;
  ForEachTreeNode(pos[lo], pos[hi - 1] + 1, [d](uint32_t first, uint32_t end) {
    assert(d->nodes < GpuNodeMap::kMaxNodes);
    d->node_first[d->nodes] = first;
    d->node_end[d->nodes] = end;
    ++d->nodes;
  });
}

// A staged pass's largest minibatch, per quantity (the replayed kernels' extents).
struct GpuPassExtents {
  uint32_t rows = 0, uniq = 0, occ = 0;
  std::vector<uint32_t> recv, touched;  // [owner]
};

// A pass's rows of one owner, field by field (RowBlock's structure of arrays), on its GPU.
template <class Exec>
struct GpuDeviceRows {
  template <class T>
  using Buf = typename Exec::template Buffer<T>;
  Buf<float> show, click, wide, wide_state, emb, emb_state;
  Buf<uint16_t> unseen, flags;
};

// The same rows on the host: gathered from a RowBlock for an upload, or downloaded and
// scattered back. Gather and Scatter are defined in step_buffers.cc, not inline: this header is
// compiled by nvcc and by the C++ compiler, and an inline function holding a lambda, emitted by
// both, can be merged by the linker with the other compiler's closure layout (it crashed so).
struct HostRows {
  HostRows(const ValueLayout& L, size_t n)
      : layout(L),
        n(n),
        show(n),
        click(n),
        wide(n),
        wide_state(n * L.wide_state),
        emb(n * L.dim),
        emb_state(n * L.emb_state),
        unseen(n),
        flags(n) {}
  // Row i from local id locals[i] of r, on `pool` (may be null).
  void Gather(const RowBlock& r, const std::vector<uint32_t>& locals, ThreadPool* pool);
  // Row i to local id locals[i] of r, on `pool` (may be null).
  void Scatter(const std::vector<uint32_t>& locals, RowBlock* r, ThreadPool* pool) const;
  // Calls f(device field, host field) for every field of a row.
  template <class D, class H, class F>
  static void EachField(D& d, H& h, F f) {
    f(d.show, h.show);
    f(d.click, h.click);
    f(d.wide, h.wide);
    f(d.wide_state, h.wide_state);
    f(d.emb, h.emb);
    f(d.emb_state, h.emb_state);
    f(d.unseen, h.unseen);
    f(d.flags, h.flags);
  }

  ValueLayout layout;
  size_t n;
  std::vector<float> show, click, wide, wide_state, emb, emb_state;
  std::vector<uint16_t> unseen, flags;
};

// What one owner GPU holds of a staged pass.
template <class Exec>
struct GpuOwnerPart {
  template <class T>
  using Buf = typename Exec::template Buffer<T>;
  size_t n = 0;  // rows
  GpuDeviceRows<Exec> rows;
  Buf<uint64_t> keys, bucket_keys, recv_keys;
  Buf<uint32_t> bucket_rows, special, recv_rows, touched, status, created;
  HbmIndex index;
  std::vector<uint32_t> recv_base;  // [slice] offsets into recv_keys / recv_rows
  // Per minibatch: rows gathered for each asking GPU, and their gradients coming back.
  Buf<float> send, recv_grad, acc;
  Buf<float> sums;  // with ranks: the touched rows' summed records, to the host
  // Canonical sums on several GPUs: per touched row, its place in each asking GPU's segment
  // (HbmPlan::touched_src).
  Buf<uint32_t> touched_src;
};

// One GPU's copy of a staged pass's examples and of its slices' plan.
template <class Exec>
struct GpuFeed {
  template <class T>
  using Buf = typename Exec::template Buffer<T>;
  Buf<float> labels, dense, weights, predictions;
  Buf<uint32_t> offsets, fetch_pos, cell, uniq_occ_begin, uniq_occ;
  // Per minibatch: the rows this GPU asked for (embedding, wide, flag) and its gradients.
  Buf<float> fetch, grad;
};

// A pass between Stage and the end of its Train.
template <class Exec>
struct GpuStagedPass {
  uint64_t pass_index = ~uint64_t{0};
  HbmPlan plan;
  std::vector<GpuOwnerPart<Exec>> parts;  // [owner]
  std::vector<GpuFeed<Exec>> feeds;       // [GPU]
  std::vector<typename Exec::Event> staged;
  GpuPassExtents extents;  // set by EnsureWork
};

template <class Exec>
struct GpuMixBuffers {  // one mixture layer's, as MixRows names them
  typename Exec::template Buffer<float> x, a, c, u, gate, du, dc, da, dgate, dub;
};

template <class Exec>
struct GpuTowerBuffers {  // one tower's, as TowerRows names them
  template <class T>
  using Buf = typename Exec::template Buffer<T>;
  Buf<float> tin, dtin, inj_first, inj_last;
  std::vector<Buf<float>> acts, grads;
  Buf<uint32_t> cols, inv;
};

// One GPU's dense parameters and minibatch buffers.
template <class Exec>
struct GpuReplica {
  template <class T>
  using Buf = typename Exec::template Buffer<T>;
  Buf<float> params, grads, m, v, sum;
  Buf<float> x, logits, dlogit, wide_sum, dx;
  // Canonical sums: the tree's pending dense gradients (slots 1..; slot 0 is the node's own),
  // the dense gradients of the rank's nodes 1.. (node 0's is grads), and the whole slice's
  // dx and dlogit (the blocks run one by one through x .. dx; the per-key sums read them all).
  std::vector<Buf<float>> sum_slots, node_grads;
  Buf<float> dx_all, dlogit_all;
  std::vector<Buf<float>> acts, hgrads;
  // Per key occurrence of the slice, in its keys' occurrence-list order: its gradient record
  // (before the per-key sums).
  Buf<float> occ_grads;
  // The interactions' (as CtrModel's): the MLP's input with dots and its gradient, each
  // cross layer's output, sum and sum gradient, the backward's running buffers.
  Buf<float> mlp_in, dmi, cross_g, cross_t, cross_acc;
  std::vector<Buf<float>> cross_x, cross_u, cross_gu, cross_low, cross_glow;
  // The bottom MLP's input, the gradient at z, and per layer activations and gradients.
  Buf<float> bottom_in, bottom_gz;
  std::vector<GpuTowerBuffers<Exec>> tw;  // per tower (model.towers)
  std::vector<GpuMixBuffers<Exec>> mix;   // per mixture layer (model.cross_experts)
  Buf<float> mix_g, mix_acc, mix_tmp;
  std::vector<Buf<float>> bottom_acts, bottom_grads;
  // With model.slot_dims: the slot of every embedding column, and every slot's first column
  // (from the dense width) and dimension. Empty with one dimension (column / dim is the slot).
  Buf<uint32_t> col_slot, slot_col, slot_dim;
  // The pass's minibatch arguments (this GPU's), the current minibatch's, and the index of the
  // next one (GpuMinibatchArgs).
  Buf<GpuMinibatchArgs> args, now;
  Buf<uint32_t> cursor;
};

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_BUFFERS_H_
