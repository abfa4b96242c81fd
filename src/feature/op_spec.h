// What an operator file (src/feature/ops/<name>.h) gives the graph and the kernels: its spec —
// the YAML keys it takes and their parse, its type rule, its CPU rows, whether (and how) its
// rows run as a fixed-width row function on a GPU — and the helpers those are written with.
// The graph (graph.cc) and the kernels (ops.cc) know operators only through SpecOf.
//
// Host code only (nvcc never compiles it). Internal to src/feature.
#ifndef CTRBOX_FEATURE_OP_SPEC_H_
#define CTRBOX_FEATURE_OP_SPEC_H_

#include <memory>
#include <string>
#include <vector>

#include "feature/column.h"
#include "feature/fixed_ops.h"
#include "feature/graph.h"
#include "feature/side_table.h"
#include "io/bad_input.h"
#include "util/status.h"

namespace YAML {
class Node;
}

namespace ctrbox {

using SideTables = std::vector<std::unique_ptr<SideTable>>;

// Errors of one YAML file, each with its line.
class YamlErrors {
 public:
  explicit YamlErrors(std::string path) : path_(std::move(path)) {}
  Status At(const YAML::Node& n, const std::string& what) const;
  Status At(int line, const std::string& what) const;

 private:
  std::string path_;
};

// Values of YAML nodes, `what` naming them in errors: a scalar; a number; a scalar or a
// non-empty list of scalars; and a map's keys checked against those allowed.
StatusOr<std::string> YamlScalar(const YamlErrors& e, const YAML::Node& n, const std::string& what);
StatusOr<double> YamlNumber(const YamlErrors& e, const YAML::Node& n, const std::string& what);
StatusOr<std::vector<std::string>> YamlNames(const YamlErrors& e, const YAML::Node& n,
                                             const std::string& what);
Status CheckYamlKeys(const YamlErrors& e, const YAML::Node& map,
                     const std::vector<std::string>& allowed, const std::string& what);
int YamlLine(const YAML::Node& n);

// One operator's YAML map while its parameters are read into `op`. A parameter missing,
// malformed or out of range is an error at its line (at the operator's, for a missing one).
class OpParse {
 public:
  OpParse(const YamlErrors& errors, const YAML::Node& node, const std::string& kind, OpNode* op)
      : errors_(errors), node_(node), kind_(kind), op_(op) {}

  OpNode& op() { return *op_; }
  const std::string& kind() const { return kind_; }
  bool Has(const char* key) const;
  // The column names under `key` (one, or a list): the operator's inputs.
  Status Inputs(const char* key);
  const std::vector<std::string>& inputs() const { return inputs_; }
  // Required values of `key`.
  StatusOr<std::string> Scalar(const char* key) const;
  StatusOr<double> Number(const char* key) const;
  StatusOr<Constant> Value(const char* key) const;
  // `key`'s non-empty list: each item as a constant, with its line (`what` names the list in
  // the error when it is missing or empty).
  struct Item {
    Constant value;
    int line = 0;
  };
  // (empty_at_key: a list present but empty is an error at its own line.)
  StatusOr<std::vector<Item>> List(const char* key, const std::string& what,
                                   bool empty_at_key = false) const;
  // An error at `key` (the operator's map where it is absent), or at a line.
  Status Error(const char* key, const std::string& what) const;
  Status ErrorAt(int line, const std::string& what) const { return errors_.At(line, what); }

  // join: the name its view's columns take (`as`), and where the inputs were written.
  std::string alias;
  std::vector<YAML::Node> input_nodes() const;

 private:
  const YamlErrors& errors_;
  const YAML::Node& node_;
  const std::string& kind_;
  OpNode* op_;
  std::vector<std::string> inputs_;
  const char* inputs_key_ = nullptr;
};

// A constant as written: a number where it reads as one (is_number, f, and i), always s.
Constant ParseConstantText(const std::string& s);

// The types an operator meets, in topological order.
struct OpTyping {
  const FeaturePlan& plan;
  const YamlErrors& errors;
  const OpNode& op;
  const std::vector<ColType>& in;
  const std::vector<std::string>& names;  // the inputs' column names

  // "input 'x' is T, expected `expected`" for input i.
  Status Bad(size_t i, const char* expected) const;
  Status Error(const std::string& what) const { return errors.At(op.line, what); }
};
inline bool IsScalarType(ColType t) {
  return t == ColType::kInt || t == ColType::kFloat || t == ColType::kString;
}
inline bool IsNumericType(ColType t) { return t == ColType::kInt || t == ColType::kFloat; }
inline bool IsDataType(ColType t) { return t != ColType::kMask && t != ColType::kTag; }

// Rows [begin, end) of one operator on the CPU.
struct OpRows {
  const FeaturePlan& plan;
  int op_id;
  const OpNode& op;
  const SideTables& sides;
  uint32_t begin, end;
  Arena* arena;
  int lane;
  ColumnTable* t;
  Column& out;
  const Column& in;  // the first input (the output where there is none)

  void SetNull(uint32_t r) const;
  void MarkError(uint32_t r) const;  // the lowest operator id that failed a row wins
};

struct OpSpec {
  std::vector<std::string> params;         // the YAML keys it takes besides op and name
  bool named = true;                       // makes a column the YAML names (else `<op>#<index>`)
  bool one_input = true;                   // takes exactly one input
  BadKind bad_kind = BadKind::kBadNumber;  // how the rows it marks are counted
  Status (*parse)(OpParse& p) = nullptr;
  StatusOr<ColType> (*type)(const OpTyping& t) = nullptr;
  // Its rows on the CPU where its row function does not take them.
  void (*rows)(const OpRows& x) = nullptr;
  // Whether the row function takes `op` (numbers in and out): then the CPU kernels, the host
  // emulation of the device layers and CUDA all run it. nullptr: never.
  bool (*fixed)(const FeaturePlan& plan, const OpNode& op) = nullptr;
  // The row function's constants beyond the common ones (FixedOp::a, b from op.a, op.b).
  void (*flatten)(const OpNode& op, FixedOp* f) = nullptr;
  // What the message of a row it marked says (nullptr: "could not compute the row from" its
  // inputs), from the row's columns in `t`.
  std::string (*why)(const FeaturePlan& plan, const OpNode& op, const ColumnTable& t,
                     uint32_t row) = nullptr;
};

// Spec parts several operators share: rows fixed when the input is a number; always fixed;
// the constant `value` (fill_null, filter) as the row function's a and ci.
inline bool FixedOnNumbers(const FeaturePlan& plan, const OpNode& op) {
  return IsNumericType(plan.columns[op.inputs[0]].type);
}
inline bool AlwaysFixed(const FeaturePlan&, const OpNode&) { return true; }
inline void FlattenValue(const OpNode& op, FixedOp* f) {
  f->a = op.value.f;
  f->ci = op.value.i;
}

// The spec of `kind` (ops/all.h's registry), and of the operator a job file calls `name`
// (nullptr: none).
const OpSpec& SpecOf(OpKind kind);
const OpSpec* FindSpec(const std::string& name, OpKind* kind);
// The names a job file may use, for messages: "cast, clip, ...".
std::string KnownOpNames();

// Helpers of the CPU rows. The items of row r of c: 0 when null, a list's or key list's
// length, else 1.
uint32_t ItemCount(const Column& c, uint32_t r);
// XXH3 of item i of row r, seeded: strings by their bytes, numbers by their 8 little-endian
// bytes (a float by its bit pattern), keys by theirs.
uint64_t ItemHash(const Column& c, uint32_t r, uint32_t i, uint64_t seed);

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_OP_SPEC_H_
