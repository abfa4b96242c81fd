// The rows a server holds (docs/serve.md, "Rows in memory"): per key its embedding at the
// served precision (the version's 8- or 16-bit codes, or float32), its wide weight when the
// model has one, and whether it has an embedding. Immutable once built: readers need no lock.
//
// Layout: keys grouped by a hash bucket (about 4 keys a bucket), the buckets' first entries in
// one offset array, the rows at a fixed stride in the keys' order. A lookup hashes the key,
// scans its bucket's few keys (one or two cache lines) and decodes the row. Per key: 8 bytes
// of key, the row, one bit of flags and about one byte of offsets.
//
// Larger than memory (docs/serve.md, "Rows on SSD"): Finish(file) writes the arrays to a file
// of an SSD directory and maps it; the kernel reads the pages lookups touch, and Trim gives
// the resident pages back when they pass a budget.
#ifndef CTRBOX_SERVE_SERVED_ROWS_H_
#define CTRBOX_SERVE_SERVED_ROWS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "table/quant.h"
#include "table/value.h"
#include "util/status.h"

namespace ctrbox {

class ServedRows {
 public:
  // Rows in `layout` (a serving layout: no optimizer state) go in through Add; keys must be
  // distinct. `wide`: the model has a wide part (its weights are kept).
  class Builder {
   public:
    Builder(const ValueLayout& layout, bool wide);
    void Add(const RowBlock& rows);
    void Add(const RowBlock& rows, size_t i);
    // In memory; or, with `file`, in that file (created, mapped, then unlinked: the mapping
    // keeps it until the rows are freed).
    StatusOr<std::shared_ptr<const ServedRows>> Finish(const std::string& file);
    std::shared_ptr<const ServedRows> Finish();

   private:
    std::unique_ptr<ServedRows> Build();
    std::unique_ptr<ServedRows> out_;
    std::vector<uint64_t> keys_;
    std::vector<char> rows_;
    std::vector<bool> has_emb_;
  };

  // Row i of *out (a RowBlock of this layout) set to key's row; false (and row i untouched)
  // when the key has none.
  bool Lookup(uint64_t key, RowBlock* out, size_t i) const;
  bool Contains(uint64_t key) const { return Find(key) != kNone; }
  // Calls fn(rows) with every row, in blocks (for a delta applied onto rows held).
  Status ForEach(const std::function<Status(const RowBlock&)>& fn) const;

  const ValueLayout& layout() const { return layout_; }
  size_t size() const { return n_; }
  // Bytes held: keys, rows, flags and offsets (mapped: the file's).
  size_t MemoryBytes() const;
  // Of them, the bytes in memory now (mapped: the file's pages in the page cache, which
  // include those mapped in this process).
  size_t ResidentBytes() const;
  bool mapped() const { return map_ != nullptr; }
  // Mapped rows above `budget` resident bytes give their pages back (later lookups read them
  // from the file again); returns the bytes resident before.
  size_t Trim(size_t budget) const;
  ~ServedRows();
  ServedRows(const ServedRows&) = delete;
  ServedRows& operator=(const ServedRows&) = delete;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  ServedRows(const ValueLayout& layout, bool wide);
  // Points the arrays at the vectors, or (Map) at a file's mapping.
  void PointAtVectors();
  Status Map(const std::string& file);
  uint32_t Find(uint64_t key) const;
  size_t Bucket(uint64_t key) const;
  void EncodeRow(const RowBlock& rows, size_t i, char* out) const;
  void DecodeRow(uint32_t at, RowBlock* out, size_t i) const;

  ValueLayout layout_;
  Quantizer quant_;
  bool wide_;
  uint32_t emb_bytes_ = 0;  // the embedding's stored bytes
  uint32_t stride_ = 0;     // emb_bytes_ + the wide weight
  uint32_t bucket_shift_ = 64;
  std::vector<uint32_t> offsets_;  // bucket b's keys: [offsets_[b], offsets_[b + 1])
  std::vector<uint64_t> keys_;
  std::vector<char> rows_;
  std::vector<uint64_t> has_emb_;  // one bit a key
  // What lookups read: the vectors, or the mapping (the vectors then empty).
  size_t n_ = 0;
  const uint32_t* offsets_p_ = nullptr;
  const uint64_t* keys_p_ = nullptr;
  const char* rows_p_ = nullptr;
  const uint64_t* has_emb_p_ = nullptr;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  int fd_ = -1;  // the mapped file's (unlinked)
  void Release() const;
};

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_SERVED_ROWS_H_
