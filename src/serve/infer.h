// One inference request of the KServe / Triton v2 protocol (docs/serve.md, "Protocol"), read
// into the model's rows and answered by one version. Errors are InvalidArgument naming the
// field (inputs[1].shape, records[17], ...), for an HTTP 400.
#ifndef CTRBOX_SERVE_INFER_H_
#define CTRBOX_SERVE_INFER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "feature/extractor.h"
#include "io/batch.h"
#include "model/ctr_model.h"
#include "serve/served_version.h"
#include "serve/tensors.h"
#include "util/status.h"

namespace ctrbox {

struct InferRequest {
  std::string id;  // echoed in the response ("" when the request had none)
  Batch rows;      // the model's schema, keys as ctrbox's readers produce them
  // Through a feature graph: the request's records (N), and the record of each row of `rows`
  // (the graph's filters may drop records: those are not scored).
  bool through_graph = false;
  size_t records = 0;
  std::vector<uint64_t> record_of_row;
  // The outputs to answer with, in order (the request's `outputs`, checked; else all), each
  // as JSON data or binary data.
  std::vector<RequestedOutput> outputs;
};

// Reads a request for version v: `json` is its JSON object and `binary` the binary tensor data
// after it (tensors.h; empty without the extension). Inputs: "records" (BYTES, shape [N] or
// [N, 1]: text records in the model's input format, or with `graph` the main view's rows of a
// model trained through that feature graph), or "keys" (INT64 or UINT64, shape [N, slots]: one
// key per slot, an INT64 taken as its 64-bit pattern; a JSON null for an empty slot) with
// optionally "present" (BOOL, [N, slots]: false for an empty slot) and "dense" (FP32,
// [N, dense]) when the model has dense features. JSON data may be flat or nested as its shape.
// Errors: InvalidArgument naming the field.
StatusOr<InferRequest> ParseInferRequest(std::string_view json, std::string_view binary,
                                         const ServedVersion& v, const Extractor* graph = nullptr);
// The same from tensors read another way (gRPC): the rows of t for version v.
StatusOr<InferRequest> InferRequestOf(RequestTensors t, const ServedVersion& v,
                                      const Extractor* graph = nullptr);
// The same without binary data.
StatusOr<InferRequest> ParseInferRequest(std::string_view body, const ServedVersion& v,
                                         const Extractor* graph = nullptr);

// Writes the response to *out: a JSON object of model_name, model_version, id and the outputs
// req asked for — "probability" (FP32, [N]), each float written so that it reads back as the
// same float32; through a graph also "scored" (BOOL, [N]: false for a record the graph's
// filters dropped, whose probability is 0) — followed by the binary data of the outputs asked
// as binary (little-endian FP32; BOOL as one byte). Returns the JSON object's length (the
// Inference-Header-Content-Length when binary data follows). p holds the probabilities of
// req.rows; a non-finite one is an Internal error (a response is always JSON).
StatusOr<size_t> InferResponse(const std::string& model, const ServedVersion& v,
                               const InferRequest& req, const std::vector<float>& p,
                               std::string* out);

// Each record's probability (0 for a record the graph's filters dropped) and whether it was
// scored, from the probabilities p of req.rows.
void RecordOutputs(const InferRequest& req, const std::vector<float>& p,
                   std::vector<float>* probability, std::vector<uint8_t>* scored);

// The features record a model trained through `graph` has in its input record (and that a
// version must have for `graph` to read its records).
std::string GraphFingerprint(const Extractor& graph);

// Predicts rows with one version. Each request's rows are predicted in blocks of
// CtrModel::kPredictBlockRows from its first row, as `ctrbox predict` predicts a file's, so
// a request's probabilities never depend on other requests and equal predict's for the same
// rows in the same blocks. Thread safety: one per thread (it keeps its version's model).
class Predictor {
 public:
  Status Predict(const std::shared_ptr<const ServedVersion>& v, Batch* rows,
                 std::vector<float>* out);

 private:
  // The version model_ holds: weak, so that an idle worker does not keep a replaced version's
  // rows alive (a version is freed once no request holds it).
  std::weak_ptr<const ServedVersion> model_of_;
  std::unique_ptr<CtrModel> model_;
  RowBlock rows_;
};

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_INFER_H_
