#include "feature/view_parse.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>

#include "io/text_scan.h"
#include "util/logging.h"
#include "util/parse.h"

namespace ctrbox {

namespace {

using text_scan::Clip;
using text_scan::Printable;
using text_scan::ValidUtf8;

void AddBad(const TextChunk& chunk, uint64_t line, BadKind kind, std::string detail,
            ParseOutcome* o) {
  o->counts.bad[static_cast<int>(kind)]++;
  constexpr int kSamplesPerKind = 5;
  int same = 0;
  for (const BadRecord& r : o->samples) same += r.kind == kind;
  if (same < kSamplesPerKind) o->samples.push_back({kind, chunk.file, line, std::move(detail)});
}

// Padded scratch for simdjson, one per thread.
struct JsonScratch {
  simdjson::ondemand::parser parser;
  std::vector<char> buf;
};
JsonScratch& Scratch() {
  thread_local JsonScratch s;
  return s;
}

}  // namespace

bool SplitFields(std::string_view line, char sep, bool quoted, Arena* arena, int lane,
                 std::vector<Str>* fields) {
  fields->clear();
  size_t i = 0;
  const size_t n = line.size();
  while (true) {
    if (quoted && i < n && line[i] == '"') {
      // A quoted field: up to the closing quote; "" is one quote.
      size_t j = i + 1;
      bool doubled = false;
      while (true) {
        if (j >= n) return false;  // unbalanced
        if (line[j] == '"') {
          if (j + 1 < n && line[j + 1] == '"') {
            doubled = true;
            j += 2;
            continue;
          }
          break;
        }
        ++j;
      }
      std::string_view inner = line.substr(i + 1, j - i - 1);
      if (!doubled) {
        fields->push_back({inner.data(), static_cast<uint32_t>(inner.size())});
      } else {
        char* p = arena->Alloc<char>(inner.size() + 1, lane);
        size_t w = 0;
        for (size_t k = 0; k < inner.size(); ++k) {
          p[w++] = inner[k];
          if (inner[k] == '"') ++k;  // skip the second quote of a pair
        }
        fields->push_back({p, static_cast<uint32_t>(w)});
      }
      i = j + 1;
      if (i == n) return true;
      if (line[i] != sep) return false;  // text after the closing quote
      ++i;
      continue;
    }
    size_t j = line.find(sep, i);
    if (j == std::string_view::npos) j = n;
    std::string_view f = line.substr(i, j - i);
    if (quoted && f.find('"') != std::string_view::npos) return false;  // a stray quote
    fields->push_back({f.data(), static_cast<uint32_t>(f.size())});
    if (j == n) return true;
    i = j + 1;
  }
}

bool ParseCell(ColType type, Str text, Arena* arena, int lane, void* cell, uint8_t* valid) {
  const std::string_view s = text.view();
  if (s.empty()) {
    *valid = 0;
    std::memset(cell, 0, CellBytes(type));
    return true;
  }
  *valid = 1;
  switch (type) {
    case ColType::kInt:
      return ParseInt64(s, static_cast<int64_t*>(cell));
    case ColType::kFloat: {
      double* d = static_cast<double*>(cell);
      return ParseDouble(s, d) && std::isfinite(*d);
    }
    case ColType::kString:
      *static_cast<Str*>(cell) = text;
      return true;
    case ColType::kKeys: {
      // Space-separated unsigned ids.
      uint32_t count = 0;
      bool in_token = false;
      for (char c : s) {
        const bool space = c == ' ';
        if (!space && !in_token) ++count;
        in_token = !space;
      }
      uint64_t* keys = arena->Alloc<uint64_t>(std::max<uint32_t>(count, 1), lane);
      uint32_t k = 0;
      size_t i = 0;
      while (i < s.size()) {
        if (s[i] == ' ') {
          ++i;
          continue;
        }
        size_t j = s.find(' ', i);
        if (j == std::string_view::npos) j = s.size();
        if (!ParseUint64(s.substr(i, j - i), &keys[k++])) return false;
        i = j;
      }
      *static_cast<KeySpan*>(cell) = {keys, count};
      if (count == 0) *valid = 0;
      return true;
    }
    default:
      return false;
  }
}

std::vector<std::string> ViewParser::SplitHeader(const ViewLayout& layout, std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.size() >= 3 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
  Arena arena;
  std::vector<Str> fields;
  std::vector<std::string> out;
  if (!SplitFields(line, layout.sep(), layout.format == ViewFormat::kCsv, &arena, 0, &fields)) {
    return {std::string(line)};
  }
  for (const Str& f : fields) out.emplace_back(f.view());
  return out;
}

struct ViewParser::Notes {
  std::mutex mu;
  std::set<std::string> files;
};

ViewParser::Names ViewParser::NamesTheColumns(const ViewLayout& layout,
                                              const std::vector<std::string>& fields) {
  size_t named = 0;
  for (const ViewColumn& c : layout.columns) {
    named += std::find(fields.begin(), fields.end(), c.name) != fields.end();
  }
  return named == layout.columns.size() ? Names::kAll : named > 0 ? Names::kSome : Names::kNone;
}

void ViewParser::Note(const std::string& file, const char* what) const {
  {
    std::lock_guard<std::mutex> l(notes_->mu);
    if (!notes_->files.insert(file).second) return;
  }
  LOG_INFO("{}: {}", file, what);
}

StatusOr<ViewParser> ViewParser::Make(const ViewLayout& layout,
                                      std::vector<std::string> header_fields) {
  ViewParser p;
  p.notes_ = std::make_shared<Notes>();
  p.layout_ = layout;
  p.header_ = std::move(header_fields);
  if (layout.format == ViewFormat::kJsonl) return p;
  if (layout.header && NamesTheColumns(layout, p.header_) == Names::kNone) {
    // The first file has no header (its line 1 names none of the columns: data): the
    // columns are read in their declared order, and line 1 is data (Parse says so).
    p.header_.clear();
    for (const ViewColumn& c : layout.columns) p.header_.push_back(c.name);
  }
  if (layout.header) {
    for (const ViewColumn& c : layout.columns) {
      auto it = std::find(p.header_.begin(), p.header_.end(), c.name);
      if (it == p.header_.end()) {
        std::string names;
        for (const auto& h : p.header_) names += (names.empty() ? "" : ", ") + h;
        return InvalidArgumentError(fmt::format(
            "column '{}' is declared but not in the header (which has: {})", c.name, names));
      }
      const auto again = std::find(it + 1, p.header_.end(), c.name);
      if (again != p.header_.end()) {
        return InvalidArgumentError(fmt::format(
            "the header names column '{}' twice (fields {} and {}): which one is meant is "
            "ambiguous; rename one",
            c.name, it - p.header_.begin() + 1, again - p.header_.begin() + 1));
      }
      p.field_of_column_.push_back(static_cast<int>(it - p.header_.begin()));
    }
    p.fields_ = p.header_.size();
  } else {
    for (size_t c = 0; c < layout.columns.size(); ++c)
      p.field_of_column_.push_back(static_cast<int>(c));
    p.fields_ = layout.columns.size();
  }
  return p;
}

namespace {

// One JSON member's value into a cell of `type`: false when it is not of that type (a null
// is handled by the caller).
bool JsonCell(simdjson::ondemand::value& v, simdjson::ondemand::json_type t, ColType type,
              Arena* arena, int lane, void* cell, uint8_t* valid) {
  using JT = simdjson::ondemand::json_type;
  switch (type) {
    case ColType::kInt:
      return v.get_int64().get(*static_cast<int64_t*>(cell)) == simdjson::SUCCESS;
    case ColType::kFloat:
      return v.get_double().get(*static_cast<double*>(cell)) == simdjson::SUCCESS;
    case ColType::kString: {
      std::string_view s;
      bool ok = true;
      if (t == JT::string) {
        ok = v.get_string().get(s) == simdjson::SUCCESS;
      } else if (t == JT::object) {
        simdjson::ondemand::object o;
        ok = v.get_object().get(o) == simdjson::SUCCESS && o.raw_json().get(s) == simdjson::SUCCESS;
      } else if (t == JT::array) {
        simdjson::ondemand::array a;
        ok = v.get_array().get(a) == simdjson::SUCCESS && a.raw_json().get(s) == simdjson::SUCCESS;
      } else {
        s = v.raw_json_token();
        while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
      }
      if (ok) *static_cast<Str*>(cell) = arena->Copy(s, lane);
      return ok;
    }
    case ColType::kKeys: {
      // An array of unsigned ids, or a string of space-separated ones.
      if (t != JT::array) {
        std::string_view s;
        return v.get_string().get(s) == simdjson::SUCCESS &&
               ParseCell(ColType::kKeys, arena->Copy(s, lane), arena, lane, cell, valid);
      }
      simdjson::ondemand::array a;
      if (v.get_array().get(a) != simdjson::SUCCESS) return false;
      std::vector<uint64_t> ids;
      for (auto item : a) {
        uint64_t id;
        if (item.get_uint64().get(id) != simdjson::SUCCESS) return false;
        ids.push_back(id);
      }
      uint64_t* keys = arena->Alloc<uint64_t>(std::max<size_t>(ids.size(), 1), lane);
      std::copy(ids.begin(), ids.end(), keys);
      *static_cast<KeySpan*>(cell) = {keys, static_cast<uint32_t>(ids.size())};
      if (ids.empty()) *valid = 0;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

bool ViewParser::TextRow(const RowPlace& at, std::string_view line, std::vector<Str>* fields,
                         ParseOutcome* outcome) const {
  if (!SplitFields(line, layout_.sep(), layout_.format == ViewFormat::kCsv, at.arena, at.lane,
                   fields)) {
    AddBad(*at.chunk, at.line_no, BadKind::kFieldCount, "unbalanced quotes: " + Clip(line),
           outcome);
    return false;
  }
  if (fields->size() != fields_) {
    AddBad(*at.chunk, at.line_no, BadKind::kFieldCount,
           fmt::format("{} fields, expected {}", fields->size(), fields_), outcome);
    return false;
  }
  for (size_t c = 0; c < layout_.columns.size(); ++c) {
    Column& col = at.out->cols[at.first_col + c];
    const Str f = (*fields)[field_of_column_[c]];
    if (col.type == ColType::kString && !ValidUtf8(f.view())) {
      AddBad(*at.chunk, at.line_no, BadKind::kBadUtf8,
             fmt::format("column {}: {}", layout_.columns[c].name, Printable(f.view())), outcome);
      return false;
    }
    if (!ParseCell(col.type, f, at.arena, at.lane,
                   static_cast<char*>(col.cells) + at.r * CellBytes(col.type), &col.valid[at.r])) {
      AddBad(*at.chunk, at.line_no, BadKind::kBadNumber,
             fmt::format("column {} ({}): '{}'", layout_.columns[c].name, ColTypeName(col.type),
                         Clip(f.view())),
             outcome);
      return false;
    }
  }
  return true;
}

bool ViewParser::JsonRow(const RowPlace& at, std::string_view line, size_t padded,
                         std::vector<uint8_t>* seen, ParseOutcome* outcome) const {
  const size_t ncols = layout_.columns.size();
  const uint32_t r = at.r;
  JsonScratch& js = Scratch();
  std::fill(seen->begin(), seen->end(), 0);
  simdjson::ondemand::document doc;
  simdjson::ondemand::object obj;
  auto bad_json = [&](const std::string& what) {
    AddBad(*at.chunk, at.line_no, BadKind::kBadJson, what + ": " + Clip(line), outcome);
    return false;
  };
  if (js.parser.iterate(line.data(), line.size(), padded).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(obj) != simdjson::SUCCESS) {
    return bad_json("not a JSON object");
  }
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) {
      return bad_json("a malformed member name");
    }
    size_t c = 0;
    while (c < ncols && layout_.columns[c].name != key) ++c;
    if (c == ncols) continue;  // not declared: the iterator skips its value
    (*seen)[c] = 1;
    Column& col = at.out->cols[at.first_col + c];
    void* cell = static_cast<char*>(col.cells) + r * CellBytes(col.type);
    simdjson::ondemand::value v;
    simdjson::ondemand::json_type t;
    if (field.value().get(v) != simdjson::SUCCESS || v.type().get(t) != simdjson::SUCCESS) {
      return bad_json("a malformed value of " + std::string(key));
    }
    col.valid[r] = 1;
    if (t == simdjson::ondemand::json_type::null) {
      col.valid[r] = 0;
      std::memset(cell, 0, CellBytes(col.type));
      bool is_null = false;
      if (v.is_null().get(is_null) != simdjson::SUCCESS || !is_null) {
        return bad_json("a malformed null");
      }
      continue;
    }
    if (!JsonCell(v, t, col.type, at.arena, at.lane, cell, &col.valid[r])) {
      AddBad(*at.chunk, at.line_no, BadKind::kBadNumber,
             fmt::format("member {} is not {}", key, ColTypeName(col.type)), outcome);
      return false;
    }
  }
  const char* rest;
  if (doc.current_location().get(rest) == simdjson::SUCCESS) {
    return bad_json("text after the JSON object");
  }
  for (size_t c = 0; c < ncols; ++c) {  // members not there: null
    if ((*seen)[c]) continue;
    Column& col = at.out->cols[at.first_col + c];
    col.valid[r] = 0;
    std::memset(static_cast<char*>(col.cells) + r * CellBytes(col.type), 0, CellBytes(col.type));
  }
  return true;
}

Status ViewParser::Parse(const TextChunk& chunk, int first_col, Arena* arena, int lane,
                         ColumnTable* out, ParseOutcome* outcome) const {
  const std::string& data = chunk.data;
  const size_t capacity = static_cast<size_t>(std::count(data.begin(), data.end(), '\n')) + 1;
  const size_t ncols = layout_.columns.size();
  if (out->cols.size() < first_col + ncols) out->cols.resize(first_col + ncols);
  for (size_t c = 0; c < ncols; ++c) {
    Column& col = out->cols[first_col + c];
    col.type = layout_.columns[c].type;
    col.valid = arena->Alloc<uint8_t>(capacity, lane);
    col.cells = arena->Allocate(capacity * CellBytes(col.type), lane);
  }
  out->rows = 0;
  out->lines.clear();
  out->errors.clear();
  for (uint64_t l : chunk.overlong_lines) {
    AddBad(chunk, l, BadKind::kOverlongLine, "longer than data.max_line_bytes", outcome);
  }

  const bool json = layout_.format == ViewFormat::kJsonl;
  const char* base = data.data();
  if (json) {
    // One padded copy of the chunk: each line parses in place with the rest as padding.
    JsonScratch& js = Scratch();
    js.buf.resize(data.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(js.buf.data(), data.data(), data.size());
    std::memset(js.buf.data() + data.size(), ' ', simdjson::SIMDJSON_PADDING);
    base = js.buf.data();
  }
  std::vector<Str> fields;
  std::vector<uint8_t> seen(ncols);
  size_t pos = 0;
  uint64_t line_no = chunk.first_line;
  for (; pos < data.size(); ++line_no) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string_view line(base + pos, end - pos);
    const size_t line_start = pos;
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const bool file_line_1 = line_no == 1 && chunk.lines_from_file_start;
    if (file_line_1 && line.size() >= 3 && line.substr(0, 3) == "\xEF\xBB\xBF") {
      line.remove_prefix(3);
    }
    if (file_line_1 && !json) {
      std::vector<std::string> h = SplitHeader(layout_, line);
      if (layout_.header && h == header_) continue;
      const Names names = NamesTheColumns(layout_, h);
      if (layout_.header && names == Names::kSome) {
        return InvalidArgumentError(fmt::format(
            "{}:1: a header that names some of the declared columns but not all: it differs "
            "from the first file's (every file of a view has the same columns in the same "
            "order)",
            chunk.file));
      }
      if (names == Names::kAll) {
        if (layout_.header) {
          return InvalidArgumentError(fmt::format(
              "{}:1: the header differs from the first file's (every file of a view has the "
              "same columns in the same order)",
              chunk.file));
        }
        // header: false, yet line 1 names the declared columns in order: a header, not a
        // bad row (once per epoch it was counted as one).
        bool in_order = h.size() >= layout_.columns.size();
        for (size_t c = 0; c < layout_.columns.size() && in_order; ++c) {
          in_order = h[c] == layout_.columns[c].name;
        }
        if (in_order) {
          Note(chunk.file, "line 1 names the declared columns: skipped as a header");
          continue;
        }
      } else if (layout_.header) {
        Note(chunk.file,
             "line 1 does not name the declared columns: the file has no header, and its lines "
             "are all data, in the first file's column order");
      }
    }
    if (line.empty() || (json && line.find_first_not_of(" \t") == std::string_view::npos)) {
      continue;  // blank lines are skipped, as in the other text formats
    }
    const RowPlace at{&chunk, line_no, out->rows, first_col, arena, lane, out};
    const bool ok = json ? JsonRow(at, line, Scratch().buf.size() - line_start, &seen, outcome)
                         : TextRow(at, line, &fields, outcome);
    if (!ok) continue;
    out->rows++;
    out->lines.push_back(line_no);
    outcome->counts.good++;
  }
  out->errors.assign(out->rows, 0);
  return Status::OK();
}

}  // namespace ctrbox
