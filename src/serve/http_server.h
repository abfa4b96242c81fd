// The HTTP/1.1 core of `ctrbox serve` (docs/serve.md, "Connections"): connections, reads and
// writes multiplexed on one network thread (Boost.Beast over Asio), handlers of POST requests
// on a bounded pool of workers, so a slow or idle client costs a file descriptor, not a
// worker. Knows nothing of models: server.cc routes the requests.
#ifndef CTRBOX_SERVE_HTTP_SERVER_H_
#define CTRBOX_SERVE_HTTP_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace ctrbox {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8500;  // 0: any free port
  int workers = 8;  // the pool that runs POST handlers (GET handlers run on the network thread)
  // Connections open at once; one past it is answered 503 and closed.
  uint64_t max_connections = 10000;
  // A request's header must arrive within header_timeout of its first byte, its body within
  // body_timeout of the header's end; a kept-alive connection with no request begun is
  // closed after idle_timeout; an answer must be taken within body_timeout.
  double header_timeout_seconds = 10;
  double body_timeout_seconds = 60;
  double idle_timeout_seconds = 30;
  uint64_t max_header_bytes = 16 << 10;               // larger: 431
  uint64_t max_body_bytes = uint64_t{64} << 20;       // as sent (larger: 413; at most 4 GiB)
  uint64_t max_inflated_bytes = uint64_t{256} << 20;  // gzip or deflate, inflated (larger: 413)
};

// The clock of HttpRequest::received_at (seconds).
inline double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;        // inflated when it came gzip- or deflate-encoded
  double received_at = 0;  // SteadySeconds() when the body was read (queue time)

  // The value of header `name` (case-insensitive); "" when absent.
  std::string_view Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// Answers a request. Runs on the network thread for GET requests (keep it short) and on a
// worker for the others.
using HttpHandler = std::function<void(HttpRequest&, HttpResponse*)>;

// Thread safety: Bind and Run from one thread; Stop from any.
class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();

  // Binds host:port exclusively (a port in use is an error saying so, never shared) and
  // listens. Returns the port.
  StatusOr<int> Bind();
  // Serves until Stop: then accepts no more connections, closes the ones with no request in
  // progress, answers the requests being handled (their connections then close) and returns.
  void Run();
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// A JSON error body: {"error": message}.
std::string JsonError(std::string_view message);

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_HTTP_SERVER_H_
