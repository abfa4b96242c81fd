#include "ckpt/model_dir.h"

#include <fmt/format.h>

#include <functional>

#include "util/cleanup.h"
#include "util/hash.h"
#include "util/json_text.h"

namespace ctrbox {
namespace {

// Version 1: one sparse file, then the dense file. Version 2 (a model saved by several
// ranks): one sparse file per rank, then the dense file. A single process still writes 1.
constexpr uint32_t kVersion = 2;
constexpr const char* kManifest = "MANIFEST";

std::string FileName(const char* kind, uint64_t generation) {
  return fmt::format("{}-{:06d}.bin", kind, generation);
}

}  // namespace

nlohmann::json ModelManifest::ToJson() const {
  nlohmann::json j = {{"format", "ctrbox-model"},
                      {"version", files.size() > 2 ? 2 : 1},
                      {"generation", generation},
                      {"spec", spec.ToJson()},
                      {"files", FilesToJson(files)},
                      {"keys", keys},
                      {"keys_with_embedding", keys_with_embedding},
                      {"bytes_live", bytes_live},
                      {"dense_params", dense_params},
                      {"digest", digest},
                      {"trained_examples", trained_examples}};
  if (!input.is_null()) j["input"] = input;
  return j;
}

bool ModelExists(Env* env, const std::string& dir) {
  return env->FileExists(JoinPath(dir, kManifest));
}

namespace {
bool IsModelFileName(const std::string& c) {
  return (c.rfind("sparse-", 0) == 0 || c.rfind("dense-", 0) == 0) && c.size() > 4 &&
         c.substr(c.size() - 4) == ".bin";
}
}  // namespace

StatusOr<std::vector<std::string>> ModelFilesIn(Env* env, const std::string& dir) {
  std::vector<std::string> names;
  if (!env->IsDirectory(dir)) return names;
  ASSIGN_OR_RETURN(auto children, env->GetChildren(dir));
  for (const std::string& c : children) {
    if (IsModelFileName(c)) names.push_back(c);
  }
  return names;
}

StatusOr<ModelManifest> ReadManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifest);
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(env, path, &text));
  ASSIGN_OR_RETURN(nlohmann::json j, ParseManifestText(path, std::move(text)));
  try {
    if (j.at("format") != "ctrbox-model")
      return CorruptionError(path + ": not a ctrbox model manifest");
    if (j.at("version").get<uint32_t>() > kVersion) {
      return CorruptionError(fmt::format("{}: model version {} is newer than this build reads ({})",
                                         path, j.at("version").get<uint32_t>(), kVersion));
    }
    ModelManifest m;
    m.generation = j.at("generation").get<uint64_t>();
    ASSIGN_OR_RETURN(m.spec, ModelSpec::FromJson(j.at("spec")));
    ASSIGN_OR_RETURN(m.files, FilesFromJson(path, j.at("files")));
    if (m.files.size() < 2 || (j.at("version").get<uint32_t>() < 2 && m.files.size() != 2)) {
      return CorruptionError(path + ": expected sparse files and a dense file");
    }
    m.keys = j.at("keys").get<uint64_t>();
    m.keys_with_embedding = j.at("keys_with_embedding").get<uint64_t>();
    m.bytes_live = j.at("bytes_live").get<uint64_t>();
    m.dense_params = j.at("dense_params").get<uint64_t>();
    m.digest = j.at("digest").get<std::string>();
    m.trained_examples = j.at("trained_examples").get<uint64_t>();
    if (j.contains("input") && j["input"].is_object()) m.input = j["input"];
    return m;
  } catch (const std::exception& e) {
    return CorruptionError(path + ": " + e.what());
  }
}

namespace {

// The second half of a save: with m's sparse files written (their counts in `sparse`), writes
// the dense file, fills m's counts and digest, commits the MANIFEST (the rename is the point
// where the new generation becomes the model), then removes every other model file (older
// generations: garbage, retried at the next save if this fails).
Status CommitGeneration(Env* env, const std::string& dir, const CtrModel& model,
                        const SparseCounts& sparse, ModelManifest* m) {
  m->keys = sparse.rows;
  m->keys_with_embedding = sparse.with_emb;
  m->bytes_live = sparse.bytes_live;
  const std::string payload = DensePayload(model);
  m->files.emplace_back();
  RETURN_IF_ERROR(WriteDenseFile(env, JoinPath(dir, FileName("dense", m->generation)), payload,
                                 &m->files.back()));
  m->dense_params = model.dense_params().size();
  m->digest = StateDigest(sparse.sum, m->keys, payload);
  RETURN_IF_ERROR(env->SyncDir(dir));
  RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(dir, kManifest), ManifestText(m->ToJson())));
  ASSIGN_OR_RETURN(auto children, env->GetChildren(dir));
  for (const std::string& name : children) {
    bool ours = false;
    for (const ModelFileInfo& f : m->files) ours = ours || f.name == name;
    if (IsModelFileName(name) && !ours) env->DeleteFile(JoinPath(dir, name)).IgnoreError();
  }
  return Status::OK();
}

}  // namespace

StatusOr<ModelManifest> SaveModel(Env* env, const std::string& dir, const ModelSpec& spec,
                                  SparseTable& table, const CtrModel& model,
                                  uint64_t trained_examples, ThreadPool* pool,
                                  const nlohmann::json& input) {
  RETURN_IF_ERROR(env->CreateDirs(dir));
  ModelManifest m;
  m.generation = 1;
  if (ModelExists(env, dir)) {
    ASSIGN_OR_RETURN(ModelManifest old, ReadManifest(env, dir));
    m.generation = old.generation + 1;
  }
  m.spec = spec;
  m.trained_examples = trained_examples;
  m.input = input;

  // Sparse rows, stripe by stripe.
  const std::string sparse_name = FileName("sparse", m.generation);
  const std::string dense_name = FileName("dense", m.generation);
  // A save that fails before its MANIFEST names the new files deletes them: after a full disk
  // the space is given back, and the previous generation stays the model.
  Cleanup remove_uncommitted([&] {
    // Unless the MANIFEST was renamed into place and only a later step (the directory's
    // fsync) failed: then it names these files.
    StatusOr<ModelManifest> now = ReadManifest(env, dir);
    if (now.ok() && now->generation == m.generation) return;
    for (const std::string& name : {sparse_name, dense_name}) {
      if (env->FileExists(JoinPath(dir, name))) env->DeleteFile(JoinPath(dir, name)).IgnoreError();
    }
  });
  SparseCounts c;
  m.files.emplace_back();
  RETURN_IF_ERROR(WriteTableSparseFile(env, dir, sparse_name, table, &m.files.back(), &c));
  RETURN_IF_ERROR(CommitGeneration(env, dir, model, c, &m));
  remove_uncommitted.Cancel();
  return m;
}

// Reads every sparse file of `m` (all but the last file), verifying each one's checksum, and
// adds up their counts.
static Status ReadSparseFiles(Env* env, const std::string& dir, const ModelManifest& m,
                              const ValueLayout& layout,
                              const std::function<Status(RowBlock&)>& on_block,
                              SparseCounts* scan) {
  for (size_t f = 0; f + 1 < m.files.size(); ++f) {
    SparseCounts c;
    uint64_t checksum = 0;
    const std::string path = JoinPath(dir, m.files[f].name);
    RETURN_IF_ERROR(ReadSparseFile(env, path, layout, on_block, &c, &checksum));
    if (checksum != m.files[f].checksum)
      return CorruptionError(path + ": file checksum differs from the MANIFEST");
    scan->rows += c.rows;
    scan->with_emb += c.with_emb;
    scan->bytes_live += c.bytes_live;
    scan->sum += c.sum;
  }
  return Status::OK();
}

Status StreamModel(Env* env, const std::string& dir, const ModelManifest& m,
                   const ValueLayout& layout, CtrModel* model,
                   const std::function<Status(RowBlock&)>& on_block) {
  SparseCounts scan;
  uint64_t checksum = 0;
  RETURN_IF_ERROR(ReadSparseFiles(env, dir, m, layout, on_block, &scan));
  const std::string dense_path = JoinPath(dir, m.files.back().name);
  ASSIGN_OR_RETURN(std::string payload, ReadDenseFile(env, dense_path, &checksum));
  if (checksum != m.files.back().checksum)
    return CorruptionError(dense_path + ": file checksum differs from the MANIFEST");
  RETURN_IF_ERROR(ApplyDensePayload(payload, dense_path, model));
  if (scan.rows != m.keys || StateDigest(scan.sum, scan.rows, payload) != m.digest) {
    return CorruptionError(JoinPath(dir, "MANIFEST") + ": the files do not match its digest");
  }
  return Status::OK();
}

Status LoadModel(Env* env, const std::string& dir, const ModelManifest& m, SparseTable* table,
                 CtrModel* model, ThreadPool* pool, const KeyFilter& keep) {
  RowBlock kept(table->layout());
  return StreamModel(env, dir, m, table->layout(), model,
                     [&](RowBlock& rows) { return InsertKept(table, rows, keep, &kept, pool); });
}

StatusOr<ModelManifest> VerifyModel(Env* env, const std::string& dir) {
  ASSIGN_OR_RETURN(ModelManifest m, ReadManifest(env, dir));
  CtrModel shape(m.spec.schema, m.spec.model, m.spec.sparse_optimizer, m.spec.dense_optimizer, 0);
  SparseCounts scan;
  uint64_t checksum = 0;
  RETURN_IF_ERROR(ReadSparseFiles(
      env, dir, m, shape.value_layout(), [](RowBlock&) { return Status::OK(); }, &scan));
  const std::string dense_path = JoinPath(dir, m.files.back().name);
  ASSIGN_OR_RETURN(std::string payload, ReadDenseFile(env, dense_path, &checksum));
  if (checksum != m.files.back().checksum)
    return CorruptionError(dense_path + ": file checksum differs from the MANIFEST");
  if (scan.rows != m.keys || scan.bytes_live != m.bytes_live ||
      scan.with_emb != m.keys_with_embedding ||
      StateDigest(scan.sum, scan.rows, payload) != m.digest) {
    return CorruptionError(JoinPath(dir, "MANIFEST") +
                           ": the files do not match its counts or digest");
  }
  return m;
}

std::string RankModelPart::Encode() const {
  return JsonText(nlohmann::json({{"generation", generation},
                                  {"name", file.name},
                                  {"bytes", file.bytes},
                                  {"checksum", file.checksum},
                                  {"rows", counts.rows},
                                  {"with_emb", counts.with_emb},
                                  {"bytes_live", counts.bytes_live},
                                  {"sum", counts.sum}}));
}

StatusOr<RankModelPart> RankModelPart::Decode(std::string_view bytes) {
  try {
    const nlohmann::json j = nlohmann::json::parse(bytes);
    RankModelPart s;
    s.generation = j.at("generation").get<uint64_t>();
    s.file.name = j.at("name").get<std::string>();
    s.file.bytes = j.at("bytes").get<uint64_t>();
    s.file.checksum = j.at("checksum").get<uint64_t>();
    s.counts.rows = j.at("rows").get<uint64_t>();
    s.counts.with_emb = j.at("with_emb").get<uint64_t>();
    s.counts.bytes_live = j.at("bytes_live").get<uint64_t>();
    s.counts.sum = j.at("sum").get<uint64_t>();
    return s;
  } catch (const std::exception& e) {
    return CorruptionError(std::string("a rank's part of the model record: ") + e.what());
  }
}

StatusOr<uint64_t> NextGeneration(Env* env, const std::string& dir) {
  if (!ModelExists(env, dir)) return uint64_t{1};
  ASSIGN_OR_RETURN(ModelManifest old, ReadManifest(env, dir));
  return old.generation + 1;
}

StatusOr<RankModelPart> SaveRankModelPart(Env* env, const std::string& dir, uint64_t generation,
                                          int rank, SparseTable& table) {
  RETURN_IF_ERROR(env->CreateDirs(dir));
  RankModelPart s;
  s.generation = generation;
  const std::string name = fmt::format("sparse-{:06d}-r{:04d}.bin", generation, rank);
  RETURN_IF_ERROR(WriteTableSparseFile(env, dir, name, table, &s.file, &s.counts));
  return s;
}

StatusOr<ModelManifest> CommitRanksModel(Env* env, const std::string& dir, const ModelSpec& spec,
                                         const CtrModel& model, uint64_t trained_examples,
                                         const std::vector<RankModelPart>& parts,
                                         const nlohmann::json& input) {
  ModelManifest m;
  m.generation = parts.at(0).generation;
  m.spec = spec;
  m.input = input;
  m.trained_examples = trained_examples;
  SparseCounts c;
  for (const RankModelPart& s : parts) {
    if (s.generation != m.generation) {
      return InternalError(
          fmt::format("model parts of generations {} and {}", m.generation, s.generation));
    }
    m.files.push_back(s.file);
    c.rows += s.counts.rows;
    c.with_emb += s.counts.with_emb;
    c.bytes_live += s.counts.bytes_live;
    c.sum += s.counts.sum;
  }
  RETURN_IF_ERROR(CommitGeneration(env, dir, model, c, &m));
  return m;
}

StatusOr<LoadedModel> OpenModel(Env* env, const std::string& dir, TieredOptions storage,
                                ThreadPool* pool, const KeyFilter& keep) {
  if (!ModelExists(env, dir))
    return NotFoundError(fmt::format("no model in {} (no MANIFEST)", dir));
  LoadedModel lm;
  ASSIGN_OR_RETURN(lm.manifest, ReadManifest(env, dir));
  const ModelSpec& s = lm.manifest.spec;
  lm.model = std::make_unique<CtrModel>(s.schema, s.model, s.sparse_optimizer, s.dense_optimizer,
                                        s.table.seed);
  storage.layout = lm.model->value_layout();
  ASSIGN_OR_RETURN(lm.table, TieredTable::Open(env, storage));
  RETURN_IF_ERROR(LoadModel(env, dir, lm.manifest, lm.table.get(), lm.model.get(), pool, keep));
  return lm;
}

StatusOr<std::string> ModelDigest(SparseTable& table, const CtrModel& model, ThreadPool* pool) {
  ASSIGN_OR_RETURN(uint64_t sparse, table.SparseDigest(pool));
  return StateDigest(sparse, table.Stats().keys, DensePayload(model));
}

}  // namespace ctrbox
