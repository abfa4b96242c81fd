#include "table/mem_table.h"

#include <cassert>
#include <cstring>

#include "table/slab.h"
#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

constexpr uint32_t kEmpty = 0xFFFFFFFFu;
constexpr uint32_t kNoEmb = 0xFFFFFFFFu;
// Header record words: show, click, unseen | flags << 16, embedding id, wide, wide_state...
constexpr size_t kShow = 0, kClick = 1, kAge = 2, kEmbId = 3, kWide = 4, kWideState = 5;

float AsFloat(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
uint32_t AsWord(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  return w;
}

}  // namespace

struct MemTable::Shard {
  explicit Shard(const ValueLayout& l)
      : headers(kWideState + l.wide_state), embs(l.dim + l.emb_state) {
    Rehash(1024);
  }

  // Open-addressing index with linear probing; rows[i] == kEmpty marks a free slot.
  std::vector<uint64_t> keys;
  std::vector<uint32_t> rows;
  size_t size = 0;
  SlabArena headers, embs;
  mutable std::mutex mu;

  size_t Home(uint64_t key) const { return Mix64(key) & (keys.size() - 1); }

  // The slot holding key, or the empty slot where it would go.
  size_t Probe(uint64_t key) const {
    const size_t mask = keys.size() - 1;
    size_t i = Home(key);
    while (rows[i] != kEmpty && keys[i] != key) i = (i + 1) & mask;
    return i;
  }

  void Rehash(size_t capacity) {
    std::vector<uint64_t> old_keys(capacity);
    std::vector<uint32_t> old_rows(capacity, kEmpty);
    old_keys.swap(keys);
    old_rows.swap(rows);
    for (size_t i = 0; i < old_rows.size(); ++i) {
      if (old_rows[i] == kEmpty) continue;
      size_t j = Probe(old_keys[i]);
      keys[j] = old_keys[i];
      rows[j] = old_rows[i];
    }
  }

  // Returns the header id of key, inserting a fresh (uninitialised) one if absent.
  uint32_t FindOrInsert(uint64_t key, bool* inserted) {
    size_t i = Probe(key);
    if (rows[i] != kEmpty) {
      *inserted = false;
      return rows[i];
    }
    *inserted = true;
    if ((size + 1) * 10 > keys.size() * 7) {
      Rehash(keys.size() * 2);
      i = Probe(key);
    }
    keys[i] = key;
    rows[i] = headers.Allocate();
    ++size;
    return rows[i];
  }

  // Removes the entry in slot i (backward-shift deletion) and frees its records.
  void EraseSlot(size_t i) {
    uint32_t* h = headers.Get(rows[i]);
    if (h[kEmbId] != kNoEmb) embs.Free(h[kEmbId]);
    headers.Free(rows[i]);
    const size_t mask = keys.size() - 1;
    size_t j = i;
    while (true) {
      j = (j + 1) & mask;
      if (rows[j] == kEmpty) break;
      size_t k = Home(keys[j]);
      bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
      if (stays) continue;
      keys[i] = keys[j];
      rows[i] = rows[j];
      i = j;
    }
    rows[i] = kEmpty;
    --size;
  }

  void ReadRow(uint32_t id, RowBlock* out, size_t r) const {
    const ValueLayout& l = out->layout();
    const uint32_t* h = headers.Get(id);
    out->show(r) = AsFloat(h[kShow]);
    out->click(r) = AsFloat(h[kClick]);
    out->unseen(r) = static_cast<uint16_t>(h[kAge] & 0xFFFF);
    out->flags(r) = static_cast<uint16_t>(h[kAge] >> 16);
    out->wide(r) = AsFloat(h[kWide]);
    CopyBytes(out->wide_state(r), h + kWideState, 4 * l.wide_state);
    if (h[kEmbId] != kNoEmb) {
      const uint32_t* e = embs.Get(h[kEmbId]);
      CopyBytes(out->emb(r), e, 4 * l.dim);
      CopyBytes(out->emb_state(r), e + l.dim, 4 * l.emb_state);
    } else {
      ZeroBytes(out->emb(r), 4 * l.dim);
      ZeroBytes(out->emb_state(r), 4 * l.emb_state);
    }
  }

  void WriteRow(uint32_t id, bool fresh, const RowBlock& in, size_t r) {
    const ValueLayout& l = in.layout();
    uint32_t* h = headers.Get(id);
    if (fresh) h[kEmbId] = kNoEmb;
    h[kShow] = AsWord(in.show(r));
    h[kClick] = AsWord(in.click(r));
    h[kAge] = uint32_t{in.unseen(r)} | (uint32_t{in.flags(r)} << 16);
    h[kWide] = AsWord(in.wide(r));
    CopyBytes(h + kWideState, in.wide_state(r), 4 * l.wide_state);
    if (in.has_emb(r)) {
      if (h[kEmbId] == kNoEmb) h[kEmbId] = embs.Allocate();
      uint32_t* e = embs.Get(h[kEmbId]);
      CopyBytes(e, in.emb(r), 4 * l.dim);
      CopyBytes(e + l.dim, in.emb_state(r), 4 * l.emb_state);
    } else if (h[kEmbId] != kNoEmb) {
      embs.Free(h[kEmbId]);
      h[kEmbId] = kNoEmb;
    }
  }
};

MemTable::MemTable(MemTableOptions options) : options_(options) {
  assert(options_.shard_bits <= 16);
  for (size_t s = 0; s < (size_t{1} << options_.shard_bits); ++s) {
    shards_.push_back(std::make_unique<Shard>(options_.layout));
  }
}

MemTable::~MemTable() = default;

size_t MemTable::ShardOf(uint64_t key) const {
  if (options_.shard_bits == 0) return 0;
  return Mix64(key) >> (64 - options_.shard_bits);
}

void MemTable::GroupByShard(const uint64_t* keys, size_t n, std::vector<uint32_t>* order,
                            std::vector<uint32_t>* begin) const {
  const size_t S = shards_.size();
  std::vector<uint16_t> shard_of(n);
  begin->assign(S + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    shard_of[i] = static_cast<uint16_t>(ShardOf(keys[i]));
    ++(*begin)[shard_of[i] + 1];
  }
  for (size_t s = 0; s < S; ++s) (*begin)[s + 1] += (*begin)[s];
  std::vector<uint32_t> fill(begin->begin(), begin->end() - 1);
  order->resize(n);
  for (size_t i = 0; i < n; ++i) (*order)[fill[shard_of[i]]++] = static_cast<uint32_t>(i);
}

void MemTable::Pull(const uint64_t* keys, size_t n, const CtrAccessor* accessor, RowBlock* out,
                    ThreadPool* pool) const {
  assert(out->layout() == options_.layout);
  out->Resize(n);
  std::vector<uint32_t> order, begin;
  GroupByShard(keys, n, &order, &begin);
  auto task = [&](size_t s, int) {
    const Shard& shard = *shards_[s];
    std::lock_guard<std::mutex> lock(shard.mu);
    for (uint32_t k = begin[s]; k < begin[s + 1]; ++k) {
      const uint32_t i = order[k];
      size_t slot = shard.Probe(keys[i]);
      if (shard.rows[slot] != kEmpty) {
        out->key(i) = keys[i];
        shard.ReadRow(shard.rows[slot], out, i);
      } else if (accessor != nullptr) {
        accessor->InitRow(out, i, keys[i]);
      } else {
        out->ClearRow(i, keys[i]);
      }
    }
  };
  RunParallel(pool, shards_.size(), task);
}

void MemTable::Push(const RowBlock& rows, ThreadPool* pool) {
  assert(rows.layout() == options_.layout);
  const size_t n = rows.size();
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = rows.key(i);
  std::vector<uint32_t> order, begin;
  GroupByShard(keys.data(), n, &order, &begin);
  auto task = [&](size_t s, int) {
    Shard& shard = *shards_[s];
    std::lock_guard<std::mutex> lock(shard.mu);
    for (uint32_t k = begin[s]; k < begin[s + 1]; ++k) {
      const uint32_t i = order[k];
      bool inserted;
      uint32_t id = shard.FindOrInsert(keys[i], &inserted);
      shard.WriteRow(id, inserted, rows, i);
    }
  };
  RunParallel(pool, shards_.size(), task);
}

uint64_t MemTable::Shrink(const CtrAccessor& accessor, ThreadPool* pool) {
  std::vector<uint64_t> deleted(shards_.size(), 0);
  auto task = [&](size_t s, int) {
    Shard& shard = *shards_[s];
    std::lock_guard<std::mutex> lock(shard.mu);
    std::vector<uint64_t> doomed;
    for (size_t i = 0; i < shard.rows.size(); ++i) {
      if (shard.rows[i] == kEmpty) continue;
      uint32_t* h = shard.headers.Get(shard.rows[i]);
      float show = AsFloat(h[kShow]), click = AsFloat(h[kClick]);
      uint16_t unseen = static_cast<uint16_t>(h[kAge] & 0xFFFF);
      bool keep = accessor.ShrinkRow(&show, &click, &unseen);
      h[kShow] = AsWord(show);
      h[kClick] = AsWord(click);
      h[kAge] = (h[kAge] & 0xFFFF0000u) | unseen;
      if (!keep) doomed.push_back(shard.keys[i]);
    }
    for (uint64_t key : doomed) shard.EraseSlot(shard.Probe(key));
    deleted[s] = doomed.size();
  };
  RunParallel(pool, shards_.size(), task);
  uint64_t total = 0;
  for (uint64_t d : deleted) total += d;
  return total;
}

void MemTable::ExportShard(size_t s, RowBlock* out) const {
  const Shard& shard = *shards_[s];
  std::lock_guard<std::mutex> lock(shard.mu);
  out->Resize(shard.size);
  size_t r = 0;
  for (size_t i = 0; i < shard.rows.size(); ++i) {
    if (shard.rows[i] == kEmpty) continue;
    out->key(r) = shard.keys[i];
    shard.ReadRow(shard.rows[i], out, r);
    ++r;
  }
}

TableStats MemTable::Stats() const {
  TableStats st;
  const ValueLayout& l = options_.layout;
  for (const auto& sp : shards_) {
    const Shard& shard = *sp;
    std::lock_guard<std::mutex> lock(shard.mu);
    st.keys += shard.size;
    st.keys_with_emb += shard.embs.live();
    st.memory_bytes += shard.keys.capacity() * 8 + shard.rows.capacity() * 4 +
                       shard.headers.MemoryBytes() + shard.embs.MemoryBytes();
  }
  st.value_bytes = st.keys * (l.EncodedBytes(false) - 8) +
                   st.keys_with_emb * (l.EncodedBytes(true) - l.EncodedBytes(false));
  return st;
}

uint64_t MemTable::SparseDigest(ThreadPool* pool) const {
  std::vector<uint64_t> sums(shards_.size(), 0);
  auto task = [&](size_t s, int) {
    RowBlock rows(options_.layout);
    ExportShard(s, &rows);
    std::string enc;
    uint64_t sum = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      enc.clear();
      rows.EncodeRow(i, &enc);
      sum += Checksum64(enc);
    }
    sums[s] = sum;
  };
  RunParallel(pool, shards_.size(), task);
  uint64_t total = 0;
  for (uint64_t v : sums) total += v;
  return total;
}

}  // namespace ctrbox
