// cross: the keys of every combination of its inputs' items, the first input outermost
// (docs/features.md, "Operators"). A row with more than max_keys combinations (or more than
// features.max_row_keys) is marked too_many_keys and left empty, before any key is made.
#ifndef CTRBOX_FEATURE_OPS_CROSS_H_
#define CTRBOX_FEATURE_OPS_CROSS_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "feature/op_spec.h"
#include "feature/ops/hash.h"
#include "util/hash.h"
#endif

namespace ctrbox::ops {

struct CrossOp : HostOnlyOp {};

#ifndef __CUDACC__
inline OpSpec CrossSpec() {
  OpSpec s;
  s.params = {"inputs", "max_keys"};
  s.one_input = false;
  s.bad_kind = BadKind::kTooManyKeys;
  s.why = [](const FeaturePlan& plan, const OpNode& op, const ColumnTable&, uint32_t) {
    std::string in;
    for (int c : op.inputs) in += (in.empty() ? "" : ", ") + plan.columns[c].name;
    return fmt::format(
        "operator {} (cross) makes more than {} keys from {} (its max_keys {}, "
        "features.max_row_keys {})",
        op.name, std::min(op.max_keys, plan.max_row_keys), in, op.max_keys, plan.max_row_keys);
  };
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("inputs"));
    if (p.inputs().size() < 2) return p.Error("inputs", "cross takes two inputs or more");
    if (p.Has("max_keys")) {
      ASSIGN_OR_RETURN(double m, p.Number("max_keys"));
      if (m < 1 || m > 1e7 || m != std::floor(m)) {
        return p.Error("max_keys", "max_keys: expected an integer in [1, 10^7]");
      }
      p.op().max_keys = static_cast<uint32_t>(m);
    }
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    for (size_t i = 0; i < t.in.size(); ++i) {
      if (!IsDataType(t.in[i])) return t.Bad(i, "a data column");
    }
    return ColType::kHashed;
  };
  s.rows = [](const OpRows& x) {
    const size_t k = x.op.inputs.size();
    std::vector<uint32_t> idx;
    std::vector<uint64_t> h(k);
    const uint64_t cap = std::min(x.op.max_keys, x.plan.max_row_keys);
    KeyRows(x, cap, [&](uint32_t r, uint64_t* keys, uint32_t n) {
      idx.assign(k, 0);
      for (uint32_t j = 0; j < n; ++j) {
        for (size_t m = 0; m < k; ++m) h[m] = ItemHash(x.t->cols[x.op.inputs[m]], r, idx[m], 0);
        keys[j] = XXH3_64bits_withSeed(h.data(), k * sizeof(uint64_t), x.op.seed);
        for (size_t m = k; m-- > 0;) {  // odometer, last input fastest
          if (++idx[m] < ItemCount(x.t->cols[x.op.inputs[m]], r)) break;
          idx[m] = 0;
        }
      }
    });
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_CROSS_H_
