#include "working/working_table.h"

#include <algorithm>
#include <cassert>

namespace ctrbox {
namespace {

// The probe start of a key inside its key range: bits below the key range bits of Mix64, so
// the position does not repeat the key range choice.
inline uint64_t ProbeStart(uint64_t key) {
  return Mix64(key) & ((uint64_t{1} << (64 - kKeyRangeBits)) - 1);
}

}  // namespace

void WorkingTable::Build(const std::vector<uint64_t>& keys, ThreadPool* pool) {
  keys_ = keys;
  rows_.Resize(keys_.size());
  // Key range boundaries: the keys are grouped by ascending key range.
  std::fill(part_begin_.begin(), part_begin_.end(), 0);
  for (uint64_t k : keys_) ++part_begin_[KeyRangeOf(k) + 1];
  for (size_t p = 0; p < kKeyRanges; ++p) part_begin_[p + 1] += part_begin_[p];
  size_t buckets = 0;
  for (size_t p = 0; p < kKeyRanges; ++p) {
    const size_t n = part_begin_[p + 1] - part_begin_[p];
    size_t cap = 4;
    while (cap < n * 2) cap <<= 1;  // load factor <= 1/2
    parts_[p].mask = cap - 1;
    parts_[p].first = buckets;
    buckets += cap;
  }
  bucket_key_.resize(buckets);
  bucket_id_.assign(buckets, kNotFound);
  RunParallel(pool, kKeyRanges, [&](size_t p, int) {
    const KeyRange& part = parts_[p];
    uint64_t* skey = bucket_key_.data() + part.first;
    uint32_t* sid = bucket_id_.data() + part.first;
    for (uint32_t i = part_begin_[p]; i < part_begin_[p + 1]; ++i) {
      const uint64_t k = keys_[i];
      assert(KeyRangeOf(k) == p);
      uint64_t s = ProbeStart(k) & part.mask;
      while (sid[s] != kNotFound) {
        assert(skey[s] != k);  // keys are distinct
        s = (s + 1) & part.mask;
      }
      skey[s] = k;
      sid[s] = i;
    }
  });
}

uint32_t WorkingTable::Find(uint64_t key) const {
  if (keys_.empty()) return kNotFound;
  const KeyRange& part = parts_[KeyRangeOf(key)];
  const uint64_t* skey = bucket_key_.data() + part.first;
  const uint32_t* sid = bucket_id_.data() + part.first;
  for (uint64_t s = ProbeStart(key) & part.mask;; s = (s + 1) & part.mask) {
    if (sid[s] == kNotFound) return kNotFound;
    if (skey[s] == key) return sid[s];
  }
}

void WorkingTable::FindShared(const WorkingTable& other, SharedRows* out, ThreadPool* pool,
                              const uint8_t* skip) const {
  std::vector<SharedRows> per(kKeyRanges);
  RunParallel(pool, kKeyRanges, [&](size_t p, int) {
    const uint32_t here_n = part_begin_[p + 1] - part_begin_[p];
    const uint32_t there_n = other.part_begin_[p + 1] - other.part_begin_[p];
    if (here_n == 0 || there_n == 0) return;
    if (here_n <= there_n) {
      for (uint32_t i = part_begin_[p]; i < part_begin_[p + 1]; ++i) {
        if (skip != nullptr && skip[i] != 0) continue;  // (no lookup)
        const uint32_t j = other.Find(keys_[i]);
        if (j != kNotFound) per[p].emplace_back(i, j);
      }
    } else {
      for (uint32_t j = other.part_begin_[p]; j < other.part_begin_[p + 1]; ++j) {
        const uint32_t i = Find(other.keys_[j]);
        if (i != kNotFound && (skip == nullptr || skip[i] == 0)) per[p].emplace_back(i, j);
      }
    }
  });
  out->clear();
  for (const SharedRows& v : per) out->insert(out->end(), v.begin(), v.end());
}

void WorkingTable::CopyRows(const WorkingTable& from, const SharedRows& pairs, ThreadPool* pool) {
  constexpr size_t kChunk = 4096;
  RunParallel(pool, (pairs.size() + kChunk - 1) / kChunk, [&](size_t c, int) {
    const size_t end = std::min(pairs.size(), (c + 1) * kChunk);
    for (size_t k = c * kChunk; k < end; ++k) {
      assert(keys_[pairs[k].first] == from.keys_[pairs[k].second]);
      rows_.CopyRow(from.rows_, pairs[k].second, pairs[k].first);
    }
  });
}

void SharedWithNewest(const WorkingTable& table, const std::vector<const WorkingTable*>& ahead,
                      std::vector<SharedRows>* out, std::vector<uint8_t>* claimed,
                      ThreadPool* pool) {
  claimed->assign(table.size(), 0);
  out->assign(ahead.size(), SharedRows());
  for (size_t t = ahead.size(); t-- > 0;) {  // the newest first: it claims its rows
    table.FindShared(*ahead[t], &(*out)[t], pool, claimed->data());
    for (const auto& pair : (*out)[t]) (*claimed)[pair.first] = 1;
  }
}

size_t WorkingTable::MemoryBytes() const {
  return keys_.capacity() * 8 + bucket_key_.capacity() * 8 + bucket_id_.capacity() * 4;
}

}  // namespace ctrbox
