#include "table/cache_stripe.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

// Header record words: key (2), show, click, unseen | flags << 16, embedding id, wide,
// wide_state...
constexpr size_t kKey = 0, kShow = 2, kClick = 3, kAge = 4, kEmbId = 5, kWide = 6, kWideState = 7;
constexpr uint32_t kNoEmb = 0xFFFFFFFFu;

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

CacheStripe::CacheStripe(const ValueLayout& layout)
    : layout_(layout), quant_(layout.quantizer()), headers_(kWideState + layout.wide_state) {
  for (uint32_t t = 0; t < layout.tables; ++t) {
    const ValueLayout l = layout.Table(t);
    emb_words_.push_back(static_cast<uint32_t>((l.EmbBytes() + 3) / 4));
    state_words_.push_back(static_cast<uint32_t>((l.StateBytes() + 3) / 4));
    embs_.emplace_back(emb_words_.back() + state_words_.back());
  }
  Rehash(kMinIndexEntries);
}

size_t CacheStripe::Probe(uint64_t key) const {
  const size_t mask = keys_.size() - 1;
  size_t i = Mix64(key) & mask;
  while (rows_[i] != kNoNode && keys_[i] != key) i = (i + 1) & mask;
  return i;
}

void CacheStripe::Rehash(size_t capacity) {
  std::vector<uint64_t> old_keys(capacity);
  std::vector<uint32_t> old_rows(capacity, kNoNode);
  old_keys.swap(keys_);
  old_rows.swap(rows_);
  for (size_t i = 0; i < old_rows.size(); ++i) {
    if (old_rows[i] == kNoNode) continue;
    size_t j = Probe(old_keys[i]);
    keys_[j] = old_keys[i];
    rows_[j] = old_rows[i];
  }
}

uint32_t CacheStripe::Find(uint64_t key) const { return rows_[Probe(key)]; }

uint32_t CacheStripe::Insert(uint64_t key) {
  if ((size_ + 1) * 10 > keys_.size() * 7) Rehash(keys_.size() * 2);
  const size_t i = Probe(key);
  const uint32_t node = headers_.Allocate();
  keys_[i] = key;
  rows_[i] = node;
  ++size_;
  if (node >= meta_.size()) meta_.resize(std::max<size_t>(node + 1, meta_.size() * 2));
  meta_[node] = NodeMeta{};
  ++memory_only_;  // state 0
  uint32_t* h = headers_.Get(node);
  std::memcpy(h + kKey, &key, 8);
  h[kShow] = h[kClick] = h[kAge] = h[kWide] = 0;
  h[kEmbId] = kNoEmb;
  ZeroBytes(h + kWideState, 4 * layout_.wide_state);
  return node;
}

namespace {
size_t MemoryOnly(uint8_t state) { return (state & (kFresh | kOnDisk)) == 0 ? 1 : 0; }
}  // namespace

void CacheStripe::set_state(uint32_t node, uint8_t state) {
  memory_only_ += MemoryOnly(state);
  memory_only_ -= MemoryOnly(meta_[node].state);
  meta_[node].state = state;
}

void CacheStripe::Erase(uint32_t node) {
  memory_only_ -= MemoryOnly(meta_[node].state);
  meta_[node] = NodeMeta{};
  meta_[node].state = kErased;  // (Insert gives the id out again with its metadata cleared)
  uint32_t* h = headers_.Get(node);
  const uint64_t k = key(node);
  if (h[kEmbId] != kNoEmb) embs_[layout_.TableOf(k)].Free(h[kEmbId]);
  headers_.Free(node);
  // Backward-shift deletion from the linear-probing index.
  const size_t mask = keys_.size() - 1;
  size_t i = Probe(k);
  size_t j = i;
  while (true) {
    j = (j + 1) & mask;
    if (rows_[j] == kNoNode) break;
    const size_t home = Mix64(keys_[j]) & mask;
    const bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    keys_[i] = keys_[j];
    rows_[i] = rows_[j];
    i = j;
  }
  rows_[i] = kNoNode;
  --size_;
  // Give memory back once the index is sparse (the budget counts its capacity): below a load
  // of 0.3 it halves (to below 0.6; it doubles above 0.7), so the index costs at most
  // 12 / 0.3 = 40 bytes per row held, whatever the cache held before (RowBytesFor).
  if (keys_.size() > kMinIndexEntries && size_ * 10 < keys_.size() * 3) {
    Rehash(keys_.size() / 2);
  }
}

uint64_t CacheStripe::key(uint32_t node) const {
  uint64_t k;
  std::memcpy(&k, headers_.Get(node) + kKey, 8);
  return k;
}

bool CacheStripe::has_emb(uint32_t node) const { return headers_.Get(node)[kEmbId] != kNoEmb; }

float CacheStripe::show(uint32_t node) const { return AsFloat(headers_.Get(node)[kShow]); }

void CacheStripe::PrefetchEmb(uint32_t node, bool write) const {
  const uint32_t* h = headers_.Get(node);
  if (h[kEmbId] == kNoEmb) return;
  uint64_t k;
  std::memcpy(&k, h + kKey, 8);
  const SlabArena& arena = embs_[layout_.TableOf(k)];
  const char* e = reinterpret_cast<const char*>(arena.Get(h[kEmbId]));
  const size_t bytes = arena.words() * 4;
  // Every cache line the record touches (a record need not start at a line).
  const uintptr_t first = reinterpret_cast<uintptr_t>(e) & ~uintptr_t{63};
  for (uintptr_t a = first; a < reinterpret_cast<uintptr_t>(e) + bytes; a += 64) {
    if (write) {
      __builtin_prefetch(reinterpret_cast<const void*>(a), 1);
    } else {
      __builtin_prefetch(reinterpret_cast<const void*>(a));
    }
  }
}

void CacheStripe::ReadRow(uint32_t node, RowBlock* out, size_t r) const {
  const uint32_t* h = headers_.Get(node);
  std::memcpy(&out->key(r), h + kKey, 8);
  out->show(r) = AsFloat(h[kShow]);
  out->click(r) = AsFloat(h[kClick]);
  out->unseen(r) = static_cast<uint16_t>(h[kAge] & 0xFFFF);
  out->flags(r) = static_cast<uint16_t>(h[kAge] >> 16);
  out->wide(r) = AsFloat(h[kWide]);
  CopyBytes(out->wide_state(r), h + kWideState, 4 * layout_.wide_state);
  if (h[kEmbId] != kNoEmb) {
    const uint64_t k = out->key(r);
    const uint32_t t = layout_.TableOf(k), dim = layout_.DimOf(k);
    const uint32_t* e = embs_[t].Get(h[kEmbId]);
    if (layout_.multi()) {  // a smaller table's row leaves the rest zero
      ZeroBytes(out->emb(r), 4 * layout_.dim);
      ZeroBytes(out->emb_state(r), 4 * layout_.emb_state);
    }
    if (quant_.enabled()) {
      quant_.Decode(reinterpret_cast<const char*>(e), dim, out->emb(r));
    } else {
      CopyBytes(out->emb(r), e, 4 * dim);
    }
    LoadState(layout_, reinterpret_cast<const char*>(e + emb_words_[t]), layout_.StateOf(k),
              out->emb_state(r));
  } else {
    ZeroBytes(out->emb(r), 4 * layout_.dim);
    ZeroBytes(out->emb_state(r), 4 * layout_.emb_state);
  }
}

bool CacheStripe::EncodeRow(uint32_t node, std::string* out) const {
  const uint32_t* h = headers_.Get(node);
  const uint16_t flags = static_cast<uint16_t>(h[kAge] >> 16);
  const uint16_t unseen = static_cast<uint16_t>(h[kAge] & 0xFFFF);
  const bool emb = flags & kFlagHasEmb;
  const uint64_t k = key(node);
  const uint32_t t = layout_.TableOf(k), dim = layout_.DimOf(k), states = layout_.StateOf(k);
  const size_t emb_bytes = quant_.StoredBytes(dim);
  const size_t state_bytes = size_t{states} * (layout_.state_bits == 16 ? 2 : 4);
  const size_t at = out->size();
  out->resize(at + 24 + 4 * size_t{layout_.wide_state} + (emb ? emb_bytes + state_bytes : 0));
  char* p = out->data() + at;
  std::memcpy(p, h + kKey, 8);
  std::memcpy(p + 8, h + kShow, 4);
  std::memcpy(p + 12, h + kClick, 4);
  std::memcpy(p + 16, &unseen, 2);
  std::memcpy(p + 18, &flags, 2);
  std::memcpy(p + 20, h + kWide, 4);
  std::memcpy(p + 24, h + kWideState, 4 * size_t{layout_.wide_state});
  if (!emb) return false;
  p += 24 + 4 * size_t{layout_.wide_state};
  // WriteRow stores an embedding exactly when the row's flags say it has one.
  assert(h[kEmbId] != kNoEmb);
  const uint32_t* e = embs_[t].Get(h[kEmbId]);
  std::memcpy(p, e, emb_bytes);
  std::memcpy(p + emb_bytes, e + emb_words_[t], state_bytes);
  return true;
}

void CacheStripe::WriteRow(uint32_t node, const RowBlock& in, size_t r) {
  uint32_t* h = headers_.Get(node);
  h[kShow] = AsWord(in.show(r));
  h[kClick] = AsWord(in.click(r));
  h[kAge] = uint32_t{in.unseen(r)} | (uint32_t{in.flags(r)} << 16);
  h[kWide] = AsWord(in.wide(r));
  CopyBytes(h + kWideState, in.wide_state(r), 4 * layout_.wide_state);
  const uint64_t k = key(node);
  const uint32_t t = layout_.TableOf(k);
  if (in.has_emb(r)) {
    if (h[kEmbId] == kNoEmb) h[kEmbId] = embs_[t].Allocate();
    uint32_t* e = embs_[t].Get(h[kEmbId]);
    const uint32_t dim = layout_.DimOf(k);
    if (quant_.enabled()) {
      quant_.Encode(in.emb(r), dim, reinterpret_cast<char*>(e));
    } else {
      CopyBytes(e, in.emb(r), 4 * dim);
    }
    StoreState(layout_, in.emb_state(r), layout_.StateOf(k),
               reinterpret_cast<char*>(e + emb_words_[t]));
  } else if (h[kEmbId] != kNoEmb) {
    embs_[t].Free(h[kEmbId]);
    h[kEmbId] = kNoEmb;
  }
}

bool CacheStripe::CompactArenas() {
  constexpr size_t kSlack = 256;  // a slab's records
  bool slack = headers_.allocated() > 2 * headers_.live() + kSlack;
  for (const SlabArena& a : embs_) slack = slack || a.allocated() > 2 * a.live() + kSlack;
  if (!slack) return false;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i] != kNoNode && meta_[rows_[i]].pins > 0) return false;
  }
  SlabArena headers(headers_.words());
  std::vector<SlabArena> embs;
  for (const SlabArena& a : embs_) embs.emplace_back(a.words());
  std::vector<NodeMeta> meta(size_);
  for (size_t i = 0; i < rows_.size(); ++i) {
    const uint32_t old = rows_[i];
    if (old == kNoNode) continue;
    const uint32_t node = headers.Allocate();  // 0, 1, 2, ...: node < size_
    uint32_t* h = headers.Get(node);
    std::memcpy(h, headers_.Get(old), 4 * headers_.words());
    if (h[kEmbId] != kNoEmb) {
      const uint32_t t = layout_.TableOf(keys_[i]);
      const uint32_t e = embs[t].Allocate();
      std::memcpy(embs[t].Get(e), embs_[t].Get(h[kEmbId]), 4 * embs_[t].words());
      h[kEmbId] = e;
    }
    meta[node] = meta_[old];
    rows_[i] = node;
  }
  headers_ = std::move(headers);
  embs_ = std::move(embs);
  meta_ = std::move(meta);
  return true;
}

void CacheStripe::NoteHighWater() {
  // The most it held at a round's top, falling by 1/32 a round: a round that finds it lower
  // than before (it was cut further last time) does not make its slabs go and come back; a
  // share that stays lower for rounds does.
  high_water_.resize(embs_.size());
  for (size_t t = 0; t < embs_.size(); ++t) {
    high_water_[t] = std::max(embs_[t].live(), high_water_[t] - high_water_[t] / 32);
  }
}

size_t CacheStripe::ShrinkArenas() {
  size_t freed = 0;
  for (uint32_t t = 0; t < embs_.size(); ++t) {
    SlabArena& arena = embs_[t];
    const uint32_t limit = arena.ShrinkLimit(t < high_water_.size() ? high_water_[t] : 0);
    if (limit >= arena.allocated()) continue;
    freed += arena.Shrink(limit, [&](auto&& move) {
      AssertLocked();  // (called under it, by Shrink)
      ForEachNodeById([&](uint32_t node) {
        AssertLocked();
        uint32_t* h = headers_.Get(node);
        if (h[kEmbId] == kNoEmb || (embs_.size() > 1 && layout_.TableOf(key(node)) != t)) return;
        move(h[kEmbId]);
      });
    });
  }
  return freed;
}

CacheMemory CacheStripe::Memory() const {
  CacheMemory m;
  m.rows = headers_.live() * 4 * (kWideState + layout_.wide_state);
  for (size_t t = 0; t < embs_.size(); ++t) {
    m.rows += embs_[t].live() * 4 * (emb_words_[t] + state_words_[t]);
  }
  static_assert(kIndexEntryBytes == sizeof(uint64_t) + sizeof(uint32_t));
  m.index = keys_.capacity() * sizeof(uint64_t) + rows_.capacity() * sizeof(uint32_t);
  m.meta = meta_.capacity() * sizeof(NodeMeta);
  return m;
}

size_t CacheStripe::AllocatedBytes() const {
  const CacheMemory m = Memory();
  size_t bytes = m.index + m.meta + headers_.MemoryBytes();
  for (const SlabArena& a : embs_) bytes += a.MemoryBytes();
  return bytes;
}

size_t CacheStripe::EmbeddingSlabBytes() const {
  size_t bytes = 0;
  for (const SlabArena& a : embs_) bytes += a.MemoryBytes();
  return bytes;
}

size_t CacheStripe::RowBytesFor(const ValueLayout& layout) {
  const size_t emb_words = (layout.EmbBytes() + 3) / 4, state_words = (layout.StateBytes() + 3) / 4;
  return 4 * (kWideState + layout.wide_state + emb_words + state_words) + 2 * sizeof(NodeMeta) +
         kIndexEntryBytes * 10 / 3;
}

}  // namespace ctrbox
