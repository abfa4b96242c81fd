// Random numbers: a small, seedable, splittable generator (splitmix64) and counter-based
// helpers, so a value drawn for a key or a row never depends on thread scheduling.
#ifndef CTRBOX_UTIL_RANDOM_H_
#define CTRBOX_UTIL_RANDOM_H_

#include <cmath>
#include <cstdint>

#include "util/hash.h"

namespace ctrbox {

// Thread safety: not thread-safe; use one per thread (or derive one per row from a counter).
class Random {
 public:
  CTRBOX_HD explicit Random(uint64_t seed) : state_(seed) {}

  CTRBOX_HD uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, 1) with 24 bits.
  float UniformFloat() { return static_cast<float>(Next() >> 40) * 0x1.0p-24f; }
  // Uniform integer in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Standard normal (Box-Muller).
  double Gaussian() {
    double u1 = (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53;
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

// A uniform float in [-range, range) that depends only on (seed, key, index).
CTRBOX_HD inline float HashUniform(uint64_t seed, uint64_t key, uint32_t index, float range) {
  uint64_t h = Mix64(seed ^ Mix64(key + 0x51ED27ULL * (index + 1)));
  float u = static_cast<float>(h >> 40) * 0x1.0p-24f;  // [0, 1)
  return (2.0f * u - 1.0f) * range;
}

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_RANDOM_H_
