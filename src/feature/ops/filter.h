// filter: a row kept or dropped by comparing a column with a constant, a list of them (`in`),
// or by whether it is null (`not_null`) (docs/features.md, "Operators"). Makes a mask column.
#ifndef CTRBOX_FEATURE_OPS_FILTER_H_
#define CTRBOX_FEATURE_OPS_FILTER_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include <map>

#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

// Whether a comparison's sign c (<0, 0, >0 of the value against the constant) passes cmp.
CTRBOX_HD inline bool CmpPasses(uint8_t cmp, int c) {
  switch (static_cast<Cmp>(cmp)) {
    case Cmp::kEq:
      return c == 0;
    case Cmp::kNe:
      return c != 0;
    case Cmp::kLt:
      return c < 0;
    case Cmp::kLe:
      return c <= 0;
    case Cmp::kGt:
      return c > 0;
    case Cmp::kGe:
      return c >= 0;
    default:
      return false;
  }
}

struct FilterOp {
  // A number column (or not_null on one).
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    const Cmp cmp = static_cast<Cmp>(op.cmp);
    bool keep;
    if (cmp == Cmp::kNotNull) {
      keep = io.valid(r);
    } else if (!io.valid(r)) {
      keep = cmp == Cmp::kNe;
    } else if (cmp == Cmp::kIn) {
      const double x = io.in_number(op, r);
      keep = false;
      for (uint32_t k = 0; k < op.nvalues; ++k) keep |= x == io.consts[op.values + k];
    } else {
      const double x = io.in_number(op, r);
      keep = CmpPasses(op.cmp, x < op.a ? -1 : (x > op.a ? 1 : 0));
    }
    io.set_int(r, keep);
  }
};

#ifndef __CUDACC__
inline OpSpec FilterSpec() {
  OpSpec s;
  s.params = {"input", "cmp", "value", "values"};
  s.named = false;
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    if (p.inputs().size() != 1) return p.Error("input", "filter takes one input");
    ASSIGN_OR_RETURN(std::string cmp, p.Scalar("cmp"));
    static const std::map<std::string, Cmp> kCmps = {
        {"==", Cmp::kEq}, {"!=", Cmp::kNe}, {"<", Cmp::kLt},  {"<=", Cmp::kLe},
        {">", Cmp::kGt},  {">=", Cmp::kGe}, {"in", Cmp::kIn}, {"not_null", Cmp::kNotNull}};
    auto c = kCmps.find(cmp);
    if (c == kCmps.end()) {
      return p.Error("cmp", fmt::format("cmp '{}': expected == != < <= > >= in not_null", cmp));
    }
    OpNode& op = p.op();
    op.cmp = c->second;
    if (op.cmp == Cmp::kIn) {
      ASSIGN_OR_RETURN(std::vector<OpParse::Item> items,
                       p.List("values", "filter with cmp `in` needs `values`, a non-empty list"));
      for (OpParse::Item& k : items) {
        op.numbers.push_back(k.value.is_number ? k.value.f : 0.0);
        op.values.push_back(std::move(k.value));
      }
    } else if (op.cmp != Cmp::kNotNull) {
      if (!p.Has("value")) return p.Error(nullptr, "filter with cmp " + cmp + " needs `value`");
      ASSIGN_OR_RETURN(op.value, p.Value("value"));
    }
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (t.op.cmp == Cmp::kNotNull) return ColType::kMask;
    if (!IsScalarType(t.in[0])) return t.Bad(0, "int, float or string");
    if (IsNumericType(t.in[0])) {
      const std::vector<Constant> one = {t.op.value};
      for (const Constant& c : t.op.cmp == Cmp::kIn ? t.op.values : one) {
        if (!c.is_number) {
          return t.Error(fmt::format("filter on '{}' ({}): '{}' is not a number", t.names[0],
                                     ColTypeName(t.in[0]), c.s));
        }
      }
    }
    return ColType::kMask;
  };
  s.fixed = FixedOnNumbers;
  s.flatten = FlattenValue;
  s.rows = [](const OpRows& x) {  // a string column
    const OpNode& op = x.op;
    for (uint32_t r = x.begin; r < x.end; ++r) {
      x.out.valid[r] = 1;
      bool keep;
      if (op.cmp == Cmp::kNotNull) {
        keep = x.in.valid[r] != 0;
      } else if (!x.in.valid[r]) {
        keep = op.cmp == Cmp::kNe;
      } else if (op.cmp == Cmp::kIn) {
        keep = false;
        for (const Constant& c : op.values) keep |= x.in.strs()[r].view() == c.s;
      } else {
        const int c = x.in.strs()[r].view().compare(op.value.s);
        keep = CmpPasses(static_cast<uint8_t>(op.cmp), c < 0 ? -1 : (c > 0 ? 1 : 0));
      }
      x.out.ints()[r] = keep;
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_FILTER_H_
