#include "table/counting_bloom.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

constexpr char kMagic[8] = {'C', 'T', 'R', 'B', 'X', 'C', 'B', 'F'};

}  // namespace

CountingBloom::CountingBloom(uint32_t log2_counters)
    : log2_(log2_counters), counters_(size_t{1} << log2_counters, 0) {}

void CountingBloom::CounterIndexes(uint64_t key, uint64_t* at) const {
  // Double hashing from two independent mixes of the key.
  const uint64_t mask = (uint64_t{1} << log2_) - 1;
  const uint64_t h1 = Mix64(key ^ 0x9E3779B97F4A7C15ULL),
                 h2 = Mix64(key + 0xC2B2AE3D27D4EB4FULL) | 1;
  for (int i = 0; i < kHashes; ++i) at[i] = (h1 + static_cast<uint64_t>(i) * h2) & mask;
}

uint32_t CountingBloom::Add(uint64_t key) {
  uint64_t at[kHashes];
  CounterIndexes(key, at);
  uint8_t least = 255;
  for (uint64_t s : at) least = std::min(least, counters_[s]);
  if (least == 255) return 255;
  // Conservative update: only the counters at the least value rise (a shared counter
  // already above it holds another key's count).
  for (uint64_t s : at) {
    if (counters_[s] == least) counters_[s] = static_cast<uint8_t>(least + 1);
  }
  return least + 1u;
}

uint32_t CountingBloom::Count(uint64_t key) const {
  uint64_t at[kHashes];
  CounterIndexes(key, at);
  uint8_t least = 255;
  for (uint64_t s : at) least = std::min(least, counters_[s]);
  return least;
}

double CountingBloom::FalsePositiveBound(uint64_t distinct_keys, uint32_t log2_counters) {
  const double m = std::ldexp(1.0, static_cast<int>(log2_counters));
  return std::pow(1.0 - std::exp(-kHashes * static_cast<double>(distinct_keys) / m), kHashes);
}

std::string CountingBloom::Encode() const {
  std::string out(kMagic, 8);
  PutFixed<uint32_t>(&out, log2_);
  out.append(reinterpret_cast<const char*>(counters_.data()), counters_.size());
  PutFixed<uint64_t>(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

StatusOr<CountingBloom> CountingBloom::Decode(const std::string& b, const std::string& where) {
  if (b.size() < 20 || b.compare(0, 8, kMagic, 8) != 0)
    return CorruptionError(where + ": not a counting Bloom filter");
  const uint32_t log2 = GetFixed<uint32_t>(b.data() + 8);
  if (log2 > 40 || b.size() != 12 + (size_t{1} << log2) + 8)
    return CorruptionError(where + ": truncated or of another size");
  if (GetFixed<uint64_t>(b.data() + b.size() - 8) != XXH3_64bits(b.data(), b.size() - 8))
    return CorruptionError(where + ": checksum mismatch");
  CountingBloom f(log2);
  std::copy(b.begin() + 12, b.end() - 8, reinterpret_cast<char*>(f.counters_.data()));
  return f;
}

}  // namespace ctrbox
