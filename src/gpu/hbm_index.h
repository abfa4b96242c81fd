// The HBM working table's hash index (HPS §4, appendix C): an open-addressing table from a
// feature key to the key's row in a GPU's part of the pass's working parameters, with the
// insert / get / accumulate operations its kernels run (docs/gpu.md).
//
// Layout: `capacity` (a power of two, at most half full) buckets of a 64-bit key and a 32-bit
// row; linear probing from Mix64(key). Bucket keys start as kEmptyKey; an insert claims a
// bucket with one compare-and-swap, so any number of threads insert concurrently. A real key equal
// to kEmptyKey is not dropped: its row lives in a separate cell (`special`). Keys are
// partitioned across GPUs by key mod #GPU (HPS Algorithm 2): OwnerOf.
//
// The functions are CTRBOX_HD: the CUDA backend runs them in kernels, the host emulation
// (and the tests) on CPU threads with the same atomics (util/hd.h).
#ifndef CTRBOX_GPU_HBM_INDEX_H_
#define CTRBOX_GPU_HBM_INDEX_H_

#include <cstddef>
#include <cstdint>

#include "util/hash.h"
#include "util/hd.h"

namespace ctrbox {

constexpr uint64_t kEmptyKey = ~uint64_t{0};
constexpr uint32_t kNoRow = 0xFFFFFFFFu;

// The GPU (of n) that owns key.
CTRBOX_HD inline uint32_t OwnerOf(uint64_t key, uint32_t n) {
  return static_cast<uint32_t>(key % n);
}

// Buckets for n keys: a power of two holding them at load factor <= 1/2 (at least 16).
inline size_t HbmCapacity(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  return cap;
}

// A view of one table's arrays (device or host memory); copied into kernels by value.
struct HbmIndex {
  uint64_t* keys = nullptr;     // capacity buckets, kEmptyKey when free
  uint32_t* rows = nullptr;     // capacity buckets
  uint32_t* special = nullptr;  // the row of the key kEmptyKey, kNoRow if absent
  uint64_t mask = 0;            // capacity - 1

  // Inserts key with its row. Keys inserted concurrently must be distinct. Returns false if
  // the key was already present (its row is left as it was) or the table is full.
  CTRBOX_HD bool Insert(uint64_t key, uint32_t row) const {
    if (key == kEmptyKey) {
      if (*special != kNoRow) return false;
      *special = row;
      return true;
    }
    uint64_t s = Mix64(key) & mask;
    for (uint64_t probes = 0; probes <= mask; ++probes, s = (s + 1) & mask) {
      const uint64_t prev = AtomicCas64(&keys[s], kEmptyKey, key);
      if (prev == kEmptyKey) {
        rows[s] = row;
        return true;
      }
      if (prev == key) return false;
    }
    return false;
  }

  // Get: the row of key, or kNoRow. Runs after the inserts completed (a later kernel).
  CTRBOX_HD uint32_t Find(uint64_t key) const {
    if (key == kEmptyKey) return *special;
    uint64_t s = Mix64(key) & mask;
    for (uint64_t probes = 0; probes <= mask; ++probes, s = (s + 1) & mask) {
      const uint64_t k = keys[s];
      if (k == key) return rows[s];
      if (k == kEmptyKey) return kNoRow;
    }
    return kNoRow;
  }

  // Accumulate: adds g[0..n) into the key's row of `acc` (stride floats per row) with
  // atomic adds, so concurrent updates of one key are all kept. Returns false if the key is
  // absent.
  CTRBOX_HD bool Accumulate(uint64_t key, const float* g, uint32_t n, float* acc,
                            uint32_t stride) const {
    const uint32_t row = Find(key);
    if (row == kNoRow) return false;
    float* dst = acc + size_t{row} * stride;
    for (uint32_t j = 0; j < n; ++j) AtomicAddFloat(dst + j, g[j]);
    return true;
  }
};

}  // namespace ctrbox

#endif  // CTRBOX_GPU_HBM_INDEX_H_
