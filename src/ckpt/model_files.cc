#include "ckpt/model_files.h"

#include <fmt/format.h>

#include <cstring>

#include "util/coding.h"
#include "util/hash.h"
#include "util/json_text.h"

namespace ctrbox {
namespace {

constexpr char kSparseMagic[8] = {'C', 'T', 'R', 'S', 'P', 'A', 'R', '1'};
constexpr char kSparseEnd[8] = {'C', 'T', 'R', 'S', 'P', 'E', 'N', 'D'};
constexpr char kBlockMagic[4] = {'S', 'B', 'L', 'K'};
constexpr char kDenseMagic[8] = {'C', 'T', 'R', 'D', 'E', 'N', 'S', '1'};
constexpr uint32_t kDenseVersion = 1;
// Sparse file versions: 1 (float32 embeddings, 32-byte header), 2 (the header adds the
// embedding quantization: 40 bytes). Version 1 files still load.
constexpr uint32_t kSparseVersion = 2;
constexpr size_t kBlockRows = 65536;

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

}  // namespace

std::string Hex(uint64_t v) { return fmt::format("{:016x}", v); }

StatusOr<uint64_t> ParseHex(const std::string& path, const std::string& field,
                            const std::string& text) {
  if (text.empty() || text.size() > 16 ||
      text.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return CorruptionError(fmt::format("{}: {}: not a hex checksum: '{}'", path, field, text));
  }
  return std::stoull(text, nullptr, 16);
}

nlohmann::json FilesToJson(const std::vector<ModelFileInfo>& files) {
  nlohmann::json f = nlohmann::json::array();
  for (const auto& fi : files)
    f.push_back({{"name", fi.name}, {"bytes", fi.bytes}, {"checksum", Hex(fi.checksum)}});
  return f;
}

StatusOr<std::vector<ModelFileInfo>> FilesFromJson(const std::string& path,
                                                   const nlohmann::json& j) {
  std::vector<ModelFileInfo> files;
  try {
    for (const auto& f : j) {
      ModelFileInfo fi;
      fi.name = f.at("name").get<std::string>();
      fi.bytes = f.at("bytes").get<uint64_t>();
      ASSIGN_OR_RETURN(fi.checksum,
                       ParseHex(path, "checksum", f.at("checksum").get<std::string>()));
      files.push_back(std::move(fi));
    }
  } catch (const std::exception& e) {
    return CorruptionError(path + ": files: " + e.what());
  }
  return files;
}

// ---- sparse file ------------------------------------------------------------------------------

SparseFileWriter::SparseFileWriter(std::unique_ptr<WritableFile> file) : file_(std::move(file)) {
  XXH3_64bits_reset(&state_);
}
SparseFileWriter::~SparseFileWriter() = default;

StatusOr<std::unique_ptr<SparseFileWriter>> SparseFileWriter::Create(Env* env,
                                                                     const std::string& path,
                                                                     const ValueLayout& l) {
  ASSIGN_OR_RETURN(auto f, env->NewWritableFile(path));
  std::unique_ptr<SparseFileWriter> w(new SparseFileWriter(std::move(f)));
  std::string h(kSparseMagic, 8);
  PutFixed<uint32_t>(&h, kSparseVersion);
  PutFixed<uint32_t>(&h, l.dim);
  PutFixed<uint32_t>(&h, l.emb_state);
  PutFixed<uint32_t>(&h, l.wide_state);
  PutFixed<uint32_t>(&h, RowCodesWord(l));
  PutFixed<float>(&h, l.quant_range);
  PutFixed<uint64_t>(&h, Checksum64(h));
  RETURN_IF_ERROR(w->Append(h));
  return w;
}

Status SparseFileWriter::Append(std::string_view d) {
  XXH3_64bits_update(&state_, d.data(), d.size());
  bytes_ += d.size();
  return file_->Append(d);
}

Status SparseFileWriter::Add(const RowBlock& rows) {
  for (size_t b = 0; b < rows.size(); b += kBlockRows) {
    const size_t e = std::min(rows.size(), b + kBlockRows);
    enc_.clear();
    for (size_t i = b; i < e; ++i) {
      const size_t before = enc_.size();
      rows.EncodeRow(i, &enc_);
      counts_.sum += Checksum64(enc_.data() + before, enc_.size() - before);
      counts_.bytes_live += enc_.size() - before - 8;
      counts_.with_emb += rows.has_emb(i);
    }
    std::string bh(kBlockMagic, 4);
    PutFixed<uint32_t>(&bh, static_cast<uint32_t>(e - b));
    PutFixed<uint64_t>(&bh, enc_.size());
    PutFixed<uint64_t>(&bh, Checksum64(enc_));
    RETURN_IF_ERROR(Append(bh));
    RETURN_IF_ERROR(Append(enc_));
    ++blocks_;
    counts_.rows += e - b;
  }
  return Status::OK();
}

Status SparseFileWriter::Finish() {
  std::string footer(kSparseEnd, 8);
  PutFixed<uint64_t>(&footer, blocks_);
  PutFixed<uint64_t>(&footer, counts_.rows);
  PutFixed<uint64_t>(&footer, Checksum64(footer));
  RETURN_IF_ERROR(Append(footer));
  RETURN_IF_ERROR(file_->Sync());
  return file_->Close();
}

ModelFileInfo SparseFileWriter::Info(const std::string& name) const {
  return {name, bytes_, XXH3_64bits_digest(&state_)};
}

Status WriteTableSparseFile(Env* env, const std::string& dir, const std::string& name,
                            SparseTable& table, ModelFileInfo* info, SparseCounts* counts) {
  ASSIGN_OR_RETURN(auto w, SparseFileWriter::Create(env, JoinPath(dir, name), table.layout()));
  // A stripe streamed a file block at a time (the blocks come out as for the stripe at once):
  // the save holds one block however large the model.
  RowBlock rows(table.layout());
  for (size_t s = 0; s < table.num_stripes(); ++s) {
    RETURN_IF_ERROR(table.ExportStripeBlocks(s, kBlockRows, &rows,
                                             [&](RowBlock& block) { return w->Add(block); }));
  }
  RETURN_IF_ERROR(w->Finish());
  *info = w->Info(name);
  *counts = w->counts();
  return Status::OK();
}

Status ReadSparseFile(Env* env, const std::string& path, const ValueLayout& layout,
                      const std::function<Status(RowBlock&)>& on_block, SparseCounts* scan,
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
    SetRowCodes(GetFixed<uint32_t>(buf.data() + 24), &got);
    got.quant_range = GetFixed<float>(buf.data() + 28);
  }
  // The header names the widest row (with model.slot_dims the spec gives the tables, and each
  // row decodes at its own table's size).
  if (!(got == layout.RowFormat())) {
    return CorruptionError(fmt::format(
        "{}: row layout (dim {}, emb_state {}, wide_state {}, quant_bits {}, quant_range {}, "
        "state_bits {}) differs from the spec's ({}, {}, {}, {}, {}, {})",
        path, got.dim, got.emb_state, got.wide_state, got.quant_bits, got.quant_range,
        got.state_bits, layout.dim, layout.emb_state, layout.wide_state, layout.quant_bits,
        layout.quant_range, layout.state_bits));
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
    RETURN_IF_ERROR(on_block(rows));
  }
}

// ---- dense file -------------------------------------------------------------------------------

std::string DenseParamsPayload(const CtrModel& model) {
  const DenseOptimizer& opt = model.dense_optimizer();
  const auto& p = model.dense_params();
  std::string s(kDenseMagic, 8);
  PutFixed<uint32_t>(&s, kDenseVersion);
  PutFixed<uint32_t>(&s, static_cast<uint32_t>(opt.options().kind));
  PutFixed<uint64_t>(&s, p.size());
  PutFixed<uint64_t>(&s, opt.step());
  s.append(reinterpret_cast<const char*>(p.data()), p.size() * 4);
  return s;
}

std::string DensePayload(const CtrModel& model) {
  const DenseOptimizer& opt = model.dense_optimizer();
  std::string s = DenseParamsPayload(model);
  s.append(reinterpret_cast<const char*>(opt.m().data()), opt.m().size() * 4);
  s.append(reinterpret_cast<const char*>(opt.v().data()), opt.v().size() * 4);
  return s;
}

Status WriteDenseFile(Env* env, const std::string& path, const std::string& payload,
                      ModelFileInfo* info) {
  ASSIGN_OR_RETURN(auto f, env->NewWritableFile(path));
  std::string whole = payload;
  PutFixed<uint64_t>(&whole, Checksum64(payload));
  RETURN_IF_ERROR(f->Append(whole));
  RETURN_IF_ERROR(f->Sync());
  RETURN_IF_ERROR(f->Close());
  info->name = BaseName(path);
  info->bytes = whole.size();
  info->checksum = Checksum64(whole);
  return Status::OK();
}

StatusOr<std::string> ReadDenseFile(Env* env, const std::string& path, uint64_t* file_checksum) {
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

Status ApplyDensePayload(const std::string& payload, const std::string& path, CtrModel* model) {
  DenseOptimizer& opt = model->dense_optimizer();
  auto& params = model->dense_params();
  const char* p = payload.data();
  if (payload.size() < 32) return CorruptionError(path + ": a dense payload too short");
  const uint64_t n = GetFixed<uint64_t>(p + 16);
  const size_t expect = 32 + 4 * (params.size() + opt.m().size() + opt.v().size());
  const size_t params_only = 32 + 4 * params.size();  // DenseParamsPayload
  if (GetFixed<uint32_t>(p + 8) != kDenseVersion || n != params.size() ||
      GetFixed<uint32_t>(p + 12) != static_cast<uint32_t>(opt.options().kind) ||
      (payload.size() != expect && payload.size() != params_only)) {
    return CorruptionError(path + ": does not match the model spec");
  }
  opt.set_step(GetFixed<uint64_t>(p + 24));
  p += 32;
  CopyBytes(params.data(), p, n * 4);
  p += n * 4;
  if (payload.size() == params_only && expect != params_only) return Status::OK();  // no state
  CopyBytes(opt.m().data(), p, opt.m().size() * 4);
  p += opt.m().size() * 4;
  CopyBytes(opt.v().data(), p, opt.v().size() * 4);
  return Status::OK();
}

std::string StateDigest(uint64_t sparse_sum, uint64_t keys, const std::string& dense_payload) {
  std::string s;
  PutFixed<uint64_t>(&s, sparse_sum);
  PutFixed<uint64_t>(&s, keys);
  s += dense_payload;
  return Hex(Checksum64(s));
}

// ---- MANIFEST ---------------------------------------------------------------------------------

Status InsertKept(SparseTable* table, const RowBlock& rows, const KeyFilter& keep,
                  RowBlock* scratch, ThreadPool* pool) {
  if (!keep) return table->Insert(rows, pool);
  scratch->Resize(0);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (keep(rows.key(i))) scratch->AppendRow(rows, i);
  }
  return table->Insert(*scratch, pool);
}

std::string ManifestText(const nlohmann::json& j) {
  std::string text = JsonText(j, 2) + "\n";
  text += "#checksum " + Hex(Checksum64(text)) + "\n";
  return text;
}

StatusOr<nlohmann::json> ParseManifestText(const std::string& path, std::string text) {
  const size_t mark = text.rfind("#checksum ");
  if (mark == std::string::npos || text.empty() || text.back() != '\n' ||
      text.substr(mark + 10, text.size() - mark - 11) != Hex(Checksum64(text.data(), mark))) {
    return CorruptionError(path + ": checksum mismatch (the MANIFEST is damaged)");
  }
  text.resize(mark);
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return CorruptionError(path + ": " + e.what());
  }
}

}  // namespace ctrbox
