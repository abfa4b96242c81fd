#include "ckpt/model_dir.h"

#include <fmt/format.h>

#include <cstring>

#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

constexpr char kSparseMagic[8] = {'C', 'T', 'R', 'S', 'P', 'A', 'R', '1'};
constexpr char kSparseEnd[8] = {'C', 'T', 'R', 'S', 'P', 'E', 'N', 'D'};
constexpr char kBlockMagic[4] = {'S', 'B', 'L', 'K'};
constexpr char kDenseMagic[8] = {'C', 'T', 'R', 'D', 'E', 'N', 'S', '1'};
constexpr uint32_t kVersion = 1;
// Sparse file versions: 1 (float32 embeddings, 32-byte header), 2 (the header adds the
// embedding quantization: 40 bytes). Version 1 files still load.
constexpr uint32_t kSparseVersion = 2;
constexpr size_t kBlockRows = 65536;
constexpr const char* kManifest = "MANIFEST";

std::string Hex(uint64_t v) { return fmt::format("{:016x}", v); }

std::string FileName(const char* kind, uint64_t generation) {
  return fmt::format("{}-{:06d}.bin", kind, generation);
}

// A writable file that tracks its size and whole-file checksum.
class ChecksummedWriter {
 public:
  explicit ChecksummedWriter(std::unique_ptr<WritableFile> f) : file_(std::move(f)) {
    XXH3_64bits_reset(&state_);
  }
  Status Append(std::string_view d) {
    XXH3_64bits_update(&state_, d.data(), d.size());
    bytes_ += d.size();
    return file_->Append(d);
  }
  Status SyncAndClose() {
    RETURN_IF_ERROR(file_->Sync());
    return file_->Close();
  }
  ModelFileInfo Info(const std::string& name) {
    return {name, bytes_, XXH3_64bits_digest(&state_)};
  }

 private:
  std::unique_ptr<WritableFile> file_;
  XXH3_state_t state_;
  uint64_t bytes_ = 0;
};

// A sequential reader that tracks the whole-file checksum.
class ChecksummedReader {
 public:
  explicit ChecksummedReader(std::unique_ptr<SequentialFile> f) : file_(std::move(f)) {
    XXH3_64bits_reset(&state_);
  }
  // Reads exactly n bytes; a short file is corruption.
  Status Read(size_t n, std::string* out) {
    out->resize(n);
    size_t done = 0;
    while (done < n) {
      size_t got = 0;
      RETURN_IF_ERROR(file_->Read(n - done, out->data() + done, &got));
      if (got == 0)
        return CorruptionError(fmt::format("{}: truncated at offset {}", name(), bytes_ + done));
      done += got;
    }
    XXH3_64bits_update(&state_, out->data(), n);
    bytes_ += n;
    return Status::OK();
  }
  Status ExpectEnd() {
    char c;
    size_t got = 0;
    RETURN_IF_ERROR(file_->Read(1, &c, &got));
    if (got != 0) return CorruptionError(name() + ": bytes after the end");
    return Status::OK();
  }
  uint64_t checksum() { return XXH3_64bits_digest(&state_); }
  uint64_t bytes() const { return bytes_; }
  const std::string& name() const { return file_->name(); }

 private:
  std::unique_ptr<SequentialFile> file_;
  XXH3_state_t state_;
  uint64_t bytes_ = 0;
};

std::string DensePayload(const CtrModel& model) {
  const DenseOptimizer& opt = model.dense_optimizer();
  const auto& p = model.dense_params();
  std::string s(kDenseMagic, 8);
  PutFixed<uint32_t>(&s, kVersion);
  PutFixed<uint32_t>(&s, static_cast<uint32_t>(opt.options().kind));
  PutFixed<uint64_t>(&s, p.size());
  PutFixed<uint64_t>(&s, opt.step());
  s.append(reinterpret_cast<const char*>(p.data()), p.size() * 4);
  s.append(reinterpret_cast<const char*>(opt.m().data()), opt.m().size() * 4);
  s.append(reinterpret_cast<const char*>(opt.v().data()), opt.v().size() * 4);
  return s;
}

std::string Digest(uint64_t sparse_sum, uint64_t keys, const std::string& dense_payload) {
  std::string s;
  PutFixed<uint64_t>(&s, sparse_sum);
  PutFixed<uint64_t>(&s, keys);
  s += dense_payload;
  return Hex(Checksum64(s));
}

struct SparseScan {
  uint64_t rows = 0, with_emb = 0, bytes_live = 0, sum = 0;
};

// Streams the sparse file, verifying it; calls on_block for each block's rows.
Status ReadSparse(Env* env, const std::string& path, const ValueLayout& layout,
                  const std::function<void(RowBlock&)>& on_block, SparseScan* scan,
                  uint64_t* file_checksum) {
  ASSIGN_OR_RETURN(auto file, env->NewSequentialFile(path));
  ChecksummedReader in(std::move(file));
  std::string buf;
  RETURN_IF_ERROR(in.Read(12, &buf));
  if (std::memcmp(buf.data(), kSparseMagic, 8) != 0)
    return CorruptionError(path + ": not a sparse model file");
  const uint32_t version = GetFixed<uint32_t>(buf.data() + 8);
  if (version < 1 || version > kSparseVersion) {
    return CorruptionError(fmt::format("{}: unknown version {}", path, version));
  }
  std::string rest;
  RETURN_IF_ERROR(in.Read(version == 1 ? 20 : 28, &rest));
  buf += rest;
  const size_t sum_at = buf.size() - 8;
  if (GetFixed<uint64_t>(buf.data() + sum_at) != Checksum64(buf.data(), sum_at)) {
    return CorruptionError(path + ": header checksum mismatch");
  }
  ValueLayout got{GetFixed<uint32_t>(buf.data() + 12), GetFixed<uint32_t>(buf.data() + 16),
                  GetFixed<uint32_t>(buf.data() + 20)};
  if (version >= 2) {
    got.quant_bits = GetFixed<uint32_t>(buf.data() + 24);
    got.quant_range = GetFixed<float>(buf.data() + 28);
  }
  if (!(got == layout)) {
    return CorruptionError(fmt::format(
        "{}: row layout (dim {}, emb_state {}, wide_state {}, quant_bits {}, quant_range {}) "
        "differs from the spec's ({}, {}, {}, {}, {})",
        path, got.dim, got.emb_state, got.wide_state, got.quant_bits, got.quant_range, layout.dim,
        layout.emb_state, layout.wide_state, layout.quant_bits, layout.quant_range));
  }
  RowBlock rows(layout);
  std::string enc;
  uint64_t blocks = 0;
  while (true) {
    RETURN_IF_ERROR(in.Read(8, &buf));
    if (std::memcmp(buf.data(), kSparseEnd, 8) == 0) {
      std::string tail;
      RETURN_IF_ERROR(in.Read(24, &tail));
      std::string footer = buf + tail;
      if (GetFixed<uint64_t>(footer.data() + 24) != Checksum64(footer.data(), 24)) {
        return CorruptionError(path + ": footer checksum mismatch");
      }
      if (GetFixed<uint64_t>(footer.data() + 8) != blocks ||
          GetFixed<uint64_t>(footer.data() + 16) != scan->rows) {
        return CorruptionError(path + ": footer counts do not match the blocks");
      }
      RETURN_IF_ERROR(in.ExpectEnd());
      *file_checksum = in.checksum();
      return Status::OK();
    }
    if (std::memcmp(buf.data(), kBlockMagic, 4) != 0) {
      return CorruptionError(fmt::format("{}: offset {}: not a block", path, in.bytes() - 8));
    }
    const uint32_t n = GetFixed<uint32_t>(buf.data() + 4);
    std::string hdr;
    RETURN_IF_ERROR(in.Read(16, &hdr));
    const uint64_t payload_bytes = GetFixed<uint64_t>(hdr.data()),
                   checksum = GetFixed<uint64_t>(hdr.data() + 8);
    if (n == 0 || n > kBlockRows || payload_bytes > n * layout.EncodedBytes(true) ||
        payload_bytes < n * layout.EncodedBytes(false)) {
      return CorruptionError(fmt::format("{}: block {}: implausible sizes", path, blocks + 1));
    }
    RETURN_IF_ERROR(in.Read(payload_bytes, &enc));
    if (Checksum64(enc) != checksum) {
      return CorruptionError(fmt::format("{}: block {}: checksum mismatch", path, blocks + 1));
    }
    rows.Resize(n);
    size_t pos = 0;
    for (uint32_t i = 0; i < n; ++i) {
      size_t used = rows.DecodeRow(enc.data() + pos, enc.size() - pos, i);
      if (used == 0)
        return CorruptionError(fmt::format("{}: block {}: bad row {}", path, blocks + 1, i));
      scan->sum += Checksum64(enc.data() + pos, used);
      scan->bytes_live += used - 8;
      scan->with_emb += rows.has_emb(i);
      pos += used;
    }
    if (pos != enc.size())
      return CorruptionError(fmt::format("{}: block {}: trailing bytes", path, blocks + 1));
    scan->rows += n;
    ++blocks;
    on_block(rows);
  }
}

StatusOr<std::string> ReadDense(Env* env, const std::string& path, uint64_t* file_checksum) {
  std::string data;
  RETURN_IF_ERROR(ReadFileToString(env, path, &data));
  *file_checksum = Checksum64(data);
  if (data.size() < 40 || std::memcmp(data.data(), kDenseMagic, 8) != 0) {
    return CorruptionError(path + ": not a dense model file");
  }
  const size_t body = data.size() - 8;
  if (GetFixed<uint64_t>(data.data() + body) != Checksum64(data.data(), body)) {
    return CorruptionError(path + ": checksum mismatch");
  }
  data.resize(body);
  return data;
}

}  // namespace

nlohmann::json ModelManifest::ToJson() const {
  nlohmann::json f = nlohmann::json::array();
  for (const auto& fi : files)
    f.push_back({{"name", fi.name}, {"bytes", fi.bytes}, {"checksum", Hex(fi.checksum)}});
  return {{"format", "ctrbox-model"},
          {"version", kVersion},
          {"generation", generation},
          {"spec", spec.ToJson()},
          {"files", f},
          {"keys", keys},
          {"keys_with_embedding", keys_with_embedding},
          {"bytes_live", bytes_live},
          {"dense_params", dense_params},
          {"digest", digest},
          {"trained_examples", trained_examples}};
}

bool ModelExists(Env* env, const std::string& dir) {
  return env->FileExists(JoinPath(dir, kManifest));
}

StatusOr<ModelManifest> ReadManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifest);
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(env, path, &text));
  // The last line is "#checksum <hex>" of everything before it.
  const size_t mark = text.rfind("#checksum ");
  if (mark == std::string::npos || text.back() != '\n' ||
      text.substr(mark + 10, text.size() - mark - 11) != Hex(Checksum64(text.data(), mark))) {
    return CorruptionError(path + ": checksum mismatch (the MANIFEST is damaged)");
  }
  text.resize(mark);
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("format") != "ctrbox-model")
      return CorruptionError(path + ": not a ctrbox model manifest");
    if (j.at("version").get<uint32_t>() > kVersion) {
      return CorruptionError(fmt::format("{}: model version {} is newer than this build reads ({})",
                                         path, j.at("version").get<uint32_t>(), kVersion));
    }
    ModelManifest m;
    m.generation = j.at("generation").get<uint64_t>();
    ASSIGN_OR_RETURN(m.spec, ModelSpec::FromJson(j.at("spec")));
    for (const auto& f : j.at("files")) {
      ModelFileInfo fi;
      fi.name = f.at("name").get<std::string>();
      fi.bytes = f.at("bytes").get<uint64_t>();
      fi.checksum = std::stoull(f.at("checksum").get<std::string>(), nullptr, 16);
      m.files.push_back(fi);
    }
    if (m.files.size() != 2) return CorruptionError(path + ": expected a sparse and a dense file");
    m.keys = j.at("keys").get<uint64_t>();
    m.keys_with_embedding = j.at("keys_with_embedding").get<uint64_t>();
    m.bytes_live = j.at("bytes_live").get<uint64_t>();
    m.dense_params = j.at("dense_params").get<uint64_t>();
    m.digest = j.at("digest").get<std::string>();
    m.trained_examples = j.at("trained_examples").get<uint64_t>();
    return m;
  } catch (const std::exception& e) {
    return CorruptionError(path + ": " + e.what());
  }
}

StatusOr<ModelManifest> SaveModel(Env* env, const std::string& dir, const ModelSpec& spec,
                                  SparseTable& table, const CtrModel& model,
                                  uint64_t trained_examples, ThreadPool* pool) {
  RETURN_IF_ERROR(env->CreateDirs(dir));
  ModelManifest m;
  m.generation = 1;
  if (ModelExists(env, dir)) {
    ASSIGN_OR_RETURN(ModelManifest old, ReadManifest(env, dir));
    m.generation = old.generation + 1;
  }
  m.spec = spec;
  m.trained_examples = trained_examples;
  const ValueLayout& l = table.layout();

  // Sparse rows, shard by shard.
  const std::string sparse_name = FileName("sparse", m.generation);
  ASSIGN_OR_RETURN(auto sf, env->NewWritableFile(JoinPath(dir, sparse_name)));
  ChecksummedWriter sparse(std::move(sf));
  std::string h(kSparseMagic, 8);
  PutFixed<uint32_t>(&h, kSparseVersion);
  PutFixed<uint32_t>(&h, l.dim);
  PutFixed<uint32_t>(&h, l.emb_state);
  PutFixed<uint32_t>(&h, l.wide_state);
  PutFixed<uint32_t>(&h, l.quant_bits);
  PutFixed<float>(&h, l.quant_range);
  PutFixed<uint64_t>(&h, Checksum64(h));
  RETURN_IF_ERROR(sparse.Append(h));
  uint64_t blocks = 0, sparse_sum = 0;
  RowBlock rows(l);
  std::string enc;
  for (size_t s = 0; s < table.num_shards(); ++s) {
    RETURN_IF_ERROR(table.ExportShard(s, &rows));
    for (size_t b = 0; b < rows.size(); b += kBlockRows) {
      const size_t e = std::min(rows.size(), b + kBlockRows);
      enc.clear();
      for (size_t i = b; i < e; ++i) {
        size_t before = enc.size();
        rows.EncodeRow(i, &enc);
        sparse_sum += Checksum64(enc.data() + before, enc.size() - before);
        m.bytes_live += enc.size() - before - 8;
        m.keys_with_embedding += rows.has_emb(i);
      }
      std::string bh(kBlockMagic, 4);
      PutFixed<uint32_t>(&bh, static_cast<uint32_t>(e - b));
      PutFixed<uint64_t>(&bh, enc.size());
      PutFixed<uint64_t>(&bh, Checksum64(enc));
      RETURN_IF_ERROR(sparse.Append(bh));
      RETURN_IF_ERROR(sparse.Append(enc));
      ++blocks;
      m.keys += e - b;
    }
  }
  std::string footer(kSparseEnd, 8);
  PutFixed<uint64_t>(&footer, blocks);
  PutFixed<uint64_t>(&footer, m.keys);
  PutFixed<uint64_t>(&footer, Checksum64(footer));
  RETURN_IF_ERROR(sparse.Append(footer));
  RETURN_IF_ERROR(sparse.SyncAndClose());
  m.files.push_back(sparse.Info(sparse_name));

  // Dense parameters and optimizer state.
  const std::string dense_name = FileName("dense", m.generation);
  std::string payload = DensePayload(model);
  {
    ASSIGN_OR_RETURN(auto df, env->NewWritableFile(JoinPath(dir, dense_name)));
    ChecksummedWriter dense(std::move(df));
    std::string whole = payload;
    PutFixed<uint64_t>(&whole, Checksum64(payload));
    RETURN_IF_ERROR(dense.Append(whole));
    RETURN_IF_ERROR(dense.SyncAndClose());
    m.files.push_back(dense.Info(dense_name));
  }
  m.dense_params = model.dense_params().size();
  m.digest = Digest(sparse_sum, m.keys, payload);

  // Commit: the MANIFEST rename is the point where the new generation becomes the model.
  RETURN_IF_ERROR(env->SyncDir(dir));
  std::string manifest = m.ToJson().dump(2) + "\n";
  manifest += "#checksum " + Hex(Checksum64(manifest)) + "\n";
  RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(dir, kManifest), manifest));
  // Only now remove older generations' files.
  ASSIGN_OR_RETURN(auto children, env->GetChildren(dir));
  for (const std::string& c : children) {
    bool ours = c == sparse_name || c == dense_name;
    bool model_file = (c.rfind("sparse-", 0) == 0 || c.rfind("dense-", 0) == 0) && c.size() > 4 &&
                      c.substr(c.size() - 4) == ".bin";
    if (model_file && !ours)
      env->DeleteFile(JoinPath(dir, c)).IgnoreError();  // garbage; retried next save
  }
  return m;
}

Status LoadModel(Env* env, const std::string& dir, const ModelManifest& m, SparseTable* table,
                 CtrModel* model, ThreadPool* pool) {
  SparseScan scan;
  uint64_t checksum = 0;
  const std::string sparse_path = JoinPath(dir, m.files[0].name);
  Status inserted;
  RETURN_IF_ERROR(ReadSparse(
      env, sparse_path, table->layout(),
      [&](RowBlock& rows) {
        if (inserted.ok()) inserted = table->Insert(rows, pool);
      },
      &scan, &checksum));
  RETURN_IF_ERROR(inserted);
  if (checksum != m.files[0].checksum)
    return CorruptionError(sparse_path + ": file checksum differs from the MANIFEST");
  const std::string dense_path = JoinPath(dir, m.files[1].name);
  ASSIGN_OR_RETURN(std::string payload, ReadDense(env, dense_path, &checksum));
  if (checksum != m.files[1].checksum)
    return CorruptionError(dense_path + ": file checksum differs from the MANIFEST");
  DenseOptimizer& opt = model->dense_optimizer();
  auto& params = model->dense_params();
  const char* p = payload.data();
  const uint64_t n = GetFixed<uint64_t>(p + 16);
  const size_t expect = 32 + 4 * (n + opt.m().size() + opt.v().size());
  if (GetFixed<uint32_t>(p + 8) != kVersion || n != params.size() ||
      GetFixed<uint32_t>(p + 12) != static_cast<uint32_t>(opt.options().kind) ||
      payload.size() != expect) {
    return CorruptionError(dense_path + ": does not match the model spec");
  }
  opt.set_step(GetFixed<uint64_t>(p + 24));
  p += 32;
  CopyBytes(params.data(), p, n * 4);
  p += n * 4;
  CopyBytes(opt.m().data(), p, opt.m().size() * 4);
  p += opt.m().size() * 4;
  CopyBytes(opt.v().data(), p, opt.v().size() * 4);
  if (scan.rows != m.keys || Digest(scan.sum, scan.rows, payload) != m.digest) {
    return CorruptionError(JoinPath(dir, "MANIFEST") + ": the files do not match its digest");
  }
  return Status::OK();
}

StatusOr<ModelManifest> VerifyModel(Env* env, const std::string& dir) {
  ASSIGN_OR_RETURN(ModelManifest m, ReadManifest(env, dir));
  CtrModel shape(m.spec.schema, m.spec.model, m.spec.sparse_optimizer, m.spec.dense_optimizer, 0);
  SparseScan scan;
  uint64_t checksum = 0;
  const std::string sparse_path = JoinPath(dir, m.files[0].name);
  RETURN_IF_ERROR(ReadSparse(
      env, sparse_path, shape.value_layout(), [](RowBlock&) {}, &scan, &checksum));
  if (checksum != m.files[0].checksum)
    return CorruptionError(sparse_path + ": file checksum differs from the MANIFEST");
  const std::string dense_path = JoinPath(dir, m.files[1].name);
  ASSIGN_OR_RETURN(std::string payload, ReadDense(env, dense_path, &checksum));
  if (checksum != m.files[1].checksum)
    return CorruptionError(dense_path + ": file checksum differs from the MANIFEST");
  if (scan.rows != m.keys || scan.bytes_live != m.bytes_live ||
      scan.with_emb != m.keys_with_embedding || Digest(scan.sum, scan.rows, payload) != m.digest) {
    return CorruptionError(JoinPath(dir, "MANIFEST") +
                           ": the files do not match its counts or digest");
  }
  return m;
}

StatusOr<LoadedModel> OpenModel(Env* env, const std::string& dir, TieredOptions storage,
                                ThreadPool* pool) {
  if (!ModelExists(env, dir))
    return NotFoundError(fmt::format("no model in {} (no MANIFEST)", dir));
  LoadedModel lm;
  ASSIGN_OR_RETURN(lm.manifest, ReadManifest(env, dir));
  const ModelSpec& s = lm.manifest.spec;
  lm.model = std::make_unique<CtrModel>(s.schema, s.model, s.sparse_optimizer, s.dense_optimizer,
                                        s.table.seed);
  storage.layout = lm.model->value_layout();
  ASSIGN_OR_RETURN(lm.table, TieredTable::Open(env, storage));
  RETURN_IF_ERROR(LoadModel(env, dir, lm.manifest, lm.table.get(), lm.model.get(), pool));
  return lm;
}

StatusOr<std::string> ModelDigest(SparseTable& table, const CtrModel& model, ThreadPool* pool) {
  ASSIGN_OR_RETURN(uint64_t sparse, table.SparseDigest(pool));
  return Digest(sparse, table.Stats().keys, DensePayload(model));
}

}  // namespace ctrbox
