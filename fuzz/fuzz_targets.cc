#include "fuzz/fuzz_targets.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <memory>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/model_dir.h"
#include "ckpt/serving_files.h"
#include "feature/extractor.h"
#include "feature/graph.h"
#include "io/compressed_file.h"
#include "io/line_chunker.h"
#include "io/partitions.h"
#include "io/shard.h"
#include "io/shard_dir.h"
#include "io/text_format.h"
#include "serve/infer.h"
#include "table/param_file.h"
#include "table/ssd_store.h"
#include "table/tiered_table.h"
#include "util/coding.h"
#include "util/crc32c.h"
#include "util/hash.h"
#include "util/mem_env.h"
#include "util/random.h"

namespace ctrbox {
namespace {

thread_local bool accepted = false;  // the last input parsed without an error

std::string Bytes(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A file system holding `contents` at `path`.
std::unique_ptr<MemEnv> EnvWith(const std::string& path, const std::string& contents) {
  auto env = std::make_unique<MemEnv>();
  env->CreateDirs(DirName(path)).IgnoreError();
  auto f = env->NewWritableFile(path);
  if (f.ok()) {
    (*f)->Append(contents).IgnoreError();
    (*f)->Close().IgnoreError();
  }
  return env;
}

// A small valid model directory, saved once: its MANIFEST and dense file, the sparse file's
// name, and the sparse file's bytes (the corpus seed).
struct ModelTemplate {
  std::string manifest, dense, dense_name, sparse_name, sparse;
};

const ModelTemplate& Model() {
  static const ModelTemplate t = [] {
    ModelTemplate m;
    MemEnv env;
    ModelSpec spec;
    spec.schema = Schema{3, 2};
    spec.model.embedding_dim = 4;
    spec.model.mlp = {8};
    CtrModel model(spec.schema, spec.model, spec.sparse_optimizer, spec.dense_optimizer, 1);
    TieredOptions o;
    o.layout = model.value_layout();
    o.stripe_bits = 1;
    auto table = std::move(TieredTable::Open(&env, o).value());
    CtrAccessor acc(o.layout, spec.table);
    RowBlock rows(o.layout);
    rows.Resize(40);
    for (size_t i = 0; i < rows.size(); ++i) {
      acc.InitRow(&rows, i, Mix64(i));
      if (i % 5 == 0) rows.flags(i) = 0;
    }
    table->Insert(rows, nullptr).IgnoreError();
    auto saved = SaveModel(&env, "/m", spec, *table, model, 40, nullptr);
    if (!saved.ok()) std::abort();
    m.sparse_name = saved->files[0].name;
    m.dense_name = saved->files[1].name;
    m.manifest = *env.Contents("/m/MANIFEST");
    m.dense = *env.Contents("/m/" + m.dense_name);
    m.sparse = *env.Contents("/m/" + m.sparse_name);
    return m;
  }();
  return t;
}

}  // namespace

bool LastInputAccepted() { return accepted; }

int FuzzTextInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static constexpr DataFormat kFormats[] = {DataFormat::kCriteo, DataFormat::kLibsvm,
                                            DataFormat::kLibffm, DataFormat::kSlots};
  TextFormatOptions o;
  o.format = kFormats[data[0] % 4];
  o.labels_optional = (data[0] >> 2) & 1;
  o.slot_from = (data[0] >> 3) & 1 ? SlotFrom::kPosition : SlotFrom::kOne;  // libsvm's two ways
  o.schema = SchemaForFormat(o.format, 1 + data[1] % 64, data[2] % 16, o.slot_from);
  o.max_line_bytes = 1024;  // so overlong lines are exercised too
  auto env = EnvWith("/in.txt", Bytes(data + 3, size - 3));
  auto raw = env->NewSequentialFile("/in.txt");
  if (!raw.ok()) return 0;
  accepted = false;
  auto file = OpenDecompressed(std::move(*raw));  // gzip / zstd / plain, as the reader does
  if (!file.ok()) return 0;
  LineChunker chunker(std::move(*file), 64, o.max_line_bytes);
  ChunkParseResult result;
  accepted = true;
  for (int i = 0; i < 10000; ++i) {
    TextChunk chunk;
    bool eof = false;
    if (!chunker.Next(&chunk, &eof).ok()) accepted = false;
    if (!accepted || eof) break;
    ParseTextChunk(o, chunk, &result);
    // A good record is a row of the batch.
    if (result.batch.rows() != result.counts.good) std::abort();
    if (result.counts.bad_total() > 0) accepted = false;
  }
  return 0;
}

namespace {

// Reads every row of /in.txt through the plan's extract stage (one reader thread, small
// chunks). True when the whole input was read with nothing malformed.
bool ExtractAll(MemEnv* env, std::shared_ptr<const FeaturePlan> plan) {
  Extractor::Options xo;
  xo.chunk_bytes = 64;
  xo.max_line_bytes = 1024;
  xo.bad_input.max_error_rate = 1.0;
  DataOptions d;
  d.paths = {"/in.txt"};
  d.chunk_bytes = 64;
  d.max_line_bytes = 1024;
  d.bad_input.max_error_rate = 1.0;
  auto x = Extractor::Open(env, plan, d, xo);
  if (!x.ok()) return false;
  auto reader = OpenFeatureReader(env, d, *x);
  if (!reader.ok()) return false;
  for (int i = 0; i < 100000; ++i) {
    Batch b;
    bool eof = false;
    if (!(*reader)->Next(&b, &eof).ok()) return false;
    if (eof) break;
    // Every row has a label of 0 or 1 and one offset per slot.
    if (b.offsets.size() != b.rows() * b.schema.num_slots + 1) std::abort();
    for (float y : b.labels) {
      if (y != 0 && y != 1) std::abort();
    }
  }
  const ExtractTotals t = (*x)->totals();
  if (t.rows_out + t.filtered + t.duplicates + t.bad_rows != t.rows_in) std::abort();
  return (*reader)->counts().bad_total() == 0;
}

}  // namespace

int FuzzFeatureView(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const char* kFormats[] = {"csv", "tsv", "jsonl"};
  const char* format = kFormats[data[0] % 3];
  const bool header = (data[0] >> 2) & 1;
  const std::string yaml = fmt::format(R"(
main:
  format: {}
  header: {}
  columns: {{a: int, b: float, c: string, d: keys, y: int}}
ops:
  - {{name: j, op: json_field, input: c, path: p.q, type: string}}
  - {{name: n, op: cast, input: b, to: int}}
  - {{name: parts, op: split, input: c, sep: "|"}}
  - {{name: last, op: last_n, input: parts, n: 2}}
  - {{name: x, op: cross, inputs: [parts, a, d], max_keys: 100}}
  - {{name: t, op: time_part, input: a, part: month, range: any}}
  - {{name: bb, op: bucketize, input: b, boundaries: [0, 1]}}
  - {{op: filter, input: j, cmp: "!=", value: drop}}
  - {{op: dedupe, inputs: [a, c]}}
label: y
slots: [x, last, t, bb, j, n, d]
dense: [b]
)",
                                       format, header ? "true" : "false");
  auto plan = ParseFeatures(YAML::Load(yaml), "fuzz.yaml");
  if (!plan.ok()) std::abort();
  auto env = EnvWith("/in.txt", Bytes(data + 1, size - 1));
  accepted = ExtractAll(env.get(), *plan);
  return 0;
}

int FuzzFeatureGraph(const uint8_t* data, size_t size) {
  accepted = false;
  YAML::Node node;
  try {
    node = YAML::Load(Bytes(data, size));
  } catch (const YAML::Exception&) {
    return 0;
  }
  auto plan = ParseFeatures(node, "fuzz.yaml");
  if (!plan.ok()) return 0;
  const FeaturePlan& p = **plan;
  (void)p.Describe();
  (void)p.Fingerprint();
  if (!p.views.empty() || p.main.columns.size() > 64) return 0;  // side views need files
  // Rows of every declared column's type, through the graph.
  std::string text;
  if (p.main.header && p.main.format != ViewFormat::kJsonl) {
    for (size_t c = 0; c < p.main.columns.size(); ++c) {
      text += (c ? std::string(1, p.main.sep()) : "") + p.main.columns[c].name;
    }
    text += "\n";
  }
  static const char* kStrings[] = {"{\"\"a\"\": {\"\"b\"\": 3}}", "x|y|z", "17", "", "-2.5"};
  for (int r = 0; r < 24; ++r) {
    if (p.main.format == ViewFormat::kJsonl) text += "{";
    for (size_t c = 0; c < p.main.columns.size(); ++c) {
      const ViewColumn& col = p.main.columns[c];
      std::string v;
      switch (col.type) {
        case ColType::kInt:
          v = std::to_string(r % 2 == 0 ? r % 2 : r * 3600 * 24 * 13 - 5000);
          break;
        case ColType::kFloat:
          v = std::to_string(r * 0.75 - 3);
          break;
        case ColType::kKeys:
          v = r % 3 ? std::to_string(r) + " 9" : "";
          break;
        default:
          v = kStrings[r % 5];
      }
      if (p.main.format == ViewFormat::kJsonl) {
        if (col.type == ColType::kString || col.type == ColType::kKeys) {
          std::string q;
          for (char ch : v) {
            if (ch == '"' || ch == '\\') q += '\\';
            q += ch;
          }
          v = "\"" + q + "\"";
          if (col.type == ColType::kString && r % 5 == 0) v = "{\"a\": {\"b\": 3}}";
        }
        if (v.empty()) v = "null";
        text += (c ? ", " : "") + fmt::format("\"{}\": {}", col.name, v);
      } else {
        if (p.main.format == ViewFormat::kCsv && col.type == ColType::kString && r % 5 == 0) {
          v = "\"" + v + "\"";
        } else if (p.main.format == ViewFormat::kTsv && col.type == ColType::kString &&
                   r % 5 == 0) {
          v = "{\"a\": {\"b\": 3}}";
        }
        text += (c ? std::string(1, p.main.sep()) : "") + v;
      }
    }
    text += p.main.format == ViewFormat::kJsonl ? "}\n" : "\n";
  }
  auto env = EnvWith("/in.txt", text);
  ExtractAll(env.get(), *plan);
  accepted = true;
  return 0;
}

int FuzzShardManifest(const uint8_t* data, size_t size) {
  accepted = false;
  auto m = DecodeShardManifest(Bytes(data, size), "SHARDS");
  if (!m.ok()) return 0;
  // What decodes re-encodes to the same bytes (the format has one spelling).
  if (EncodeShardManifest(*m) != Bytes(data, size)) std::abort();
  accepted = true;
  return 0;
}

int FuzzShard(const uint8_t* data, size_t size) {
  accepted = false;
  auto env = EnvWith("/s.shard", Bytes(data, size));
  auto source = ShardBlockSource::Open(env.get(), "/s.shard");
  if (!source.ok()) return 0;
  ChunkParseResult result;
  for (int i = 0; i < 10000; ++i) {
    TextChunk chunk;
    bool eof = false;
    if (!(*source)->Next(&chunk, &eof).ok()) break;
    if (eof) {
      accepted = true;
      break;
    }
    DecodeShardBlock((*source)->schema(), chunk, &result);
    if (!result.status.ok()) break;
  }
  return 0;
}

int FuzzManifest(const uint8_t* data, size_t size) {
  // The checksum line is appended, so the JSON and spec parsers behind it are fuzzed.
  std::string text = Bytes(data, size);
  text += fmt::format("#checksum {:016x}\n", Checksum64(text));
  auto env = EnvWith("/m/MANIFEST", text);
  auto m = ReadManifest(env.get(), "/m");
  accepted = m.ok();
  if (m.ok()) VerifyModel(env.get(), "/m").status().IgnoreError();  // no files: an error
  return 0;
}

int FuzzCheckpointManifest(const uint8_t* data, size_t size) {
  // As FuzzManifest: the checksum line is appended so the JSON, the chain fields and the spec
  // behind it are what gets fuzzed. Its files are absent: verifying must fail cleanly.
  std::string text = Bytes(data, size);
  text += fmt::format("#checksum {:016x}\n", Checksum64(text));
  auto env = EnvWith("/c/ckpt-000002/MANIFEST", text);
  auto m = ReadCheckpointManifest(env.get(), "/c", 2);
  accepted = m.ok();
  if (m.ok()) InspectCheckpoints(env.get(), "/c").status().IgnoreError();
  return 0;
}

int FuzzServingDonefile(const uint8_t* data, size_t size) {
  const std::string text = Bytes(data, size);
  auto env = EnvWith("/s/versions.jsonl", text);
  auto versions = ReadServingVersions(env.get(), "/s");
  accepted = versions.ok();
  if (versions.ok() && !versions->empty()) {
    if (LoadServingState(env.get(), "/s", versions->back().version).ok()) std::abort();
  }
  auto layout = PartitionLayout::Parse(text.substr(0, std::min<size_t>(text.find('\n'), 64)));
  accepted = accepted || layout.ok();
  if (layout.ok()) {
    for (int64_t o : {int64_t{0}, int64_t{490000}, int64_t{-5}}) {
      const std::string name = layout->Name(o);
      const std::optional<int64_t> back = layout->Ordinal(name);
      if (o >= 0 && back != o) std::abort();  // a name parses back to its partition
    }
  }
  return 0;
}

int FuzzModelSparse(const uint8_t* data, size_t size) {
  const ModelTemplate& t = Model();
  auto env = EnvWith("/m/MANIFEST", t.manifest);
  for (const auto& [name, bytes] :
       {std::pair{t.dense_name, t.dense}, std::pair{t.sparse_name, Bytes(data, size)}}) {
    auto f = env->NewWritableFile("/m/" + name);
    if (!f.ok()) return 0;
    (*f)->Append(bytes).IgnoreError();
  }
  auto m = VerifyModel(env.get(), "/m");
  accepted = m.ok();
  // Only the exact saved bytes verify.
  if (m.ok() && Bytes(data, size) != t.sparse) std::abort();
  return 0;
}

int FuzzGroupRecord(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  // data[0]: layout (quantization); data[1..3]: group, the record's file offset and row count;
  // the rest: the payload (segments cut at the offset's pages; their CRCs are fixed up below,
  // so that the parser behind them is fuzzed).
  ValueLayout layout{4, data[0] & 1 ? 4u : 0u, data[0] & 2 ? 1u : 0u};
  if (data[0] & 4) layout.quant_bits = data[0] & 8 ? 16 : 8;
  const uint32_t group_bits = 4, group = data[1] & 15, rows = data[2] | (data[3] & 1) << 8;
  const uint64_t offset = 40 + static_cast<uint64_t>(data[1] >> 4) * 252 + (data[3] >> 1) * 4;
  const std::string payload = Bytes(data + 4, size - 4);
  std::string rec = "GREC";
  PutFixed<uint32_t>(&rec, group);
  PutFixed<uint32_t>(&rec, rows);
  PutFixed<uint32_t>(&rec, static_cast<uint32_t>(payload.size()));
  PutFixed<uint32_t>(&rec, Crc32c(rec.data(), rec.size()));
  rec += payload;
  const size_t page = PageBytes(layout);
  const size_t pieces = RecordPieces(offset, rec.size(), page);
  for (size_t i = 0; i < pieces; ++i) {
    const PieceSpan span = RecordPiece(offset, rec.size(), page, i);
    const size_t at = span.begin - offset + (i == 0 ? kRecordHeaderBytes : 0);
    const size_t end = span.end - offset;
    if (end < at + kSegmentHeaderBytes) continue;
    const uint32_t bytes = GetFixed<uint32_t>(rec.data() + at + 12);
    if (bytes > end - at - kSegmentHeaderBytes) continue;
    const uint32_t crc = Crc32c(rec.data() + at + 4, 12 + bytes);
    std::memcpy(rec.data() + at, &crc, 4);
  }
  accepted = false;
  RecordView view;
  view.bytes = rec;
  if (view.Parse(layout, group_bits, group, offset, page).ok()) {
    accepted = true;
    RowBlock out(layout);
    out.Resize(view.rows());
    for (size_t i = 0; i < view.rows(); ++i) {
      if (!view.DecodeRow(i, &out, i).ok()) std::abort();  // Parse accepted every row
    }
  }
  // Any piece alone: verified or refused, never read past what was read.
  for (size_t i = 0; i < pieces; ++i) {
    const PieceSpan span = RecordPiece(offset, rec.size(), page, i);
    RecordView part;
    part.bytes = rec.substr(span.begin - offset, span.end - span.begin);
    if (!part.ParsePieces(layout, group_bits, group, offset, rec.size(), page, PieceRange{i, i})
             .ok()) {
      continue;
    }
    RowBlock out(layout);
    out.Resize(part.rows());
    for (size_t r = 0; r < part.rows(); ++r) {
      if (!part.DecodeRow(r, &out, r).ok()) std::abort();
    }
  }
  return 0;
}

int FuzzStoreIndex(const uint8_t* data, size_t size) {
  // The trailing checksum is appended, so the parser behind it is fuzzed.
  std::string text = Bytes(data, size);
  PutFixed<uint64_t>(&text, Checksum64(text));
  auto env = EnvWith("/store/INDEX", text);
  accepted = SsdStore::Inspect(env.get(), "/store").ok();
  return 0;
}

std::vector<std::string> BuiltInSeeds(const std::string& target) {
  if (target == "model_sparse") return {Model().sparse};
  if (target == "shard_manifest") {
    ShardDirManifest m;
    m.schema = {39, 13};
    m.files = {{"part-00000.ctrshard", 50000, 1234567}, {"part-00001.ctrshard", 17, 999}};
    return {EncodeShardManifest(m)};
  }
  if (target == "manifest") {
    const std::string& m = Model().manifest;
    return {m.substr(0, m.rfind("#checksum "))};
  }
  if (target == "group_record") {
    // data[0] selects the layout (see FuzzGroupRecord): 0 = float32 without state, 4 = 8-bit;
    // data[1] the group (5) and, in its top bits with data[3]'s, the record's file offset (the
    // last seed's crosses a page: two pieces).
    std::vector<std::string> seeds;
    for (const auto& [sel, place] :
         {std::pair<uint8_t, uint8_t>{0, 0}, {4, 0}, {15, 0}, {15, 0xF0}}) {
      ValueLayout layout{4, sel & 1 ? 4u : 0u, sel & 2 ? 1u : 0u};
      if (sel & 4) layout.quant_bits = sel & 8 ? 16 : 8;
      CtrAccessor acc(layout, AccessorOptions{});
      RowBlock rows(layout);
      const uint32_t want = place ? 6 : 3;
      rows.Resize(want);
      RecordBuilder b;
      b.Reset(5);
      uint32_t n = 0;
      for (uint64_t k = 0; n < want && k < 1000; ++k) {
        const uint64_t key = Mix64(k);
        if ((Mix64(key) >> (64 - 4)) != 5) continue;  // group 5 of 2^4
        acc.InitRow(&rows, n, key);
        if (n == 1) rows.flags(n) = 0;
        b.AddRow(rows, n++);
      }
      const uint8_t d3 = place ? 60 : 0;  // offset 40 + 15 * 252 + 30 * 4 = 3940
      const uint64_t offset = 40 + static_cast<uint64_t>(place >> 4) * 252 + (d3 >> 1) * 4;
      const std::string_view rec = b.Lay(offset, PageBytes(layout), nullptr);
      std::string s(1, static_cast<char>(sel));
      s += static_cast<char>(5 | place);
      s += static_cast<char>(n);
      s += static_cast<char>(d3);
      s += rec.substr(kRecordHeaderBytes);
      seeds.push_back(s);
    }
    return seeds;
  }
  if (target == "store_index") {
    MemEnv env;
    TieredOptions o;
    o.layout = ValueLayout{4, 4, 1};
    o.stripe_bits = 1;
    o.memory_budget = 1 << 20;
    o.ssd.dir = "/store";
    o.ssd.group_bits = 2;
    o.ssd.file_bytes = 4096;
    auto table = TieredTable::Open(&env, o);
    if (!table.ok()) return {};
    CtrAccessor acc(o.layout, AccessorOptions{});
    RowBlock rows(o.layout);
    rows.Resize(20);
    for (size_t i = 0; i < rows.size(); ++i) acc.InitRow(&rows, i, Mix64(i));
    (*table)->Insert(rows, nullptr).IgnoreError();
    (*table)->EvictAll().IgnoreError();
    if (!(*table)->Close().ok()) return {};
    auto index = env.Contents("/store/INDEX");
    if (!index.ok()) return {};
    return {index->substr(0, index->size() - 8)};  // without the checksum the target appends
  }
  return {};
}

int FuzzInferRequest(const uint8_t* data, size_t size) {
  static const ServedVersion* const version = [] {
    auto* v = new ServedVersion;
    v->version = 1;
    v->spec.schema = Schema{26, 13};
    return v;
  }();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t nul = bytes.find('\0');
  const std::string_view json = bytes.substr(0, nul);
  const std::string_view binary = nul == std::string_view::npos ? "" : bytes.substr(nul + 1);
  auto req = ParseInferRequest(json, binary, *version);
  accepted = req.ok();
  if (!req.ok()) {
    if (req.status().code() != StatusCode::kInvalidArgument) std::abort();  // named, as a 400
    return 0;
  }
  const std::vector<float> p(req->rows.rows(), 0.5f);
  std::string out;
  auto json_bytes = InferResponse("m", *version, *req, p, &out);
  if (!json_bytes.ok() || *json_bytes > out.size()) std::abort();
  return 0;
}

const std::vector<FuzzTarget>& FuzzTargets() {
  static const std::vector<FuzzTarget> targets = {
      {"text_input", FuzzTextInput},
      {"shard", FuzzShard},
      {"shard_manifest", FuzzShardManifest},
      {"manifest", FuzzManifest},
      {"model_sparse", FuzzModelSparse},
      {"group_record", FuzzGroupRecord},
      {"store_index", FuzzStoreIndex},
      {"ckpt_manifest", FuzzCheckpointManifest},
      {"feature_view", FuzzFeatureView},
      {"feature_graph", FuzzFeatureGraph},
      {"serving_donefile", FuzzServingDonefile},
      {"infer_request", FuzzInferRequest},
  };
  return targets;
}

}  // namespace ctrbox
