#include "io/row_share.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ctrbox {
namespace {

// Moves elements [from, from + n) of *v to `to` (<= from): the columns compact forwards.
template <class T>
void MoveDown(std::vector<T>* v, size_t to, size_t from, size_t n) {
  assert(to <= from);
  if (to != from && n > 0) std::memmove(v->data() + to, v->data() + from, n * sizeof(T));
}

}  // namespace

size_t KeepRowShare(const RowShare& share, uint64_t first, Batch* batch) {
  assert(share.unit >= 1);
  const size_t rows = batch->rows();
  if (share.whole() || rows == 0) return rows;
  Batch& b = *batch;
  const size_t S = b.schema.num_slots, D = b.schema.num_dense;
  const bool weighted = b.has_weights();
  size_t out_rows = 0, out_keys = 0;
  size_t r = 0;
  while (r < rows) {
    const uint64_t block = (first + r) / share.unit;
    const size_t block_end =
        static_cast<size_t>(std::min<uint64_t>(rows, (block + 1) * share.unit - first));
    if (block % share.count != share.index) {
      r = block_end;
      continue;
    }
    // Rows [r, block_end) stay: moved down to out_rows.
    const size_t n = block_end - r;
    const uint32_t k0 = b.offsets[r * S], k1 = b.offsets[block_end * S];
    MoveDown(&b.labels, out_rows, r, n);
    MoveDown(&b.dense, out_rows * D, r * D, n * D);
    MoveDown(&b.keys, out_keys, k0, k1 - k0);
    if (weighted) MoveDown(&b.weights, out_keys, k0, k1 - k0);
    // Each offset is read before any write reaches its index (writes trail the reads).
    const int64_t shift = static_cast<int64_t>(out_keys) - k0;
    for (size_t i = 1; i <= n * S; ++i) {
      b.offsets[out_rows * S + i] = static_cast<uint32_t>(b.offsets[r * S + i] + shift);
    }
    out_rows += n;
    out_keys += k1 - k0;
    r = block_end;
  }
  b.labels.resize(out_rows);
  b.dense.resize(out_rows * D);
  b.offsets.resize(out_rows * S + 1);
  b.offsets[0] = 0;
  b.keys.resize(out_keys);
  if (weighted) b.weights.resize(out_keys);
  return out_rows;
}

}  // namespace ctrbox
