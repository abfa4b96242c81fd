// SparseTable: the sparse parameter store seen by the trainer (docs/sparse_table.md).
//
// Pull makes a pass's rows available and pins them; Push writes the trained rows back and
// releases the pins (AIBox §4.3). The implementation is TieredTable (tiered_table.h): a
// memory-budgeted cache, optionally over SSD parameter files.
//
// Thread safety: every method may be called concurrently with every other.
#ifndef CTRBOX_TABLE_SPARSE_TABLE_H_
#define CTRBOX_TABLE_SPARSE_TABLE_H_

#include <cstdint>
#include <functional>
#include <string>
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
  // Per pulled key, in pull order: (stripe, node), or (kNotPinned, _) for a key that was not
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

// Storage counters for reports (reports turn them into JSON: jobs/train_report.h).
// Counters count since the table was opened; the byte and key figures are current.
// The table's counters, each declared once: the StorageStats fields, the tiered table's
// atomic counters, the copy between them, DebugString and the train report's "storage" object
// and pass lines (jobs/train_report.cc) are all made from these lists.
// X(name, in_pass_lines): in_pass_lines, also per pass (as differences) in the metrics file.
//
// Kept by every table (pulled_keys: train, eval and predict; hits: found in the cache;
// loaded_from_ssd: from the SSD tier; new_keys: in no tier, inserted with a default row;
// lookup_misses: in no tier, looked up without insertion).
#define CTRBOX_CACHE_COUNTERS(X) \
  X(pulled_keys, true)           \
  X(hits, true)                  \
  X(loaded_from_ssd, true)       \
  X(new_keys, true)              \
  X(lookup_misses, false)
// Kept by the tiered table for its SSD tier: keys whose group has no record, reads a Bloom
// filter saved and its false positives; group writes, and of them those that moved a full
// delta aside as the older delta and those that merged a group's records into a new base
// (docs/storage.md); the bytes of the records written by kind (merged bases, a group's first
// base, deltas that carry the old delta's rows, new deltas of dirty rows alone, bases a shrink
// rewrote: with compaction_bytes and the files' headers they are ssd_bytes_written) and the
// rows group writes carried over from old records without their being dirty; dirty rows
// written back and their encoded bytes (ssd_bytes_written / persisted_bytes is the write
// amplification of write-back and compaction together); evictions, stripes whose records were moved
// into compact arenas (CacheStripe::CompactArenas), stripes that gave back embedding slabs and
// those slabs' bytes (CacheStripe::ShrinkArenas), and compactions with the bytes they wrote. Where
// a pull's time goes (nanoseconds, summed over the threads): waiting for the write-back to bring
// the cache within the budget, and the write-back's own record reads (the groups' old records it
// merges with the dirty rows; counted in records_read and ssd_read_nanos too), and the write-back
// batches whose reads were slow enough to be finished in parallel
// (TieredOptions::parallel_read_us); the pulls whose reads came from the device, read
// storage.device_io_threads at a time; the dirty victims an eviction round kept because their group
// had too few (storage.min_group_victims).
#define CTRBOX_SSD_COUNTERS(X)         \
  X(no_record, false)                  \
  X(bloom_prunes, true)                \
  X(bloom_false_positives, false)      \
  X(groups_written, false)             \
  X(new_deltas, false)                 \
  X(merges, false)                     \
  X(merge_bytes, false)                \
  X(first_base_bytes, false)           \
  X(delta_bytes, false)                \
  X(new_delta_bytes, false)            \
  X(kept_rows, false)                  \
  X(shrink_bytes, false)               \
  X(rows_persisted, false)             \
  X(persisted_bytes, false)            \
  X(evicted_dirty, true)               \
  X(evicted_clean, true)               \
  X(dropped_fresh, false)              \
  X(evict_rounds, false)               \
  X(arena_compactions, false)          \
  X(arena_shrinks, false)              \
  X(arena_freed_bytes, false)          \
  X(compactions, true)                 \
  X(compaction_bytes, false)           \
  X(budget_wait_nanos, true)           \
  X(writeback_reads, false)            \
  X(writeback_read_nanos, true)        \
  X(parallel_writeback_batches, false) \
  X(device_pulls, true)                \
  X(spared_victims, false)
// Kept by the SSD store (its DiskStats): records and bytes read and written, read retries,
// the reading threads' nanoseconds in the file reads (summed over the threads).
#define CTRBOX_DISK_COUNTERS(X) \
  X(records_read, false)        \
  X(read_retries, false)        \
  X(ssd_bytes_read, true)       \
  X(ssd_read_nanos, true)       \
  X(records_written, false)     \
  X(ssd_bytes_written, true)    \
  X(files_recycled, false)      \
  X(mapped_records_read, true)  \
  X(read_path_switches, false)  \
  X(device_read_switches, false)

struct StorageStats {
  bool has_disk = false;           // the SSD tier is on (the disk fields below are zero if not)
  uint64_t memory_budget = 0;      // bytes (0: unlimited)
  uint64_t memory_bytes = 0;       // the cache's use counted against the budget now
  uint64_t peak_memory_bytes = 0;  // ... its peak
  // memory_bytes by owner now: the cached rows' records, their index and metadata (the rest
  // is the SSD tier's group index_bytes and bloom_bytes).
  uint64_t cache_row_bytes = 0, cache_index_bytes = 0, cache_meta_bytes = 0;
#define CTRBOX_STORAGE_FIELD(name, in_pass_lines) uint64_t name = 0;
  CTRBOX_CACHE_COUNTERS(CTRBOX_STORAGE_FIELD)
  // The SSD tier.
  uint32_t group_bits = 0;
  bool direct_reads = false;  // the SSD files are read with O_DIRECT (storage.direct_reads)
  bool mapped_reads = false;  // ... or may be read out of mappings (storage.mapped_reads)
  CTRBOX_SSD_COUNTERS(CTRBOX_STORAGE_FIELD)
  CTRBOX_DISK_COUNTERS(CTRBOX_STORAGE_FIELD)
#undef CTRBOX_STORAGE_FIELD
  uint64_t files = 0, file_bytes = 0, live_bytes = 0, keys_on_disk = 0;
  uint64_t free_file_bytes = 0;  // dead files kept to be written over (not in file_bytes)
  uint64_t index_bytes = 0, bloom_bytes = 0;

  // hits / (hits + loaded_from_ssd); 1 when nothing was pulled from either.
  double hit_rate() const {
    return hits + loaded_from_ssd
               ? static_cast<double>(hits) / static_cast<double>(hits + loaded_from_ssd)
               : 1.0;
  }
  // "name=value ..." of the counters, for test failures and debug logs.
  std::string DebugString() const;
  // The share of the file bytes no live record refers to.
  double stale_fraction() const {
    return file_bytes ? 1.0 - static_cast<double>(live_bytes) / static_cast<double>(file_bytes)
                      : 0.0;
  }
};

class SparseTable {
 public:
  virtual ~SparseTable() = default;

  virtual const ValueLayout& layout() const = 0;
  virtual size_t num_stripes() const = 0;

  // Sets out to the n rows of keys[0..n) (distinct keys) and pins them. An absent key gets
  // accessor->InitRow and is inserted (train), or, with a null accessor, a cleared row that
  // is not inserted (eval, predict). Fails on an I/O or corruption error, or when the pinned
  // rows do not fit the memory budget.
  // `overwritten` (may be null; n bytes): overwritten[i] != 0 says the caller replaces row i
  // whole before anything reads it (a key a pass still in flight holds, whose newer value the
  // pipeline copies in at train start: docs/pipeline.md). Such a row found in memory is pinned
  // but not copied: out's row i gets only its key. A row loaded or created is filled as usual.
  virtual StatusOr<PinnedRows> Pull(const uint64_t* keys, size_t n, const CtrAccessor* accessor,
                                    RowBlock* out, ThreadPool* pool,
                                    const uint8_t* overwritten = nullptr) = 0;
  // Stores `rows` (row i is the i-th pulled key) and releases the pins.
  // REQUIRES: rows are the pulled keys in pull order.
  virtual Status Push(PinnedRows* pins, const RowBlock& rows, ThreadPool* pool) = 0;
  // Stores rows without pins (loading a saved model).
  virtual Status Insert(const RowBlock& rows, ThreadPool* pool) = 0;
  // Applies accessor.ShrinkRow to every row in every tier, deleting those it rejects; returns
  // how many it deleted and, with `deleted` set, appends their keys to it (in no order).
  virtual StatusOr<uint64_t> Shrink(const CtrAccessor& accessor, ThreadPool* pool,
                                    std::vector<uint64_t>* deleted = nullptr) = 0;
  // Every row of stripe s (all tiers), in no particular order, handed to `sink` in *buf in
  // blocks of exactly `block_rows` rows (the stripe's last block shorter; no call for an
  // empty stripe), so that exporting holds one block whatever the stripe holds (a stripe of a
  // model far larger than memory holds its 1/64th). The sink's error stops the export and is
  // returned. The sink runs while the table holds the stripe (a tiered table: its lock), so it
  // must not call the table, and the stripe's pulls and evictions wait for it.
  // REQUIRES: block_rows > 0.
  virtual Status ExportStripeBlocks(size_t s, size_t block_rows, RowBlock* buf,
                                    const std::function<Status(RowBlock&)>& sink) = 0;
  // The whole stripe at once in *out (the same rows in the same order): for callers that sort
  // a stripe, and tests.
  Status ExportStripe(size_t s, RowBlock* out);
  // Counts over all tiers, each row counted once in its newest version. O(rows in memory).
  virtual TableStats Stats() const = 0;
  // Stats().keys without scanning the rows in memory or stopping the disk tier's maintenance
  // (O(stripes + SSD groups)): the per-pass lines use it.
  virtual uint64_t CountKeys() const = 0;
  // Storage counters (cache hits, SSD I/O, compactions...) for reports.
  virtual StorageStats Storage() const = 0;
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
