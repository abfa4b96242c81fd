// json_field: a member of a JSON object in a string column, by its path, as int, float or
// string (docs/features.md, "Operators"). A missing member or one of another type is null;
// malformed JSON marks its row.
#ifndef CTRBOX_FEATURE_OPS_JSON_FIELD_H_
#define CTRBOX_FEATURE_OPS_JSON_FIELD_H_

#include "feature/fixed_ops.h"
#ifndef __CUDACC__
#include <simdjson.h>

#include <string>

#include "feature/op_spec.h"
#include "feature/ops/cast.h"
#endif

namespace ctrbox::ops {

struct JsonFieldOp : HostOnlyOp {};

#ifndef __CUDACC__
namespace json_field {

struct Scratch {
  simdjson::ondemand::parser parser;
  std::string buf;
};
inline Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

// The member at op.path of the object `v` (or of its members): 1 found, 0 missing or not an
// object, -1 malformed.
inline int Find(const OpNode& op, simdjson::ondemand::document& doc, simdjson::ondemand::value* v) {
  {
    simdjson::ondemand::object obj;
    auto e = doc.get_object().get(obj);
    if (e == simdjson::INCORRECT_TYPE) return 0;
    if (e != simdjson::SUCCESS) return -1;
    e = obj.find_field_unordered(op.path[0]).get(*v);
    if (e == simdjson::NO_SUCH_FIELD) return 0;
    if (e != simdjson::SUCCESS) return -1;
  }
  for (size_t k = 1; k < op.path.size(); ++k) {
    simdjson::ondemand::object obj;
    auto e = v->get_object().get(obj);
    if (e == simdjson::INCORRECT_TYPE) return 0;
    if (e != simdjson::SUCCESS) return -1;
    e = obj.find_field_unordered(op.path[k]).get(*v);
    if (e == simdjson::NO_SUCH_FIELD) return 0;
    if (e != simdjson::SUCCESS) return -1;
  }
  return 1;
}

// A member as a string: a string's text, an object's or array's JSON, another value's token.
inline int AsString(simdjson::ondemand::value& v, simdjson::ondemand::json_type t,
                    std::string_view* s) {
  using JT = simdjson::ondemand::json_type;
  if (t == JT::string) return v.get_string().get(*s) == simdjson::SUCCESS ? 1 : -1;
  if (t == JT::object) {
    simdjson::ondemand::object o;
    if (v.get_object().get(o) != simdjson::SUCCESS) return -1;
    return o.raw_json().get(*s) == simdjson::SUCCESS ? 1 : -1;
  }
  if (t == JT::array) {
    simdjson::ondemand::array a;
    if (v.get_array().get(a) != simdjson::SUCCESS) return -1;
    return a.raw_json().get(*s) == simdjson::SUCCESS ? 1 : -1;
  }
  *s = v.raw_json_token();
  while (!s->empty() && (s->back() == ' ' || s->back() == '\t' || s->back() == '\n')) {
    s->remove_suffix(1);
  }
  if (t == JT::boolean) {
    bool b;
    if (v.get_bool().get(b) != simdjson::SUCCESS) return -1;
  }
  return 1;
}

// json_field on one string: 1 found (cell set), 0 null (missing member or another type), -1
// malformed JSON.
inline int Field(const OpNode& op, Str in, Arena* arena, int lane, void* cell) {
  Scratch& js = ThreadScratch();
  js.buf.assign(in.p, in.n);
  js.buf.resize(in.n + simdjson::SIMDJSON_PADDING, ' ');
  simdjson::ondemand::document doc;
  if (js.parser.iterate(js.buf.data(), in.n, js.buf.size()).get(doc) != simdjson::SUCCESS)
    return -1;
  simdjson::ondemand::value v;
  if (const int found = Find(op, doc, &v); found != 1) return found;
  simdjson::ondemand::json_type t;
  if (v.type().get(t) != simdjson::SUCCESS) return -1;
  using JT = simdjson::ondemand::json_type;
  if (t == JT::null) return 0;
  switch (op.to) {
    case ColType::kInt: {
      if (t != JT::number) return 0;
      auto e = v.get_int64().get(*static_cast<int64_t*>(cell));
      if (e == simdjson::SUCCESS) return 1;
      return e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_OUT_OF_RANGE ? 0 : -1;
    }
    case ColType::kFloat: {
      if (t != JT::number) return 0;
      return v.get_double().get(*static_cast<double*>(cell)) == simdjson::SUCCESS ? 1 : -1;
    }
    default: {
      std::string_view s;
      if (AsString(v, t, &s) != 1) return -1;
      *static_cast<Str*>(cell) = arena->Copy(s, lane);
      return 1;
    }
  }
}

}  // namespace json_field

inline OpSpec JsonFieldSpec() {
  OpSpec s;
  s.params = {"input", "path", "type"};
  s.bad_kind = BadKind::kBadJson;
  s.parse = [](OpParse& p) -> Status {
    RETURN_IF_ERROR(p.Inputs("input"));
    RETURN_IF_ERROR(ParseToType(p, "type"));
    ASSIGN_OR_RETURN(std::string path, p.Scalar("path"));
    size_t start = 0;
    while (true) {
      size_t dot = path.find('.', start);
      std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
      if (part.empty()) return p.Error("path", "path '" + path + "': an empty member name");
      p.op().path.push_back(part);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return Status::OK();
  };
  s.type = [](const OpTyping& t) -> StatusOr<ColType> {
    if (t.in[0] != ColType::kString) return t.Bad(0, "string");
    return t.op.to;
  };
  s.rows = [](const OpRows& x) {
    for (uint32_t r = x.begin; r < x.end; ++r) {
      if (!x.in.valid[r]) {
        x.SetNull(r);
        continue;
      }
      void* cell = static_cast<char*>(x.out.cells) + r * CellBytes(x.out.type);
      const int found = json_field::Field(x.op, x.in.strs()[r], x.arena, x.lane, cell);
      if (found == 1) {
        x.out.valid[r] = 1;
      } else {
        x.SetNull(r);
        if (found < 0) x.MarkError(r);
      }
    }
  };
  return s;
}
#endif

}  // namespace ctrbox::ops

#endif  // CTRBOX_FEATURE_OPS_JSON_FIELD_H_
