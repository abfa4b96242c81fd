#include "feature/graph.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "feature/op_spec.h"
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

int FeaturePlan::FindColumn(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

using Errors = YamlErrors;

StatusOr<ColType> ViewType(const Errors& e, const YAML::Node& n) {
  ASSIGN_OR_RETURN(std::string s, YamlScalar(e, n, "a column type"));
  if (s == "int") return ColType::kInt;
  if (s == "float") return ColType::kFloat;
  if (s == "string") return ColType::kString;
  if (s == "keys") return ColType::kKeys;
  return e.At(n, fmt::format("column type '{}': expected int, float, string or keys", s));
}

StatusOr<ViewLayout> ParseLayout(const Errors& e, const YAML::Node& n, const std::string& what) {
  ViewLayout l;
  if (n["format"]) {
    ASSIGN_OR_RETURN(std::string f, YamlScalar(e, n["format"], what + ".format"));
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
    ASSIGN_OR_RETURN(std::string h, YamlScalar(e, n["header"], what + ".header"));
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

// The part every operator shares (op, name, the keys it takes, its inputs' count); the rest
// is its spec's parse (ops/<name>.h).
StatusOr<RawOp> ParseOp(const Errors& e, const YAML::Node& n, int index) {
  if (!n.IsMap()) return e.At(n, "an operator is a map with at least `op`");
  RawOp r;
  r.node = n;
  OpNode& op = r.op;
  op.line = YamlLine(n);
  ASSIGN_OR_RETURN(std::string kind, YamlScalar(e, n["op"], "op"));
  const OpSpec* spec = FindSpec(kind, &op.kind);
  if (spec == nullptr) {
    return e.At(n["op"], fmt::format("unknown operator '{}' (known: {})", kind, KnownOpNames()));
  }
  std::vector<std::string> allowed = spec->params;
  allowed.push_back("op");
  allowed.push_back("name");
  RETURN_IF_ERROR(CheckYamlKeys(e, n, allowed, "operator " + kind));
  if (n["name"]) {
    ASSIGN_OR_RETURN(op.name, YamlScalar(e, n["name"], "name"));
    if (op.name.empty() || op.name.find('.') != std::string::npos) {
      return e.At(n["name"], fmt::format("name '{}': must be non-empty, without '.'", op.name));
    }
  } else if (spec->named) {
    return e.At(n, fmt::format("operator {} needs a `name` (the column it makes)", kind));
  } else {
    op.name = fmt::format("{}#{}", kind, index + 1);
  }
  OpParse parse(e, n, kind, &op);
  RETURN_IF_ERROR(spec->parse(parse));
  r.inputs = parse.inputs();
  r.input_nodes = parse.input_nodes();
  r.alias = std::move(parse.alias);
  if (spec->one_input && r.inputs.size() != 1) {
    return e.At(r.input_nodes.empty() ? n : r.input_nodes[0],
                fmt::format("operator {} takes one input", kind));
  }
  return r;
}

}  // namespace

bool HasFeatureGraph(const YAML::Node& features) {
  if (!features.IsMap()) return false;
  for (const char* k : kFeatureGraphKeys) {
    if (features[k]) return true;
  }
  return false;
}

namespace {

// features.main, .device and .schedule.
Status ParseMain(const Errors& e, const YAML::Node& f, FeaturePlan* plan) {
  if (!f["main"] || !f["main"].IsMap()) {
    return e.At(f, "features needs `main`: the main view's format and columns");
  }
  RETURN_IF_ERROR(CheckYamlKeys(e, f["main"], {"format", "header", "columns"}, "features.main"));
  ASSIGN_OR_RETURN(plan->main, ParseLayout(e, f["main"], "main"));
  if (f["device"]) {
    ASSIGN_OR_RETURN(std::string d, YamlScalar(e, f["device"], "device"));
    if (d != "cpu" && d != "gpu")
      return e.At(f["device"], "device '" + d + "': expected cpu or gpu");
    plan->gpu = d == "gpu";
  }
  if (f["max_row_keys"]) {
    ASSIGN_OR_RETURN(std::string m, YamlScalar(e, f["max_row_keys"], "max_row_keys"));
    uint64_t v = 0;
    if (!ParseUint64(m, &v) || v < 1 || v > 10'000'000) {
      return e.At(f["max_row_keys"], "max_row_keys '" + m + "': expected an integer in [1, 10^7]");
    }
    plan->max_row_keys = static_cast<uint32_t>(v);
  }
  if (f["schedule"]) {
    ASSIGN_OR_RETURN(std::string s, YamlScalar(e, f["schedule"], "schedule"));
    if (s != "layered" && s != "sequential") {
      return e.At(f["schedule"], "schedule '" + s + "': expected layered or sequential");
    }
    plan->layered = s == "layered";
  }
  return Status::OK();
}

// One side view of features.views.
StatusOr<SideView> ParseView(const Errors& e, const YAML::Node& name, const YAML::Node& n) {
  SideView v;
  v.name = name.as<std::string>();
  v.line = YamlLine(name);
  if (v.name.empty() || v.name.find('.') != std::string::npos) {
    return e.At(name, "view name '" + v.name + "': must be non-empty, without '.'");
  }
  if (!n.IsMap()) return e.At(n, "view " + v.name + ": expected a map");
  RETURN_IF_ERROR(
      CheckYamlKeys(e, n, {"paths", "command", "format", "header", "columns", "key", "allow_empty"},
                    "view " + v.name));
  if (n["allow_empty"]) {
    ASSIGN_OR_RETURN(std::string a, YamlScalar(e, n["allow_empty"], "allow_empty"));
    if (!ParseBool(a, &v.allow_empty)) {
      return e.At(n["allow_empty"], "view " + v.name + ".allow_empty: expected true or false");
    }
  }
  if (n["paths"]) {
    ASSIGN_OR_RETURN(v.paths, YamlNames(e, n["paths"], "paths"));
  }
  if (n["command"]) {
    ASSIGN_OR_RETURN(v.command, YamlScalar(e, n["command"], "command"));
  }
  if (v.paths.empty() == v.command.empty()) {
    return e.At(n, "view " + v.name + ": set paths or command (one of them)");
  }
  ASSIGN_OR_RETURN(v.layout, ParseLayout(e, n, "view " + v.name));
  if (!n["key"]) return e.At(n, "view " + v.name + " needs `key`: the column(s) joined on");
  ASSIGN_OR_RETURN(std::vector<std::string> key, YamlNames(e, n["key"], "key"));
  for (const std::string& k : key) {
    int c = ColumnIndex(v.layout, k);
    if (c < 0) return e.At(n["key"], "view " + v.name + ": key column '" + k + "' is not declared");
    const ColType t = v.layout.columns[c].type;
    if (t != ColType::kInt && t != ColType::kString) {
      return e.At(n["key"], fmt::format("view {}: key column '{}' is {}, expected int or string",
                                        v.name, k, ColTypeName(t)));
    }
    v.key.push_back(c);
  }
  return v;
}

Status ParseViews(const Errors& e, const YAML::Node& f, FeaturePlan* plan) {
  if (!f["views"]) return Status::OK();
  if (!f["views"].IsMap()) return e.At(f["views"], "views: expected a map of view names");
  for (const auto& kv : f["views"]) {
    ASSIGN_OR_RETURN(SideView v, ParseView(e, kv.first, kv.second));
    for (const SideView& o : plan->views) {
      if (o.name == v.name) return e.At(kv.first, "view '" + v.name + "' twice");
    }
    plan->views.push_back(std::move(v));
  }
  return Status::OK();
}

// The plan's columns and operators as the YAML writes them, inputs still by name.
class GraphBuilder {
 public:
  GraphBuilder(const Errors& e, FeaturePlan* plan) : e_(e), plan_(plan) {
    // The main view's columns first.
    for (size_t i = 0; i < plan->main.columns.size(); ++i) {
      plan->columns.push_back(
          {plan->main.columns[i].name, plan->main.columns[i].type, -1, static_cast<int>(i)});
      by_name_[plan->main.columns[i].name] = static_cast<int>(i);
    }
  }

  // An operator and its column; a join, then one gather per column of its view.
  Status Add(RawOp& r) {
    OpNode op = r.op;
    const int id = static_cast<int>(plan_->ops.size());
    if (op.kind != OpKind::kJoin) {
      ASSIGN_OR_RETURN(op.output, AddColumn(op.name, id, op.line));
      op.seed = XXH3_64bits(op.name.data(), op.name.size());
      Push(std::move(op), r.inputs, r.input_nodes);
      return Status::OK();
    }
    int v = -1;
    for (size_t i = 0; i < plan_->views.size(); ++i) {
      if (plan_->views[i].name == op.name) v = static_cast<int>(i);
    }
    if (v < 0) return e_.At(r.node["view"], "join: no view named '" + op.name + "'");
    op.view = v;
    const std::string prefix = r.alias.empty() ? op.name : r.alias;
    op.name = "join " + prefix;
    if (r.inputs.size() != plan_->views[v].key.size()) {
      return e_.At(r.node["on"],
                   fmt::format("join {}: `on` names {} column(s), the view's key has {}", prefix,
                               r.inputs.size(), plan_->views[v].key.size()));
    }
    ASSIGN_OR_RETURN(op.output, AddColumn(op.name, id, op.line));
    const std::string join_name = op.name;
    const int line = op.line;
    Push(std::move(op), r.inputs, r.input_nodes);
    const ViewLayout& l = plan_->views[v].layout;
    for (size_t c = 0; c < l.columns.size(); ++c) {
      OpNode g;
      g.kind = OpKind::kGather;
      g.name = prefix + "." + l.columns[c].name;
      g.line = line;
      g.view = v;
      g.view_col = static_cast<int>(c);
      ASSIGN_OR_RETURN(g.output, AddColumn(g.name, static_cast<int>(plan_->ops.size()), line));
      Push(std::move(g), {join_name}, {r.node});
    }
    return Status::OK();
  }

  // Every operator's inputs by column id.
  Status ResolveInputs() {
    for (size_t i = 0; i < plan_->ops.size(); ++i) {
      OpNode& op = plan_->ops[i];
      for (size_t k = 0; k < input_names_[i].size(); ++k) {
        auto it = by_name_.find(input_names_[i][k]);
        if (it == by_name_.end()) {
          return e_.At(input_nodes_[i][k],
                       fmt::format("operator {}{}: unknown column '{}'", OpKindName(op.kind),
                                   op.kind == OpKind::kJoin ? "" : " ('" + op.name + "')",
                                   input_names_[i][k]));
        }
        op.inputs.push_back(it->second);
      }
    }
    return Status::OK();
  }

  const std::map<std::string, int>& by_name() const { return by_name_; }

 private:
  StatusOr<int> AddColumn(const std::string& name, int producer, int line) {
    if (by_name_.count(name))
      return e_.At(line, fmt::format("the column '{}' is made twice", name));
    const int id = static_cast<int>(plan_->columns.size());
    plan_->columns.push_back({name, ColType::kInt, producer, -1});
    by_name_[name] = id;
    return id;
  }
  void Push(OpNode op, std::vector<std::string> names, std::vector<YAML::Node> nodes) {
    plan_->ops.push_back(std::move(op));
    input_names_.push_back(std::move(names));
    input_nodes_.push_back(std::move(nodes));
  }

  const Errors& e_;
  FeaturePlan* plan_;
  std::map<std::string, int> by_name_;
  std::vector<std::vector<std::string>> input_names_;
  std::vector<std::vector<YAML::Node>> input_nodes_;
};

// The operators in a topological order (YAML order where it is one); a cycle is refused.
Status OrderOps(const Errors& e, FeaturePlan* plan) {
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
  plan->topo = std::move(order);
  return Status::OK();
}

// Each operator's output type (its spec's rule) and depth, in topological order, and the
// layers: the operators of one depth.
Status TypeAndLayer(const Errors& e, FeaturePlan* plan) {
  int max_depth = 0;
  for (int i : plan->topo) {
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
    ASSIGN_OR_RETURN(plan->columns[op.output].type,
                     SpecOf(op.kind).type(OpTyping{*plan, e, op, types, names}));
    max_depth = std::max(max_depth, op.depth);
    if (op.kind == OpKind::kFilter) plan->filters.push_back(i);
    if (op.kind == OpKind::kDedupe) plan->dedupes.push_back(i);
  }
  plan->layers.assign(max_depth, {});
  for (int i : plan->topo) plan->layers[plan->ops[i].depth - 1].push_back(i);
  for (auto& layer : plan->layers) std::sort(layer.begin(), layer.end());
  std::sort(plan->filters.begin(), plan->filters.end());
  std::sort(plan->dedupes.begin(), plan->dedupes.end());
  return Status::OK();
}

// features.label, .slots and .dense.
Status ParseOutputs(const Errors& e, const YAML::Node& f, const std::map<std::string, int>& by_name,
                    FeaturePlan* plan) {
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
    ASSIGN_OR_RETURN(std::string name, YamlScalar(e, f["label"], "label"));
    ASSIGN_OR_RETURN(plan->label, output(f["label"], name, "label", IsNumericType, "int or float"));
  }
  if (!f["slots"]) return e.At(f, "features needs `slots`: the columns that become slots");
  {
    ASSIGN_OR_RETURN(std::vector<std::string> names, YamlNames(e, f["slots"], "slots"));
    for (size_t i = 0; i < names.size(); ++i) {
      const YAML::Node n = f["slots"].IsSequence() ? f["slots"][i] : f["slots"];
      ASSIGN_OR_RETURN(int c, output(n, names[i], "slots", IsDataType, "a data column"));
      plan->slots.push_back(c);
    }
  }
  if (f["dense"]) {
    ASSIGN_OR_RETURN(std::vector<std::string> names, YamlNames(e, f["dense"], "dense"));
    for (size_t i = 0; i < names.size(); ++i) {
      const YAML::Node n = f["dense"].IsSequence() ? f["dense"][i] : f["dense"];
      ASSIGN_OR_RETURN(int c, output(n, names[i], "dense", IsNumericType, "int or float"));
      plan->dense.push_back(c);
    }
  }
  return Status::OK();
}

StatusOr<std::shared_ptr<const FeaturePlan>> ParseFeaturesOrThrow(const YAML::Node& f,
                                                                  const std::string& path) {
  Errors e(path);
  auto plan = std::make_shared<FeaturePlan>();
  plan->source = path;
  std::vector<std::string> keys(std::begin(kFeatureGraphKeys), std::end(kFeatureGraphKeys));
  keys.push_back("hashing");
  RETURN_IF_ERROR(CheckYamlKeys(e, f, keys, "features"));
  RETURN_IF_ERROR(ParseMain(e, f, plan.get()));
  RETURN_IF_ERROR(ParseViews(e, f, plan.get()));
  // Columns: the main view's, then each operator's (a join's gathers right after it).
  GraphBuilder graph(e, plan.get());
  if (f["ops"]) {
    if (!f["ops"].IsSequence()) return e.At(f["ops"], "ops: expected a list of operators");
    std::vector<RawOp> raw;
    int index = 0;
    for (const auto& n : f["ops"]) {
      ASSIGN_OR_RETURN(RawOp r, ParseOp(e, n, index++));
      raw.push_back(std::move(r));
    }
    for (RawOp& r : raw) RETURN_IF_ERROR(graph.Add(r));
  }
  RETURN_IF_ERROR(graph.ResolveInputs());
  RETURN_IF_ERROR(OrderOps(e, plan.get()));
  RETURN_IF_ERROR(TypeAndLayer(e, plan.get()));
  RETURN_IF_ERROR(ParseOutputs(e, f, graph.by_name(), plan.get()));
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
    if (!op.format.empty()) s += "|format " + op.format;
    for (const auto& p : op.path) s += "." + p;
    for (const auto& v : op.values) s += "," + v.s;
    for (double b : op.boundaries) s += fmt::format(",{}", b);
  }
  for (const ViewColumn& c : main.columns) s += fmt::format("|{}:{}", c.name, ColTypeName(c.type));
  s += fmt::format("|{}{}", static_cast<int>(main.format), main.header);  // not device: same rows
  if (max_row_keys != kDefaultMaxRowKeys) s += fmt::format("|max_row_keys {}", max_row_keys);
  for (const SideView& v : views) {
    s += "|" + v.name + v.command;
    for (const auto& p : v.paths) s += "," + p;
    for (const ViewColumn& c : v.layout.columns)
      s += fmt::format(":{}:{}", c.name, ColTypeName(c.type));
  }
  return XXH3_64bits(s.data(), s.size());
}

}  // namespace ctrbox
