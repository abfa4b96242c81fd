// last_n: a list's last n items, or a string's last n pieces between separators (docs/
// features.md, "Operators").
#ifndef CTRBOX_FEATURE_OPS_LAST_N_H_
#define CTRBOX_FEATURE_OPS_LAST_N_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "feature/op_spec.h"
#include "feature/ops/split.h"
#endif

namespace ctrbox::ops {

struct LastNOp : HostOnlyOp {};

#ifndef __CUDACC__
inline OpSpec LastNSpec() {
  OpSpec s;
  s.params = {"input", "n", "sep"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    RETURN_IF_ERROR(ParseSep(p, /*required=*/false));
    ASSIGN_OR_RETURN(double v, p.Number("n"));
    if (v < 1 || v > 65536 || v != std::floor(v)) {
      return p.Error("n", "n: expected an integer in [1, 65536]");
    }
    p.op().n = static_cast<uint32_t>(v);
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (t.in[0] == ColType::kList) return ColType::kList;
    if (t.in[0] != ColType::kString) return t.Bad(0, "list or string");
    if (t.op.sep.empty()) {
      return t.Error(fmt::format("last_n ('{}') of a string needs `sep`", t.op.name));
    }
    return ColType::kList;
  };
  s.rows = [](const OpRows& x) {
    if (x.in.type != ColType::kList) return PieceRows(x, x.op.n);
    for (uint32_t r = x.begin; r < x.end; ++r) {  // a list: its tail, no copy
      if (!x.in.valid[r]) {
        x.SetNull(r);
        continue;
      }
      const StrSpan l = x.in.lists()[r];
      const uint32_t k = std::min(l.n, x.op.n);
      x.out.lists()[r] = {l.p + (l.n - k), k};
      x.out.valid[r] = k > 0;
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_LAST_N_H_
