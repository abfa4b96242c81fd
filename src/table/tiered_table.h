// TieredTable: the sparse table as a memory-budgeted cache (MEM-PS), optionally over SSD
// parameter files (SSD-PS). Design and invariants: docs/storage.md.
//
// Without options.ssd.dir it is an in-memory table with no budget. With it, a background
// worker keeps the cache under options.memory_budget by writing least-frequently-used
// unpinned rows back to their group records, and compacts files that are more than half
// stale.
//
// Thread safety: all methods may be called concurrently (see SparseTable). Lock order:
// writer_mu_ -> a stripe (CacheStripe::Lock) -> the SSD store's file mutex; budget_mu_ ->
// error_mu_; worker_mu_ is never held while taking another lock. The annotations below are
// checked by the clang build (scripts/thread_safety).
#ifndef CTRBOX_TABLE_TIERED_TABLE_H_
#define CTRBOX_TABLE_TIERED_TABLE_H_

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "table/cache_stripe.h"
#include "table/sparse_table.h"
#include "table/ssd_store.h"
#include "util/dir_lock.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ctrbox {

struct TieredOptions {
  ValueLayout layout;
  uint32_t stripe_bits = 6;    // 2^stripe_bits cache stripes
  uint64_t memory_budget = 0;  // bytes; 0: unlimited (required without a disk tier)
  SsdOptions ssd;              // ssd.dir empty: no disk tier
  bool reopen = false;         // reopen the store a clean shutdown left in ssd.dir
  bool keep_store = false;     // train: close the store cleanly at the end instead of deleting it
  // train: seconds of the disk probe run on the SSD files at the job's end (util/disk_probe.h,
  // storage.disk_probe): < 0 auto (0.5 s when training took at least 10 s), 0 never.
  double disk_probe_seconds = -1;
  // The caller holds ssd.dir's DirLock (a train job, which also removes the files); otherwise
  // Open locks ssd.dir for the table's life (util/dir_lock.h).
  bool dir_held = false;
  int io_threads = 4;  // parallel record reads per pull while they come from memory
  // ... and while they come from the device (SsdStore::ReadsFromDevice), and per write-back
  // batch (whose reads go parallel only from the device: parallel_read_us). 0: io_threads.
  // Reads in flight pay where a device serves them (docs/storage.md, "Reads").
  int device_io_threads = 16;
  // A write-back batch reads its old records one at a time until they average more than this
  // many µs each (then they come from the device, not the page cache), and the rest
  // DeviceIoThreads() at a time. 0: in parallel from the second read on (tests).
  double parallel_read_us = 40;
  int evict_threads = 2;          // stripes evicted in parallel by the background worker
  double evict_start = 0.90;      // the worker starts evicting above this share of the budget
  double evict_stop = 0.80;       // ... and stops below this one
  double compact_stale = 0.5;     // only sealed files whose stale share exceeds this are compacted
  double compact_trigger = 1.75;  // compaction starts when file bytes exceed this x live bytes
  double compact_target = 1.5;    // ... and stops at this ratio
  uint32_t min_evict_rows = 64;
  // A group's delta is merged into its base once it would hold more than this share of the
  // base's rows (docs/storage.md, "Base and delta records").
  double delta_share = 0.2;
  // The share of memory_budget the SSD tier's Bloom filters may take (SsdOptions::bloom_budget).
  double bloom_share = 0.10;
  // Eviction ranks unpinned rows by their show counter halved for every this many pulls
  // (passes) since the row's last one (docs/storage.md, "The LFU chain"; 16 until 2026-12-04).
  double lfu_half_life = 64;
  // ... and a row that an eviction must write back (dirty, or never written) by its priority
  // times this: above 1, clean rows leave before dirty ones used as often (a clean eviction
  // writes nothing). 1: no preference (until 2026-12-04). The two defaults were chosen together
  // (docs/storage.md, "Clean rows first"): fewer loads and fewer writes than either alone.
  double dirty_weight = 4;
  // An eviction round spares the dirty victims of a group that has fewer than this many (a
  // group write, and the read of its old delta, for one row's memory) while clean rows ranked
  // next can leave in their place (docs/storage.md, "Lone victims spared"). 1: never.
  uint32_t min_group_victims = 2;

  int DeviceIoThreads() const { return device_io_threads > 0 ? device_io_threads : io_threads; }

  // OK, or InvalidArgument naming the bad key (table.stripe_bits, storage.*). Open calls it.
  Status Validate() const;

  // Budget planning (pass sizing, docs/storage.md). The bytes one resident row with an
  // embedding costs against the budget (its record, metadata and index entry):
  uint64_t ResidentRowBytes() const;
  // The budget's bytes that rows can use: the budget less the SSD tier's group index, which
  // is allocated when the table opens, the Bloom filters' share and the stripes' least index.
  // 0 without a budget.
  uint64_t RowBudgetBytes() const;
  // The Bloom filters' bytes at most (bloom_share of the budget; 0: no limit).
  uint64_t BloomBudgetBytes() const;
};

class TieredTable final : public SparseTable {
 public:
  static StatusOr<std::unique_ptr<TieredTable>> Open(Env* env, const TieredOptions& options);
  ~TieredTable() override;

  const ValueLayout& layout() const override { return options_.layout; }
  size_t num_stripes() const override { return stripes_.size(); }
  StatusOr<PinnedRows> Pull(const uint64_t* keys, size_t n, const CtrAccessor* accessor,
                            RowBlock* out, ThreadPool* pool,
                            const uint8_t* overwritten = nullptr) override;
  Status Push(PinnedRows* pins, const RowBlock& rows, ThreadPool* pool) override;
  Status Insert(const RowBlock& rows, ThreadPool* pool) override;
  StatusOr<uint64_t> Shrink(const CtrAccessor& accessor, ThreadPool* pool,
                            std::vector<uint64_t>* deleted = nullptr) override;
  Status ExportStripeBlocks(size_t s, size_t block_rows, RowBlock* buf,
                            const std::function<Status(RowBlock&)>& sink) override;
  TableStats Stats() const override;
  uint64_t CountKeys() const override;
  StorageStats Storage() const override;
  StatusOr<uint64_t> SparseDigest(ThreadPool* pool) override;
  Status Close() override;

  bool has_disk() const { return ssd_ != nullptr; }
  // Memory counted against the budget now.
  uint64_t UsedBytes() const;
  // The cache's part of UsedBytes by owner (takes every stripe's lock in turn).
  CacheMemory CacheBreakdown() const;

  // Maintenance on demand (tests and benchmarks; the worker does the same on its own):
  // write every dirty row and keep it resident; write and drop every unpinned row; compact
  // every sealed file whose stale share exceeds stale_fraction (0: any stale byte).
  Status FlushAll() EXCLUDES(writer_mu_);
  Status EvictAll() EXCLUDES(writer_mu_);
  Status Compact(double stale_fraction) EXCLUDES(writer_mu_);

 protected:
  void Release(PinnedRows* pins) override;

 private:
  struct Load;
  struct Counters;
  TieredTable(Env* env, TieredOptions options);

  size_t StripeOf(uint64_t key) const;
  // OK, or InvalidArgument if a key names no table of a multi-table layout.
  Status CheckKeys(const uint64_t* keys, size_t n) const;
  size_t StripeOfGroup(uint32_t g) const {
    return g >> (ssd_->group_bits() - options_.stripe_bits);
  }
  void GroupByStripe(const uint64_t* keys, size_t n, std::vector<uint32_t>* order,
                     std::vector<uint32_t>* begin) const;
  // Brings the use of stripe s (`stripe`) into the budget accounting.
  void Account(const CacheStripe& stripe, size_t s) REQUIRES(stripe);

  // Pull phases: the resident rows (and the loads the rest need), the loads read, the loaded
  // rows installed. Each takes the stripe's lock itself.
  void PullResident(size_t s, const uint64_t* keys, const uint32_t* idx, size_t n,
                    const CtrAccessor* accessor, const uint8_t* overwritten, RowBlock* out,
                    PinnedRows* pins, std::vector<Load>* loads);
  // The rows read for the loads of one pull: rows [first, first + idx.size()) of `rows` are a
  // load's (one block for the pull: a block per load cost a dozen allocations per group read).
  struct LoadedRows {
    RowBlock rows;
    std::vector<uint8_t> found;  // bytes, not bits: loads are read on several threads
  };
  Status InstallLoaded(size_t s, const uint64_t* keys, const CtrAccessor* accessor, RowBlock* out,
                       PinnedRows* pins, std::vector<Load>* loads, LoadedRows* disk);
  // A row for a key no tier holds: a default row (accessor set) or a cleared, unpinned one.
  void NewRow(CacheStripe& stripe, size_t s, size_t i, uint64_t key, const CtrAccessor* accessor,
              RowBlock* out, PinnedRows* pins) REQUIRES(stripe);
  // Reads the loads' rows into *loaded (sized here; each load's `first` set).
  Status ReadLoads(const uint64_t* keys, std::vector<Load*>* loads, LoadedRows* loaded);

  // A group being written back: its delta and, for a merge, its base and older delta.
  struct GroupRead {
    uint32_t group = 0;
    bool want_base = false;  // read the base and the older delta too (a merge is expected)
    // Read the delta: not when the write certainly starts a new delta (NewDeltaCertain),
    // which carries none of its rows.
    bool want_delta = true;
    uint64_t bytes = 0;      // the bytes of the records to read (batches are bounded by them)
    bool have_base = false;  // base and older read
    RecordView delta, older, base;
  };
  // A group's entry and the files of its records (kept alive while they are read). The stripe's
  // lock guards its groups' entries.
  struct GroupFiles {
    GroupEntry entry;
    std::shared_ptr<ParamFile> base_file, delta_file, older_file;
  };
  GroupFiles FilesOf(const CacheStripe& stripe, uint32_t group) const REQUIRES(stripe);
  // The read that writing `dirty_rows` rows of group g back needs: its delta, and its base and
  // older delta when the write is expected to merge them. REQUIRES: g's stripe lock.
  GroupRead GroupReadFor(uint32_t g, uint32_t dirty_rows) const;
  // Whether a write of group entry e starts a new delta whatever its dirty rows: its delta is
  // full already (the new one would hold at least its rows) and no older delta is there to
  // force a merge. Such a write moves the delta aside unread.
  bool NewDeltaCertain(const GroupEntry& e) const {
    return e.base.exists() && e.delta.exists() && !e.older.exists() &&
           DeltaFull(e.delta_rows, e.base_rows);
  }
  // Reads the records each GroupRead asks for, taking the stripe's lock for each entry.
  Status ReadGroups(const CacheStripe& stripe, std::vector<GroupRead>* reads) EXCLUDES(stripe);
  // The same, for a caller that holds the stripe's lock.
  Status ReadGroupsLocked(const CacheStripe& stripe, std::vector<GroupRead>* reads)
      REQUIRES(stripe);
  Status ReadGroupRecords(const GroupFiles& files, GroupRead* read) const;
  // Writes back the dirty resident rows of each group of `reads` (sorted by group; docs/storage.md,
  // "Base and delta records"): a new delta (the old delta's rows that were not rewritten, plus the
  // dirty rows); once that would pass delta_share of the base, the old delta becomes the older one
  // and the new delta holds the dirty rows alone; if there is an older delta already, all
  // merge into a new base. The rows written become clean. `rows` are the candidates
  // (RowsToWrite, taken once for all batches of a round: a scan of the stripe per batch cost
  // more than the write itself); each is looked up again and written if it still qualifies.
  // A row that qualifies only since stays dirty for a later write-back.
  using GroupKeys = std::vector<std::pair<uint32_t, uint64_t>>;
  Status WriteGroups(CacheStripe& stripe, std::vector<GroupRead>* reads, const GroupKeys& rows)
      REQUIRES(writer_mu_, stripe);
  // The rows a write-back of these groups (`reads` sorted by group) would write: resident, not
  // fresh, and dirty or not on disk yet; as (group, key), in group order.
  GroupKeys RowsToWrite(const CacheStripe& stripe, const std::vector<GroupRead>& reads) const
      REQUIRES(stripe);
  // Of `rows` (RowsToWrite's), those of the groups in `reads` that still qualify now, as
  // (group, node), sorted.
  static std::vector<std::pair<uint32_t, uint32_t>> StillToWrite(
      const CacheStripe& stripe, const std::vector<GroupRead>& reads, const GroupKeys& rows)
      REQUIRES(stripe);
  // Evicts unpinned rows of stripe s until it is at most `share` bytes (all of them if
  // share is 0 and `all`). Returns the rows dropped.
  StatusOr<uint64_t> EvictStripe(size_t s, uint64_t share, bool all) REQUIRES(writer_mu_);
  // Moves the live records of a sealed file to the current one.
  Status CompactFile(const std::shared_ptr<ParamFile>& file) REQUIRES(writer_mu_);
  // Writes every dirty row of stripe s and keeps it resident.
  Status FlushStripe(size_t s) REQUIRES(writer_mu_);

  // The background worker.
  void WorkerLoop() EXCLUDES(worker_mu_);
  Status Maintain() EXCLUDES(writer_mu_);
  // Lazy compaction (compact_trigger / compact_target).
  Status CompactIfOver() REQUIRES(writer_mu_);
  bool NeedsEviction() const;
  // Whether a group write whose delta would hold delta_rows is full: it starts a new delta
  // (or, with an older delta already there, merges all into the base).
  bool DeltaFull(uint64_t delta_rows, uint32_t base_rows) const {
    return static_cast<double>(delta_rows) > options_.delta_share * base_rows;
  }
  // The use the worker evicts down to, and the use above which it starts.
  uint64_t EvictTarget() const;
  uint64_t EvictStart() const;
  // Waits until the cache is within the budget. When a maintenance round finds nothing it
  // can evict, it waits for another pull's pins to be pushed or released if there are such
  // pulls (own_pulls: the caller's own pulls in flight), and fails otherwise.
  Status WaitForBudget(int own_pulls = 0) EXCLUDES(budget_mu_);
  // A pull's pins were pushed or released.
  void OnUnpinned() EXCLUDES(budget_mu_);
  Status error() const EXCLUDES(error_mu_);
  void SetError(const Status& s) EXCLUDES(error_mu_);

  Env* const env_;
  const TieredOptions options_;
  std::vector<float> age_factors_;  // 2^(-age / lfu_half_life) for the ages most rows have
  std::vector<std::unique_ptr<CacheStripe>> stripes_;  // the vector is immutable after Open
  std::vector<size_t> accounted_;  // bytes of each stripe last added to used_ (its stripe's lock)
  std::unique_ptr<DirLock> dir_lock_;  // before ssd_: released after the store's last write
  std::unique_ptr<SsdStore> ssd_;
  // The pulls' reads: io_pool_ while they come from memory, device_io_pool_ (null: io_pool_)
  // from the device. Their callers take turns (ThreadPool::ParallelFor).
  std::unique_ptr<ThreadPool> io_pool_;
  std::unique_ptr<ThreadPool> device_io_pool_;
  std::unique_ptr<ThreadPool> evict_pool_;  // used by the worker only
  // Reads a write-back batch's old records, DeviceIoThreads() at a time; its callers (the
  // evicting threads) take turns. Separate from io_pool_ so that pulls never wait behind a
  // write-back's batch.
  std::unique_ptr<ThreadPool> writeback_io_pool_;

  std::atomic<uint64_t> used_{0};  // cache bytes over all stripes
  // Bytes the last pull added to the cache: the worker keeps that much room free, so the next
  // pass's rows go in while the current one trains instead of waiting for evictions.
  std::atomic<uint64_t> headroom_{0};
  std::atomic<uint16_t> epoch_{0};  // pulls so far (wraps): the clock of frequency ageing
  std::atomic<uint64_t> peak_used_{0};
  std::unique_ptr<Counters> counters_;

  // Held by the worker for a maintenance round, and by Shrink, Close, FlushAll, EvictAll and
  // Compact: they exclude each other. Stripes are written back in parallel within a round.
  // Stats holds it too, so that no row moves between the tiers while they are counted.
  mutable Mutex writer_mu_;
  size_t next_evict_stripe_ GUARDED_BY(writer_mu_) = 0;

  Mutex worker_mu_;
  CondVar worker_cv_{&worker_mu_};
  bool stop_ GUARDED_BY(worker_mu_) = false;
  std::thread worker_;

  // Pulls waiting for the budget sleep on budget_cv_; the state they wait on is atomic.
  Mutex budget_mu_ ACQUIRED_BEFORE(error_mu_);
  CondVar budget_cv_{&budget_mu_};
  std::atomic<uint64_t> rounds_done_{0};       // eviction rounds finished
  std::atomic<uint64_t> last_stuck_round_{0};  // a round that found nothing to evict
  std::atomic<uint64_t> last_round_freed_{0};  // rows the last eviction round dropped
  std::atomic<int> live_pulls_{0};             // PinnedRows of this table not yet consumed
  std::atomic<uint64_t> unpin_events_{0};      // pushes and releases so far

  mutable Mutex error_mu_;
  Status error_ GUARDED_BY(error_mu_);  // sticky: the first background failure
  bool closed_ = false;                 // owned by the caller of Close
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_TIERED_TABLE_H_
