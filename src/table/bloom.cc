#include "table/bloom.h"

#include <algorithm>
#include <cmath>

#include "util/hash.h"

namespace ctrbox {

size_t BloomFilter::BytesFor(size_t expected_keys, int bits_per_key) {
  if (bits_per_key <= 0) return 0;
  const size_t bits = std::max<size_t>(512, expected_keys * static_cast<size_t>(bits_per_key));
  return (bits + 511) / 512 * 64;
}

BloomFilter::BloomFilter(size_t expected_keys, int bits_per_key) {
  num_blocks_ = BytesFor(expected_keys, bits_per_key) / 64;
  // k = ln 2 * bits/key minimises false positives; blocked filters do best slightly lower.
  hashes_ = std::clamp(static_cast<int>(std::lround(bits_per_key * 0.69)), 1, 12);
  words_ = std::make_unique<std::atomic<uint64_t>[]>(num_blocks_ * 8);
  for (size_t i = 0; i < num_blocks_ * 8; ++i) words_[i].store(0, std::memory_order_relaxed);
}

BloomFilter::BloomFilter(const std::vector<uint64_t>& words, int hashes)
    : num_blocks_(words.size() / 8), hashes_(num_blocks_ == 0 ? 0 : hashes) {
  words_ = std::make_unique<std::atomic<uint64_t>[]>(num_blocks_ * 8);
  for (size_t i = 0; i < num_blocks_ * 8; ++i) {
    words_[i].store(i < words.size() ? words[i] : 0, std::memory_order_relaxed);
  }
}

void BloomFilter::Add(uint64_t key) {
  if (num_blocks_ == 0) return;
  AddHashed(Hash(key));
}

void BloomFilter::AddAll(const uint64_t* keys, size_t n) {
  if (num_blocks_ == 0) return;
  constexpr size_t kAhead = 8;
  uint64_t h[kAhead];
  for (size_t i = 0; i < n + kAhead; ++i) {
    if (i >= kAhead) AddHashed(h[i % kAhead]);
    if (i < n) {
      h[i % kAhead] = Hash(keys[i]);
      __builtin_prefetch(words_.get() + BlockOf(h[i % kAhead]) * 8, 1);
    }
  }
}

void BloomFilter::AddHashed(uint64_t h) {
  std::atomic<uint64_t>* block = words_.get() + BlockOf(h) * 8;
  uint32_t a = static_cast<uint32_t>(h >> 32), b = static_cast<uint32_t>(h) | 1;
  for (int i = 0; i < hashes_; ++i, a += b) {
    const uint32_t bit = a & 511;
    // One writer at a time (the store's), so a plain load and store suffice: no locked
    // read-modify-write per bit.
    std::atomic<uint64_t>& w = block[bit >> 6];
    w.store(w.load(std::memory_order_relaxed) | (uint64_t{1} << (bit & 63)),
            std::memory_order_relaxed);
  }
}

bool BloomFilter::MayContain(uint64_t key) const {
  if (num_blocks_ == 0) return true;
  const uint64_t h = Hash(key);
  const std::atomic<uint64_t>* block = words_.get() + BlockOf(h) * 8;
  uint32_t a = static_cast<uint32_t>(h >> 32), b = static_cast<uint32_t>(h) | 1;
  for (int i = 0; i < hashes_; ++i, a += b) {
    const uint32_t bit = a & 511;
    if (!(block[bit >> 6].load(std::memory_order_relaxed) & (uint64_t{1} << (bit & 63)))) {
      return false;
    }
  }
  return true;
}

std::vector<uint64_t> BloomFilter::words() const {
  std::vector<uint64_t> w(num_blocks_ * 8);
  for (size_t i = 0; i < w.size(); ++i) w[i] = words_[i].load(std::memory_order_relaxed);
  return w;
}

}  // namespace ctrbox
