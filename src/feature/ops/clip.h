// clip: a number held to [min, max] (docs/features.md, "Operators").
#ifndef CTRBOX_FEATURE_OPS_CLIP_H_
#define CTRBOX_FEATURE_OPS_CLIP_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include "feature/op_spec.h"
#include "feature/ops/log.h"
#endif

namespace ctrbox::ops {

struct ClipOp {
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    if (!io.valid(r)) return io.set_null(r);
    const double x = io.in_number(op, r);
    io.set_float(r, x < op.a ? op.a : (x > op.b ? op.b : x));
  }
};

#ifndef __CUDACC__
inline OpSpec ClipSpec() {
  OpSpec s;
  s.params = {"input", "min", "max"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    ASSIGN_OR_RETURN(p.op().a, p.Number("min"));
    ASSIGN_OR_RETURN(p.op().b, p.Number("max"));
    if (p.op().a > p.op().b) return p.Error("max", "clip: max is below min");
    return Status::OK();
  };
  s.type = NumberToFloat;
  s.fixed = AlwaysFixed;
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_CLIP_H_
