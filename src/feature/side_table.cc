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

StatusOr<std::unique_ptr<SideTable>> SideTable::Load(Env* env, const SideView& view,
                                                     const SideLoadOptions& options,
                                                     RecordCounts* counts) {
  std::unique_ptr<SideTable> t(new SideTable());
  t->view_ = &view;
  t->arena_ = std::make_unique<Arena>();
  DataOptions o;
  o.paths = view.paths;
  o.command = view.command;
  o.chunk_bytes = options.chunk_bytes;
  o.max_line_bytes = options.max_line_bytes;
  ASSIGN_OR_RETURN(auto source, OpenTextChunks(env, o));
  BadInputTracker tracker(options.bad_input);
  std::unique_ptr<ViewParser> parser;
  std::vector<std::string> header_fields;
  std::vector<ColumnTable> parts;
  std::vector<std::string> part_files;  // the file of each part, for messages
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
    RETURN_IF_ERROR(parser->Parse(*chunk, 0, t->arena_.get(), 0, &part, &outcome));
    counts->Add(outcome.counts);
    Status added = tracker.Add(outcome.counts, outcome.samples);
    if (!added.ok()) return Status(added.code(), where() + added.message());
    t->texts_.push_back(std::make_unique<std::string>(std::move(chunk->data)));
    parts.push_back(std::move(part));
    part_files.push_back(chunk->file);
  }
  // One contiguous column per declared column.
  uint64_t total = 0;
  for (const ColumnTable& p : parts) total += p.rows;
  if (total >= UINT32_MAX) {
    return ResourceExhaustedError(where() +
                                  "more than 2^32 - 1 rows; a side view is held in memory");
  }
  const size_t ncols = view.layout.columns.size();
  t->cols_.resize(ncols);
  for (size_t c = 0; c < ncols; ++c) {
    Column& col = t->cols_[c];
    col.type = view.layout.columns[c].type;
    col.valid = t->arena_->Alloc<uint8_t>(total + 1);
    col.cells = t->arena_->Allocate((total + 1) * CellBytes(col.type));
    uint64_t at = 0;
    for (const ColumnTable& p : parts) {
      std::memcpy(col.valid + at, p.cols[c].valid, p.rows);
      std::memcpy(static_cast<char*>(col.cells) + at * CellBytes(col.type), p.cols[c].cells,
                  p.rows * CellBytes(col.type));
      at += p.rows;
    }
  }
  t->rows_ = static_cast<uint32_t>(total);
  // The key index: the first row of each key; later ones are duplicate_key bad rows.
  const uint64_t size = std::bit_ceil(std::max<uint64_t>(16, total * 2));
  t->buckets_.assign(size, 0);
  t->mask_ = size - 1;
  std::vector<const Column*> key_cols;
  for (int k : view.key) key_cols.push_back(&t->cols_[k]);
  RecordCounts dup;
  std::vector<BadRecord> samples;
  uint64_t null_keys = 0;
  uint64_t row_base = 0;
  size_t part_index = 0;
  // Where row r0 was read: "line L" when in `file`, else "file:line" (a sample's detail).
  auto where_row = [&](uint32_t r0, const std::string& file) {
    uint64_t base = 0;
    size_t p = 0;
    while (r0 >= base + parts[p].rows) base += parts[p++].rows;
    if (part_files[p] == file) return fmt::format("line {}", parts[p].lines[r0 - base]);
    return fmt::format("{}:{}", part_files[p], parts[p].lines[r0 - base]);
  };
  for (uint32_t r = 0; r < t->rows_; ++r) {
    while (r >= row_base + parts[part_index].rows) row_base += parts[part_index++].rows;
    const uint64_t line = parts[part_index].lines[r - row_base];
    bool null = false;
    for (const Column* c : key_cols) null |= !c->valid[r];
    if (null) {  // a row without a key can never be found: said in the load line
      ++null_keys;
      continue;
    }
    const uint64_t h = t->HashRow(key_cols.data(), r);
    for (uint64_t i = h & t->mask_;; i = (i + 1) & t->mask_) {
      const uint32_t s = t->buckets_[i];
      if (s == 0) {
        t->buckets_[i] = r + 1;
        break;
      }
      bool equal = true;
      for (const Column* c : key_cols) equal &= EqualValue(c->type, Cell(*c, s - 1), Cell(*c, r));
      if (equal) {
        dup.bad[static_cast<int>(BadKind::kDuplicateKey)]++;
        if (samples.size() < 5) {
          samples.push_back({BadKind::kDuplicateKey, part_files[part_index], line,
                             fmt::format("view {}: the key of {} again (the first row is kept)",
                                         view.name, where_row(s - 1, part_files[part_index]))});
        }
        break;
      }
    }
  }
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
