#include "feature/extractor.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "io/text_scan.h"
#include "util/hash.h"

namespace ctrbox {

namespace {

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The main view's header fields: the first line of the first file.
StatusOr<std::vector<std::string>> ReadHeader(Env* env, const ViewLayout& layout,
                                              const DataOptions& main) {
  if (layout.format == ViewFormat::kJsonl || !layout.header) return std::vector<std::string>{};
  if (!main.command.empty() || main.paths.empty()) {
    // A command's output is not read twice: it must start with the declared columns. (No
    // file: a server's records, in the declared order.)
    std::vector<std::string> names;
    for (const ViewColumn& c : layout.columns) names.push_back(c.name);
    return names;
  }
  // The file's first line, whichever part this rank reads.
  ASSIGN_OR_RETURN(const TextChunk chunk, ReadFirstChunk(env, main));
  if (chunk.data.empty()) return std::vector<std::string>{};
  const size_t nl = chunk.data.find('\n');
  return ViewParser::SplitHeader(
      layout,
      std::string_view(chunk.data).substr(0, nl == std::string::npos ? chunk.data.size() : nl));
}

// The key of a slot's item: keys read from a view as the slots format keys them, keys made by
// an operator as they are, any other value hashed with the slot's seed slot (util/hash.h
// FeatureKey; model.shared_slots maps a group's slots to its first).
uint64_t SlotKey(uint32_t seed_slot, const Column& c, uint32_t r, uint32_t i) {
  switch (c.type) {
    case ColType::kKeys:
      return FeatureKey(seed_slot, c.keys()[r].p[i]);
    case ColType::kHashed:
      return c.keys()[r].p[i];
    case ColType::kInt:
      return FeatureKey(seed_slot, static_cast<uint64_t>(c.ints()[r]));
    case ColType::kFloat:
      return FeatureKey(seed_slot, std::bit_cast<uint64_t>(c.floats()[r]));
    case ColType::kString:
      return FeatureKey(seed_slot, c.strs()[r].view());
    case ColType::kList:
      return FeatureKey(seed_slot, c.lists()[r].p[i].view());
    default:
      return 0;
  }
}

double NumberOf(const Column& c, uint32_t r) {
  return c.type == ColType::kInt ? static_cast<double>(c.ints()[r]) : c.floats()[r];
}

}  // namespace

StatusOr<std::shared_ptr<Extractor>> Extractor::Open(Env* env,
                                                     std::shared_ptr<const FeaturePlan> plan,
                                                     const DataOptions& main,
                                                     const Options& options) {
  std::shared_ptr<Extractor> x(new Extractor());
  x->plan_ = std::move(plan);
  x->options_ = options;
  const FeaturePlan& p = *x->plan_;
  SideLoadOptions side;
  side.chunk_bytes = options.chunk_bytes;
  side.max_line_bytes = options.max_line_bytes;
  side.bad_input = options.bad_input;
  for (const SideView& v : p.views) {
    ASSIGN_OR_RETURN(auto t, SideTable::Load(env, v, side, &x->side_counts_));
    x->sides_.push_back(std::move(t));
  }
  if (!main.paths.empty() || !main.command.empty() || options.serving) {
    ASSIGN_OR_RETURN(std::vector<std::string> header, ReadHeader(env, p.main, main));
    if (p.main.header && p.main.format != ViewFormat::kJsonl && header.empty()) {
      return InvalidArgumentError("features.main: the main view is empty (no header line)");
    }
    auto parser = ViewParser::Make(p.main, std::move(header));
    if (!parser.ok()) {
      return InvalidArgumentError(fmt::format("features.main ({}): {}",
                                              main.paths.empty() ? main.command : main.paths[0],
                                              parser.status().message()));
    }
    x->main_parser_ = std::make_unique<ViewParser>(std::move(*parser));
  }
  if (!options.id_column.empty()) {
    x->id_col_ = p.FindColumn(options.id_column);
    if (x->id_col_ < 0) {
      std::string names;
      for (const ViewColumn& c : p.main.columns) names += (names.empty() ? "" : ", ") + c.name;
      return InvalidArgumentError(
          fmt::format("--id-column {}: not a column of the feature graph (the main view's: {})",
                      options.id_column, names));
    }
    const ColType t = p.columns[x->id_col_].type;
    if (t != ColType::kInt && t != ColType::kString) {
      return InvalidArgumentError(
          fmt::format("--id-column {}: a {} column; an id is an int or "
                      "a string",
                      options.id_column, ColTypeName(t)));
    }
  }
  if (options.layer_threads > 1)
    x->layer_pool_ = std::make_unique<ThreadPool>(options.layer_threads);
  if (options.device != FeatureDevice::kCpu) {  // a GPU that is not there fails the job here
    ASSIGN_OR_RETURN(auto device, x->TakeDevice());
    x->GiveDevice(std::move(device));
  }
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].kind == OpKind::kJoin) x->joins_.push_back(static_cast<int>(i));
  }
  x->stats_.join_hits = std::make_unique<std::atomic<uint64_t>[]>(x->joins_.size() + 1);
  x->stats_.join_lookups = std::make_unique<std::atomic<uint64_t>[]>(x->joins_.size() + 1);
  return x;
}

Schema Extractor::schema() const {
  return Schema{static_cast<uint32_t>(plan_->slots.size()),
                static_cast<uint32_t>(plan_->dense.size())};
}

Status Extractor::ParseMain(const TextChunk& chunk, Arena* arena, ColumnTable* table,
                            ParseOutcome* outcome) const {
  if (!main_parser_) return FailedPreconditionError("the extractor was opened without a main view");
  table->cols.assign(plan_->columns.size(), Column{});
  return main_parser_->Parse(chunk, 0, arena, 0, table, outcome);
}

StatusOr<std::unique_ptr<DeviceLayers>> Extractor::TakeDevice() const {
  {
    std::lock_guard<std::mutex> l(device_mu_);
    if (!idle_devices_.empty()) {
      auto d = std::move(idle_devices_.back());
      idle_devices_.pop_back();
      return d;
    }
  }
  if (options_.device == FeatureDevice::kCuda) return NewCudaDeviceLayers(options_.fused);
  return NewEmulatedDeviceLayers(options_.fused);
}

void Extractor::GiveDevice(std::unique_ptr<DeviceLayers> d) const {
  std::lock_guard<std::mutex> l(device_mu_);
  if (device_name_.empty()) device_name_ = d->Describe();
  idle_devices_.push_back(std::move(d));
}

Status Extractor::RunOnDevice(DeviceLayers* device, ColumnTable* table, Arena* arena) const {
  const FeaturePlan& p = *plan_;
  device->BeginChunk(table->rows);
  const uint64_t before = device->launches();
  InlineExec cpu;
  std::vector<int> fixed, other;
  for (const std::vector<int>& layer : p.layers) {
    fixed.clear();
    other.clear();
    for (int id : layer) {
      AllocateOutput(p, p.ops[id], table->rows, arena, table);
      (IsFixedOp(p, p.ops[id]) ? fixed : other).push_back(id);
    }
    // The device's operators first: the errors it downloads are the layer's start.
    RETURN_IF_ERROR(device->RunLayer(p, fixed, table));
    const uint32_t rows = table->rows;
    cpu.ForBlocks((rows + kRowBlock - 1) / kRowBlock, [&](size_t b, int lane) {
      const uint32_t begin = static_cast<uint32_t>(b * kRowBlock);
      const uint32_t end = std::min<uint32_t>(rows, begin + kRowBlock);
      for (int id : other) RunOpRows(p, id, sides_, begin, end, arena, lane, table);
    });
  }
  stats_.launches += device->launches() - before;
  return Status::OK();
}

Status Extractor::RunGraph(ColumnTable* table, Arena* arena) const {
  if (options_.device != FeatureDevice::kCpu && options_.schedule == Schedule::kLayered) {
    ASSIGN_OR_RETURN(std::unique_ptr<DeviceLayers> device, TakeDevice());
    Status s = RunOnDevice(device.get(), table, arena);
    GiveDevice(std::move(device));
    return s;
  }
  if (options_.schedule == Schedule::kSequential) {
    RunSequential(*plan_, sides_, arena, table);
  } else if (layer_pool_) {
    PoolExec exec(layer_pool_.get());
    RunLayers(*plan_, sides_, &exec, arena, table);
  } else {
    InlineExec exec;
    RunLayers(*plan_, sides_, &exec, arena, table);
  }
  return Status::OK();
}

void Extractor::AppendRow(const ColumnTable& t, uint32_t row, double y, ChunkParseResult* r) const {
  const FeaturePlan& p = *plan_;
  const uint32_t num_slots = static_cast<uint32_t>(p.slots.size());
  Batch& b = r->batch;
  b.labels.push_back(static_cast<float>(y));
  for (int c : p.dense) {
    const Column& col = t.cols[c];
    b.dense.push_back(col.valid[row] ? static_cast<float>(NumberOf(col, row)) : 0.0f);
  }
  for (uint32_t slot = 0; slot < num_slots; ++slot) {
    const Column& col = t.cols[p.slots[slot]];
    const uint32_t n = ItemCount(col, row);
    const uint32_t seed = KeySlotOf(options_.key_slots, slot);
    for (uint32_t i = 0; i < n; ++i) b.keys.push_back(SlotKey(seed, col, row, i));
    b.offsets.push_back(static_cast<uint32_t>(b.keys.size()));
  }
  if (options_.serving) r->row_lines.push_back(t.lines[row]);
  if (id_col_ >= 0) {
    const Column& id = t.cols[id_col_];
    r->row_ids.push_back(!id.valid[row]             ? std::string()
                         : id.type == ColType::kInt ? std::to_string(id.ints()[row])
                                                    : std::string(id.strs()[row].view()));
  }
  for (int d : p.dedupes) {
    const Hash128 h = t.cols[p.ops[d].output].tags()[row];
    r->row_tags.push_back(h.lo);
    r->row_tags.push_back(h.hi);
  }
}

void Extractor::CountJoinHits(const ColumnTable& t) const {
  const FeaturePlan& p = *plan_;
  for (size_t j = 0; j < joins_.size(); ++j) {
    const Column& c = t.cols[p.ops[joins_[j]].output];
    uint64_t hits = 0;
    for (uint32_t row = 0; row < t.rows; ++row) hits += c.ints()[row] >= 0;
    stats_.join_hits[j] += hits;
    stats_.join_lookups[j] += t.rows;
  }
}

void Extractor::ExtractChunk(const TextChunk& chunk, ChunkParseResult* r) const {
  const FeaturePlan& p = *plan_;
  const Schema schema = this->schema();
  ResetParseResult(schema, r);
  r->row_tags.clear();
  r->row_ids.clear();
  r->row_lines.clear();
  thread_local std::unique_ptr<Arena> arena_holder;
  if (!arena_holder) arena_holder = std::make_unique<Arena>();
  Arena* arena = arena_holder.get();
  arena->Reset();

  const uint64_t t0 = NowNs();
  ColumnTable t;
  ParseOutcome outcome;
  Status s = ParseMain(chunk, arena, &t, &outcome);
  if (!s.ok()) {
    r->status = s;
    return;
  }
  const uint64_t t1 = NowNs();
  s = RunGraph(&t, arena);
  if (!s.ok()) {
    r->status = s;
    return;
  }
  const uint64_t t2 = NowNs();

  // Assemble: rows without errors that pass every filter, with a 0/1 label.
  r->counts = outcome.counts;
  r->samples = std::move(outcome.samples);
  const Column& label = t.cols[p.label];
  Batch& b = r->batch;
  b.labels.reserve(t.rows);
  b.dense.reserve(static_cast<size_t>(t.rows) * schema.num_dense);
  b.offsets.reserve(static_cast<size_t>(t.rows) * schema.num_slots + 1);
  uint64_t filtered = 0, bad = 0;
  std::array<int, kNumBadKinds> sampled{};
  for (const BadRecord& rec : r->samples) sampled[static_cast<int>(rec.kind)]++;
  auto add_bad = [&](uint32_t row, BadKind kind, std::string detail) {
    r->counts.bad[static_cast<int>(kind)]++;
    r->counts.good--;
    ++bad;
    if (sampled[static_cast<int>(kind)]++ < 5) {
      r->samples.push_back({kind, chunk.file, t.lines[row], std::move(detail)});
    }
  };
  for (uint32_t row = 0; row < t.rows; ++row) {
    if (t.errors[row] != 0) {
      const OpNode& op = p.ops[t.errors[row] - 1];
      add_bad(row, ErrorKind(op), ErrorDetail(p, op, t, row));
      continue;
    }
    const double y = options_.serving ? 0 : label.valid[row] ? NumberOf(label, row) : -1;
    if (y != 0 && y != 1) {
      add_bad(row, BadKind::kBadLabel,
              label.valid[row]
                  ? fmt::format("label {} is {}, expected 0 or 1", p.columns[p.label].name, y)
                  : fmt::format("label {} is missing", p.columns[p.label].name));
      continue;
    }
    bool keep = true;
    for (int f : p.filters) keep &= t.cols[p.ops[f].output].ints()[row] != 0;
    if (!keep) {
      ++filtered;
      continue;
    }
    uint64_t row_keys = 0;
    uint32_t widest = 0, widest_keys = 0;
    for (uint32_t slot = 0; slot < schema.num_slots; ++slot) {
      const uint32_t n = ItemCount(t.cols[p.slots[slot]], row);
      row_keys += n;
      if (n > widest_keys) {
        widest = slot;
        widest_keys = n;
      }
    }
    if (row_keys > p.max_row_keys) {
      add_bad(row, BadKind::kTooManyKeys,
              fmt::format("the row makes {} keys, more than features.max_row_keys {} (slot {} "
                          "makes {})",
                          row_keys, p.max_row_keys, p.columns[p.slots[widest]].name, widest_keys));
      continue;
    }
    AppendRow(t, row, y, r);
  }
  // In line order, parse errors and operators' alike: the tracker's "first" is the first.
  std::stable_sort(r->samples.begin(), r->samples.end(),
                   [](const BadRecord& a, const BadRecord& b) { return a.line < b.line; });
  CountJoinHits(t);
  const uint64_t t3 = NowNs();
  stats_.chunks++;
  stats_.rows_in += t.rows;
  stats_.rows_out += b.rows();
  stats_.filtered += filtered;
  stats_.bad_rows += bad;
  stats_.parse_ns += t1 - t0;
  stats_.graph_ns += t2 - t1;
  stats_.assemble_ns += t3 - t2;
}

ExtractTotals ExtractTotals::Since(const ExtractTotals& e) const {
  ExtractTotals d = *this;
  d.chunks -= e.chunks;
  d.rows_in -= e.rows_in;
  d.rows_out -= e.rows_out;
  d.filtered -= e.filtered;
  d.duplicates -= e.duplicates;
  d.bad_rows -= e.bad_rows;
  d.parse_seconds -= e.parse_seconds;
  d.graph_seconds -= e.graph_seconds;
  d.assemble_seconds -= e.assemble_seconds;
  d.device_launches -= e.device_launches;
  for (size_t j = 0; j < d.join_hits.size() && j < e.join_hits.size(); ++j) {
    d.join_hits[j] -= e.join_hits[j];
    d.join_lookups[j] -= e.join_lookups[j];
  }
  return d;
}

void ExtractTotals::Add(const ExtractTotals& m) {
  chunks += m.chunks;
  rows_in += m.rows_in;
  rows_out += m.rows_out;
  filtered += m.filtered;
  duplicates += m.duplicates;
  bad_rows += m.bad_rows;
  parse_seconds += m.parse_seconds;
  graph_seconds += m.graph_seconds;
  assemble_seconds += m.assemble_seconds;
  device_launches += m.device_launches;
  join_hits.resize(std::max(join_hits.size(), m.join_hits.size()));
  join_lookups.resize(join_hits.size());
  for (size_t j = 0; j < m.join_hits.size(); ++j) {
    join_hits[j] += m.join_hits[j];
    join_lookups[j] += m.join_lookups[j];
  }
  device = m.device;
  side_rows = m.side_rows;
  side_bytes = m.side_bytes;
  side_counts = m.side_counts;
}

ExtractTotals Extractor::totals() const {
  ExtractTotals x;
  x.chunks = stats_.chunks;
  x.rows_in = stats_.rows_in;
  x.rows_out = stats_.rows_out;
  x.filtered = stats_.filtered;
  x.duplicates = stats_.duplicates;
  x.bad_rows = stats_.bad_rows;
  x.parse_seconds = stats_.parse_ns / 1e9;
  x.graph_seconds = stats_.graph_ns / 1e9;
  x.assemble_seconds = stats_.assemble_ns / 1e9;
  x.device_launches = stats_.launches;
  {
    std::lock_guard<std::mutex> l(device_mu_);
    x.device = options_.device == FeatureDevice::kCpu ? "cpu" : device_name_;
  }
  for (size_t j = 0; j < joins_.size(); ++j) {
    x.join_hits.push_back(stats_.join_hits[j]);
    x.join_lookups.push_back(stats_.join_lookups[j]);
  }
  for (const auto& s : sides_) {
    x.side_rows += s->rows();
    x.side_bytes += s->MemoryBytes();
  }
  x.side_counts = side_counts_;
  return x;
}

// The stream-wide dedupe: in input order, a row whose tag a dedupe has seen is dropped.
class DedupeStep {
 public:
  explicit DedupeStep(std::shared_ptr<Extractor> x)
      : x_(std::move(x)), seen_(x_->plan().dedupes.size()) {}

  Status operator()(ChunkParseResult* r) {
    const size_t k = seen_.size();
    if (k == 0) return Status::OK();
    Batch& b = r->batch;
    const size_t rows = b.rows();
    std::vector<uint8_t> keep(rows, 1);
    uint64_t dropped = 0;
    for (size_t row = 0; row < rows; ++row) {
      const uint64_t* tags = &r->row_tags[row * 2 * k];
      bool dup = false;
      for (size_t d = 0; d < k && !dup; ++d)
        dup = seen_[d].count({tags[2 * d], tags[2 * d + 1]}) > 0;
      if (dup) {
        keep[row] = 0;
        ++dropped;
        continue;
      }
      for (size_t d = 0; d < k; ++d) seen_[d].insert({tags[2 * d], tags[2 * d + 1]});
    }
    if (dropped == 0) return Status::OK();
    Batch out;
    out.Reset(b.schema);
    size_t row = 0;
    while (row < rows) {
      if (!keep[row]) {
        ++row;
        continue;
      }
      size_t end = row;
      while (end < rows && keep[end]) ++end;
      out.AppendRows(b, row, end);
      row = end;
    }
    b = std::move(out);
    if (!r->row_ids.empty()) {  // the ids of the rows kept, in order
      size_t w = 0;
      for (size_t i = 0; i < rows; ++i) {
        if (!keep[i]) continue;
        if (w != i) r->row_ids[w] = std::move(r->row_ids[i]);  // (a self-move empties it)
        ++w;
      }
      r->row_ids.resize(w);
    }
    x_->stats_.duplicates += dropped;
    x_->stats_.rows_out -= dropped;
    return Status::OK();
  }

 private:
  struct TagHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& t) const { return t.first; }
  };
  std::shared_ptr<Extractor> x_;
  std::vector<std::unordered_set<std::pair<uint64_t, uint64_t>, TagHash>> seen_;
};

Status Extractor::CheckHeaders(Env* env, const DataOptions& data) const {
  const ViewLayout& main = plan_->main;
  if (main_parser_ == nullptr || main.format == ViewFormat::kJsonl || !main.header ||
      !data.command.empty()) {
    return Status::OK();
  }
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   ExpandDataPaths(env, data.paths, DataFormat::kCriteo));
  for (const std::string& f : files) {
    DataOptions one = data;
    one.paths = {f};
    ASSIGN_OR_RETURN(std::vector<std::string> header, ReadHeader(env, main, one));
    // A file without a header (line 1 names none of the columns) is data, as Parse reads it.
    if (header != main_parser_->header() &&
        ViewParser::NamesTheColumns(main, header) != ViewParser::Names::kNone) {
      std::string names;
      for (const std::string& h : header) names += (names.empty() ? "" : ",") + h;
      return InvalidArgumentError(fmt::format(
          "{}:1: the header differs from the main view's first file's (every file of "
          "features.main has the same columns in the same order, held-out ones too): it "
          "reads '{}'",
          f, text_scan::Clip(names)));
    }
  }
  return Status::OK();
}

std::function<Status(ChunkParseResult*)> Extractor::InOrderStep(std::shared_ptr<Extractor> x) {
  if (x->plan().dedupes.empty()) return nullptr;
  auto step = std::make_shared<DedupeStep>(std::move(x));
  return [step](ChunkParseResult* r) { return (*step)(r); };
}

StatusOr<std::unique_ptr<BatchReader>> OpenFeatureReader(Env* env, const DataOptions& data,
                                                         std::shared_ptr<Extractor> extractor) {
  ChunkDecoder d;
  d.schema = extractor->schema();
  d.decode = [extractor](const TextChunk& c, ChunkParseResult* r) {
    extractor->ExtractChunk(c, r);
  };
  d.in_order = Extractor::InOrderStep(extractor);
  return OpenTextReaderWith(env, data, std::move(d));
}

}  // namespace ctrbox
