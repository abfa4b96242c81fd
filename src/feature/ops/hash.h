// hash: a column's values (each item of a list) as 64-bit keys, seeded by the output's name
// (docs/features.md, "Operators"): a slot the model can read.
#ifndef CTRBOX_FEATURE_OPS_HASH_H_
#define CTRBOX_FEATURE_OPS_HASH_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <algorithm>
#include <vector>

#include "feature/op_spec.h"
#include "util/hash.h"
#endif

namespace ctrbox::ops {

struct HashOp : HostOnlyOp {};

#ifndef __CUDACC__
// The key lists of rows [begin, end): Algorithm 1 of FeatureBox §5 — each row's size (at most
// `cap`: more marks the row and leaves it empty), their prefix sum, one allocation for the
// block, then each row writes its keys at its offset by key(r, first, n).
template <class Keys>
void KeyRows(const OpRows& x, uint64_t cap, Keys key) {
  uint64_t total = 0;
  for (uint32_t r = x.begin; r < x.end; ++r) {
    uint64_t n = 1;
    for (int c : x.op.inputs) n = std::min(n * ItemCount(x.t->cols[c], r), cap + 1);
    if (n > cap) {
      x.MarkError(r);
      n = 0;
    }
    x.out.keys()[r].n = static_cast<uint32_t>(n);
    total += n;
  }
  uint64_t* keys = x.arena->Alloc<uint64_t>(std::max<uint64_t>(total, 1), x.lane);
  uint64_t at = 0;
  for (uint32_t r = x.begin; r < x.end; ++r) {
    KeySpan& span = x.out.keys()[r];
    span.p = keys + at;
    x.out.valid[r] = span.n > 0;
    if (span.n == 0) {
      span.p = nullptr;
      continue;
    }
    key(r, keys + at, span.n);
    at += span.n;
  }
}

inline OpSpec HashSpec() {
  OpSpec s;
  s.params = {"input"};
  s.parse = [](OpParse& p) { return p.Inputs("input"); };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (!IsDataType(t.in[0])) return t.Bad(0, "a data column");
    return ColType::kHashed;
  };
  s.rows = [](const OpRows& x) {
    KeyRows(x, UINT32_MAX, [&](uint32_t r, uint64_t* keys, uint32_t n) {
      for (uint32_t i = 0; i < n; ++i) keys[i] = ItemHash(x.in, r, i, x.op.seed);
    });
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_HASH_H_
