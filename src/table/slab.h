// SlabArena: fixed-size records in 256-record slabs, with a free list. Record ids are
// stable (records never move). Thread safety: not thread-safe (owned by one cache stripe).
#ifndef CTRBOX_TABLE_SLAB_H_
#define CTRBOX_TABLE_SLAB_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace ctrbox {

class SlabArena {
 public:
  explicit SlabArena(size_t words_per_record) : words_(words_per_record ? words_per_record : 1) {}

  uint32_t Allocate() {
    if (!free_.empty()) {
      uint32_t id = free_.back();
      free_.pop_back();
      return id;
    }
    if ((next_ >> kSlabShift) == slabs_.size()) {
      slabs_.push_back(std::make_unique<uint32_t[]>(words_ << kSlabShift));
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
  size_t MemoryBytes() const {
    return slabs_.size() * (words_ << kSlabShift) * 4 + free_.capacity() * 4;
  }

 private:
  static constexpr uint32_t kSlabShift = 8;  // 256 records: little waste per stripe
  static constexpr uint32_t kSlabMask = (1u << kSlabShift) - 1;
  size_t words_;
  std::vector<std::unique_ptr<uint32_t[]>> slabs_;
  uint32_t next_ = 0;
  std::vector<uint32_t> free_;
};

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_SLAB_H_
