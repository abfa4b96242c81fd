// Where CudaExec::Stage puts a host-to-device copy's bytes in its pinned staging blocks: each
// copy starts at a 256-byte boundary after the block's last one, in the first block with room;
// a copy that fits none gets a new block of at least kMinBlock bytes. Plain arithmetic, so
// that every machine tests it (host_exec_test.cc): a block's `used` may end past its size
// (rounded up after its last copy), and the room left must not underflow then (it did: a
// 12 M-key pass's rows, one copy larger than a block and not a multiple of 256 bytes, made the
// next copy write past the block's end).
#ifndef CTRBOX_EXEC_STAGING_H_
#define CTRBOX_EXEC_STAGING_H_

#include <algorithm>
#include <cstddef>

namespace ctrbox {

struct StagingBlock {
  static constexpr size_t kAlign = 256;
  static constexpr size_t kMinBlock = size_t{64} << 20;
  size_t size = 0;  // bytes
  size_t used = 0;  // the next copy's offset (a multiple of kAlign; may exceed size)

  // Whether n more bytes fit at `used`.
  constexpr bool Fits(size_t n) const { return used <= size && n <= size - used; }
  // Takes n bytes (REQUIRES: Fits(n)); returns their offset.
  constexpr size_t Take(size_t n) {
    const size_t at = used;
    used = (at + n + kAlign - 1) / kAlign * kAlign;
    return at;
  }
  // The size of a new block for a copy of n bytes.
  static constexpr size_t SizeFor(size_t n) { return std::max(kMinBlock, n); }
};

}  // namespace ctrbox

#endif  // CTRBOX_EXEC_STAGING_H_
