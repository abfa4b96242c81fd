// Lossy hashing of feature keys into a smaller key space — the baseline that lossless ids
// are measured against (HPS §2; docs/model.md, "Hashed keys"): plain modulo hashing, and
// one permutation + one sign random projection (OP+OSRP).
#ifndef CTRBOX_IO_KEY_HASHING_H_
#define CTRBOX_IO_KEY_HASHING_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "io/batch.h"

namespace ctrbox {

enum class HashingMethod { kNone, kModulo, kOpOsrp };

// features.hashing: {method, bins}. A model trained with hashing is evaluated and serves
// predictions with it (it is part of the model spec).
struct HashingOptions {
  HashingMethod method = HashingMethod::kNone;
  uint64_t bins = 0;  // K: modulo keeps K keys, OP+OSRP 2K
  bool enabled() const { return method != HashingMethod::kNone; }
  bool operator==(const HashingOptions&) const = default;
};

// OP+OSRP's permutation and sign seeds (fixed: they are part of what a hashed model is).
constexpr uint64_t kOpOsrpPermutationSeed = 0x6f702b6f73727031ULL;
constexpr uint64_t kOpOsrpSignSeed = 0x6f702b6f73727032ULL;

bool ParseHashingMethod(std::string_view name, HashingMethod* out);  // none | modulo | op_osrp
std::string_view HashingMethodName(HashingMethod m);

// Replaces the keys of every (row, slot) of `b`:
// - modulo: each key k becomes k mod K, its weight kept;
// - OP+OSRP: the slot's keys are permuted into K bins (bin = Mix64(k ^ kOpOsrpPermutationSeed) mod
// K) and
//   projected with random signs (r = +1 when the top bit of Mix64(k ^ kOpOsrpSignSeed) is set, else
//   −1); per bin, z = Σ w·r over the slot's keys there, and the bin gives the binary feature 2·bin
//   + 1 if z > 0, 2·bin if z < 0, nothing if z = 0 — in the order the bins first appear. Weights
//   become 1.
// Keys of different slots share the hashed space, as one hashed table would.
// REQUIRES: options.enabled() implies options.bins > 0.
void HashBatchKeys(const HashingOptions& options, Batch* b);

// model.slot_dims: the table of each slot of a multi-table model (docs/model.md), which its
// keys carry (util/hash.h: TableKey). Slots past the list are table 0; empty: one table, the
// keys as they are.
struct KeyTables {
  std::vector<uint32_t> slot_table;
  bool enabled() const { return !slot_table.empty(); }
  bool operator==(const KeyTables&) const = default;
};

// Puts every key's slot's table into its top bits.
void TagTableKeys(const KeyTables& tables, Batch* b);

// The keys a model reads, from the keys the readers made: hashed (features.hashing), then
// tagged with their tables (model.slot_dims). Training, evaluation and prediction all apply it.
inline void ModelKeys(const HashingOptions& hashing, const KeyTables& tables, Batch* b) {
  if (hashing.enabled()) HashBatchKeys(hashing, b);
  if (tables.enabled()) TagTableKeys(tables, b);
}

}  // namespace ctrbox

#endif  // CTRBOX_IO_KEY_HASHING_H_
