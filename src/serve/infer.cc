#include "serve/infer.h"

#include <fmt/format.h>
#include <simdjson.h>

#include "ckpt/model_files.h"
#include "io/key_hashing.h"
#include "io/text_format.h"
#include "pipeline/eval_chunks.h"
#include "working/working_set.h"

namespace ctrbox {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

Status Bad(std::string m) { return InvalidArgumentError(std::move(m)); }

// The leaves of `data` in order (nested arrays flattened), checked to be of `type`.
Status Leaves(element data, element_type type, const std::string& where,
              std::vector<element>* out) {
  if (data.type() == element_type::ARRAY) {
    simdjson::dom::array a;
    if (data.get_array().get(a)) return Bad(where + ": not an array");
    for (element e : a) RETURN_IF_ERROR(Leaves(e, type, where, out));
    return Status::OK();
  }
  const bool number = type == element_type::DOUBLE || type == element_type::INT64;
  const element_type t = data.type();
  const bool ok =
      number ? (t == element_type::DOUBLE || t == element_type::INT64 || t == element_type::UINT64)
             : t == type;
  if (!ok) {
    return Bad(fmt::format("{}: element {} is not {}", where, out->size(),
                           type == element_type::STRING ? "a string" : "a number"));
  }
  out->push_back(data);
  return Status::OK();
}

struct Input {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::vector<element> data;
};

StatusOr<Input> ReadInput(element e, size_t index) {
  const std::string where = fmt::format("inputs[{}]", index);
  simdjson::dom::object o;
  if (e.get_object().get(o)) return Bad(where + ": not an object");
  Input in;
  std::string_view s;
  if (o["name"].get_string().get(s)) return Bad(where + ".name: missing (a string)");
  in.name = s;
  const std::string named = fmt::format("inputs[{}] ({})", index, in.name);
  if (o["datatype"].get_string().get(s)) return Bad(named + ".datatype: missing (a string)");
  in.datatype = s;
  simdjson::dom::array shape;
  if (o["shape"].get_array().get(shape)) return Bad(named + ".shape: missing (an array)");
  for (element d : shape) {
    int64_t v = 0;
    if (d.get_int64().get(v) || v < 0) return Bad(named + ".shape: not an array of sizes");
    in.shape.push_back(v);
  }
  element data;
  if (o["data"].get(data)) return Bad(named + ".data: missing");
  const element_type want = in.datatype == "BYTES"   ? element_type::STRING
                            : in.datatype == "INT64" ? element_type::INT64
                                                     : element_type::DOUBLE;
  RETURN_IF_ERROR(Leaves(data, want, named + ".data", &in.data));
  return in;
}

Status CheckInput(const Input& in, const char* datatype, std::vector<int64_t> shape, size_t index) {
  const std::string named = fmt::format("inputs[{}] ({})", index, in.name);
  if (in.datatype != datatype) {
    return Bad(fmt::format("{}.datatype: {}, expected {}", named, in.datatype, datatype));
  }
  if (in.shape != shape) {
    return Bad(fmt::format("{}.shape: [{}], expected [{}]", named, fmt::join(in.shape, ", "),
                           fmt::join(shape, ", ")));
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (static_cast<int64_t>(in.data.size()) != n) {
    return Bad(fmt::format("{}.data: {} elements, the shape [{}] holds {}", named, in.data.size(),
                           fmt::join(shape, ", "), n));
  }
  return Status::OK();
}

// The request's records as one chunk of lines (a record may hold no line break).
Status RecordLines(const Input& in, TextChunk* chunk) {
  chunk->file = "records";
  chunk->first_line = 0;  // a line's number is its record's index
  for (size_t i = 0; i < in.data.size(); ++i) {
    std::string_view r;
    if (in.data[i].get_string().get(r)) return Bad(fmt::format("records[{}]: not a string", i));
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
Status ReadGraphRecords(const Input& in, const ServedVersion& v, const Extractor& graph,
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
  req->records = in.data.size();
  req->record_of_row = std::move(parsed.row_lines);
  req->rows = std::move(parsed.batch);
  return Status::OK();
}

// Text records in the model's input format.
Status ReadRecords(const Input& in, const ServedVersion& v, const Extractor* graph,
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

StatusOr<InferRequest> ParseInferRequest(std::string_view body, const ServedVersion& v,
                                         const Extractor* graph) {
  thread_local simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(body.data(), body.size()).get(root); err) {
    return Bad(fmt::format("the body is not JSON: {}", simdjson::error_message(err)));
  }
  simdjson::dom::object o;
  if (root.get_object().get(o)) return Bad("the body is not a JSON object");
  InferRequest req;
  std::string_view id;
  if (!o["id"].get_string().get(id)) req.id = id;
  simdjson::dom::array inputs;
  if (o["inputs"].get_array().get(inputs)) return Bad("inputs: missing (an array of tensors)");
  const Schema& schema = v.spec.schema;
  std::optional<Input> records, keys, dense;
  std::vector<size_t> at(3);
  size_t index = 0;
  for (element e : inputs) {
    ASSIGN_OR_RETURN(Input in, ReadInput(e, index));
    if (in.name == "records") {
      records = std::move(in), at[0] = index;
    } else if (in.name == "keys") {
      keys = std::move(in), at[1] = index;
    } else if (in.name == "dense") {
      dense = std::move(in), at[2] = index;
    } else {
      return Bad(
          fmt::format("inputs[{}].name: '{}' is no input of this model (records, or keys "
                      "and dense)",
                      index, in.name));
    }
    ++index;
  }
  if (records) {
    if (keys || dense) return Bad("inputs: records, or keys and dense, not both");
    const int64_t n = records->shape.empty() ? 0 : records->shape[0];
    std::vector<int64_t> shape = {n};
    if (records->shape.size() == 2) shape.push_back(1);  // [N, 1] as Triton clients send it
    RETURN_IF_ERROR(CheckInput(*records, "BYTES", shape, at[0]));
    RETURN_IF_ERROR(ReadRecords(*records, v, graph, &req));
    return req;
  }
  if (!keys) return Bad("inputs: neither records nor keys");
  const int64_t n = keys->shape.empty() ? 0 : keys->shape[0];
  RETURN_IF_ERROR(CheckInput(*keys, "INT64", {n, int64_t{schema.num_slots}}, at[1]));
  if (schema.num_dense > 0) {
    if (!dense)
      return Bad(fmt::format("inputs: dense missing (FP32, shape [{}, {}])", n, schema.num_dense));
    RETURN_IF_ERROR(CheckInput(*dense, "FP32", {n, int64_t{schema.num_dense}}, at[2]));
  } else if (dense) {
    return Bad("inputs: dense given, but the model has no dense features");
  }
  req.rows.Reset(schema);
  BatchBuilder b(&req.rows);
  for (int64_t r = 0; r < n; ++r) {
    b.BeginRow(0.0f);
    for (uint32_t j = 0; j < schema.num_dense; ++j) {
      double x = 0;
      if (dense->data[r * schema.num_dense + j].get_double().get(x)) {
        return Bad(fmt::format("inputs[{}] (dense).data: element {} is not a number", at[2],
                               r * schema.num_dense + j));
      }
      b.SetDense(j, static_cast<float>(x));
    }
    for (uint32_t s = 0; s < schema.num_slots; ++s) {
      const element& e = keys->data[r * schema.num_slots + s];
      int64_t k = 0;
      uint64_t u = 0;
      if (!e.get_int64().get(k)) {
        if (k >= 0) b.AddKey(s, static_cast<uint64_t>(k));
      } else if (!e.get_uint64().get(u)) {
        b.AddKey(s, u);
      } else {
        return Bad(fmt::format("inputs[{}] (keys).data: element {} is not an integer", at[1],
                               r * schema.num_slots + s));
      }
    }
    b.EndRow();
  }
  return req;
}

std::string InferResponse(const std::string& model, const ServedVersion& v, const InferRequest& req,
                          const std::vector<float>& p) {
  const size_t n = req.through_graph ? req.records : p.size();
  std::string out;
  out.reserve(160 + n * 14);
  fmt::format_to(std::back_inserter(out), R"({{"model_name":"{}","model_version":"{}",)", model,
                 v.version);
  if (!req.id.empty()) {
    out += R"("id":)";
    out += nlohmann::json(req.id).dump();
    out += ',';
  }
  fmt::format_to(std::back_inserter(out),
                 R"("outputs":[{{"name":"probability","datatype":"FP32","shape":[{}],"data":[)", n);
  if (!req.through_graph) {
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) out += ',';
      fmt::format_to(std::back_inserter(out), "{}", p[i]);  // shortest: reads back bit for bit
    }
    out += "]}]}";
    return out;
  }
  std::vector<int64_t> row_of(n, -1);  // each record's row, -1 when dropped
  for (size_t r = 0; r < req.record_of_row.size(); ++r) row_of[req.record_of_row[r]] = r;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", row_of[i] < 0 ? 0.0f : p[row_of[i]]);
  }
  fmt::format_to(std::back_inserter(out),
                 R"(]}},{{"name":"scored","datatype":"BOOL","shape":[{}],"data":[)", n);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    out += row_of[i] < 0 ? "false" : "true";
  }
  out += "]}]}";
  return out;
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
  BuildWorkingSet(*rows, EvalMinibatchRows(2048), nullptr, &ws);
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
