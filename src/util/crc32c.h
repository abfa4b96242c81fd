// CRC32C (Castagnoli), the checksum of every SSD-PS record. Uses the SSE4.2 crc32
// instruction when the CPU has it, a table otherwise; both give the same values.
#ifndef CTRBOX_UTIL_CRC32C_H_
#define CTRBOX_UTIL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace ctrbox {

// Extends `crc` (the CRC32C of some bytes, 0 for none) with data[0..n).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The table-driven implementation (for tests of the hardware path).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_CRC32C_H_
