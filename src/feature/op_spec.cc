#include "feature/op_spec.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "feature/ops/all.h"
#include "util/hash.h"
#include "util/parse.h"

namespace ctrbox {

// ---- The registry ----

namespace {

struct Registry {
  std::vector<OpSpec> specs;  // by OpKind
  std::vector<std::string> names;
};

const Registry& Ops() {
  static const Registry* r = [] {
    auto* reg = new Registry;
#define CTRBOX_OP_SPEC(Name, name)         \
  reg->specs.push_back(ops::Name##Spec()); \
  reg->names.push_back(#name);
    CTRBOX_FEATURE_OPS(CTRBOX_OP_SPEC)
#undef CTRBOX_OP_SPEC
    return reg;
  }();
  return *r;
}

}  // namespace

const char* OpKindName(OpKind k) { return Ops().names[static_cast<size_t>(k)].c_str(); }

const OpSpec& SpecOf(OpKind kind) { return Ops().specs[static_cast<size_t>(kind)]; }

const OpSpec* FindSpec(const std::string& name, OpKind* kind) {
  const Registry& r = Ops();
  for (size_t k = 0; k < r.names.size(); ++k) {
    if (r.names[k] == name && r.specs[k].parse != nullptr) {  // gather: made, not written
      *kind = static_cast<OpKind>(k);
      return &r.specs[k];
    }
  }
  return nullptr;
}

std::string KnownOpNames() {
  std::vector<std::string> names;
  for (size_t k = 0; k < Ops().names.size(); ++k) {
    if (Ops().specs[k].parse != nullptr) names.push_back(Ops().names[k]);
  }
  std::sort(names.begin(), names.end());
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  return known;
}

// ---- YAML values ----

int YamlLine(const YAML::Node& n) { return n.Mark().line + 1; }

Status YamlErrors::At(const YAML::Node& n, const std::string& what) const {
  return At(YamlLine(n), what);
}
Status YamlErrors::At(int line, const std::string& what) const {
  return InvalidArgumentError(fmt::format("{}:{}: features: {}", path_, line, what));
}

StatusOr<std::string> YamlScalar(const YamlErrors& e, const YAML::Node& n,
                                 const std::string& what) {
  if (!n.IsDefined() || n.IsNull()) return e.At(n, what + " has no value");
  if (!n.IsScalar()) return e.At(n, what + ": expected a single value");
  return n.as<std::string>();
}

StatusOr<double> YamlNumber(const YamlErrors& e, const YAML::Node& n, const std::string& what) {
  ASSIGN_OR_RETURN(std::string s, YamlScalar(e, n, what));
  double v;
  if (!ParseDouble(s, &v) || !std::isfinite(v)) {
    return e.At(n, fmt::format("{}: '{}' is not a number", what, s));
  }
  return v;
}

StatusOr<std::vector<std::string>> YamlNames(const YamlErrors& e, const YAML::Node& n,
                                             const std::string& what) {
  std::vector<std::string> out;
  if (n.IsSequence()) {
    for (const auto& item : n) {
      ASSIGN_OR_RETURN(std::string s, YamlScalar(e, item, what));
      out.push_back(std::move(s));
    }
  } else {
    ASSIGN_OR_RETURN(std::string s, YamlScalar(e, n, what));
    out.push_back(std::move(s));
  }
  if (out.empty()) return e.At(n, what + " is an empty list");
  return out;
}

Status CheckYamlKeys(const YamlErrors& e, const YAML::Node& map,
                     const std::vector<std::string>& allowed, const std::string& what) {
  std::vector<std::string> sorted = allowed;
  std::sort(sorted.begin(), sorted.end());
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (!std::binary_search(sorted.begin(), sorted.end(), key)) {
      std::string known;
      for (const std::string& a : sorted) known += (known.empty() ? "" : ", ") + a;
      return e.At(kv.first, fmt::format("unknown key '{}' in {} (known: {})", key, what, known));
    }
  }
  return Status::OK();
}

Constant ParseConstantText(const std::string& s) {
  Constant c;
  c.s = s;
  double f;
  if (ParseDouble(s, &f) && std::isfinite(f)) {
    c.is_number = true;
    c.f = f;
    int64_t i;
    // A number beyond int64 has no int value (0, which differs from f: not an integer).
    c.i = ParseInt64(s, &i)                      ? i
          : std::fabs(f) < 9.2233720368547758e18 ? static_cast<int64_t>(f)
                                                 : 0;
  }
  return c;
}

// ---- OpParse ----

bool OpParse::Has(const char* key) const { return static_cast<bool>(node_[key]); }

Status OpParse::Inputs(const char* key) {
  if (!node_[key]) return errors_.At(node_, fmt::format("operator {} needs `{}`", kind_, key));
  ASSIGN_OR_RETURN(inputs_, YamlNames(errors_, node_[key], key));
  inputs_key_ = key;
  return Status::OK();
}

std::vector<YAML::Node> OpParse::input_nodes() const {
  if (inputs_key_ == nullptr) return {};
  return std::vector<YAML::Node>(inputs_.size(), node_[inputs_key_]);
}

StatusOr<std::string> OpParse::Scalar(const char* key) const {
  return YamlScalar(errors_, node_[key], key);
}

StatusOr<double> OpParse::Number(const char* key) const {
  if (!node_[key]) return errors_.At(node_, fmt::format("operator {} needs `{}`", kind_, key));
  return YamlNumber(errors_, node_[key], key);
}

StatusOr<Constant> OpParse::Value(const char* key) const {
  ASSIGN_OR_RETURN(std::string s, YamlScalar(errors_, node_[key], key));
  return ParseConstantText(s);
}

StatusOr<std::vector<OpParse::Item>> OpParse::List(const char* key, const std::string& what,
                                                   bool empty_at_key) const {
  const YAML::Node list = node_[key];
  if (!list || !list.IsSequence() || list.size() == 0) {
    return errors_.At(empty_at_key && list ? list : node_, what);
  }
  std::vector<Item> items;
  for (const auto& v : list) {
    ASSIGN_OR_RETURN(std::string s, YamlScalar(errors_, v, key));
    items.push_back({ParseConstantText(s), YamlLine(v)});
  }
  return items;
}

Status OpParse::Error(const char* key, const std::string& what) const {
  if (key != nullptr && node_[key]) return errors_.At(node_[key], what);
  return errors_.At(node_, what);
}

// ---- OpTyping, OpRows ----

Status OpTyping::Bad(size_t i, const char* expected) const {
  return errors.At(
      op.line, fmt::format("operator {} ('{}'): input '{}' is {}, expected {}", OpKindName(op.kind),
                           op.name, names[i], ColTypeName(in[i]), expected));
}

void OpRows::SetNull(uint32_t r) const {
  out.valid[r] = 0;
  std::memset(static_cast<char*>(out.cells) + r * CellBytes(out.type), 0, CellBytes(out.type));
}

void OpRows::MarkError(uint32_t r) const { fixed::MarkError(t->errors.data(), r, op_id); }

uint32_t ItemCount(const Column& c, uint32_t r) {
  if (!c.valid[r]) return 0;
  switch (c.type) {
    case ColType::kKeys:
    case ColType::kHashed:
      return c.keys()[r].n;
    case ColType::kList:
      return c.lists()[r].n;
    default:
      return 1;
  }
}

uint64_t ItemHash(const Column& c, uint32_t r, uint32_t i, uint64_t seed) {
  switch (c.type) {
    case ColType::kInt:
    case ColType::kMask: {
      const int64_t v = c.ints()[r];
      return XXH3_64bits_withSeed(&v, 8, seed);
    }
    case ColType::kFloat: {
      const uint64_t v = std::bit_cast<uint64_t>(c.floats()[r]);
      return XXH3_64bits_withSeed(&v, 8, seed);
    }
    case ColType::kString:
      return XXH3_64bits_withSeed(c.strs()[r].p, c.strs()[r].n, seed);
    case ColType::kKeys:
    case ColType::kHashed: {
      const uint64_t v = c.keys()[r].p[i];
      return XXH3_64bits_withSeed(&v, 8, seed);
    }
    case ColType::kList: {
      const Str& s = c.lists()[r].p[i];
      return XXH3_64bits_withSeed(s.p, s.n, seed);
    }
    case ColType::kTag:
      return XXH3_64bits_withSeed(&c.tags()[r], sizeof(Hash128), seed);
  }
  return 0;
}

}  // namespace ctrbox
