// time_part: a part of a unix time in seconds — minute, hour, weekday (0: Monday), day, month
// or year — at a fixed UTC offset (docs/features.md, "Operators"). A value outside its range
// (default: 1990 to 2100, so that 14102100 or milliseconds are not decoded as seconds) marks
// its row.
#ifndef CTRBOX_FEATURE_OPS_TIME_PART_H_
#define CTRBOX_FEATURE_OPS_TIME_PART_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct TimePartOp {
  CTRBOX_HD static void Row(const FixedOp& op, const FixedIo& io, uint32_t r) {
    if (!io.valid(r)) return io.set_null(r);
    const int64_t v = io.in_int(r);
    if (static_cast<double>(v) < op.a || static_cast<double>(v) >= op.b) {  // [a, b): `range`
      io.set_null(r);
      io.mark_error(op, r);
      return;
    }
    const int64_t s = v + op.offset;
    const int64_t days = fixed::FloorDiv(s, 86400);
    const int64_t secs = s - days * 86400;
    const TimePart part = static_cast<TimePart>(op.part);
    int64_t value;
    if (part == TimePart::kMinute) {
      value = (secs / 60) % 60;
    } else if (part == TimePart::kHour) {
      value = secs / 3600;
    } else if (part == TimePart::kWeekday) {  // 1970-01-01 was a Thursday
      value = ((days + 3) % 7 + 7) % 7;
    } else {
      int64_t y;
      int m, d;
      fixed::CivilFromDays(days, &y, &m, &d);
      value = part == TimePart::kDay ? d : part == TimePart::kMonth ? m : y;
    }
    io.set_int(r, value);
  }
};

#ifndef __CUDACC__
// A plausible unix time in seconds: 1990-01-01 to 2100-01-01 UTC.
inline constexpr double kTimeFrom = 631152000, kTimeTo = 4102444800;
inline constexpr double kAnySeconds = 1099511627776.0;  // 2^40

inline OpSpec TimePartSpec() {
  OpSpec s;
  s.params = {"input", "part", "utc_offset_hours", "range"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    ASSIGN_OR_RETURN(std::string part, p.Scalar("part"));
    static const std::map<std::string, TimePart> kParts = {
        {"minute", TimePart::kMinute}, {"hour", TimePart::kHour},   {"weekday", TimePart::kWeekday},
        {"day", TimePart::kDay},       {"month", TimePart::kMonth}, {"year", TimePart::kYear}};
    auto it = kParts.find(part);
    if (it == kParts.end()) {
      return p.Error(
          "part",
          fmt::format("part '{}': expected minute, hour, weekday, day, month or year", part));
    }
    p.op().part = it->second;
    if (p.Has("utc_offset_hours")) {
      ASSIGN_OR_RETURN(double h, p.Number("utc_offset_hours"));
      if (std::fabs(h) > 24) return p.Error("utc_offset_hours", "utc_offset_hours: beyond ±24");
      p.op().utc_offset_seconds = static_cast<int64_t>(std::llround(h * 3600));
    }
    // The unix seconds it decodes: [a, b).
    p.op().a = kTimeFrom;
    p.op().b = kTimeTo;
    if (p.Has("range")) {
      ASSIGN_OR_RETURN(std::string range, p.Scalar("range"));
      if (range != "any") {
        return p.Error("range", "range '" + range + "': expected any (the default is 1990-2100)");
      }
      p.op().a = -kAnySeconds;  // ±34,000 years
      p.op().b = kAnySeconds;
    }
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (t.in[0] != ColType::kInt) return t.Bad(0, "int (unix seconds)");
    return ColType::kInt;
  };
  s.fixed = AlwaysFixed;
  s.why = [](const FeaturePlan& plan, const OpNode& op, const ColumnTable& t, uint32_t row) {
    return fmt::format(
        "operator {} (time_part): {} = {} is not unix seconds in its range (1990 to 2100 "
        "unless range: any); a time written otherwise, such as 14102100 for 2014-10-21 00h, "
        "is read with parse_time",
        op.name, plan.columns[op.inputs[0]].name, t.cols[op.inputs[0]].ints()[row]);
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_TIME_PART_H_
