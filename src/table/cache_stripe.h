// CacheStripe: one level-1 stripe of the MEM-PS cache (docs/storage.md): an open-addressing index
// key -> row node (level 2), the rows in slab arenas, and per-row cache metadata.
//
// Thread safety: a stripe is its own lock (a clang capability, util/thread_annotations.h).
// Every method but the constructor and RowBytes REQUIRES it, held through a CacheStripe::Lock;
// the clang build checks each call (scripts/thread_safety). Inside a ForEachNode callback,
// which the analysis sees as another function, AssertLocked() states that the lock is held.
#ifndef CTRBOX_TABLE_CACHE_STRIPE_H_
#define CTRBOX_TABLE_CACHE_STRIPE_H_

#include <cstdint>
#include <vector>

#include "table/slab.h"
#include "table/value.h"
#include "util/hash.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ctrbox {

constexpr uint32_t kNoNode = 0xFFFFFFFFu;

// Cache state of a row.
enum NodeState : uint8_t {
  kDirty = 1,    // changed since it was last written to a group record
  kFresh = 2,    // a default row that was never pushed: never written, dropped at eviction
  kOnDisk = 4,   // the current group record of its group holds a version of this key
  kDiskEmb = 8,  // ... and that version has an embedding
  kErased = 16,  // not a row: a node id Erase freed (ForEachNodeById skips it)
};

struct NodeMeta {
  uint16_t pins = 0;   // Pulls holding the row (the AIBox LRU chain: rows in use)
  uint16_t epoch = 0;  // the table's pull epoch (pass) of the row's last pull (wraps)
  uint8_t state = 0;   // NodeState bits: written through CacheStripe::set_state only
};

// A stripe's bytes by owner (CacheStripe::Memory; MemoryBytes is their sum).
struct CacheMemory {
  uint64_t rows = 0;   // live header and embedding records
  uint64_t index = 0;  // the open-addressing index: a key and a node id per entry
  uint64_t meta = 0;   // per-node cache metadata
  uint64_t total() const { return rows + index + meta; }
  CacheMemory& operator+=(const CacheMemory& o) {
    rows += o.rows;
    index += o.index;
    meta += o.meta;
    return *this;
  }
};

class CAPABILITY("mutex") CacheStripe {
 public:
  explicit CacheStripe(const ValueLayout& layout);
  CacheStripe(const CacheStripe&) = delete;
  CacheStripe& operator=(const CacheStripe&) = delete;

  // Holds the stripe's lock for its lifetime.
  class SCOPED_CAPABILITY Lock {
   public:
    explicit Lock(const CacheStripe& stripe) ACQUIRE(stripe) : mu_(&stripe.mu_) { mu_->Lock(); }
    ~Lock() RELEASE() { mu_->Unlock(); }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    Mutex* const mu_;
  };
  // Tells the analysis the caller holds the lock (a callback run under it); no run-time check.
  void AssertLocked() const ASSERT_CAPABILITY(this) {}

  // The node of key, or kNoNode.
  uint32_t Find(uint64_t key) const REQUIRES(this);
  // Adds key (REQUIRES: absent) with a cleared row and zero metadata; returns its node.
  uint32_t Insert(uint64_t key) REQUIRES(this);
  // Removes the node and frees its records.
  void Erase(uint32_t node) REQUIRES(this);

  uint64_t key(uint32_t node) const REQUIRES(this);
  NodeMeta& meta(uint32_t node) REQUIRES(this) { return meta_[node]; }
  const NodeMeta& meta(uint32_t node) const REQUIRES(this) { return meta_[node]; }
  // Sets the node's state bits, counting the rows only memory holds as they change.
  void set_state(uint32_t node, uint8_t state) REQUIRES(this);
  // Rows neither kFresh nor kOnDisk: the keys this stripe adds to the disk's (TableStats::keys).
  uint64_t memory_only_rows() const REQUIRES(this) { return memory_only_; }
  bool has_emb(uint32_t node) const REQUIRES(this);
  // The row's show counter: its decayed occurrence count, the frequency the LFU order uses.
  float show(uint32_t node) const REQUIRES(this);

  // Hints (no effect on any result): fetch into the CPU cache what a later call will read, so
  // that a loop over many keys overlaps their cache misses instead of waiting for each in
  // turn. PrefetchSlot: the index slot Find(key) starts at. PrefetchNode: the node's header
  // record and metadata (what Pin, ReadRow and WriteRow touch first). PrefetchEmb: its
  // embedding record, whose place the header names (so call it a few keys after PrefetchNode);
  // `write` for a record about to be written.
  void PrefetchSlot(uint64_t key) const REQUIRES(this) {
    const size_t i = Mix64(key) & (keys_.size() - 1);
    __builtin_prefetch(&keys_[i]);
    __builtin_prefetch(&rows_[i]);
  }
  void PrefetchNode(uint32_t node, bool write) const REQUIRES(this) {
    if (write) {
      __builtin_prefetch(headers_.Get(node), 1);
      __builtin_prefetch(&meta_[node], 1);
    } else {
      __builtin_prefetch(headers_.Get(node));
      __builtin_prefetch(&meta_[node]);
    }
  }
  void PrefetchEmb(uint32_t node, bool write) const REQUIRES(this);

  // Copies the row of node into row r of out (key included).
  void ReadRow(uint32_t node, RowBlock* out, size_t r) const REQUIRES(this);
  // Appends the row of node in the canonical row encoding (value.h): the bytes ReadRow and
  // RowBlock::EncodeRow would give, copied from the slab's stored form (codes and state as
  // stored) without decoding it. Returns whether the row has an embedding.
  bool EncodeRow(uint32_t node, std::string* out) const REQUIRES(this);
  // Stores row r of `in` as the node's values (the key is not changed).
  void WriteRow(uint32_t node, const RowBlock& in, size_t r) REQUIRES(this);

  // Moves the live records into fresh arenas, renumbering the nodes, when the arenas hold more
  // than twice the live records plus a slab's worth (free records are reused but never given
  // back: a stripe that once held many rows keeps their memory, e.g. after loading a saved
  // model, whose file comes stripe by stripe, each stripe filled to its whole size in turn).
  // Does nothing while a row of the stripe is pinned (a pull holds its nodes' ids). Returns
  // whether it moved them.
  bool CompactArenas() REQUIRES(this);
  // Notes the embedding records the stripe holds now into its high-water mark (the most held
  // at the top of a round, falling by 1/32 a round): called before an eviction round cuts it,
  // when its rows are at the top of their rise and fall.
  void NoteHighWater() REQUIRES(this);
  // Gives back the embedding slabs the stripe's rows no longer need: those past what its
  // high-water mark (or its live records, if more) takes, once they are more than an eighth
  // of it (SlabArena::ShrinkLimit), so that the slabs follow the stripe's share of the budget
  // down as the files' filters and index take more of it, and are not given back and taken
  // again within each round's fall and rise. The records past the cut move into free places
  // below it. Node ids do not change, so pinned rows may move too: their embeddings are
  // reached through their header only, under this lock. Returns the bytes freed.
  size_t ShrinkArenas() REQUIRES(this);

  size_t size() const REQUIRES(this) { return size_; }
  // Bytes of the index, the live row records and the metadata: what the memory budget
  // counts (slab records freed by eviction are reused before new slabs are allocated).
  size_t MemoryBytes() const REQUIRES(this) { return Memory().total(); }
  CacheMemory Memory() const REQUIRES(this);
  // Bytes allocated: as MemoryBytes, but whole slabs (live or free records).
  size_t AllocatedBytes() const REQUIRES(this);
  // Of AllocatedBytes, the embedding slabs' (what ShrinkArenas gives back).
  size_t EmbeddingSlabBytes() const REQUIRES(this);
  // Bytes a row with an embedding may cost, for budgets: its records, and its share of the
  // index and the metadata at their least load (the index doubles above a load of 0.7 and
  // halves below 0.3; the metadata vector doubles); of the largest table's rows in a
  // multi-table layout. Depends on the layout only: no lock needed.
  size_t RowBytes() const { return RowBytesFor(layout_); }
  static size_t RowBytesFor(const ValueLayout& layout);
  // An index entry: a key and a node id.
  static constexpr size_t kIndexEntryBytes = 8 + 4;
  // Bytes of an empty stripe's index (it never shrinks below this), for budgets.
  static constexpr size_t kMinIndexEntries = 64;
  static constexpr size_t MinIndexBytes() { return kMinIndexEntries * kIndexEntryBytes; }

  // Calls f(node) for every live node, with the lock held.
  template <typename F>
  void ForEachNode(F f) const REQUIRES(this) {
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (rows_[i] != kNoNode) f(rows_[i]);
    }
  }
  // The same in node id order, so that f reading a node's metadata and header reads them in
  // address order (ForEachNode goes in the index's order: at random).
  template <typename F>
  void ForEachNodeById(F f) const REQUIRES(this) {
    const uint32_t n = static_cast<uint32_t>(headers_.allocated());
    for (uint32_t node = 0; node < n; ++node) {
      if (!(meta_[node].state & kErased)) f(node);
    }
  }

 private:
  size_t Probe(uint64_t key) const;
  void Rehash(size_t capacity);

  mutable Mutex mu_;
  // Immutable after construction.
  ValueLayout layout_;
  Quantizer quant_;
  // Per table of the layout (one without tables): 32-bit words of the stored embedding (codes
  // are packed) and of the stored state (bfloat16 pairs are packed), and the arena of their
  // records (a row's embedding id indexes its table's arena).
  std::vector<uint32_t> emb_words_, state_words_;
  // The index, the records and the metadata: guarded by the stripe (mu_), which every public
  // method requires.
  std::vector<uint64_t> keys_;  // open addressing, linear probing
  std::vector<uint32_t> rows_;  // node per stripe, kNoNode when free
  size_t size_ = 0;
  size_t memory_only_ = 0;  // nodes whose state has neither kFresh nor kOnDisk
  SlabArena headers_;
  std::vector<SlabArena> embs_;
  std::vector<size_t> high_water_;  // per table: embedding records, NoteHighWater's mark
  std::vector<NodeMeta> meta_;      // by node id
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_CACHE_STRIPE_H_
