#include "io/key_hashing.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "util/hash.h"

namespace ctrbox {
bool ParseHashingMethod(std::string_view name, HashingMethod* out) {
  if (name == "none") {
    *out = HashingMethod::kNone;
  } else if (name == "modulo") {
    *out = HashingMethod::kModulo;
  } else if (name == "op_osrp") {
    *out = HashingMethod::kOpOsrp;
  } else {
    return false;
  }
  return true;
}

std::string_view HashingMethodName(HashingMethod m) {
  switch (m) {
    case HashingMethod::kModulo:
      return "modulo";
    case HashingMethod::kOpOsrp:
      return "op_osrp";
    case HashingMethod::kNone:
      break;
  }
  return "none";
}

void HashBatchKeys(const HashingOptions& options, Batch* b) {
  const uint64_t k = options.bins;
  if (options.method == HashingMethod::kModulo) {
    for (uint64_t& key : b->keys) key %= k;
    return;
  }
  if (options.method != HashingMethod::kOpOsrp) return;
  std::vector<uint32_t> offsets{0};
  std::vector<uint64_t> keys;
  offsets.reserve(b->offsets.size());
  keys.reserve(b->keys.size());
  std::vector<std::pair<uint64_t, float>> bins;  // (bin, z), in order of first appearance
  for (size_t rs = 0; rs + 1 < b->offsets.size(); ++rs) {
    bins.clear();
    for (uint32_t i = b->offsets[rs]; i < b->offsets[rs + 1]; ++i) {
      const uint64_t key = b->keys[i];
      const uint64_t bin = Mix64(key ^ kOpOsrpPermutationSeed) % k;
      const float r = (Mix64(key ^ kOpOsrpSignSeed) >> 63) ? 1.0f : -1.0f;
      const float w = b->has_weights() ? b->weights[i] : 1.0f;
      auto it =
          std::find_if(bins.begin(), bins.end(), [&](const auto& e) { return e.first == bin; });
      if (it == bins.end()) {
        bins.emplace_back(bin, w * r);
      } else {
        it->second += w * r;
      }
    }
    for (const auto& [bin, z] : bins) {
      if (z > 0) keys.push_back(2 * bin + 1);
      if (z < 0) keys.push_back(2 * bin);
    }
    offsets.push_back(static_cast<uint32_t>(keys.size()));
  }
  b->offsets = std::move(offsets);
  b->keys = std::move(keys);
  b->weights.clear();  // binary features
}

void TagTableKeys(const KeyTables& tables, Batch* b) {
  const uint32_t S = b->schema.num_slots;
  const size_t named = tables.slot_table.size();
  for (size_t r = 0; r < b->rows(); ++r) {
    for (uint32_t s = 0; s < S; ++s) {
      const uint32_t t = s < named ? tables.slot_table[s] : 0;
      for (uint32_t p = b->offsets[r * S + s]; p < b->offsets[r * S + s + 1]; ++p) {
        b->keys[p] = TableKey(b->keys[p], t);
      }
    }
  }
}

}  // namespace ctrbox
