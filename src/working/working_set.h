// The working set of a pass (AIBox §3, HPS §4): its distinct keys, numbered by pass-local
// ids that index the pass's rows (a RowBlock: the CPU counterpart of the HBM-PS), and for
// each minibatch the distinct local ids it touches with the positions of their occurrences,
// so gradients reduce per key in a fixed order without locks.
//
// Local ids are assigned in 64 fixed partitions of the key space, in first-occurrence order
// within each, so the numbering is the same whatever the thread count.
#ifndef CTRBOX_WORKING_WORKING_SET_H_
#define CTRBOX_WORKING_WORKING_SET_H_

#include <cstdint>
#include <vector>

#include "io/batch.h"
#include "util/hash.h"
#include "util/thread_pool.h"

namespace ctrbox {

// Local ids are numbered per key partition: partition(key) = the top kPartitionBits bits of
// Mix64(key). Partition p owns a contiguous range of local ids, in ascending p.
constexpr int kPartitionBits = 6;
constexpr size_t kPartitions = size_t{1} << kPartitionBits;
inline size_t PartitionOf(uint64_t key) { return Mix64(key) >> (64 - kPartitionBits); }

struct Minibatch {
  uint32_t row_begin = 0, row_end = 0;  // rows of the pass
  uint32_t key_begin = 0, key_end = 0;  // key occurrences of the pass (indices into keys)
  std::vector<uint32_t> uniq;           // local ids of the distinct keys, first-occurrence order
  std::vector<uint32_t> occ_begin;      // uniq.size() + 1 offsets into occ
  std::vector<uint32_t> occ;            // occurrence positions (from key_begin) per uniq entry

  uint32_t rows() const { return row_end - row_begin; }
};

struct WorkingSet {
  std::vector<uint64_t> keys;   // local id -> key
  std::vector<uint32_t> local;  // per key occurrence of the pass: its local id
  std::vector<uint32_t> cell;   // per key occurrence: (row - minibatch row_begin) * slots + slot
  std::vector<Minibatch> batches;

  size_t MemoryBytes() const;
  // At least MemoryBytes() of the working set of a pass with `uses` key occurrences and
  // `keys` distinct keys, cut into `batches` minibatches whose distinct keys add up to
  // `batch_keys` (a minibatch's uniq list grows by push_back: up to twice its size).
  static size_t BytesBound(size_t uses, size_t keys, size_t batches, size_t batch_keys) {
    return uses * (4 + 4 + 4) + keys * 8 + batch_keys * (8 + 4) + batches * 4;
  }
};

// BuildWorkingSet's temporary buffers, kept by a caller that builds one working set after
// another (the read stage) so that each build reuses the memory of the last.
struct WorkingSetScratch {
  std::vector<uint8_t> part_of;
  std::vector<uint32_t> counts;
  std::vector<uint64_t> grouped_key;
  std::vector<uint32_t> grouped_pos;
  std::vector<std::vector<uint64_t>> seen;
  std::vector<std::vector<uint32_t>> u_of;
  size_t MemoryBytes() const;
};

// Builds the working set of `pass` cut into minibatches of batch_size rows (the last may be
// smaller), on `pool` (may be null): the same working set whatever the thread count. scratch
// may be null (the build allocates its own). REQUIRES: batch_size > 0.
void BuildWorkingSet(const Batch& pass, size_t batch_size, ThreadPool* pool, WorkingSet* out,
                     WorkingSetScratch* scratch = nullptr);

}  // namespace ctrbox

#endif  // CTRBOX_WORKING_WORKING_SET_H_
