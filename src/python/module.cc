// _ctrbox: the compiled half of the Python module (python/ctrbox/__init__.py is the other;
// docs/python.md). Jobs are built from the CLI's keys and sources (cli/config.h), trained
// with RunTrain, and a saved model is opened once for eval, predict and embeddings. Reports
// cross as JSON text (json.loads on the Python side), arrays as numpy arrays. Every call
// that runs ctrbox code releases the GIL; a failed Status raises StatusError, which the
// Python side turns into ctrbox.Error.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/model_dir.h"
#include "cli/commands.h"
#include "cli/config.h"
#include "io/line_chunker.h"
#include "io/text_format.h"
#include "jobs/data.h"
#include "jobs/evaluator.h"
#include "jobs/stream.h"
#include "jobs/trainer.h"
#include "util/blas.h"
#include "util/hash.h"
#include "util/json_text.h"
#include "util/logging.h"

namespace py = pybind11;

namespace ctrbox {
namespace {

// A failed Status; its text is the message of the ctrbox.Error the Python side raises.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& s) : std::runtime_error(s.ToString()) {}
};

void Check(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}
template <class T>
T Check(StatusOr<T> v) {
  if (!v.ok()) throw StatusError(v.status());
  return std::move(*v);
}

// Hands progress to a Python callable, holding the GIL for the call. The first exception the
// callable raises is kept (and the job asked to stop); the caller raises it afterwards.
class PySink : public ProgressSink {
 public:
  PySink(py::object callback, std::atomic<bool>* stop)
      : callback_(std::move(callback)), stop_(stop) {}
  ~PySink() override {
    py::gil_scoped_acquire gil;
    callback_ = py::object();
    error_ = py::object();
  }

  void OnProgress(const TrainProgress& p) override {
    nlohmann::json j = {{"event", "progress"},        {"examples", p.examples},
                        {"seconds", p.seconds},       {"examples_per_s", p.examples_per_s},
                        {"auc", p.running.AucJson()}, {"logloss", p.running.logloss}};
    // The share done and the seconds left, null when the input's size is unknown.
    j["fraction"] = p.fraction >= 0 ? nlohmann::json(p.fraction) : nlohmann::json();
    j["eta_seconds"] = p.eta_seconds >= 0 ? nlohmann::json(p.eta_seconds) : nlohmann::json();
    Call(j);
  }
  void OnPass(const nlohmann::json& record) override {
    nlohmann::json j = record;
    j["event"] = "pass";
    Call(j);
  }

  // Raises the callback's exception, if it raised one. REQUIRES: the GIL is held.
  void RaiseIfFailed() {
    if (!error_) return;
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error_.ptr())), error_.ptr());
    error_ = py::object();
    throw py::error_already_set();
  }

 private:
  void Call(const nlohmann::json& j) {
    if (callback_.is_none()) return;
    const std::string text = JsonText(j);
    py::gil_scoped_acquire gil;
    if (error_) return;
    try {
      callback_(py::module_::import("json").attr("loads")(text));
    } catch (py::error_already_set& e) {
      error_ = e.value();
      stop_->store(true);
    }
  }

  py::object callback_;
  py::object error_;
  std::atomic<bool>* stop_;
};

// The job's report as `ctrbox train` prints it: a stream job's (stream.root) or a job of
// files'.
StatusOr<nlohmann::json> RunTrainOrStream(const JobConfig& job, ProgressSink* sink,
                                          const std::atomic<bool>* stop) {
  if (job.stream.enabled()) {
    ASSIGN_OR_RETURN(StreamReport r, RunStream(Env::Posix(), job, sink, stop));
    return r.ToJson();
  }
  ASSIGN_OR_RETURN(TrainReport r, RunTrain(Env::Posix(), job, sink, stop));
  return r.ToJson();
}

// Trains `job` on a thread of its own while this (the caller's) thread waits without the GIL,
// taking it every 100 ms to let Python run its signal handlers: Ctrl-C (KeyboardInterrupt)
// stops the job as the CLI's first Ctrl-C does — after the pass in training is pushed, with
// the model saved — and a second one is ignored while that finishes. Returns the report and
// whether a Ctrl-C stopped it.
std::pair<std::string, bool> Train(const JobConfig& job, py::object progress) {
  std::atomic<bool> stop{false};
  PySink sink(std::move(progress), &stop);
  std::promise<StatusOr<nlohmann::json>> done;
  std::future<StatusOr<nlohmann::json>> result = done.get_future();
  bool interrupted = false;
  std::optional<py::error_already_set> handler_error;  // raised by another signal's handler
  {
    py::gil_scoped_release nogil;
    std::thread worker([&] { done.set_value(RunTrainOrStream(job, &sink, &stop)); });
    while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() == 0) continue;
      stop.store(true);
      if (!PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        if (!handler_error) handler_error.emplace();  // fetches it; raised once the job stops
        PyErr_Clear();
        continue;
      }
      PyErr_Clear();
      if (!interrupted) {
        LOG_WARNING("interrupted: stopping after the pass in training; the model is saved");
      }
      interrupted = true;
    }
    worker.join();
  }
  // A signal that came after the last look (in the job's last moments) is taken here, with
  // the GIL, rather than left pending: a Ctrl-C is the job's Interrupted, as one a moment
  // earlier would have been, never a bare KeyboardInterrupt at the caller's next statement.
  if (PyErr_CheckSignals() != 0) {
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
      PyErr_Clear();
      interrupted = true;
    } else if (!handler_error) {
      handler_error.emplace();
    } else {
      PyErr_Clear();
    }
  }
  if (handler_error) throw *handler_error;
  sink.RaiseIfFailed();
  StatusOr<nlohmann::json> report = result.get();
  if (!report.ok()) throw StatusError(report.status());
  return {JsonText(*report), interrupted || report->value("interrupted", false)};
}

// A saved model, opened once: the rows under the job's storage settings (in memory, or a
// budget over storage.ssd_dir), the dense part, and a thread pool. Calls are serialised.
py::array_t<uint64_t> FeatureKeys(uint32_t slot, py::object values);

class Model {
 public:
  explicit Model(const JobConfig& job) : job_(job), pool_(job.train.threads) {
    py::gil_scoped_release nogil;
    Check(job_.Validate());
    lm_ = Check(OpenModel(Env::Posix(), job_.model_dir, job_.StorageFor({}), &pool_));
  }

  std::string Manifest() const { return JsonText(lm_.manifest.ToJson()); }
  uint32_t num_slots() const { return lm_.model->schema().num_slots; }
  uint32_t num_dense() const { return lm_.model->schema().num_dense; }
  uint32_t dim() const { return lm_.table->layout().dim; }

  // The keys this model holds for raw values of `slot`: feature keys of the slot's shared_slots
  // group, tagged with the slot's table (model.slot_dims).
  py::array_t<uint64_t> Keys(uint32_t slot, py::object values) const {
    const ModelOptions& m = lm_.model->options();
    if (slot >= num_slots()) {
      throw StatusError(InvalidArgumentError("keys: slot " + std::to_string(slot) +
                                             " but the model has " + std::to_string(num_slots()) +
                                             " slots"));
    }
    py::array_t<uint64_t> keys = FeatureKeys(KeySlotOf(m.KeySlotMap(), slot), values);
    if (m.MultiTable()) {
      uint64_t* k = keys.mutable_data();
      const uint32_t table = m.SlotTable(slot);
      for (py::ssize_t i = 0; i < keys.size(); ++i) k[i] = TableKey(k[i], table);
    }
    return keys;
  }

  // The eval report on `paths` (format: data.format's names; "" keeps the job's).
  std::string Eval(const std::vector<std::string>& paths, const std::string& format) {
    JobConfig job = job_;
    job.data.paths = paths;
    if (!format.empty()) job.settings_given["data.format"] = format;
    if (!format.empty() && !ParseDataFormat(format, &job.data.format)) {
      throw StatusError(
          InvalidArgumentError("unknown data format '" + format +
                               "': expected criteo, libsvm, libfm, libffm, slots or shards"));
    }
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> l(mu_);
    if (job.features != nullptr) {  // views through the job's feature graph (docs/features.md)
      job.data.key_slots = lm_.manifest.spec.model.KeySlotMap();
      Check(AttachFeatures(Env::Posix(), &job));
    }
    return JsonText(Check(EvalLoadedModel(Env::Posix(), job, lm_, &pool_)).ToJson());
  }

  // Per-row scores of raw views through the job's feature graph: (ids, probabilities) of the
  // rows the graph keeps, in input order (`ctrbox predict --id-column`).
  py::tuple PredictRows(const std::vector<std::string>& paths, const std::string& id_column) {
    JobConfig job = job_;
    if (job.features == nullptr) {
      throw StatusError(InvalidArgumentError(
          "predict(data=..., id_column=...) scores raw views through a feature graph: open the "
          "Model with the job's config (its features:)"));
    }
    job.data.paths = paths;
    job.data.command.clear();
    job.id_column = id_column;
    std::vector<std::string> ids;
    std::vector<float> probs;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> l(mu_);
      ScopedRowwisePredictions rowwise(lm_.model.get());  // as `ctrbox predict`
      Check(PredictThroughGraph(
          Env::Posix(), job, lm_, &pool_,
          [&](const std::vector<std::string>& i, const std::vector<float>& p) -> Status {
            ids.insert(ids.end(), i.begin(), i.end());
            probs.insert(probs.end(), p.begin(), p.end());
            return Status::OK();
          }));
    }
    return py::make_tuple(py::cast(ids), py::array_t<float>(probs.size(), probs.data()));
  }

  // Probabilities for rows given as arrays: keys[offsets[r*S+s] .. offsets[r*S+s+1]) are
  // row r's values in slot s (S = num_slots), dense is rows x num_dense. `raw`: the values
  // are raw ids, keyed per slot as the slot and libsvm formats key them (FeatureKey);
  // otherwise they are the model's keys already.
  py::array_t<float> PredictArrays(
      py::array_t<uint64_t, py::array::c_style | py::array::forcecast> keys,
      py::array_t<uint32_t, py::array::c_style | py::array::forcecast> offsets,
      py::array_t<float, py::array::c_style | py::array::forcecast> dense, size_t rows, bool raw) {
    Batch batch;
    batch.Reset(lm_.model->schema());
    const uint32_t slots = num_slots();
    if (static_cast<size_t>(offsets.size()) != rows * slots + 1) {
      throw StatusError(InvalidArgumentError(
          "predict: offsets has " + std::to_string(offsets.size()) + " entries; " +
          std::to_string(rows) + " rows of " + std::to_string(slots) + " slots need " +
          std::to_string(rows * slots + 1)));
    }
    if (static_cast<size_t>(dense.size()) != rows * num_dense()) {
      throw StatusError(InvalidArgumentError("predict: dense has " + std::to_string(dense.size()) +
                                             " values; " + std::to_string(rows) + " rows of " +
                                             std::to_string(num_dense()) + " dense inputs need " +
                                             std::to_string(rows * num_dense())));
    }
    const uint32_t* off = offsets.data();
    if (off[0] != 0) throw StatusError(InvalidArgumentError("predict: offsets[0] must be 0"));
    for (size_t i = 0; i + 1 < static_cast<size_t>(offsets.size()); ++i) {
      if (off[i + 1] < off[i]) {
        throw StatusError(
            InvalidArgumentError("predict: offsets decrease at entry " + std::to_string(i + 1)));
      }
    }
    if (off[rows * slots] != static_cast<size_t>(keys.size())) {
      throw StatusError(InvalidArgumentError("predict: the offsets end at " +
                                             std::to_string(off[rows * slots]) + " but there are " +
                                             std::to_string(keys.size()) + " keys"));
    }
    batch.labels.assign(rows, 0.0f);
    batch.dense.assign(dense.data(), dense.data() + dense.size());
    batch.offsets.assign(off, off + offsets.size());
    batch.keys.assign(keys.data(), keys.data() + keys.size());
    if (raw) {  // ids keyed as the slots format keys them, shared slots included
      const KeySlots key_slots = lm_.model->options().KeySlotMap();
      for (size_t rs = 0; rs < rows * slots; ++rs) {
        const uint32_t slot = KeySlotOf(key_slots, static_cast<uint32_t>(rs % slots));
        for (uint32_t i = off[rs]; i < off[rs + 1]; ++i) {
          batch.keys[i] = FeatureKey(slot, batch.keys[i]);
        }
      }
    }
    std::vector<float> p;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> l(mu_);
      ScopedRowwisePredictions rowwise(lm_.model.get());  // as `ctrbox predict`
      if (rows > 0) {
        Check(
            PredictChunk(batch, *lm_.table, lm_.model.get(), job_.train.batch_size, 0, &pool_, &p));
      }
    }
    return py::array_t<float>(p.size(), p.data());
  }

  // Probabilities for text records (one per line, without or with a label); a malformed
  // record gets NaN, as `ctrbox predict` writes "nan".
  // format "": the one the model was trained on (its MANIFEST's input), else criteo.
  py::array_t<float> PredictText(const std::vector<std::string>& lines, std::string format) {
    TextFormatOptions text;
    const nlohmann::json& in = lm_.manifest.input;
    const bool recorded = in.is_object() && in.contains("format") && !in.value("generated", false);
    if (format.empty()) {
      format = recorded && in["format"] != "views" && in["format"] != "shards"
                   ? in["format"].get<std::string>()
                   : "criteo";
    }
    if (!ParseDataFormat(format, &text.format) || text.format == DataFormat::kShards) {
      throw StatusError(InvalidArgumentError("predict: unknown text format '" + format +
                                             "': expected criteo, libsvm, libfm, libffm or slots"));
    }
    text.slot_from = job_.data.slot_from;
    if (!job_.settings_given.contains("data.slot_from") && recorded && in.contains("slot_from")) {
      ParseSlotFrom(in["slot_from"].get<std::string>(), &text.slot_from);
    }
    text.schema = SchemaForFormat(text.format, num_slots(), num_dense(), text.slot_from);
    if (!(text.schema == lm_.model->schema())) {
      throw StatusError(InvalidArgumentError(
          "predict: " + format + " records have " + std::to_string(text.schema.num_slots) +
          " slots and " + std::to_string(text.schema.num_dense) +
          " dense values but the model was trained on " + std::to_string(num_slots()) + " and " +
          std::to_string(num_dense())));
    }
    text.labels_optional = true;
    text.max_line_bytes = job_.data.max_line_bytes;
    text.key_slots = lm_.model->options().KeySlotMap();
    TextChunk chunk;
    chunk.file = "predict records";
    for (const std::string& line : lines) {
      if (line.find('\n') != std::string::npos) {
        throw StatusError(
            InvalidArgumentError("predict: a record holds a newline; give one "
                                 "record per list item"));
      }
      chunk.data += line;
      chunk.data += '\n';
    }
    std::vector<float> out(lines.size(), std::nanf(""));
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> l(mu_);
      ScopedRowwisePredictions rowwise(lm_.model.get());  // as `ctrbox predict`
      ChunkParseResult parsed;
      ParseTextChunk(text, chunk, &parsed);
      Check(parsed.status);
      std::vector<float> p;
      if (parsed.batch.rows() > 0) {
        Check(PredictChunk(parsed.batch, *lm_.table, lm_.model.get(), job_.train.batch_size, 0,
                           &pool_, &p));
      }
      size_t next_bad = 0, next_row = 0;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (next_bad < parsed.bad_lines.size() && parsed.bad_lines[next_bad] == i + 1) {
          ++next_bad;
        } else if (next_row < p.size()) {
          out[i] = p[next_row++];
        }
      }
    }
    return py::array_t<float>(out.size(), out.data());
  }

  // Each key's embedding (keys x dim, float32; codes decoded), show and click counts, and
  // whether it has an embedding. A key the model does not hold comes back as show 0 with no
  // embedding (zeros): what predict uses for it.
  py::dict Lookup(py::array_t<uint64_t, py::array::c_style | py::array::forcecast> keys) {
    const size_t n = keys.size();
    // Pull takes distinct keys: look each distinct key up once.
    std::vector<uint64_t> distinct(keys.data(), keys.data() + n);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    const uint32_t d = dim();
    py::array_t<float> emb({n, static_cast<size_t>(d)});
    py::array_t<float> show(n), click(n);
    py::array_t<bool> has(n);
    // The arrays' buffers, taken with the GIL and filled without it.
    float* e = emb.mutable_data();
    float* s = show.mutable_data();
    float* c = click.mutable_data();
    bool* h = has.mutable_data();
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> l(mu_);
      RowBlock rows(lm_.table->layout());
      PinnedRows pins =
          Check(lm_.table->Pull(distinct.data(), distinct.size(), nullptr, &rows, &pool_));
      for (size_t i = 0; i < n; ++i) {
        const size_t r =
            std::lower_bound(distinct.begin(), distinct.end(), keys.data()[i]) - distinct.begin();
        s[i] = rows.show(r);
        c[i] = rows.click(r);
        h[i] = rows.has_emb(r);
        std::fill(e + i * d, e + (i + 1) * d, 0.0f);
        if (h[i]) std::copy(rows.emb(r), rows.emb(r) + d, e + i * d);
      }
    }
    py::dict out;
    out["embedding"] = emb;
    out["show"] = show;
    out["click"] = click;
    out["has_embedding"] = has;
    return out;
  }

 private:
  JobConfig job_;
  ThreadPool pool_;
  LoadedModel lm_;
  std::mutex mu_;
};

// The model keys of raw feature values of one slot, as the text formats make them: integers
// as the slot and libsvm formats read them, strings as Criteo's categorical fields.
py::array_t<uint64_t> FeatureKeys(uint32_t slot, py::object values) {
  std::vector<uint64_t> out;
  if (py::isinstance<py::array>(values) && py::array(values).dtype().kind() != 'U' &&
      py::array(values).dtype().kind() != 'O') {
    const char kind = py::array(values).dtype().kind();
    if (kind != 'u' && kind != 'i') {  // a float 1.7 would be truncated to 1
      throw py::type_error(std::string("feature_keys: values are unsigned integers or strings, "
                                       "not an array of ") +
                           std::string(py::str(py::array(values).dtype())));
    }
    auto ids = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(values);
    if (!ids) throw py::type_error("feature_keys: values are unsigned integers or strings");
    out.resize(ids.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = FeatureKey(slot, ids.data()[i]);
  } else {
    for (py::handle v : values) {
      if (py::isinstance<py::str>(v)) {
        out.push_back(FeatureKey(slot, std::string_view(v.cast<std::string>())));
      } else if (!PyIndex_Check(v.ptr()) || py::isinstance<py::bool_>(v)) {
        throw py::type_error("feature_keys: values are unsigned integers or strings, not " +
                             std::string(py::str(py::type::of(v).attr("__name__"))) + " (" +
                             std::string(py::repr(v)) + ")");
      } else {
        out.push_back(FeatureKey(slot, v.cast<uint64_t>()));
      }
    }
  }
  return py::array_t<uint64_t>(out.size(), out.data());
}

std::string Gen(const GenArgs& args) {
  py::gil_scoped_release nogil;
  return JsonText(Check(RunGen(args)));
}

void SetLogLevel(const std::string& level) {
  static const std::pair<const char*, LogLevel> kLevels[] = {{"debug", LogLevel::kDebug},
                                                             {"info", LogLevel::kInfo},
                                                             {"warning", LogLevel::kWarning},
                                                             {"error", LogLevel::kError},
                                                             {"off", LogLevel::kOff}};
  for (const auto& [name, l] : kLevels) {
    if (level == name) return InitLogging(l);
  }
  throw StatusError(InvalidArgumentError("log level '" + level +
                                         "': expected debug, info, warning, error or off"));
}

}  // namespace
}  // namespace ctrbox

PYBIND11_MODULE(_ctrbox, m) {
  using namespace ctrbox;
  m.doc() = "ctrbox's compiled core; use the ctrbox package (python/ctrbox/__init__.py)";
  ConfigureAllocator();
  blas::TakeCoreChoiceNote();  // the package chose the kernels before loading this module
  InitLogging(LogLevel::kInfo);
  py::register_exception<StatusError>(m, "StatusError", PyExc_RuntimeError);

  py::class_<JobConfig>(m, "JobConfig")
      .def_property_readonly("model_dir", [](const JobConfig& j) { return j.model_dir; })
      .def_property_readonly("threads", [](const JobConfig& j) { return j.train.threads; });
  // The job's sources as the CLI has them (cli/config.h); build_job checks and resolves them.
  py::class_<JobSources>(m, "JobSources")
      .def(py::init<>())
      .def_readwrite("config_path", &JobSources::config_path)
      .def_readwrite("data", &JobSources::data)
      .def_readwrite("eval_data", &JobSources::eval_data)
      .def_readwrite("format", &JobSources::format)
      .def_readwrite("model_dir", &JobSources::model_dir)
      .def_readwrite("fresh", &JobSources::fresh)
      .def_readwrite("resume", &JobSources::resume)
      .def_readwrite("features_text", &JobSources::features_text)
      .def_readwrite("features_origin", &JobSources::features_origin)
      .def("add_key", [](JobSources& s, std::string key, std::string value, std::string origin) {
        s.keys.push_back({std::move(key), std::move(value), std::move(origin)});
      });
  m.def("build_job", [](const JobSources& s) { return Check(BuildJobConfig(s)); });
  m.def("train", &Train, py::arg("job"), py::arg("progress"));
  m.def("config_reference", &ConfigReference);

  py::class_<Model>(m, "Model")
      .def(py::init<const JobConfig&>(), py::arg("job"))
      .def("manifest", &Model::Manifest)
      .def_property_readonly("num_slots", &Model::num_slots)
      .def_property_readonly("num_dense", &Model::num_dense)
      .def_property_readonly("dim", &Model::dim)
      .def("eval", &Model::Eval, py::arg("paths"), py::arg("format"))
      .def("predict_arrays", &Model::PredictArrays, py::arg("keys"), py::arg("offsets"),
           py::arg("dense"), py::arg("rows"), py::arg("raw"))
      .def("predict_text", &Model::PredictText, py::arg("lines"), py::arg("format"))
      .def("predict_rows", &Model::PredictRows, py::arg("paths"), py::arg("id_column"))
      .def("lookup", &Model::Lookup, py::arg("keys"))
      .def("keys", &Model::Keys, py::arg("slot"), py::arg("values"));

  py::class_<GenArgs>(m, "GenArgs")
      .def(py::init<>())
      .def_readwrite("out", &GenArgs::out)
      .def_readwrite("rows", &GenArgs::rows)
      .def_readwrite("format", &GenArgs::format)
      .def_readwrite("seed", &GenArgs::seed)
      .def_readwrite("vocab_scale", &GenArgs::vocab_scale)
      .def_readwrite("zipf", &GenArgs::zipf)
      .def_readwrite("threads", &GenArgs::threads);
  m.def("gen", &Gen, py::arg("args"));
  m.def("set_log_level", &SetLogLevel, py::arg("level"));
  m.def("feature_keys", &FeatureKeys, py::arg("slot"), py::arg("values"));
}
