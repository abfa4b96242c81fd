#include "serve/describe.h"

namespace ctrbox {

ModelDescription DescribeModel(const std::string& name, const ServedVersion& v,
                               bool through_graph) {
  const Schema& s = v.spec.schema;
  const int64_t slots = s.num_slots, dense = s.num_dense;
  ModelDescription d;
  d.name = name;
  d.platform = "ctrbox";
  d.versions = {std::to_string(v.version)};
  d.inputs = {{"records", "BYTES", {-1}}, {"keys", "INT64", {-1, slots}}};
  if (dense > 0) d.inputs.push_back({"dense", "FP32", {-1, dense}});
  d.inputs.push_back({"present", "BOOL", {-1, slots}});
  d.outputs = {{"probability", "FP32", {-1}}};
  if (through_graph) d.outputs.push_back({"scored", "BOOL", {-1}});
  return d;
}

nlohmann::json MetadataJson(const ModelDescription& d, const ServedVersion& v, bool through_graph) {
  auto list = [](const std::vector<TensorSpec>& specs) {
    nlohmann::json out = nlohmann::json::array();
    for (const TensorSpec& t : specs) {
      out.push_back({{"name", t.name}, {"datatype", t.datatype}, {"shape", t.shape}});
    }
    return out;
  };
  return {{"name", d.name},
          {"versions", d.versions},
          {"platform", d.platform},
          {"inputs", list(d.inputs)},
          {"outputs", list(d.outputs)},
          {"parameters",
           {{"version_name", v.name},
            {"input_format", v.input.is_object() ? v.input.value("format", "") : ""},
            {"records", through_graph ? "rows of the main view through the feature graph"
                                      : "records in the input format"},
            {"keys", v.keys}}}};
}

nlohmann::json ConfigJson(const ModelDescription& d, const ServedVersion& v) {
  auto list = [](const std::vector<TensorSpec>& specs, bool optional) {
    nlohmann::json out = nlohmann::json::array();
    for (const TensorSpec& t : specs) {
      const std::string type = t.datatype == "BYTES" ? "TYPE_STRING" : "TYPE_" + t.datatype;
      nlohmann::json one = {{"name", t.name}, {"data_type", type}, {"dims", t.shape}};
      if (optional) one["optional"] = true;
      out.push_back(one);
    }
    return out;
  };
  return {{"name", d.name},
          {"platform", d.platform},
          {"backend", "ctrbox"},
          {"max_batch_size", 0},
          {"input", list(d.inputs, true)},
          {"output", list(d.outputs, false)},
          {"version_policy", {{"specific", {{"versions", {v.version}}}}}},
          {"parameters", {{"version_name", {{"string_value", v.name}}}}}};
}

}  // namespace ctrbox
