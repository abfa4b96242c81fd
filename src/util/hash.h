// Hashing: feature keys, checksums and mixing.
//
// A feature key is the 64-bit XXH3 hash of a raw feature value, seeded by its slot, so equal
// raw values in different slots give different keys. No modulo is ever applied: the model
// keeps one row per distinct 64-bit key (collisions need ~2^32 keys in one table to become
// likely; see docs/formats/text_inputs.md).
#ifndef CTRBOX_UTIL_HASH_H_
#define CTRBOX_UTIL_HASH_H_

#include <cstdint>
#include <string_view>

#include "util/hd.h"

// Inlined so the hash of a fixed-size key specialises. GCC 12 reports false "uninitialized"
// warnings inside its own AVX-512 intrinsics when XXH3's streaming code is inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

namespace ctrbox {

// splitmix64 finaliser: a bijective 64-bit mixer.
CTRBOX_HD inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The XXH3 seed of slot `slot`.
inline uint64_t SlotSeed(uint32_t slot) { return Mix64(0x6374726278ULL + slot); }

// The key of a raw feature value given as bytes (Criteo categorical strings).
inline uint64_t FeatureKey(uint32_t slot, std::string_view raw) {
  return XXH3_64bits_withSeed(raw.data(), raw.size(), SlotSeed(slot));
}

// The key of a raw feature value given as an unsigned integer (slot and libsvm formats):
// the hash of its 8 little-endian bytes.
inline uint64_t FeatureKey(uint32_t slot, uint64_t raw) {
  return XXH3_64bits_withSeed(&raw, sizeof(raw), SlotSeed(slot));
}

// A key of a multi-table model (model.slot_dims; docs/model.md): the feature key with its
// table t in the top kTableKeyBits bits, so that every layer below the readers tells the
// tables apart by the key alone. Keys of one table stay distinct where their low 60 bits do.
constexpr int kTableKeyBits = 4;
constexpr int kTableShift = 64 - kTableKeyBits;
constexpr uint64_t kTableKeyMask = (uint64_t{1} << kTableShift) - 1;
constexpr uint64_t TableKey(uint64_t key, uint32_t table) {
  return (key & kTableKeyMask) | (uint64_t{table} << kTableShift);
}

// Checksum of a byte range (XXH3-64), used by every ctrbox file format.
inline uint64_t Checksum64(const void* data, size_t n) { return XXH3_64bits(data, n); }
inline uint64_t Checksum64(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_HASH_H_
