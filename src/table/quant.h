// Quantized embeddings (docs/quantization.md; the SIGMOD'21 paper, §3): a stored embedding
// element is a signed b-bit integer code i, its value i * Δ with Δ = 2w / (2^b - 1), for a
// range [-w, w]. Codes lie in [-(2^(b-1) - 1), 2^(b-1) - 1]: symmetric, zero exact.
//
// Rounding a float x to a code: clip x to [-w, w], then i = floor(x / Δ + u), clamped to the
// code range, with u = 1/2 (nearest, FixQ) or u uniform in [0, 1) (stochastic, StocQ; unbiased:
// E[i Δ] = x inside the grid). The trainer rounds after every sparse update, so the values that
// reach the table are on the grid and storing them as codes is exact.
#ifndef CTRBOX_TABLE_QUANT_H_
#define CTRBOX_TABLE_QUANT_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/hd.h"
#include "util/random.h"

namespace ctrbox {

enum class QuantRounding { kStochastic, kNearest };
bool ParseQuantRounding(std::string_view name, QuantRounding* out);
std::string_view QuantRoundingName(QuantRounding r);

// storage.quant.* (docs/config.md). bits 0: embeddings stored as float32.
struct QuantOptions {
  uint32_t bits = 0;   // 0, or 2..16 (stored in 1 byte up to 8 bits, else 2)
  float range = 1.0f;  // w
  QuantRounding rounding = QuantRounding::kStochastic;
  bool operator==(const QuantOptions&) const = default;
};

// Bytes of one stored element at `bits` (0: a float32): 1 up to 8 bits, 2 up to 16.
constexpr uint32_t StoredElementBytes(uint32_t bits) { return bits == 0 ? 4 : bits <= 8 ? 1 : 2; }

// The grid for `bits` and `range`. A small value type; thread-safe (immutable).
class Quantizer {
 public:
  static constexpr uint32_t kMinBits = 2, kMaxBits = 16;

  Quantizer() = default;  // disabled (float32)
  // REQUIRES: bits == 0 or kMinBits <= bits <= kMaxBits; range > 0 and finite.
  Quantizer(uint32_t bits, float range);

  CTRBOX_HD bool enabled() const { return bits_ != 0; }
  uint32_t bits() const { return bits_; }
  float range() const { return range_; }
  double delta() const { return delta_; }
  int32_t max_code() const { return max_code_; }
  // Bytes of one stored code: 1 up to 8 bits, 2 above.
  uint32_t code_bytes() const { return bits_ <= 8 ? 1 : 2; }
  // Bytes of n stored elements (4 each when disabled).
  size_t StoredBytes(uint32_t n) const { return size_t{n} * StoredElementBytes(bits_); }

  // floor(clip(x) / Δ + u), clamped to the code range; x == Value(i) (the float nearest a
  // grid point) gives i. NaN gives 0.
  CTRBOX_HD int32_t Code(float x, float u) const {  // inline: called per element on every update
    if (std::isnan(x)) return 0;
    const double w = range_;
    double f = std::clamp(static_cast<double>(x), -w, w) * inv_delta_;
    // The float of a grid point (what Value returns) is that point: i * Δ is rarely a
    // float, and re-rounding Value(i) must give i again, whatever u.
    const double nearest = std::nearbyint(f);
    if (std::fabs(nearest) <= max_code_ && Value(static_cast<int32_t>(nearest)) == x) f = nearest;
    const double i = std::floor(f + u);
    return static_cast<int32_t>(
        std::clamp(i, -static_cast<double>(max_code_), static_cast<double>(max_code_)));
  }
  CTRBOX_HD float Value(int32_t code) const { return static_cast<float>(code * delta_); }

  // Stores x[0..n) as codes rounded to nearest (exact for values on the grid), little-endian,
  // code_bytes() each, at p.
  void Encode(const float* x, uint32_t n, char* p) const;
  // The values of n codes stored at p.
  void Decode(const char* p, uint32_t n, float* x) const;

  // Puts x[0..n) on the grid. Stochastic rounding draws element d's u from
  // (seed, stream, d) only, so the result never depends on threads or call order.
  // Inline: the GPU backend's sparse update calls it on the device.
  CTRBOX_HD void Round(float* x, uint32_t n, QuantRounding rounding, uint64_t seed,
                       uint64_t stream) const {
    if (!enabled()) return;
    if (rounding == QuantRounding::kNearest) {
      for (uint32_t d = 0; d < n; ++d) x[d] = Value(Code(x[d], 0.5f));
      return;
    }
    // Two 24-bit uniforms per 64-bit draw of a splitmix64 stream keyed by (seed, stream).
    Random rng(Mix64(seed ^ Mix64(stream)));
    for (uint32_t d = 0; d < n; d += 2) {
      const uint64_t r = rng.Next();
      x[d] = Value(Code(x[d], static_cast<float>(r >> 40) * 0x1.0p-24f));
      if (d + 1 < n) {
        x[d + 1] = Value(Code(x[d + 1], static_cast<float>(r & 0xFFFFFF) * 0x1.0p-24f));
      }
    }
  }

 private:
  uint32_t bits_ = 0;
  float range_ = 1.0f;
  int32_t max_code_ = 0;
  double delta_ = 0, inv_delta_ = 0;
};

// Returns "" if o is valid, else what is wrong (naming the storage.quant key).
std::string_view QuantOptionsError(const QuantOptions& o);

}  // namespace ctrbox

#endif  // CTRBOX_TABLE_QUANT_H_
