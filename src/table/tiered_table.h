// TieredTable: the sparse table as a memory-budgeted cache (MEM-PS), optionally over SSD
// parameter files (SSD-PS). Design and invariants: docs/storage.md.
//
// Without options.ssd.dir it is an in-memory table with no budget. With it, a background
// worker keeps the cache under options.memory_budget by writing least-frequently-used
// unpinned rows back to their group records, and compacts files that are more than half
// stale.
//
// Thread safety: all methods may be called concurrently (see SparseTable). Lock order:
// writer_mu_ -> a slot's mu -> the SSD store's file mutex; budget_mu_ and worker_mu_ are
// never held while taking another lock.
#ifndef CTRBOX_TABLE_TIERED_TABLE_H_
#define CTRBOX_TABLE_TIERED_TABLE_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "table/cache_slot.h"
#include "table/sparse_table.h"
#include "table/ssd_store.h"

namespace ctrbox {

struct TieredOptions {
  ValueLayout layout;
  uint32_t shard_bits = 6;     // 2^shard_bits cache slots
  uint64_t memory_budget = 0;  // bytes; 0: unlimited (required without a disk tier)
  SsdOptions ssd;              // ssd.dir empty: no disk tier
  bool reopen = false;         // reopen the store a clean shutdown left in ssd.dir
  bool keep_store = false;     // train: close the store cleanly at the end instead of deleting it
  int io_threads = 4;          // parallel record reads per pull
  int evict_threads = 2;       // slots evicted in parallel by the background worker
  double evict_start = 0.90;   // the worker starts evicting above this share of the budget
  double evict_stop = 0.80;    // ... and stops below this one
  double compact_stale = 0.5;  // only sealed files whose stale share exceeds this are compacted
  double compact_trigger = 1.75;  // compaction starts when file bytes exceed this x live bytes
  double compact_target = 1.5;    // ... and stops at this ratio
  uint32_t min_evict_rows = 64;

  // OK, or InvalidArgument naming the bad key (table.shard_bits, storage.*). Open calls it.
  Status Validate() const;
};

class TieredTable final : public SparseTable {
 public:
  static StatusOr<std::unique_ptr<TieredTable>> Open(Env* env, const TieredOptions& options);
  ~TieredTable() override;

  const ValueLayout& layout() const override { return options_.layout; }
  size_t num_shards() const override { return slots_.size(); }
  StatusOr<PinnedRows> Pull(const uint64_t* keys, size_t n, const CtrAccessor* accessor,
                            RowBlock* out, ThreadPool* pool) override;
  Status Push(PinnedRows* pins, const RowBlock& rows, ThreadPool* pool) override;
  Status Insert(const RowBlock& rows, ThreadPool* pool) override;
  StatusOr<uint64_t> Shrink(const CtrAccessor& accessor, ThreadPool* pool) override;
  Status ExportShard(size_t s, RowBlock* out) override;
  TableStats Stats() const override;
  StorageStats Storage() const override;
  StatusOr<uint64_t> SparseDigest(ThreadPool* pool) override;
  Status Close() override;

  bool has_disk() const { return ssd_ != nullptr; }
  // Memory counted against the budget now.
  uint64_t UsedBytes() const;

  // Maintenance on demand (tests and benchmarks; the worker does the same on its own):
  // write every dirty row and keep it resident; write and drop every unpinned row; compact
  // every sealed file whose stale share exceeds stale_fraction (0: any stale byte).
  Status FlushAll();
  Status EvictAll();
  Status Compact(double stale_fraction);

 protected:
  void Release(PinnedRows* pins) override;

 private:
  struct Load;
  struct Counters;
  TieredTable(Env* env, TieredOptions options);

  size_t SlotOf(uint64_t key) const;
  size_t SlotOfGroup(uint32_t g) const { return g >> (ssd_->group_bits() - options_.shard_bits); }
  void GroupBySlot(const uint64_t* keys, size_t n, std::vector<uint32_t>* order,
                   std::vector<uint32_t>* begin) const;
  // Brings the slot's use into the budget accounting. REQUIRES: the slot's lock.
  void Account(size_t s);

  // Pull phases. REQUIRES for the first and third: nothing locked.
  void PullResident(size_t s, const uint64_t* keys, const uint32_t* idx, size_t n,
                    const CtrAccessor* accessor, RowBlock* out, PinnedRows* pins,
                    std::vector<Load>* loads);
  Status InstallLoaded(size_t s, const uint64_t* keys, const CtrAccessor* accessor, RowBlock* out,
                       PinnedRows* pins, std::vector<Load>* loads);
  // A row for a key no tier holds: a default row (accessor set) or a cleared, unpinned one.
  void NewRow(size_t s, size_t i, uint64_t key, const CtrAccessor* accessor, RowBlock* out,
              PinnedRows* pins);
  Status ReadLoads(const uint64_t* keys, std::vector<Load*>* loads);

  // A group being written back: its delta and, for a merge, its base.
  struct GroupRead {
    uint32_t group = 0;
    bool want_base = false;  // read the base too (a merge is expected)
    bool have_base = false;
    RecordView delta, base;
  };
  // Reads the records each GroupRead asks for; `locked`: the caller holds the slot's lock.
  Status ReadGroups(size_t s, std::vector<GroupRead>* reads, bool locked);
  // Writes back the dirty resident rows of each group: a new delta (the old delta's rows that
  // were not rewritten, plus the dirty rows), or a merged base when the delta would pass a
  // third of the base. The rows written become clean. REQUIRES: writer_mu_ and the slot's
  // lock.
  Status WriteGroups(size_t s, std::vector<GroupRead>* reads);
  // Evicts unpinned rows of slot s until it is at most `share` bytes (all of them if
  // share is 0 and `all`). Returns the rows dropped. REQUIRES: writer_mu_.
  StatusOr<uint64_t> EvictSlot(size_t s, uint64_t share, bool all);
  // Moves the live records of a sealed file to the current one. REQUIRES: writer_mu_.
  Status CompactFile(const std::shared_ptr<ParamFile>& file);
  Status FlushSlot(size_t s);

  // The background worker.
  void WorkerLoop();
  Status Maintain();
  // Lazy compaction (compact_trigger / compact_target); the caller holds writer_mu_.
  Status CompactIfOver();
  bool NeedsEviction() const;
  // The use the worker evicts down to, and the use above which it starts.
  uint64_t EvictTarget() const;
  uint64_t EvictStart() const;
  // Waits until the cache is within the budget. When a maintenance round finds nothing it
  // can evict, it waits for another pull's pins to be pushed or released if there are such
  // pulls (own_pulls: the caller's own pulls in flight), and fails otherwise.
  Status WaitForBudget(int own_pulls = 0);
  // A pull's pins were pushed or released.
  void OnUnpinned();
  Status error() const;
  void SetError(const Status& s);

  Env* const env_;
  const TieredOptions options_;
  std::vector<std::unique_ptr<CacheSlot>> slots_;
  std::vector<size_t> accounted_;  // bytes of each slot last added to used_ (slot lock)
  std::unique_ptr<SsdStore> ssd_;
  std::unique_ptr<ThreadPool> io_pool_;
  std::mutex io_mu_;                        // one ParallelFor on io_pool_ at a time
  std::unique_ptr<ThreadPool> evict_pool_;  // used by the worker only

  std::atomic<uint64_t> used_{0};  // cache bytes over all slots
  // Bytes the last pull added to the cache: the worker keeps that much room free, so the next
  // pass's rows go in while the current one trains instead of waiting for evictions.
  std::atomic<uint64_t> headroom_{0};
  std::atomic<uint16_t> epoch_{0};  // pulls so far (wraps): the clock of frequency ageing
  std::atomic<uint64_t> peak_used_{0};
  std::unique_ptr<Counters> counters_;

  // Held by the worker for a maintenance round, and by Shrink, Close, FlushAll, EvictAll and
  // Compact: they exclude each other. Slots are written back in parallel within a round.
  // Stats holds it too, so that no row moves between the tiers while they are counted.
  mutable std::mutex writer_mu_;
  size_t next_evict_slot_ = 0;  // (writer_mu_)

  std::mutex worker_mu_;
  std::condition_variable worker_cv_;
  bool stop_ = false;  // (worker_mu_)
  std::thread worker_;

  std::mutex budget_mu_;
  std::condition_variable budget_cv_;
  std::atomic<uint64_t> rounds_done_{0};       // eviction rounds finished
  std::atomic<uint64_t> last_stuck_round_{0};  // a round that found nothing to evict
  std::atomic<uint64_t> last_round_freed_{0};  // rows the last eviction round dropped
  std::atomic<int> live_pulls_{0};             // PinnedRows of this table not yet consumed
  std::atomic<uint64_t> unpin_events_{0};      // pushes and releases so far

  mutable std::mutex error_mu_;
  Status error_;  // sticky: the first background failure (error_mu_)
  bool closed_ = false;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_TIERED_TABLE_H_
