#include "table/slab.h"

#include <sys/mman.h>

namespace ctrbox {

void SlabArena::ReleaseSlab(Slab slab, size_t bytes) {
  // The pages wholly inside the slab (the allocator's own bytes sit just before it). Best
  // effort: where madvise fails they stay resident until reused, as they did before.
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(slab.get()) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(slab.get()) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  slab.reset();
}

}  // namespace ctrbox
