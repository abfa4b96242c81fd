// dedupe: rows whose values in the input columns equal an earlier row's are dropped (docs/
// features.md, "Operators"). Makes a tag column: each row's 128-bit hash of those values.
#ifndef CTRBOX_FEATURE_OPS_DEDUPE_H_
#define CTRBOX_FEATURE_OPS_DEDUPE_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <vector>

#include "feature/op_spec.h"
#include "util/hash.h"
#endif

namespace ctrbox::ops {

struct DedupeOp : HostOnlyOp {};

#ifndef __CUDACC__
inline OpSpec DedupeSpec() {
  OpSpec s;
  s.params = {"inputs"};
  s.named = false;
  s.one_input = false;
  s.parse = [](OpParse& p) { return p.Inputs("inputs"); };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    for (size_t i = 0; i < t.in.size(); ++i) {
      if (!IsDataType(t.in[i])) return t.Bad(i, "a data column");
    }
    return ColType::kTag;
  };
  s.rows = [](const OpRows& x) {
    std::vector<uint64_t> items;  // a column's item hashes, hashed in one update
    for (uint32_t r = x.begin; r < x.end; ++r) {
      XXH3_state_t st;
      XXH3_128bits_reset(&st);
      for (int c : x.op.inputs) {
        const Column& col = x.t->cols[c];
        const uint32_t n = ItemCount(col, r);
        const uint8_t tag[2] = {col.valid[r], static_cast<uint8_t>(col.type)};
        XXH3_128bits_update(&st, tag, 2);
        XXH3_128bits_update(&st, &n, sizeof(n));
        items.resize(n);
        for (uint32_t i = 0; i < n; ++i) items[i] = ItemHash(col, r, i, 0);
        if (n > 0) XXH3_128bits_update(&st, items.data(), n * sizeof(uint64_t));
      }
      const XXH128_hash_t h = XXH3_128bits_digest(&st);
      x.out.valid[r] = 1;
      x.out.tags()[r] = {h.low64, h.high64};
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_DEDUPE_H_
