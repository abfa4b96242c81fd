// bucketize: a number's bucket among increasing boundaries — the count of boundaries <= it
// (docs/features.md, "Operators").
#ifndef CTRBOX_FEATURE_OPS_BUCKETIZE_H_
#define CTRBOX_FEATURE_OPS_BUCKETIZE_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct BucketizeOp {
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    if (!io.valid(r)) return io.set_null(r);
    const double x = io.in_number(op, r);
    uint32_t lo = 0, hi = op.nb;  // upper_bound: the boundaries <= x
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      if (io.consts[op.boundaries + mid] <= x) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    io.set_int(r, lo);
  }
};

#ifndef __CUDACC__
inline OpSpec BucketizeSpec() {
  OpSpec s;
  s.params = {"input", "boundaries"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    ASSIGN_OR_RETURN(
        std::vector<OpParse::Item> items,
        p.List("boundaries", "bucketize needs `boundaries`, a non-empty list of numbers",
               /*empty_at_key=*/true));
    std::vector<double>& b = p.op().boundaries;
    for (const OpParse::Item& v : items) {
      if (!v.value.is_number) {
        return p.ErrorAt(v.line, "boundaries: '" + v.value.s + "' is not a number");
      }
      if (!b.empty() && !(v.value.f > b.back())) {
        return p.ErrorAt(v.line, "boundaries must be strictly increasing");
      }
      b.push_back(v.value.f);
    }
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (!IsNumericType(t.in[0])) return t.Bad(0, "int or float");
    return ColType::kInt;
  };
  s.fixed = AlwaysFixed;
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_BUCKETIZE_H_
