#include "feature/column.h"

#include <algorithm>

namespace ctrbox {

Arena::Arena(int lanes, size_t block_bytes) : block_bytes_(block_bytes) { EnsureLanes(lanes); }

void Arena::EnsureLanes(int n) {
  if (static_cast<int>(lanes_.size()) < n) lanes_.resize(n);
}

void* Arena::Allocate(size_t bytes, int lane) {
  Lane& l = lanes_[lane];
  bytes = (std::max<size_t>(bytes, 1) + kAlign - 1) & ~(kAlign - 1);
  while (true) {
    if (l.current < l.blocks.size()) {
      Block& b = l.blocks[l.current];
      if (l.used + bytes <= b.size) {
        void* p = b.mem.get() + b.offset + l.used;
        l.used += bytes;
        return p;
      }
      if (l.current + 1 < l.blocks.size() && l.blocks[l.current + 1].size >= bytes) {
        ++l.current;
        l.used = 0;
        continue;
      }
    }
    // A new block after the current one (blocks too small for this request stay for later
    // chunks; a large request gets a block of its own size).
    Block b;
    b.size = std::max(block_bytes_, bytes);
    // new[] of char is aligned to __STDCPP_DEFAULT_NEW_ALIGNMENT__; over-allocate to align.
    b.mem.reset(new char[b.size + kAlign]);
    const size_t shift = (kAlign - reinterpret_cast<uintptr_t>(b.mem.get()) % kAlign) % kAlign;
    // Keep the aligned start: store the block with its usable range beginning at `shift`.
    Block aligned;
    aligned.size = b.size;
    aligned.mem = std::move(b.mem);
    aligned.offset = shift;
    const size_t at = l.blocks.empty() ? 0 : l.current + 1;
    l.blocks.insert(l.blocks.begin() + std::min(at, l.blocks.size()), std::move(aligned));
    l.current = std::min(at, l.blocks.size() - 1);
    l.used = 0;
  }
}

void Arena::Reset() {
  for (Lane& l : lanes_) {
    l.current = 0;
    l.used = 0;
  }
}

size_t Arena::capacity() const {
  size_t c = 0;
  for (const Lane& l : lanes_) {
    for (const Block& b : l.blocks) c += b.size;
  }
  return c;
}

}  // namespace ctrbox
