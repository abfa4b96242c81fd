#include "serve/http_server.h"

#include <fmt/format.h>
#include <strings.h>
#include <zlib.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "serve/worker_pool.h"

namespace ctrbox {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

std::string JsonError(std::string_view message) {
  return nlohmann::json{{"error", message}}.dump();
}

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k.size() == name.size() && ::strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  }
  return {};
}

namespace {

std::chrono::steady_clock::duration After(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds));
}

std::string Bytes(size_t n) {
  return n % (1 << 20) == 0 ? fmt::format("{} MiB", n >> 20)
         : n % 1024 == 0    ? fmt::format("{} KiB", n >> 10)
                            : fmt::format("{} bytes", n);
}

// Inflates a gzip (every member of it) or zlib (HTTP "deflate") body into *out, at most
// `limit` bytes. Returns 0,
// else the HTTP status of the error and *error.
int InflateBody(std::string_view in, bool gzip, size_t limit, std::string* out,
                std::string* error) {
  z_stream z{};
  if (inflateInit2(&z, gzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
    *error = "cannot inflate the body (zlib)";
    return 500;
  }
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());  // (the body is at most max_body_bytes < 4 GiB)
  out->clear();
  char buf[1 << 16];
  int rc = Z_OK, status = 0;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t got = sizeof buf - z.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END) {
      *error = fmt::format("the body is not valid {} data ({})", gzip ? "gzip" : "deflate",
                           rc == Z_BUF_ERROR ? "it ends early"
                           : z.msg           ? z.msg
                                             : "corrupt");
      status = 400;
      break;
    }
    if (got > limit - out->size()) {
      *error =
          fmt::format("the body inflates to more than --max-inflated-bytes ({})", Bytes(limit));
      status = 413;
      break;
    }
    out->append(buf, got);
    if (rc == Z_STREAM_END && z.avail_in > 0 && gzip) {  // the next member of a multi-member gzip
      inflateReset(&z);
      rc = Z_OK;
    }
  }
  if (status == 0 && z.avail_in > 0) {
    *error = fmt::format("the body has {} bytes after its {} data", z.avail_in,
                         gzip ? "gzip" : "deflate");
    status = 400;
  }
  inflateEnd(&z);
  return status;
}

}  // namespace

class HttpServer::Impl {
 public:
  class Connection;

  Impl(HttpServerOptions o, HttpHandler handler)
      : o_(std::move(o)), handler_(std::move(handler)), acceptor_(ioc_), pool_(o_.workers) {}

  StatusOr<int> Bind() {
    error_code ec;
    const asio::ip::address address = asio::ip::make_address(o_.host, ec);
    if (ec)
      return InvalidArgumentError(fmt::format("serve: --host {}: not an IP address", o_.host));
    const tcp::endpoint at(address, static_cast<uint16_t>(o_.port));
    acceptor_.open(at.protocol(), ec);
    // SO_REUSEADDR only: a port in TIME_WAIT is taken, a port another socket listens on is not
    // (no SO_REUSEPORT: two servers never split one port's traffic).
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(at, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return IOError(fmt::format(
          "serve: cannot listen on {}:{}: {}{}", o_.host, o_.port, ec.message(),
          ec == asio::error::address_in_use ? " (another process listens there: stop it or give "
                                              "another --port)"
                                            : ""));
    }
    return static_cast<int>(acceptor_.local_endpoint().port());
  }

  void Run() {
    Accept();
    ioc_.run();
    pool_.Join();
  }

  void Stop() {
    asio::post(ioc_, [this] {
      if (stopping_.exchange(true)) return;
      error_code ec;
      acceptor_.close(ec);
      retry_.cancel();
      std::vector<Connection*> open(open_.begin(), open_.end());
      for (Connection* c : open) CloseIfWaiting(c);
    });
  }

 private:
  friend class Connection;

  void Accept();
  static void CloseIfWaiting(Connection* c);

  const HttpServerOptions o_;
  const HttpHandler handler_;
  asio::io_context ioc_;  // (run by one thread; workers start writes)
  tcp::acceptor acceptor_;
  asio::steady_timer retry_{ioc_};
  WorkerPool pool_;
  std::atomic<bool> stopping_{false};  // set on the network thread, read by workers too
  // Owned by the network thread.
  std::unordered_set<Connection*> open_;
};

// One client connection, driven on the network thread: wait for a request (idle), read its
// header and body, hand it to a worker (POST) or answer it at once (GET), write the answer,
// and again while it is kept alive.
class HttpServer::Impl::Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { kIdle, kHeader, kBody, kHandling };

  Connection(tcp::socket socket, Impl* server) : stream_(std::move(socket)), server_(server) {
    error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);
  }

  void Start() {
    server_->open_.insert(this);
    WaitForRequest();
  }

  Phase phase() const { return phase_; }
  void CloseSocket() {
    error_code ec;
    stream_.socket().close(ec);  // pending operations end with operation_aborted
  }

 private:
  const HttpServerOptions& o() const { return server_->o_; }

  // Idle: a kept-alive connection waits idle_timeout for a request's first byte.
  void WaitForRequest() {
    phase_ = Phase::kIdle;
    if (server_->stopping_) return Close();
    if (buffer_.size() > 0) return ReadHeader();
    stream_.expires_after(After(o().idle_timeout_seconds));
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->buffer_.commit(n);
                              if (ec || n == 0) return self->Close();
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    phase_ = Phase::kHeader;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(o().max_header_bytes, 1u << 30)));
    parser_->body_limit(o().max_body_bytes);
    stream_.expires_after(After(o().header_timeout_seconds));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) {
                              if (ec) return self->ReadFailed(ec);
                              self->ReadBody();
                            });
  }

  void ReadBody() {
    phase_ = Phase::kBody;
    const auto length = parser_->content_length();
    if (length && *length > o().max_body_bytes) return BodyTooLarge();
    stream_.expires_after(After(o().body_timeout_seconds));
    auto read = [self = shared_from_this()] {
      http::async_read(self->stream_, self->buffer_, *self->parser_, [self](error_code ec, size_t) {
        if (ec) return self->ReadFailed(ec);
        self->Handle();
      });
    };
    const auto& h = parser_->get();
    if (!parser_->is_done() && beast::iequals(h[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue),
                        [self = shared_from_this(), read](error_code ec, size_t) {
                          if (ec) return self->Close();
                          read();
                        });
      return;
    }
    read();
  }

  void BodyTooLarge() {
    Fail(413,
         fmt::format("the body is larger than --max-body-bytes ({})", Bytes(o().max_body_bytes)));
  }

  void ReadFailed(error_code ec) {
    if (ec == http::error::header_limit) {
      return Fail(431, fmt::format("the request's header is larger than --max-header-bytes ({})",
                                   Bytes(o().max_header_bytes)));
    }
    if (ec == http::error::body_limit) return BodyTooLarge();
    if (ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec == asio::error::eof || ec == asio::error::connection_reset) {
      return Close();  // timed out, stopped, or the client went away
    }
    Fail(400, fmt::format("malformed HTTP request: {}", ec.message()));
  }

  // The request read: inflated, then answered here (GET) or by a worker.
  void Handle() {
    phase_ = Phase::kHandling;
    stream_.expires_never();
    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    auto req = std::make_shared<HttpRequest>();
    req->method = std::string(msg.method_string());
    const std::string_view target = msg.target();
    req->path = std::string(target.substr(0, target.find('?')));
    for (const auto& f : msg) req->headers.emplace_back(f.name_string(), f.value());
    req->body = std::move(msg.body());
    req->received_at = SteadySeconds();
    parser_.reset();
    if (req->method == "GET" || req->method == "HEAD") {
      HttpResponse res;
      if (Inflate(req.get(), &res)) server_->handler_(*req, &res);
      return Write(std::move(res));
    }
    // On a worker (inflating a body too); the guard keeps the network thread running until the
    // answer is posted back.
    auto guard = std::make_shared<asio::executor_work_guard<asio::io_context::executor_type>>(
        server_->ioc_.get_executor());
    server_->pool_.Post([self = shared_from_this(), req, guard] {
      auto res = std::make_shared<HttpResponse>();
      const bool inflated = self->Inflate(req.get(), res.get());
      if (inflated) self->server_->handler_(*req, res.get());
      // Written from here: the connection has no operation pending while its request is
      // handled, so the worker starts the write (asio sends what the socket takes at once)
      // and its completion runs on the network thread. No second hop before the answer.
      if (!inflated) self->keep_alive_ = false;
      self->Write(std::move(*res));
    });
  }

  // A gzip or deflate body inflated in place; false with *res the error (the connection then
  // closes).
  bool Inflate(HttpRequest* req, HttpResponse* res) const {
    const std::string_view encoding = req->Header("Content-Encoding");
    if (encoding.empty() || beast::iequals(encoding, "identity")) return true;
    const bool gzip = beast::iequals(encoding, "gzip") || beast::iequals(encoding, "x-gzip");
    std::string inflated, error;
    int status = 415;
    if (!gzip && !beast::iequals(encoding, "deflate")) {
      error = fmt::format("Content-Encoding {}: give gzip, deflate or identity", encoding);
    } else {
      status = InflateBody(req->body, gzip, o().max_inflated_bytes, &inflated, &error);
    }
    if (status != 0) {
      res->status = status;
      res->body = JsonError(error);
      return false;
    }
    req->body = std::move(inflated);
    return true;
  }

  // An error answered before any handler: the connection closes after it.
  void Fail(int status, std::string message) {
    keep_alive_ = false;
    HttpResponse res;
    res.status = status;
    res.body = JsonError(message);
    Write(std::move(res));
  }

  // On the network thread, or on the worker that handled the request (phase_ is kHandling
  // then, and nothing else touches the connection).
  void Write(HttpResponse res) {
    if (phase_ != Phase::kHandling) phase_ = Phase::kHandling;  // (Stop lets it finish)
    auto out = std::make_shared<http::response<http::string_body>>();
    out->version(11);
    out->result(static_cast<unsigned>(res.status));
    out->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) out->set(k, v);
    out->body() = std::move(res.body);
    out->keep_alive(keep_alive_ && !server_->stopping_);
    out->prepare_payload();
    stream_.expires_after(After(o().body_timeout_seconds));
    http::async_write(stream_, *out, [self = shared_from_this(), out](error_code ec, size_t) {
      if (ec || !out->keep_alive()) return self->Close();
      self->WaitForRequest();
    });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
    server_->open_.erase(this);
  }

  beast::tcp_stream stream_;
  Impl* const server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Phase phase_ = Phase::kIdle;
  bool keep_alive_ = true;
  bool closed_ = false;
};

void HttpServer::Impl::CloseIfWaiting(Connection* c) {
  // A connection waiting for a request, or reading its header, is closed; one whose request
  // is being read, handled or answered finishes it (and then closes).
  if (c->phase() == Connection::Phase::kIdle || c->phase() == Connection::Phase::kHeader) {
    c->CloseSocket();
  }
}

void HttpServer::Impl::Accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (stopping_) return;
    if (ec) {
      // Out of descriptors (or another transient error): try again shortly, not in a loop.
      retry_.expires_after(std::chrono::milliseconds(50));
      retry_.async_wait([this](error_code e) {
        if (!e && !stopping_) Accept();
      });
      return;
    }
    if (open_.size() >= o_.max_connections) {
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      auto text = std::make_shared<std::string>();
      const std::string body = JsonError(
          fmt::format("too many connections: the server holds --max-connections ({}) open",
                      o_.max_connections));
      *text = fmt::format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
          body.size(), body);
      asio::async_write(*s, asio::buffer(*text), [s, text](error_code, size_t) {
        error_code e;
        s->shutdown(tcp::socket::shutdown_send, e);
        s->close(e);
      });
    } else {
      std::make_shared<Connection>(std::move(socket), this)->Start();
    }
    Accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}
HttpServer::~HttpServer() = default;
StatusOr<int> HttpServer::Bind() { return impl_->Bind(); }
void HttpServer::Run() { impl_->Run(); }
void HttpServer::Stop() { impl_->Stop(); }

}  // namespace ctrbox
