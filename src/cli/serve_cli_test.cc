// ctrbox serve end to end (issue 43, docs/serve.md): the server as a process, real HTTP
// clients (Python's urllib, curl), versions published by a stream job while it serves.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "ckpt/serving_files.h"
#include "cli/serve_test_util.h"

namespace ctrbox {
namespace {

using testing::Result;

// Python clients, written to the test directory (standard library only).
constexpr const char* kClient = R"PY(
import json, struct, sys, threading, time, urllib.request, urllib.error

def post(port, body, path="/v2/models/ctrbox/infer"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def records_body(lines, rid=None):
    b = {"inputs": [{"name": "records", "shape": [len(lines)], "datatype": "BYTES", "data": lines}]}
    if rid is not None:
        b["id"] = rid
    return json.dumps(b).encode()

def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]

cmd, port = sys.argv[1], int(sys.argv[2])
if cmd == "compare":  # the server's probabilities against predict's: requests of 1 to 300
    # records from 4 threads at once (the server batches them together)
    lines = open(sys.argv[3]).read().splitlines()
    want = [bits(x) for x in open(sys.argv[4]).read().split()]
    cuts, i, k = [], 0, 0
    while i < len(lines):
        n = [1, 3, 17, 64, 200, 256, 300, 5, 2, 40][k % 10]
        cuts.append((i, min(len(lines), i + n)))
        i, k = i + n, k + 1
    got, lock, errors = [None] * len(lines), threading.Lock(), []
    def worker(mine):
        for a, b in mine:
            code, r = post(port, records_body(lines[a:b], str(a)))
            if code != 200 or r["id"] != str(a) or r["outputs"][0]["shape"] != [b - a]:
                with lock:
                    errors.append(r)
                continue
            with lock:
                got[a:b] = [bits(x) for x in r["outputs"][0]["data"]]
    ts = [threading.Thread(target=worker, args=(cuts[t::4],)) for t in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors[:3]
    bad = sum(1 for a, b in zip(got, want) if a != b)
    print(json.dumps({"n": len(got), "want": len(want), "mismatches": bad, "requests": len(cuts)}))
elif cmd == "hammer":  # concurrent requests until the file `stop` exists: version -> answers
    lines = open(sys.argv[3]).read().splitlines()[:64]
    stop, out = sys.argv[4], sys.argv[5]
    seen, failed, lat = {}, [0], []
    lock = threading.Lock()
    def worker():
        import os
        while not os.path.exists(stop):
            t = time.time()
            code, r = post(port, records_body(lines))
            with lock:
                lat.append(time.time() - t)
                if code != 200:
                    failed[0] += 1
                    continue
                v = r["model_version"]
                seen.setdefault(v, set()).add(tuple(bits(x) for x in r["outputs"][0]["data"]))
    ts = [threading.Thread(target=worker) for _ in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    lat.sort()
    json.dump({"failed": failed[0], "requests": len(lat),
               "p99": lat[int(0.99 * (len(lat) - 1))] if lat else 0,
               "versions": {v: [list(a) for a in s] for v, s in seen.items()}}, open(out, "w"))
elif cmd == "one":  # one request's probabilities as float32 bits, and its version
    lines = open(sys.argv[3]).read().splitlines()[:64]
    code, r = post(port, records_body(lines))
    print(json.dumps({"code": code, "version": r.get("model_version"),
                      "bits": [bits(x) for x in r["outputs"][0]["data"]] if code == 200 else r}))
)PY";

class ServeCliTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    ServeFixture::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("client.py"), kClient).ok());
  }
};

// For 10 000 test records the server's probabilities equal `ctrbox predict`'s on the same
// model, bit for bit, in requests of 1 to 300 records from 4 clients at once that the server
// batches together: a model directory, and a stream's newest version (float32 rows).
TEST_F(ServeCliTest, ServedProbabilitiesEqualPredictsBitForBit) {
  ASSERT_EQ(Run(Ctrbox("train --set data.gen.rows=30000 --set model.mlp=256,128 --model-dir " +
                       Path("m")))
                .exit_code,
            0);
  ASSERT_EQ(Run(Ctrbox("gen --rows 10000 --seed 5 --out " + Path("test.tsv"))).exit_code, 0);
  // Predictions are row-wise: predict's chunks and the requests need not line up.
  Result predicted = Run(Ctrbox("predict --set data.chunk_bytes=64KB --model-dir " + Path("m") +
                                " --data " + Path("test.tsv") + " >" + Path("predict.txt")));
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  // Batching on, one prediction at a time: the requests that come meanwhile are batched.
  // (--batch-lanes by its old name: still taken, with a warning.)
  const int port = Serve("--model-dir " + Path("m") +
                         " --batch-max-micros 5000 --batch-slots 1 "
                         "--batch-max-rows 256");
  ASSERT_GT(port, 0) << Log();
  EXPECT_NE(Log().find("--batch-slots is now --batch-lanes"), std::string::npos) << Log();
  Result cmp = Client(fmt::format("compare {} {} {}", port, Path("test.tsv"), Path("predict.txt")));
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  EXPECT_EQ(cmp.last_json["n"], 10000);
  EXPECT_EQ(cmp.last_json["want"], 10000);
  EXPECT_EQ(cmp.last_json["mismatches"], 0);
  // Requests were batched together: batches of more than one request.
  const std::string batched = Curl(port, "/metrics").second;
  auto count = [&](const std::string& series) {
    const size_t at = batched.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::atof(batched.c_str() + at + series.size() + 2);
  };
  EXPECT_GT(count("ctrbox_batch_requests_count"), 0) << batched;
  EXPECT_LT(count("ctrbox_batch_requests_bucket{le=\"1\"}"), count("ctrbox_batch_requests_count"))
      << batched;
  EXPECT_EQ(StopServer(), 0);

  // The rows in a mapped file of --rows-dir under a 64 KB budget (the model's rows take
  // megabytes): the same probabilities, and the resident rows given back after each poll.
  ASSERT_EQ(Run("mkdir " + Path("ssd")).exit_code, 0);
  const int mport = Serve("--model-dir " + Path("m") + " --rows-dir " + Path("ssd") +
                          " --memory-budget 64KB --poll-seconds 0.05");
  ASSERT_GT(mport, 0) << Log();
  cmp = Client(fmt::format("compare {} {} {}", mport, Path("test.tsv"), Path("predict.txt")));
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  EXPECT_EQ(cmp.last_json["mismatches"], 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string metrics = Curl(mport, "/metrics").second;
  auto gauge = [&](const std::string& name) {
    const size_t at = metrics.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::atof(metrics.c_str() + at + name.size() + 2);
  };
  EXPECT_GT(gauge("ctrbox_model_row_bytes"), 1e6) << metrics;
  struct statfs fs;  // (on tmpfs the file is memory: its pages cannot be given back)
  if (::statfs(Path("ssd").c_str(), &fs) != 0 || fs.f_type != 0x01021994) {
    EXPECT_LE(gauge("ctrbox_model_resident_row_bytes"), 65536.0) << metrics;
  }
  EXPECT_GE(gauge("ctrbox_model_resident_row_bytes"), 0.0) << metrics;
  EXPECT_EQ(StopServer(), 0);

  // A stream's versions: the newest (a delta on its base) serves its model directory's.
  ASSERT_EQ(Run(Ctrbox("gen --partitions 3 --rows 4000 --out " + Path("root"))).exit_code, 0);
  Result stream = Run(Ctrbox("train --set stream.root=" + Path("root") +
                             " --set stream.until=20261101/02 --set "
                             "stream.poll_seconds=0.05 --set ckpt.dir=" +
                             Path("ckpt") + " --set serving.dir=" + Path("serving") +
                             " --set table.ttl_partitions=1 --set model.mlp=32 --set "
                             "train.batch_size=256 --model-dir " +
                             Path("sm")));
  ASSERT_EQ(stream.exit_code, 0) << stream.err;
  ASSERT_EQ(Run(Ctrbox("predict --model-dir " + Path("sm") + " --data " + Path("test.tsv") + " >" +
                       Path("predict2.txt")))
                .exit_code,
            0);
  const int sport = Serve("--serving-dir " + Path("serving"));
  ASSERT_GT(sport, 0) << Log();
  cmp = Client(fmt::format("compare {} {} {}", sport, Path("test.tsv"), Path("predict2.txt")));
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err << Log();
  EXPECT_EQ(cmp.last_json["mismatches"], 0);
  EXPECT_NE(Log().find("serving v-000003 (delta applied"), std::string::npos) << Log();
  EXPECT_EQ(StopServer(), 0);
}

// Every endpoint's status codes and shapes, from curl; bad requests get 400 naming the field.
TEST_F(ServeCliTest, TheProtocolsEndpointsAndItsErrors) {
  ASSERT_EQ(
      Run(Ctrbox("train --set data.gen.rows=5000 --set model.mlp=16 --model-dir " + Path("m")))
          .exit_code,
      0);
  const int port = Serve("--model-dir " + Path("m"));
  ASSERT_GT(port, 0) << Log();
  EXPECT_EQ(Curl(port, "/v2/health/live").first, 200);
  EXPECT_EQ(Curl(port, "/v2/health/ready").first, 200);
  EXPECT_EQ(Curl(port, "/v2/models/ctrbox/ready").first, 200);
  auto meta = Curl(port, "/v2/models/ctrbox");
  ASSERT_EQ(meta.first, 200);
  auto m = nlohmann::json::parse(meta.second);
  EXPECT_EQ(m["name"], "ctrbox");
  EXPECT_EQ(m["inputs"][1]["shape"], nlohmann::json::array({-1, 26}));
  EXPECT_EQ(m["inputs"][2]["shape"], nlohmann::json::array({-1, 13}));
  EXPECT_EQ(m["outputs"][0]["name"], "probability");
  EXPECT_EQ(Curl(port, "/v2/models/other").first, 404);
  EXPECT_EQ(Curl(port, "/v2/nothing").first, 404);
  const std::string version = m["versions"][0];
  EXPECT_EQ(Curl(port, "/v2/models/ctrbox/versions/" + version + "/ready").first, 200);
  EXPECT_EQ(Curl(port, "/v2/models/ctrbox/versions/999/ready").first, 404);

  // Keys and dense tensors (nested as their shape), and records.
  std::string line = std::string("1\t") + "5\t\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13";
  for (int s = 0; s < 26; ++s) line += fmt::format("\t{:08x}", 0x1234 * (s + 1));
  const std::string records =
      nlohmann::json{
          {"inputs",
           {{{"name", "records"}, {"datatype", "BYTES"}, {"shape", {2}}, {"data", {line, line}}}}}}
          .dump();
  auto ok = Curl(port, "/v2/models/ctrbox/infer", records);
  ASSERT_EQ(ok.first, 200) << ok.second;
  auto r = nlohmann::json::parse(ok.second);
  EXPECT_EQ(r["model_version"], version);
  ASSERT_EQ(r["outputs"][0]["data"].size(), 2u);
  EXPECT_EQ(r["outputs"][0]["data"][0], r["outputs"][0]["data"][1]);
  nlohmann::json keys = nlohmann::json::array(), dense = nlohmann::json::array();
  for (int row = 0; row < 3; ++row) {
    nlohmann::json k = nlohmann::json::array(), d = nlohmann::json::array();
    for (int s = 0; s < 26; ++s) {  // (null: an empty slot)
      k.push_back(s == 3 ? nlohmann::json(nullptr) : nlohmann::json(1000 * row + s));
    }
    for (int j = 0; j < 13; ++j) d.push_back(0.5 * j);
    keys.push_back(k);
    dense.push_back(d);
  }
  const std::string tensors =
      nlohmann::json{
          {"id", "t"},
          {"inputs",
           {{{"name", "keys"}, {"datatype", "INT64"}, {"shape", {3, 26}}, {"data", keys}},
            {{"name", "dense"}, {"datatype", "FP32"}, {"shape", {3, 13}}, {"data", dense}}}}}
          .dump();
  auto t = Curl(port, "/v2/models/ctrbox/infer", tensors);
  ASSERT_EQ(t.first, 200) << t.second;
  EXPECT_EQ(nlohmann::json::parse(t.second)["id"], "t");
  EXPECT_EQ(nlohmann::json::parse(t.second)["outputs"][0]["shape"], nlohmann::json::array({3}));

  struct Case {
    std::string body, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"{\"inputs\": [", "not JSON"},
           {"[1, 2]", "not a JSON object"},
           {"{}", "inputs: missing"},
           {R"({"inputs":[{"name":"records","datatype":"BYTES","shape":[3],"data":["a","b"]}]})",
            "inputs[0] (records).data: 2 elements, the shape [3] holds 3"},
           {R"({"inputs":[{"name":"records","datatype":"BYTES","shape":[1],"data":["1\t2"]}]})",
            "records[0]: expected 40 tab-separated fields"},
           {R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[1,25],"data":[[1]]}]})",
            "inputs[0] (keys).data: 1 elements, the shape [1, 25] holds 25"},
           {R"({"inputs":[{"name":"keys","datatype":"FP32","shape":[1,2],"data":[1,2]}]})",
            "datatype: FP32, expected INT64 or UINT64"},
           {R"({"inputs":[{"name":"pixels","datatype":"FP32","shape":[1],"data":[1]}]})",
            "'pixels' is no input"},
           {R"({"inputs":[{"name":"records","datatype":"BYTES","shape":[1],"data":[7]}]})",
            "element 0 is not a string"},
       }) {
    auto bad = Curl(port, "/v2/models/ctrbox/infer", c.body);
    EXPECT_EQ(bad.first, 400) << c.body;
    EXPECT_NE(bad.second.find(c.expect), std::string::npos) << c.body << ": " << bad.second;
  }
  EXPECT_EQ(Curl(port, "/v2/models/other/infer", records).first, 404);
  // Bad options are named before anything is served.
  EXPECT_EQ(Serve("--model-dir " + Path("m") + " --memory-budget 1MB", "bad1"), 0);
  EXPECT_NE(Log("bad1").find("--memory-budget bounds the rows mapped from --rows-dir"),
            std::string::npos)
      << Log("bad1");
  EXPECT_EQ(Serve("--model-dir " + Path("m") + " --rows-dir " + Path("nope"), "bad2"), 0);
  EXPECT_NE(Log("bad2").find("no such directory"), std::string::npos) << Log("bad2");
  EXPECT_EQ(Serve("--model-dir " + Path("nomodel"), "bad3"), 0);
  EXPECT_NE(Log("bad3").find("nomodel"), std::string::npos) << Log("bad3");
  // The metrics count them, in Prometheus' text format.
  auto metrics = Curl(port, "/metrics");
  ASSERT_EQ(metrics.first, 200);
  EXPECT_NE(metrics.second.find("ctrbox_requests_total{endpoint=\"infer\",code=\"400\"} 9"),
            std::string::npos)
      << metrics.second;
  EXPECT_NE(metrics.second.find("ctrbox_infer_seconds_count 2"), std::string::npos);
  EXPECT_NE(metrics.second.find("ctrbox_model_keys "), std::string::npos);
  EXPECT_EQ(StopServer(), 0);
}

// While a stream job publishes deltas and a base, the server follows without a failed request,
// each response is one version's (every response of a version is the same, and equals what a
// server of just that version answers), and a damaged version is refused while the last good
// one keeps serving.
TEST_F(ServeCliTest, VersionsSwapUnderLoadWithoutAMixedOrFailedAnswer) {
  ASSERT_EQ(Run(Ctrbox("gen --partitions 6 --rows 3000 --out " + Path("root"))).exit_code, 0);
  ASSERT_EQ(Run(Ctrbox("gen --rows 64 --seed 9 --out " + Path("req.tsv"))).exit_code, 0);
  auto stream = [&](const std::string& until, const std::string& serving) {
    return Ctrbox("train --set stream.root=" + Path("root") + " --set stream.until=" + until +
                  " --set stream.poll_seconds=0.05 --set ckpt.dir=" + Path("ckpt_" + serving) +
                  " --set serving.dir=" + Path(serving) +
                  " --set serving.base_every=3 --set serving.keep_bases=5 --set model.mlp=32 "
                  "--set train.batch_size=256");
  };
  ASSERT_EQ(Run(stream("20261101/00", "serving")).exit_code, 0);
  const int port = Serve("--serving-dir " + Path("serving") + " --poll-seconds 0.05");
  ASSERT_GT(port, 0) << Log();
  const std::string stop = Path("stop");
  pid_t client = fork();
  if (client == 0) {
    const std::string cmd = "exec python3 " + Path("client.py") + fmt::format(" hammer {} ", port) +
                            Path("req.tsv") + " " + stop + " " + Path("hammer.json");
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Partitions 01..05 trained while the requests run: deltas, and a base at version 4.
  Result more = Run(stream("20261101/05", "serving"));
  ASSERT_EQ(more.exit_code, 0) << more.err;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), stop, "").ok());
  int status = 0;
  waitpid(client, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string text;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("hammer.json"), &text).ok());
  const auto h = nlohmann::json::parse(text);
  EXPECT_EQ(h["failed"], 0);
  EXPECT_GT(h["requests"].get<int>(), 20);
  RecordProperty("requests", h["requests"].get<int>());
  RecordProperty("p99_seconds", std::to_string(h["p99"].get<double>()));
  ASSERT_TRUE(h["versions"].contains("6")) << text;  // it followed to the newest
  EXPECT_GE(h["versions"].size(), 2u);
  // Each version answered one set of probabilities: that of a server of that version alone
  // (the serving directory copied with its donefile cut there).
  auto listed = ReadServingVersions(Env::Posix(), Path("serving"));
  ASSERT_TRUE(listed.ok());
  for (const auto& [v, answers] : h["versions"].items()) {
    ASSERT_EQ(answers.size(), 1u) << "version " << v << " gave different answers";
    const std::string copy = Path("copy_" + v);
    ASSERT_EQ(Run("cp -r " + Path("serving") + " " + copy).exit_code, 0);
    std::string donefile;
    for (const ServingVersion& s : *listed) {
      if (s.version <= std::stoull(v)) donefile += s.ToJson().dump() + "\n";
    }
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), copy + "/versions.jsonl", donefile).ok());
    const int alone = Serve("--serving-dir " + copy, "alone" + v);
    ASSERT_GT(alone, 0) << Log("alone" + v);
    Result one = Client(fmt::format("one {} {}", alone, Path("req.tsv")));
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_EQ(one.last_json["version"], v);
    EXPECT_EQ(one.last_json["bits"], answers[0]) << "version " << v;
    EXPECT_EQ(StopServer(), 0);
  }

  // A damaged version: the server says so and keeps serving the last good one.
  ASSERT_EQ(Run(stream("20261101/05", "other")).exit_code, 0);  // (to copy a version from)
  Result before = Client(fmt::format("one {} {}", port, Path("req.tsv")));
  EXPECT_EQ(before.last_json["version"], "6");
  // Version 7 written by hand: version 6's files under a new number, its sparse file damaged.
  ServingVersion next = listed->back();
  next.version = 7;
  next.parent = 6;
  next.base = false;
  ASSERT_EQ(Run("cp -r " + Path("serving/v-000006") + " " + Path("serving/v-000007")).exit_code, 0);
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("serving/v-000007/sparse.bin"), &bytes).ok());
  bytes[bytes.size() / 2] ^= 0x55;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("serving/v-000007/sparse.bin"), bytes).ok());
  ASSERT_TRUE(AppendServingVersion(Env::Posix(), Path("serving"), next).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  Result after = Client(fmt::format("one {} {}", port, Path("req.tsv")));
  EXPECT_EQ(after.last_json["code"], 200);
  EXPECT_EQ(after.last_json["version"], "6");
  EXPECT_EQ(after.last_json["bits"], before.last_json["bits"]);
  auto metrics = Curl(port, "/metrics");
  EXPECT_NE(metrics.second.find("ctrbox_version_errors_total 1"), std::string::npos)
      << metrics.second;
  EXPECT_NE(metrics.second.find("ctrbox_version_error_info"), std::string::npos);
  EXPECT_NE(Log().find("did not load; still serving v-000006"), std::string::npos) << Log();
  // A restarted server starts with the newest version that loads, saying why not the newest.
  const int again = Serve("--serving-dir " + Path("serving"), "again");
  ASSERT_GT(again, 0) << Log("again");
  Result restarted = Client(fmt::format("one {} {}", again, Path("req.tsv")));
  EXPECT_EQ(restarted.last_json["version"], "6");
  EXPECT_EQ(restarted.last_json["bits"], before.last_json["bits"]);
  EXPECT_NE(Log("again").find("v-000007 did not load"), std::string::npos) << Log("again");
  EXPECT_EQ(StopServer(), 0);
  EXPECT_EQ(StopServer(), 0);
}

// SIGTERM while a large request is in flight: it is answered, then the server exits 0.
TEST_F(ServeCliTest, SigtermDrainsTheRequestsInFlightAndExitsZero) {
  ASSERT_EQ(
      Run(Ctrbox("train --set data.gen.rows=5000 --set model.mlp=256,128 --model-dir " + Path("m")))
          .exit_code,
      0);
  ASSERT_EQ(Run(Ctrbox("gen --rows 60000 --seed 3 --out " + Path("big.tsv"))).exit_code, 0);
  const int port = Serve("--model-dir " + Path("m"));
  ASSERT_GT(port, 0) << Log();
  const std::string script = Path("big.py");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), script,
                              fmt::format(R"PY(
import http.client, json, os, sys
lines = open("{}").read().splitlines()
body = json.dumps({{"inputs": [{{"name": "records", "shape": [len(lines)], "datatype": "BYTES",
                                "data": lines}}]}}).encode()
c = http.client.HTTPConnection("127.0.0.1", {}, timeout=120)
c.request("POST", "/v2/models/ctrbox/infer", body=body)
open("{}", "w").close()  # the request is sent
r = c.getresponse()
print(json.dumps({{"code": r.status, "n": len(json.loads(r.read())["outputs"][0]["data"])}}))
)PY",
                                          Path("big.tsv"), port, Path("sent")))
                  .ok());
  pid_t client = fork();
  if (client == 0) {
    const std::string cmd = "exec python3 " + script + " >" + Path("big.out");
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Once the request is being answered: the client sent it (it says so: Python's start and
  // the 60 000-row body may take longer than a fixed wait on a loaded machine), and the server
  // has had time to read it and start predicting.
  for (int i = 0; i < 600 && !Env::Posix()->FileExists(Path("sent")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(Env::Posix()->FileExists(Path("sent")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(StopServer(), 0);
  int status = 0;
  waitpid(client, &status, 0);
  std::string out;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("big.out"), &out).ok());
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["code"], 200);
  EXPECT_EQ(j["n"], 60000);
  EXPECT_NE(Log().find("answering the requests in flight"), std::string::npos);
}

}  // namespace
}  // namespace ctrbox
