// The HTTP core (http_server.h) with real sockets on loopback: idle and slow clients take no
// worker, every limit is answered with its status and named, a busy port is an error, and a
// stop closes idle connections while it answers the requests in flight.
#include "serve/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ctrbox {
namespace {

using std::chrono::milliseconds;

// A raw client connection (blocking, with a receive timeout).
class Client {
 public:
  explicit Client(int port, double timeout_seconds = 10) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{
        static_cast<time_t>(timeout_seconds),
        static_cast<suseconds_t>((timeout_seconds - static_cast<int>(timeout_seconds)) * 1e6)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool Send(std::string_view s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // One response: its status (0: the connection closed or timed out first) and body.
  std::pair<int, std::string> Response() {
    std::string data;
    char buf[65536];
    while (true) {
      const size_t end = data.find("\r\n\r\n");
      if (end != std::string::npos) {
        const size_t cl = data.find("Content-Length: ");
        const size_t length = cl < end ? std::stoul(data.substr(cl + 16)) : 0;
        if (data.size() >= end + 4 + length) {
          return {std::stoi(data.substr(9, 3)), data.substr(end + 4, length)};
        }
      }
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return {0, data};
      data.append(buf, n);
    }
  }
  // Whether the server closed the connection (read returns 0) within the receive timeout.
  bool ClosedByServer() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string Get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"; }
std::string Post(const std::string& path, const std::string& body,
                 const std::string& headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + headers + "\r\n" + body;
}

std::string Gzip(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = in.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A server whose POST handler echoes the body's size (after `post_delay`), and GET answers
// "ok", run on a thread.
class HttpServerTest : public testing::Test {
 protected:
  int Start(HttpServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    server_ = std::make_unique<HttpServer>(o, [this](HttpRequest& req, HttpResponse* res) {
      if (req.method == "POST") {
        std::this_thread::sleep_for(post_delay_);
        res->body = std::to_string(req.body.size());
      } else {
        res->body = "ok";
      }
    });
    auto port = server_->Bind();
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    runner_ = std::thread([this] { server_->Run(); });
    return *port;
  }
  void TearDown() override { Stop(); }
  void Stop() {
    if (!server_) return;
    server_->Stop();
    runner_.join();
    server_.reset();
  }

  std::unique_ptr<HttpServer> server_;
  std::thread runner_;
  milliseconds post_delay_{0};
};

// 64 idle keep-alive connections and 16 clients that trickle their headers hold no worker:
// with 2 workers, a new client's GET and POST are answered at once.
TEST_F(HttpServerTest, IdleAndSlowClientsDoNotStarveOthers) {
  HttpServerOptions o;
  o.workers = 2;
  const int port = Start(o);
  std::vector<std::unique_ptr<Client>> idle, slow;
  for (int i = 0; i < 64; ++i) {
    idle.push_back(std::make_unique<Client>(port));
    ASSERT_TRUE(idle.back()->Send(Get("/a")));  // kept alive after its answer
    ASSERT_EQ(idle.back()->Response().first, 200);
  }
  for (int i = 0; i < 16; ++i) {
    slow.push_back(std::make_unique<Client>(port));
    ASSERT_TRUE(slow.back()->Send("POST /v2/models/m/infer HTTP/1.1\r\nX-A: "));
  }
  for (int round = 0; round < 3; ++round) {
    for (auto& s : slow) s->Send("a");  // a header byte now and then
    Client c(port, 5);
    ASSERT_TRUE(c.Send(Get("/v2/health/live")));
    EXPECT_EQ(c.Response().first, 200) << "round " << round;
    ASSERT_TRUE(c.Send(Post("/x", "hello")));
    EXPECT_EQ(c.Response(), std::make_pair(200, std::string("5")));
  }
}

TEST_F(HttpServerTest, SlowHeadersAndIdleConnectionsAreClosedAtTheirTimeouts) {
  HttpServerOptions o;
  o.header_timeout_seconds = 0.3;
  o.idle_timeout_seconds = 0.5;
  const int port = Start(o);
  Client slow(port, 5);
  ASSERT_TRUE(slow.Send("GET / HTTP/1.1\r\n"));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20 && slow.Send("X: y\r\n"); ++i)
    std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(slow.ClosedByServer());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  Client idle(port, 5);
  ASSERT_TRUE(idle.Send(Get("/")));
  ASSERT_EQ(idle.Response().first, 200);
  EXPECT_TRUE(idle.ClosedByServer());  // after idle_timeout with no new request
}

TEST_F(HttpServerTest, LimitsAreAnsweredWithTheirStatusAndNamed) {
  HttpServerOptions o;
  o.max_header_bytes = 1024;
  o.max_body_bytes = 16 << 10;
  o.max_inflated_bytes = 1 << 20;
  o.max_connections = 8;
  const int port = Start(o);
  {
    Client c(port);
    c.Send("GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
    auto [status, body] = c.Response();
    EXPECT_EQ(status, 431);
    EXPECT_NE(body.find("--max-header-bytes (1 KiB)"), std::string::npos) << body;
  }
  {
    Client c(port);
    c.Send(Post("/", std::string(20000, 'a')));
    auto [status, body] = c.Response();
    EXPECT_EQ(status, 413);
    EXPECT_NE(body.find("--max-body-bytes (16 KiB)"), std::string::npos) << body;
  }
  {
    // An 8 KB gzip body that inflates to 8 MiB: refused at the limit, not inflated whole.
    const std::string bomb = Gzip(std::string(8 << 20, '\0'));
    ASSERT_LT(bomb.size(), 16u << 10);
    Client c(port);
    c.Send(Post("/", bomb, "Content-Encoding: gzip\r\n"));
    auto [status, body] = c.Response();
    EXPECT_EQ(status, 413);
    EXPECT_NE(body.find("inflates to more than --max-inflated-bytes (1 MiB)"), std::string::npos)
        << body;
    Client ok(port);
    ok.Send(Post("/", Gzip(std::string(1000, 'x')), "Content-Encoding: gzip\r\n"));
    EXPECT_EQ(ok.Response(), std::make_pair(200, std::string("1000")));
    Client members(port);  // a gzip of two members is both
    members.Send(Post("/", Gzip(std::string(1000, 'x')) + Gzip(std::string(24, 'y')),
                      "Content-Encoding: gzip\r\n"));
    EXPECT_EQ(members.Response(), std::make_pair(200, std::string("1024")));
    Client bad(port);
    bad.Send(Post("/", "not gzip", "Content-Encoding: gzip\r\n"));
    EXPECT_EQ(bad.Response().first, 400);
    Client br(port);
    br.Send(Post("/", "x", "Content-Encoding: br\r\n"));
    EXPECT_EQ(br.Response().first, 415);
  }
  {
    Client c(port);
    c.Send("BREW / HTCPCP/1.0\r\n\r\n");
    EXPECT_EQ(c.Response().first, 400);
  }
  std::this_thread::sleep_for(milliseconds(100));  // (the connections above closed)
  {
    std::vector<std::unique_ptr<Client>> open;
    for (int i = 0; i < 8; ++i) {
      open.push_back(std::make_unique<Client>(port));
      open.back()->Send(Get("/"));
      ASSERT_EQ(open.back()->Response().first, 200);
    }
    Client over(port);
    auto [status, body] = over.Response();
    EXPECT_EQ(status, 503);
    EXPECT_NE(body.find("--max-connections (8)"), std::string::npos) << body;
  }
}

// Two servers never share a port (no SO_REUSEPORT): the second is told it is in use.
TEST_F(HttpServerTest, ABusyPortIsAnError) {
  const int port = Start(HttpServerOptions{});
  HttpServerOptions o;
  o.port = port;
  HttpServer second(o, [](HttpRequest&, HttpResponse*) {});
  auto bound = second.Bind();
  ASSERT_FALSE(bound.ok());
  EXPECT_NE(bound.status().message().find(fmt::format("cannot listen on 127.0.0.1:{}", port)),
            std::string::npos);
  EXPECT_NE(bound.status().message().find("another process listens there"), std::string::npos);
}

// Stop answers the request in flight and closes idle kept-alive connections at once.
TEST_F(HttpServerTest, StopAnswersTheRequestsInFlightAndClosesIdleConnections) {
  post_delay_ = milliseconds(400);
  const int port = Start(HttpServerOptions{});
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<Client>(port));
    idle.back()->Send(Get("/"));
    ASSERT_EQ(idle.back()->Response().first, 200);
  }
  Client busy(port);
  ASSERT_TRUE(busy.Send(Post("/", "abc")));
  std::this_thread::sleep_for(milliseconds(100));  // (the request is on a worker)
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_EQ(busy.Response(), std::make_pair(200, std::string("3")));
  runner_.join();
  server_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // not idle_timeout
  for (auto& c : idle) EXPECT_TRUE(c->ClosedByServer());
}

}  // namespace
}  // namespace ctrbox
