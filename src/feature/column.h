// Columns of a view chunk as the feature graph sees them (docs/features.md), and the
// block-level pool their contents live in (FeatureBox §5).
//
// A column is one fixed-width cell per row plus a validity byte (0: null). Cells of variable
// length — strings, lists of strings, lists of keys — are (pointer, length) references into
// memory that outlives the chunk's extraction: the chunk's text, a side view's storage, the
// plan's constants, or the chunk's Arena.
//
// Thread safety: an Arena lane is used by one thread at a time; different lanes concurrently.
#ifndef CTRBOX_FEATURE_COLUMN_H_
#define CTRBOX_FEATURE_COLUMN_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

namespace ctrbox {

// int: int64; float: double; string: Str; keys: a list of 64-bit ids read from the view (basic
// features); list: a list of strings; hashed: a list of 64-bit keys made by an operator;
// mask: a filter's verdict (int64 0/1); tag: a dedupe's 128-bit row hash (Hash128).
enum class ColType : uint8_t { kInt, kFloat, kString, kKeys, kList, kHashed, kMask, kTag };
// "int", "float", ...
const char* ColTypeName(ColType t);

struct Str {
  const char* p = nullptr;
  uint32_t n = 0;
  std::string_view view() const { return {p, n}; }
};
struct KeySpan {
  const uint64_t* p = nullptr;
  uint32_t n = 0;
};
struct StrSpan {
  const Str* p = nullptr;
  uint32_t n = 0;
};
struct Hash128 {
  uint64_t lo = 0, hi = 0;
};

// The bytes of one cell of type t.
inline size_t CellBytes(ColType t) {
  switch (t) {
    case ColType::kInt:
    case ColType::kMask:
    case ColType::kFloat:
      return 8;
    case ColType::kString:
      return sizeof(Str);
    case ColType::kKeys:
    case ColType::kHashed:
      return sizeof(KeySpan);
    case ColType::kList:
      return sizeof(StrSpan);
    case ColType::kTag:
      return sizeof(Hash128);
  }
  return 16;
}

struct Column {
  ColType type = ColType::kInt;
  uint8_t* valid = nullptr;  // rows bytes, 1: present
  void* cells = nullptr;     // rows cells of CellBytes(type)

  int64_t* ints() const { return static_cast<int64_t*>(cells); }
  double* floats() const { return static_cast<double*>(cells); }
  Str* strs() const { return static_cast<Str*>(cells); }
  KeySpan* keys() const { return static_cast<KeySpan*>(cells); }
  StrSpan* lists() const { return static_cast<StrSpan*>(cells); }
  Hash128* tags() const { return static_cast<Hash128*>(cells); }
};

// A bump allocator over blocks of block_bytes that it keeps across Reset()s, with one lane per
// thread that allocates at once. Allocations are aligned to kAlign bytes (a cache line).
class Arena {
 public:
  static constexpr size_t kAlign = 64;
  explicit Arena(int lanes = 1, size_t block_bytes = size_t{1} << 20);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Grows the number of lanes to at least n. REQUIRES: no allocation in progress.
  void EnsureLanes(int n);
  int lanes() const { return static_cast<int>(lanes_.size()); }

  // `bytes` bytes (uninitialised) from lane `lane`, valid until Reset.
  void* Allocate(size_t bytes, int lane = 0);
  template <class T>
  T* Alloc(size_t n, int lane = 0) {
    return static_cast<T*>(Allocate(n * sizeof(T), lane));
  }
  // Copies s into the arena.
  Str Copy(std::string_view s, int lane = 0) {
    char* p = Alloc<char>(s.size() + 1, lane);
    if (!s.empty()) std::memcpy(p, s.data(), s.size());
    return {p, static_cast<uint32_t>(s.size())};
  }
  // Makes every allocation free in constant time per block; keeps the blocks.
  void Reset();
  // Bytes of the blocks held.
  size_t capacity() const;

 private:
  struct Block {
    std::unique_ptr<char[]> mem;
    size_t offset = 0;  // of the first aligned byte in mem
    size_t size = 0;    // usable bytes from there
  };
  struct Lane {
    std::vector<Block> blocks;
    size_t current = 0;  // the block allocated from
    size_t used = 0;     // bytes used of it
  };
  size_t block_bytes_;
  std::vector<Lane> lanes_;
};

// The columns of a chunk: one per column of the plan (docs/features.md), the rows' source line
// numbers, and each row's error (0: none; else 1 + the lowest index of an operator that could
// not compute the row). Rows the view parser found malformed are never in the table.
struct ColumnTable {
  uint32_t rows = 0;
  std::vector<Column> cols;
  std::vector<uint64_t> lines;   // the row's line in its file
  std::vector<uint32_t> errors;  // per row
};

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_COLUMN_H_
