// CacheSlot: one level-1 slot of the MEM-PS cache (docs/storage.md): an open-addressing index
// key -> row node (level 2), the rows in slab arenas, and per-row cache metadata.
//
// Thread safety: not thread-safe; the owner holds `mu` around every call.
#ifndef CTRBOX_TABLE_CACHE_SLOT_H_
#define CTRBOX_TABLE_CACHE_SLOT_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "table/slab.h"
#include "table/value.h"

namespace ctrbox {

constexpr uint32_t kNoNode = 0xFFFFFFFFu;

// Cache state of a row.
enum NodeState : uint8_t {
  kDirty = 1,    // changed since it was last written to a group record
  kFresh = 2,    // a default row that was never pushed: never written, dropped at eviction
  kOnDisk = 4,   // the current group record of its group holds a version of this key
  kDiskEmb = 8,  // ... and that version has an embedding
};

struct NodeMeta {
  uint16_t pins = 0;   // Pulls holding the row (the AIBox LRU chain: rows in use)
  uint16_t epoch = 0;  // the table's pull epoch (pass) of the row's last pull (wraps)
  uint8_t state = 0;   // NodeState bits
};

class CacheSlot {
 public:
  explicit CacheSlot(const ValueLayout& layout);

  mutable std::mutex mu;

  // The node of key, or kNoNode.
  uint32_t Find(uint64_t key) const;
  // Adds key (REQUIRES: absent) with a cleared row and zero metadata; returns its node.
  uint32_t Insert(uint64_t key);
  // Removes the node and frees its records.
  void Erase(uint32_t node);

  uint64_t key(uint32_t node) const;
  NodeMeta& meta(uint32_t node) { return meta_[node]; }
  const NodeMeta& meta(uint32_t node) const { return meta_[node]; }
  bool has_emb(uint32_t node) const;
  // The row's show counter: its decayed occurrence count, the frequency the LFU order uses.
  float show(uint32_t node) const;

  // Copies the row of node into row r of out (key included).
  void ReadRow(uint32_t node, RowBlock* out, size_t r) const;
  // Stores row r of `in` as the node's values (the key is not changed).
  void WriteRow(uint32_t node, const RowBlock& in, size_t r);

  size_t size() const { return size_; }
  // Bytes of the index, the live row records and the metadata: what the memory budget
  // counts (slab records freed by eviction are reused before new slabs are allocated).
  size_t MemoryBytes() const;
  // Bytes allocated: as MemoryBytes, but whole slabs (live or free records).
  size_t AllocatedBytes() const;
  // Bytes a row with an embedding costs (records + index share at full load), for budgets.
  size_t RowBytes() const;

  // Calls f(node) for every live node.
  template <typename F>
  void ForEachNode(F f) const {
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (rows_[i] != kNoNode) f(rows_[i]);
    }
  }

 private:
  size_t Probe(uint64_t key) const;
  void Rehash(size_t capacity);

  ValueLayout layout_;
  Quantizer quant_;
  uint32_t emb_words_;          // 32-bit words of the stored embedding (codes are packed)
  std::vector<uint64_t> keys_;  // open addressing, linear probing
  std::vector<uint32_t> rows_;  // node per slot, kNoNode when free
  size_t size_ = 0;
  SlabArena headers_, embs_;
  std::vector<NodeMeta> meta_;  // by node id
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_CACHE_SLOT_H_
