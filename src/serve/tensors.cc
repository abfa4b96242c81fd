#include "serve/tensors.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <cmath>
#include <cstring>

namespace ctrbox {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

Status Bad(std::string m) { return InvalidArgumentError(std::move(m)); }

// A tensor's most elements (far above what any body limit lets through).
constexpr uint64_t kMaxElements = uint64_t{1} << 48;

// The bytes of one element of a fixed-size datatype; 0 for BYTES; -1 for one not read.
int ElementBytes(std::string_view datatype) {
  if (datatype == "INT64" || datatype == "UINT64") return 8;
  if (datatype == "FP32") return 4;
  if (datatype == "BOOL") return 1;
  if (datatype == "BYTES") return 0;
  return -1;
}

// The leaves of `data` in order (nested arrays flattened).
Status Leaves(element data, const std::string& where, std::vector<element>* out) {
  if (data.type() != element_type::ARRAY) {
    out->push_back(data);
    return Status::OK();
  }
  simdjson::dom::array a;
  if (data.get_array().get(a)) return Bad(where + ": not an array");
  for (element e : a) RETURN_IF_ERROR(Leaves(e, where, out));
  return Status::OK();
}

Status NotA(const RequestTensor& t, size_t i, const char* what) {
  return Bad(fmt::format("{}.data: element {} is not {}", t.Named(), i, what));
}

// A float32 from a JSON or binary value: finite, as text records' dense values must be.
Status Finite(const RequestTensor& t, size_t i, double x, float* out) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(f)) {
    return Bad(fmt::format("{}.data: element {} ({}) is not a finite float32", t.Named(), i, x));
  }
  *out = f;
  return Status::OK();
}

Status JsonValues(const std::vector<element>& leaves, RequestTensor* t) {
  const std::string& type = t->datatype;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const element& e = leaves[i];
    const element_type et = e.type();
    if (type == "BYTES") {
      std::string_view s;
      if (e.get_string().get(s)) return NotA(*t, i, "a string");
      t->bytes.push_back(s);
    } else if (type == "INT64" || type == "UINT64") {
      int64_t k = 0;
      uint64_t u = 0;
      if (et == element_type::NULL_VALUE) {
        t->ints.push_back(0);
        t->nulls.resize(t->ints.size(), 0);
        t->nulls.back() = 1;
        continue;
      }
      if (et == element_type::INT64 && !e.get_int64().get(k)) {
        if (k < 0 && type == "UINT64") return NotA(*t, i, "an unsigned integer");
        t->ints.push_back(static_cast<uint64_t>(k));  // the bit pattern
      } else if (et == element_type::UINT64 && !e.get_uint64().get(u)) {
        t->ints.push_back(u);
      } else {
        return NotA(*t, i, "an integer");
      }
    } else if (type == "FP32") {
      double x = 0;
      if (et != element_type::DOUBLE && et != element_type::INT64 && et != element_type::UINT64) {
        return NotA(*t, i, "a number");
      }
      if (e.get_double().get(x)) return NotA(*t, i, "a number");
      float f = 0;
      RETURN_IF_ERROR(Finite(*t, i, x, &f));
      t->floats.push_back(f);
    } else {  // BOOL
      bool b = false;
      if (e.get_bool().get(b)) return NotA(*t, i, "true or false");
      t->bools.push_back(b ? 1 : 0);
    }
  }
  if (!t->nulls.empty()) t->nulls.resize(t->ints.size(), 0);
  return Status::OK();
}

template <typename T>
T LoadLittleEndian(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // (x86-64 and aarch64 are little-endian)
  return v;
}

}  // namespace

Status DecodeBinaryTensor(std::string_view raw, RequestTensor* t) {
  const std::string& type = t->datatype;
  const int width = ElementBytes(type);
  if (width > 0) {
    uint64_t want = 0;
    if (__builtin_mul_overflow(t->elements, static_cast<uint64_t>(width), &want) ||
        want != raw.size()) {
      return Bad(fmt::format(
          "{}.parameters.binary_data_size: {} bytes, the shape [{}] of {} holds {} elements",
          t->Named(), raw.size(), fmt::join(t->shape, ", "), type, t->elements));
    }
  }
  const char* p = raw.data();
  if (type == "BYTES") {
    size_t at = 0;
    while (at < raw.size()) {
      if (t->bytes.size() == t->elements) {
        return Bad(
            fmt::format("{}: the binary data holds more than the {} elements of the "
                        "shape [{}]",
                        t->Named(), t->elements, fmt::join(t->shape, ", ")));
      }
      if (raw.size() - at < 4) {
        return Bad(fmt::format("{}: binary element {} has a cut length prefix", t->Named(),
                               t->bytes.size()));
      }
      const uint32_t n = LoadLittleEndian<uint32_t>(p + at);
      at += 4;
      if (raw.size() - at < n) {
        return Bad(fmt::format("{}: binary element {} says {} bytes, {} are left", t->Named(),
                               t->bytes.size(), n, raw.size() - at));
      }
      t->bytes.emplace_back(p + at, n);
      at += n;
    }
    if (t->bytes.size() != t->elements) {
      return Bad(fmt::format("{}.data: the binary data holds {} elements, the shape [{}] holds {}",
                             t->Named(), t->bytes.size(), fmt::join(t->shape, ", "), t->elements));
    }
    return Status::OK();
  }
  for (uint64_t i = 0; i < t->elements; ++i) {
    if (width == 8) {
      t->ints.push_back(LoadLittleEndian<uint64_t>(p + 8 * i));
    } else if (width == 4) {
      float f = 0;
      RETURN_IF_ERROR(Finite(*t, i, LoadLittleEndian<float>(p + 4 * i), &f));
      t->floats.push_back(f);
    } else {
      const uint8_t b = static_cast<uint8_t>(p[i]);
      if (b > 1) return NotA(*t, i, "a BOOL (0 or 1)");
      t->bools.push_back(b);
    }
  }
  return Status::OK();
}

Status CheckTensorDatatype(const RequestTensor& t) {
  if (ElementBytes(t.datatype) >= 0) return Status::OK();
  return Bad(
      fmt::format("{}.datatype: {} is not one this server reads (BYTES, INT64, UINT64, FP32, BOOL)",
                  t.Named(), t.datatype));
}

Status SetTensorShape(std::vector<int64_t> shape, RequestTensor* t) {
  t->shape = std::move(shape);
  for (int64_t v : t->shape) {
    if (v < 0) return Bad(t->Named() + ".shape: not an array of sizes");
  }
  // The product checked, never trusted: a shape that wraps would pass a size comparison.
  t->elements = 1;
  for (int64_t v : t->shape) {
    if (__builtin_mul_overflow(t->elements, static_cast<uint64_t>(v), &t->elements) ||
        t->elements > kMaxElements) {
      return Bad(fmt::format("{}.shape: [{}] holds more elements than a request can (2^48)",
                             t->Named(), fmt::join(t->shape, ", ")));
    }
  }
  return Status::OK();
}

Status CheckTensorCount(const RequestTensor& t, size_t count) {
  if (count == t.elements) return Status::OK();
  return Bad(fmt::format("{}.data: {} elements, the shape [{}] holds {}", t.Named(), count,
                         fmt::join(t.shape, ", "), t.elements));
}

Status AddFloatValue(RequestTensor* t, double x) {
  float f = 0;
  RETURN_IF_ERROR(Finite(*t, t->floats.size(), x, &f));
  t->floats.push_back(f);
  return Status::OK();
}

namespace {

// The unsigned integer parameter `key` of an object's `parameters`; false when absent.
StatusOr<bool> Parameter(simdjson::dom::object o, std::string_view key, const std::string& where,
                         uint64_t* out) {
  element params, v;
  if (o["parameters"].get(params) || params.type() != element_type::OBJECT) return false;
  if (params[key].get(v)) return false;
  if (v.get_uint64().get(*out)) {
    return Bad(fmt::format("{}.parameters.{}: not a size", where, key));
  }
  return true;
}

StatusOr<bool> BoolParameter(simdjson::dom::object o, std::string_view key,
                             const std::string& where, bool fallback) {
  element params, v;
  if (o["parameters"].get(params) || params.type() != element_type::OBJECT) return fallback;
  if (params[key].get(v)) return fallback;
  bool b = false;
  if (v.get_bool().get(b)) {
    return Bad(fmt::format("{}parameters.{}: not true or false", where, key));
  }
  return b;
}

StatusOr<RequestTensor> ReadInput(element e, size_t index, std::string_view binary,
                                  size_t* binary_at) {
  const std::string where = fmt::format("inputs[{}]", index);
  simdjson::dom::object o;
  if (e.get_object().get(o)) return Bad(where + ": not an object");
  RequestTensor t;
  t.index = index;
  std::string_view s;
  if (o["name"].get_string().get(s)) return Bad(where + ".name: missing (a string)");
  t.name = s;
  if (o["datatype"].get_string().get(s)) return Bad(t.Named() + ".datatype: missing (a string)");
  t.datatype = s;
  RETURN_IF_ERROR(CheckTensorDatatype(t));
  simdjson::dom::array shape;
  if (o["shape"].get_array().get(shape)) return Bad(t.Named() + ".shape: missing (an array)");
  std::vector<int64_t> dims;
  for (element d : shape) {
    int64_t v = 0;
    if (d.get_int64().get(v) || v < 0) return Bad(t.Named() + ".shape: not an array of sizes");
    dims.push_back(v);
  }
  RETURN_IF_ERROR(SetTensorShape(std::move(dims), &t));
  uint64_t binary_size = 0;
  ASSIGN_OR_RETURN(const bool is_binary, Parameter(o, "binary_data_size", t.Named(), &binary_size));
  element data;
  const bool has_data = !o["data"].get(data);
  if (is_binary) {
    if (has_data) return Bad(t.Named() + ": both data and parameters.binary_data_size");
    if (binary_size > binary.size() - *binary_at) {
      return Bad(fmt::format("{}.parameters.binary_data_size: {} bytes, the body has {} left",
                             t.Named(), binary_size, binary.size() - *binary_at));
    }
    t.binary = true;
    RETURN_IF_ERROR(DecodeBinaryTensor(binary.substr(*binary_at, binary_size), &t));
    *binary_at += binary_size;
    return t;
  }
  if (!has_data) return Bad(t.Named() + ".data: missing");
  std::vector<element> leaves;
  RETURN_IF_ERROR(Leaves(data, t.Named() + ".data", &leaves));
  RETURN_IF_ERROR(CheckTensorCount(t, leaves.size()));
  RETURN_IF_ERROR(JsonValues(leaves, &t));
  return t;
}

Status ReadOutputs(simdjson::dom::object root, RequestTensors* r) {
  element outputs;
  if (root["outputs"].get(outputs)) return Status::OK();
  simdjson::dom::array a;
  if (outputs.get_array().get(a)) return Bad("outputs: not an array");
  size_t i = 0;
  for (element e : a) {
    const std::string where = fmt::format("outputs[{}]", i++);
    simdjson::dom::object o;
    std::string_view name;
    if (e.get_object().get(o) || o["name"].get_string().get(name)) {
      return Bad(where + ": not an object with a name");
    }
    for (const RequestedOutput& seen : r->outputs) {
      if (seen.name == name) return Bad(fmt::format("{}.name: '{}' asked twice", where, name));
    }
    ASSIGN_OR_RETURN(const bool binary,
                     BoolParameter(o, "binary_data", where + ".", r->binary_output));
    r->outputs.push_back({std::string(name), binary});
  }
  return Status::OK();
}

}  // namespace

std::string RequestTensor::Named() const { return fmt::format("inputs[{}] ({})", index, name); }

StatusOr<RequestTensors> ReadRequestTensors(std::string_view json, std::string_view binary) {
  thread_local simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json.data(), json.size()).get(root); err) {
    return Bad(fmt::format("the body is not JSON: {}", simdjson::error_message(err)));
  }
  simdjson::dom::object o;
  if (root.get_object().get(o)) return Bad("the body is not a JSON object");
  RequestTensors r;
  element id;
  if (!o["id"].get(id)) {
    std::string_view s;
    if (id.get_string().get(s)) return Bad("id: not a string");
    r.id = s;
  }
  ASSIGN_OR_RETURN(r.binary_output, BoolParameter(o, "binary_data_output", "", false));
  simdjson::dom::array inputs;
  if (o["inputs"].get_array().get(inputs)) return Bad("inputs: missing (an array of tensors)");
  size_t index = 0, binary_at = 0;
  for (element e : inputs) {
    ASSIGN_OR_RETURN(RequestTensor t, ReadInput(e, index++, binary, &binary_at));
    for (const RequestTensor& seen : r.inputs) {
      if (seen.name == t.name) {
        return Bad(fmt::format("{}.name: '{}' given twice (also inputs[{}])", t.Named(), t.name,
                               seen.index));
      }
    }
    r.inputs.push_back(std::move(t));
  }
  if (binary_at != binary.size()) {
    return Bad(fmt::format(
        "the body has {} bytes of binary data after its JSON, the inputs' binary_data_size "
        "add up to {}",
        binary.size(), binary_at));
  }
  RETURN_IF_ERROR(ReadOutputs(o, &r));
  return r;
}

}  // namespace ctrbox
