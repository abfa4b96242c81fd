#include "feature/side_table.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "feature/view_parse.h"
#include "io/reader.h"
#include "util/hash.h"
#include "util/logging.h"

namespace ctrbox {

namespace {

uint64_t HashValue(ColType type, const void* cell, uint64_t h) {
  if (type == ColType::kInt) {
    return Mix64(h ^ static_cast<uint64_t>(*static_cast<const int64_t*>(cell)));
  }
  const Str& s = *static_cast<const Str*>(cell);
  return XXH3_64bits_withSeed(s.p, s.n, h);
}

bool EqualValue(ColType type, const void* a, const void* b) {
  if (type == ColType::kInt) {
    return *static_cast<const int64_t*>(a) == *static_cast<const int64_t*>(b);
  }
  return static_cast<const Str*>(a)->view() == static_cast<const Str*>(b)->view();
}

const void* Cell(const Column& c, uint32_t r) {
  return static_cast<const char*>(c.cells) + r * CellBytes(c.type);
}

}  // namespace

uint64_t SideTable::HashRow(const Column* const* cols, uint32_t r) const {
  uint64_t h = 0x5eed;
  for (size_t k = 0; k < view_->key.size(); ++k) h = HashValue(cols[k]->type, Cell(*cols[k], r), h);
  return Mix64(h);
}

uint64_t SideTable::HashKeyOf(const ColumnTable& t, const std::vector<int>& cols, uint32_t r,
                              bool* null) const {
  uint64_t h = 0x5eed;
  for (int c : cols) {
    const Column& col = t.cols[c];
    if (!col.valid[r]) {
      *null = true;
      return 0;
    }
    h = HashValue(col.type, Cell(col, r), h);
  }
  *null = false;
  return Mix64(h);
}

struct SideTable::Parts {
  std::vector<ColumnTable> tables;
  std::vector<std::string> files;  // the file of each part, for messages
};

Status SideTable::ReadParts(Env* env, const SideLoadOptions& options, RecordCounts* counts,
                            BadInputTracker* tracker, Parts* parts) {
  const SideView& view = *view_;
  DataOptions o;
  o.paths = view.paths;
  o.command = view.command;
  o.chunk_bytes = options.chunk_bytes;
  o.max_line_bytes = options.max_line_bytes;
  ASSIGN_OR_RETURN(auto source, OpenTextChunks(env, o));
  std::unique_ptr<ViewParser> parser;
  std::vector<std::string> header_fields;
  auto where = [&] { return "view " + view.name + ": "; };
  while (true) {
    auto chunk = std::make_unique<TextChunk>();
    bool eof = false;
    Status s = source->Next(chunk.get(), &eof);
    if (!s.ok()) return Status(s.code(), where() + s.message());
    if (eof) break;
    if (!parser) {
      if (view.layout.header && view.layout.format != ViewFormat::kJsonl) {
        const size_t nl = chunk->data.find('\n');
        header_fields = ViewParser::SplitHeader(
            view.layout, std::string_view(chunk->data)
                             .substr(0, nl == std::string::npos ? chunk->data.size() : nl));
      }
      auto p = ViewParser::Make(view.layout, header_fields);
      if (!p.ok()) {
        return InvalidArgumentError(
            fmt::format("{}{}: {}", where(), chunk->file, p.status().message()));
      }
      parser = std::make_unique<ViewParser>(std::move(*p));
    }
    ColumnTable part;
    ParseOutcome outcome;
    RETURN_IF_ERROR(parser->Parse(*chunk, 0, arena_.get(), 0, &part, &outcome));
    counts->Add(outcome.counts);
    Status added = tracker->Add(outcome.counts, outcome.samples);
    if (!added.ok()) return Status(added.code(), where() + added.message());
    texts_.push_back(std::make_unique<std::string>(std::move(chunk->data)));
    parts->tables.push_back(std::move(part));
    parts->files.push_back(chunk->file);
  }
  return Status::OK();
}

// One contiguous column per declared column.
Status SideTable::Concatenate(const Parts& parts) {
  uint64_t total = 0;
  for (const ColumnTable& p : parts.tables) total += p.rows;
  if (total >= UINT32_MAX) {
    return ResourceExhaustedError("view " + view_->name +
                                  ": more than 2^32 - 1 rows; a side view is held in memory");
  }
  const size_t ncols = view_->layout.columns.size();
  cols_.resize(ncols);
  for (size_t c = 0; c < ncols; ++c) {
    Column& col = cols_[c];
    col.type = view_->layout.columns[c].type;
    col.valid = arena_->Alloc<uint8_t>(total + 1);
    col.cells = arena_->Allocate((total + 1) * CellBytes(col.type));
    uint64_t at = 0;
    for (const ColumnTable& p : parts.tables) {
      std::memcpy(col.valid + at, p.cols[c].valid, p.rows);
      std::memcpy(static_cast<char*>(col.cells) + at * CellBytes(col.type), p.cols[c].cells,
                  p.rows * CellBytes(col.type));
      at += p.rows;
    }
  }
  rows_ = static_cast<uint32_t>(total);
  return Status::OK();
}

// The key index: the first row of each key; later ones are duplicate_key bad rows.
void SideTable::IndexKeys(const Parts& parts, RecordCounts* dup, std::vector<BadRecord>* samples,
                          uint64_t* null_keys) {
  const std::vector<ColumnTable>& tables = parts.tables;
  const uint64_t size = std::bit_ceil(std::max<uint64_t>(16, uint64_t{rows_} * 2));
  buckets_.assign(size, 0);
  mask_ = size - 1;
  std::vector<const Column*> key_cols;
  for (int k : view_->key) key_cols.push_back(&cols_[k]);
  uint64_t row_base = 0;
  size_t part_index = 0;
  // Where row r0 was read: "line L" when in `file`, else "file:line" (a sample's detail).
  auto where_row = [&](uint32_t r0, const std::string& file) {
    uint64_t base = 0;
    size_t p = 0;
    while (r0 >= base + tables[p].rows) base += tables[p++].rows;
    if (parts.files[p] == file) return fmt::format("line {}", tables[p].lines[r0 - base]);
    return fmt::format("{}:{}", parts.files[p], tables[p].lines[r0 - base]);
  };
  for (uint32_t r = 0; r < rows_; ++r) {
    while (r >= row_base + tables[part_index].rows) row_base += tables[part_index++].rows;
    const uint64_t line = tables[part_index].lines[r - row_base];
    bool null = false;
    for (const Column* c : key_cols) null |= !c->valid[r];
    if (null) {  // a row without a key can never be found: said in the load line
      ++*null_keys;
      continue;
    }
    const uint64_t h = HashRow(key_cols.data(), r);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint32_t s = buckets_[i];
      if (s == 0) {
        buckets_[i] = r + 1;
        break;
      }
      bool equal = true;
      for (const Column* c : key_cols) equal &= EqualValue(c->type, Cell(*c, s - 1), Cell(*c, r));
      if (equal) {
        dup->bad[static_cast<int>(BadKind::kDuplicateKey)]++;
        if (samples->size() < 5) {
          samples->push_back({BadKind::kDuplicateKey, parts.files[part_index], line,
                              fmt::format("view {}: the key of {} again (the first row is kept)",
                                          view_->name, where_row(s - 1, parts.files[part_index]))});
        }
        break;
      }
    }
  }
}

StatusOr<std::unique_ptr<SideTable>> SideTable::Load(Env* env, const SideView& view,
                                                     const SideLoadOptions& options,
                                                     RecordCounts* counts) {
  std::unique_ptr<SideTable> t(new SideTable());
  t->view_ = &view;
  t->arena_ = std::make_unique<Arena>();
  BadInputTracker tracker(options.bad_input);
  Parts parts;
  RETURN_IF_ERROR(t->ReadParts(env, options, counts, &tracker, &parts));
  RETURN_IF_ERROR(t->Concatenate(parts));
  RecordCounts dup;
  std::vector<BadRecord> samples;
  uint64_t null_keys = 0;
  t->IndexKeys(parts, &dup, &samples, &null_keys);
  auto where = [&] { return "view " + view.name + ": "; };
  // A duplicate row parsed well and was counted good: it is counted once, as bad.
  counts->good -= std::min(counts->good, dup.bad_total());
  counts->Add(dup);
  Status s = tracker.Reclassify(dup, samples);
  if (!s.ok()) return Status(s.code(), where() + s.message());
  s = tracker.Finish();
  if (!s.ok()) return Status(s.code(), where() + s.message());
  if (t->rows_ - dup.bad_total() - null_keys == 0 && !view.allow_empty) {
    return InvalidArgumentError(fmt::format(
        "{}{} has no rows with a key{}: every join on it would find nothing. Give it rows, or "
        "set allow_empty: true in features.views.{} if an empty view is meant",
        where(),
        view.paths.empty() ? "data.command `" + view.command + "`"
                           : fmt::format("{}", fmt::join(view.paths, ", ")),
        t->rows_ == 0 ? (view.layout.header ? " (a header at most)" : " (no lines)")
                      : fmt::format(" ({} rows, all with a null key)", t->rows_),
        view.name));
  }
  LOG_INFO("features: view {} loaded: {} rows, {} bad, {:.1f} MB", view.name,
           t->rows_ - dup.bad_total(), tracker.counts().bad_total(), t->MemoryBytes() / 1e6);
  if (null_keys > 0) {
    LOG_WARNING(
        "features: view {}: {} rows have no key (a null key column) and can never be "
        "joined",
        view.name, null_keys);
  }
  return t;
}

int64_t SideTable::Find(const ColumnTable& t, const std::vector<int>& cols, uint32_t r) const {
  bool null = false;
  const uint64_t h = HashKeyOf(t, cols, r, &null);
  if (null || rows_ == 0) return -1;
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const uint32_t s = buckets_[i];
    if (s == 0) return -1;
    bool equal = true;
    for (size_t k = 0; k < cols.size() && equal; ++k) {
      const Column& a = t.cols[cols[k]];
      equal = EqualValue(a.type, Cell(a, r), Cell(cols_[view_->key[k]], s - 1));
    }
    if (equal) return s - 1;
  }
}

size_t SideTable::MemoryBytes() const {
  size_t b = arena_->capacity() + buckets_.size() * sizeof(uint32_t);
  for (const auto& t : texts_) b += t->capacity();
  return b;
}

}  // namespace ctrbox
