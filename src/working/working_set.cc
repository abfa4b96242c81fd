#include "working/working_set.h"

#include <algorithm>
#include <cassert>

namespace ctrbox {
namespace {

constexpr uint32_t kNone = 0xFFFFFFFFu;
// Occurrences per chunk of the partitioning step.
constexpr size_t kChunk = size_t{1} << 16;

// The probe start of a key inside its partition: bits of Mix64 below the partition bits.
inline uint64_t ProbeBits(uint64_t key) {
  return Mix64(key) & ((uint64_t{1} << (64 - kPartitionBits)) - 1);
}

// A key partition's table from key to partition-local id: open addressing over buckets that
// hold a key and its id together (a probe touches one cache line), doubled when half full (so
// it stays about the size of the partition's distinct keys).
class PartitionIds {
 public:
  PartitionIds() : buckets_(kInitial), mask_(kInitial - 1) {}
  // The key's id (h: ProbeBits(key)), numbering new keys in the order they come.
  uint32_t IdOf(uint64_t key, uint64_t h) {
    size_t s = h & mask_;
    while (buckets_[s].id != kNone && buckets_[s].key != key) s = (s + 1) & mask_;
    if (buckets_[s].id != kNone) return buckets_[s].id;
    if (2 * (keys_.size() + 1) > buckets_.size()) {
      Grow();
      s = h & mask_;
      while (buckets_[s].id != kNone) s = (s + 1) & mask_;
    }
    buckets_[s] = Bucket{key, static_cast<uint32_t>(keys_.size())};
    keys_.push_back(key);
    return buckets_[s].id;
  }
  const std::vector<uint64_t>& keys() const { return keys_; }

 private:
  static constexpr size_t kInitial = 256;
  struct Bucket {
    uint64_t key = 0;
    uint32_t id = kNone;
  };
  void Grow() {
    buckets_.assign(buckets_.size() * 2, Bucket{});
    mask_ = buckets_.size() - 1;
    for (uint32_t id = 0; id < keys_.size(); ++id) {
      size_t t = ProbeBits(keys_[id]) & mask_;
      while (buckets_[t].id != kNone) t = (t + 1) & mask_;
      buckets_[t] = Bucket{keys_[id], id};
    }
  }
  std::vector<Bucket> buckets_;
  size_t mask_;
  std::vector<uint64_t> keys_;  // id -> key
};

// Minibatch b: its rows, key range, cells, and the per-key occurrence lists. seen: the
// calling thread's scratch over local ids, (b + 1) << 32 | uniq place where met in this
// minibatch; u_of: scratch for each occurrence's uniq place.
void BuildMinibatch(const Batch& pass, size_t batch_size, size_t b, std::vector<uint64_t>* seen,
                    std::vector<uint32_t>* u_of, WorkingSet* out) {
  const uint32_t S = pass.schema.num_slots;
  const size_t rows = pass.rows();
  Minibatch& mb = out->batches[b];
  mb.row_begin = static_cast<uint32_t>(b * batch_size);
  mb.row_end = static_cast<uint32_t>(std::min(rows, (b + 1) * batch_size));
  mb.key_begin = pass.offsets[size_t{mb.row_begin} * S];
  mb.key_end = pass.offsets[size_t{mb.row_end} * S];
  uint32_t* cell = out->cell.data();
  const uint32_t* offsets = pass.offsets.data();
  for (uint32_t r = mb.row_begin; r < mb.row_end; ++r) {
    for (uint32_t s = 0; s < S; ++s) {
      const uint32_t c = (r - mb.row_begin) * S + s;
      for (uint32_t p = offsets[size_t{r} * S + s]; p < offsets[size_t{r} * S + s + 1]; ++p) {
        cell[p] = c;
      }
    }
  }
  if (seen->size() < out->keys.size()) seen->assign(out->keys.size(), 0);
  const uint32_t n = mb.key_end - mb.key_begin;
  if (u_of->size() < n) u_of->resize(n);
  const uint64_t tag = uint64_t{b + 1} << 32;
  const uint32_t* local = out->local.data() + mb.key_begin;
  uint64_t* mark = seen->data();
  uint32_t* u = u_of->data();
  mb.uniq.clear();
  std::vector<uint32_t> counts;
  for (uint32_t q = 0; q < n; ++q) {
    const uint32_t l = local[q];
    if ((mark[l] & ~uint64_t{0xFFFFFFFF}) != tag) {
      mark[l] = tag | mb.uniq.size();
      mb.uniq.push_back(l);
      counts.push_back(0);
    }
    u[q] = static_cast<uint32_t>(mark[l]);
    ++counts[u[q]];
  }
  mb.occ_begin.assign(mb.uniq.size() + 1, 0);
  for (size_t i = 0; i < mb.uniq.size(); ++i) mb.occ_begin[i + 1] = mb.occ_begin[i] + counts[i];
  std::vector<uint32_t>& fill = counts;  // now each list's next place
  std::copy(mb.occ_begin.begin(), mb.occ_begin.end() - 1, fill.begin());
  mb.occ.resize(n);
  for (uint32_t q = 0; q < n; ++q) mb.occ[fill[u[q]]++] = q;
}

}  // namespace

size_t WorkingSet::MemoryBytes() const {
  size_t b = keys.capacity() * 8 + local.capacity() * 4 + cell.capacity() * 4;
  for (const Minibatch& m : batches) {
    b += (m.uniq.capacity() + m.occ_begin.capacity() + m.occ.capacity()) * 4;
  }
  return b;
}

size_t WorkingSetScratch::MemoryBytes() const {
  size_t b = part_of.capacity() + counts.capacity() * 4 + grouped_key.capacity() * 8 +
             grouped_pos.capacity() * 4;
  for (const auto& v : seen) b += v.capacity() * 8;
  for (const auto& v : u_of) b += v.capacity() * 4;
  return b;
}

void BuildWorkingSet(const Batch& pass, size_t batch_size, ThreadPool* pool, WorkingSet* out,
                     WorkingSetScratch* scratch) {
  assert(batch_size > 0);
  WorkingSetScratch own;
  WorkingSetScratch& sc = scratch != nullptr ? *scratch : own;
  const size_t n = pass.keys.size();
  const uint64_t* keys = pass.keys.data();

  // 1. Each occurrence's key partition.
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint8_t>& part_of = sc.part_of;
  part_of.resize(n);
  RunParallel(pool, chunks, [&](size_t c, int) {
    for (size_t p = c * kChunk; p < std::min(n, (c + 1) * kChunk); ++p) {
      part_of[p] = static_cast<uint8_t>(PartitionOf(keys[p]));
    }
  });
  // 2. The occurrences grouped by partition, in occurrence order within each, with their keys
  // (so numbering reads them in sequence): chunks count, then scatter at their offsets.
  std::vector<uint32_t>& counts = sc.counts;
  counts.assign(chunks * kPartitions, 0);
  RunParallel(pool, chunks, [&](size_t c, int) {
    uint32_t* cnt = counts.data() + c * kPartitions;
    for (size_t p = c * kChunk; p < std::min(n, (c + 1) * kChunk); ++p) ++cnt[part_of[p]];
  });
  std::vector<uint32_t> part_begin(kPartitions + 1, 0);
  for (size_t q = 0, at = 0; q < kPartitions; ++q) {
    part_begin[q] = static_cast<uint32_t>(at);
    for (size_t c = 0; c < chunks; ++c) {
      const uint32_t k = counts[c * kPartitions + q];
      counts[c * kPartitions + q] = static_cast<uint32_t>(at);
      at += k;
    }
    part_begin[q + 1] = static_cast<uint32_t>(at);
  }
  std::vector<uint64_t>& grouped_key = sc.grouped_key;
  std::vector<uint32_t>& grouped_pos = sc.grouped_pos;
  grouped_key.resize(n);
  grouped_pos.resize(n);
  RunParallel(pool, chunks, [&](size_t c, int) {
    uint32_t* at = counts.data() + c * kPartitions;
    for (size_t p = c * kChunk; p < std::min(n, (c + 1) * kChunk); ++p) {
      const uint32_t i = at[part_of[p]]++;
      grouped_key[i] = keys[p];
      grouped_pos[i] = static_cast<uint32_t>(p);
    }
  });
  // 3. Each partition numbers its distinct keys in occurrence order (its table stays small:
  // one partition's keys); then the ids are offset by the partitions' bases.
  out->local.resize(n);
  std::vector<PartitionIds> ids(kPartitions);
  RunParallel(pool, kPartitions, [&](size_t q, int) {
    uint32_t* local = out->local.data();
    for (uint32_t i = part_begin[q]; i < part_begin[q + 1]; ++i) {
      local[grouped_pos[i]] = ids[q].IdOf(grouped_key[i], ProbeBits(grouped_key[i]));
    }
  });
  std::vector<uint32_t> base(kPartitions + 1, 0);
  for (size_t q = 0; q < kPartitions; ++q) {
    base[q + 1] = base[q] + static_cast<uint32_t>(ids[q].keys().size());
  }
  out->keys.resize(base[kPartitions]);
  RunParallel(pool, kPartitions, [&](size_t q, int) {
    std::copy(ids[q].keys().begin(), ids[q].keys().end(), out->keys.begin() + base[q]);
  });
  RunParallel(pool, chunks, [&](size_t c, int) {
    for (size_t p = c * kChunk; p < std::min(n, (c + 1) * kChunk); ++p) {
      out->local[p] += base[part_of[p]];
    }
  });

  // 4. Minibatches: rows, key ranges, cells, and the per-key occurrence lists.
  const size_t num_batches = (pass.rows() + batch_size - 1) / batch_size;
  out->batches.resize(num_batches);
  out->cell.resize(n);
  const int threads = pool ? pool->num_threads() : 1;
  if (sc.seen.size() < static_cast<size_t>(threads)) {
    sc.seen.resize(threads);
    sc.u_of.resize(threads);
  }
  for (auto& m : sc.seen) m.clear();  // marks are per build: stale ones would match a tag
  RunParallel(pool, num_batches, [&](size_t b, int t) {
    BuildMinibatch(pass, batch_size, b, &sc.seen[t], &sc.u_of[t], out);
  });
}

}  // namespace ctrbox
