// gather: a column of a joined side view, at each row's match (null where there is none). A
// join makes one per column of its view; a job file never writes one.
#ifndef CTRBOX_FEATURE_OPS_GATHER_H_
#define CTRBOX_FEATURE_OPS_GATHER_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <cstring>

#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct GatherOp : HostOnlyOp {};

#ifndef __CUDACC__
inline OpSpec GatherSpec() {
  OpSpec s;
  s.named = false;
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    return t.plan.views[t.op.view].layout.columns[t.op.view_col].type;
  };
  s.rows = [](const OpRows& x) {
    const Column& src = x.sides[x.op.view]->column(x.op.view_col);
    const size_t cb = CellBytes(x.out.type);
    for (uint32_t r = x.begin; r < x.end; ++r) {
      const int64_t row = x.in.ints()[r];
      if (row < 0 || !src.valid[row]) {
        x.SetNull(r);
        continue;
      }
      x.out.valid[r] = 1;
      std::memcpy(static_cast<char*>(x.out.cells) + r * cb,
                  static_cast<const char*>(src.cells) + row * cb, cb);
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_GATHER_H_
