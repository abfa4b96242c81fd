#include "feature/graph.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "util/hash.h"
#include "util/parse.h"

namespace ctrbox {

const char* ColTypeName(ColType t) {
  switch (t) {
    case ColType::kInt:
      return "int";
    case ColType::kFloat:
      return "float";
    case ColType::kString:
      return "string";
    case ColType::kKeys:
      return "keys";
    case ColType::kList:
      return "list";
    case ColType::kHashed:
      return "hashed";
    case ColType::kMask:
      return "mask";
    case ColType::kTag:
      return "tag";
  }
  return "?";
}

const char* OpKindName(OpKind k) {
  constexpr const char* kNames[] = {
      "fill_null", "cast",      "json_field", "filter", "dedupe",    "join", "gather", "hash",
      "cross",     "bucketize", "split",      "last_n", "time_part", "log",  "clip",   "normalize"};
  return kNames[static_cast<int>(k)];
}

int FeaturePlan::FindColumn(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

int LineOf(const YAML::Node& n) { return n.Mark().line + 1; }

// Errors of one YAML file, each with its line.
class Errors {
 public:
  explicit Errors(std::string path) : path_(std::move(path)) {}
  Status At(const YAML::Node& n, const std::string& what) const { return At(LineOf(n), what); }
  Status At(int line, const std::string& what) const {
    return InvalidArgumentError(fmt::format("{}:{}: features: {}", path_, line, what));
  }

 private:
  std::string path_;
};

StatusOr<std::string> Scalar(const Errors& e, const YAML::Node& n, const std::string& what) {
  if (!n.IsDefined() || n.IsNull()) return e.At(n, what + " has no value");
  if (!n.IsScalar()) return e.At(n, what + ": expected a single value");
  return n.as<std::string>();
}

StatusOr<double> Number(const Errors& e, const YAML::Node& n, const std::string& what) {
  ASSIGN_OR_RETURN(std::string s, Scalar(e, n, what));
  double v;
  if (!ParseDouble(s, &v) || !std::isfinite(v)) {
    return e.At(n, fmt::format("{}: '{}' is not a number", what, s));
  }
  return v;
}

// A scalar or a list of scalars.
StatusOr<std::vector<std::string>> Names(const Errors& e, const YAML::Node& n,
                                         const std::string& what) {
  std::vector<std::string> out;
  if (n.IsSequence()) {
    for (const auto& item : n) {
      ASSIGN_OR_RETURN(std::string s, Scalar(e, item, what));
      out.push_back(std::move(s));
    }
  } else {
    ASSIGN_OR_RETURN(std::string s, Scalar(e, n, what));
    out.push_back(std::move(s));
  }
  if (out.empty()) return e.At(n, what + " is an empty list");
  return out;
}

Status CheckKeys(const Errors& e, const YAML::Node& map, const std::set<std::string>& allowed,
                 const std::string& what) {
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string known;
      for (const std::string& a : allowed) known += (known.empty() ? "" : ", ") + a;
      return e.At(kv.first, fmt::format("unknown key '{}' in {} (known: {})", key, what, known));
    }
  }
  return Status::OK();
}

StatusOr<ColType> ViewType(const Errors& e, const YAML::Node& n) {
  ASSIGN_OR_RETURN(std::string s, Scalar(e, n, "a column type"));
  if (s == "int") return ColType::kInt;
  if (s == "float") return ColType::kFloat;
  if (s == "string") return ColType::kString;
  if (s == "keys") return ColType::kKeys;
  return e.At(n, fmt::format("column type '{}': expected int, float, string or keys", s));
}

StatusOr<ViewLayout> ParseLayout(const Errors& e, const YAML::Node& n, const std::string& what) {
  ViewLayout l;
  if (n["format"]) {
    ASSIGN_OR_RETURN(std::string f, Scalar(e, n["format"], what + ".format"));
    if (f == "csv") {
      l.format = ViewFormat::kCsv;
    } else if (f == "tsv") {
      l.format = ViewFormat::kTsv;
    } else if (f == "jsonl") {
      l.format = ViewFormat::kJsonl;
    } else {
      return e.At(n["format"], fmt::format("{}.format '{}': expected csv, tsv or jsonl", what, f));
    }
  }
  if (n["header"]) {
    ASSIGN_OR_RETURN(std::string h, Scalar(e, n["header"], what + ".header"));
    if (!ParseBool(h, &l.header))
      return e.At(n["header"], what + ".header: expected true or false");
  }
  if (l.format == ViewFormat::kJsonl) l.header = false;
  const YAML::Node cols = n["columns"];
  if (!cols || !cols.IsMap() || cols.size() == 0) {
    return e.At(cols ? cols : n, what + ".columns: expected a map of column names to types");
  }
  std::set<std::string> seen;
  for (const auto& kv : cols) {
    ViewColumn c;
    c.name = kv.first.as<std::string>();
    if (c.name.empty() || c.name.find('.') != std::string::npos) {
      return e.At(kv.first,
                  fmt::format("column name '{}': must be non-empty, without '.'", c.name));
    }
    if (!seen.insert(c.name).second) return e.At(kv.first, "column '" + c.name + "' twice");
    ASSIGN_OR_RETURN(c.type, ViewType(e, kv.second));
    l.columns.push_back(std::move(c));
  }
  return l;
}

int ColumnIndex(const ViewLayout& l, const std::string& name) {
  for (size_t i = 0; i < l.columns.size(); ++i) {
    if (l.columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// One operator as written, before its inputs are resolved.
struct RawOp {
  YAML::Node node;
  OpNode op;
  std::vector<std::string> inputs;
  std::vector<YAML::Node> input_nodes;
  std::string alias;  // join: `as`
};

const std::map<std::string, OpKind>& OpKinds() {
  static const auto* kinds = new std::map<std::string, OpKind>{{"fill_null", OpKind::kFillNull},
                                                               {"cast", OpKind::kCast},
                                                               {"json_field", OpKind::kJsonField},
                                                               {"filter", OpKind::kFilter},
                                                               {"dedupe", OpKind::kDedupe},
                                                               {"join", OpKind::kJoin},
                                                               {"hash", OpKind::kHash},
                                                               {"cross", OpKind::kCross},
                                                               {"bucketize", OpKind::kBucketize},
                                                               {"split", OpKind::kSplit},
                                                               {"last_n", OpKind::kLastN},
                                                               {"time_part", OpKind::kTimePart},
                                                               {"log", OpKind::kLog},
                                                               {"clip", OpKind::kClip},
                                                               {"normalize", OpKind::kNormalize}};
  return *kinds;
}

// The parameter keys each operator takes (besides op and name).
std::set<std::string> ParamKeys(OpKind k) {
  switch (k) {
    case OpKind::kFillNull:
      return {"input", "value"};
    case OpKind::kCast:
      return {"input", "to"};
    case OpKind::kJsonField:
      return {"input", "path", "type"};
    case OpKind::kFilter:
      return {"input", "cmp", "value", "values"};
    case OpKind::kDedupe:
      return {"inputs"};
    case OpKind::kJoin:
      return {"view", "on", "as"};
    case OpKind::kHash:
      return {"input"};
    case OpKind::kCross:
      return {"inputs", "max_keys"};
    case OpKind::kBucketize:
      return {"input", "boundaries"};
    case OpKind::kSplit:
      return {"input", "sep"};
    case OpKind::kLastN:
      return {"input", "n", "sep"};
    case OpKind::kTimePart:
      return {"input", "part", "utc_offset_hours"};
    case OpKind::kLog:
      return {"input"};
    case OpKind::kClip:
      return {"input", "min", "max"};
    case OpKind::kNormalize:
      return {"input", "mean", "std"};
    case OpKind::kGather:
      return {};
  }
  return {};
}

StatusOr<Constant> ParseConstant(const Errors& e, const YAML::Node& n, const std::string& what) {
  ASSIGN_OR_RETURN(std::string s, Scalar(e, n, what));
  Constant c;
  c.s = s;
  double f;
  if (ParseDouble(s, &f) && std::isfinite(f)) {
    c.is_number = true;
    c.f = f;
    int64_t i;
    c.i = ParseInt64(s, &i) ? i : static_cast<int64_t>(f);
  }
  return c;
}

StatusOr<RawOp> ParseOp(const Errors& e, const YAML::Node& n, int index) {
  if (!n.IsMap()) return e.At(n, "an operator is a map with at least `op`");
  RawOp r;
  r.node = n;
  OpNode& op = r.op;
  op.line = LineOf(n);
  ASSIGN_OR_RETURN(std::string kind, Scalar(e, n["op"], "op"));
  auto it = OpKinds().find(kind);
  if (it == OpKinds().end()) {
    std::string known;
    for (const auto& [name, k] : OpKinds()) known += (known.empty() ? "" : ", ") + name;
    return e.At(n["op"], fmt::format("unknown operator '{}' (known: {})", kind, known));
  }
  op.kind = it->second;
  std::set<std::string> allowed = ParamKeys(op.kind);
  allowed.insert("op");
  allowed.insert("name");
  RETURN_IF_ERROR(CheckKeys(e, n, allowed, "operator " + kind));
  const bool named =
      op.kind != OpKind::kJoin && op.kind != OpKind::kFilter && op.kind != OpKind::kDedupe;
  if (n["name"]) {
    ASSIGN_OR_RETURN(op.name, Scalar(e, n["name"], "name"));
    if (op.name.empty() || op.name.find('.') != std::string::npos) {
      return e.At(n["name"], fmt::format("name '{}': must be non-empty, without '.'", op.name));
    }
  } else if (named) {
    return e.At(n, fmt::format("operator {} needs a `name` (the column it makes)", kind));
  } else {
    op.name = fmt::format("{}#{}", kind, index + 1);
  }
  auto input = [&](const char* key) -> Status {
    if (!n[key]) return e.At(n, fmt::format("operator {} needs `{}`", kind, key));
    ASSIGN_OR_RETURN(std::vector<std::string> names, Names(e, n[key], key));
    r.inputs = std::move(names);
    r.input_nodes.assign(r.inputs.size(), n[key]);
    return Status::OK();
  };
  auto number = [&](const char* key, double* out) -> Status {
    if (!n[key]) return e.At(n, fmt::format("operator {} needs `{}`", kind, key));
    ASSIGN_OR_RETURN(*out, Number(e, n[key], key));
    return Status::OK();
  };
  switch (op.kind) {
    case OpKind::kFillNull: {
      RETURN_IF_ERROR(input("input"));
      if (!n["value"]) return e.At(n, "operator fill_null needs `value`");
      ASSIGN_OR_RETURN(op.value, ParseConstant(e, n["value"], "value"));
      break;
    }
    case OpKind::kCast:
    case OpKind::kJsonField: {
      RETURN_IF_ERROR(input("input"));
      const char* key = op.kind == OpKind::kCast ? "to" : "type";
      ASSIGN_OR_RETURN(std::string t, Scalar(e, n[key], key));
      if (t == "int") {
        op.to = ColType::kInt;
      } else if (t == "float") {
        op.to = ColType::kFloat;
      } else if (t == "string") {
        op.to = ColType::kString;
      } else {
        return e.At(n[key], fmt::format("{} '{}': expected int, float or string", key, t));
      }
      if (op.kind == OpKind::kJsonField) {
        ASSIGN_OR_RETURN(std::string path, Scalar(e, n["path"], "path"));
        size_t start = 0;
        while (true) {
          size_t dot = path.find('.', start);
          std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
          if (part.empty()) return e.At(n["path"], "path '" + path + "': an empty member name");
          op.path.push_back(part);
          if (dot == std::string::npos) break;
          start = dot + 1;
        }
      }
      break;
    }
    case OpKind::kFilter: {
      RETURN_IF_ERROR(input("input"));
      if (r.inputs.size() != 1) return e.At(n["input"], "filter takes one input");
      ASSIGN_OR_RETURN(std::string cmp, Scalar(e, n["cmp"], "cmp"));
      static const std::map<std::string, Cmp> kCmps = {
          {"==", Cmp::kEq}, {"!=", Cmp::kNe}, {"<", Cmp::kLt},  {"<=", Cmp::kLe},
          {">", Cmp::kGt},  {">=", Cmp::kGe}, {"in", Cmp::kIn}, {"not_null", Cmp::kNotNull}};
      auto c = kCmps.find(cmp);
      if (c == kCmps.end()) {
        return e.At(n["cmp"], fmt::format("cmp '{}': expected == != < <= > >= in not_null", cmp));
      }
      op.cmp = c->second;
      if (op.cmp == Cmp::kIn) {
        if (!n["values"] || !n["values"].IsSequence() || n["values"].size() == 0) {
          return e.At(n, "filter with cmp `in` needs `values`, a non-empty list");
        }
        for (const auto& v : n["values"]) {
          ASSIGN_OR_RETURN(Constant k, ParseConstant(e, v, "values"));
          op.numbers.push_back(k.is_number ? k.f : 0.0);
          op.values.push_back(std::move(k));
        }
      } else if (op.cmp != Cmp::kNotNull) {
        if (!n["value"]) return e.At(n, "filter with cmp " + cmp + " needs `value`");
        ASSIGN_OR_RETURN(op.value, ParseConstant(e, n["value"], "value"));
      }
      break;
    }
    case OpKind::kDedupe:
      RETURN_IF_ERROR(input("inputs"));
      break;
    case OpKind::kJoin: {
      ASSIGN_OR_RETURN(std::string view, Scalar(e, n["view"], "view"));
      op.name = view;  // resolved against the views later
      RETURN_IF_ERROR(input("on"));
      if (n["as"]) {
        ASSIGN_OR_RETURN(r.alias, Scalar(e, n["as"], "as"));
        if (r.alias.empty() || r.alias.find('.') != std::string::npos) {
          return e.At(n["as"], "as: must be non-empty, without '.'");
        }
      }
      break;
    }
    case OpKind::kHash:
      RETURN_IF_ERROR(input("input"));
      break;
    case OpKind::kCross: {
      RETURN_IF_ERROR(input("inputs"));
      if (r.inputs.size() < 2) return e.At(n["inputs"], "cross takes two inputs or more");
      if (n["max_keys"]) {
        double m;
        RETURN_IF_ERROR(number("max_keys", &m));
        if (m < 1 || m > 1e7 || m != std::floor(m)) {
          return e.At(n["max_keys"], "max_keys: expected an integer in [1, 10^7]");
        }
        op.max_keys = static_cast<uint32_t>(m);
      }
      break;
    }
    case OpKind::kBucketize: {
      RETURN_IF_ERROR(input("input"));
      const YAML::Node b = n["boundaries"];
      if (!b || !b.IsSequence() || b.size() == 0) {
        return e.At(b ? b : n, "bucketize needs `boundaries`, a non-empty list of numbers");
      }
      for (const auto& v : b) {
        ASSIGN_OR_RETURN(double x, Number(e, v, "boundaries"));
        if (!op.boundaries.empty() && !(x > op.boundaries.back())) {
          return e.At(v, "boundaries must be strictly increasing");
        }
        op.boundaries.push_back(x);
      }
      break;
    }
    case OpKind::kSplit:
    case OpKind::kLastN: {
      RETURN_IF_ERROR(input("input"));
      if (n["sep"]) {
        ASSIGN_OR_RETURN(op.sep, Scalar(e, n["sep"], "sep"));
        if (op.sep.empty()) return e.At(n["sep"], "sep is empty");
      } else if (op.kind == OpKind::kSplit) {
        return e.At(n, "split needs `sep`");
      }
      if (op.kind == OpKind::kLastN) {
        double v;
        RETURN_IF_ERROR(number("n", &v));
        if (v < 1 || v > 65536 || v != std::floor(v)) {
          return e.At(n["n"], "n: expected an integer in [1, 65536]");
        }
        op.n = static_cast<uint32_t>(v);
      }
      break;
    }
    case OpKind::kTimePart: {
      RETURN_IF_ERROR(input("input"));
      ASSIGN_OR_RETURN(std::string part, Scalar(e, n["part"], "part"));
      static const std::map<std::string, TimePart> kParts = {
          {"minute", TimePart::kMinute},   {"hour", TimePart::kHour},
          {"weekday", TimePart::kWeekday}, {"day", TimePart::kDay},
          {"month", TimePart::kMonth},     {"year", TimePart::kYear}};
      auto p = kParts.find(part);
      if (p == kParts.end()) {
        return e.At(
            n["part"],
            fmt::format("part '{}': expected minute, hour, weekday, day, month or year", part));
      }
      op.part = p->second;
      if (n["utc_offset_hours"]) {
        double h;
        RETURN_IF_ERROR(number("utc_offset_hours", &h));
        if (std::fabs(h) > 24) return e.At(n["utc_offset_hours"], "utc_offset_hours: beyond ±24");
        op.utc_offset_seconds = static_cast<int64_t>(std::llround(h * 3600));
      }
      break;
    }
    case OpKind::kLog:
      RETURN_IF_ERROR(input("input"));
      break;
    case OpKind::kClip:
      RETURN_IF_ERROR(input("input"));
      RETURN_IF_ERROR(number("min", &op.a));
      RETURN_IF_ERROR(number("max", &op.b));
      if (op.a > op.b) return e.At(n["max"], "clip: max is below min");
      break;
    case OpKind::kNormalize:
      RETURN_IF_ERROR(input("input"));
      RETURN_IF_ERROR(number("mean", &op.a));
      RETURN_IF_ERROR(number("std", &op.b));
      if (!(op.b > 0)) return e.At(n["std"], "normalize: std must be > 0");
      break;
    case OpKind::kGather:
      break;
  }
  const bool one_input =
      op.kind != OpKind::kDedupe && op.kind != OpKind::kCross && op.kind != OpKind::kJoin;
  if (one_input && r.inputs.size() != 1) {
    return e.At(r.input_nodes.empty() ? n : r.input_nodes[0],
                fmt::format("operator {} takes one input", kind));
  }
  return r;
}

bool IsScalar(ColType t) {
  return t == ColType::kInt || t == ColType::kFloat || t == ColType::kString;
}
bool IsNumeric(ColType t) { return t == ColType::kInt || t == ColType::kFloat; }

// The output type of `op` given its inputs' types, or the reason it does not take them.
StatusOr<ColType> OutputType(const Errors& e, const OpNode& op, const std::vector<ColType>& in,
                             const std::vector<std::string>& in_names) {
  auto bad = [&](size_t i, const char* expected) {
    return e.At(op.line, fmt::format("operator {} ('{}'): input '{}' is {}, expected {}",
                                     OpKindName(op.kind), op.name, in_names[i], ColTypeName(in[i]),
                                     expected));
  };
  switch (op.kind) {
    case OpKind::kFillNull:
      if (!IsScalar(in[0])) return bad(0, "int, float or string");
      if (IsNumeric(in[0]) && !op.value.is_number) {
        return e.At(op.line, fmt::format("fill_null ('{}'): value '{}' is not a number, and '{}' "
                                         "is {}",
                                         op.name, op.value.s, in_names[0], ColTypeName(in[0])));
      }
      return in[0];
    case OpKind::kCast:
      if (!IsScalar(in[0])) return bad(0, "int, float or string");
      return op.to;
    case OpKind::kJsonField:
      if (in[0] != ColType::kString) return bad(0, "string");
      return op.to;
    case OpKind::kFilter:
      if (op.cmp == Cmp::kNotNull) return ColType::kMask;
      if (!IsScalar(in[0])) return bad(0, "int, float or string");
      if (IsNumeric(in[0])) {
        for (const Constant& c : op.cmp == Cmp::kIn ? op.values : std::vector<Constant>{op.value}) {
          if (!c.is_number) {
            return e.At(op.line, fmt::format("filter on '{}' ({}): '{}' is not a number",
                                             in_names[0], ColTypeName(in[0]), c.s));
          }
        }
      }
      return ColType::kMask;
    case OpKind::kDedupe:
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] == ColType::kMask || in[i] == ColType::kTag) return bad(i, "a data column");
      }
      return ColType::kTag;
    case OpKind::kHash:
      if (in[0] == ColType::kMask || in[0] == ColType::kTag) return bad(0, "a data column");
      return ColType::kHashed;
    case OpKind::kCross:
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] == ColType::kMask || in[i] == ColType::kTag) return bad(i, "a data column");
      }
      return ColType::kHashed;
    case OpKind::kBucketize:
      if (!IsNumeric(in[0])) return bad(0, "int or float");
      return ColType::kInt;
    case OpKind::kSplit:
      if (in[0] != ColType::kString) return bad(0, "string");
      return ColType::kList;
    case OpKind::kLastN:
      if (in[0] == ColType::kList) return ColType::kList;
      if (in[0] != ColType::kString) return bad(0, "list or string");
      if (op.sep.empty()) {
        return e.At(op.line, fmt::format("last_n ('{}') of a string needs `sep`", op.name));
      }
      return ColType::kList;
    case OpKind::kTimePart:
      if (in[0] != ColType::kInt) return bad(0, "int (unix seconds)");
      return ColType::kInt;
    case OpKind::kLog:
    case OpKind::kClip:
    case OpKind::kNormalize:
      if (!IsNumeric(in[0])) return bad(0, "int or float");
      return ColType::kFloat;
    case OpKind::kJoin:
      return ColType::kInt;
    case OpKind::kGather:
      return in[0];  // set by the caller
  }
  return ColType::kInt;
}

}  // namespace

bool HasFeatureGraph(const YAML::Node& features) {
  if (!features.IsMap()) return false;
  for (const char* k : {"main", "views", "ops", "label", "slots", "dense", "schedule", "device"}) {
    if (features[k]) return true;
  }
  return false;
}

namespace {

StatusOr<std::shared_ptr<const FeaturePlan>> ParseFeaturesOrThrow(const YAML::Node& f,
                                                                  const std::string& path) {
  Errors e(path);
  auto plan = std::make_shared<FeaturePlan>();
  plan->source = path;
  RETURN_IF_ERROR(CheckKeys(
      e, f, {"main", "views", "ops", "label", "slots", "dense", "schedule", "device", "hashing"},
      "features"));
  if (!f["main"] || !f["main"].IsMap()) {
    return e.At(f, "features needs `main`: the main view's format and columns");
  }
  RETURN_IF_ERROR(CheckKeys(e, f["main"], {"format", "header", "columns"}, "features.main"));
  ASSIGN_OR_RETURN(plan->main, ParseLayout(e, f["main"], "main"));
  if (f["device"]) {
    ASSIGN_OR_RETURN(std::string d, Scalar(e, f["device"], "device"));
    if (d != "cpu" && d != "gpu")
      return e.At(f["device"], "device '" + d + "': expected cpu or gpu");
    plan->gpu = d == "gpu";
  }
  if (f["schedule"]) {
    ASSIGN_OR_RETURN(std::string s, Scalar(e, f["schedule"], "schedule"));
    if (s != "layered" && s != "sequential") {
      return e.At(f["schedule"], "schedule '" + s + "': expected layered or sequential");
    }
    plan->layered = s == "layered";
  }

  // Side views.
  if (f["views"]) {
    if (!f["views"].IsMap()) return e.At(f["views"], "views: expected a map of view names");
    for (const auto& kv : f["views"]) {
      SideView v;
      v.name = kv.first.as<std::string>();
      v.line = LineOf(kv.first);
      const YAML::Node& n = kv.second;
      if (v.name.empty() || v.name.find('.') != std::string::npos) {
        return e.At(kv.first, "view name '" + v.name + "': must be non-empty, without '.'");
      }
      if (!n.IsMap()) return e.At(n, "view " + v.name + ": expected a map");
      RETURN_IF_ERROR(CheckKeys(e, n, {"paths", "command", "format", "header", "columns", "key"},
                                "view " + v.name));
      if (n["paths"]) {
        ASSIGN_OR_RETURN(v.paths, Names(e, n["paths"], "paths"));
      }
      if (n["command"]) {
        ASSIGN_OR_RETURN(v.command, Scalar(e, n["command"], "command"));
      }
      if (v.paths.empty() == v.command.empty()) {
        return e.At(n, "view " + v.name + ": set paths or command (one of them)");
      }
      ASSIGN_OR_RETURN(v.layout, ParseLayout(e, n, "view " + v.name));
      if (!n["key"]) return e.At(n, "view " + v.name + " needs `key`: the column(s) joined on");
      ASSIGN_OR_RETURN(std::vector<std::string> key, Names(e, n["key"], "key"));
      for (const std::string& k : key) {
        int c = ColumnIndex(v.layout, k);
        if (c < 0)
          return e.At(n["key"], "view " + v.name + ": key column '" + k + "' is not declared");
        const ColType t = v.layout.columns[c].type;
        if (t != ColType::kInt && t != ColType::kString) {
          return e.At(n["key"],
                      fmt::format("view {}: key column '{}' is {}, expected int or string", v.name,
                                  k, ColTypeName(t)));
        }
        v.key.push_back(c);
      }
      for (const SideView& o : plan->views) {
        if (o.name == v.name) return e.At(kv.first, "view '" + v.name + "' twice");
      }
      plan->views.push_back(std::move(v));
    }
  }

  // Columns: the main view's, then each operator's (a join's gathers right after it).
  for (size_t i = 0; i < plan->main.columns.size(); ++i) {
    plan->columns.push_back(
        {plan->main.columns[i].name, plan->main.columns[i].type, -1, static_cast<int>(i)});
  }
  std::vector<RawOp> raw;
  if (f["ops"]) {
    if (!f["ops"].IsSequence()) return e.At(f["ops"], "ops: expected a list of operators");
    int index = 0;
    for (const auto& n : f["ops"]) {
      ASSIGN_OR_RETURN(RawOp r, ParseOp(e, n, index++));
      raw.push_back(std::move(r));
    }
  }
  std::map<std::string, int> by_name;
  for (size_t i = 0; i < plan->columns.size(); ++i)
    by_name[plan->columns[i].name] = static_cast<int>(i);
  auto add_column = [&](const std::string& name, int producer, int line) -> StatusOr<int> {
    if (by_name.count(name)) {
      return e.At(line, fmt::format("the column '{}' is made twice", name));
    }
    const int id = static_cast<int>(plan->columns.size());
    plan->columns.push_back({name, ColType::kInt, producer, -1});
    by_name[name] = id;
    return id;
  };
  std::vector<std::vector<std::string>> input_names;
  std::vector<std::vector<YAML::Node>> input_nodes;
  for (RawOp& r : raw) {
    OpNode op = r.op;
    const int id = static_cast<int>(plan->ops.size());
    if (op.kind == OpKind::kJoin) {
      int v = -1;
      for (size_t i = 0; i < plan->views.size(); ++i) {
        if (plan->views[i].name == op.name) v = static_cast<int>(i);
      }
      if (v < 0) return e.At(r.node["view"], "join: no view named '" + op.name + "'");
      op.view = v;
      const std::string prefix = r.alias.empty() ? op.name : r.alias;
      op.name = "join " + prefix;
      if (r.inputs.size() != plan->views[v].key.size()) {
        return e.At(r.node["on"],
                    fmt::format("join {}: `on` names {} column(s), the view's key has {}", prefix,
                                r.inputs.size(), plan->views[v].key.size()));
      }
      ASSIGN_OR_RETURN(op.output, add_column(op.name, id, op.line));
      plan->ops.push_back(op);
      input_names.push_back(r.inputs);
      input_nodes.push_back(r.input_nodes);
      const ViewLayout& l = plan->views[v].layout;
      for (size_t c = 0; c < l.columns.size(); ++c) {
        OpNode g;
        g.kind = OpKind::kGather;
        g.name = prefix + "." + l.columns[c].name;
        g.line = op.line;
        g.view = v;
        g.view_col = static_cast<int>(c);
        const int gid = static_cast<int>(plan->ops.size());
        ASSIGN_OR_RETURN(g.output, add_column(g.name, gid, op.line));
        plan->ops.push_back(g);
        input_names.push_back({op.name});
        input_nodes.push_back({r.node});
      }
      continue;
    }
    ASSIGN_OR_RETURN(op.output, add_column(op.name, id, op.line));
    op.seed = XXH3_64bits(op.name.data(), op.name.size());
    plan->ops.push_back(op);
    input_names.push_back(r.inputs);
    input_nodes.push_back(r.input_nodes);
  }
  // Resolve inputs.
  for (size_t i = 0; i < plan->ops.size(); ++i) {
    OpNode& op = plan->ops[i];
    for (size_t k = 0; k < input_names[i].size(); ++k) {
      auto it = by_name.find(input_names[i][k]);
      if (it == by_name.end()) {
        return e.At(
            input_nodes[i][k],
            fmt::format("operator {}{}: unknown column '{}'", OpKindName(op.kind),
                        op.kind == OpKind::kJoin ? "" : " ('" + op.name + "')", input_names[i][k]));
      }
      op.inputs.push_back(it->second);
    }
  }
  // Topological order (YAML order where it is one); a cycle is refused.
  const size_t n_ops = plan->ops.size();
  std::vector<int> done(n_ops, 0);
  std::vector<int> order;
  bool progress = true;
  while (order.size() < n_ops && progress) {
    progress = false;
    for (size_t i = 0; i < n_ops; ++i) {
      if (done[i]) continue;
      bool ready = true;
      for (int c : plan->ops[i].inputs) {
        const int p = plan->columns[c].producer;
        if (p >= 0 && !done[p]) ready = false;
      }
      if (!ready) continue;
      done[i] = 1;
      order.push_back(static_cast<int>(i));
      progress = true;
      break;  // restart from the top: YAML order first
    }
  }
  if (order.size() < n_ops) {
    std::string members;
    int line = 0;
    for (size_t i = 0; i < n_ops; ++i) {
      if (done[i]) continue;
      if (line == 0) line = plan->ops[i].line;
      members += (members.empty() ? "" : ", ") + plan->ops[i].name;
    }
    return e.At(line, "the operators form a cycle (or depend on one): " + members);
  }
  plan->topo = order;
  // Types and depths, in topological order.
  int max_depth = 0;
  for (int i : order) {
    OpNode& op = plan->ops[i];
    std::vector<ColType> types;
    std::vector<std::string> names;
    for (int c : op.inputs) {
      types.push_back(plan->columns[c].type);
      names.push_back(plan->columns[c].name);
      const int p = plan->columns[c].producer;
      op.depth = std::max(op.depth, p < 0 ? 1 : plan->ops[p].depth + 1);
    }
    if (op.inputs.empty()) op.depth = 1;
    ColType out;
    if (op.kind == OpKind::kGather) {
      out = plan->views[op.view].layout.columns[op.view_col].type;
    } else if (op.kind == OpKind::kJoin) {
      const SideView& v = plan->views[op.view];
      for (size_t k = 0; k < types.size(); ++k) {
        const ColType want = v.layout.columns[v.key[k]].type;
        if (types[k] != want) {
          return e.At(op.line, fmt::format("join {}: '{}' is {}, but the view's key column '{}' "
                                           "is {}",
                                           v.name, names[k], ColTypeName(types[k]),
                                           v.layout.columns[v.key[k]].name, ColTypeName(want)));
        }
      }
      out = ColType::kInt;
    } else {
      ASSIGN_OR_RETURN(out, OutputType(e, op, types, names));
    }
    plan->columns[op.output].type = out;
    max_depth = std::max(max_depth, op.depth);
    if (op.kind == OpKind::kFilter) plan->filters.push_back(i);
    if (op.kind == OpKind::kDedupe) plan->dedupes.push_back(i);
  }
  plan->layers.assign(max_depth, {});
  for (int i : order) plan->layers[plan->ops[i].depth - 1].push_back(i);
  for (auto& layer : plan->layers) std::sort(layer.begin(), layer.end());
  std::sort(plan->filters.begin(), plan->filters.end());
  std::sort(plan->dedupes.begin(), plan->dedupes.end());

  // Outputs.
  auto output = [&](const YAML::Node& n, const std::string& name, const char* what,
                    bool (*ok)(ColType), const char* expected) -> StatusOr<int> {
    auto it = by_name.find(name);
    if (it == by_name.end()) return e.At(n, fmt::format("{}: unknown column '{}'", what, name));
    const ColType t = plan->columns[it->second].type;
    if (!ok(t)) {
      return e.At(n,
                  fmt::format("{}: '{}' is {}, expected {}", what, name, ColTypeName(t), expected));
    }
    return it->second;
  };
  if (!f["label"]) return e.At(f, "features needs `label`: the column holding 0 or 1");
  {
    ASSIGN_OR_RETURN(std::string name, Scalar(e, f["label"], "label"));
    ASSIGN_OR_RETURN(plan->label, output(f["label"], name, "label", IsNumeric, "int or float"));
  }
  auto is_slot = [](ColType t) { return t != ColType::kMask && t != ColType::kTag; };
  if (!f["slots"]) return e.At(f, "features needs `slots`: the columns that become slots");
  {
    ASSIGN_OR_RETURN(std::vector<std::string> names, Names(e, f["slots"], "slots"));
    for (size_t i = 0; i < names.size(); ++i) {
      const YAML::Node n = f["slots"].IsSequence() ? f["slots"][i] : f["slots"];
      ASSIGN_OR_RETURN(int c, output(n, names[i], "slots", +is_slot, "a data column"));
      plan->slots.push_back(c);
    }
  }
  if (f["dense"]) {
    ASSIGN_OR_RETURN(std::vector<std::string> names, Names(e, f["dense"], "dense"));
    for (size_t i = 0; i < names.size(); ++i) {
      const YAML::Node n = f["dense"].IsSequence() ? f["dense"][i] : f["dense"];
      ASSIGN_OR_RETURN(int c, output(n, names[i], "dense", IsNumeric, "int or float"));
      plan->dense.push_back(c);
    }
  }
  return std::shared_ptr<const FeaturePlan>(std::move(plan));
}

}  // namespace

StatusOr<std::shared_ptr<const FeaturePlan>> ParseFeatures(const YAML::Node& f,
                                                           const std::string& path) {
  // yaml-cpp throws where a node is not what a conversion expects (a map as a name).
  try {
    return ParseFeaturesOrThrow(f, path);
  } catch (const YAML::Exception& x) {
    return InvalidArgumentError(fmt::format("{}:{}: features: {}", path, x.mark.line + 1, x.msg));
  }
}

std::string FeaturePlan::Describe() const {
  std::string s = fmt::format("main view: {} columns; {} side view(s); {} operators in {} layers\n",
                              main.columns.size(), views.size(), ops.size(), layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    s += fmt::format("layer {}:", l + 1);
    for (int i : layers[l]) {
      const OpNode& op = ops[i];
      std::string in;
      for (int c : op.inputs) in += (in.empty() ? "" : ", ") + columns[c].name;
      s += fmt::format(" {}={}({})", op.name, OpKindName(op.kind), in);
    }
    s += "\n";
  }
  std::string out = "label " + columns[label].name + "; slots";
  for (int c : slots) out += " " + columns[c].name;
  if (!dense.empty()) out += "; dense";
  for (int c : dense) out += " " + columns[c].name;
  return s + out + "\n";
}

uint64_t FeaturePlan::Fingerprint() const {
  std::string s = Describe();
  for (const OpNode& op : ops) {
    s += fmt::format("|{} {} {} {} {} {} {} {} {} {} {}", op.value.s, static_cast<int>(op.cmp),
                     static_cast<int>(op.to), op.sep, op.n, static_cast<int>(op.part),
                     op.utc_offset_seconds, op.a, op.b, op.max_keys, op.path.size());
    for (const auto& p : op.path) s += "." + p;
    for (const auto& v : op.values) s += "," + v.s;
    for (double b : op.boundaries) s += fmt::format(",{}", b);
  }
  for (const ViewColumn& c : main.columns) s += fmt::format("|{}:{}", c.name, ColTypeName(c.type));
  s += fmt::format("|{}{}", static_cast<int>(main.format), main.header);  // not device: same rows
  for (const SideView& v : views) {
    s += "|" + v.name + v.command;
    for (const auto& p : v.paths) s += "," + p;
    for (const ViewColumn& c : v.layout.columns)
      s += fmt::format(":{}:{}", c.name, ColTypeName(c.type));
  }
  return XXH3_64bits(s.data(), s.size());
}

}  // namespace ctrbox
