#include "serve/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "pipeline/job.h"
#include "serve/batcher.h"
#include "serve/infer.h"
#include "serve/served_version.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A Prometheus histogram with fixed upper bounds.
template <size_t N>
class Histogram {
 public:
  explicit Histogram(std::array<double, N> bounds) : bounds_(bounds) {}
  void Observe(double v) {
    size_t b = 0;
    while (b < N && v > bounds_[b]) ++b;
    counts_[b].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
  }
  void Write(const std::string& name, const std::string& help, std::string* out) const {
    fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} histogram\n", name, help,
                   name);
    uint64_t cum = 0;
    for (size_t b = 0; b <= N; ++b) {
      cum += counts_[b].load(std::memory_order_relaxed);
      if (b < N) {
        fmt::format_to(std::back_inserter(*out), "{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[b],
                       cum);
      } else {
        fmt::format_to(std::back_inserter(*out), "{}_bucket{{le=\"+Inf\"}} {}\n", name, cum);
      }
    }
    fmt::format_to(std::back_inserter(*out), "{}_sum {}\n{}_count {}\n", name, sum_.load(), name,
                   cum);
  }

 private:
  std::array<double, N> bounds_;
  std::array<std::atomic<uint64_t>, N + 1> counts_{};
  std::atomic<double> sum_{0};
};

class Server {
 public:
  Server(Env* env, const ServeOptions& o)
      : env_(env), o_(o), batcher_({o.batch_max_micros, o.batch_max_rows, o.batch_slots}) {
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

  // The feature graph of the training job that reads requests' records (ServeOptions::job).
  Status OpenGraph(const JobConfig& job) {
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
      Stopwatch clock;
      StatusOr<std::shared_ptr<const ServedVersion>> next = source_->Next(version_.load());
      if (!next.ok()) {
        version_errors_.fetch_add(1);
        {
          std::lock_guard<std::mutex> l(mu_);
          last_error_ = next.status().ToString();
        }
        LOG_ERROR("serve: a new version did not load; still serving {}: {}", version_.load()->name,
                  next.status().ToString());
        continue;
      }
      if (*next) Took(*next, clock.Seconds());
    }
  }

  void Register(httplib::Server* http) {
    http->Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"live":true})", "application/json");
    });
    http->Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"ready":true})", "application/json");
      Count("ready", 200);
    });
    http->Get("/v2", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          nlohmann::json{{"name", "ctrbox"}, {"extensions", nlohmann::json::array()}}.dump(),
          "application/json");
    });
    http->Get(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)",
              [this](const httplib::Request& req, httplib::Response& res) {
                const auto v = version_.load();
                if (!Known(req, *v, res)) return;
                res.set_content(Metadata(*v).dump(), "application/json");
              });
    http->Get(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/ready)",
              [this](const httplib::Request& req, httplib::Response& res) {
                const auto v = version_.load();
                if (!Known(req, *v, res)) return;
                res.set_content(R"({"ready":true})", "application/json");
              });
    http->Post(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/infer)",
               // The body read here whatever its Content-Type (curl -d says form-urlencoded,
               // which httplib would otherwise parse as a form and cap at 8 KB).
               [this](const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& content) {
                 thread_local std::string body;
                 body.clear();
                 content([&](const char* data, size_t n) {
                   body.append(data, n);
                   return true;
                 });
                 Infer(req, body, res);
               });
    http->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Metrics(), "text/plain; version=0.0.4");
    });
    http->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // a handler's own error
      const std::string m = res.status == 404
                                ? fmt::format("no such endpoint: {} {}", req.method, req.path)
                                : fmt::format("HTTP {}", res.status);
      res.set_content(nlohmann::json{{"error", m}}.dump(), "application/json");
      Count("other", res.status);
    });
  }

  void Stop() { stopping_.store(true); }

 private:
  void Took(const std::shared_ptr<const ServedVersion>& v, double seconds) {
    version_.store(v);
    versions_loaded_.fetch_add(1);
    LOG_INFO("serve: serving {} ({}{}, {} keys, {} in memory) from {}, made in {:.3f} s", v->name,
             v->base ? "base" : "delta applied",
             v->partition.empty() ? "" : ", partition " + v->partition, v->keys,
             FormatBytes(v->MemoryBytes()), source_->Describe(), seconds);
  }

  // The model (and version) a request names is this one; otherwise 404 with why.
  bool Known(const httplib::Request& req, const ServedVersion& v, httplib::Response& res) {
    const std::string name = req.matches[1];
    const std::string version = req.matches.size() > 2 ? std::string(req.matches[2]) : "";
    std::string error;
    if (name != o_.model_name) {
      error = fmt::format("unknown model '{}': this server serves '{}'", name, o_.model_name);
    } else if (!version.empty() && version != std::to_string(v.version)) {
      error = fmt::format("version '{}' of '{}' is not served: the server serves version {} ({})",
                          version, name, v.version, v.name);
    }
    if (error.empty()) return true;
    res.status = 404;
    res.set_content(nlohmann::json{{"error", error}}.dump(), "application/json");
    Count("model", 404);
    return false;
  }

  nlohmann::json Metadata(const ServedVersion& v) const {
    const Schema& s = v.spec.schema;
    nlohmann::json inputs = nlohmann::json::array();
    inputs.push_back({{"name", "records"}, {"datatype", "BYTES"}, {"shape", {-1}}});
    inputs.push_back({{"name", "keys"}, {"datatype", "INT64"}, {"shape", {-1, s.num_slots}}});
    if (s.num_dense > 0) {
      inputs.push_back({{"name", "dense"}, {"datatype", "FP32"}, {"shape", {-1, s.num_dense}}});
    }
    nlohmann::json outputs = {{{"name", "probability"}, {"datatype", "FP32"}, {"shape", {-1}}}};
    if (graph_) outputs.push_back({{"name", "scored"}, {"datatype", "BOOL"}, {"shape", {-1}}});
    return {{"name", o_.model_name},
            {"versions", {std::to_string(v.version)}},
            {"platform", "ctrbox"},
            {"inputs", inputs},
            {"outputs", outputs},
            {"parameters",
             {{"version_name", v.name},
              {"input_format", v.input.is_object() ? v.input.value("format", "") : ""},
              {"records", graph_ ? "rows of the main view through the feature graph"
                                 : "records in the input format"},
              {"keys", v.keys}}}};
  }

  void Infer(const httplib::Request& req, const std::string& body, httplib::Response& res) {
    Stopwatch clock;
    const std::shared_ptr<const ServedVersion> v = version_.load();  // the request's version
    if (!Known(req, *v, res)) return;
    thread_local Predictor predictor;
    thread_local std::vector<float> p;
    StatusOr<InferRequest> r = ParseInferRequest(body, *v, graph_.get());
    Status s = r.status();
    BatchedAs as;
    if (s.ok()) {
      if (r->rows.rows() > 0) {
        s = batcher_.Predict(v, &r->rows, &p, &predictor, &as);
      } else {
        p.clear();  // (every record dropped by the graph's filters)
      }
    }
    if (as.led) {  // one observation a batch
      batch_rows_.Observe(as.batch_rows);
      batch_requests_.Observe(as.batch_requests);
    }
    if (!s.ok()) {
      const bool bad = s.code() == StatusCode::kInvalidArgument;
      res.status = bad ? 400 : 500;
      res.set_content(nlohmann::json{{"error", s.message()}}.dump(), "application/json");
      Count("infer", res.status);
      if (!bad) LOG_ERROR("serve: {}", s.ToString());
      return;
    }
    res.set_content(InferResponse(o_.model_name, *v, *r, p), "application/json");
    res.set_header("X-Model-Version", std::to_string(v->version));
    Count("infer", 200);
    rows_.Observe(static_cast<double>(r->through_graph ? r->records : p.size()));
    latency_.Observe(clock.Seconds());
  }

  void Count(const char* endpoint, int code) {
    std::lock_guard<std::mutex> l(mu_);
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
      std::lock_guard<std::mutex> l(mu_);
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
    const double now = Now();
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
  std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::string last_error_;
  Histogram<12> latency_{
      {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0}};
  Histogram<10> rows_{{1, 4, 16, 64, 128, 256, 512, 1024, 4096, 16384}};
  Histogram<10> batch_rows_{{1, 4, 16, 64, 128, 256, 512, 1024, 4096, 16384}};
  Histogram<7> batch_requests_{{1, 2, 4, 8, 16, 32, 64}};
  Batcher batcher_;
  std::shared_ptr<Extractor> graph_;  // reads records through the job's feature graph, or null
};

}  // namespace

Status RunServer(Env* env, const ServeOptions& options, const std::atomic<bool>* stop,
                 const std::function<void(int port)>& on_listening) {
  if (options.serving_dir.empty() == options.model_dir.empty()) {
    return InvalidArgumentError("serve: give --serving-dir or --model-dir (one of them)");
  }
  if (options.threads < 1) return InvalidArgumentError("serve: --threads must be >= 1");
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
  if (options.job != nullptr) RETURN_IF_ERROR(server.OpenGraph(*options.job));
  httplib::Server http;
  const int threads = options.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_keep_alive_max_count(1 << 30);
  http.set_keep_alive_timeout(30);
  http.set_payload_max_length(options.max_body_bytes);
  http.set_tcp_nodelay(true);
  server.Register(&http);
  const int port = options.port == 0
                       ? http.bind_to_any_port(options.host)
                       : (http.bind_to_port(options.host, options.port) ? options.port : -1);
  if (port < 0) {
    return IOError(
        fmt::format("serve: cannot listen on {}:{} (in use?)", options.host, options.port));
  }
  std::thread listener([&] { http.listen_after_bind(); });
  std::thread follower([&] { server.Follow(stop); });
  if (on_listening) on_listening(port);
  while (stop == nullptr || !stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  LOG_INFO("serve: stopping: answering the requests in flight, accepting no more");
  server.Stop();
  http.stop();  // the workers finish the requests they hold
  listener.join();
  follower.join();
  return Status::OK();
}

}  // namespace ctrbox

#if defined(__SANITIZE_THREAD__)
// A ThreadSanitizer build: Debian's cpp-httplib is not instrumented. It builds function-local
// static regexes on the first worker that needs them; later workers see them through the
// static's inline guard check, which ThreadSanitizer cannot see in uninstrumented code, and
// it reports their reads as races (frames in std::regex's _BracketMatcher inside the library,
// nothing of ctrbox's). Races whose frames are all in that library are not reported.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libcpp-httplib.so\n";
}
#endif
