// A closed-loop gRPC load client for `ctrbox serve --grpc-port` (bench/serve_connections.py):
// T threads, each with its own channel (its own HTTP/2 connection, as wrk's connections are
// their own), send the same ModelInfer request back to back for S seconds: the first R lines of
// a record file as one BYTES tensor in raw_input_contents (each element a 4-byte little-endian
// length, then its bytes), as the protocol's clients send records. C++ so that the client costs
// the two cores it shares with the server far less than python3-grpcio's.
//
//   grpc_load --port P --records FILE [--rows 256] [--seconds 8] [--threads 4]
//
// Prints one JSON line: requests and predictions per second, p50/p99/max latency in ms, errors
// (with the first error's message).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "grpc_predict_v2.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int port = 0;
  std::string records;
  int rows = 256, threads = 4;
  double seconds = 8;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "grpc_load: %s\nusage: grpc_load --port P --records FILE [--rows 256] "
               "[--seconds 8] [--threads 4]\n",
               why);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage(("no value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "--port") {
      o.port = std::atoi(v);
    } else if (a == "--records") {
      o.records = v;
    } else if (a == "--rows") {
      o.rows = std::atoi(v);
    } else if (a == "--seconds") {
      o.seconds = std::atof(v);
    } else if (a == "--threads") {
      o.threads = std::atoi(v);
    } else {
      Usage(("unknown flag " + a).c_str());
    }
  }
  if (o.port <= 0 || o.records.empty() || o.rows <= 0 || o.threads <= 0 || o.seconds <= 0) {
    Usage("--port and --records are required; --rows, --threads, --seconds positive");
  }
  return o;
}

// The request: the file's first `rows` lines as one BYTES tensor, raw.
inference::ModelInferRequest MakeRequest(const Options& o) {
  std::ifstream in(o.records);
  if (!in) Usage(("cannot read " + o.records).c_str());
  std::string raw, line;
  int n = 0;
  while (n < o.rows && std::getline(in, line)) {
    const uint32_t len = static_cast<uint32_t>(line.size());
    char le[4] = {static_cast<char>(len), static_cast<char>(len >> 8), static_cast<char>(len >> 16),
                  static_cast<char>(len >> 24)};
    raw.append(le, 4);
    raw += line;
    ++n;
  }
  if (n == 0) Usage(("no lines in " + o.records).c_str());
  inference::ModelInferRequest req;
  req.set_model_name("ctrbox");
  auto* t = req.add_inputs();
  t->set_name("records");
  t->set_datatype("BYTES");
  t->add_shape(n);
  req.add_raw_input_contents(std::move(raw));
  return req;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  const inference::ModelInferRequest req = MakeRequest(o);
  const int rows = static_cast<int>(req.inputs(0).shape(0));
  const std::string target = "127.0.0.1:" + std::to_string(o.port);
  std::mutex mu;
  std::vector<double> lat;  // ms
  uint64_t errors = 0;
  std::string first_error;
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&] {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
      args.SetMaxReceiveMessageSize(-1);
      auto stub = inference::GRPCInferenceService::NewStub(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
      std::vector<double> mine;
      uint64_t bad = 0;
      std::string why;
      inference::ModelInferResponse resp;
      {
        grpc::ClientContext warm;
        (void)stub->ModelInfer(&warm, req, &resp);
      }
      while (Clock::now() < end) {
        grpc::ClientContext ctx;
        const auto t0 = Clock::now();
        const grpc::Status s = stub->ModelInfer(&ctx, req, &resp);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (s.ok() && resp.outputs_size() > 0) {
          mine.push_back(ms);
        } else {
          ++bad;
          if (why.empty()) why = s.ok() ? "no outputs" : s.error_message();
        }
      }
      std::lock_guard<std::mutex> l(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
      errors += bad;
      if (first_error.empty()) first_error = why;
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double q) {
    return lat.empty() ? 0.0 : lat[static_cast<size_t>(q * static_cast<double>(lat.size() - 1))];
  };
  // (no blas_core: the client does no BLAS; the server's is the one to quote)
  const nlohmann::json line = {{"bench", "grpc_load"},
                               {"threads", o.threads},
                               {"records_per_request", rows},
                               {"requests_per_s", static_cast<double>(lat.size()) / wall},
                               {"predictions_per_s", static_cast<double>(lat.size()) * rows / wall},
                               {"p50_ms", pct(0.5)},
                               {"p99_ms", pct(0.99)},
                               {"max_ms", lat.empty() ? 0.0 : lat.back()},
                               {"errors", errors},
                               {"first_error", first_error}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}
