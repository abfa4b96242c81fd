// ctrbox serve under load from wrk (Debian's), bounded in time: the slow label (not in CI's
// default run; docs/serve.md). Speeds are the benchmark's (bench/serve.py); this test holds
// the server to answering every request of a sustained load, and to stopping cleanly after it.
#include "cli/serve_test_util.h"

namespace ctrbox {
namespace {

using testing::Result;

constexpr const char* kLua = R"(
local f = io.open(os.getenv("CTRBOX_BODY"), "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
wrk.headers["Content-Type"] = "application/json"
f:close()
)";

struct Load {
  long requests = -1, non_2xx = 0, socket_errors = 0;
  std::string out;
};

class ServeLoadTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    ServeFixture::SetUp();
    if (IsSkipped()) return;
    if (std::system("command -v wrk >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "no wrk (scripts/setup)";
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("post.lua"), kLua).ok());
  }
  // A JSON body of the first n records of `file`.
  void Body(const std::string& file, int n, const std::string& out) {
    ASSERT_EQ(Run(fmt::format("python3 -c 'import json,sys; l=open(\"{}\").read().splitlines()"
                              "[:{}]; json.dump({{\"inputs\":[{{\"name\":\"records\",\"datatype\":"
                              "\"BYTES\",\"shape\":[len(l)],\"data\":l}}]}}, open(\"{}\",\"w\"))'",
                              file, n, out))
                  .exit_code,
              0);
  }
  Load Wrk(int port, const std::string& body, int connections, int seconds) {
    Result r =
        Run(fmt::format("CTRBOX_BODY={} timeout {} wrk -t1 -c{} -d{}s -s {} "
                        "http://127.0.0.1:{}/v2/models/ctrbox/infer",
                        body, seconds + 30, connections, seconds, Path("post.lua"), port));
    Load l;
    l.out = r.out + r.err;
    if (const size_t at = l.out.find(" requests in "); at != std::string::npos) {
      size_t b = l.out.rfind('\n', at);
      l.requests = std::atol(l.out.c_str() + (b == std::string::npos ? 0 : b + 1));
    }
    if (const size_t at = l.out.find("Non-2xx or 3xx responses:"); at != std::string::npos) {
      l.non_2xx = std::atol(l.out.c_str() + at + 26);
    }
    if (l.out.find("Socket errors:") != std::string::npos) l.socket_errors = 1;
    return l;
  }
};

// 4 connections of 256-record requests, then 8 of single records (batched together): every
// request answered 200, no socket error, and the server stops with 0 after it.
TEST_F(ServeLoadTest, EveryRequestOfASustainedLoadIsAnswered) {
  ASSERT_EQ(Run(Ctrbox("train --set data.gen.rows=30000 --model-dir " + Path("m"))).exit_code, 0);
  ASSERT_EQ(Run(Ctrbox("gen --rows 300 --seed 5 --out " + Path("test.tsv"))).exit_code, 0);
  Body(Path("test.tsv"), 256, Path("b256.json"));
  Body(Path("test.tsv"), 1, Path("b1.json"));
  const int port = Serve("--model-dir " + Path("m"));
  ASSERT_GT(port, 0) << Log();
  for (auto [body, connections] : {std::pair{"b256.json", 4}, {"b1.json", 8}}) {
    SCOPED_TRACE(body);
    const Load l = Wrk(port, Path(body), connections, 8);
    EXPECT_GT(l.requests, 0) << l.out;
    EXPECT_EQ(l.non_2xx, 0) << l.out;
    EXPECT_EQ(l.socket_errors, 0) << l.out;
  }
  const std::string metrics = Curl(port, "/metrics").second;
  EXPECT_NE(metrics.find("ctrbox_request_errors_total 0"), std::string::npos) << metrics;
  EXPECT_EQ(StopServer(), 0);
}

}  // namespace
}  // namespace ctrbox
