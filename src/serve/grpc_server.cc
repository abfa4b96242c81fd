#include "serve/grpc_server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <semaphore>

#include "grpc_predict_v2.grpc.pb.h"  // generated from proto/grpc_predict_v2.proto
#include "util/sys.h"

namespace ctrbox {
namespace {

namespace pb = ::inference;

grpc::Status ToGrpc(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, s.message());
    case StatusCode::kNotFound:
      return grpc::Status(grpc::StatusCode::NOT_FOUND, s.message());
    default:
      return grpc::Status(grpc::StatusCode::INTERNAL, s.ToString());
  }
}

// A tensor's typed contents (the protocol's InferTensorContents: the field of its datatype).
Status ContentsOf(const pb::InferTensorContents& c, RequestTensor* t) {
  const std::string& type = t->datatype;
  if (type == "BYTES") {
    RETURN_IF_ERROR(CheckTensorCount(*t, c.bytes_contents_size()));
    for (const std::string& s : c.bytes_contents()) t->bytes.emplace_back(s);
  } else if (type == "INT64") {
    RETURN_IF_ERROR(CheckTensorCount(*t, c.int64_contents_size()));
    for (int64_t k : c.int64_contents()) t->ints.push_back(static_cast<uint64_t>(k));
  } else if (type == "UINT64") {
    RETURN_IF_ERROR(CheckTensorCount(*t, c.uint64_contents_size()));
    t->ints.assign(c.uint64_contents().begin(), c.uint64_contents().end());
  } else if (type == "FP32") {
    RETURN_IF_ERROR(CheckTensorCount(*t, c.fp32_contents_size()));
    for (float x : c.fp32_contents()) RETURN_IF_ERROR(AddFloatValue(t, x));
  } else {  // BOOL
    RETURN_IF_ERROR(CheckTensorCount(*t, c.bool_contents_size()));
    for (bool b : c.bool_contents()) t->bools.push_back(b ? 1 : 0);
  }
  return Status::OK();
}

// The request's tensors, from their contents or from raw_input_contents (one per input, for
// all inputs or none, as the protocol says).
StatusOr<RequestTensors> TensorsOf(const pb::ModelInferRequest& req) {
  RequestTensors r;
  r.id = req.id();
  const bool raw = req.raw_input_contents_size() > 0;
  if (raw && req.raw_input_contents_size() != req.inputs_size()) {
    return InvalidArgumentError(
        fmt::format("raw_input_contents: {} entries for {} inputs (one each, or none)",
                    req.raw_input_contents_size(), req.inputs_size()));
  }
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& in = req.inputs(i);
    RequestTensor t;
    t.index = static_cast<size_t>(i);
    t.name = in.name();
    t.datatype = in.datatype();
    for (const RequestTensor& seen : r.inputs) {
      if (seen.name == t.name) {
        return InvalidArgumentError(fmt::format("{}.name: '{}' given twice (also inputs[{}])",
                                                t.Named(), t.name, seen.index));
      }
    }
    RETURN_IF_ERROR(CheckTensorDatatype(t));
    RETURN_IF_ERROR(SetTensorShape({in.shape().begin(), in.shape().end()}, &t));
    if (raw) {
      if (in.has_contents()) {
        return InvalidArgumentError(t.Named() + ": both contents and raw_input_contents");
      }
      t.binary = true;
      RETURN_IF_ERROR(DecodeBinaryTensor(req.raw_input_contents(i), &t));
    } else {
      RETURN_IF_ERROR(ContentsOf(in.contents(), &t));
    }
    r.inputs.push_back(std::move(t));
  }
  for (int i = 0; i < req.outputs_size(); ++i) {
    const std::string& name = req.outputs(i).name();
    for (const RequestedOutput& seen : r.outputs) {
      if (seen.name == name) {
        return InvalidArgumentError(fmt::format("outputs[{}].name: '{}' asked twice", i, name));
      }
    }
    r.outputs.push_back({name, true});
  }
  return r;
}

// The answer's outputs in raw_output_contents (little-endian FP32; BOOL one byte each), as
// the common clients read them.
void FillResponse(const std::string& model, const std::string& id, const InferAnswer& a,
                  pb::ModelInferResponse* res) {
  res->set_model_name(model);
  res->set_model_version(a.model_version);
  res->set_id(id);
  const size_t n = a.probability.size();
  for (const RequestedOutput& want : a.outputs) {
    auto* out = res->add_outputs();
    out->set_name(want.name);
    out->add_shape(static_cast<int64_t>(n));
    std::string* raw = res->add_raw_output_contents();
    if (want.name == "probability") {
      out->set_datatype("FP32");
      raw->resize(4 * n);
      std::memcpy(raw->data(), a.probability.data(), 4 * n);
    } else {
      out->set_datatype("BOOL");
      raw->assign(a.scored.begin(), a.scored.end());
    }
  }
}

void FillTensors(
    const std::vector<TensorSpec>& specs,
    google::protobuf::RepeatedPtrField<pb::ModelMetadataResponse::TensorMetadata>* out) {
  for (const TensorSpec& s : specs) {
    auto* t = out->Add();
    t->set_name(s.name);
    t->set_datatype(s.datatype);
    for (int64_t d : s.shape) t->add_shape(d);
  }
}

class Service final : public pb::GRPCInferenceService::Service {
 public:
  Service(InferenceBackend* backend, int workers)
      : backend_(backend), slots_(std::max(1, workers)) {}

  grpc::Status ServerLive(grpc::ServerContext*, const pb::ServerLiveRequest*,
                          pb::ServerLiveResponse* res) override {
    res->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext*, const pb::ServerReadyRequest*,
                           pb::ServerReadyResponse* res) override {
    res->set_ready(true);  // (the server listens once a version is loaded)
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext*, const pb::ModelReadyRequest* req,
                          pb::ModelReadyResponse* res) override {
    StatusOr<ModelDescription> d = backend_->Describe(req->name(), req->version());
    if (!d.ok()) return ToGrpc(d.status());
    res->set_ready(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerMetadata(grpc::ServerContext*, const pb::ServerMetadataRequest*,
                              pb::ServerMetadataResponse* res) override {
    res->set_name("ctrbox");
    res->set_version(backend_->ServerVersion());
    for (const std::string& e : backend_->Extensions()) res->add_extensions(e);
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext*, const pb::ModelMetadataRequest* req,
                             pb::ModelMetadataResponse* res) override {
    StatusOr<ModelDescription> d = backend_->Describe(req->name(), req->version());
    if (!d.ok()) return ToGrpc(d.status());
    res->set_name(d->name);
    res->set_platform(d->platform);
    for (const std::string& v : d->versions) res->add_versions(v);
    FillTensors(d->inputs, res->mutable_inputs());
    FillTensors(d->outputs, res->mutable_outputs());
    return grpc::Status::OK;
  }
  // The prediction waits for one of `workers` slots: gRPC's synchronous server runs each RPC
  // on a thread of its own (up to its quota, more than the CPUs), and predictions computed on
  // all of them at once time-share the CPUs: 256-record RPCs from 4 client threads ran at 0.6x
  // HTTP's predictions/s on 2 CPUs (docs/serve.md, "gRPC").
  grpc::Status ModelInfer(grpc::ServerContext*, const pb::ModelInferRequest* req,
                          pb::ModelInferResponse* res) override {
    InferAnswer a;
    Stopwatch wait;
    slots_.acquire();
    const double queued = wait.Seconds();
    Status s =
        backend_->Infer(req->model_name(), req->model_version(), TensorsOf(*req), queued, &a);
    slots_.release();
    if (!s.ok()) return ToGrpc(s);
    FillResponse(req->model_name(), req->id(), a, res);
    return grpc::Status::OK;
  }

 private:
  InferenceBackend* const backend_;
  std::counting_semaphore<> slots_;
};

}  // namespace

class GrpcServer::Impl {
 public:
  Impl(InferenceBackend* backend, GrpcServerOptions o)
      : service_(backend, o.workers), o_(std::move(o)) {}

  StatusOr<int> Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    const std::string at = fmt::format("{}:{}", o_.host, o_.port);
    builder.AddListeningPort(at, grpc::InsecureServerCredentials(), &port);
    // No SO_REUSEPORT (gRPC sets it by default): two servers never split one port's traffic.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(
        static_cast<int>(std::min<uint64_t>(o_.max_message_bytes, INT32_MAX)));
    builder.SetMaxSendMessageSize(INT32_MAX);
    grpc::ResourceQuota quota("ctrbox-serve-grpc");
    // gRPC's synchronous server answers RESOURCE_EXHAUSTED to an RPC that finds every thread
    // busy, where the HTTP core queues it: so at least 8 RPCs at once (and 2 threads that poll)
    // whatever --threads, or a client of 4 threads against 2 workers got errors (1 036 of them
    // in bench/serve_connections.py's gRPC run at --threads 2). Twice that: a thread that has
    // answered still counts until it is back polling, so a client keeping 8 RPCs in flight
    // could find all 8 + 2 taken (one refusal in a clean clone's CI run under ctest -j2).
    quota.SetMaxThreads(2 * std::max(8, o_.workers) + 2);
    builder.SetResourceQuota(quota);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      server_.reset();
      return IOError(fmt::format(
          "serve: cannot listen for gRPC on {} (in use? give another --grpc-port)", at));
    }
    return port;
  }

  void Stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
    server_.reset();
  }

 private:
  Service service_;
  const GrpcServerOptions o_;
  std::unique_ptr<grpc::Server> server_;
};

GrpcServer::GrpcServer(InferenceBackend* backend, GrpcServerOptions options)
    : impl_(std::make_unique<Impl>(backend, std::move(options))) {}
GrpcServer::~GrpcServer() { impl_->Stop(); }
StatusOr<int> GrpcServer::Start() { return impl_->Start(); }
void GrpcServer::Stop() { impl_->Stop(); }

}  // namespace ctrbox
