// SlabArena: fixed-size records in 256-record slabs, with a free list. A record keeps its id
// until Shrink moves it (the arena's owner rewrites its references). Thread safety: not
// thread-safe (owned by one cache stripe).
#ifndef CTRBOX_TABLE_SLAB_H_
#define CTRBOX_TABLE_SLAB_H_

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace ctrbox {

class SlabArena {
 public:
  explicit SlabArena(size_t words_per_record) : words_(words_per_record ? words_per_record : 1) {}
  SlabArena(SlabArena&&) = default;
  SlabArena& operator=(SlabArena&&) = default;

  uint32_t Allocate() {
    if (!free_.empty()) {
      uint32_t id = free_.back();
      free_.pop_back();
      return id;
    }
    if ((next_ >> kSlabShift) == slabs_.size()) {
      slabs_.push_back(NewSlab());
    }
    return next_++;
  }
  void Free(uint32_t id) { free_.push_back(id); }
  uint32_t* Get(uint32_t id) { return slabs_[id >> kSlabShift].get() + (id & kSlabMask) * words_; }
  const uint32_t* Get(uint32_t id) const {
    return slabs_[id >> kSlabShift].get() + (id & kSlabMask) * words_;
  }
  size_t live() const { return next_ - free_.size(); }
  size_t allocated() const { return next_; }  // records ever handed out (live or free)
  size_t words() const { return words_; }     // per record
  size_t MemoryBytes() const { return slabs_.size() * SlabBytes() + free_.capacity() * 4; }

  // Where Shrink would cut the arena, in records (a whole number of slabs), or allocated()
  // when it would not: only once the slabs past those `room` records (at least the live ones)
  // need exceed an eighth of them (at least two slabs), and then down to a sixteenth above (at
  // least one slab). The owner passes as room what it expects to hold again soon.
  uint32_t ShrinkLimit(size_t room = 0) const {
    const size_t need = (std::max(room, live()) + kSlabMask) >> kSlabShift;
    if (slabs_.size() <= need + std::max<size_t>(2, need / 8)) return next_;
    const size_t keep = std::min(slabs_.size(), need + std::max<size_t>(1, need / 16));
    return static_cast<uint32_t>(std::min<size_t>(next_, keep << kSlabShift));
  }
  // Moves every live record at or past `limit` (ShrinkLimit's) to a free id below it and frees
  // the slabs past it, giving their pages back to the system. for_each_ref(fn) must call
  // fn(uint32_t& id) once for every live record's id, held where its owner keeps it: the id
  // is rewritten there. Record contents move bit for bit. Returns the bytes freed.
  template <typename ForEachRef>
  size_t Shrink(uint32_t limit, ForEachRef&& for_each_ref) {
    assert(limit >= live() && limit <= next_ && (limit == next_ || (limit & kSlabMask) == 0));
    if (limit >= next_) return 0;
    std::vector<uint32_t> holes;  // the free ids below the limit, highest first
    holes.reserve(free_.size());
    for (uint32_t id : free_) {
      if (id < limit) holes.push_back(id);
    }
    std::sort(holes.begin(), holes.end(), [](uint32_t a, uint32_t b) { return a > b; });
    for_each_ref([&](uint32_t& id) {
      if (id < limit) return;
      assert(!holes.empty());
      const uint32_t to = holes.back();  // the lowest: records stay packed towards id 0
      holes.pop_back();
      std::memcpy(Get(to), Get(id), 4 * words_);
      id = to;
    });
    const size_t freed = (slabs_.size() - (limit >> kSlabShift)) * SlabBytes();
    for (size_t s = limit >> kSlabShift; s < slabs_.size(); ++s) {
      ReleaseSlab(std::move(slabs_[s]), SlabBytes());
    }
    slabs_.resize(limit >> kSlabShift);
    next_ = limit;
    free_ = std::move(holes);
    free_.shrink_to_fit();
    return freed;
  }

 private:
  static constexpr uint32_t kSlabShift = 8;  // 256 records: little waste per stripe
  static constexpr uint32_t kSlabMask = (1u << kSlabShift) - 1;
  using Slab = std::unique_ptr<uint32_t[]>;
  size_t SlabBytes() const { return (words_ << kSlabShift) * 4; }
  Slab NewSlab() const { return std::make_unique<uint32_t[]>(words_ << kSlabShift); }
  // Frees a slab of `bytes` after giving back the whole pages inside it: the allocator keeps a
  // block of this size (tens of KB) for later allocations, its pages resident otherwise.
  static void ReleaseSlab(Slab slab, size_t bytes);

  size_t words_;
  std::vector<Slab> slabs_;
  uint32_t next_ = 0;
  std::vector<uint32_t> free_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_SLAB_H_
