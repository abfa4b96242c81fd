// Every operator of the feature graph against a plain row-at-a-time reference written
// independently (nlohmann::json for JSON, gmtime_r for time parts, std::map for joins), on
// random rows parsed from CSV text; and the three schedules — sequential, layered on the
// reader's thread, layered over a pool — giving the same columns bit for bit.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "feature/extractor.h"
#include "util/hash.h"
#include "util/mem_env.h"
#include "util/random.h"

namespace ctrbox {
namespace {

Status WriteStringToFile(Env* env, const std::string& data, const std::string& path) {
  return WriteFileAtomic(env, path, data);
}

// One input row as the generator wrote it.
struct Row {
  std::optional<int64_t> i;    // int column, empty when null
  std::optional<double> f;     // float column
  std::string s;               // string column ("" = null)
  std::string n;               // a string that is usually an int
  std::string j;               // JSON text (sometimes malformed)
  std::string lst;             // "a|b||c"
  std::optional<int64_t> ts;   // unix seconds
  std::vector<uint64_t> keys;  // keys column
  int64_t side = 0;            // join key
  int y = 0;
};

std::string CsvQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    out += c;
    if (c == '"') out += '"';
  }
  return out + "\"";
}

std::string RandomJson(Random& r) {
  switch (r.Below(8)) {
    case 0:
      return "";  // null
    case 1:
      return "{\"a\": {\"b\": 12";  // malformed
    case 2:
      return "{\"c\": \"x y\"}";  // a.b missing
    case 3:
      return "{\"a\": {\"b\": \"str\"}, \"c\": 7}";  // wrong type for int
    case 4:
      return "[1, 2]";  // not an object
    default: {
      const int64_t b = static_cast<int64_t>(r.Below(1000)) - 500;
      return "{\"a\": {\"b\": " + std::to_string(b) + ", \"z\": [1,{\"q\":2}]}, \"c\": \"w" +
             std::to_string(r.Below(5)) + "\", \"d\": 2.5}";
    }
  }
}

std::vector<Row> RandomRows(uint64_t seed, int n) {
  Random r(seed);
  std::vector<Row> rows(n);
  const char* words[] = {"alpha", "beta", "gamma", "delta", "x,y", "q\"uote"};
  for (Row& w : rows) {
    if (r.Below(6)) w.i = static_cast<int64_t>(r.Below(200)) - 50;
    if (r.Below(6)) w.f = (r.Uniform() - 0.3) * 100;
    if (r.Below(5)) w.s = words[r.Below(6)];
    w.n = r.Below(10) ? std::to_string(static_cast<int64_t>(r.Below(100000)) - 500)
                      : (r.Below(2) ? "x12" : "");
    w.j = RandomJson(r);
    const int pieces = static_cast<int>(r.Below(7));
    for (int k = 0; k < pieces; ++k) {
      if (k) w.lst += "|";
      if (r.Below(5)) w.lst += "p" + std::to_string(r.Below(9));
    }
    if (r.Below(8)) w.ts = static_cast<int64_t>(r.Below(4000000000ULL)) - 1000000000;
    const int nk = static_cast<int>(r.Below(4));
    for (int k = 0; k < nk; ++k) w.keys.push_back(r.Next() >> r.Below(60));
    w.side = static_cast<int64_t>(r.Below(12));
    w.y = static_cast<int>(r.Below(2));
  }
  return rows;
}

std::string ToCsv(const std::vector<Row>& rows) {
  std::string t = "i,f,s,n,j,lst,ts,k,side,y\n";
  char buf[64];
  for (const Row& w : rows) {
    t += w.i ? std::to_string(*w.i) : "";
    t += ",";
    if (w.f) {
      snprintf(buf, sizeof(buf), "%.17g", *w.f);
      t += buf;
    }
    t += "," + (w.s.empty() ? "" : CsvQuote(w.s)) + "," + w.n + "," +
         (w.j.empty() ? "" : CsvQuote(w.j)) + "," + w.lst + ",";
    t += w.ts ? std::to_string(*w.ts) : "";
    t += ",";
    for (size_t k = 0; k < w.keys.size(); ++k) t += (k ? " " : "") + std::to_string(w.keys[k]);
    t += "," + std::to_string(w.side) + "," + std::to_string(w.y) + "\n";
  }
  return t;
}

// The side view: ids 0..7 (so 8..11 miss), a string value and an int value (some null).
std::string SideCsv() {
  std::string t = "id,name,score\n";
  for (int id = 0; id < 8; ++id) {
    t += std::to_string(id) + ",n" + std::to_string(id % 3) + "," +
         (id == 5 ? "" : std::to_string(id * 10)) + "\n";
  }
  return t;
}

const char* kGraph = R"(
main:
  format: csv
  header: true
  columns: {i: int, f: float, s: string, n: string, j: string, lst: string, ts: int, k: keys,
            side: int, y: int}
views:
  side:
    paths: [/v/side.csv]
    format: csv
    columns: {id: int, name: string, score: int}
    key: id
ops:
  - {name: i0, op: fill_null, input: i, value: 7}
  - {name: f0, op: fill_null, input: f, value: -1.5}
  - {name: s0, op: fill_null, input: s, value: none}
  - {name: n_int, op: cast, input: n, to: int}
  - {name: n_float, op: cast, input: n, to: float}
  - {name: i_str, op: cast, input: i, to: string}
  - {name: f_int, op: cast, input: f, to: int}
  - {name: f_str, op: cast, input: f, to: string}
  - {name: jb, op: json_field, input: j, path: a.b, type: int}
  - {name: jc, op: json_field, input: j, path: c, type: string}
  - {name: jd, op: json_field, input: j, path: d, type: float}
  - {name: jz, op: json_field, input: j, path: a.z, type: string}
  - {op: filter, input: i, cmp: ">=", value: 0}
  - {op: filter, input: s, cmp: in, values: [alpha, beta, "x,y"]}
  - {op: filter, input: f, cmp: "!=", value: 3}
  - {op: filter, input: jc, cmp: not_null}
  - {op: dedupe, inputs: [s, i]}
  - {op: join, view: side, on: side}
  - {name: h_s, op: hash, input: s}
  - {name: h_k, op: hash, input: k}
  - {name: pieces, op: split, input: lst, sep: "|"}
  - {name: last2, op: last_n, input: pieces, n: 2}
  - {name: last3s, op: last_n, input: lst, sep: "|", n: 3}
  - {name: x, op: cross, inputs: [pieces, side.name, i0]}
  - {name: b, op: bucketize, input: f, boundaries: [-10, 0, 10.5, 40]}
  - {name: hour, op: time_part, input: ts, part: hour}
  - {name: wday, op: time_part, input: ts, part: weekday, utc_offset_hours: -5.5}
  - {name: day, op: time_part, input: ts, part: day}
  - {name: month, op: time_part, input: ts, part: month}
  - {name: year, op: time_part, input: ts, part: year}
  - {name: minute, op: time_part, input: ts, part: minute}
  - {name: lg, op: log, input: f}
  - {name: cl, op: clip, input: i, min: -5, max: 20}
  - {name: nz, op: normalize, input: f0, mean: 3, std: 4}
  - {name: score0, op: fill_null, input: side.score, value: -3}
label: y
slots: [s0, h_k, x, last2, k]
dense: [lg, score0]
)";

// A reference value: null, or one of the shapes.
struct Ref {
  bool null = true;
  bool error = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> list;
  std::vector<uint64_t> keys;
};
Ref Null() { return {}; }
Ref Int(int64_t v) {
  Ref r;
  r.null = false;
  r.i = v;
  return r;
}
Ref Float(double v) {
  Ref r;
  r.null = false;
  r.f = v;
  return r;
}
Ref String(std::string v) {
  Ref r;
  r.null = false;
  r.s = std::move(v);
  return r;
}
Ref Error() {
  Ref r;
  r.error = true;
  return r;
}

std::optional<int64_t> RefParseInt(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t pos = 0;
  try {
    long long v = std::stoll(s, &pos);
    if (pos != s.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

std::vector<std::string> RefSplit(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// json_field by nlohmann::json: 1 found, 0 null, -1 malformed.
Ref RefJson(const std::string& text, const std::vector<std::string>& path, ColType type) {
  if (text.empty()) return Null();
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // Lazy parsing may accept a malformed tail after the member; the generator's malformed
  // document is cut before its member's value, so both reject it.
  if (doc.is_discarded()) return Error();
  const nlohmann::json* v = &doc;
  for (const std::string& p : path) {
    if (!v->is_object() || !v->contains(p)) return Null();
    v = &(*v)[p];
  }
  if (v->is_null()) return Null();
  if (type == ColType::kInt) return v->is_number_integer() ? Int(v->get<int64_t>()) : Null();
  if (type == ColType::kFloat) return v->is_number() ? Float(v->get<double>()) : Null();
  if (v->is_string()) return String(v->get<std::string>());
  return String(v->dump());  // compact: the generator writes arrays as dump() does
}

int64_t RefTimePart(int64_t ts, int64_t offset, const std::string& part) {
  const time_t t = static_cast<time_t>(ts + offset);
  struct tm tm;
  gmtime_r(&t, &tm);
  if (part == "hour") return tm.tm_hour;
  if (part == "minute") return tm.tm_min;
  if (part == "weekday") return (tm.tm_wday + 6) % 7;  // Monday 0
  if (part == "day") return tm.tm_mday;
  if (part == "month") return tm.tm_mon + 1;
  return tm.tm_year + 1900;
}

uint64_t H(const std::string& s, uint64_t seed) {
  return XXH3_64bits_withSeed(s.data(), s.size(), seed);
}
uint64_t H(int64_t v, uint64_t seed) { return XXH3_64bits_withSeed(&v, 8, seed); }
uint64_t Seed(const std::string& name) { return XXH3_64bits(name.data(), name.size()); }

class OpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.CreateDirs("/v").IgnoreError();
    ASSERT_TRUE(WriteStringToFile(&env_, SideCsv(), "/v/side.csv").ok());
    auto plan = ParseFeatures(YAML::Load(kGraph), "ops.yaml");
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan_ = *plan;
  }
  std::shared_ptr<Extractor> Open(Schedule schedule, int threads,
                                  FeatureDevice device = FeatureDevice::kCpu, bool fused = true) {
    Extractor::Options o;
    o.schedule = schedule;
    o.layer_threads = threads;
    o.device = device;
    o.fused = fused;
    DataOptions main;
    main.paths = {"/v/main.csv"};
    auto x = Extractor::Open(&env_, plan_, main, o);
    EXPECT_TRUE(x.ok()) << x.status().ToString();
    return x.ok() ? *x : nullptr;
  }
  MemEnv env_;
  std::shared_ptr<const FeaturePlan> plan_;
};

// The value of a column at row r, as a Ref (lists and keys by content).
Ref Got(const Column& c, uint32_t r) {
  if (!c.valid[r]) return Null();
  Ref x;
  x.null = false;
  switch (c.type) {
    case ColType::kInt:
    case ColType::kMask:
      x.i = c.ints()[r];
      break;
    case ColType::kFloat:
      x.f = c.floats()[r];
      break;
    case ColType::kString:
      x.s = std::string(c.strs()[r].view());
      break;
    case ColType::kList:
      for (uint32_t k = 0; k < c.lists()[r].n; ++k) x.list.emplace_back(c.lists()[r].p[k].view());
      break;
    case ColType::kKeys:
    case ColType::kHashed:
      x.keys.assign(c.keys()[r].p, c.keys()[r].p + c.keys()[r].n);
      break;
    case ColType::kTag:
      x.keys = {c.tags()[r].lo, c.tags()[r].hi};
      break;
  }
  return x;
}

void ExpectSame(const Ref& want, const Ref& got, const std::string& what) {
  ASSERT_EQ(want.null, got.null) << what;
  if (want.null) return;
  EXPECT_EQ(want.i, got.i) << what;
  EXPECT_EQ(std::bit_cast<uint64_t>(want.f), std::bit_cast<uint64_t>(got.f))
      << what << ": " << want.f << " vs " << got.f;
  EXPECT_EQ(want.s, got.s) << what;
  EXPECT_EQ(want.list, got.list) << what;
  EXPECT_EQ(want.keys, got.keys) << what;
}

// The side view's rows (SideCsv) by id: the name and the optional score.
using SideRows = std::map<int64_t, std::pair<std::string, std::optional<int64_t>>>;

SideRows SideById() {
  SideRows m;
  for (int id = 0; id < 8; ++id) {
    m[id] = {"n" + std::to_string(id % 3),
             id == 5 ? std::nullopt : std::optional<int64_t>(id * 10)};
  }
  return m;
}

// The row-at-a-time reference: every column the graph makes for row w, by name (an operator
// that fails on it: Error()).
std::map<std::string, Ref> RowAtATime(const Row& w, const SideRows& side) {
  std::map<std::string, Ref> want;
  want["i0"] = Int(w.i.value_or(7));
  want["f0"] = Float(w.f.value_or(-1.5));
  want["s0"] = String(w.s.empty() ? "none" : w.s);
  {
    auto v = RefParseInt(w.n);
    want["n_int"] = w.n.empty() ? Null() : v ? Int(*v) : Error();
    want["n_float"] = w.n.empty() ? Null() : v ? Float(static_cast<double>(*v)) : Error();
  }
  want["i_str"] = w.i ? String(std::to_string(*w.i)) : Null();
  want["f_int"] = w.f ? Int(static_cast<int64_t>(std::trunc(*w.f))) : Null();
  if (w.f) {
    char buf[64];
    auto res = std::to_chars(buf, buf + 64, *w.f);
    want["f_str"] = String(std::string(buf, res.ptr));
    // The shortest text reads back to the same double.
    EXPECT_EQ(std::stod(want["f_str"].s), *w.f);
  } else {
    want["f_str"] = Null();
  }
  want["jb"] = RefJson(w.j, {"a", "b"}, ColType::kInt);
  want["jc"] = RefJson(w.j, {"c"}, ColType::kString);
  want["jd"] = RefJson(w.j, {"d"}, ColType::kFloat);
  want["jz"] = RefJson(w.j, {"a", "z"}, ColType::kString);
  // Filters.
  const bool f1 = w.i && *w.i >= 0;
  const bool f2 = w.s == "alpha" || w.s == "beta" || w.s == "x,y";
  const bool f3 = !w.f || *w.f != 3;
  const bool f4 = !want["jc"].null;
  want["filter#13"] = Int(f1);
  want["filter#14"] = Int(f2);
  want["filter#15"] = Int(f3);
  want["filter#16"] = Int(f4);
  // Join and gathers.
  auto hit = side.find(w.side);
  want["join side"] = Int(hit == side.end() ? -1 : w.side);
  want["side.id"] = hit == side.end() ? Null() : Int(w.side);
  want["side.name"] = hit == side.end() ? Null() : String(hit->second.first);
  want["side.score"] = hit == side.end() || !hit->second.second ? Null() : Int(*hit->second.second);
  want["score0"] = want["side.score"].null ? Int(-3) : want["side.score"];
  // Extract.
  {
    Ref h = w.s.empty() ? Null() : Ref{};
    if (!w.s.empty()) {
      h.null = false;
      h.keys = {H(w.s, Seed("h_s"))};
    }
    want["h_s"] = h;
    Ref hk;
    if (!w.keys.empty()) {
      hk.null = false;
      for (uint64_t k : w.keys) hk.keys.push_back(H(static_cast<int64_t>(k), Seed("h_k")));
    }
    want["h_k"] = hk;
  }
  const std::vector<std::string> pieces = RefSplit(w.lst, '|');
  {
    Ref l;
    if (!pieces.empty()) {
      l.null = false;
      l.list = pieces;
    }
    want["pieces"] = l;
    Ref l2 = l, l3 = l;
    if (!l2.null && l2.list.size() > 2) l2.list.erase(l2.list.begin(), l2.list.end() - 2);
    if (!l3.null && l3.list.size() > 3) l3.list.erase(l3.list.begin(), l3.list.end() - 3);
    want["last2"] = l2;
    want["last3s"] = l3;
  }
  {
    Ref x;
    if (!pieces.empty() && !want["side.name"].null) {
      x.null = false;
      for (const std::string& a : pieces) {
        const uint64_t h[3] = {H(a, 0), H(want["side.name"].s, 0), H(want["i0"].i, 0)};
        x.keys.push_back(XXH3_64bits_withSeed(h, sizeof(h), Seed("x")));
      }
    }
    want["x"] = x;
  }
  if (w.f) {
    const double b[] = {-10, 0, 10.5, 40};
    int64_t k = 0;
    for (double v : b) k += v <= *w.f;
    want["b"] = Int(k);
    want["lg"] = Float(std::log1p(*w.f > 0.0 ? *w.f : 0.0));
  } else {
    want["b"] = Null();
    want["lg"] = Null();
  }
  want["cl"] = w.i ? Float(std::min(std::max(static_cast<double>(*w.i), -5.0), 20.0)) : Null();
  want["nz"] = Float((want["f0"].f - 3) / 4);
  // Unix seconds from 1990 to 2100 decode; others mark the row (default range).
  const bool plausible = w.ts && *w.ts >= 631152000 && *w.ts < 4102444800;
  for (const char* part : {"hour", "day", "month", "year", "minute"}) {
    want[part] = !w.ts ? Null() : plausible ? Int(RefTimePart(*w.ts, 0, part)) : Error();
  }
  want["wday"] = !w.ts ? Null() : plausible ? Int(RefTimePart(*w.ts, -19800, "weekday")) : Error();

  return want;
}

TEST_F(OpsTest, EveryOperatorMatchesTheRowAtATimeReference) {
  const std::vector<Row> rows = RandomRows(7, 3000);
  ASSERT_TRUE(WriteStringToFile(&env_, ToCsv(rows), "/v/main.csv").ok());
  auto x = Open(Schedule::kLayered, 0);
  ASSERT_NE(x, nullptr);
  TextChunk chunk;
  ASSERT_TRUE(ReadFileToString(&env_, "/v/main.csv", &chunk.data).ok());
  chunk.file = "/v/main.csv";
  Arena arena;
  ColumnTable t;
  ParseOutcome outcome;
  ASSERT_TRUE(x->ParseMain(chunk, &arena, &t, &outcome).ok());
  ASSERT_EQ(t.rows, rows.size());  // every generated row is well-formed CSV
  ASSERT_TRUE(x->RunGraph(&t, &arena).ok());

  const FeaturePlan& p = *plan_;
  auto col = [&](const std::string& name) -> const Column& {
    const int c = p.FindColumn(name);
    EXPECT_GE(c, 0) << name;
    return t.cols[c];
  };
  auto op_index = [&](const std::string& name) {
    for (size_t k = 0; k < p.ops.size(); ++k) {
      if (p.ops[k].name == name) return static_cast<int>(k);
    }
    ADD_FAILURE() << name;
    return -1;
  };
  const SideRows side = SideById();
  int errors_seen = 0, joined = 0, filtered_in = 0;
  for (uint32_t r = 0; r < t.rows; ++r) {
    const Row& w = rows[r];
    const std::string at = "row " + std::to_string(r);
    std::map<std::string, Ref> want = RowAtATime(w, side);
    filtered_in +=
        want["filter#13"].i && want["filter#14"].i && want["filter#15"].i && want["filter#16"].i;
    joined += side.contains(w.side);

    // The lowest operator that failed marks the row.
    int first_error = 0;
    for (auto& [name, ref] : want) {
      if (ref.error) {
        const int k = op_index(name) + 1;
        if (first_error == 0 || k < first_error) first_error = k;
        continue;
      }
      ExpectSame(ref, Got(col(name), r), at + " " + name);
    }
    EXPECT_EQ(t.errors[r], static_cast<uint32_t>(first_error)) << at;
    errors_seen += first_error != 0;
    if (HasFatalFailure()) return;
  }
  // Dedupe: equal (s, i) values, equal tags; different, different.
  const Column& tags = t.cols[p.ops[op_index("dedupe#17")].output];
  std::map<std::pair<std::string, std::optional<int64_t>>, std::pair<uint64_t, uint64_t>> seen;
  std::set<std::pair<uint64_t, uint64_t>> distinct;
  for (uint32_t r = 0; r < t.rows; ++r) {
    const auto tag = std::make_pair(tags.tags()[r].lo, tags.tags()[r].hi);
    auto [it, fresh] = seen.emplace(std::make_pair(rows[r].s, rows[r].i), tag);
    if (!fresh) {
      EXPECT_EQ(it->second, tag) << r;
    } else {
      EXPECT_TRUE(distinct.insert(tag).second) << r;
    }
  }
  // The random rows reach every branch.
  EXPECT_GT(errors_seen, 50);
  EXPECT_GT(joined, 1000);
  EXPECT_LT(joined, 2800);
  EXPECT_GT(filtered_in, 50);
}

TEST_F(OpsTest, SequentialLayeredAndPooledSchedulesGiveTheSameBatches) {
  const std::vector<Row> rows = RandomRows(11, 5000);
  ASSERT_TRUE(WriteStringToFile(&env_, ToCsv(rows), "/v/main.csv").ok());
  TextChunk chunk;
  ASSERT_TRUE(ReadFileToString(&env_, "/v/main.csv", &chunk.data).ok());
  chunk.file = "/v/main.csv";
  // Sequential; layered on one thread; layered over 3; the fixed-width operators on the
  // emulated GPU, one launch per layer and one per operator.
  struct Mode {
    Schedule schedule;
    int threads;
    FeatureDevice device;
    bool fused;
  };
  const Mode modes[] = {{Schedule::kSequential, 0, FeatureDevice::kCpu, true},
                        {Schedule::kLayered, 0, FeatureDevice::kCpu, true},
                        {Schedule::kLayered, 3, FeatureDevice::kCpu, true},
                        {Schedule::kLayered, 0, FeatureDevice::kEmulatedGpu, true},
                        {Schedule::kLayered, 0, FeatureDevice::kEmulatedGpu, false}};
  const int n = std::size(modes);
  std::vector<ChunkParseResult> results(n);
  std::vector<ExtractTotals> totals(n);
  for (int m = 0; m < n; ++m) {
    auto x = Open(modes[m].schedule, modes[m].threads, modes[m].device, modes[m].fused);
    ASSERT_NE(x, nullptr);
    x->ExtractChunk(chunk, &results[m]);
    ASSERT_TRUE(results[m].status.ok()) << results[m].status.ToString();
    totals[m] = x->totals();
  }
  // The device ran the graph's fixed-width operators: one launch for each layer that has
  // some, or one per operator.
  int fixed_layers = 0, fixed_ops = 0;
  for (const auto& layer : plan_->layers) {
    int k = 0;
    for (int id : layer) k += IsFixedOp(*plan_, plan_->ops[id]);
    fixed_layers += k > 0;
    fixed_ops += k;
  }
  EXPECT_GE(fixed_ops, 14);
  EXPECT_LT(fixed_layers, fixed_ops);
  EXPECT_EQ(totals[3].device_launches, static_cast<uint64_t>(fixed_layers));
  EXPECT_EQ(totals[4].device_launches, static_cast<uint64_t>(fixed_ops));
  EXPECT_EQ(totals[3].device, "emulated GPU (one launch per layer)");
  EXPECT_EQ(totals[0].device, "cpu");
  ASSERT_GT(results[0].batch.rows(), 50u);
  for (int m = 1; m < n; ++m) {
    const Batch& a = results[0].batch;
    const Batch& b = results[m].batch;
    EXPECT_EQ(a.labels, b.labels) << m;
    EXPECT_EQ(a.offsets, b.offsets) << m;
    EXPECT_EQ(a.keys, b.keys) << m;
    ASSERT_EQ(a.dense.size(), b.dense.size());
    EXPECT_EQ(0, std::memcmp(a.dense.data(), b.dense.data(), a.dense.size() * sizeof(float)));
    EXPECT_EQ(results[0].counts.good, results[m].counts.good);
    EXPECT_EQ(results[0].counts.bad, results[m].counts.bad);
    EXPECT_EQ(results[0].row_tags, results[m].row_tags);
  }
  // Bad rows are counted by the kind of the operator that failed, with file and line.
  const RecordCounts& c = results[0].counts;
  EXPECT_GT(c.bad[static_cast<int>(BadKind::kBadNumber)], 0u);
  EXPECT_GT(c.bad[static_cast<int>(BadKind::kBadJson)], 0u);
  ASSERT_FALSE(results[0].samples.empty());
  EXPECT_EQ(results[0].samples[0].file, "/v/main.csv");
  EXPECT_GT(results[0].samples[0].line, 1u);
}

// The CUDA layers against the CPU, bit for bit (log1p aside: the device's math library may
// round its last bit otherwise; the rows' dense values are compared as the floats they become).
TEST_F(OpsTest, CudaLayersMatchTheCpu) {
  auto device = NewCudaDeviceLayers(true);
  if (!device.ok()) GTEST_SKIP() << device.status().message();
  const std::vector<Row> rows = RandomRows(13, 20000);
  ASSERT_TRUE(WriteStringToFile(&env_, ToCsv(rows), "/v/main.csv").ok());
  TextChunk chunk;
  ASSERT_TRUE(ReadFileToString(&env_, "/v/main.csv", &chunk.data).ok());
  chunk.file = "/v/main.csv";
  ChunkParseResult cpu, gpu, unfused;
  Open(Schedule::kLayered, 0)->ExtractChunk(chunk, &cpu);
  auto x = Open(Schedule::kLayered, 0, FeatureDevice::kCuda, true);
  ASSERT_NE(x, nullptr);
  x->ExtractChunk(chunk, &gpu);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
  Open(Schedule::kLayered, 0, FeatureDevice::kCuda, false)->ExtractChunk(chunk, &unfused);
  ASSERT_TRUE(unfused.status.ok()) << unfused.status.ToString();
  for (const ChunkParseResult* r : {&gpu, &unfused}) {
    EXPECT_EQ(cpu.batch.labels, r->batch.labels);
    EXPECT_EQ(cpu.batch.offsets, r->batch.offsets);
    EXPECT_EQ(cpu.batch.keys, r->batch.keys);
    ASSERT_EQ(cpu.batch.dense.size(), r->batch.dense.size());
    for (size_t i = 0; i < cpu.batch.dense.size(); ++i) {
      EXPECT_FLOAT_EQ(cpu.batch.dense[i], r->batch.dense[i]) << i;  // within 4 ulps
    }
    EXPECT_EQ(cpu.counts.bad, r->counts.bad);
  }
  EXPECT_NE(x->totals().device.find("one launch per layer"), std::string::npos);
}

}  // namespace
}  // namespace ctrbox
