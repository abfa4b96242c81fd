// WorkingTable: the parameters of one pass, indexed by pass-local id — the CPU counterpart of
// the HBM-PS (HPS §4; docs/pipeline.md). The pull stage fills its rows from the sparse table,
// the trainer updates them in place, the push stage writes them back.
//
// Rows are contiguous, row i holding key i of the working set (WorkingSet::keys). An
// open-addressing index per key key range (working_set.h: KeyRangeOf) maps key -> local id;
// key range p owns local ids [key_range_begin(p), key_range_begin(p + 1)), so building and
// searching run per key range without locks — the split a multi-device table shards by.
//
// The per-key gradient accumulation of a minibatch is the working set's occurrence lists
// (Minibatch::uniq / occ), reduced in a fixed order by the model; see docs/pipeline.md.
//
// Thread safety: const methods may run concurrently; Build and the row mutators may not.
#ifndef CTRBOX_WORKING_WORKING_TABLE_H_
#define CTRBOX_WORKING_WORKING_TABLE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "table/value.h"
#include "util/thread_pool.h"
#include "working/working_set.h"

namespace ctrbox {

// Keys two working tables share: (local id in this table, local id in the other).
using SharedRows = std::vector<std::pair<uint32_t, uint32_t>>;

class WorkingTable {
 public:
  static constexpr uint32_t kNotFound = 0xFFFFFFFFu;

  explicit WorkingTable(ValueLayout layout = {}) : rows_(layout) {}

  // Insert: indexes `keys` (distinct, grouped by ascending key range as BuildWorkingSet
  // numbers them; key i gets local id i) and sizes the rows (contents unspecified until a
  // pull fills them). pool may be null.
  void Build(const std::vector<uint64_t>& keys, ThreadPool* pool);

  size_t size() const { return keys_.size(); }
  uint64_t key(uint32_t local) const { return keys_[local]; }
  const std::vector<uint64_t>& keys() const { return keys_; }
  uint32_t key_range_begin(size_t p) const { return part_begin_[p]; }

  // Get: the local id of key, or kNotFound.
  uint32_t Find(uint64_t key) const;
  // The keys this table shares with `other`, ordered by key range, then by this table's
  // local id (or other's, whichever key range is smaller: the order is fixed by the two key
  // sets), leaving out the local ids `skip` marks (skip[i] != 0; null: none; else it has
  // size() entries). pool may be null.
  void FindShared(const WorkingTable& other, SharedRows* out, ThreadPool* pool,
                  const uint8_t* skip = nullptr) const;
  // Copies, for every pair (here, there), row `there` of `from` into row `here`.
  void CopyRows(const WorkingTable& from, const SharedRows& pairs, ThreadPool* pool);

  RowBlock& rows() { return rows_; }
  const RowBlock& rows() const { return rows_; }
  size_t MemoryBytes() const;
  // At least MemoryBytes() + rows().MemoryBytes() of a table built on `keys` distinct keys
  // with rows of `row_bytes` (RowBlock::BytesPerRow): each key range's index has fewer than
  // 4 buckets per key, and at least 4.
  static size_t BytesBound(size_t keys, size_t row_bytes) {
    return keys * (8 + row_bytes) + (4 * keys + 4 * kKeyRanges) * (8 + 4);
  }

 private:
  struct KeyRange {
    uint64_t mask = 0;  // capacity - 1 (a power of two)
    size_t first = 0;   // its first bucket in bucket_key_ / bucket_id_
  };

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> part_begin_ = std::vector<uint32_t>(kKeyRanges + 1, 0);
  std::vector<KeyRange> parts_ = std::vector<KeyRange>(kKeyRanges);
  std::vector<uint64_t> bucket_key_;
  std::vector<uint32_t> bucket_id_;  // kNotFound: empty
  RowBlock rows_;
};

// The rows `table` takes from the tables `ahead` (ascending: the later, the newer) when it
// copies from each in turn and the newest wins (docs/pipeline.md, rule 3), each from the newest
// table that holds its key only: out[t] are the pairs (local id in table, local id in
// ahead[t]) to copy from ahead[t], ordered as FindShared orders them, and no local id is in
// two of them, so a row shared with several tables is looked up in the older ones and copied
// once. `claimed` ends sized to `table` with a 1 for every local id taken. pool may be null.
void SharedWithNewest(const WorkingTable& table, const std::vector<const WorkingTable*>& ahead,
                      std::vector<SharedRows>* out, std::vector<uint8_t>* claimed,
                      ThreadPool* pool);

}  // namespace ctrbox

#endif  // CTRBOX_WORKING_WORKING_TABLE_H_
