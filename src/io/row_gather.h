// Rows of batches read but not copied yet (RowRange), and their copy into one batch on a
// pool (RowGather): how the read stage builds a pass from the reader's blocks with one copy,
// made by every thread of its pool (docs/pipeline.md, "Host stages that scale with cores").
//
// Thread safety: a RowGather is used by one thread at a time (its copies run on the pool it
// is given); the blocks a RowRange shares must not change while it is held.
#ifndef CTRBOX_IO_ROW_GATHER_H_
#define CTRBOX_IO_ROW_GATHER_H_

#include <memory>
#include <vector>

#include "io/batch.h"
#include "util/thread_pool.h"

namespace ctrbox {

// Rows [begin, end) of a block.
struct RowRange {
  std::shared_ptr<const Batch> block;
  size_t begin = 0, end = 0;

  size_t rows() const { return end - begin; }
  size_t key_begin() const { return block->offsets[begin * block->schema.num_slots]; }
  size_t num_keys() const;
  const uint64_t* keys() const { return block->keys.data() + key_begin(); }
  // Batch::ContentBytes of these rows as a batch of their own.
  uint64_t ContentBytes() const;
};

// Builds a batch from ranges added in order. It writes into the batch's memory as it is: a
// batch reused pass after pass is neither reallocated nor zeroed. The ranges are copied once
// they span more than kFlushBlocks blocks, at Flush and at Finish, so at most that many
// blocks are held beyond the batch.
class RowGather {
 public:
  static constexpr size_t kFlushBlocks = 2;

  // Starts *out over, as an empty batch of schema s (its memory kept).
  void Begin(Schema s, Batch* out);
  // Appends a range's rows (copied now on `pool`, or later). REQUIRES: Begin; r.block's schema
  // is the batch's.
  void Add(RowRange r, ThreadPool* pool);
  // Copies the ranges added so far: the batch's first keys() keys are then in place (its
  // columns may be longer until Finish).
  void Flush(ThreadPool* pool);
  // Copies the ranges still pending and leaves *out holding exactly the rows added.
  void Finish(ThreadPool* pool);
  // Rows and keys added since Begin.
  size_t rows() const { return rows_ + pending_rows_; }
  size_t keys() const { return keys_ + pending_keys_; }

 private:
  Batch* out_ = nullptr;
  size_t rows_ = 0, keys_ = 0;  // copied into *out_ so far
  bool weights_ = false;        // *out_ has weights (of its first keys_ keys)
  std::vector<RowRange> pending_;
  size_t pending_rows_ = 0, pending_keys_ = 0, pending_blocks_ = 0;
};

}  // namespace ctrbox

#endif  // CTRBOX_IO_ROW_GATHER_H_
