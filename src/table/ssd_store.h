// SsdStore: the SSD-PS (docs/storage.md): append-only parameter files of group records, the
// in-memory group index, per-file Bloom filters, stale accounting, and the INDEX written at a
// clean shutdown.
//
// Thread safety: the group index entry of group g is guarded by the lock of the cache stripe
// that holds g (the caller's). Everything else may be called concurrently: appends go through
// an internal mutex, the counters through their own mutex, file lookups through the file
// table's shared lock (taken for writing only when a file comes or goes). WriteIndex needs
// quiescence.
#ifndef CTRBOX_TABLE_SSD_STORE_H_
#define CTRBOX_TABLE_SSD_STORE_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "table/param_file.h"
#include "table/read_path.h"
#include "table/value.h"
#include "util/env.h"
#include "util/hash.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ctrbox {

constexpr uint32_t kNoFile = 0xFFFFFFFFu;

// Where a record is.
struct RecordLoc {
  uint32_t file = kNoFile;
  uint32_t offset = 0;
  uint32_t length = 0;  // bytes, header included
  bool exists() const { return file != kNoFile; }
  bool operator==(const RecordLoc&) const = default;
};

// The two bits of a key in a GroupEntry's delta filter: from the low bits of Mix64(key) (the
// group is its top bits, the same for every key of the group).
inline uint64_t DeltaFilterBits(uint64_t key) {
  const uint64_t h = Mix64(key);
  return (uint64_t{1} << (h & 63)) | (uint64_t{1} << ((h >> 6) & 63));
}
inline uint64_t DeltaFilterOf(const std::vector<uint64_t>& keys) {
  uint64_t f = 0;
  for (uint64_t k : keys) f |= DeltaFilterBits(k);
  return f;
}

// A group's records (docs/storage.md): its rows on disk are the base's, overridden by the
// older delta's, overridden by the delta's (the newest). `unique_rows` counts distinct keys
// over all three, `unique_emb` those whose newest version has an embedding (so the store's
// totals are exact without reading records).
// Each delta has a 64-bit Bloom filter of its keys (DeltaFilterBits): a pull reads a delta
// only for a key it may hold. The file's filter cannot say that: a file holds many records of
// a group (its base, older deltas), so it says "maybe" for most of its keys.
struct GroupEntry {
  RecordLoc base, delta;
  uint32_t base_rows = 0, delta_rows = 0;
  uint32_t unique_rows = 0, unique_emb = 0;
  uint64_t delta_filter = 0;
  RecordLoc older;  // the older delta: a full delta that a write moved aside
  uint32_t older_rows = 0;
  uint64_t older_filter = 0;
  // The fingerprints of the first rows of the base's pieces 1..8 (docs/formats/param_file.md):
  // a pull reads only the pieces that may hold its keys.
  Fences base_fences{};
  bool operator==(const GroupEntry&) const = default;

  static bool FilterMayHold(const RecordLoc& loc, uint64_t filter, uint64_t key) {
    const uint64_t bits = DeltaFilterBits(key);
    return loc.exists() && (filter & bits) == bits;
  }
  bool DeltaMayHold(uint64_t key) const { return FilterMayHold(delta, delta_filter, key); }
  bool OlderMayHold(uint64_t key) const { return FilterMayHold(older, older_filter, key); }
  // The records, newest first (absent ones included).
  std::array<const RecordLoc*, 3> records() const { return {&delta, &older, &base}; }
};

enum class MappedReads : uint8_t { kOff, kOn, kAuto };

struct SsdOptions {
  std::string dir;
  uint32_t group_bits = 20;
  uint64_t file_bytes = 64ull << 20;
  uint64_t disk_budget = 0;  // 0: unlimited
  int bloom_bits_per_key = 8;
  // Bytes all files' Bloom filters may take (0: no limit). A new file's filter gets the bits
  // per key that the budget gives every key in the files (dead ones included), at most
  // bloom_bits_per_key and none below 2; older files keep theirs until compaction frees them,
  // so the filters may pass the budget by up to a quarter meanwhile (docs/storage.md).
  uint64_t bloom_budget = 0;
  // Record reads bypass the page cache (O_DIRECT, storage.direct_reads) where the file system
  // takes them; otherwise, and without it, they go through the cache with read-ahead off.
  bool direct_reads = false;
  // Record reads are copies out of a read-only mapping of each file (storage.mapped_reads,
  // Env::NewMappedRandomAccessFile) instead of preads: no system call per read, for files the
  // page cache holds. kAuto: while the reads come from memory (ReadPathChooser). direct_reads
  // comes first (kOn with it is a config error, kAuto yields). Where the Env maps no files:
  // preads.
  MappedReads mapped_reads = MappedReads::kOff;
  ReadPathChooser::Options read_path;  // how kAuto chooses
  DeviceWatch::Options device_watch;   // how ReadsFromDevice tells (tests)
  // Dead files kept to be written over by the next new ones (FileRecycler, docs/storage.md
  // "Recycled files"); 0: dead files are deleted.
  uint32_t recycle_files = 8;
  // The table's stripes (at most group_bits): the store keeps the distinct keys of each
  // stripe's groups (UniqueRowsOfStripe), so that counting them costs a sum per stripe.
  uint32_t stripe_bits = 0;
};

struct DiskStats {
  uint64_t files = 0, file_bytes = 0, live_bytes = 0;
  uint64_t rows = 0, emb_rows = 0, value_bytes = 0;  // distinct keys on disk (newest versions)
  uint64_t index_bytes = 0, bloom_bytes = 0;
  uint64_t records_read = 0, bytes_read = 0, records_written = 0, bytes_written = 0;
  uint64_t read_retries = 0;     // reads retried after an I/O error
  uint64_t files_recycled = 0;   // new files written over a dead one (SsdOptions::recycle_files)
  uint64_t free_file_bytes = 0;  // bytes of the dead files kept for that now
  // Nanoseconds the reading threads spent in the file reads (summed over threads: divided by a
  // run's seconds, the mean number of reads in flight; by records_read, the mean latency).
  uint64_t read_nanos = 0;
  bool direct_reads = false;  // the files are read with O_DIRECT (SsdOptions::direct_reads)
  bool mapped_reads = false;  // ... or may be read out of mappings (SsdOptions::mapped_reads)
  uint64_t mapped_records_read = 0;   // of records_read, those copied out of a mapping
  uint64_t read_path_switches = 0;    // mapped_reads auto: changes between mapping and pread
  uint64_t device_read_switches = 0;  // changes of ReadsFromDevice's answer
};

// What the INDEX of a cleanly closed store says (SsdStore::Inspect).
struct StoreSummary {
  ValueLayout layout;
  uint64_t keys = 0, keys_with_embedding = 0;
  uint64_t bytes_live = 0;  // encoded row bytes without keys
  uint64_t files = 0, file_bytes = 0, live_record_bytes = 0, records = 0;
  uint64_t groups = 0, groups_with_delta = 0;
  uint64_t index_bytes = 0, bloom_bytes = 0;
};

class SsdStore {
 public:
  ~SsdStore();
  // A new, empty store in options.dir (created if needed); parameter files and an INDEX left
  // there by an earlier store are deleted.
  static StatusOr<std::unique_ptr<SsdStore>> Create(Env* env, const SsdOptions& options,
                                                    const ValueLayout& layout);
  // The store a clean shutdown left in options.dir (its INDEX); the INDEX is then removed, so
  // a crash of the reopened store cannot be mistaken for a clean state.
  static StatusOr<std::unique_ptr<SsdStore>> Reopen(Env* env, const SsdOptions& options,
                                                    const ValueLayout& layout);

  // Deletes the parameter files and INDEX a store left in `dir` (a job's scratch space).
  static Status RemoveFiles(Env* env, const std::string& dir);
  // Describes the store a clean shutdown left in `dir` from its INDEX alone (nothing is
  // loaded or changed): files, bytes, live bytes, stale fraction, keys on disk, index bytes.
  static StatusOr<StoreSummary> Inspect(Env* env, const std::string& dir);

  uint32_t group_bits() const { return options_.group_bits; }
  uint32_t GroupOf(uint64_t key) const { return GroupOfKey(layout_, options_.group_bits, key); }

  // The records of group g. REQUIRES: g's stripe lock.
  const GroupEntry& entry(uint32_t g) const { return index_[g]; }
  // The distinct keys the records of stripe s's groups hold (the sum of their entries'
  // unique_rows), s < 2^min(stripe_bits, group_bits). REQUIRES: stripe s's lock.
  uint64_t UniqueRowsOfStripe(size_t s) const { return stripe_unique_rows_[s]; }
  // Whether the record at loc may hold key: false if there is no record, or the Bloom filter
  // of its file rules the key out.
  bool MayHold(const RecordLoc& loc, uint64_t key) const;
  // As MayHold, with the file already resolved (no lock taken).
  static bool MayHold(const ParamFile* file, uint64_t key) {
    return file != nullptr && file->bloom->MayContain(key);
  }
  // The file with this id (keeps it readable while held), or null.
  std::shared_ptr<ParamFile> File(uint32_t id) const;
  // Reads and verifies the record at loc of group g into *out (its buffers are reused).
  Status ReadRecord(const ParamFile& file, const RecordLoc& loc, uint32_t g, RecordView* out) const;
  // Reads and verifies pieces [first, last] of the record at loc into *out: its rows there.
  Status ReadPieces(const ParamFile& file, const RecordLoc& loc, uint32_t g, PieceRange pieces,
                    RecordView* out) const;
  // The page size of the files (PageBytes of the layout).
  size_t page_bytes() const { return page_; }
  // Reads the record at loc (any thread; the file is kept alive meanwhile); an absent loc
  // gives an empty view.
  Status Read(const RecordLoc& loc, uint32_t g, RecordView* out) const;
  // Bytes appended to a file so far.
  uint64_t FileBytes(const ParamFile& file) const;

  // ---- writer side (serialised by the caller) ----
  // Appends the record built in *record (laid out for where it goes); *loc is where it went,
  // *fences (if not null) its fences for a base entry. Fails with ResourceExhausted beyond the
  // disk budget. Not readable until FlushAppends().
  Status Append(RecordBuilder* record, RecordLoc* loc, Fences* fences = nullptr);
  // Hands appended records to the operating system, making them readable.
  Status FlushAppends();
  // Sets group g's entry; records it no longer names become stale, and a file left with no
  // live record is deleted. REQUIRES: g's stripe lock; appends flushed.
  void Replace(uint32_t g, const GroupEntry& entry);
  // Sealed files whose stale bytes exceed `stale_fraction` of their records (any stale byte
  // if stale_fraction is 0), most stale first.
  std::vector<std::shared_ptr<ParamFile>> CompactionCandidates(double stale_fraction) const;
  // Writes the INDEX. REQUIRES: every appended record flushed and referenced as intended.
  Status WriteIndex();

  DiskStats Stats() const;
  // Whether the record reads come from the device now: O_DIRECT ones always; otherwise as the
  // latency of the last window of reads says (DeviceWatch).
  bool ReadsFromDevice() const {
    return direct_.load(std::memory_order_relaxed) == 1 || device_.device();
  }
  // Memory held by the group index and the Bloom filters (counted in the memory budget).
  uint64_t MemoryBytes() const;
  const SsdOptions& options() const { return options_; }

 private:
  SsdStore(Env* env, SsdOptions options, ValueLayout layout);
  Status Roll() REQUIRES(append_mu_) EXCLUDES(counts_mu_, files_mu_);
  // Opens file->reader (O_DIRECT as options_.direct_reads asks and the file system allows,
  // else pread) and, unless the reads are O_DIRECT ones, file->mapped as options_.mapped_reads
  // asks and the Env allows (kOn: a refusal is logged once); notes which in direct_ and mapped_.
  Status OpenReader(ParamFile* file);
  // The reader a record read of `file` goes through now (*mapped: its mapping), and the
  // accounting of that read once it took `nanos` (bytes: what it read; 0 if it failed).
  const RandomAccessFile& ReaderFor(const ParamFile& file, bool* mapped) const;
  void Counted(bool mapped, uint64_t nanos, uint64_t bytes) const;
  // Reads bytes [begin, begin + n) of `file` into *out and parses them with parse(out): in
  // place where the reader is a mapping that holds them (RecordView::SetMapped: no copy; the
  // read's time is then that of a load from each of its pages), else into out->bytes. Errors
  // name the read by where().
  template <typename Parse, typename Where>
  Status ReadView(const ParamFile& file, uint64_t begin, size_t n, RecordView* out, Parse parse,
                  Where where) const;
  Status ReserveSpace(uint64_t bytes) EXCLUDES(counts_mu_);
  // File counters of a record becoming live (+1) or stale (-1). A file left with no record is
  // marked obsolete and its id added to *dropped, for DropFiles.
  void Count(const RecordLoc& loc, int sign, std::vector<uint32_t>* dropped) REQUIRES(counts_mu_);
  // Removes the dropped files from the file table.
  void DropFiles(const std::vector<uint32_t>& dropped) EXCLUDES(files_mu_);

  Env* const env_;
  const SsdOptions options_;
  const ValueLayout layout_;
  const size_t page_;  // PageBytes(layout_)
  // Whether O_DIRECT reads were asked and taken: -1 not yet known (no file opened), 0 no, 1 yes.
  std::atomic<int> direct_{-1};
  std::atomic<int> mapped_{-1};             // the same for mapped reads
  mutable ReadPathChooser read_path_;       // mapped or pread, with MappedReads::kAuto
  mutable DeviceWatch device_;              // every read's latency: ReadsFromDevice
  std::vector<GroupEntry> index_;           // by group; each entry guarded by its stripe's lock
  std::shared_ptr<FileRecycler> recycler_;  // null without options_.recycle_files

  // Appends take append_mu_, then counts_mu_ to publish what they wrote. The file table has
  // its own lock, taken for writing only when a file is added or dropped (a few times per
  // file), so that the readers' lookups (File, several per group read) never wait behind the
  // counters of every append and index change.
  Mutex append_mu_ ACQUIRED_BEFORE(counts_mu_);
  std::shared_ptr<ParamFile> current_ GUARDED_BY(append_mu_);
  std::unique_ptr<WritableFile> writer_ GUARDED_BY(append_mu_);
  uint32_t next_file_id_ GUARDED_BY(append_mu_) = 1;
  uint64_t last_file_keys_ GUARDED_BY(append_mu_) = 0;  // filter keys of the last full file

  // The counters: the store's, and ParamFile's (param_file.h).
  mutable Mutex counts_mu_ ACQUIRED_BEFORE(files_mu_);
  uint64_t file_bytes_ GUARDED_BY(counts_mu_) = 0;   // sum over live files
  uint64_t filter_keys_ GUARDED_BY(counts_mu_) = 0;  // ParamFile::filter_keys over live files
  uint64_t live_bytes_ GUARDED_BY(counts_mu_) = 0, live_records_ GUARDED_BY(counts_mu_) = 0;
  // Distinct rows on disk and those with an embedding, per table of the layout (one without
  // tables): a group holds one table's rows (GroupOfKey).
  uint64_t unique_rows_[kMaxTables] GUARDED_BY(counts_mu_) = {};
  uint64_t unique_emb_[kMaxTables] GUARDED_BY(counts_mu_) = {};
  const ParamFile* current_file_ GUARDED_BY(counts_mu_) = nullptr;  // the file appends go to
  // The files the counters know, by id (owned by files_); null once dropped.
  std::vector<ParamFile*> counted_ GUARDED_BY(counts_mu_);
  // Bytes of the live files' Bloom filters; written under counts_mu_, read without a lock by
  // MemoryBytes (the memory budget's check).
  std::atomic<uint64_t> bloom_bytes_{0};

  // Per stripe: the sum of its groups' unique_rows; written by Replace (and Reopen) under the
  // stripe's lock (the table's, which the store does not see), read under it.
  std::vector<uint64_t> stripe_unique_rows_;
  uint32_t StripeOfGroup(uint32_t g) const {
    return g >> (options_.group_bits - std::min(options_.stripe_bits, options_.group_bits));
  }

  // The file table, by id; null once dropped.
  mutable SharedMutex files_mu_;
  std::vector<std::shared_ptr<ParamFile>> files_ GUARDED_BY(files_mu_);

  // Written by every read: off the file table's line (File, read by every read, too).
  alignas(64) mutable std::atomic<uint64_t> records_read_{0};
  mutable std::atomic<uint64_t> bytes_read_{0}, read_retries_{0}, read_nanos_{0};
  mutable std::atomic<uint64_t> mapped_records_read_{0};
  std::atomic<uint64_t> records_written_{0}, bytes_written_{0}, files_recycled_{0};
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_SSD_STORE_H_
