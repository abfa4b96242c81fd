// HbmPlan: how one pass is laid out over N GPUs (docs/gpu.md), computed on the host from
// the pass's working set before its upload.
//
// Sparse parameters are model-parallel: key k's row lives on GPU OwnerOf(k, N) (HPS
// Algorithm 2), at the position of its local id among that GPU's keys (ascending local id).
// Examples are data-parallel: minibatch b's rows are cut into N contiguous slices, slice g
// trained on GPU g with a replica of the dense parameters.
//
// For each (minibatch, GPU g) the slice's distinct keys are listed once ("uniq", ordered by
// owner, then by first occurrence), so that
//   - each owner o receives from g the keys of segment o of g's uniq list, looks their rows up
//     (HbmIndex::Find) and sends back their embeddings: g's fetch buffer is uniq-ordered;
//   - g reduces its gradients per uniq key (over the key's occurrences in occurrence order)
//     and sends segment o back to o, which accumulates them per row in GPU order and updates
//     each row it owns once per minibatch.
// With N = 1 every sum runs in the order of the CPU model's, so lookups, pooling and the
// sparse gradients are bit-identical to it (given the same dense gradients).
#ifndef CTRBOX_GPU_HBM_PLAN_H_
#define CTRBOX_GPU_HBM_PLAN_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "io/batch.h"
#include "util/thread_pool.h"
#include "working/working_set.h"

namespace ctrbox {

struct HbmSlice {
  uint32_t row_begin = 0, row_end = 0;  // pass rows
  uint32_t occ_begin = 0, occ_end = 0;  // pass key occurrences
  uint32_t uniq_begin = 0;              // into HbmPlan::uniq_*
  std::vector<uint32_t> seg;            // N + 1 offsets into the slice's uniq list, by owner
  uint32_t uniq() const { return seg.back(); }
  uint32_t rows() const { return row_end - row_begin; }
};

struct HbmPlan {
  uint32_t gpus = 1;
  // Local id -> its row on its owner; per owner, its local ids in row order.
  std::vector<uint32_t> row_of;
  std::vector<std::vector<uint32_t>> locals;  // [owner]
  // slices[b * gpus + g]: minibatch b, GPU g.
  std::vector<HbmSlice> slices;
  // Per pass key occurrence: the index of its key in its slice's uniq list.
  std::vector<uint32_t> fetch_pos;
  // Concatenated uniq lists of all slices: the local id, and the CSR of its occurrences
  // (pass occurrence indices, ascending). uniq_occ_begin has one entry per uniq entry, plus
  // one closing entry per slice (so slice s's offsets are uniq_occ_begin[s.uniq_begin + s + .]).
  std::vector<uint32_t> uniq_local;
  std::vector<uint32_t> uniq_occ_begin;
  std::vector<uint32_t> uniq_occ;
  // Per owner and minibatch: the distinct rows the minibatch updates there, in order of
  // first appearance (GPU 0's uniq segment first, then GPU 1's new ones, ...).
  std::vector<std::vector<uint32_t>> touched;        // [owner]: concatenated over minibatches
  std::vector<std::vector<uint32_t>> touched_begin;  // [owner]: minibatches + 1 offsets
  // With HbmPlanOptions::sources: per owner, per touched row (as `touched`), `gpus` entries:
  // the row's index in GPU g's segment of its slice of the minibatch, or kNoSource.
  static constexpr uint32_t kNoSource = ~0u;
  std::vector<std::vector<uint32_t>> touched_src;  // [owner]

  const HbmSlice& slice(size_t b, uint32_t g) const { return slices[b * gpus + g]; }
  // The CSR offsets of slice s (uniq() + 1 entries).
  const uint32_t* occ_offsets(size_t slice_index) const {
    return uniq_occ_begin.data() + slices[slice_index].uniq_begin + slice_index;
  }
  size_t minibatches() const { return gpus == 0 ? 0 : slices.size() / gpus; }
};

struct HbmPlanOptions {
  // Where a minibatch of `rows` rows is cut among the GPUs: (*starts)[g] is slice g's first
  // row from the minibatch's first, g = 0 .. gpus ((*starts)[gpus] = rows; ascending). Unset:
  // rows g / gpus (canonical sums cut at their sum blocks instead: gpu/step_canonical.h).
  std::function<void(uint32_t rows, std::vector<uint32_t>* starts)> cut;
  bool sources = false;  // fill HbmPlan::touched_src
};

// Plans `pass` (its working set ws) over `gpus` GPUs, on `pool` (may be null): minibatches
// are planned in parallel, each alone, so the plan is the same whatever the thread count.
// REQUIRES: gpus >= 1.
void BuildHbmPlan(const Batch& pass, const WorkingSet& ws, uint32_t gpus, ThreadPool* pool,
                  HbmPlan* out, const HbmPlanOptions& options = {});

}  // namespace ctrbox

#endif  // CTRBOX_GPU_HBM_PLAN_H_
