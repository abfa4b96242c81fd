// KServe v2 over gRPC (`ctrbox serve --grpc-port`, docs/serve.md "gRPC"): the protocol's
// GRPCInferenceService (proto/grpc_predict_v2.proto) on Debian's gRPC, answering from the same
// backend as HTTP, so its predictions are HTTP's bit for bit.
#ifndef CTRBOX_SERVE_GRPC_SERVER_H_
#define CTRBOX_SERVE_GRPC_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/tensors.h"
#include "util/status.h"

namespace ctrbox {

struct TensorSpec {
  std::string name, datatype;
  std::vector<int64_t> shape;  // -1: any size
};

struct ModelDescription {
  std::string name, platform;
  std::vector<std::string> versions;
  std::vector<TensorSpec> inputs, outputs;
};

// One request answered: per record, its probability and whether it was scored (false: a
// feature graph's filter dropped it).
struct InferAnswer {
  std::string model_version;
  std::vector<RequestedOutput> outputs;  // those to send, in order
  std::vector<float> probability;
  std::vector<uint8_t> scored;
};

// What a protocol front end asks of the server. Thread safety: thread-safe.
class InferenceBackend {
 public:
  virtual ~InferenceBackend() = default;
  virtual std::string ServerVersion() const = 0;
  virtual std::vector<std::string> Extensions() const = 0;
  // The model `name` (at `version`, "" for the one served); NotFound saying why when it is not
  // served.
  virtual StatusOr<ModelDescription> Describe(std::string_view name, std::string_view version) = 0;
  // Answers a request's tensors, as the front end read them (an error there is the answer,
  // counted): InvalidArgument naming a bad field, NotFound for a model or version not served.
  // queue_seconds: how long the request waited for a prediction slot (the statistics' queue).
  virtual Status Infer(std::string_view name, std::string_view version,
                       StatusOr<RequestTensors> tensors, double queue_seconds,
                       InferAnswer* out) = 0;
};

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  // The most predictions run at once (as HTTP's workers: one per CPU by default); more RPCs
  // than that are accepted (at least 8: grpc_server.cc says why) and wait for a slot.
  int workers = 8;
  uint64_t max_message_bytes = uint64_t{64} << 20;  // a request's most bytes (larger: refused)
};

// Thread safety: Start, then Stop, from one thread.
class GrpcServer {
 public:
  GrpcServer(InferenceBackend* backend, GrpcServerOptions options);
  ~GrpcServer();
  // Listens on host:port (exclusively: a port in use is an error). Returns the port.
  StatusOr<int> Start();
  // Stops accepting RPCs, lets the ones in flight finish (up to 5 s) and returns.
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrbox

#endif  // CTRBOX_SERVE_GRPC_SERVER_H_
