// ctrbox serve as a production server (issue 55, docs/serve.md): keys with the top bit set
// score as their records do, binary tensors and the protocol's extensions from a Python
// client, and the requests that crashed, bloated or starved the server answered as errors.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <thread>

#include "cli/serve_test_util.h"
#include "io/line_chunker.h"
#include "io/text_format.h"

namespace ctrbox {
namespace {

using testing::Result;

// A KServe v2 client of the binary tensor data extension (standard library only): keys and
// dense values as binary INT64 / FP32 tensors, probabilities asked back as binary FP32.
constexpr const char* kBinaryClient = R"PY(
import json, struct, sys, urllib.request
port, rows = int(sys.argv[1]), json.load(open(sys.argv[2]))
keys, dense = rows["keys"], rows["dense"]
n, slots, nd = len(keys), len(keys[0]), len(dense[0])
head = {"id": "b", "inputs": [
    {"name": "keys", "datatype": "INT64", "shape": [n, slots],
     "parameters": {"binary_data_size": 8 * n * slots}},
    {"name": "dense", "datatype": "FP32", "shape": [n, nd],
     "parameters": {"binary_data_size": 4 * n * nd}}],
    "outputs": [{"name": "probability", "parameters": {"binary_data": True}}]}
h = json.dumps(head).encode()
body = (h + struct.pack(f"<{n * slots}q", *[k for r in keys for k in r]) +
        struct.pack(f"<{n * nd}f", *[x for r in dense for x in r]))
req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/ctrbox/infer", data=body,
                             headers={"Inference-Header-Content-Length": str(len(h)),
                                      "Content-Type": "application/octet-stream"})
with urllib.request.urlopen(req, timeout=60) as r:
    hl = int(r.headers["Inference-Header-Content-Length"])
    data = r.read()
j = json.loads(data[:hl])
out = j["outputs"][0]
assert out["parameters"]["binary_data_size"] == 4 * n, out
print(json.dumps({"id": j["id"], "shape": out["shape"],
                  "bits": list(struct.unpack(f"<{n}I", data[hl:]))}))
)PY";

// A KServe v2 gRPC client (Debian's python3-grpcio, run by Debian's /usr/bin/python3; stubs
// generated from the server's .proto): every RPC, inference with raw_input_contents, with typed
// contents and with records, two errors, and 64 calls from 8 threads at once.
constexpr const char* kGrpcClient = R"PY(
import json, struct, sys
import grpc
sys.path.insert(0, sys.argv[1])
import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as pbg
port, rows, records = int(sys.argv[2]), json.load(open(sys.argv[3])), open(sys.argv[4]).read().splitlines()
stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
out = {"live": stub.ServerLive(pb.ServerLiveRequest()).live,
       "ready": stub.ServerReady(pb.ServerReadyRequest()).ready,
       "model_ready": stub.ModelReady(pb.ModelReadyRequest(name="ctrbox")).ready}
md = stub.ServerMetadata(pb.ServerMetadataRequest())
out["extensions"], out["version"] = list(md.extensions), md.version
mm = stub.ModelMetadata(pb.ModelMetadataRequest(name="ctrbox"))
out["inputs"] = [[t.name, t.datatype, list(t.shape)] for t in mm.inputs]
keys, dense = rows["keys"], rows["dense"]
n, S, D = len(keys), len(keys[0]), len(dense[0])
flat_keys, flat_dense = [k for r in keys for k in r], [x for r in dense for x in r]

def tensor(req, name, datatype, shape):
    t = req.inputs.add()
    t.name, t.datatype = name, datatype
    t.shape.extend(shape)
    return t

def bits(res):
    assert res.outputs[0].name == "probability" and res.outputs[0].datatype == "FP32"
    raw = res.raw_output_contents[0]
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))

req = pb.ModelInferRequest(model_name="ctrbox", id="g")
tensor(req, "keys", "INT64", [n, S])
tensor(req, "dense", "FP32", [n, D])
req.raw_input_contents.append(struct.pack(f"<{n * S}q", *flat_keys))
req.raw_input_contents.append(struct.pack(f"<{n * D}f", *flat_dense))
res = stub.ModelInfer(req)
out["raw"], out["id"], out["model_version"] = bits(res), res.id, res.model_version
req = pb.ModelInferRequest(model_name="ctrbox")
tensor(req, "keys", "INT64", [n, S]).contents.int64_contents.extend(flat_keys)
tensor(req, "dense", "FP32", [n, D]).contents.fp32_contents.extend(flat_dense)
out["typed"] = bits(stub.ModelInfer(req))
req = pb.ModelInferRequest(model_name="ctrbox")
tensor(req, "records", "BYTES", [len(records)]).contents.bytes_contents.extend(
    [r.encode() for r in records])
out["records"] = bits(stub.ModelInfer(req))

def error(req):
    try:
        stub.ModelInfer(req)
        return ["OK", ""]
    except grpc.RpcError as e:
        return [e.code().name, e.details()]

bad = pb.ModelInferRequest(model_name="ctrbox")
tensor(bad, "keys", "INT64", [1418980313362273202, 26]).contents.int64_contents.extend(range(20))
out["overflow"] = error(bad)
req.model_name = "other"
out["other"] = error(req)
# More RPCs at once than the server has workers (one per CPU): each is answered, none refused
# (gRPC's synchronous server refuses one that finds every thread busy).
from concurrent.futures import ThreadPoolExecutor
req.model_name = "ctrbox"
with ThreadPoolExecutor(8) as pool:
    calls = list(pool.map(lambda _: error(req)[0], range(64)))
out["concurrent"] = sorted(set(calls))
print(json.dumps(out))
)PY";

class ServeProtocolTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    ServeFixture::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(
        Run(Ctrbox("train --set data.gen.rows=5000 --set model.mlp=16 --model-dir " + Path("m")))
            .exit_code,
        0);
  }
  // `ctrbox predict`'s probabilities of a file's records as float32 bits (empty if it failed).
  std::vector<uint32_t> PredictedBits(const std::string& data) {
    Result predicted = Run(Ctrbox("predict --model-dir " + Path("m") + " --data " + data));
    EXPECT_EQ(predicted.exit_code, 0) << predicted.err;
    std::vector<uint32_t> out;
    for (std::istringstream in(predicted.out); in;) {
      float x;
      if (!(in >> x)) break;
      uint32_t b;
      std::memcpy(&b, &x, 4);
      out.push_back(b);
    }
    return out;
  }
  // The probabilities of a JSON response as float32 bits.
  static std::vector<uint32_t> Bits(const std::string& response) {
    std::vector<uint32_t> out;
    const nlohmann::json j = nlohmann::json::parse(response);
    for (float x : j["outputs"][0]["data"]) {
      uint32_t b;
      std::memcpy(&b, &x, 4);
      out.push_back(b);
    }
    return out;
  }
};

// 300 generated records scored four ways — `ctrbox predict`, records, their keys (INT64, a
// key with the top bit set sent as the negative number of its bit pattern) as JSON with null
// for an empty slot, and with key 0 and `present` false there — give the same float32s. About half
// of the keys have the top bit set; before they were taken as empty slots.
TEST_F(ServeProtocolTest, KeysWithTheTopBitSetScoreAsTheirRecords) {
  ASSERT_EQ(Run(Ctrbox("gen --rows 300 --seed 11 --out " + Path("r.tsv"))).exit_code, 0);
  const std::vector<uint32_t> want = PredictedBits(Path("r.tsv"));
  ASSERT_EQ(want.size(), 300u);
  // The records' keys and dense values as the server's reader makes them.
  TextChunk chunk;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("r.tsv"), &chunk.data).ok());
  TextFormatOptions text;
  text.labels_optional = true;
  ChunkParseResult parsed;
  ParseTextChunk(text, chunk, &parsed);
  ASSERT_TRUE(parsed.status.ok());
  const Batch& b = parsed.batch;
  ASSERT_EQ(b.rows(), 300u);
  nlohmann::json keys = nlohmann::json::array(), dense = nlohmann::json::array();
  size_t top_bit = 0;
  for (size_t r = 0; r < b.rows(); ++r) {
    nlohmann::json k = nlohmann::json::array(), d = nlohmann::json::array();
    for (uint32_t s = 0; s < 26; ++s) {
      const uint32_t at = b.offsets[r * 26 + s], end = b.offsets[r * 26 + s + 1];
      ASSERT_LE(end - at, 1u);  // (criteo: one key a slot at most)
      if (at == end) {
        k.push_back(nullptr);
        continue;
      }
      top_bit += b.keys[at] >> 63;
      k.push_back(static_cast<int64_t>(b.keys[at]));  // the protocol's INT64: the bit pattern
    }
    for (uint32_t j = 0; j < 13; ++j) d.push_back(b.dense[r * 13 + j]);
    keys.push_back(k);
    dense.push_back(d);
  }
  EXPECT_GT(top_bit, 1000u);
  const int port = Serve("--model-dir " + Path("m"));
  ASSERT_GT(port, 0) << Log();
  std::vector<std::string> lines;
  for (std::istringstream in(chunk.data); !in.eof();) {
    std::string line;
    if (std::getline(in, line) && !line.empty()) lines.push_back(line);
  }
  auto records =
      Curl(port, "/v2/models/ctrbox/infer",
           nlohmann::json{
               {"inputs",
                {{{"name", "records"}, {"datatype", "BYTES"}, {"shape", {300}}, {"data", lines}}}}}
               .dump());
  ASSERT_EQ(records.first, 200) << records.second;
  EXPECT_EQ(Bits(records.second), want);
  auto json_keys =
      Curl(port, "/v2/models/ctrbox/infer",
           nlohmann::json{
               {"inputs",
                {{{"name", "keys"}, {"datatype", "INT64"}, {"shape", {300, 26}}, {"data", keys}},
                 {{"name", "dense"}, {"datatype", "FP32"}, {"shape", {300, 13}}, {"data", dense}}}}}
               .dump());
  ASSERT_EQ(json_keys.first, 200) << json_keys.second;
  EXPECT_EQ(Bits(json_keys.second), want);
  // Empty slots given as key 0 with `present` false instead of null.
  nlohmann::json bkeys = keys;
  for (auto& row : bkeys) {
    for (auto& k : row) {
      if (k.is_null()) k = 0;
    }
  }
  nlohmann::json present = nlohmann::json::array();
  for (const auto& row : keys) {
    nlohmann::json p = nlohmann::json::array();
    for (const auto& k : row) p.push_back(!k.is_null());
    present.push_back(p);
  }
  auto with_present = Curl(
      port, "/v2/models/ctrbox/infer",
      nlohmann::json{
          {"inputs",
           {{{"name", "keys"}, {"datatype", "INT64"}, {"shape", {300, 26}}, {"data", bkeys}},
            {{"name", "present"}, {"datatype", "BOOL"}, {"shape", {300, 26}}, {"data", present}},
            {{"name", "dense"}, {"datatype", "FP32"}, {"shape", {300, 13}}, {"data", dense}}}}}
          .dump());
  ASSERT_EQ(with_present.first, 200) << with_present.second;
  EXPECT_EQ(Bits(with_present.second), want);
  EXPECT_EQ(StopServer(), 0);
}

// Rows without empty slots, as binary tensors from a Python HTTP client and over gRPC from
// python3-grpcio: the same bits as `ctrbox predict`; and the protocol's other endpoints.
TEST_F(ServeProtocolTest, BinaryTensorsAndTheProtocolsExtensions) {
  // Records with every categorical field filled: their keys have no empty slot.
  std::string line = "0\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13";
  for (int s = 0; s < 26; ++s) line += fmt::format("\t{:08x}", 0x9e3779b9u * (s + 7));
  TextChunk chunk;
  for (int r = 0; r < 40; ++r) {
    std::string l = line;
    l[0] = r % 2 ? '1' : '0';
    l.replace(2, 1, std::to_string(r));
    chunk.data += l + "\n";
  }
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("full.tsv"), chunk.data).ok());
  const std::vector<uint32_t> want = PredictedBits(Path("full.tsv"));
  ASSERT_EQ(want.size(), 40u);
  TextFormatOptions text;
  ChunkParseResult parsed;
  ParseTextChunk(text, chunk, &parsed);
  ASSERT_TRUE(parsed.status.ok());
  nlohmann::json keys = nlohmann::json::array(), dense = nlohmann::json::array();
  for (size_t r = 0; r < parsed.batch.rows(); ++r) {
    nlohmann::json k = nlohmann::json::array(), d = nlohmann::json::array();
    for (uint32_t s = 0; s < 26; ++s)
      k.push_back(static_cast<int64_t>(parsed.batch.keys[r * 26 + s]));
    for (uint32_t j = 0; j < 13; ++j) d.push_back(parsed.batch.dense[r * 13 + j]);
    keys.push_back(k);
    dense.push_back(d);
  }
  ASSERT_EQ(parsed.batch.keys.size(), 40u * 26);
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("rows.json"),
                              nlohmann::json{{"keys", keys}, {"dense", dense}}.dump())
                  .ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("bin.py"), kBinaryClient).ok());
  const int port = Serve("--model-dir " + Path("m") + " --grpc-port 0");
  ASSERT_GT(port, 0) << Log();
  Result bin = Run("python3 " + Path("bin.py") + fmt::format(" {} ", port) + Path("rows.json"));
  ASSERT_EQ(bin.exit_code, 0) << bin.err;
  EXPECT_EQ(bin.last_json["id"], "b");
  EXPECT_EQ(bin.last_json["shape"], nlohmann::json::array({40}));
  EXPECT_EQ(bin.last_json["bits"].get<std::vector<uint32_t>>(), want);

  // Over gRPC (the server's second port): the same bits, by every form of input.
  std::string listening;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("serve.out"), &listening).ok());
  const int grpc_port =
      nlohmann::json::parse(listening.substr(0, listening.find('\n')))["grpc_port"];
  ASSERT_GT(grpc_port, 0) << listening;
  ASSERT_EQ(Run(fmt::format("protoc --proto_path={0}/src/serve/proto --python_out={1} "
                            "--grpc_python_out={1} --plugin=protoc-gen-grpc_python=$(command -v "
                            "grpc_python_plugin) grpc_predict_v2.proto",
                            CTRBOX_SOURCE_DIR, Path("")))
                .exit_code,
            0);
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("grpc_client.py"), kGrpcClient).ok());
  Result g = Run(fmt::format("/usr/bin/python3 {} {} {} {} {}", Path("grpc_client.py"), Path(""),
                             grpc_port, Path("rows.json"), Path("full.tsv")));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const nlohmann::json& gj = g.last_json;
  EXPECT_EQ(gj["live"], true);
  EXPECT_EQ(gj["ready"], true);
  EXPECT_EQ(gj["model_ready"], true);
  EXPECT_EQ(gj["extensions"],
            nlohmann::json({"binary_tensor_data", "model_configuration", "statistics"}));
  EXPECT_EQ(gj["inputs"][1], nlohmann::json({"keys", "INT64", {-1, 26}}));
  EXPECT_EQ(gj["id"], "g");
  EXPECT_EQ(gj["raw"].get<std::vector<uint32_t>>(), want);
  EXPECT_EQ(gj["typed"].get<std::vector<uint32_t>>(), want);
  EXPECT_EQ(gj["records"].get<std::vector<uint32_t>>(), want);
  EXPECT_EQ(gj["overflow"][0], "INVALID_ARGUMENT");
  EXPECT_NE(gj["overflow"][1].get<std::string>().find("holds more elements than a request can"),
            std::string::npos)
      << gj["overflow"];
  EXPECT_EQ(gj["other"][0], "NOT_FOUND");
  EXPECT_EQ(gj["concurrent"], nlohmann::json({"OK"}));
  // A second server on the gRPC port is refused (gRPC's SO_REUSEPORT is off).
  Result second = Run(
      Ctrbox(fmt::format("serve --model-dir {} --port 0 --grpc-port {}", Path("m"), grpc_port)));
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("cannot listen for gRPC"), std::string::npos) << second.err;

  auto server = nlohmann::json::parse(Curl(port, "/v2").second);
  EXPECT_TRUE(server.contains("version")) << server;
  EXPECT_EQ(server["extensions"],
            nlohmann::json({"binary_tensor_data", "model_configuration", "statistics"}));
  auto config = Curl(port, "/v2/models/ctrbox/config");
  ASSERT_EQ(config.first, 200);
  auto c = nlohmann::json::parse(config.second);
  EXPECT_EQ(c["max_batch_size"], 0);
  EXPECT_EQ(c["input"][1]["name"], "keys");
  EXPECT_EQ(c["input"][1]["data_type"], "TYPE_INT64");
  EXPECT_EQ(c["input"][1]["dims"], nlohmann::json::array({-1, 26}));
  EXPECT_EQ(c["output"][0]["data_type"], "TYPE_FP32");
  auto stats = Curl(port, "/v2/models/ctrbox/stats");
  ASSERT_EQ(stats.first, 200);
  auto st = nlohmann::json::parse(stats.second)["model_stats"];
  ASSERT_EQ(st.size(), 1u) << stats.second;
  // (HTTP binary; gRPC raw, typed, records, and the 64 concurrent calls of the records)
  EXPECT_EQ(st[0]["inference_count"], 68 * 40);
  EXPECT_EQ(st[0]["execution_count"], 68);
  EXPECT_EQ(st[0]["inference_stats"]["success"]["count"], 68);
  EXPECT_EQ(st[0]["inference_stats"]["fail"]["count"], 2);
  EXPECT_GT(st[0]["inference_stats"]["compute_infer"]["ns"].get<uint64_t>(), 0u);
  EXPECT_EQ(st[0]["batch_stats"][0]["batch_size"], 40);
  EXPECT_EQ(Curl(port, "/v2/models/ctrbox/versions/999/stats").first, 404);
  EXPECT_EQ(Curl(port, "/v2/models/ctrbox/infer").first, 405);  // (a GET)
  EXPECT_EQ(StopServer(), 0);
}

std::string GzipOf(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = in.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// The server's resident memory (kB) from /proc.
long RssKb(pid_t pid) {
  std::string status;
  if (!ReadFileToString(Env::Posix(), fmt::format("/proc/{}/status", pid), &status).ok()) return -1;
  const size_t at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::atol(status.c_str() + at + 6);
}

// The requests that crashed or bloated the server are errors it answers and survives; a
// second server on its port, and a model name that is a path, are refused; SIGTERM does not
// wait for an idle keep-alive client.
TEST_F(ServeProtocolTest, HostileRequestsAreAnsweredAndTheServerStaysUp) {
  const int port = Serve("--model-dir " + Path("m"));
  ASSERT_GT(port, 0) << Log();
  const pid_t pid = servers_.back();
  // The overflowing shape (it was SIGSEGV).
  auto overflow = Curl(port, "/v2/models/ctrbox/infer",
                       R"({"inputs":[{"name":"keys","datatype":"INT64","shape":)"
                       R"([1418980313362273202,26],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,)"
                       R"(15,16,17,18,19,20]}]})");
  EXPECT_EQ(overflow.first, 400);
  EXPECT_NE(overflow.second.find("holds more elements than a request can"), std::string::npos)
      << overflow.second;
  // A dense value beyond float32 (it was 200 with `nan` in the body), a duplicate input.
  std::string ones = "[";
  for (int i = 0; i < 26; ++i) ones += i ? ",1" : "1";
  ones += "]";
  auto huge = Curl(port, "/v2/models/ctrbox/infer",
                   R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[1,26],"data":)" + ones +
                       R"(},{"name":"dense","datatype":"FP32","shape":[1,13],"data":)"
                       R"([1e39,0,0,0,0,0,0,0,0,0,0,0,0]}]})");
  EXPECT_EQ(huge.first, 400);
  EXPECT_NE(huge.second.find("is not a finite float32"), std::string::npos) << huge.second;
  auto twice =
      Curl(port, "/v2/models/ctrbox/infer",
           R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[1,26],"data":)" + ones +
               R"(},{"name":"keys","datatype":"INT64","shape":[1,26],"data":)" + ones + "}]}");
  EXPECT_EQ(twice.first, 400);
  EXPECT_NE(twice.second.find("given twice"), std::string::npos) << twice.second;
  auto short_shape = Curl(port, "/v2/models/ctrbox/infer",
                          R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[1,25],"data":)" +
                              ones.substr(0, ones.size() - 3) + "]}]}");
  EXPECT_EQ(short_shape.first, 400);
  EXPECT_NE(short_shape.second.find("(keys).shape: [1, 25], expected [1, 26]"), std::string::npos)
      << short_shape.second;
  // A gzip body of a few hundred KB that inflates to 2 GiB: 413 at --max-inflated-bytes
  // (256 MiB by default), and the server does not hold the memory.
  const long rss_before = RssKb(pid);
  {
    // 32 gzip members of 64 MiB of zeros each: 2 GiB inflated.
    const std::string member = GzipOf(std::string(64 << 20, '\0'));
    std::string bomb;
    for (int i = 0; i < 32; ++i) bomb += member;
    ASSERT_LT(bomb.size(), 4u << 20);
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("bomb.gz"), bomb).ok());
    Result r =
        Run(fmt::format("curl -s -o {} -w '%{{http_code}}' -H 'Content-Encoding: gzip' "
                        "--data-binary @{} http://127.0.0.1:{}/v2/models/ctrbox/infer",
                        Path("bomb.out"), Path("bomb.gz"), port));
    EXPECT_EQ(std::atoi(r.out.c_str()), 413) << r.out << r.err;
    std::string out;
    ReadFileToString(Env::Posix(), Path("bomb.out"), &out).IgnoreError();
    EXPECT_NE(out.find("--max-inflated-bytes (256 MiB)"), std::string::npos) << out;
  }
  // A small gzip request is read as its JSON.
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("ok.gz"),
                              GzipOf(R"({"inputs":[{"name":"keys","datatype":"INT64","shape":)"
                                     R"([1,26],"data":)" +
                                     ones +
                                     R"(},{"name":"dense","datatype":"FP32","shape":)"
                                     R"([1,13],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0]}]})"))
                  .ok());
  Result gz =
      Run(fmt::format("curl -s -o /dev/null -w '%{{http_code}}' -H 'Content-Encoding: "
                      "gzip' --data-binary @{} http://127.0.0.1:{}/v2/models/ctrbox/infer",
                      Path("ok.gz"), port));
  EXPECT_EQ(std::atoi(gz.out.c_str()), 200);
  const long rss_after = RssKb(pid);
  RecordProperty("rss_kb_before_bomb", rss_before);
  RecordProperty("rss_kb_after_bomb", rss_after);
  EXPECT_LT(rss_after, rss_before + 400 * 1024) << "the bomb's memory was kept";
  EXPECT_EQ(Curl(port, "/v2/health/live").first, 200);  // still up

  // A second server on the same port is refused, naming it.
  Result second = Run(Ctrbox(fmt::format("serve --model-dir {} --port {}", Path("m"), port)));
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find(fmt::format("cannot listen on 127.0.0.1:{}", port)), std::string::npos)
      << second.err;
  EXPECT_EQ(Curl(port, "/v2/health/live").first, 200);
  for (const char* name : {"../x", "a/b", "..", "stats", ""}) {
    Result bad = Run(
        Ctrbox(fmt::format("serve --model-dir {} --port 0 --model-name '{}'", Path("m"), name)));
    EXPECT_NE(bad.exit_code, 0) << name;
    EXPECT_NE(bad.err.find("--model-name"), std::string::npos) << name << ": " << bad.err;
  }
  // SIGTERM with an idle keep-alive client: the server exits at once (it waited 30 s).
  const std::string idle = Path("idle.py");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), idle,
                              fmt::format(R"PY(
import http.client, time
c = http.client.HTTPConnection("127.0.0.1", {}, timeout=60)
c.request("GET", "/v2/health/live")
c.getresponse().read()
open("{}", "w").write("up")
time.sleep(60)
)PY",
                                          port, Path("idle.up")))
                  .ok());
  pid_t client = fork();
  if (client == 0) {
    execl("/usr/bin/python3", "python3", idle.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500 && !Env::Posix()->FileExists(Path("idle.up")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(StopServer(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
}

}  // namespace
}  // namespace ctrbox
