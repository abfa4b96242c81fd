// SSD-PS parameter files (docs/formats/param_file.md): the file header, group records and
// the in-memory handle of one file.
#ifndef CTRBOX_TABLE_PARAM_FILE_H_
#define CTRBOX_TABLE_PARAM_FILE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "table/bloom.h"
#include "table/value.h"
#include "util/env.h"
#include "util/hash.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ctrbox {

// The SSD group of a key (docs/storage.md): the top group_bits bits of Mix64(key). In a
// multi-table layout the lowest TableGroupBits of them are the key's table instead, so that
// every group holds the rows of one table (and its counts give the table's bytes).
inline uint32_t TableGroupBits(const ValueLayout& l) {
  uint32_t b = 0;
  while ((1u << b) < l.tables) ++b;
  return b;
}
inline uint32_t GroupOfKey(const ValueLayout& l, uint32_t group_bits, uint64_t key) {
  const uint32_t tb = TableGroupBits(l);
  if (tb == 0) return static_cast<uint32_t>(Mix64(key) >> (64 - group_bits));
  return static_cast<uint32_t>((Mix64(key) >> (64 - group_bits + tb)) << tb) | l.TableOf(key);
}
// The table whose rows group g holds.
inline uint32_t TableOfGroup(const ValueLayout& l, uint32_t g) {
  return g & ((1u << TableGroupBits(l)) - 1);
}

constexpr size_t kParamFileHeaderBytes = 40;
constexpr size_t kRecordHeaderBytes = 20;

// Paged records (docs/formats/param_file.md, version 3). A record's bytes are cut into
// *pieces* at the multiples of the page size in its file (piece 0 starts with the record
// header); every piece but a short first one starts with a segment header whose CRC covers it,
// so that a pull can read and verify one page of a base alone. Rows are in fingerprint order
// and never cross a page boundary.
constexpr size_t kSegmentHeaderBytes = 16;
// The group index keeps, per base, the fingerprints of the first rows of its pieces 1..8
// (pieces past the 8th are read together).
constexpr size_t kBaseFences = 8;
using Fences = std::array<uint16_t, kBaseFences>;
inline uint16_t RowFingerprint(uint64_t key) { return static_cast<uint16_t>(Mix64(key)); }
// The page size of a layout's files: 4 KiB, or the multiple of it that holds a segment header
// and the widest row.
size_t PageBytes(const ValueLayout& l);
// The pieces of the record at [offset, offset + length) of its file.
size_t RecordPieces(uint64_t offset, uint64_t length, size_t page);
// Where piece i of that record starts and ends (file offsets).
struct PieceSpan {
  uint64_t begin = 0, end = 0;
};
PieceSpan RecordPiece(uint64_t offset, uint64_t length, size_t page, size_t i);
// The pieces [first, last] of a base with `pieces` pieces and these fences that may hold a key
// of fingerprint fp.
struct PieceRange {
  size_t first = 0, last = 0;
};
PieceRange PiecesFor(const Fences& fences, size_t pieces, uint16_t fp);

// The header of a parameter file with id `file_id` for rows of `layout`.
std::string EncodeParamFileHeader(uint32_t file_id, const ValueLayout& layout);
Status CheckParamFileHeader(const std::string& path, const char* p, size_t n, uint32_t file_id,
                            const ValueLayout& layout);

// A group record's rows in memory, still encoded (the canonical row encoding), read whole or
// in part (pieces of a base) and verified. Merging records copies rows byte for byte; only the
// rows a pull wants are decoded.
struct RecordView {
  uint32_t group = 0;
  std::string bytes;              // what was read: the whole record, or some of its pieces
  std::vector<uint32_t> offsets;  // per row, where it starts in data()
  std::vector<uint32_t> ends;     // per row, where it ends
  std::vector<uint64_t> keys;

  // The bytes parsed and read: `bytes`, or, once SetMapped, bytes the view does not own (a
  // span of a file's mapping, which SsdStore reads without copying it), kept valid by `keep`
  // (the file, so its mapping) until UseBytes goes back to `bytes` or the view goes.
  std::string_view data() const { return mapped_.data() != nullptr ? mapped_ : bytes; }
  void SetMapped(const char* p, size_t n, std::shared_ptr<const void> keep) {
    mapped_ = std::string_view(p, n);
    keep_ = std::move(keep);
  }
  void UseBytes() {
    mapped_ = {};
    keep_.reset();
  }

  size_t rows() const { return keys.size(); }
  std::string_view row(size_t i) const { return data().substr(offsets[i], ends[i] - offsets[i]); }
  void Clear() {
    offsets.clear();
    ends.clear();
    keys.clear();
  }
  // Verifies and parses the whole record held in data(), read from file offset `offset` of a
  // file with pages of `page` bytes: its header, every segment's CRC, and that every row has
  // the layout, belongs to group g, and the rows are in fingerprint order. Errors do not say
  // where the record is: the caller prefixes that.
  Status Parse(const ValueLayout& layout, uint32_t group_bits, uint32_t g, uint64_t offset,
               size_t page);
  // The same for pieces [first, last] of a record at [offset, offset + length) held in
  // data() (read from the start of piece `first`): their segments are verified and their
  // rows parsed; the record header too if piece 0 is among them.
  Status ParsePieces(const ValueLayout& layout, uint32_t group_bits, uint32_t g, uint64_t offset,
                     uint64_t length, size_t page, PieceRange pieces);
  // Decodes row i into row r of out.
  Status DecodeRow(size_t i, RowBlock* out, size_t r) const;

 private:
  // Parses the segment at data()[at, at + n), appending its rows.
  Status ParseSegment(const ValueLayout& layout, uint32_t group_bits, uint32_t g, size_t at,
                      size_t n, uint32_t* rows);

  std::string_view mapped_;
  std::shared_ptr<const void> keep_;
};

// Builds a record: rows from views (bytes copied) or from RowBlocks (encoded), laid out in
// pages for the file offset it is appended at (Lay).
class RecordBuilder {
 public:
  void Reset(uint32_t group);
  void AddEncoded(std::string_view row, uint64_t key);
  void AddRow(const RowBlock& rows, size_t i);
  // Adds a row the caller encodes: encode(&bytes) appends the row's canonical encoding and
  // returns whether it has an embedding (CacheStripe::EncodeRow).
  template <typename Encode>
  void AddEncodedBy(uint64_t key, Encode encode) {
    keys_.push_back(key);
    emb_rows_ += encode(&rows_) ? 1 : 0;
    ends_.push_back(static_cast<uint32_t>(rows_.size()));
    ordered_ = false;
  }
  size_t rows() const { return keys_.size(); }
  uint32_t group() const { return group_; }
  // Rows added with an embedding.
  uint32_t emb_rows() const { return emb_rows_; }
  // The keys, in the order added.
  const std::vector<uint64_t>& keys() const { return keys_; }
  // Puts the rows in fingerprint order for Lay (it does so itself if not done since the last
  // row was added): callable before the record's place is known, outside the appender's lock.
  void Order();
  // The record's bytes when it starts at file offset `offset` of a file with pages of `page`
  // bytes: the header, then the rows in fingerprint order in segments, one per piece (CRCs
  // filled in). *fences (if not null): the fingerprints of the first rows of pieces 1..8.
  std::string_view Lay(uint64_t offset, size_t page, Fences* fences);

 private:
  uint32_t group_ = 0;
  std::string rows_;            // the rows, back to back in the order added
  std::vector<uint32_t> ends_;  // where each ends in rows_
  std::vector<uint64_t> keys_;
  uint32_t emb_rows_ = 0;
  std::vector<uint32_t> order_;       // the rows in fingerprint order (Order)
  std::vector<uint64_t> sort_words_;  // Order's scratch: fingerprint << 32 | row
  bool ordered_ = false;              // order_ holds every row added
  std::string record_;                // Lay's result
};

// Dead parameter files kept to be written over (docs/storage.md, "Recycled files"). A file
// whose records are all stale is, when its last reader lets go, renamed into this pool instead
// of being deleted, and the store's next new file is written over it in place
// (Env::ReuseWritableFile): the page cache's pages of the dead file take the new bytes, where a
// new file's pages are allocated (on a VM that reports free pages to its host, faulted in from
// the host) and the dead file's freed. At most `max_files` are kept; the rest are deleted.
// Thread safety: thread-safe.
class FileRecycler {
 public:
  FileRecycler(Env* env, std::string dir, size_t max_files)
      : env_(env), dir_(std::move(dir)), max_(max_files) {}
  // Takes the dead file at `path` (`bytes` long) into the pool under a name of its own; false
  // when the pool is full or closed, or the rename failed: the caller deletes the file.
  bool Offer(const std::string& path, uint64_t bytes) EXCLUDES(mu_);
  // A pooled file to write over, out of the pool (the one pooled last: the likeliest to be in
  // the page cache); empty if there is none.
  std::string Take() EXCLUDES(mu_);
  // Deletes the pooled files; with `close`, the pool takes no more.
  void Drain(bool close) EXCLUDES(mu_);
  uint64_t bytes() const EXCLUDES(mu_);
  // Whether `name` (a file name, no directory) is a pooled file's.
  static bool IsPoolName(const std::string& name);

 private:
  Env* const env_;
  const std::string dir_;
  const size_t max_;
  mutable Mutex mu_;
  std::vector<std::pair<std::string, uint64_t>> files_ GUARDED_BY(mu_);  // (path, bytes)
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t next_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
};

// One parameter file. Its counters are guarded by the owning store's counter mutex; the reader
// and the Bloom filter may be used concurrently. A file marked obsolete is unlinked (or handed
// to the recycler, if there is one) when the last reference to it goes.
struct ParamFile : std::enable_shared_from_this<ParamFile> {
  ParamFile(Env* env, uint32_t id, std::string path, std::unique_ptr<BloomFilter> bloom)
      : env(env), id(id), path(std::move(path)), bloom(std::move(bloom)) {}
  ~ParamFile();

  Env* const env;
  const uint32_t id;
  const std::string path;
  std::unique_ptr<RandomAccessFile> reader;  // set once the header is written
  // A read-only mapping of the file, where reads may copy out of one (SsdOptions::mapped_reads
  // on or auto, and the Env maps files); null otherwise.
  std::unique_ptr<RandomAccessFile> mapped;
  std::unique_ptr<BloomFilter> bloom;
  std::shared_ptr<FileRecycler> recycler;  // takes the file once it is obsolete (may be null)
  uint64_t bytes = 0;                      // appended so far, header included
  uint64_t live_bytes = 0;                 // bytes of the records the group index points at
  uint32_t live_records = 0;
  // Records appended and not yet in the group index (a write-back or compaction between its
  // Append and its Replace; or one that failed in between). A file is dropped only when it
  // has neither live nor pending records: a write-back that rolls over to a new file must not
  // lose the file holding its first records.
  uint32_t pending_records = 0;
  // Keys added to the Bloom filter (those of dead records included): what sizes the next
  // file's filter (SsdStore::Roll).
  uint64_t filter_keys = 0;
  bool obsolete = false;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_PARAM_FILE_H_
