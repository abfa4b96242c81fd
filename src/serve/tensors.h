// The tensors of one KServe v2 inference request (docs/serve.md, "Protocol"): its JSON
// object, and the bytes that follow it under the binary tensor data extension, decoded into
// typed arrays with every size checked. Knows nothing of the model: infer.h maps the
// tensors onto its rows.
#ifndef CTRBOX_SERVE_TENSORS_H_
#define CTRBOX_SERVE_TENSORS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace ctrbox {

// One input tensor, decoded. Exactly one of the value arrays is filled, by datatype.
struct RequestTensor {
  size_t index = 0;  // its place in `inputs`
  std::string name, datatype;
  std::vector<int64_t> shape;
  uint64_t elements = 0;  // the product of shape (checked not to overflow)
  bool binary = false;    // its data came as binary data (parameters.binary_data_size)
  // BYTES: views into the request body (valid while the body and the decoder's parser are).
  std::vector<std::string_view> bytes;
  // INT64 and UINT64: the 64-bit patterns (an INT64 -1 is 0xffffffffffffffff); `nulls` marks
  // the JSON elements that were `null` (empty for binary data).
  std::vector<uint64_t> ints;
  std::vector<uint8_t> nulls;
  std::vector<float> floats;   // FP32: every value finite
  std::vector<uint8_t> bools;  // BOOL: 0 or 1

  // "inputs[2] (keys)", for errors.
  std::string Named() const;
};

struct RequestedOutput {
  std::string name;
  bool binary = false;  // parameters.binary_data (default: the request's binary_data_output)
};

struct RequestTensors {
  std::string id;  // echoed back; "" when absent
  std::vector<RequestTensor> inputs;
  // `outputs` as the request lists them; empty: the request named none (every output, as
  // JSON unless binary_data_output).
  std::vector<RequestedOutput> outputs;
  bool binary_output = false;  // parameters.binary_data_output
};

// Reads a request: `json` is its JSON object, `binary` the bytes after it (the binary tensor
// data extension: the body past Inference-Header-Content-Length; empty without it). Inputs
// with parameters.binary_data_size take their data from `binary`, in input order, and the
// sizes must add up to it exactly. Datatypes read: BYTES (binary: each element a 4-byte
// little-endian length and its bytes), INT64, UINT64, FP32 (finite float32 only), BOOL.
// Every dimension and size is checked (no product overflows); a duplicate input name, a shape
// the data does not fill, or a bad element is InvalidArgument naming the field.
// Thread safety: a thread-local parser; the views stay valid until the thread's next call.
StatusOr<RequestTensors> ReadRequestTensors(std::string_view json, std::string_view binary);

// The pieces of ReadRequestTensors, for a request that comes in another form (gRPC):
// Refuses a datatype this server does not read, naming it.
Status CheckTensorDatatype(const RequestTensor& t);
// Sets t->shape and t->elements; a negative size or a product past 2^48 (never computed with
// a wrap) is refused.
Status SetTensorShape(std::vector<int64_t> shape, RequestTensor* t);
// Decodes t's data from little-endian bytes (BYTES: length-prefixed elements), checking that
// they hold exactly t->elements. REQUIRES: t's datatype checked and shape set.
Status DecodeBinaryTensor(std::string_view raw, RequestTensor* t);
// Checks that data of `count` elements fills t's shape.
Status CheckTensorCount(const RequestTensor& t, size_t count);
// Appends a float32 value to t->floats: finite only.
Status AddFloatValue(RequestTensor* t, double x);

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_TENSORS_H_
