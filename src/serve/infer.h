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
};

// Reads a request body for version v: input "records" (BYTES, shape [N]: text records in the
// model's input format, or with `graph` the main view's rows of a model trained through that
// feature graph), or "keys" (INT64, shape [N, slots]: one key per slot, -1 for none) with
// "dense" (FP32, shape [N, dense]) when the model has dense features. `data` may be flat or
// nested as its shape.
StatusOr<InferRequest> ParseInferRequest(std::string_view body, const ServedVersion& v,
                                         const Extractor* graph = nullptr);

// The response: model_name, model_version, id and the output "probability" (FP32, [N]), each
// float written so that it reads back as the same float32; through a graph also "scored"
// (BOOL, [N]: false for a record the graph's filters dropped, whose probability is 0). p holds
// the probabilities of req.rows.
std::string InferResponse(const std::string& model, const ServedVersion& v, const InferRequest& req,
                          const std::vector<float>& p);

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
