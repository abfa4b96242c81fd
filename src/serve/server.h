// `ctrbox serve` (docs/serve.md): the KServe / Triton v2 inference protocol over HTTP, one
// version of the model answering each request, the newest version followed without a stop.
#ifndef CTRBOX_SERVE_SERVER_H_
#define CTRBOX_SERVE_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "feature/graph.h"
#include "io/reader.h"
#include "serve/http_server.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

// A feature graph that reads the records of requests: the training job's `features:` and
// the data.* keys its main view was read with.
struct ServeGraphOptions {
  std::shared_ptr<const FeaturePlan> features;  // null: the job has no feature graph
  DataOptions data;  // the main view's files (for its column order), chunk and line limits
};

struct ServeOptions {
  std::string serving_dir;  // a trainer's serving.dir (its donefile), or
  std::string model_dir;    // a model directory
  // Where it listens (127.0.0.1:8500; port 0: any free port, said on the listening line),
  // its workers (`workers`: requests predicted at once, 8), and the limits on connections
  // (http_server.h). Connections are multiplexed: an open or slow connection takes no worker.
  HttpServerOptions http;
  // KServe v2 over gRPC on this port too (0: any free port; -1: none), at http.host, with
  // http.workers RPCs at once and http.max_body_bytes per request.
  int grpc_port = -1;
  double poll_seconds = 1.0;  // how often the donefile (or the model's MANIFEST) is read
  std::string model_name = "ctrbox";
  // Larger than memory (docs/serve.md, "Rows on SSD"): the rows of each base in a file of
  // this directory, mapped; with memory_budget > 0 their resident pages are given back each
  // poll once they pass it (0: the kernel alone decides).
  std::string rows_dir;
  uint64_t memory_budget = 0;
  // Batching across requests (docs/serve.md, "Batching"): requests of fewer than
  // batch_max_rows rows that come while batch_lanes of them are being predicted (0: half the
  // cores) are batched together, up to batch_max_rows rows; a batch waits at most
  // batch_max_micros for a lane (0: no batching).
  int64_t batch_max_micros = 2000;
  uint32_t batch_max_rows = 16;
  int batch_lanes = 0;
  // The feature graph of the training job (`-c job.yaml`) of a model trained on raw views: it
  // reads the records of requests (docs/serve.md, "Records through a feature graph"). Unset:
  // records in the model's input format.
  std::optional<ServeGraphOptions> graph;
};

// Loads the newest version, listens, calls on_listening once it accepts requests, and
// serves until *stop: then it stops accepting, closes idle connections, answers the requests
// in flight and returns OK. Fails before listening when an option is invalid (a model name
// that is not a plain name), no version loads, or the port cannot be bound (one in use is
// never shared).
// on_listening gets the HTTP port and the gRPC port (-1: none).
Status RunServer(Env* env, const ServeOptions& options, const std::atomic<bool>* stop,
                 const std::function<void(int port, int grpc_port)>& on_listening);

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_SERVER_H_
