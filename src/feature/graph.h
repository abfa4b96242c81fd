// The feature graph of a job (docs/features.md): the views, the operators and the outputs of
// the YAML's `features:` section, validated and compiled into a plan — columns, operators in
// topological layers — that the extractor runs on every chunk of the main view.
//
// Thread safety: a FeaturePlan is immutable after ParseFeatures; share it freely.
#ifndef CTRBOX_FEATURE_GRAPH_H_
#define CTRBOX_FEATURE_GRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "feature/column.h"
#include "feature/op_list.h"
#include "util/status.h"

namespace YAML {
class Node;
}

namespace ctrbox {

enum class ViewFormat : uint8_t { kCsv, kTsv, kJsonl };

struct ViewColumn {
  std::string name;
  ColType type = ColType::kString;  // int, float, string or keys
};

// How a view's files are laid out.
struct ViewLayout {
  ViewFormat format = ViewFormat::kCsv;
  bool header = true;               // csv/tsv: the first line of each file names the columns
  std::vector<ViewColumn> columns;  // declared (without a header: in file order)
  char sep() const { return format == ViewFormat::kTsv ? '\t' : ','; }
};

// A side view: read whole at job start and joined on `key`.
struct SideView {
  std::string name;
  std::vector<std::string> paths;
  std::string command;
  ViewLayout layout;
  std::vector<int> key;      // indices into layout.columns
  bool allow_empty = false;  // a view without rows is meant (otherwise refused at load)
  int line = 0;              // of its YAML entry
};

// An operator's kind: one per line of op_list.h (kGather: a joined view's column, made by a
// join, not written in YAML).
enum class OpKind : uint8_t {
#define CTRBOX_OP_KIND(Name, name) k##Name,
  CTRBOX_FEATURE_OPS(CTRBOX_OP_KIND)
#undef CTRBOX_OP_KIND
};
const char* OpKindName(OpKind k);

enum class Cmp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotNull };
enum class TimePart : uint8_t { kMinute, kHour, kWeekday, kDay, kMonth, kYear };

// A constant of an operator, in the type of the column it meets.
struct Constant {
  bool is_number = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
};

struct OpNode {
  OpKind kind = OpKind::kFillNull;
  std::string name;         // the column it makes
  int line = 0;             // its YAML line (0: made by the plan)
  std::vector<int> inputs;  // column ids
  int output = -1;          // column id
  int depth = 0;            // 1 + its deepest input's depth (view columns: 0)
  uint64_t seed = 0;        // hash / cross: XXH3 of the name

  // Parameters (which ones an op uses: docs/features.md).
  Constant value;                // fill_null, filter
  std::vector<Constant> values;  // filter `in`
  std::vector<double> numbers;   // filter `in`: the values as numbers (0 where not one)
  Cmp cmp = Cmp::kEq;
  ColType to = ColType::kInt;       // cast, json_field's type
  std::vector<std::string> path;    // json_field: member names, outermost first
  std::vector<double> boundaries;   // bucketize
  std::string sep;                  // split, last_n
  std::string format;               // parse_time: the strptime format
  uint32_t n = 0;                   // last_n
  TimePart part = TimePart::kHour;  // time_part
  int64_t utc_offset_seconds = 0;   // time_part
  double a = 0, b = 0;              // clip: min, max; normalize: mean, std
  int view = -1;                    // join, gather: the side view
  int view_col = -1;                // gather: its column
  uint32_t max_keys = 65536;        // cross: the most keys of one row
};

struct PlanColumn {
  std::string name;
  ColType type = ColType::kInt;
  int producer = -1;  // the operator that makes it; -1: a main-view column
  int view_col = -1;  // a main-view column: its index in main.columns
};

inline constexpr uint32_t kDefaultMaxRowKeys = 65536;

struct FeaturePlan {
  ViewLayout main;
  std::vector<SideView> views;
  std::vector<PlanColumn> columns;       // main-view columns first, then one per operator
  std::vector<OpNode> ops;               // in YAML order (gathers after their join)
  std::vector<std::vector<int>> layers;  // operator ids, layer 1 first
  std::vector<int> topo;                 // operator ids in a topological order (YAML order
                                         // where it is one): the sequential schedule
  int label = -1;                        // column id
  std::vector<int> slots, dense;         // column ids
  std::vector<int> filters, dedupes;     // operator ids
  bool layered = true;                   // features.schedule
  bool gpu = false;                      // features.device: gpu (docs/features.md)
  // features.max_row_keys: the most keys one row makes over all its slots (a row making more
  // is bad, too_many_keys); with the chunk's rows it bounds a chunk's keys.
  uint32_t max_row_keys = kDefaultMaxRowKeys;
  std::string source;  // the YAML file, for messages

  // The column named `name`, or -1.
  int FindColumn(const std::string& name) const;
  // A fingerprint of everything that shapes the extracted rows (for --resume: a changed
  // graph is changed data).
  uint64_t Fingerprint() const;
  // The graph as text: the layers and their operators (ctrbox extract --explain, tests).
  std::string Describe() const;
};

// Parses and validates the `features:` node of `yaml_path` (everything but features.hashing,
// which is a plain key). Errors name the file and the YAML line.
StatusOr<std::shared_ptr<const FeaturePlan>> ParseFeatures(const YAML::Node& features,
                                                           const std::string& yaml_path);
// True when a `features:` node describes a graph (has main, views, ops, label, slots or dense).
bool HasFeatureGraph(const YAML::Node& features);
// The keys of `features:` that belong to the graph (parsed whole, not as job keys); besides
// them only features.hashing, a job key.
inline constexpr const char* kFeatureGraphKeys[] = {
    "main", "views", "ops", "label", "slots", "dense", "schedule", "device", "max_row_keys"};

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_GRAPH_H_
