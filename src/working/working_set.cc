#include "working/working_set.h"

#include <cassert>

namespace ctrbox {
namespace {

constexpr uint32_t kNone = 0xFFFFFFFFu;

// Assigns partition-local ids to the occurrences of one partition, in occurrence order.
void DedupePartition(const uint64_t* keys, const std::vector<uint32_t>& occurrences,
                     std::vector<uint32_t>* local, std::vector<uint64_t>* part_keys) {
  size_t cap = 16;
  while (cap < occurrences.size() * 2) cap <<= 1;
  std::vector<uint64_t> slot_key(cap);
  std::vector<uint32_t> slot_id(cap, kNone);
  const size_t mask = cap - 1;
  part_keys->clear();
  for (uint32_t p : occurrences) {
    const uint64_t key = keys[p];
    size_t i = Mix64(key) & mask;
    while (slot_id[i] != kNone && slot_key[i] != key) i = (i + 1) & mask;
    if (slot_id[i] == kNone) {
      slot_key[i] = key;
      slot_id[i] = static_cast<uint32_t>(part_keys->size());
      part_keys->push_back(key);
    }
    (*local)[p] = slot_id[i];
  }
}

}  // namespace

size_t WorkingSet::MemoryBytes() const {
  size_t b = keys.capacity() * 8 + local.capacity() * 4 + cell.capacity() * 4;
  for (const Minibatch& m : batches) {
    b += (m.uniq.capacity() + m.occ_begin.capacity() + m.occ.capacity()) * 4;
  }
  return b;
}

void BuildWorkingSet(const Batch& pass, size_t batch_size, ThreadPool* pool, WorkingSet* out) {
  assert(batch_size > 0);
  const size_t n = pass.keys.size();
  const uint32_t S = pass.schema.num_slots;
  const uint64_t* keys = pass.keys.data();

  // 1. Partition the occurrences by key.
  std::vector<std::vector<uint32_t>> parts(kPartitions);
  {
    std::vector<uint8_t> part_of(n);
    std::vector<size_t> counts(kPartitions, 0);
    for (size_t p = 0; p < n; ++p) {
      part_of[p] = static_cast<uint8_t>(PartitionOf(keys[p]));
      ++counts[part_of[p]];
    }
    for (size_t q = 0; q < kPartitions; ++q) parts[q].reserve(counts[q]);
    for (size_t p = 0; p < n; ++p) parts[part_of[p]].push_back(static_cast<uint32_t>(p));
  }
  // 2. Number the distinct keys of each partition; then offset by the partition's base.
  out->local.resize(n);
  std::vector<std::vector<uint64_t>> part_keys(kPartitions);
  RunParallel(pool, kPartitions,
              [&](size_t q, int) { DedupePartition(keys, parts[q], &out->local, &part_keys[q]); });
  std::vector<uint32_t> base(kPartitions + 1, 0);
  for (size_t q = 0; q < kPartitions; ++q) {
    base[q + 1] = base[q] + static_cast<uint32_t>(part_keys[q].size());
  }
  out->keys.resize(base[kPartitions]);
  RunParallel(pool, kPartitions, [&](size_t q, int) {
    std::copy(part_keys[q].begin(), part_keys[q].end(), out->keys.begin() + base[q]);
    for (uint32_t p : parts[q]) out->local[p] += base[q];
  });

  // 3. Minibatches: rows, key ranges, cells, and the per-key occurrence lists.
  const size_t rows = pass.rows();
  const size_t num_batches = (rows + batch_size - 1) / batch_size;
  out->batches.resize(num_batches);
  out->cell.resize(n);
  const int threads = pool ? pool->num_threads() : 1;
  std::vector<std::vector<uint32_t>> seen(threads), index(threads);
  RunParallel(pool, num_batches, [&](size_t b, int t) {
    Minibatch& mb = out->batches[b];
    mb.row_begin = static_cast<uint32_t>(b * batch_size);
    mb.row_end = static_cast<uint32_t>(std::min(rows, (b + 1) * batch_size));
    mb.key_begin = pass.offsets[size_t{mb.row_begin} * S];
    mb.key_end = pass.offsets[size_t{mb.row_end} * S];
    for (uint32_t r = mb.row_begin; r < mb.row_end; ++r) {
      for (uint32_t s = 0; s < S; ++s) {
        const uint32_t c = (r - mb.row_begin) * S + s;
        for (uint32_t p = pass.offsets[size_t{r} * S + s]; p < pass.offsets[size_t{r} * S + s + 1];
             ++p) {
          out->cell[p] = c;
        }
      }
    }
    // seen[l] == b + 1 marks local id l as met in this minibatch; index[l] is its uniq slot.
    std::vector<uint32_t>& mark = seen[t];
    std::vector<uint32_t>& slot = index[t];
    if (mark.size() < out->keys.size()) {
      mark.assign(out->keys.size(), 0);
      slot.resize(out->keys.size());
    }
    const uint32_t tag = static_cast<uint32_t>(b + 1);
    mb.uniq.clear();
    std::vector<uint32_t> counts;
    for (uint32_t p = mb.key_begin; p < mb.key_end; ++p) {
      const uint32_t l = out->local[p];
      if (mark[l] != tag) {
        mark[l] = tag;
        slot[l] = static_cast<uint32_t>(mb.uniq.size());
        mb.uniq.push_back(l);
        counts.push_back(0);
      }
      ++counts[slot[l]];
    }
    mb.occ_begin.assign(mb.uniq.size() + 1, 0);
    for (size_t u = 0; u < mb.uniq.size(); ++u) mb.occ_begin[u + 1] = mb.occ_begin[u] + counts[u];
    std::vector<uint32_t> fill(mb.occ_begin.begin(), mb.occ_begin.end() - 1);
    mb.occ.resize(mb.key_end - mb.key_begin);
    for (uint32_t p = mb.key_begin; p < mb.key_end; ++p) {
      mb.occ[fill[slot[out->local[p]]]++] = p - mb.key_begin;
    }
  });
}

}  // namespace ctrbox
