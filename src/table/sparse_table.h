// SparseTable: the sparse parameter store seen by the trainer (DESIGN.md §3 `table`).
//
// Pull makes a pass's rows available and pins them; Push writes the trained rows back and
// releases the pins (AIBox §4.3). The implementation is TieredTable (tiered_table.h): a
// memory-budgeted cache, optionally over SSD parameter files.
//
// Thread safety: every method may be called concurrently with every other.
#ifndef CTRBOX_TABLE_SPARSE_TABLE_H_
#define CTRBOX_TABLE_SPARSE_TABLE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "table/accessor.h"
#include "table/value.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace ctrbox {

class SparseTable;

// The pins of one Pull: while it lives (and until Push consumes it) the pulled rows stay in
// memory. Destroying it without a Push releases the pins (the rows keep their old values).
// Thread safety: a value owned by one thread.
class PinnedRows {
 public:
  PinnedRows() = default;
  PinnedRows(PinnedRows&& o) noexcept { *this = std::move(o); }
  PinnedRows& operator=(PinnedRows&& o) noexcept;
  ~PinnedRows();
  PinnedRows(const PinnedRows&) = delete;
  PinnedRows& operator=(const PinnedRows&) = delete;

  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }

 private:
  friend class TieredTable;
  SparseTable* table_ = nullptr;
  // Per pulled key, in pull order: (slot, node), or (kNotPinned, _) for a key that was not
  // inserted (a lookup of an absent key).
  std::vector<std::pair<uint32_t, uint32_t>> nodes_;
};

constexpr uint32_t kNotPinned = 0xFFFFFFFFu;

struct TableStats {
  uint64_t keys = 0;  // rows in the table (all tiers)
  uint64_t keys_in_memory = 0;
  uint64_t keys_on_disk = 0;   // rows in live group records
  uint64_t keys_with_emb = 0;  // counted where known (all tiers after Stats(true))
  uint64_t value_bytes = 0;    // encoded row bytes without keys (bytes_live)
  uint64_t memory_bytes = 0;   // cache: index, slabs, metadata, group index, Bloom filters
};

class SparseTable {
 public:
  virtual ~SparseTable() = default;

  virtual const ValueLayout& layout() const = 0;
  virtual size_t num_shards() const = 0;

  // Sets out to the n rows of keys[0..n) (distinct keys) and pins them. An absent key gets
  // accessor->InitRow and is inserted (train), or, with a null accessor, a cleared row that
  // is not inserted (eval, predict). Fails on an I/O or corruption error, or when the pinned
  // rows do not fit the memory budget.
  virtual StatusOr<PinnedRows> Pull(const uint64_t* keys, size_t n, const CtrAccessor* accessor,
                                    RowBlock* out, ThreadPool* pool) = 0;
  // Stores `rows` (row i is the i-th pulled key) and releases the pins.
  // REQUIRES: rows are the pulled keys in pull order.
  virtual Status Push(PinnedRows* pins, const RowBlock& rows, ThreadPool* pool) = 0;
  // Stores rows without pins (loading a saved model).
  virtual Status Insert(const RowBlock& rows, ThreadPool* pool) = 0;
  // Applies accessor.ShrinkRow to every row in every tier, deleting those it rejects.
  virtual StatusOr<uint64_t> Shrink(const CtrAccessor& accessor, ThreadPool* pool) = 0;
  // Every row of shard s (all tiers), in no particular order.
  virtual Status ExportShard(size_t s, RowBlock* out) = 0;
  // Counts over all tiers, each row counted once in its newest version.
  virtual TableStats Stats() const = 0;
  // Storage counters (cache hits, SSD I/O, compactions...) for reports; {} without a disk tier.
  virtual nlohmann::json StorageReport() const = 0;
  // An order-independent hash of every row's canonical encoding (docs/sparse_table.md).
  virtual StatusOr<uint64_t> SparseDigest(ThreadPool* pool) = 0;
  // Writes every dirty row to the disk tier and the INDEX (a clean shutdown); no-op in memory.
  virtual Status Close() = 0;

 protected:
  friend class PinnedRows;
  virtual void Release(PinnedRows* pins) = 0;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_SPARSE_TABLE_H_
