// BloomFilter: a blocked Bloom filter over 64-bit keys (every key's bits fall in one 512-bit
// cache line), one per SSD-PS parameter file (docs/storage.md).
//
// Thread safety: one thread at a time may Add (the SSD store's writer); MayContain may run
// concurrently with it (the words are atomics). A reader is guaranteed to see a key added
// before an operation that synchronises with it (ctrbox adds a key under the stripe lock that
// also guards the group index the reader consults first).
#ifndef CTRBOX_TABLE_BLOOM_H_
#define CTRBOX_TABLE_BLOOM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "util/hash.h"

namespace ctrbox {

class BloomFilter {
 public:
  // A filter sized for about `expected_keys` keys at `bits_per_key` (8: ~2 % false positives).
  // bits_per_key 0: no filter (every key may be contained; no memory).
  BloomFilter(size_t expected_keys, int bits_per_key);
  // A filter restored from its words (as written by words()); `hashes` as returned by hashes().
  // No words: no filter.
  BloomFilter(const std::vector<uint64_t>& words, int hashes);
  // The bytes of a filter for expected_keys at bits_per_key (MemoryBytes of that filter).
  static size_t BytesFor(size_t expected_keys, int bits_per_key);

  void Add(uint64_t key);
  // Add of keys[0..n), their filter blocks fetched ahead (a record's keys fall in blocks at
  // random: one cache miss each, overlapped).
  void AddAll(const uint64_t* keys, size_t n);
  bool MayContain(uint64_t key) const;
  // A hint (no effect on results): fetch the block MayContain(key) will read.
  void Prefetch(uint64_t key) const {
    if (num_blocks_ != 0) __builtin_prefetch(words_.get() + BlockOf(Hash(key)) * 8);
  }

  size_t num_bits() const { return num_blocks_ * 512; }
  int hashes() const { return hashes_; }
  std::vector<uint64_t> words() const;
  size_t MemoryBytes() const { return num_blocks_ * 64; }

 private:
  static uint64_t Hash(uint64_t key) { return Mix64(key ^ 0x626c6f6f6dULL); }
  size_t BlockOf(uint64_t h) const { return h % num_blocks_; }
  void AddHashed(uint64_t h);

  size_t num_blocks_;
  int hashes_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_BLOOM_H_
