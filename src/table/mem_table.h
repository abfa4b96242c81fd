// MemTable: the sharded, concurrent, in-memory sparse table (docs/sparse_table.md).
//
// Rows move in and out through RowBlocks: Pull copies rows out (absent keys get a default
// row), Push writes rows back (inserting absent keys). Later tiers (MEM-PS cache over SSD
// files) keep this interface.
//
// Thread safety: every method may be called concurrently with every other; each shard is
// guarded by its own mutex.
#ifndef CTRBOX_TABLE_MEM_TABLE_H_
#define CTRBOX_TABLE_MEM_TABLE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "table/accessor.h"
#include "table/value.h"
#include "util/thread_pool.h"

namespace ctrbox {

struct MemTableOptions {
  ValueLayout layout;
  uint32_t shard_bits = 6;  // 2^shard_bits shards
};

struct TableStats {
  uint64_t keys = 0;
  uint64_t keys_with_emb = 0;
  uint64_t value_bytes = 0;   // sum of encoded row sizes without keys (bytes_live)
  uint64_t memory_bytes = 0;  // index + slabs actually allocated
};

class MemTable {
 public:
  explicit MemTable(MemTableOptions options);
  ~MemTable();
  MemTable(const MemTable&) = delete;
  MemTable& operator=(const MemTable&) = delete;

  const ValueLayout& layout() const { return options_.layout; }
  size_t num_shards() const { return shards_.size(); }

  // Sets out to n rows: row i is the stored row of keys[i], or, when absent,
  // accessor->InitRow (if accessor is not null) or a cleared row without an embedding.
  // pool may be null (runs on the calling thread).
  void Pull(const uint64_t* keys, size_t n, const CtrAccessor* accessor, RowBlock* out,
            ThreadPool* pool) const;
  // Stores every row of `rows`, inserting keys that are absent.
  void Push(const RowBlock& rows, ThreadPool* pool);
  // Applies accessor.ShrinkRow to every row, deleting the rows it rejects. Returns the number
  // of rows deleted.
  uint64_t Shrink(const CtrAccessor& accessor, ThreadPool* pool);
  // Copies the rows of shard s into *out, in index order.
  void ExportShard(size_t s, RowBlock* out) const;

  TableStats Stats() const;
  // An order-independent hash of every row's canonical encoding (docs/sparse_table.md).
  uint64_t SparseDigest(ThreadPool* pool) const;

 private:
  struct Shard;
  size_t ShardOf(uint64_t key) const;
  // Groups the indices of keys[0..n) by shard: order holds them shard by shard, and shard s
  // owns order[begin[s] .. begin[s+1]).
  void GroupByShard(const uint64_t* keys, size_t n, std::vector<uint32_t>* order,
                    std::vector<uint32_t>* begin) const;

  const MemTableOptions options_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_MEM_TABLE_H_
