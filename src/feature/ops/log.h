// log: log(1 + max(x, 0)) of a number (docs/features.md, "Operators").
#ifndef CTRBOX_FEATURE_OPS_LOG_H_
#define CTRBOX_FEATURE_OPS_LOG_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct LogOp {
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    if (!io.valid(r)) return io.set_null(r);
    const double x = io.in_number(op, r);
    io.set_float(r, log1p(x > 0.0 ? x : 0.0));
  }
};

#ifndef __CUDACC__
// The type rule of log, clip and normalize: a number in, a float out.
inline StatusOr<ColType> NumberToFloat(const OpTyping& t) {
  if (!IsNumericType(t.in[0])) return t.Bad(0, "int or float");
  return ColType::kFloat;
}

inline OpSpec LogSpec() {
  OpSpec s;
  s.params = {"input"};
  s.parse = [](OpParse& p) { return p.Inputs("input"); };
  s.type = NumberToFloat;
  s.fixed = AlwaysFixed;
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_LOG_H_
