// The feature operators' test graph (kGraph), random input rows for it and the plain
// row-at-a-time reference each operator is checked against (ops_test.cc), written
// independently of the operators: nlohmann::json for JSON, gmtime_r for time parts, std::map
// for joins.
#ifndef CTRBOX_FEATURE_OPS_TEST_REFERENCE_H_
#define CTRBOX_FEATURE_OPS_TEST_REFERENCE_H_

#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "feature/extractor.h"
#include "util/hash.h"
#include "util/random.h"

namespace ctrbox::ops_test {

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

inline std::string CsvQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    out += c;
    if (c == '"') out += '"';
  }
  return out + "\"";
}

inline std::string RandomJson(Random& r) {
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

inline std::vector<Row> RandomRows(uint64_t seed, int n) {
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

inline std::string ToCsv(const std::vector<Row>& rows) {
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
inline std::string SideCsv() {
  std::string t = "id,name,score\n";
  for (int id = 0; id < 8; ++id) {
    t += std::to_string(id) + ",n" + std::to_string(id % 3) + "," +
         (id == 5 ? "" : std::to_string(id * 10)) + "\n";
  }
  return t;
}

inline constexpr const char* kGraph = R"(
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
inline Ref Null() { return {}; }
inline Ref Int(int64_t v) {
  Ref r;
  r.null = false;
  r.i = v;
  return r;
}
inline Ref Float(double v) {
  Ref r;
  r.null = false;
  r.f = v;
  return r;
}
inline Ref String(std::string v) {
  Ref r;
  r.null = false;
  r.s = std::move(v);
  return r;
}
inline Ref Error() {
  Ref r;
  r.error = true;
  return r;
}

inline std::optional<int64_t> RefParseInt(const std::string& s) {
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

inline std::vector<std::string> RefSplit(const std::string& s, char sep) {
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
inline Ref RefJson(const std::string& text, const std::vector<std::string>& path, ColType type) {
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

inline int64_t RefTimePart(int64_t ts, int64_t offset, const std::string& part) {
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

inline uint64_t H(const std::string& s, uint64_t seed) {
  return XXH3_64bits_withSeed(s.data(), s.size(), seed);
}
inline uint64_t H(int64_t v, uint64_t seed) { return XXH3_64bits_withSeed(&v, 8, seed); }
inline uint64_t Seed(const std::string& name) { return XXH3_64bits(name.data(), name.size()); }

// The side view's rows (SideCsv) by id: the name and the optional score.
using SideRows = std::map<int64_t, std::pair<std::string, std::optional<int64_t>>>;

inline SideRows SideById() {
  SideRows m;
  for (int id = 0; id < 8; ++id) {
    m[id] = {"n" + std::to_string(id % 3),
             id == 5 ? std::nullopt : std::optional<int64_t>(id * 10)};
  }
  return m;
}

// The row-at-a-time reference: every column the graph makes for row w, by name (an operator
// that fails on it: Error()).
inline std::map<std::string, Ref> RowAtATime(const Row& w, const SideRows& side) {
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

}  // namespace ctrbox::ops_test

#endif  // CTRBOX_FEATURE_OPS_TEST_REFERENCE_H_
