// The working set of a pass (AIBox §3, HPS §4): its distinct keys, numbered by pass-local
// ids that index the pass's rows (a RowBlock: the CPU counterpart of the HBM-PS), and for
// each minibatch the distinct local ids it touches with the positions of their occurrences,
// so gradients reduce per key in a fixed order without locks.
//
// Local ids are assigned in 64 fixed key ranges of the key space, in first-occurrence order
// within each, so the numbering is the same whatever the thread count.
//
// How (docs/pipeline.md, "Host stages that scale with cores"): each minibatch's key uses are
// cut into pieces of at most 65 536, and each piece deduplicates its keys on its own (a table
// in one core's cache); only the pieces' distinct keys are grouped by key range and numbered
// there (a piece's keys in piece order keep the pass's first-occurrence order); a minibatch
// of one piece has its uniq list from its piece as is. Every step runs on the pool over
// pieces, key ranges or minibatches.
#ifndef CTRBOX_WORKING_WORKING_SET_H_
#define CTRBOX_WORKING_WORKING_SET_H_

#include <cstdint>
#include <vector>

#include "io/batch.h"
#include "util/hash.h"
#include "util/thread_pool.h"

namespace ctrbox {

// Local ids are numbered per key key range: key range(key) = the top kKeyRangeBits bits of
// Mix64(key). Key range p owns a contiguous range of local ids, in ascending p.
constexpr int kKeyRangeBits = 6;
constexpr size_t kKeyRanges = size_t{1} << kKeyRangeBits;
inline size_t KeyRangeOf(uint64_t key) { return Mix64(key) >> (64 - kKeyRangeBits); }

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
  // A piece: up to kPieceUses key occurrences of one minibatch, deduplicated on its own.
  struct Piece {
    uint32_t begin = 0, end = 0;  // key occurrences of the pass
    std::vector<uint64_t> keys;   // its distinct keys, first-occurrence order
    std::vector<uint8_t> part;    // their key ranges
    std::vector<uint32_t> id;     // their places among the grouped keys, then their local ids
    std::vector<uint32_t> uniq;   // their places in the minibatch's uniq (several pieces)
  };
  // A table from key to index, numbering keys in the order they come (a piece's, or a
  // key range's): open addressing over buckets that hold a key and its index together (a
  // probe touches one cache line), doubled when half full. A bucket is live when its stamp is
  // the table's, so starting over needs no clearing (and keeps the size the last use needed).
  class alignas(64) Ids {  // (a cache line of its own: threads use their own)
   public:
    // Starts over. Within a key range (all keys have its top Mix64 bits) the probes start from
    // the Mix64 bits below them; else from Fibonacci hashing's.
    void Reset(bool key_range);
    // The index of `key`, numbering it next if new.
    uint32_t IdOf(uint64_t key) {
      const uint64_t h = Hash(key);
      size_t s = static_cast<size_t>(h >> shift_);
      while (buckets_[s].stamp == stamp_ && buckets_[s].key != key) s = (s + 1) & mask_;
      if (buckets_[s].stamp == stamp_) return buckets_[s].index;
      if (2 * (keys_.size() + 1) > buckets_.size()) {
        Grow();
        s = static_cast<size_t>(h >> shift_);
        while (buckets_[s].stamp == stamp_) s = (s + 1) & mask_;
      }
      buckets_[s] = {key, static_cast<uint32_t>(keys_.size()), stamp_};
      keys_.push_back(key);
      return buckets_[s].index;
    }
    const std::vector<uint64_t>& keys() const { return keys_; }
    // Swaps the keys numbered so far with *keys (whose memory the table reuses).
    void SwapKeys(std::vector<uint64_t>* keys) { keys_.swap(*keys); }
    size_t MemoryBytes() const {
      return buckets_.capacity() * sizeof(Bucket) + keys_.capacity() * 8;
    }

   private:
    struct Bucket {
      uint64_t key = 0;
      uint32_t index = 0, stamp = 0;
    };
    // A hash of the key whose top bits are uniform (over a key range's keys).
    uint64_t Hash(uint64_t key) const {
      return key_range_ ? Mix64(key) << kKeyRangeBits : key * 0x9E3779B97F4A7C15ULL;
    }
    void Grow();
    bool key_range_ = false;
    std::vector<Bucket> buckets_;
    uint32_t stamp_ = 0;
    int shift_ = 64;
    size_t mask_ = 0;
    std::vector<uint64_t> keys_;  // index -> key
  };
  std::vector<Piece> pieces;
  std::vector<uint32_t> batch_piece;  // minibatch b's pieces: [batch_piece[b], batch_piece[b + 1])
  std::vector<uint32_t> in_piece;     // per key occurrence: its piece-local index
  std::vector<uint32_t> counts;       // per piece and key range: distinct keys, then offsets
  std::vector<uint64_t> grouped_key;  // the pieces' distinct keys grouped by key range
  std::vector<uint32_t> grouped_id;   // their key-range-local ids
  std::vector<Ids> tables;            // per thread: a piece's distinct keys
  std::vector<Ids> key_ranges;        // per key range: its distinct keys (the local ids)
  std::vector<std::vector<uint64_t>> seen;  // per thread: marks over local ids
  size_t MemoryBytes() const;
};

// Builds the working set of `pass` cut into minibatches of batch_size rows (the last may be
// smaller), on `pool` (may be null): the same working set whatever the thread count. scratch
// may be null (the build allocates its own). REQUIRES: batch_size > 0.
void BuildWorkingSet(const Batch& pass, size_t batch_size, ThreadPool* pool, WorkingSet* out,
                     WorkingSetScratch* scratch = nullptr);

}  // namespace ctrbox

#endif  // CTRBOX_WORKING_WORKING_SET_H_
