#include "serve/infer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ckpt/model_files.h"
#include "io/key_hashing.h"
#include "io/text_format.h"
#include "model/ctr_model.h"
#include "working/working_set.h"

namespace ctrbox {
namespace {

Status Bad(std::string m) { return InvalidArgumentError(std::move(m)); }

// A tensor's datatype and shape are the model's, and its data fills the shape.
Status CheckInput(const RequestTensor& in, std::initializer_list<const char*> datatypes,
                  std::vector<int64_t> shape) {
  bool known = false;
  for (const char* d : datatypes) known = known || in.datatype == d;
  if (!known) {
    return Bad(fmt::format("{}.datatype: {}, expected {}", in.Named(), in.datatype,
                           fmt::join(datatypes, " or ")));
  }
  if (in.shape != shape) {
    return Bad(fmt::format("{}.shape: [{}], expected [{}]", in.Named(), fmt::join(in.shape, ", "),
                           fmt::join(shape, ", ")));
  }
  return Status::OK();  // (ReadRequestTensors checked that the data fills the shape)
}

// The request's records as one chunk of lines (a record may hold no line break).
Status RecordLines(const RequestTensor& in, TextChunk* chunk) {
  chunk->file = "records";
  chunk->first_line = 0;  // a line's number is its record's index
  for (size_t i = 0; i < in.bytes.size(); ++i) {
    const std::string_view r = in.bytes[i];
    if (r.find('\n') != std::string_view::npos) {
      return Bad(fmt::format("records[{}]: holds a line break (one record per element)", i));
    }
    if (r.find_first_not_of(" \t\r") == std::string_view::npos) {
      return Bad(fmt::format("records[{}]: empty", i));
    }
    chunk->data.append(r);
    chunk->data.push_back('\n');
  }
  return Status::OK();
}

// The first bad record of a parse (a malformed line, a row the graph could not compute) as an
// error naming it.
Status FirstBadRecord(const ChunkParseResult& parsed, const std::string& reads) {
  if (parsed.samples.empty() && parsed.bad_lines.empty()) return Status::OK();
  const std::string detail =
      parsed.samples.empty() ? std::string("malformed") : parsed.samples.front().detail;
  const uint64_t at =
      parsed.bad_lines.empty() ? parsed.samples.front().line : parsed.bad_lines.front();
  return Bad(fmt::format("records[{}]: {} ({})", at, detail, reads));
}

// Records of the main view through the feature graph the model was trained with.
Status ReadGraphRecords(const RequestTensor& in, const ServedVersion& v, const Extractor& graph,
                        InferRequest* req) {
  const std::string want = v.input.value("features", std::string());
  if (want != GraphFingerprint(graph)) {
    return InternalError(fmt::format(
        "{} was trained through feature graph {}, not through the serve job's ({}): serve it "
        "with the job it was trained with",
        v.name, want.empty() ? "(none recorded)" : want, GraphFingerprint(graph)));
  }
  TextChunk chunk;
  RETURN_IF_ERROR(RecordLines(in, &chunk));
  ChunkParseResult parsed;
  graph.ExtractChunk(chunk, &parsed);
  RETURN_IF_ERROR(parsed.status);
  const ViewFormat f = graph.plan().main.format;
  RETURN_IF_ERROR(FirstBadRecord(
      parsed, fmt::format("the model reads {} rows of the main view through its feature graph",
                          f == ViewFormat::kCsv   ? "csv"
                          : f == ViewFormat::kTsv ? "tsv"
                                                  : "jsonl")));
  req->through_graph = true;
  req->records = in.bytes.size();
  req->record_of_row = std::move(parsed.row_lines);
  req->rows = std::move(parsed.batch);
  return Status::OK();
}

// Text records in the model's input format.
Status ReadRecords(const RequestTensor& in, const ServedVersion& v, const Extractor* graph,
                   InferRequest* req) {
  Batch* out = &req->rows;
  const Schema& schema = v.spec.schema;
  TextFormatOptions text;
  std::string format = "criteo";
  if (v.input.is_object()) format = v.input.value("format", std::string("criteo"));
  if (format == "views") {
    if (graph != nullptr) return ReadGraphRecords(in, v, *graph, req);
    return Bad(
        "inputs (records): this model reads raw views through a feature graph: start the "
        "server with the training job (ctrbox serve -c job.yaml) to send them as records, or "
        "send its rows as keys and dense tensors (docs/serve.md)");
  }
  if (!ParseDataFormat(format, &text.format)) {
    return Bad(fmt::format("the model's input format '{}' is not one serve reads", format));
  }
  if (v.input.is_object() && v.input.contains("slot_from") &&
      !ParseSlotFrom(v.input.value("slot_from", std::string("one")), &text.slot_from)) {
    return InternalError(fmt::format("{}: its input record's slot_from {} is not one serve reads",
                                     v.name, v.input["slot_from"].dump()));
  }
  text.schema = schema;
  text.labels_optional = true;
  text.key_slots = v.spec.model.KeySlotMap();
  TextChunk chunk;
  RETURN_IF_ERROR(RecordLines(in, &chunk));
  ChunkParseResult parsed;
  ParseTextChunk(text, chunk, &parsed);
  RETURN_IF_ERROR(parsed.status);
  RETURN_IF_ERROR(FirstBadRecord(parsed, fmt::format("the model reads {} records: {} slots, {} "
                                                     "dense",
                                                     format, schema.num_slots, schema.num_dense)));
  *out = std::move(parsed.batch);
  return Status::OK();
}

}  // namespace

std::string GraphFingerprint(const Extractor& graph) {
  return fmt::format("{:016x}", graph.plan().Fingerprint());
}

namespace {

// The outputs a request asked for, checked against the model's (probability, and scored
// through a feature graph); none asked: all of them.
Status ResolveOutputs(const RequestTensors& t, bool through_graph, InferRequest* req) {
  std::vector<std::string> known = {"probability"};
  if (through_graph) known.push_back("scored");
  if (t.outputs.empty()) {
    for (const std::string& name : known) req->outputs.push_back({name, t.binary_output});
    return Status::OK();
  }
  for (size_t i = 0; i < t.outputs.size(); ++i) {
    if (std::find(known.begin(), known.end(), t.outputs[i].name) == known.end()) {
      return Bad(fmt::format("outputs[{}].name: '{}' is no output of this model ({})", i,
                             t.outputs[i].name, fmt::join(known, ", ")));
    }
  }
  req->outputs = t.outputs;
  return Status::OK();
}

// Rows from keys (one a slot: an integer's 64-bit pattern; JSON null, or false in `present`,
// for an empty slot) and dense values.
Status ReadKeyRows(const RequestTensor& keys, const RequestTensor* present,
                   const RequestTensor* dense, const Schema& schema, InferRequest* req) {
  const int64_t n = keys.shape.empty() ? 0 : keys.shape[0];
  RETURN_IF_ERROR(CheckInput(keys, {"INT64", "UINT64"}, {n, int64_t{schema.num_slots}}));
  if (present != nullptr) {
    RETURN_IF_ERROR(CheckInput(*present, {"BOOL"}, {n, int64_t{schema.num_slots}}));
  }
  if (schema.num_dense > 0) {
    if (dense == nullptr) {
      return Bad(fmt::format("inputs: dense missing (FP32, shape [{}, {}])", n, schema.num_dense));
    }
    RETURN_IF_ERROR(CheckInput(*dense, {"FP32"}, {n, int64_t{schema.num_dense}}));
  } else if (dense != nullptr) {
    return Bad("inputs: dense given, but the model has no dense features");
  }
  req->rows.Reset(schema);
  BatchBuilder b(&req->rows);
  for (int64_t r = 0; r < n; ++r) {
    b.BeginRow(0.0f);
    for (uint32_t j = 0; j < schema.num_dense; ++j) {
      b.SetDense(j, dense->floats[r * schema.num_dense + j]);
    }
    for (uint32_t s = 0; s < schema.num_slots; ++s) {
      const size_t i = r * schema.num_slots + s;
      const bool empty =
          (!keys.nulls.empty() && keys.nulls[i]) || (present != nullptr && !present->bools[i]);
      if (!empty) b.AddKey(s, keys.ints[i]);
    }
    b.EndRow();
  }
  return Status::OK();
}

}  // namespace

StatusOr<InferRequest> ParseInferRequest(std::string_view json, std::string_view binary,
                                         const ServedVersion& v, const Extractor* graph) {
  ASSIGN_OR_RETURN(RequestTensors t, ReadRequestTensors(json, binary));
  return InferRequestOf(std::move(t), v, graph);
}

StatusOr<InferRequest> InferRequestOf(RequestTensors t, const ServedVersion& v,
                                      const Extractor* graph) {
  InferRequest req;
  req.id = std::move(t.id);
  const RequestTensor *records = nullptr, *keys = nullptr, *dense = nullptr, *present = nullptr;
  for (const RequestTensor& in : t.inputs) {
    const RequestTensor** slot = in.name == "records"   ? &records
                                 : in.name == "keys"    ? &keys
                                 : in.name == "dense"   ? &dense
                                 : in.name == "present" ? &present
                                                        : nullptr;
    if (slot == nullptr) {
      return Bad(
          fmt::format("{}.name: '{}' is no input of this model (records, or keys, "
                      "present and dense)",
                      in.Named(), in.name));
    }
    *slot = &in;
  }
  if (records != nullptr) {
    if (keys || dense || present) return Bad("inputs: records, or keys and dense, not both");
    const int64_t n = records->shape.empty() ? 0 : records->shape[0];
    std::vector<int64_t> shape = {n};
    if (records->shape.size() == 2) shape.push_back(1);  // [N, 1] as Triton clients send it
    RETURN_IF_ERROR(CheckInput(*records, {"BYTES"}, shape));
    RETURN_IF_ERROR(ReadRecords(*records, v, graph, &req));
  } else if (keys != nullptr) {
    RETURN_IF_ERROR(ReadKeyRows(*keys, present, dense, v.spec.schema, &req));
  } else {
    return Bad("inputs: neither records nor keys");
  }
  RETURN_IF_ERROR(ResolveOutputs(t, req.through_graph, &req));
  return req;
}

StatusOr<InferRequest> ParseInferRequest(std::string_view body, const ServedVersion& v,
                                         const Extractor* graph) {
  return ParseInferRequest(body, std::string_view(), v, graph);
}

namespace {

// One output's "data" as JSON text, or its binary bytes appended to *binary.
template <typename Value>
void WriteOutput(const char* name, const char* datatype, size_t n, bool as_binary, Value value,
                 std::string* json, std::string* binary) {
  fmt::format_to(std::back_inserter(*json), R"({{"name":"{}","datatype":"{}","shape":[{}],)", name,
                 datatype, n);
  if (as_binary) {
    const size_t width = std::string_view(datatype) == "BOOL" ? 1 : 4;
    fmt::format_to(std::back_inserter(*json), R"("parameters":{{"binary_data_size":{}}}}})",
                   n * width);
    for (size_t i = 0; i < n; ++i) {
      const auto x = value(i);
      if constexpr (std::is_same_v<std::remove_cv_t<decltype(x)>, bool>) {
        binary->push_back(x ? 1 : 0);
      } else {
        char bytes[4];
        std::memcpy(bytes, &x, 4);  // little-endian float32
        binary->append(bytes, 4);
      }
    }
    return;
  }
  *json += R"("data":[)";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) *json += ',';
    const auto x = value(i);
    if constexpr (std::is_same_v<std::remove_cv_t<decltype(x)>, bool>) {
      *json += x ? "true" : "false";
    } else {
      fmt::format_to(std::back_inserter(*json), "{}", x);  // shortest: reads back bit for bit
    }
  }
  *json += "]}";
}

}  // namespace

void RecordOutputs(const InferRequest& req, const std::vector<float>& p,
                   std::vector<float>* probability, std::vector<uint8_t>* scored) {
  if (!req.through_graph) {
    *probability = p;
    scored->assign(p.size(), 1);
    return;
  }
  probability->assign(req.records, 0.0f);
  scored->assign(req.records, 0);
  for (size_t r = 0; r < req.record_of_row.size(); ++r) {
    (*probability)[req.record_of_row[r]] = p[r];
    (*scored)[req.record_of_row[r]] = 1;
  }
}

StatusOr<size_t> InferResponse(const std::string& model, const ServedVersion& v,
                               const InferRequest& req, const std::vector<float>& p,
                               std::string* out) {
  for (float x : p) {
    if (!std::isfinite(x)) {
      return InternalError(fmt::format("{} predicted a non-finite probability", v.name));
    }
  }
  std::vector<float> probability;
  std::vector<uint8_t> scored;
  RecordOutputs(req, p, &probability, &scored);
  const size_t n = probability.size();
  out->clear();
  out->reserve(160 + n * 14);
  std::string binary;
  fmt::format_to(std::back_inserter(*out), R"({{"model_name":"{}","model_version":"{}",)", model,
                 v.version);
  if (!req.id.empty()) {
    *out += R"("id":)";
    *out += nlohmann::json(req.id).dump();
    *out += ',';
  }
  *out += R"("outputs":[)";
  for (size_t o = 0; o < req.outputs.size(); ++o) {
    if (o > 0) *out += ',';
    const RequestedOutput& want = req.outputs[o];
    if (want.name == "probability") {
      WriteOutput(
          "probability", "FP32", n, want.binary, [&](size_t i) { return probability[i]; }, out,
          &binary);
    } else {  // scored
      WriteOutput(
          "scored", "BOOL", n, want.binary, [&](size_t i) { return scored[i] != 0; }, out, &binary);
    }
  }
  *out += "]}";
  const size_t json_bytes = out->size();
  *out += binary;
  return json_bytes;
}

Status Predictor::Predict(const std::shared_ptr<const ServedVersion>& v, Batch* rows,
                          std::vector<float>* out) {
  if (model_of_.lock() != v) {
    const ModelSpec& spec = v->spec;
    auto model = std::make_unique<CtrModel>(spec.schema, spec.model, spec.sparse_optimizer,
                                            spec.dense_optimizer, spec.table.seed);
    RETURN_IF_ERROR(ApplyDensePayload(v->dense_payload, v->name, model.get()));
    model->set_rowwise_predictions(true);  // a row's probability from that row alone
    model_ = std::move(model);
    model_of_ = v;
    rows_ = RowBlock(v->layout);
  }
  ModelKeys(model_->options().hashing, model_->options().KeyTableMap(), rows);
  WorkingSet ws;
  // Minibatches of whole prediction blocks (any size: a row's block is fixed by its request).
  BuildWorkingSet(*rows, CtrModel::PredictMinibatchRows(2048), nullptr, &ws);
  rows_.Resize(ws.keys.size());
  for (size_t i = 0; i < ws.keys.size(); ++i) {
    if (!v->Lookup(ws.keys[i], &rows_, i)) rows_.ClearRow(i, ws.keys[i]);
  }
  out->resize(rows->rows());
  for (const Minibatch& mb : ws.batches) {
    model_->Predict(*rows, ws, mb, rows_, nullptr, out->data() + mb.row_begin);
  }
  return Status::OK();
}

}  // namespace ctrbox
