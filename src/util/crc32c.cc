#include "util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ctrbox {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle, so one
// dependent chain runs at a third of its speed. Long inputs are cut into blocks of three
// streams of L bytes whose CRCs run in parallel and are then combined. With R(c, X) the raw
// (uninverted) register after feeding X from c, R is linear, so
//   R(c, A|B|C) = S(S(R(c, A)) ^ R(0, B)) ^ R(0, C),  S(r) = R(r, L zero bytes),
// and S, being linear in r, is four table lookups (ShiftTable).
struct ShiftTable {
  uint32_t t[4][256];
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

__attribute__((target("sse4.2"))) ShiftTable MakeShiftTable(size_t len) {
  ShiftTable s;
  for (int b = 0; b < 4; ++b) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint64_t c = uint64_t{v} << (8 * b);
      for (size_t i = 0; i < len; i += 8) c = _mm_crc32_u64(c, 0);
      s.t[b][v] = static_cast<uint32_t>(c);
    }
  }
  return s;
}

template <size_t L>
__attribute__((target("sse4.2"))) inline void ThreeStreams(uint64_t* crc, const uint8_t** data,
                                                           size_t* n) {
  static_assert(L % 8 == 0);
  if (*n < 3 * L) return;
  static const ShiftTable shift = MakeShiftTable(L);
  const uint8_t* p = *data;
  uint64_t c = *crc;
  for (; *n >= 3 * L; *n -= 3 * L, p += 3 * L) {
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < L; i += 8) {
      uint64_t a, b, d;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p + L + i, 8);
      std::memcpy(&d, p + 2 * L + i, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, d);
    }
    c = shift(shift(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1)) ^
        static_cast<uint32_t>(c2);
  }
  *crc = c;
  *data = p;
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  uint64_t c = ~crc;
  ThreeStreams<1024>(&c, &p, &n);  // records of whole groups (kilobytes)
  ThreeStreams<64>(&c, &p, &n);    // rows and what is left of a record
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool HaveSse42() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return have;
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n--) c = kTable[(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HaveSse42()) return ExtendHardware(crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cExtendPortable(crc, data, n);
}

}  // namespace ctrbox
