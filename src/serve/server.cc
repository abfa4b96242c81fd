#include "serve/server.h"

#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "feature/extractor.h"
#include "serve/batcher.h"
#include "serve/describe.h"
#include "serve/grpc_server.h"
#include "serve/http_server.h"
#include "serve/infer.h"
#include "serve/served_version.h"
#include "serve/server_stats.h"
#include "util/logging.h"
#include "util/mutex.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

class Server final : public InferenceBackend {
 public:
  Server(Env* env, const ServeOptions& o)
      : env_(env), o_(o), batcher_({o.batch_max_micros, o.batch_max_rows, o.batch_lanes}) {
    source_ = o.serving_dir.empty() ? VersionSource::ModelDir(env, o.model_dir, o.rows_dir)
                                    : VersionSource::ServingDir(env, o.serving_dir, o.rows_dir);
  }

  Status Start() {
    Stopwatch clock;
    ASSIGN_OR_RETURN(std::shared_ptr<const ServedVersion> v, source_->Next(nullptr));
    if (!v) {
      return NotFoundError(
          fmt::format("{}: no version published yet (nothing to serve)", source_->Describe()));
    }
    Took(v, clock.Seconds());
    return Status::OK();
  }

  // The feature graph of the training job that reads requests' records (ServeOptions::graph).
  Status OpenGraph(const ServeGraphOptions& job) {
    const auto v = version_.load();
    const std::string format = v->input.is_object() ? v->input.value("format", "") : "";
    if (format != "views") {
      return InvalidArgumentError(fmt::format(
          "serve -c: {} reads {} records, not raw views through a feature graph: serve it "
          "without -c",
          v->name, format.empty() ? "(unrecorded)" : format));
    }
    if (job.features == nullptr) {
      return InvalidArgumentError(
          "serve -c: the job has no feature graph (features:); the model was trained through "
          "one");
    }
    Extractor::Options o;
    o.chunk_bytes = job.data.chunk_bytes;
    o.max_line_bytes = job.data.max_line_bytes;
    o.bad_input = job.data.bad_input;
    o.schedule = job.features->layered ? Schedule::kLayered : Schedule::kSequential;
    o.key_slots = v->spec.model.KeySlotMap();  // as the model's data was keyed
    o.serving = true;                          // (on the CPU whatever features.device says)
    DataOptions main = job.data;
    // The main view's column order from its first file's header when it is here, else as
    // declared.
    if (!main.paths.empty() && !env_->FileExists(main.paths[0])) main.paths.clear();
    main.command.clear();
    const std::string order = main.paths.empty() ? "as declared" : "from " + main.paths[0];
    ASSIGN_OR_RETURN(graph_, Extractor::Open(env_, job.features, main, o));
    if (!(graph_->schema() == v->spec.schema)) {
      return InvalidArgumentError(fmt::format(
          "serve -c: the graph makes {} slots and {} dense values but the model was trained on "
          "{} and {}",
          graph_->schema().num_slots, graph_->schema().num_dense, v->spec.schema.num_slots,
          v->spec.schema.num_dense));
    }
    const std::string trained = v->input.value("features", std::string());
    if (trained != GraphFingerprint(*graph_)) {
      return InvalidArgumentError(fmt::format(
          "serve -c: the job's feature graph ({}) is not the one {} was trained through ({}): "
          "give the job it was trained with",
          GraphFingerprint(*graph_), v->name, trained.empty() ? "unrecorded" : trained));
    }
    LOG_INFO(
        "serve: records are rows of the main view ({} columns, order {}) through the feature graph "
        "{}",
        job.features->main.columns.size(), order, trained);
    return Status::OK();
  }

  // The follower: every poll, the next version if there is one.
  void Follow(const std::atomic<bool>* stop) {
    uint64_t seen = inferences_.load();
    bool trimmed = true;
    while (!stopping_.load()) {
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::duration<double>(o_.poll_seconds);
      while (std::chrono::steady_clock::now() < until && !stopping_.load() &&
             !(stop != nullptr && stop->load())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (stopping_.load() || (stop != nullptr && stop->load())) return;
      if (o_.memory_budget > 0) {  // the mapped rows back within the budget
        const auto v = version_.load();
        if (v->base_rows) v->base_rows->Trim(o_.memory_budget);
      }
      // A poll period without an inference after some: the heap's free pages (request bodies
      // and answers of a burst, in every worker's malloc arena) go back to the system, once.
      // 1 000 connections' 256-record requests left 100 MB of them in RSS (docs/serve.md).
      if (const uint64_t n = inferences_.load(); n != seen) {
        seen = n;
        trimmed = false;
      } else if (!trimmed) {
        malloc_trim(0);
        trimmed = true;
      }
      Stopwatch clock;
      StatusOr<std::shared_ptr<const ServedVersion>> next = source_->Next(version_.load());
      if (!next.ok()) {
        version_errors_.fetch_add(1);
        {
          MutexLock l(&mu_);
          last_error_ = next.status().ToString();
        }
        LOG_ERROR("serve: a new version did not load; still serving {}: {}", version_.load()->name,
                  next.status().ToString());
        continue;
      }
      if (*next) Took(*next, clock.Seconds());
    }
  }

  // Answers one HTTP request (HttpServer runs GETs on its network thread, POSTs on workers).
  void Handle(HttpRequest& req, HttpResponse* res) {
    const std::string& p = req.path;
    const bool get = req.method == "GET" || req.method == "HEAD";
    if (p == "/v2/health/live" && get) {
      res->body = R"({"live":true})";
    } else if (p == "/v2/health/ready" && get) {
      res->body = R"({"ready":true})";
      Count("ready", 200);
    } else if (p == "/v2" && get) {
      res->body =
          nlohmann::json{
              {"name", "ctrbox"}, {"version", ServerVersion()}, {"extensions", Extensions()}}
              .dump();
    } else if (p == "/metrics" && get) {
      res->content_type = "text/plain; version=0.0.4";
      res->body = Metrics();
    } else if (p == "/v2/models/stats" && get) {
      res->body = stats_.ToJson(o_.model_name, "").dump();
    } else if (p.starts_with("/v2/models/")) {
      ModelRequest(req, get, res);
    } else {
      Error(res, 404, fmt::format("no such endpoint: {} {}", req.method, p), "other");
    }
  }

  void Stop() { stopping_.store(true); }

  // InferenceBackend: what the gRPC front end asks.
  std::string ServerVersion() const override { return "0.1.0"; }
  std::vector<std::string> Extensions() const override {
    return {"binary_tensor_data", "model_configuration", "statistics"};
  }
  StatusOr<ModelDescription> Describe(std::string_view name, std::string_view version) override {
    const auto v = version_.load();
    RETURN_IF_ERROR(Known(*v, name, version));
    return DescribeModel(o_.model_name, *v, graph_ != nullptr);
  }
  Status Infer(std::string_view name, std::string_view version, StatusOr<RequestTensors> tensors,
               double queue_seconds, InferAnswer* out) override {
    return Answer(
        name, version, queue_seconds, "grpc_infer", [&] { return std::move(tensors); },
        [&](const ServedVersion& v, const InferRequest& r, const std::vector<float>& p) {
          RecordOutputs(r, p, &out->probability, &out->scored);
          for (float x : out->probability) {
            if (!std::isfinite(x)) {
              return InternalError(v.name + " predicted a non-finite probability");
            }
          }
          out->model_version = std::to_string(v.version);
          out->outputs = r.outputs;
          return Status::OK();
        });
  }

 private:
  void Error(HttpResponse* res, int status, const std::string& message, const char* endpoint) {
    res->status = status;
    res->content_type = "application/json";
    res->headers.clear();
    res->body = JsonError(message);
    if (endpoint != nullptr) Count(endpoint, status);  // (null: counted by its caller)
  }

  // /v2/models/{name}[/versions/{version}][/ready|/config|/stats|/infer]
  void ModelRequest(HttpRequest& req, bool get, HttpResponse* res) {
    std::vector<std::string_view> parts;
    std::string_view rest =
        std::string_view(req.path).substr(std::string_view("/v2/models/").size());
    while (!rest.empty()) {
      const size_t slash = rest.find('/');
      parts.push_back(rest.substr(0, slash));
      rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    }
    std::string_view name = parts.empty() ? "" : parts[0], version, action;
    size_t at = 1;
    if (parts.size() >= 3 && parts[1] == "versions") version = parts[2], at = 3;
    if (at < parts.size()) action = parts[at++];
    const bool known_action = action.empty() || action == "ready" || action == "config" ||
                              action == "stats" || action == "infer";
    if (name.empty() || at < parts.size() || !known_action) {
      return Error(res, 404, fmt::format("no such endpoint: {} {}", req.method, req.path), "other");
    }
    const bool post = action == "infer";
    if (post != (req.method == "POST") || (!post && !get)) {
      return Error(res, 405,
                   fmt::format("{} {}: use {}", req.method, req.path, post ? "POST" : "GET"),
                   "other");
    }
    if (post) return Infer(req, name, version, res);  // (it takes the version it answers with)
    const auto v = version_.load();
    if (!Known(*v, name, version, res, "model")) return;
    if (action.empty()) {
      res->body =
          MetadataJson(DescribeModel(o_.model_name, *v, graph_ != nullptr), *v, graph_ != nullptr)
              .dump();
    } else if (action == "ready") {
      res->body = R"({"ready":true})";
    } else if (action == "config") {
      res->body = ConfigJson(DescribeModel(o_.model_name, *v, graph_ != nullptr), *v).dump();
    } else {
      res->body = stats_.ToJson(o_.model_name, std::string(version)).dump();
    }
  }

  void Took(const std::shared_ptr<const ServedVersion>& v, double seconds) {
    version_.store(v);
    versions_loaded_.fetch_add(1);
    LOG_INFO("serve: serving {} ({}{}, {} keys, {} in memory) from {}, made in {:.3f} s", v->name,
             v->base ? "base" : "delta applied",
             v->partition.empty() ? "" : ", partition " + v->partition, v->keys,
             FormatBytes(v->MemoryBytes()), source_->Describe(), seconds);
  }

  // The model (and version) a request names is this one; otherwise NotFound saying why.
  Status Known(const ServedVersion& v, std::string_view name, std::string_view version) const {
    if (name != o_.model_name) {
      return NotFoundError(
          fmt::format("unknown model '{}': this server serves '{}'", name, o_.model_name));
    }
    if (!version.empty() && version != std::to_string(v.version)) {
      return NotFoundError(
          fmt::format("version '{}' of '{}' is not served: the server serves version {} ({})",
                      version, name, v.version, v.name));
    }
    return Status::OK();
  }
  bool Known(const ServedVersion& v, std::string_view name, std::string_view version,
             HttpResponse* res, const char* endpoint) {
    Status s = Known(v, name, version);
    if (!s.ok()) Error(res, 404, s.message(), endpoint);
    return s.ok();
  }

  // Predicts the rows of r with version v into *p, for every protocol, with a predictor lent
  // for the prediction (the one given back last: its model is the warmest).
  Status Predict(const std::shared_ptr<const ServedVersion>& v, InferRequest* r,
                 std::vector<float>* p) {
    if (r->rows.rows() == 0) {  // (every record dropped by the graph's filters)
      p->clear();
      return Status::OK();
    }
    std::unique_ptr<Predictor> predictor = TakePredictor();
    BatchedAs as;
    Status s = batcher_.Predict(v, &r->rows, p, predictor.get(), &as);
    GivePredictor(std::move(predictor));
    if (as.led) {  // one observation a batch
      batch_rows_.Observe(as.batch_rows);
      batch_requests_.Observe(as.batch_requests);
    }
    return s;
  }

  // Predictors (each keeps the model of the version it last predicted with) are lent, not
  // kept per thread: gRPC's synchronous server runs RPCs on threads it starts and ends as it
  // likes, and a thread's own predictor was built anew (a CtrModel initialized, the version's
  // dense parameters applied: 9 % of a gRPC server's CPU, perf) on many of them. At most one
  // per prediction running at once (HTTP's workers and gRPC's slots).
  std::unique_ptr<Predictor> TakePredictor() {
    MutexLock l(&predictors_mu_);
    if (predictors_.empty()) return std::make_unique<Predictor>();
    std::unique_ptr<Predictor> p = std::move(predictors_.back());
    predictors_.pop_back();
    return p;
  }
  void GivePredictor(std::unique_ptr<Predictor> p) {
    MutexLock l(&predictors_mu_);
    predictors_.push_back(std::move(p));
  }

  // 200, or the HTTP status of an inference's error (400 bad input, 404 another model, 500).
  static int HttpStatusOf(const Status& s) {
    return s.ok()                                     ? 200
           : s.code() == StatusCode::kInvalidArgument ? 400
           : s.code() == StatusCode::kNotFound        ? 404
                                                      : 500;
  }

  using ReadTensors = std::function<StatusOr<RequestTensors>()>;
  using WriteAnswer =
      std::function<Status(const ServedVersion&, const InferRequest&, const std::vector<float>&)>;

  // One inference, whatever the protocol: the model and version checked against the one
  // served, the request's tensors read into its rows, predicted, and the answer written; the
  // outcome counted in /metrics (`endpoint`) and in the statistics (queue: seconds before).
  Status Answer(std::string_view name, std::string_view version, double queue, const char* endpoint,
                const ReadTensors& read, const WriteAnswer& write) {
    Stopwatch clock;
    InferTimes t;
    t.queue = queue;
    inferences_.fetch_add(1, std::memory_order_relaxed);
    const auto v = version_.load();  // the request's version
    Status s = Known(*v, name, version);
    std::optional<InferRequest> r;
    if (s.ok()) {
      StatusOr<RequestTensors> tensors = read();
      StatusOr<InferRequest> rows = tensors.ok()
                                        ? InferRequestOf(std::move(*tensors), *v, graph_.get())
                                        : StatusOr<InferRequest>(tensors.status());
      s = rows.status();
      if (s.ok()) r = std::move(*rows);
    }
    t.input = clock.Seconds();
    thread_local std::vector<float> p;
    if (s.ok()) s = Predict(v, &*r, &p);
    t.infer = clock.Seconds() - t.input;
    if (s.ok()) s = write(*v, *r, p);
    const int code = HttpStatusOf(s);
    Count(endpoint, code);
    if (!s.ok()) {
      if (code == 500) LOG_ERROR("serve: {}", s.ToString());
      stats_.Failure(v->version, t.queue + clock.Seconds());
      return s;
    }
    const size_t rows = r->through_graph ? r->records : p.size();
    rows_.Observe(static_cast<double>(rows));
    t.output = clock.Seconds() - t.input - t.infer;
    latency_.Observe(clock.Seconds());
    stats_.Success(v->version, rows, t, env_->NowSeconds());
    return Status::OK();
  }

  // A request's tensors over HTTP: its JSON object, then (binary tensor data extension) the
  // bytes past Inference-Header-Content-Length.
  static StatusOr<RequestTensors> HttpTensors(const HttpRequest& req) {
    const std::string_view header = req.Header("Inference-Header-Content-Length");
    if (header.empty()) return ReadRequestTensors(req.body, {});
    uint64_t n = 0;
    if (!ParseUint64(header, &n) || n > req.body.size()) {
      return InvalidArgumentError(
          fmt::format("Inference-Header-Content-Length: {}: not a length within the body's {} "
                      "bytes",
                      header, req.body.size()));
    }
    const std::string_view body = req.body;
    return ReadRequestTensors(body.substr(0, n), body.substr(n));
  }

  void Infer(HttpRequest& req, std::string_view name, std::string_view version, HttpResponse* res) {
    const double queue = std::max(0.0, SteadySeconds() - req.received_at);
    Status s = Answer(
        name, version, queue, "infer", [&] { return HttpTensors(req); },
        [&](const ServedVersion& v, const InferRequest& r, const std::vector<float>& p) {
          ASSIGN_OR_RETURN(const size_t json_bytes,
                           InferResponse(o_.model_name, v, r, p, &res->body));
          res->headers.emplace_back("X-Model-Version", std::to_string(v.version));
          if (json_bytes < res->body.size()) {
            res->content_type = "application/octet-stream";
            res->headers.emplace_back("Inference-Header-Content-Length",
                                      std::to_string(json_bytes));
          }
          return Status::OK();
        });
    if (!s.ok()) {
      Error(res, HttpStatusOf(s), s.message(), nullptr);
    }
  }

  void Count(const char* endpoint, int code) {
    MutexLock l(&mu_);
    ++requests_[{endpoint, code}];
  }

  std::string Metrics() {
    const auto v = version_.load();
    std::string out;
    out += "# HELP ctrbox_requests_total Requests by endpoint and HTTP status.\n";
    out += "# TYPE ctrbox_requests_total counter\n";
    uint64_t errors = 0;
    std::string last_error;
    {
      MutexLock l(&mu_);
      for (const auto& [key, n] : requests_) {
        fmt::format_to(std::back_inserter(out),
                       "ctrbox_requests_total{{endpoint=\"{}\",code=\"{}\"}} {}\n", key.first,
                       key.second, n);
        if (key.second >= 400) errors += n;
      }
      last_error = last_error_;
    }
    fmt::format_to(std::back_inserter(out),
                   "# HELP ctrbox_request_errors_total Requests answered with an error.\n"
                   "# TYPE ctrbox_request_errors_total counter\nctrbox_request_errors_total {}\n",
                   errors);
    latency_.Write("ctrbox_infer_seconds", "Inference requests' time in the server.", &out);
    rows_.Write("ctrbox_infer_rows", "Rows per inference request.", &out);
    batch_rows_.Write("ctrbox_batch_rows",
                      "Rows per batch predicted (the rows of the requests batched together).",
                      &out);
    batch_requests_.Write("ctrbox_batch_requests", "Requests per batch predicted.", &out);
    const double now = env_->NowSeconds();
    fmt::format_to(
        std::back_inserter(out),
        "# HELP ctrbox_model_version The version served.\n# TYPE ctrbox_model_version gauge\n"
        "ctrbox_model_version{{name=\"{}\",kind=\"{}\"}} {}\n"
        "# HELP ctrbox_model_age_seconds Since the version served was written (else loaded).\n"
        "# TYPE ctrbox_model_age_seconds gauge\nctrbox_model_age_seconds {}\n"
        "# HELP ctrbox_model_keys Keys of the version served.\n"
        "# TYPE ctrbox_model_keys gauge\nctrbox_model_keys {}\n"
        "# HELP ctrbox_model_bytes Bytes the version served holds in memory.\n"
        "# TYPE ctrbox_model_bytes gauge\nctrbox_model_bytes {}\n"
        "# HELP ctrbox_model_row_bytes Of them, the rows' (embeddings at the served precision).\n"
        "# TYPE ctrbox_model_row_bytes gauge\nctrbox_model_row_bytes {}\n"
        "# HELP ctrbox_model_resident_row_bytes Of the base's rows, the bytes in memory now\n"
        "# (mapped from --rows-dir: its resident pages).\n"
        "# TYPE ctrbox_model_resident_row_bytes gauge\nctrbox_model_resident_row_bytes {}\n"
        "# HELP ctrbox_versions_loaded_total Versions loaded (bases and deltas applied).\n"
        "# TYPE ctrbox_versions_loaded_total counter\nctrbox_versions_loaded_total {}\n"
        "# HELP ctrbox_version_errors_total Versions that failed to load (the last good one "
        "stays).\n# TYPE ctrbox_version_errors_total counter\nctrbox_version_errors_total {}\n",
        v->name, v->base ? "base" : "delta", v->version,
        now - (v->published_at > 0 ? v->published_at : v->loaded_at), v->keys, v->MemoryBytes(),
        v->RowBytes(), v->base_rows ? v->base_rows->ResidentBytes() : 0, versions_loaded_.load(),
        version_errors_.load());
    if (!last_error.empty()) {
      std::string quoted = nlohmann::json(last_error).dump();
      fmt::format_to(std::back_inserter(out),
                     "# HELP ctrbox_version_error_info The last version load error.\n"
                     "# TYPE ctrbox_version_error_info gauge\n"
                     "ctrbox_version_error_info{{error={}}} 1\n",
                     quoted);
    }
    return out;
  }

  Env* const env_;
  const ServeOptions o_;
  std::unique_ptr<VersionSource> source_;
  std::atomic<std::shared_ptr<const ServedVersion>> version_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> versions_loaded_{0}, version_errors_{0};
  std::atomic<uint64_t> inferences_{0};  // answered or refused, every protocol
  Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ GUARDED_BY(mu_);
  std::string last_error_ GUARDED_BY(mu_);
  InferStats stats_;
  Histogram<12> latency_{
      {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0}};
  Histogram<10> rows_{{1, 4, 16, 64, 128, 256, 512, 1024, 4096, 16384}};
  Histogram<10> batch_rows_{{1, 4, 16, 64, 128, 256, 512, 1024, 4096, 16384}};
  Histogram<7> batch_requests_{{1, 2, 4, 8, 16, 32, 64}};
  Batcher batcher_;
  std::shared_ptr<Extractor> graph_;  // reads records through the job's feature graph, or null
  Mutex predictors_mu_;
  std::vector<std::unique_ptr<Predictor>> predictors_ GUARDED_BY(predictors_mu_);
};

// The options RunServer refuses, named.
Status CheckOptions(const ServeOptions& o) {
  if (o.http.workers < 1) return InvalidArgumentError("serve: --threads must be >= 1");
  if (o.http.max_connections < 1) {
    return InvalidArgumentError("serve: --max-connections must be >= 1");
  }
  for (const auto& [flag, seconds] : {std::pair{"--header-timeout", o.http.header_timeout_seconds},
                                      std::pair{"--body-timeout", o.http.body_timeout_seconds},
                                      std::pair{"--idle-timeout", o.http.idle_timeout_seconds}}) {
    if (!(seconds > 0 && seconds <= 86400)) {
      return InvalidArgumentError(
          fmt::format("serve: {} {}: give seconds in (0, 86400]", flag, seconds));
    }
  }
  // The model's name is a path segment of every URL and a label in /metrics.
  const std::string& name = o.model_name;
  const bool plain = !name.empty() && name.size() <= 128 && name != "." && name != ".." &&
                     name.find_first_not_of(
                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                         "0123456789_.-") == std::string::npos;
  if (!plain || name == "stats") {
    return InvalidArgumentError(fmt::format(
        "serve: --model-name '{}': give a plain name of letters, digits, '_', '.' and '-' (not "
        "'.', '..' or 'stats')",
        name));
  }
  return Status::OK();
}

// As many descriptors as the hard limit allows (a connection is one; the default soft limit
// of 1024 would cap the connections below --max-connections).
void RaiseDescriptorLimit() {
  struct rlimit r;
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace

Status RunServer(Env* env, const ServeOptions& options, const std::atomic<bool>* stop,
                 const std::function<void(int port, int grpc_port)>& on_listening) {
  if (options.serving_dir.empty() == options.model_dir.empty()) {
    return InvalidArgumentError("serve: give --serving-dir or --model-dir (one of them)");
  }
  RETURN_IF_ERROR(CheckOptions(options));
  if (options.batch_max_micros < 0 || options.batch_max_micros > 1000000) {
    return InvalidArgumentError(fmt::format(
        "serve: --batch-max-micros {}: give 0 (no batching) to 1000000", options.batch_max_micros));
  }
  if (options.batch_max_rows < 1) {
    return InvalidArgumentError("serve: --batch-max-rows must be >= 1");
  }
  if (options.memory_budget > 0 && options.rows_dir.empty()) {
    return InvalidArgumentError(
        "serve: --memory-budget bounds the rows mapped from --rows-dir (give both; without "
        "--rows-dir the rows are in memory)");
  }
  if (!options.rows_dir.empty() && !env->IsDirectory(options.rows_dir)) {
    return NotFoundError(fmt::format("serve: --rows-dir {}: no such directory", options.rows_dir));
  }
  Server server(env, options);
  RETURN_IF_ERROR(server.Start());
  if (options.graph) RETURN_IF_ERROR(server.OpenGraph(*options.graph));
  RaiseDescriptorLimit();
  HttpServer http(options.http,
                  [&server](HttpRequest& req, HttpResponse* res) { server.Handle(req, res); });
  ASSIGN_OR_RETURN(const int port, http.Bind());
  GrpcServer grpc(&server, {options.http.host, options.grpc_port, options.http.workers,
                            options.http.max_body_bytes});
  int grpc_port = -1;
  if (options.grpc_port >= 0) {
    ASSIGN_OR_RETURN(grpc_port, grpc.Start());
  }
  std::thread listener([&] { http.Run(); });
  std::thread follower([&] { server.Follow(stop); });
  if (on_listening) on_listening(port, grpc_port);
  while (stop == nullptr || !stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  LOG_INFO("serve: stopping: answering the requests in flight, accepting no more");
  server.Stop();
  http.Stop();  // idle connections closed; the requests in flight answered
  grpc.Stop();
  listener.join();
  follower.join();
  return Status::OK();
}

}  // namespace ctrbox
