#include "ckpt/serving_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "util/coding.h"
#include "util/json_text.h"
#include "util/logging.h"

namespace ctrbox {
namespace {

constexpr char kManifest[] = "MANIFEST";
constexpr char kSparse[] = "sparse.bin";
constexpr char kDeleted[] = "deleted.bin";
constexpr char kDense[] = "dense.bin";
constexpr char kDeletedMagic[8] = {'C', 'T', 'R', 'B', 'X', 'D', 'E', 'L'};

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

uint64_t FileChecksum(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

// deleted.bin: magic, count u64, the keys (u64 each), XXH3-64 of everything before.
std::string EncodeDeleted(const std::vector<uint64_t>& keys) {
  std::string out(kDeletedMagic, 8);
  PutFixed<uint64_t>(&out, keys.size());
  for (uint64_t k : keys) PutFixed<uint64_t>(&out, k);
  PutFixed<uint64_t>(&out, FileChecksum(out));
  return out;
}

StatusOr<std::vector<uint64_t>> DecodeDeleted(const std::string& path, const std::string& b) {
  if (b.size() < 24 || b.compare(0, 8, kDeletedMagic, 8) != 0)
    return CorruptionError(path + ": not a deleted-keys file");
  const uint64_t n = GetFixed<uint64_t>(b.data() + 8);
  if (b.size() != 24 + 8 * n) return CorruptionError(path + ": truncated");
  if (GetFixed<uint64_t>(b.data() + b.size() - 8) !=
      FileChecksum(std::string_view(b.data(), b.size() - 8)))
    return CorruptionError(path + ": checksum mismatch");
  std::vector<uint64_t> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = GetFixed<uint64_t>(b.data() + 16 + 8 * i);
  return keys;
}

// Its MANIFEST first: a crash halfway leaves no version dir that looks whole.
Status DeleteVersionDir(Env* env, const std::string& path) {
  return DeleteDirOfFiles(env, path, kManifest);
}

// The version number of a directory name "v-NNNNNN", or 0.
uint64_t VersionOfName(const std::string& name) {
  if (name.size() < 3 || name.compare(0, 2, "v-") != 0) return 0;
  uint64_t v = 0;
  for (size_t i = 2; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (uint64_t{1} << 58)) return 0;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return v;
}

// The serving rows' layout in a version's MANIFEST (no state: only the embedding widths).
nlohmann::json LayoutToJson(const ValueLayout& l) {
  nlohmann::json dims = nlohmann::json::array();
  for (uint32_t t = 0; l.multi() && t < l.tables; ++t) dims.push_back(l.table_dim[t]);
  return {{"dim", l.dim},
          {"table_dims", dims},
          {"quant_bits", l.quant_bits},
          {"quant_range", l.quant_range}};
}

ValueLayout LayoutFromJson(const nlohmann::json& j) {
  ValueLayout l;
  l.dim = j.at("dim").get<uint32_t>();
  const auto dims = j.at("table_dims").get<std::vector<uint32_t>>();
  if (dims.size() > kMaxTables) throw std::runtime_error("more table_dims than tables allowed");
  if (!dims.empty()) l.tables = static_cast<uint32_t>(dims.size());
  for (size_t t = 0; t < dims.size(); ++t) l.table_dim[t] = dims[t];
  return ServingLayout(l, j.at("quant_bits").get<uint32_t>(), j.at("quant_range").get<float>());
}

Status WriteDonefile(Env* env, const std::string& dir, const std::vector<ServingVersion>& all) {
  std::string text;
  for (const ServingVersion& v : all) text += JsonText(v.ToJson()) + "\n";
  return WriteFileAtomic(env, JoinPath(dir, kServingDonefile), text);
}

}  // namespace

nlohmann::json ServingVersion::ToJson() const {
  return {{"version", version},
          {"kind", base ? "base" : "delta"},
          {"base", base_version},
          {"parent", parent},
          {"partition", partition},
          {"rows", rows},
          {"deleted", deleted},
          {"keys", keys},
          {"bytes", bytes},
          {"checksum", checksum},
          {"time", time}};
}

StatusOr<ServingVersion> ServingVersion::FromJson(const nlohmann::json& j,
                                                  const std::string& where) {
  try {
    ServingVersion v;
    v.version = j.at("version").get<uint64_t>();
    const std::string kind = j.at("kind").get<std::string>();
    if (kind != "base" && kind != "delta")
      return CorruptionError(fmt::format("{}: unknown kind '{}'", where, kind));
    v.base = kind == "base";
    v.base_version = j.at("base").get<uint64_t>();
    v.parent = j.at("parent").get<uint64_t>();
    v.partition = j.at("partition").get<std::string>();
    v.rows = j.at("rows").get<uint64_t>();
    v.deleted = j.at("deleted").get<uint64_t>();
    v.keys = j.at("keys").get<uint64_t>();
    v.bytes = j.at("bytes").get<uint64_t>();
    v.checksum = j.at("checksum").get<std::string>();
    v.time = j.at("time").get<std::string>();
    if (v.version == 0 ||
        (v.base ? (v.base_version != v.version || v.parent != 0)
                : (v.parent == 0 || v.parent >= v.version || v.base_version > v.parent))) {
      return CorruptionError(where + ": inconsistent version, base and parent");
    }
    return v;
  } catch (const std::exception& e) {
    return CorruptionError(where + ": " + e.what());
  }
}

std::string ServingVersionName(uint64_t version) { return fmt::format("v-{:06d}", version); }

ValueLayout ServingLayout(const ValueLayout& table, uint32_t bits, float range) {
  ValueLayout l = table;
  l.emb_state = 0;
  l.wide_state = 0;
  l.state_bits = 0;
  for (uint32_t t = 0; t < kMaxTables; ++t) l.table_state[t] = 0;
  if (bits != 0) {
    l.quant_bits = bits;
    l.quant_range = range;
  }
  return l;
}

ServingVersionWriter::ServingVersionWriter(Env* env, std::string path, ServingVersion v,
                                           ModelSpec spec, const ValueLayout& layout)
    : env_(env),
      path_(std::move(path)),
      v_(std::move(v)),
      spec_(std::move(spec)),
      layout_(layout),
      scratch_(layout) {}

ServingVersionWriter::~ServingVersionWriter() {
  if (finished_) return;
  sparse_.reset();  // (its file closed first)
  Status s = DeleteVersionDir(env_, path_);
  if (!s.ok())
    LOG_WARNING("{}: a version not written in full, left behind: {}", path_, s.ToString());
}

StatusOr<std::unique_ptr<ServingVersionWriter>> ServingVersionWriter::Create(
    Env* env, const std::string& dir, ServingVersion v, ModelSpec spec,
    const ValueLayout& table_layout, const ValueLayout& layout) {
  const std::string path = JoinPath(dir, ServingVersionName(v.version));
  RETURN_IF_ERROR(DeleteVersionDir(env, path));  // an unpublished leftover of a dead job
  RETURN_IF_ERROR(env->CreateDirs(path));
  std::unique_ptr<ServingVersionWriter> w(
      new ServingVersionWriter(env, path, std::move(v), std::move(spec), layout));
  bool same = table_layout.dim == layout.dim && table_layout.tables == layout.tables;
  for (uint32_t t = 0; same && t < kMaxTables; ++t)
    same = table_layout.table_dim[t] == layout.table_dim[t];
  if (!same) {
    return InternalError("serving layout does not match the table's rows");
  }
  ASSIGN_OR_RETURN(w->sparse_, SparseFileWriter::Create(env, JoinPath(path, kSparse), layout));
  return w;
}

Status ServingVersionWriter::AddRows(const RowBlock& rows) {
  scratch_.Resize(rows.size());
  const ValueLayout& from = rows.layout();
  const Quantizer q = layout_.quantizer();
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint64_t key = rows.key(i);
    // The counters (show, click, unseen) are the trainer's: a shrink changes every row's,
    // and serving does not need them; a row changes for serving when it is trained.
    scratch_.ClearRow(i, key);
    scratch_.flags(i) = rows.flags(i);
    scratch_.wide(i) = rows.wide(i);
    const uint32_t dim = from.DimOf(key);
    float* e = scratch_.emb(i);
    std::copy(rows.emb(i), rows.emb(i) + dim, e);
    std::fill(e + dim, e + layout_.dim, 0.0f);
    // Nearest on the serving grid (a table already on this grid keeps its values).
    if (q.enabled() && rows.has_emb(i)) {
      for (uint32_t d = 0; d < dim; ++d) e[d] = q.Value(q.Code(e[d], 0.5f));
    }
  }
  return sparse_->Add(scratch_);
}

Status ServingVersionWriter::AddDeleted(const std::vector<uint64_t>& keys) {
  deleted_.insert(deleted_.end(), keys.begin(), keys.end());
  return Status::OK();
}

StatusOr<ServingVersion> ServingVersionWriter::Finish(const std::string& dense_payload,
                                                      uint64_t keys) {
  RETURN_IF_ERROR(sparse_->Finish());
  std::vector<ModelFileInfo> files = {sparse_->Info(kSparse)};
  v_.rows = sparse_->counts().rows;
  std::sort(deleted_.begin(), deleted_.end());
  deleted_.erase(std::unique(deleted_.begin(), deleted_.end()), deleted_.end());
  v_.deleted = deleted_.size();
  if (!v_.base) {
    const std::string bytes = EncodeDeleted(deleted_);
    RETURN_IF_ERROR(WriteFileAtomic(env_, JoinPath(path_, kDeleted), bytes));
    files.push_back({kDeleted, bytes.size(), FileChecksum(bytes)});
  }
  files.emplace_back();
  RETURN_IF_ERROR(WriteDenseFile(env_, JoinPath(path_, kDense), dense_payload, &files.back()));
  v_.keys = keys;
  v_.time = UtcNow();
  nlohmann::json m = {{"format", "ctrbox-serving-version"},
                      {"version", v_.version},
                      {"kind", v_.base ? "base" : "delta"},
                      {"base", v_.base_version},
                      {"parent", v_.parent},
                      {"partition", v_.partition},
                      {"spec", spec_.ToJson()},
                      {"layout", LayoutToJson(layout_)},
                      {"files", FilesToJson(files)},
                      {"rows", v_.rows},
                      {"deleted", v_.deleted},
                      {"keys", keys}};
  if (!input_.is_null()) m["input"] = input_;
  const std::string text = ManifestText(m);
  RETURN_IF_ERROR(WriteFileAtomic(env_, JoinPath(path_, kManifest), text));
  v_.checksum = Hex(FileChecksum(text));
  v_.bytes = text.size();
  for (const ModelFileInfo& f : files) v_.bytes += f.bytes;
  RETURN_IF_ERROR(env_->SyncDir(DirName(path_)));
  finished_ = true;
  return v_;
}

StatusOr<std::vector<ServingVersion>> ReadServingVersions(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kServingDonefile);
  std::vector<ServingVersion> out;
  if (!env->FileExists(path)) return out;
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(env, path, &text));
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      return CorruptionError(
          fmt::format("{}: line {} has no end (the donefile is replaced "
                      "whole, never appended to: it was edited)",
                      path, line_no + 1));
    }
    ++line_no;
    const std::string where = fmt::format("{}: line {}", path, line_no);
    const nlohmann::json j = nlohmann::json::parse(text.substr(start, end - start), nullptr, false);
    if (j.is_discarded()) return CorruptionError(where + ": not JSON");
    ASSIGN_OR_RETURN(ServingVersion v, ServingVersion::FromJson(j, where));
    if (!out.empty() && v.version <= out.back().version)
      return CorruptionError(
          fmt::format("{}: version {} after {}", where, v.version, out.back().version));
    out.push_back(std::move(v));
    start = end + 1;
  }
  return out;
}

Status AppendServingVersion(Env* env, const std::string& dir, const ServingVersion& v) {
  ASSIGN_OR_RETURN(std::vector<ServingVersion> all, ReadServingVersions(env, dir));
  if (!all.empty() && all.back().version >= v.version) {
    return InternalError(fmt::format("{}: version {} is already published (newest {})",
                                     JoinPath(dir, kServingDonefile), v.version,
                                     all.back().version));
  }
  all.push_back(v);
  return WriteDonefile(env, dir, all);
}

namespace {

struct VersionFiles {
  nlohmann::json manifest;
  std::vector<ModelFileInfo> files;
};

StatusOr<VersionFiles> ReadVersionManifest(Env* env, const std::string& dir,
                                           const ServingVersion& v) {
  const std::string path = JoinPath(JoinPath(dir, ServingVersionName(v.version)), kManifest);
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(env, path, &text));
  if (Hex(FileChecksum(text)) != v.checksum) {
    return CorruptionError(fmt::format("{}: checksum {} but the donefile lists {}", path,
                                       Hex(FileChecksum(text)), v.checksum));
  }
  VersionFiles out;
  ASSIGN_OR_RETURN(out.manifest, ParseManifestText(path, std::move(text)));
  try {
    if (out.manifest.at("version").get<uint64_t>() != v.version)
      return CorruptionError(path + ": names another version");
    ASSIGN_OR_RETURN(out.files, FilesFromJson(path, out.manifest.at("files")));
  } catch (const std::exception& e) {
    return CorruptionError(path + ": " + e.what());
  }
  return out;
}

}  // namespace

Status VerifyServingVersion(Env* env, const std::string& dir, const ServingVersion& v) {
  ASSIGN_OR_RETURN(VersionFiles vf, ReadVersionManifest(env, dir, v));
  const std::string vdir = JoinPath(dir, ServingVersionName(v.version));
  for (const ModelFileInfo& f : vf.files) {
    std::string bytes;
    RETURN_IF_ERROR(ReadFileToString(env, JoinPath(vdir, f.name), &bytes));
    if (bytes.size() != f.bytes || FileChecksum(bytes) != f.checksum) {
      return CorruptionError(
          fmt::format("{}: size or checksum differs from its MANIFEST", JoinPath(vdir, f.name)));
    }
  }
  return Status::OK();
}

namespace {

// The spec, layout and input a version's MANIFEST records.
StatusOr<ServingVersionData> VersionDataOf(const VersionFiles& vf, const std::string& path) {
  ServingVersionData out;
  try {
    ASSIGN_OR_RETURN(out.spec, ModelSpec::FromJson(vf.manifest.at("spec")));
    out.layout = LayoutFromJson(vf.manifest.at("layout"));
    out.input = vf.manifest.value("input", nlohmann::json());
  } catch (const std::exception& e) {
    return CorruptionError(path + ": " + e.what());
  }
  return out;
}

}  // namespace

StatusOr<ServingVersionData> ReadServingVersionManifest(Env* env, const std::string& dir,
                                                        const ServingVersion& v) {
  ASSIGN_OR_RETURN(VersionFiles vf, ReadVersionManifest(env, dir, v));
  return VersionDataOf(vf, JoinPath(JoinPath(dir, ServingVersionName(v.version)), kManifest));
}

StatusOr<ServingVersionData> ReadServingVersion(Env* env, const std::string& dir,
                                                const ServingVersion& v,
                                                const ServingRowsFn& on_rows, bool dense) {
  ASSIGN_OR_RETURN(VersionFiles vf, ReadVersionManifest(env, dir, v));
  const std::string vdir = JoinPath(dir, ServingVersionName(v.version));
  ASSIGN_OR_RETURN(ServingVersionData out, VersionDataOf(vf, JoinPath(vdir, kManifest)));
  // Each file is read once, its checksum compared with the MANIFEST's.
  auto checked = [&](const char* name, uint64_t checksum) -> Status {
    for (const ModelFileInfo& f : vf.files) {
      if (f.name != name) continue;
      if (f.checksum == checksum) return Status::OK();
      return CorruptionError(JoinPath(vdir, name) + ": its checksum differs from its MANIFEST");
    }
    return CorruptionError(fmt::format("{}: lists no {}", JoinPath(vdir, kManifest), name));
  };
  if (!v.base) {
    const std::string path = JoinPath(vdir, kDeleted);
    std::string bytes;
    RETURN_IF_ERROR(ReadFileToString(env, path, &bytes));
    RETURN_IF_ERROR(checked(kDeleted, FileChecksum(bytes)));
    ASSIGN_OR_RETURN(out.deleted, DecodeDeleted(path, bytes));
  }
  SparseCounts counts;
  uint64_t checksum = 0;
  RETURN_IF_ERROR(
      ReadSparseFile(env, JoinPath(vdir, kSparse), out.layout, on_rows, &counts, &checksum));
  RETURN_IF_ERROR(checked(kSparse, checksum));
  if (counts.rows != v.rows) {
    return CorruptionError(fmt::format("{}: {} rows, the donefile says {}", JoinPath(vdir, kSparse),
                                       counts.rows, v.rows));
  }
  if (dense) {
    uint64_t dense_checksum = 0;
    ASSIGN_OR_RETURN(out.dense_payload,
                     ReadDenseFile(env, JoinPath(vdir, kDense), &dense_checksum));
    RETURN_IF_ERROR(checked(kDense, dense_checksum));
  }
  return out;
}

StatusOr<ServingState> LoadServingState(Env* env, const std::string& dir, uint64_t version) {
  ASSIGN_OR_RETURN(std::vector<ServingVersion> all, ReadServingVersions(env, dir));
  std::map<uint64_t, const ServingVersion*> by;
  for (const ServingVersion& v : all) by[v.version] = &v;
  // The chain: from `version` back through parents to its base.
  std::vector<const ServingVersion*> chain;
  for (uint64_t at = version; at != 0;) {
    auto it = by.find(at);
    if (it == by.end()) {
      return NotFoundError(fmt::format("{}: version {} is not listed (pruned, or never published)",
                                       JoinPath(dir, kServingDonefile), at));
    }
    chain.push_back(it->second);
    at = it->second->base ? 0 : it->second->parent;
  }
  std::reverse(chain.begin(), chain.end());
  ServingState s;
  s.version = version;
  for (const ServingVersion* v : chain) {
    if (v->base) s.rows.clear();
    std::map<uint64_t, std::string> changed;
    ASSIGN_OR_RETURN(ServingVersionData d, ReadServingVersion(
                                               env, dir, *v,
                                               [&](RowBlock& rows) {
                                                 for (size_t i = 0; i < rows.size(); ++i) {
                                                   std::string enc;
                                                   rows.EncodeRow(i, &enc);
                                                   changed[rows.key(i)] = std::move(enc);
                                                 }
                                                 return Status::OK();
                                               },
                                               v == chain.back()));
    for (uint64_t k : d.deleted) s.rows.erase(k);
    for (auto& [k, enc] : changed) s.rows[k] = std::move(enc);
    s.spec = std::move(d.spec);
    s.layout = d.layout;
    if (v == chain.back()) s.dense_payload = std::move(d.dense_payload);
    if (s.rows.size() != v->keys) {
      return CorruptionError(fmt::format("{}: {} rows once applied, the donefile says {}",
                                         JoinPath(dir, ServingVersionName(v->version)),
                                         s.rows.size(), v->keys));
    }
  }
  return s;
}

Status PruneServing(Env* env, const std::string& dir, uint32_t keep_bases, uint64_t keep_unlisted) {
  ASSIGN_OR_RETURN(std::vector<ServingVersion> all, ReadServingVersions(env, dir));
  uint64_t first_kept = 0;
  uint32_t bases = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->base && ++bases == keep_bases) {
      first_kept = it->version;
      break;
    }
  }
  std::vector<uint64_t> drop;
  if (first_kept > 0 && all.front().version < first_kept) {
    std::vector<ServingVersion> kept;
    for (const ServingVersion& v : all) {
      if (v.version >= first_kept) {
        kept.push_back(v);
      } else {
        drop.push_back(v.version);
      }
    }
    RETURN_IF_ERROR(WriteDonefile(env, dir, kept));  // first: no listed version loses its files
    all = std::move(kept);
  }
  const uint64_t newest = all.empty() ? 0 : all.back().version;
  ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
  for (const std::string& n : names) {
    const uint64_t v = VersionOfName(n);
    if (v == 0) continue;
    const bool listed_before = v < (all.empty() ? 1 : all.front().version);
    const bool unlisted_after = v > newest && v != keep_unlisted;
    if (listed_before || unlisted_after || std::find(drop.begin(), drop.end(), v) != drop.end()) {
      RETURN_IF_ERROR(DeleteVersionDir(env, JoinPath(dir, n)));
    }
  }
  return env->SyncDir(dir);
}

}  // namespace ctrbox
