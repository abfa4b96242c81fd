// bfloat16: the upper 16 bits of an IEEE float32 (sign, 8 exponent bits, 7 mantissa bits).
// ctrbox stores optimizer state in it (optimizer.sparse.state_bits: 16; docs/quantization.md):
// the trainer rounds the state after every update, so a stored value is a float32 whose low
// 16 bits are zero and keeping only the upper half is exact.
//
// Rounding is stochastic: x rounds up to the next bfloat16 with probability (low 16 bits of
// x) / 65536, so E[round(x)] = x. Round-to-nearest would lose every Adagrad increment smaller
// than half a bfloat16 step (2^-9 of the sum), which stalls the sum of squares of hot rows.
// NaN stays NaN and infinity stays infinity.
#ifndef CTRBOX_UTIL_BF16_H_
#define CTRBOX_UTIL_BF16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "util/hd.h"

namespace ctrbox {

CTRBOX_HD inline uint32_t FloatBits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
CTRBOX_HD inline float BitsFloat(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// The bfloat16 of x, truncated (exact when x is a bfloat16 value).
CTRBOX_HD inline uint16_t Bf16Of(float x) { return static_cast<uint16_t>(FloatBits(x) >> 16); }
CTRBOX_HD inline float FloatOfBf16(uint16_t h) { return BitsFloat(uint32_t{h} << 16); }

// The upper halves of x[0..n) into out[0..2n) (little-endian, unaligned), and back: the stored
// form of bfloat16 state.
inline void PackBf16(const float* x, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = Bf16Of(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
inline void UnpackBf16(const char* in, size_t n, float* x) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    x[i] = FloatOfBf16(h);
  }
}

// x rounded stochastically to a bfloat16 value with the uniform 16-bit draw `r`.
CTRBOX_HD inline float RoundBf16(float x, uint32_t r) {
  const uint32_t b = FloatBits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return BitsFloat((b | 0x00400000u) & 0xFFFF0000u);  // NaN
  if ((b & 0x7FFFFFFFu) == 0x7F800000u) return x;  // infinity
  // Adding r to the low half carries into the upper half with probability low / 2^16. At the
  // largest finite magnitudes the carry may reach infinity, as float32 rounding would.
  return BitsFloat((b + (r & 0xFFFFu)) & 0xFFFF0000u);
}

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_BF16_H_
