// parse_time: a time written as text (or as the digits of an int, such as Avazu's hour
// 14102100) parsed with a strptime format into unix seconds, UTC (docs/features.md,
// "Operators"). A value the format does not read whole marks its row (bad_number).
#ifndef CTRBOX_FEATURE_OPS_PARSE_TIME_H_
#define CTRBOX_FEATURE_OPS_PARSE_TIME_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <ctime>
#include <string>

#include "feature/op_spec.h"
#endif

namespace ctrbox::ops {

struct ParseTimeOp : HostOnlyOp {};

#ifndef __CUDACC__
// Unix seconds (UTC) of `text` read whole by the strptime `format`; fields the format lacks are
// those of 1970-01-01 00:00:00 (a day of the month: 1). False when it does not read.
inline bool ParseTimeText(std::string_view text, const std::string& format, int64_t* out) {
  char buf[128];
  if (text.size() >= sizeof(buf)) return false;
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  struct tm tm = {};
  tm.tm_year = 70;
  tm.tm_mday = 1;
  const char* end = strptime(buf, format.c_str(), &tm);
  if (end == nullptr || *end != '\0') return false;
  *out = static_cast<int64_t>(timegm(&tm));
  return true;
}

inline OpSpec ParseTimeSpec() {
  OpSpec s;
  s.params = {"input", "format"};
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    if (!p.Has("format")) {
      return p.Error(nullptr, "parse_time needs `format` (strptime's, such as %y%m%d%H)");
    }
    ASSIGN_OR_RETURN(p.op().format, p.Scalar("format"));
    if (p.op().format.find('%') == std::string::npos) {
      return p.Error("format", "format '" + p.op().format + "' has no % field");
    }
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (t.in[0] != ColType::kString && t.in[0] != ColType::kInt) {
      return t.Bad(0, "string or int (its digits)");
    }
    return ColType::kInt;
  };
  s.rows = [](const OpRows& x) {
    for (uint32_t r = x.begin; r < x.end; ++r) {
      if (!x.in.valid[r]) {
        x.SetNull(r);
        continue;
      }
      std::string_view text;
      char digits[24];
      if (x.in.type == ColType::kInt) {
        const auto res = std::to_chars(digits, digits + sizeof(digits), x.in.ints()[r]);
        text = std::string_view(digits, res.ptr - digits);
      } else {
        text = x.in.strs()[r].view();
      }
      int64_t seconds = 0;
      if (!ParseTimeText(text, x.op.format, &seconds)) {
        x.SetNull(r);
        x.MarkError(r);
        continue;
      }
      x.out.valid[r] = 1;
      x.out.ints()[r] = seconds;
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_PARSE_TIME_H_
