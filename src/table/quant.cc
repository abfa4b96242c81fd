#include "table/quant.h"

#include <cassert>
#include <cmath>

#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {

bool ParseQuantRounding(std::string_view name, QuantRounding* out) {
  if (name == "stochastic") {
    *out = QuantRounding::kStochastic;
  } else if (name == "nearest") {
    *out = QuantRounding::kNearest;
  } else {
    return false;
  }
  return true;
}

std::string_view QuantRoundingName(QuantRounding r) {
  return r == QuantRounding::kNearest ? "nearest" : "stochastic";
}

std::string_view QuantOptionsError(const QuantOptions& o) {
  if (o.bits != 0 && (o.bits < Quantizer::kMinBits || o.bits > Quantizer::kMaxBits)) {
    return "storage.quant.bits must be 0 (float32) or 2..16";
  }
  if (!(o.range > 0.0f) || !std::isfinite(o.range)) {
    return "storage.quant.range must be positive and finite";
  }
  return "";
}

Quantizer::Quantizer(uint32_t bits, float range) : bits_(bits), range_(range) {
  assert(QuantOptionsError(QuantOptions{bits, range}).empty());
  if (bits_ == 0) return;
  max_code_ = (int32_t{1} << (bits_ - 1)) - 1;
  const double bins = std::ldexp(1.0, static_cast<int>(bits_)) - 1.0;  // 2^b - 1
  delta_ = 2.0 * range_ / bins;
  inv_delta_ = bins / (2.0 * range_);
}

void Quantizer::Encode(const float* x, uint32_t n, char* p) const {
  if (code_bytes() == 1) {
    for (uint32_t d = 0; d < n; ++d)
      p[d] = static_cast<char>(static_cast<int8_t>(Code(x[d], 0.5f)));
    return;
  }
  for (uint32_t d = 0; d < n; ++d) {
    const auto c = static_cast<uint16_t>(static_cast<int16_t>(Code(x[d], 0.5f)));
    p[2 * d] = static_cast<char>(c & 0xFF);
    p[2 * d + 1] = static_cast<char>(c >> 8);
  }
}

void Quantizer::Decode(const char* p, uint32_t n, float* x) const {
  if (code_bytes() == 1) {
    for (uint32_t d = 0; d < n; ++d) x[d] = Value(static_cast<int8_t>(p[d]));
    return;
  }
  for (uint32_t d = 0; d < n; ++d) {
    const auto c =
        static_cast<uint16_t>(static_cast<uint8_t>(p[2 * d]) |
                              (static_cast<uint16_t>(static_cast<uint8_t>(p[2 * d + 1])) << 8));
    x[d] = Value(static_cast<int16_t>(c));
  }
}

}  // namespace ctrbox
