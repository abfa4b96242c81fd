#include "io/text_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "io/text_scan.h"
#include "util/hash.h"
#include "util/parse.h"

namespace ctrbox {

bool ParseDataFormat(std::string_view name, DataFormat* out) {
  static const std::pair<std::string_view, DataFormat> kNames[] = {
      {"criteo", DataFormat::kCriteo}, {"libsvm", DataFormat::kLibsvm},
      {"libfm", DataFormat::kLibfm},   {"libffm", DataFormat::kLibffm},
      {"slots", DataFormat::kSlots},   {"shards", DataFormat::kShards}};
  for (const auto& [n, f] : kNames) {
    if (n == name) {
      *out = f;
      return true;
    }
  }
  return false;
}

std::string_view DataFormatName(DataFormat f) {
  switch (f) {
    case DataFormat::kCriteo:
      return "criteo";
    case DataFormat::kLibsvm:
      return "libsvm";
    case DataFormat::kLibfm:
      return "libfm";
    case DataFormat::kLibffm:
      return "libffm";
    case DataFormat::kSlots:
      return "slots";
    case DataFormat::kShards:
      return "shards";
  }
  return "unknown";
}

bool ParseSlotFrom(std::string_view name, SlotFrom* out) {
  if (name == "one") {
    *out = SlotFrom::kOne;
  } else if (name == "position") {
    *out = SlotFrom::kPosition;
  } else {
    return false;
  }
  return true;
}

std::string_view SlotFromName(SlotFrom s) { return s == SlotFrom::kOne ? "one" : "position"; }

Schema SchemaForFormat(DataFormat format, uint32_t num_slots, uint32_t num_dense,
                       SlotFrom slot_from) {
  switch (format) {
    case DataFormat::kCriteo:
      return Schema{kCriteoSlots, kCriteoDense};
    case DataFormat::kLibsvm:
    case DataFormat::kLibfm:
      return Schema{slot_from == SlotFrom::kPosition ? num_slots : 1, 0};
    case DataFormat::kLibffm:
      return Schema{num_slots, 0};
    case DataFormat::kSlots:
    case DataFormat::kShards:
      return Schema{num_slots, num_dense};
  }
  return Schema{};
}

std::string GuessFormat(std::string_view line) {
  if (std::count(line.begin(), line.end(), '\t') == kCriteoDense + kCriteoSlots) return "criteo";
  text_scan::Tokenizer tok(line);
  std::string_view t;
  if (!tok.Next(&t) || t.find(':') != std::string_view::npos) return "";
  float label;
  if (!text_scan::ParseLabel(t, /*allow_minus_one=*/true, &label)) return "";
  int pairs = 0, triples = 0, dense = 0, other = 0;
  while (tok.Next(&t)) {
    const size_t colons = static_cast<size_t>(std::count(t.begin(), t.end(), ':'));
    uint64_t u;
    if (t.starts_with("dense:")) {
      ++dense;
    } else if (colons == 1 && ParseUint64(t.substr(0, t.find(':')), &u)) {
      ++pairs;
    } else if (colons == 2 && ParseUint64(t.substr(0, t.find(':')), &u)) {
      ++triples;
    } else {
      ++other;
    }
  }
  if (other > 0 || (pairs > 0 && triples > 0)) return "";
  if (dense > 0) return triples == 0 ? "slots" : "";
  if (triples > 0) return "libffm";
  if (pairs > 0) return "libfm (label idx:val, as libsvm)";
  return "";
}

namespace {

using LineError = text_scan::LineError;

// label \t I1..I13 \t C1..C26
bool ParseCriteo(std::string_view line, const TextFormatOptions& opt, BatchBuilder* b,
                 LineError* err) {
  constexpr int kFields = 1 + kCriteoDense + kCriteoSlots;
  std::string_view f[kFields];
  int n = 0;
  const char* p = line.data();
  const char* end = p + line.size();
  while (true) {
    const char* tab = static_cast<const char*>(std::memchr(p, '\t', end - p));
    const char* stop = tab ? tab : end;
    if (n == kFields) {
      n = kFields + 1 + static_cast<int>(std::count(stop, end, '\t'));
      break;
    }
    f[n++] = std::string_view(p, stop - p);
    if (!tab) break;
    p = tab + 1;
  }
  int first = 1;
  float label = 0;
  if (n == kFields) {
    if (!text_scan::ParseLabel(f[0], /*allow_minus_one=*/false, &label)) {
      return err->Set(BadKind::kBadLabel,
                      fmt::format("label '{}' is not 0 or 1", text_scan::Clip(f[0])));
    }
  } else if (n == kFields - 1 && opt.labels_optional) {
    first = 0;
  } else {
    // A comma-separated line (a CSV file, a header) says what it is.
    const bool csv = n <= 2 && std::count(line.begin(), line.end(), ',') >= 2;
    return err->Set(
        BadKind::kFieldCount,
        fmt::format("expected {} tab-separated fields, found {}{}", kFields, n,
                    csv ? " (the line has commas: a CSV file? CSV and headed files are read "
                          "through a feature graph's views: docs/features.md)"
                        : ""));
  }
  b->BeginRow(label);
  for (uint32_t j = 0; j < kCriteoDense; ++j) {
    std::string_view v = f[first + j];
    if (v.empty()) continue;
    float x;
    if (!text_scan::ParseNumber(v, &x)) {
      return err->Set(BadKind::kBadNumber,
                      fmt::format("I{} '{}' is not a number", j + 1, text_scan::Clip(v)));
    }
    b->SetDense(j, x);
  }
  for (uint32_t s = 0; s < kCriteoSlots; ++s) {
    std::string_view v = f[first + kCriteoDense + s];
    if (!text_scan::ValidUtf8(v)) {
      return err->Set(BadKind::kBadUtf8, fmt::format("C{} is not valid UTF-8", s + 1));
    }
    // An empty field is a value of its own ("missing"), as in the reference model.
    b->AddKey(s, FeatureKey(KeySlotOf(opt.key_slots, s), v));
  }
  return true;
}

// Starts a row of a whitespace-tokenised format: reads the label (or, where labels are
// optional, accepts a line that starts with a feature) and leaves the first feature token in
// *t (*have_token false if there is none).
bool BeginTokenRow(const TextFormatOptions& opt, bool allow_minus_one, text_scan::Tokenizer* tok,
                   std::string_view* t, bool* have_token, BatchBuilder* b, LineError* err) {
  if (!tok->Next(t)) return err->Set(BadKind::kFieldCount, "empty line");
  float label = 0;
  *have_token = true;
  if (t->find(':') == std::string_view::npos) {
    if (!text_scan::ParseLabel(*t, allow_minus_one, &label)) {
      return err->Set(BadKind::kBadLabel, fmt::format("label '{}' is not {}", text_scan::Clip(*t),
                                                      allow_minus_one ? "0/1 or -1/+1" : "0 or 1"));
    }
    *have_token = tok->Next(t);
  } else if (!opt.labels_optional) {
    return err->Set(BadKind::kBadLabel, "line starts with a feature, not a label");
  }
  b->BeginRow(label);
  return true;
}

// libsvm and libfm: label idx:val ...      libffm: label field:idx:val ...
bool ParseSparse(std::string_view line, const TextFormatOptions& opt, bool fields, BatchBuilder* b,
                 LineError* err) {
  uint32_t position = 0;  // the token's place in the row (data.slot_from: position)
  text_scan::Tokenizer tok(line);
  std::string_view t;
  bool have_token;
  if (!BeginTokenRow(opt, /*allow_minus_one=*/true, &tok, &t, &have_token, b, err)) return false;
  const uint32_t num_slots = b->schema().num_slots;
  for (; have_token; have_token = tok.Next(&t)) {
    size_t c1 = t.find(':');
    size_t c2 = c1 == std::string_view::npos ? c1 : t.find(':', c1 + 1);
    uint32_t slot = 0;
    std::string_view idx, val;
    if (fields) {
      if (c2 == std::string_view::npos) {
        return err->Set(BadKind::kBadSlot,
                        fmt::format("token '{}' is not field:index:value", text_scan::Clip(t)));
      }
      uint64_t field;
      if (!ParseUint64(t.substr(0, c1), &field) || field >= num_slots) {
        return err->Set(BadKind::kBadSlot,
                        fmt::format("field '{}' is not in [0, {})",
                                    text_scan::Clip(t.substr(0, c1)), num_slots));
      }
      slot = static_cast<uint32_t>(field);
      idx = t.substr(c1 + 1, c2 - c1 - 1);
      val = t.substr(c2 + 1);
    } else {
      if (c1 == std::string_view::npos || c2 != std::string_view::npos) {
        return err->Set(BadKind::kBadSlot,
                        fmt::format("token '{}' is not index:value", text_scan::Clip(t)));
      }
      idx = t.substr(0, c1);
      val = t.substr(c1 + 1);
      if (opt.slot_from == SlotFrom::kPosition) {
        if (position >= num_slots) {
          return err->Set(BadKind::kBadSlot,
                          fmt::format("token {} of the row ('{}'), but data.num_slots is {} "
                                      "(data.slot_from: position)",
                                      position + 1, text_scan::Clip(t), num_slots));
        }
        slot = position++;
      }
    }
    uint64_t index;
    float weight;
    if (!ParseUint64(idx, &index)) {
      return err->Set(BadKind::kBadNumber,
                      fmt::format("index '{}' is not an unsigned integer", text_scan::Clip(idx)));
    }
    if (!text_scan::ParseNumber(val, &weight)) {
      return err->Set(BadKind::kBadNumber,
                      fmt::format("value '{}' is not a number", text_scan::Clip(val)));
    }
    b->AddKey(slot, FeatureKey(KeySlotOf(opt.key_slots, slot), index), weight);
  }
  return true;
}

// label [dense:v1,...,vD] slot:key ...
bool ParseSlots(std::string_view line, const TextFormatOptions& opt, BatchBuilder* b,
                LineError* err) {
  text_scan::Tokenizer tok(line);
  std::string_view t;
  bool have_token;
  if (!BeginTokenRow(opt, /*allow_minus_one=*/false, &tok, &t, &have_token, b, err)) return false;
  const Schema schema = b->schema();
  for (; have_token; have_token = tok.Next(&t)) {
    size_t c = t.find(':');
    if (c == std::string_view::npos) {
      return err->Set(BadKind::kBadSlot,
                      fmt::format("token '{}' is not slot:key", text_scan::Clip(t)));
    }
    std::string_view head = t.substr(0, c), rest = t.substr(c + 1);
    if (head == "dense") {
      uint32_t j = 0;
      for (std::string_view v : Split(rest, ',')) {
        float x;
        if (j >= schema.num_dense) {
          return err->Set(
              BadKind::kFieldCount,
              fmt::format("more than data.num_dense={} dense values", schema.num_dense));
        }
        if (!text_scan::ParseNumber(v, &x)) {
          return err->Set(BadKind::kBadNumber,
                          fmt::format("dense value '{}' is not a number", text_scan::Clip(v)));
        }
        b->SetDense(j++, x);
      }
      if (j != schema.num_dense) {
        return err->Set(
            BadKind::kFieldCount,
            fmt::format("{} dense values, expected data.num_dense={}", j, schema.num_dense));
      }
      continue;
    }
    uint64_t slot, key;
    if (!ParseUint64(head, &slot) || slot >= schema.num_slots) {
      return err->Set(BadKind::kBadSlot, fmt::format("slot '{}' is not in [0, {})",
                                                     text_scan::Clip(head), schema.num_slots));
    }
    if (!ParseUint64(rest, &key)) {
      return err->Set(BadKind::kBadNumber, fmt::format("key '{}' is not an unsigned 64-bit integer",
                                                       text_scan::Clip(rest)));
    }
    b->AddKey(static_cast<uint32_t>(slot),
              FeatureKey(KeySlotOf(opt.key_slots, static_cast<uint32_t>(slot)), key));
  }
  return true;
}

}  // namespace

void ResetParseResult(Schema schema, ChunkParseResult* result) {
  result->status = Status::OK();
  result->batch.Reset(schema);
  result->counts = RecordCounts{};
  result->samples.clear();
  result->bad_lines.clear();
}

void ParseTextChunk(const TextFormatOptions& opt, const TextChunk& chunk,
                    ChunkParseResult* result) {
  ResetParseResult(opt.schema, result);
  BatchBuilder builder(&result->batch);
  std::array<int, kNumBadKinds> sampled{};
  constexpr int kSamplesPerKind = 5;
  auto record_bad = [&](BadKind kind, uint64_t line_no, std::string detail) {
    ++result->counts.bad[static_cast<int>(kind)];
    result->bad_lines.push_back(line_no);
    if (sampled[static_cast<int>(kind)]++ < kSamplesPerKind) {
      result->samples.push_back(BadRecord{kind, chunk.file, line_no, std::move(detail)});
    }
  };

  const char* p = chunk.data.data();
  const char* end = p + chunk.data.size();
  uint64_t line_no = chunk.first_line;
  LineError err;
  for (; p < end; ++line_no) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (nl == nullptr) nl = end;
    std::string_view line(p, nl - p);
    p = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > opt.max_line_bytes) {
      record_bad(BadKind::kOverlongLine, line_no,
                 fmt::format("line of {} bytes exceeds data.max_line_bytes={}", line.size(),
                             opt.max_line_bytes));
      continue;
    }
    bool ok = false;
    switch (opt.format) {
      case DataFormat::kCriteo:
        ok = ParseCriteo(line, opt, &builder, &err);
        break;
      case DataFormat::kLibsvm:
      case DataFormat::kLibfm:
        ok = ParseSparse(line, opt, false, &builder, &err);
        break;
      case DataFormat::kLibffm:
        ok = ParseSparse(line, opt, true, &builder, &err);
        break;
      case DataFormat::kSlots:
        ok = ParseSlots(line, opt, &builder, &err);
        break;
      case DataFormat::kShards:
        break;
    }
    if (ok) {
      builder.EndRow();
      ++result->counts.good;
    } else {
      builder.AbortRow();
      // A line of another format: the first few say which format would read it.
      if (sampled[static_cast<int>(err.kind)] < kSamplesPerKind && err.kind != BadKind::kBadUtf8 &&
          err.kind != BadKind::kBadNumber) {
        const std::string other = GuessFormat(line);
        const std::string_view name = std::string_view(other).substr(0, other.find(' '));
        const bool same = name == DataFormatName(opt.format) ||
                          (name == "libfm" && opt.format == DataFormat::kLibsvm);
        if (!other.empty() && !same) {
          err.detail += fmt::format(" (the line reads as {}: --format {})", other, name);
        }
      }
      record_bad(err.kind, line_no, std::move(err.detail));
    }
  }
  for (uint64_t l : chunk.overlong_lines) {
    record_bad(BadKind::kOverlongLine, l,
               fmt::format("line exceeds data.max_line_bytes={}", opt.max_line_bytes));
  }
}

}  // namespace ctrbox
