// fill_null: a column's nulls replaced by a constant (docs/features.md, "Operators").
#ifndef CTRBOX_FEATURE_OPS_FILL_NULL_H_
#define CTRBOX_FEATURE_OPS_FILL_NULL_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct FillNullOp {
  // A number column (int or float): the constant's int or double.
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    if (op.in_type == static_cast<uint8_t>(ColType::kInt)) {
      io.set_int(r, io.valid(r) ? io.in_int(r) : op.ci);
    } else {
      io.set_float(r, io.valid(r) ? io.in_number(op, r) : op.a);
    }
  }
};

#ifndef __CUDACC__
inline OpSpec FillNullSpec() {
  OpSpec s;
  s.params = {"input", "value"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    if (!p.Has("value")) return p.Error(nullptr, "operator fill_null needs `value`");
    ASSIGN_OR_RETURN(p.op().value, p.Value("value"));
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (!IsScalarType(t.in[0])) return t.Bad(0, "int, float or string");
    if (IsNumericType(t.in[0]) && !t.op.value.is_number) {
      return t.Error(fmt::format("fill_null ('{}'): value '{}' is not a number, and '{}' is {}",
                                 t.op.name, t.op.value.s, t.names[0], ColTypeName(t.in[0])));
    }
    if (t.in[0] == ColType::kInt && static_cast<double>(t.op.value.i) != t.op.value.f) {
      return t.Error(fmt::format(
          "fill_null ('{}'): value {} is not an integer, and '{}' is int: give an integer, or "
          "cast the column to float first",
          t.op.name, t.op.value.s, t.names[0]));
    }
    return t.in[0];
  };
  s.fixed = FixedOnNumbers;
  s.flatten = FlattenValue;
  s.rows = [](const OpRows& x) {  // a string column
    const Str fill{x.op.value.s.data(), static_cast<uint32_t>(x.op.value.s.size())};
    for (uint32_t r = x.begin; r < x.end; ++r) {
      x.out.valid[r] = 1;
      x.out.strs()[r] = x.in.valid[r] ? x.in.strs()[r] : fill;
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_FILL_NULL_H_
