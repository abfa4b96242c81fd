// ctrbox serve with a model trained on raw views through a feature graph (docs/serve.md,
// "Records through a feature graph"): requests send rows of the main view, the server runs
// the training job's graph on them.
#include "cli/serve_test_util.h"

namespace ctrbox {
namespace {

using testing::Result;

// Sends the main view's rows (a csv file, its header skipped) in requests of 37 from 2
// threads, and compares each record's answer with predict's `id<TAB>probability` lines.
constexpr const char* kClient = R"PY(
import csv, io, json, struct, sys, threading, urllib.request, urllib.error

def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/ctrbox/infer",
                                 data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def records(lines):
    return {"inputs": [{"name": "records", "shape": [len(lines)], "datatype": "BYTES",
                        "data": lines}]}

def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]

port, path, predicted = int(sys.argv[1]), sys.argv[2], sys.argv[3]
text = open(path).read().splitlines()
header, lines = next(csv.reader([text[0]])), text[1:]
id_at, label_at = header.index("instance_id"), header.index("label")
ids = [next(csv.reader([l]))[id_at] for l in lines]
want = {}
for l in open(predicted).read().splitlines():
    i, p = l.split("\t")
    want[i] = bits(p)
got, lock, errors = [None] * len(lines), threading.Lock(), []
def worker(starts):
    for a in starts:
        code, r = post(port, records(lines[a:a + 37]))
        if code != 200 or [o["name"] for o in r["outputs"]] != ["probability", "scored"]:
            with lock:
                errors.append(r)
            continue
        p, s = r["outputs"][0]["data"], r["outputs"][1]["data"]
        with lock:
            got[a:a + len(p)] = list(zip(p, s))
ts = [threading.Thread(target=worker, args=(range(t * 37, len(lines), 74),)) for t in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
assert not errors, errors[:2]
seen, matched, mismatches, unexplained, scored = set(), 0, 0, 0, 0
for i, (p, s) in zip(ids, got):
    if s:
        scored += 1
        if i in want and i not in seen:
            matched += 1
            mismatches += bits(p) != want[i]
        elif i not in seen:  # scored by the server, dropped by predict: only a duplicate may be
            unexplained += 1
    else:
        unexplained += i in want and i not in seen  # predict kept what a filter dropped?
        if p != 0:
            unexplained += 1
    seen.add(i)
# A record without its label (the server never reads it) answers as with it.
row = next(csv.reader([lines[0]]))
row[label_at] = ""
out = io.StringIO()
csv.writer(out, lineterminator="").writerow(row)
code, r = post(port, records([out.getvalue(), lines[0]]))
no_label = code == 200 and r["outputs"][0]["data"][0] == r["outputs"][0]["data"][1] \
    and r["outputs"][1]["data"] == [True, True]
# The first 37 records asked back as binary tensors (FP32 probabilities, a byte per BOOL):
# the JSON answers' bits.
ask = dict(records(lines[:37]), outputs=[{"name": n, "parameters": {"binary_data": True}}
                                         for n in ("probability", "scored")])
req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/ctrbox/infer",
                             data=json.dumps(ask).encode())
with urllib.request.urlopen(req, timeout=60) as r:
    hl, data = int(r.headers["Inference-Header-Content-Length"]), r.read()
outs = json.loads(data[:hl])["outputs"]
sizes = [o["parameters"]["binary_data_size"] for o in outs]
probs = struct.unpack("<37f", data[hl:hl + 148])
flags = [b != 0 for b in data[hl + 148:]]
binary_ok = sizes == [148, 37] and len(data) == hl + 185 and \
    [bits(x) for x in probs] == [bits(p) for p, _ in got[:37]] and flags == [s for _, s in got[:37]]
print(json.dumps({"records": len(lines), "scored": scored, "predicted": len(want),
                  "matched": matched, "mismatches": mismatches, "unexplained": unexplained,
                  "no_label": no_label, "binary_ok": binary_ok}))
)PY";

class ServeGraphCliTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    ServeFixture::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("client.py"), kClient).ok());
  }
};

// The server, given the training job (-c), reads records as rows of the main view through its
// graph: each scored record's probability equals predict's through the same graph bit for
// bit; records its filters drop are answered scored=false; the label is not read. Without -c
// such records are refused naming -c; -c for a model of plain records, a record with a wrong
// field count, and the job's graph changed are named.
TEST_F(ServeGraphCliTest, RecordsOfTheMainViewGoThroughTheJobsGraph) {
  ASSERT_EQ(
      Run(Ctrbox("gen --format views --rows 6000 --test-rows 2000 --seed 4 --out " + Path("v")))
          .exit_code,
      0);
  const std::string job = " -c " + Path("v/job.yaml");
  Result t = Run(Ctrbox("train" + job + " --model-dir " + Path("m") +
                        " --set model.mlp=64,32 --set train.batch_size=256"));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  Result p = Run(Ctrbox("predict" + job + " --model-dir " + Path("m") + " --data " +
                        Path("v/impressions_test.csv") + " --id-column instance_id >" +
                        Path("predicted.txt")));
  ASSERT_EQ(p.exit_code, 0) << p.err;

  const int port = Serve("--model-dir " + Path("m") + job);
  ASSERT_GT(port, 0) << Log();
  Result cmp = Run(fmt::format("python3 {} {} {} {}", Path("client.py"), port,
                               Path("v/impressions_test.csv"), Path("predicted.txt")));
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const auto& j = cmp.last_json;
  std::printf("%s\n", j.dump().c_str());
  EXPECT_EQ(j["records"], 2000);
  EXPECT_EQ(j["matched"], j["predicted"]) << j;  // every row predict kept, scored by the server
  EXPECT_GT(j["predicted"].get<int>(), 1000) << j;
  EXPECT_LT(j["scored"].get<int>(), 2000) << j;  // the generated views have bots to filter
  EXPECT_EQ(j["mismatches"], 0) << j;
  EXPECT_EQ(j["unexplained"], 0) << j;
  EXPECT_EQ(j["no_label"], true) << j;
  EXPECT_EQ(j["binary_ok"], true) << j;  // (BOOL was sent as 4 bytes an element before)
  auto [code, meta] = Curl(port, "/v2/models/ctrbox");
  EXPECT_EQ(code, 200);
  EXPECT_NE(meta.find(R"("name":"scored")"), std::string::npos) << meta;
  // A record the main view does not read is named.
  auto [bad, why] = Curl(port, "/v2/models/ctrbox/infer",
                         R"({"inputs":[{"name":"records","shape":[2],"datatype":"BYTES",)"
                         R"("data":["i9,1700000263,u1,107350","  "]}]})");
  EXPECT_EQ(bad, 400);
  EXPECT_NE(why.find("records[1]: empty"), std::string::npos) << why;
  std::tie(bad, why) = Curl(port, "/v2/models/ctrbox/infer",
                            R"({"inputs":[{"name":"records","shape":[1],"datatype":"BYTES",)"
                            R"("data":["i9,1700000263,u1,107350"]}]})");
  EXPECT_EQ(bad, 400);
  EXPECT_NE(why.find("records[0]: "), std::string::npos) << why;
  EXPECT_NE(why.find("csv rows of the main view"), std::string::npos) << why;
  EXPECT_EQ(StopServer(), 0);

  // Without the job, records are refused naming -c.
  const int plain = Serve("--model-dir " + Path("m"), "plain");
  ASSERT_GT(plain, 0) << Log("plain");
  std::tie(bad, why) = Curl(plain, "/v2/models/ctrbox/infer",
                            R"({"inputs":[{"name":"records","shape":[1],"datatype":"BYTES",)"
                            R"("data":["x"]}]})");
  EXPECT_EQ(bad, 400);
  EXPECT_NE(why.find("ctrbox serve -c job.yaml"), std::string::npos) << why;
  EXPECT_EQ(StopServer(), 0);

  // Another graph (a bucketize boundary changed) is not the model's: the server does not start.
  std::string yaml;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), Path("v/job.yaml"), &yaml).ok());
  const size_t at = yaml.find("boundaries: [0, 18, 25, 35, 50]");
  ASSERT_NE(at, std::string::npos) << yaml;
  yaml.replace(at, 31, "boundaries: [0, 18, 30, 35, 50]");
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), Path("other.yaml"), yaml).ok());
  EXPECT_EQ(Serve("--model-dir " + Path("m") + " -c " + Path("other.yaml"), "other"), 0);
  EXPECT_NE(Log("other").find("is not the one generation"), std::string::npos) << Log("other");

  // -c for a model of plain records.
  ASSERT_EQ(
      Run(Ctrbox("train --set data.gen.rows=2000 --set model.mlp=16 --model-dir " + Path("pm")))
          .exit_code,
      0);
  EXPECT_EQ(Serve("--model-dir " + Path("pm") + job, "pm"), 0);
  EXPECT_NE(Log("pm").find("not raw views through a feature graph"), std::string::npos)
      << Log("pm");
}

}  // namespace
}  // namespace ctrbox
