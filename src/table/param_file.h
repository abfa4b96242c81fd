// SSD-PS parameter files (docs/formats/param_file.md): the file header, group records and
// the in-memory handle of one file.
#ifndef CTRBOX_TABLE_PARAM_FILE_H_
#define CTRBOX_TABLE_PARAM_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "table/bloom.h"
#include "table/value.h"
#include "util/env.h"
#include "util/hash.h"

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

// The header of a parameter file with id `file_id` for rows of `layout`.
std::string EncodeParamFileHeader(uint32_t file_id, const ValueLayout& layout);
Status CheckParamFileHeader(const std::string& path, const char* p, size_t n, uint32_t file_id,
                            const ValueLayout& layout);

// The fields of a record header.
struct RecordHeader {
  uint32_t group = 0, rows = 0, payload_bytes = 0;
};

// Parses and verifies the record in [p, p + n) (header and CRC). Errors do not say where the
// record is: the caller prefixes that.
StatusOr<RecordHeader> CheckRecord(const char* p, size_t n);

// A verified group record in memory, its rows still encoded (the canonical row encoding).
// Merging records copies rows byte for byte; only the rows a pull wants are decoded.
struct RecordView {
  uint32_t group = 0;
  std::string bytes;              // the whole record, header included
  std::vector<uint32_t> offsets;  // rows() + 1 offsets into bytes: where each row starts
  std::vector<uint64_t> keys;

  size_t rows() const { return keys.size(); }
  std::string_view row(size_t i) const {
    return std::string_view(bytes).substr(offsets[i], offsets[i + 1] - offsets[i]);
  }
  // Parses a verified record held in `bytes`, checking that every row has the layout and
  // belongs to the group. Errors do not say where the record is: the caller prefixes that.
  Status Parse(const ValueLayout& layout, uint32_t group_bits);
  // Decodes row i into row r of out.
  Status DecodeRow(size_t i, RowBlock* out, size_t r) const;
};

// Builds a record: rows from views (bytes copied) or from RowBlocks (encoded).
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
    emb_rows_ += encode(&bytes_) ? 1 : 0;
  }
  size_t rows() const { return keys_.size(); }
  // Rows added with an embedding.
  uint32_t emb_rows() const { return emb_rows_; }
  const std::vector<uint64_t>& keys() const { return keys_; }
  // The finished record (header with payload size and CRC filled in).
  std::string_view Finish();

 private:
  std::string bytes_;
  std::vector<uint64_t> keys_;
  uint32_t emb_rows_ = 0;
};

// One parameter file. Its counters are guarded by the owning store's counter mutex; the reader
// and the Bloom filter may be used concurrently. A file marked obsolete is unlinked when the
// last reference to it goes.
struct ParamFile {
  ParamFile(Env* env, uint32_t id, std::string path, std::unique_ptr<BloomFilter> bloom)
      : env(env), id(id), path(std::move(path)), bloom(std::move(bloom)) {}
  ~ParamFile();

  Env* const env;
  const uint32_t id;
  const std::string path;
  std::unique_ptr<RandomAccessFile> reader;  // set once the header is written
  std::unique_ptr<BloomFilter> bloom;
  uint64_t bytes = 0;       // appended so far, header included
  uint64_t live_bytes = 0;  // bytes of the records the group index points at
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
