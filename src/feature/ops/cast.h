// cast: a column converted to int, float or string (docs/features.md, "Operators"). A string
// that is not a number becomes null and marks its row.
#ifndef CTRBOX_FEATURE_OPS_CAST_H_
#define CTRBOX_FEATURE_OPS_CAST_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "feature/op_spec.h"
#include "util/parse.h"
#endif

namespace ctrbox::ops {

struct CastOp {
  // Between int and float (int to int and float to float: the same 8 bytes).
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    if (!io.valid(r)) return io.set_null(r);
    if (op.in_type == op.out_type) return io.set_int(r, io.in_int(r));
    const double x = io.in_number(op, r);
    if (op.out_type == static_cast<uint8_t>(ColType::kFloat)) return io.set_float(r, x);
    const double t = trunc(x);
    if (t >= -9.2e18 && t <= 9.2e18) return io.set_int(r, static_cast<int64_t>(t));
    io.set_null(r);
    io.mark_error(op, r);
  }
};

#ifndef __CUDACC__
// cast's `to` and json_field's `type`: int, float or string.
inline Status ParseToType(OpParse& p, const char* key) {
  ASSIGN_OR_RETURN(std::string t, p.Scalar(key));
  if (t == "int") {
    p.op().to = ColType::kInt;
  } else if (t == "float") {
    p.op().to = ColType::kFloat;
  } else if (t == "string") {
    p.op().to = ColType::kString;
  } else {
    return p.Error(key, fmt::format("{} '{}': expected int, float or string", key, t));
  }
  return Status::OK();
}

inline OpSpec CastSpec() {
  OpSpec s;
  s.params = {"input", "to"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    return ParseToType(p, "to");
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (!IsScalarType(t.in[0])) return t.Bad(0, "int, float or string");
    return t.op.to;
  };
  s.fixed = [](const FeaturePlan& plan, const OpNode& op) {
    return IsNumericType(plan.columns[op.inputs[0]].type) &&
           IsNumericType(plan.columns[op.output].type);
  };
  s.rows = [](const OpRows& x) {  // from or to a string
    const Column& in = x.in;
    Column& out = x.out;
    for (uint32_t r = x.begin; r < x.end; ++r) {
      if (!in.valid[r]) {
        x.SetNull(r);
        continue;
      }
      out.valid[r] = 1;
      bool ok = true;
      if (in.type == out.type) {  // string to string
        out.strs()[r] = in.strs()[r];
      } else if (out.type == ColType::kFloat) {  // from a string
        ok = ParseDouble(in.strs()[r].view(), &out.floats()[r]) && std::isfinite(out.floats()[r]);
      } else if (out.type == ColType::kInt) {  // from a string
        ok = ParseInt64(in.strs()[r].view(), &out.ints()[r]);
      } else {  // a number to a string
        char buf[64];
        std::to_chars_result res = in.type == ColType::kInt
                                       ? std::to_chars(buf, buf + sizeof(buf), in.ints()[r])
                                       : std::to_chars(buf, buf + sizeof(buf), in.floats()[r]);
        out.strs()[r] = x.arena->Copy(std::string_view(buf, res.ptr - buf), x.lane);
      }
      if (!ok) {
        x.SetNull(r);
        x.MarkError(r);
      }
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_CAST_H_
