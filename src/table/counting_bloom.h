// A counting Bloom filter over 64-bit keys: how often each key was seen, within a fixed
// memory, never below the true count (admission by count: jobs/admission.h).
#ifndef CTRBOX_TABLE_COUNTING_BLOOM_H_
#define CTRBOX_TABLE_COUNTING_BLOOM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace ctrbox {

// 2^log2_counters one-byte counters (saturating at 255), kHashes of them per key. A key's
// count is the least of its counters (never below its true count); Add raises only the least
// ones (conservative update). Thread safety: none.
class CountingBloom {
 public:
  static constexpr int kHashes = 3;
  explicit CountingBloom(uint32_t log2_counters);

  // Counts one occurrence of key; returns its count after it.
  uint32_t Add(uint64_t key);
  uint32_t Count(uint64_t key) const;
  size_t MemoryBytes() const { return counters_.size(); }
  uint32_t log2_counters() const { return log2_; }

  // The chance that a key counted fewer than t times reads t or more, bounded by the chance
  // that each of its counters is shared with another of the n distinct keys counted (the
  // Bloom filter's false-positive rate (1 - e^(-k n / m))^k).
  static double FalsePositiveBound(uint64_t distinct_keys, uint32_t log2_counters);

  // The counters, checksummed; Decode verifies (Corruption naming `where`).
  std::string Encode() const;
  static StatusOr<CountingBloom> Decode(const std::string& bytes, const std::string& where);

 private:
  // The kHashes counters of `key`: their indexes into counters_.
  void CounterIndexes(uint64_t key, uint64_t* at) const;
  uint32_t log2_;
  std::vector<uint8_t> counters_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_COUNTING_BLOOM_H_
