// normalize: (x - mean) / std of a number (docs/features.md, "Operators").
#ifndef CTRBOX_FEATURE_OPS_NORMALIZE_H_
#define CTRBOX_FEATURE_OPS_NORMALIZE_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include "feature/op_spec.h"
#include "feature/ops/log.h"
#endif

namespace ctrbox::ops {

struct NormalizeOp {
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    if (!io.valid(r)) return io.set_null(r);
    io.set_float(r, (io.in_number(op, r) - op.a) / op.b);
  }
};

#ifndef __CUDACC__
inline OpSpec NormalizeSpec() {
  OpSpec s;
  s.params = {"input", "mean", "std"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    ASSIGN_OR_RETURN(p.op().a, p.Number("mean"));
    ASSIGN_OR_RETURN(p.op().b, p.Number("std"));
    if (!(p.op().b > 0)) return p.Error("std", "normalize: std must be > 0");
    return Status::OK();
  };
  s.type = NumberToFloat;
  s.fixed = AlwaysFixed;
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_NORMALIZE_H_
