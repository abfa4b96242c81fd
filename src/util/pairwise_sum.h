// PairwiseStack: sums leaves in the order of a fixed binary tree over their positions, so that
// the bits of a sum do not depend on how its leaves were cut up (docs/distributed.md, "The
// same model on any number of ranks").
//
// The tree is the dyadic one: node [j 2^h, (j + 1) 2^h) is its left half plus its right half;
// a half with no leaf adds nothing (it is skipped, not added as zero). Leaves come in
// increasing position; the stack merges two neighbours as soon as no later leaf can fall
// between them. So one pass over all leaves, or passes over the leaves of dyadic nodes (each a
// rank's share, say) whose results are then pushed at the nodes' positions, give the same bits.
//
// The values live in the caller's slots (0, 1, ...: at most Depth(max position) at once):
// Push returns the slot the new leaf is to be written to, after calling merge(into, from)
// for the merges the tree makes first (into < from; the caller adds slot `from` into slot
// `into`: the lower positions' sum on the left). Finish merges what is left into slot 0.
//
// Its functions are constexpr so that device code may run them too (nvcc
// --expt-relaxed-constexpr: the GPU step's per-key sums, gpu/step_sparse.h). They use no
// std:: bit function: nvcc 13 compiles std::countl_zero in device code to the constant 64
// (libstdc++'s builtin is not lowered), which broke the tree on the GPU (see HighBit).
//
// Thread safety: not thread-safe (one per sum).
#ifndef CTRBOX_UTIL_PAIRWISE_SUM_H_
#define CTRBOX_UTIL_PAIRWISE_SUM_H_

#include <cassert>
#include <cstdint>

namespace ctrbox {

// The index of the highest set bit of x > 0 (63 - std::countl_zero(x)), in plain arithmetic
// so that host and device code compute the same (std::countl_zero is 64 for every x in nvcc's
// device code).
constexpr int HighBit(uint64_t x) {
  int n = 0;
  for (int shift = 32; shift > 0; shift /= 2) {
    if (x >> shift) {
      x >>= shift;
      n += shift;
    }
  }
  return n;
}

class PairwiseStack {
 public:
  // The most slots in use at once for positions below 2^bits.
  static constexpr int Depth(int bits) { return bits + 1; }
  static constexpr int kMaxSlots = 65;

  // The slot for the leaf at `pos`, which must exceed every position pushed since Reset.
  template <class Merge>
  constexpr int Push(uint64_t pos, Merge&& merge) {
    if (n_ > 0) {
      assert(pos > last_);
      // The level of the lowest node holding both the previous leaf and this one.
      const int link = HighBit(last_ ^ pos);
      // The nodes below that level are complete: merge them.
      while (n_ >= 2 && link_[n_ - 1] < link) {
        merge(n_ - 2, n_ - 1);
        --n_;
      }
      link_[n_] = link;
    }
    last_ = pos;
    return n_++;
  }

  // Merges every slot into slot 0, which then holds the sum (if anything was pushed).
  template <class Merge>
  constexpr void Finish(Merge&& merge) {
    while (n_ >= 2) {
      merge(n_ - 2, n_ - 1);
      --n_;
    }
  }

  constexpr bool empty() const { return n_ == 0; }
  constexpr void Reset() { n_ = 0; }

 private:
  int n_ = 0;
  uint64_t last_ = 0;
  int link_[kMaxSlots] = {};  // link_[i]: the level at which slot i merges with slot i - 1
};

// The largest nodes of the tree that make up the positions [p0, p1), in order: visit(first,
// end) for each (a rank's share of the sums: CtrModel::ShareNodes; a GPU's cut of it: CutNodes
// in gpu/step_buffers.h).
template <class Visit>
constexpr void ForEachTreeNode(uint32_t p0, uint32_t p1, Visit&& visit) {
  for (uint32_t p = p0; p < p1;) {
    uint32_t size = 1;
    while (p % (2 * size) == 0 && p + 2 * size <= p1) size *= 2;
    visit(p, p + size);
    p += size;
  }
}

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_PAIRWISE_SUM_H_
