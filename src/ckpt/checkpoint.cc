#include "ckpt/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "ckpt/model_dir.h"
#include "util/cleanup.h"
#include "util/logging.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

constexpr uint32_t kVersion = 1;
constexpr const char* kManifest = "MANIFEST";
constexpr const char* kSparse = "sparse.bin";
constexpr const char* kDense = "dense.bin";

// The id of a directory named ckpt-<digits>, or 0.
uint64_t ParseName(const std::string& name) {
  if (name.size() < 6 || name.rfind("ckpt-", 0) != 0 || name.size() > 5 + 18) return 0;
  uint64_t id = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    id = id * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return id;
}

// The ids of every ckpt-N directory in `dir`, complete or not, ascending.
StatusOr<std::vector<uint64_t>> AllIds(Env* env, const std::string& dir) {
  std::vector<uint64_t> ids;
  if (!env->IsDirectory(dir)) return ids;
  ASSIGN_OR_RETURN(auto children, env->GetChildren(dir));
  for (const std::string& c : children) {
    const uint64_t id = ParseName(c);
    if (id != 0 && env->IsDirectory(JoinPath(dir, c))) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Deletes a checkpoint directory: its MANIFEST first, so that a crash halfway leaves an
// incomplete directory (removed by the next job), never a complete one with files missing.
Status DeleteCheckpointDir(Env* env, const std::string& path) {
  return DeleteDirOfFiles(env, path, kManifest);
}

TrainPosition PositionFromJson(const nlohmann::json& j) {
  TrainPosition p;
  p.passes = j.at("passes").get<uint64_t>();
  // Before passes were sized by memory on several ranks: every pass of a rank was whole.
  p.grid_passes = j.value("grid_passes", p.passes);
  p.examples = j.at("examples").get<uint64_t>();
  p.trained_examples = j.at("trained_examples").get<uint64_t>();
  p.embeddings_created = j.at("embeddings_created").get<uint64_t>();
  p.keys_shrunk = j.at("keys_shrunk").get<uint64_t>();
  return p;
}

// Checks one checkpoint's files against its MANIFEST without loading the rows. *rows_ok: its
// sparse.bin verifies (what a later delta of its chain needs).
Status VerifyFiles(Env* env, const std::string& path, const CheckpointManifest& m, bool* rows_ok) {
  *rows_ok = false;
  CtrModel shape(m.spec.schema, m.spec.model, m.spec.sparse_optimizer, m.spec.dense_optimizer, 0);
  SparseCounts counts;
  uint64_t checksum = 0;
  const std::string sparse = JoinPath(path, kSparse), dense = JoinPath(path, kDense);
  RETURN_IF_ERROR(ReadSparseFile(
      env, sparse, shape.value_layout(), [](RowBlock&) { return Status::OK(); }, &counts,
      &checksum));
  if (checksum != m.files[0].checksum || counts.rows != m.rows)
    return CorruptionError(sparse + ": the file does not match its MANIFEST");
  *rows_ok = true;
  ASSIGN_OR_RETURN(std::string payload, ReadDenseFile(env, dense, &checksum));
  if (checksum != m.files[1].checksum)
    return CorruptionError(dense + ": the file does not match its MANIFEST");
  if (m.base && !m.digest.empty() && StateDigest(counts.sum, counts.rows, payload) != m.digest)
    return CorruptionError(JoinPath(path, kManifest) + ": the files do not match its digest");
  return Status::OK();
}

}  // namespace

nlohmann::json TrainPosition::ToJson() const {
  return {{"passes", passes},
          {"grid_passes", grid_passes},
          {"examples", examples},
          {"trained_examples", trained_examples},
          {"embeddings_created", embeddings_created},
          {"keys_shrunk", keys_shrunk}};
}

nlohmann::json CheckpointManifest::ToJson() const {
  nlohmann::json j = {{"format", "ctrbox-checkpoint"},
                      {"version", kVersion},
                      {"id", id},
                      {"kind", base ? "base" : "delta"},
                      {"base", base_id},
                      {"parent", parent},
                      {"depth", depth},
                      {"spec", spec.ToJson()},
                      {"settings", settings},
                      {"position", position.ToJson()},
                      {"files", FilesToJson(files)},
                      {"rows", rows},
                      {"keys", keys},
                      {"digest", digest},
                      {"write_seconds", write_seconds}};
  if (!stream.is_null()) j["stream"] = stream;
  if (!epochs.is_null()) j["epochs"] = epochs;
  if (!shrink.is_null()) j["shrink"] = shrink;
  return j;
}

std::string CheckpointName(uint64_t id) { return fmt::format("ckpt-{:06d}", id); }

StatusOr<std::vector<uint64_t>> ListCheckpoints(Env* env, const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, AllIds(env, dir));
  std::vector<uint64_t> complete;
  for (uint64_t id : ids) {
    if (env->FileExists(JoinPath(JoinPath(dir, CheckpointName(id)), kManifest)))
      complete.push_back(id);
  }
  return complete;
}

StatusOr<CheckpointManifest> ReadCheckpointManifest(Env* env, const std::string& dir, uint64_t id) {
  const std::string path = JoinPath(JoinPath(dir, CheckpointName(id)), kManifest);
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(env, path, &text));
  ASSIGN_OR_RETURN(nlohmann::json j, ParseManifestText(path, std::move(text)));
  try {
    if (j.at("format") != "ctrbox-checkpoint")
      return CorruptionError(path + ": not a ctrbox checkpoint manifest");
    if (j.at("version").get<uint32_t>() > kVersion) {
      return CorruptionError(
          fmt::format("{}: checkpoint version {} is newer than this build "
                      "reads ({})",
                      path, j.at("version").get<uint32_t>(), kVersion));
    }
    CheckpointManifest m;
    m.id = j.at("id").get<uint64_t>();
    if (m.id != id) return CorruptionError(fmt::format("{}: names checkpoint {}", path, m.id));
    const std::string kind = j.at("kind").get<std::string>();
    if (kind != "base" && kind != "delta")
      return CorruptionError(fmt::format("{}: unknown kind '{}'", path, kind));
    m.base = kind == "base";
    m.base_id = j.at("base").get<uint64_t>();
    m.parent = j.at("parent").get<uint64_t>();
    m.depth = j.at("depth").get<uint32_t>();
    if (m.base ? (m.base_id != id || m.depth != 0)
               : (m.parent == 0 || m.parent >= id || m.base_id > m.parent || m.depth == 0)) {
      return CorruptionError(path + ": inconsistent base, parent and depth");
    }
    ASSIGN_OR_RETURN(m.spec, ModelSpec::FromJson(j.at("spec")));
    m.settings = j.at("settings");
    m.position = PositionFromJson(j.at("position"));
    ASSIGN_OR_RETURN(m.files, FilesFromJson(path, j.at("files")));
    if (m.files.size() != 2 || m.files[0].name != kSparse || m.files[1].name != kDense)
      return CorruptionError(path + ": expected the files sparse.bin and dense.bin");
    m.rows = j.at("rows").get<uint64_t>();
    m.keys = j.at("keys").get<uint64_t>();
    m.digest = j.at("digest").get<std::string>();
    m.write_seconds = j.at("write_seconds").get<double>();
    m.stream = j.value("stream", nlohmann::json());
    m.epochs = j.value("epochs", nlohmann::json());
    m.shrink = j.value("shrink", nlohmann::json());
    if (!m.shrink.is_null() && (m.base || !m.shrink.is_object()))
      return CorruptionError(path + ": a shrink to replay belongs to a delta");
    return m;
  } catch (const std::exception& e) {
    return CorruptionError(path + ": " + e.what());
  }
}

Status RemoveIncompleteCheckpoints(Env* env, const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, AllIds(env, dir));
  for (uint64_t id : ids) {
    const std::string path = JoinPath(dir, CheckpointName(id));
    if (env->FileExists(JoinPath(path, kManifest))) continue;
    LOG_INFO("removing the incomplete checkpoint {} (a job stopped while writing it)", path);
    RETURN_IF_ERROR(DeleteCheckpointDir(env, path));
  }
  return env->IsDirectory(dir) ? env->SyncDir(dir) : Status::OK();
}

Status RemoveCheckpointsAfter(Env* env, const std::string& dir, uint64_t id) {
  if (!env->IsDirectory(dir)) return Status::OK();
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, AllIds(env, dir));
  for (uint64_t c : ids) {
    if (c <= id) continue;
    LOG_INFO("removing {} (not a checkpoint of every rank)", JoinPath(dir, CheckpointName(c)));
    RETURN_IF_ERROR(DeleteCheckpointDir(env, JoinPath(dir, CheckpointName(c))));
  }
  return env->SyncDir(dir);
}

namespace {

nlohmann::json ShrinkToJson(const AccessorOptions& a) {
  return {{"decay", a.decay},
          {"delete_threshold", a.delete_threshold},
          {"delete_after_unseen", a.delete_after_unseen_passes},
          {"nonclk_coeff", a.nonclk_coeff},
          {"click_coeff", a.click_coeff}};
}

// Replays the shrink a delta records on the table it was applied to.
Status ReplayShrink(const CheckpointManifest& c, const std::string& path, SparseTable* table,
                    ThreadPool* pool) {
  AccessorOptions a = c.spec.table;
  try {
    a.decay = c.shrink.at("decay").get<float>();
    a.delete_threshold = c.shrink.at("delete_threshold").get<float>();
    a.delete_after_unseen_passes = c.shrink.at("delete_after_unseen").get<uint32_t>();
    a.nonclk_coeff = c.shrink.at("nonclk_coeff").get<float>();
    a.click_coeff = c.shrink.at("click_coeff").get<float>();
  } catch (const std::exception& e) {
    return CorruptionError(JoinPath(path, kManifest) + ": shrink: " + e.what());
  }
  return table->Shrink(CtrAccessor(table->layout(), a), pool).status();
}

}  // namespace

Status LoadCheckpoint(Env* env, const std::string& dir, uint64_t id, SparseTable* table,
                      CtrModel* model, ThreadPool* pool, CheckpointManifest* manifest,
                      const KeyFilter& keep) {
  // The chain: the base, then each delta up to `id`.
  std::vector<CheckpointManifest> chain;
  ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(env, dir, id));
  chain.push_back(m);
  while (!chain.back().base) {
    const CheckpointManifest& c = chain.back();
    StatusOr<CheckpointManifest> p = ReadCheckpointManifest(env, dir, c.parent);
    if (!p.ok()) {
      return Status(p.status().code(), fmt::format("{} is a delta of {}, which does not load: {}",
                                                   CheckpointName(c.id), CheckpointName(c.parent),
                                                   p.status().message()));
    }
    if (p->base_id != c.base_id || p->depth + 1 != c.depth) {
      return CorruptionError(fmt::format("{}: its parent {} belongs to another chain",
                                         CheckpointName(c.id), CheckpointName(c.parent)));
    }
    chain.push_back(std::move(*p));
  }
  std::reverse(chain.begin(), chain.end());
  SparseCounts last;
  for (const CheckpointManifest& c : chain) {
    const std::string path = JoinPath(dir, CheckpointName(c.id));
    if (c.spec.ToJson() != m.spec.ToJson())
      return CorruptionError(path + ": its model spec differs from the rest of its chain");
    const std::string sparse = JoinPath(path, kSparse);
    SparseCounts counts;
    uint64_t checksum = 0;
    RowBlock kept(table->layout());
    RETURN_IF_ERROR(ReadSparseFile(
        env, sparse, table->layout(),
        [&](RowBlock& rows) { return InsertKept(table, rows, keep, &kept, pool); }, &counts,
        &checksum));
    if (checksum != c.files[0].checksum || counts.rows != c.rows)
      return CorruptionError(sparse + ": the file does not match its MANIFEST");
    if (!c.shrink.is_null()) RETURN_IF_ERROR(ReplayShrink(c, path, table, pool));
    const uint64_t keys = keep ? c.keys : table->Stats().keys;
    if (keys != c.keys) {
      return CorruptionError(
          fmt::format("{}: the table holds {} rows after it, its MANIFEST {}", path, keys, c.keys));
    }
    last = counts;
  }
  const std::string path = JoinPath(dir, CheckpointName(id)), dense = JoinPath(path, kDense);
  uint64_t checksum = 0;
  ASSIGN_OR_RETURN(std::string payload, ReadDenseFile(env, dense, &checksum));
  if (checksum != m.files[1].checksum)
    return CorruptionError(dense + ": the file does not match its MANIFEST");
  RETURN_IF_ERROR(ApplyDensePayload(payload, dense, model));
  if (!m.digest.empty() && !keep) {
    std::string digest;
    if (m.base) {
      digest = StateDigest(last.sum, last.rows, payload);
    } else {
      ASSIGN_OR_RETURN(digest, ModelDigest(*table, *model, pool));
    }
    if (digest != m.digest) {
      return CorruptionError(fmt::format("{}: the state it loads has digest {}, its MANIFEST {}",
                                         path, digest, m.digest));
    }
  }
  *manifest = std::move(m);
  return Status::OK();
}

StatusOr<ResumedState> ResumeNewestCheckpoint(Env* env, const std::string& dir,
                                              const TableFactory& new_table, ThreadPool* pool) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, ListCheckpoints(env, dir));
  if (ids.empty()) return NotFoundError(fmt::format("no complete checkpoint in {}", dir));
  ResumedState r;
  std::string failures;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    Status s = [&]() -> Status {
      ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(env, dir, *it));
      const ModelSpec& spec = m.spec;
      r.model = std::make_unique<CtrModel>(spec.schema, spec.model, spec.sparse_optimizer,
                                           spec.dense_optimizer, spec.table.seed);
      ASSIGN_OR_RETURN(r.table, new_table(r.model->value_layout()));
      return LoadCheckpoint(env, dir, *it, r.table.get(), r.model.get(), pool, &r.manifest);
    }();
    if (s.ok()) return r;
    r.table.reset();
    r.model.reset();
    const std::string msg = fmt::format("{}: {}", CheckpointName(*it), s.ToString());
    failures += (failures.empty() ? "" : "; ") + msg;
    if (std::next(it) != ids.rend()) {
      r.warnings.push_back(
          fmt::format("{}; resuming from {} instead", msg, CheckpointName(*std::next(it))));
      LOG_WARNING("checkpoint {}", r.warnings.back());
    }
  }
  return CorruptionError(fmt::format("no checkpoint in {} loads: {}", dir, failures));
}

StatusOr<nlohmann::json> InspectCheckpoints(Env* env, const std::string& dir) {
  if (!env->IsDirectory(dir)) return NotFoundError(dir + ": no such directory");
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, AllIds(env, dir));
  nlohmann::json list = nlohmann::json::array();
  std::map<uint64_t, bool> ok, rows_ok;  // complete checkpoints: verified; sparse.bin verified
  std::map<uint64_t, CheckpointManifest> manifests;
  uint64_t bytes = 0;
  for (uint64_t id : ids) {
    const std::string path = JoinPath(dir, CheckpointName(id));
    nlohmann::json e = {{"name", CheckpointName(id)}};
    if (!env->FileExists(JoinPath(path, kManifest))) {
      e["complete"] = false;
      list.push_back(e);
      continue;
    }
    e["complete"] = true;
    StatusOr<CheckpointManifest> m = ReadCheckpointManifest(env, dir, id);
    Status s = m.status();
    if (m.ok()) {
      bool rows = false;
      s = VerifyFiles(env, path, *m, &rows);
      rows_ok[id] = rows;
      e["kind"] = m->base ? "base" : "delta";
      e["base"] = CheckpointName(m->base_id);
      if (m->parent) e["parent"] = CheckpointName(m->parent);
      e["position"] = m->position.ToJson();
      e["rows"] = m->rows;
      e["keys"] = m->keys;
      e["bytes"] = m->files[0].bytes + m->files[1].bytes;
      e["digest"] = m->digest;
      e["write_seconds"] = m->write_seconds;
      bytes += e["bytes"].get<uint64_t>();
      manifests[id] = *m;
    }
    e["verified"] = s.ok();
    if (!s.ok()) e["error"] = s.ToString();
    ok[id] = s.ok();
    list.push_back(e);
  }
  // The newest checkpoint whose whole chain verifies is the one a resume would load.
  nlohmann::json newest = nullptr;
  for (auto it = manifests.rbegin(); it != manifests.rend() && newest.is_null(); ++it) {
    bool chain_ok = ok[it->first];
    for (uint64_t c = it->first; chain_ok && !manifests.at(c).base;) {
      c = manifests.at(c).parent;
      chain_ok = manifests.count(c) && rows_ok[c];
    }
    if (chain_ok) newest = CheckpointName(it->first);
  }
  return nlohmann::json{{"command", "inspect"},
                        {"ckpt_dir", dir},
                        {"checkpoints", list},
                        {"bytes_on_disk", bytes},
                        {"resumes_from", newest}};
}

// ---- CheckpointWriter -------------------------------------------------------------------------

CheckpointWriter::CheckpointWriter(Env* env, CheckpointOptions options, ModelSpec spec,
                                   nlohmann::json settings, const ValueLayout& layout)
    : env_(env),
      options_(std::move(options)),
      spec_(std::move(spec)),
      settings_(std::move(settings)),
      layout_(layout) {}
// A delta begun but never committed (the job failed): its directory has no MANIFEST and is
// never read; it is deleted now rather than when the next job starts, so that the space it
// holds (all of it, after a full disk) is given back.
CheckpointWriter::~CheckpointWriter() {
  delta_.reset();
  const std::string path = Path(next_id_);
  if (env_->IsDirectory(path) && !env_->FileExists(JoinPath(path, kManifest))) {
    DeleteCheckpointDir(env_, path).IgnoreError();
  }
}

StatusOr<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Open(
    Env* env, CheckpointOptions options, ModelSpec spec, nlohmann::json settings,
    const ValueLayout& layout, const CheckpointManifest* last) {
  if (options.keep < 1) return InvalidArgumentError("ckpt.keep must be >= 1");
  if (options.base_every < 1) return InvalidArgumentError("ckpt.base_every must be >= 1");
  RETURN_IF_ERROR(env->CreateDirs(options.dir));
  RETURN_IF_ERROR(RemoveIncompleteCheckpoints(env, options.dir));
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, AllIds(env, options.dir));
  std::unique_ptr<CheckpointWriter> w(
      new CheckpointWriter(env, std::move(options), std::move(spec), std::move(settings), layout));
  w->next_id_ = ids.empty() ? 1 : ids.back() + 1;
  if (last != nullptr) {
    w->has_last_ = true;
    w->last_ = *last;
    w->stream_ = last->stream;
    w->epochs_ = last->epochs;
  }
  return w;
}

std::string CheckpointWriter::Path(uint64_t id) const {
  return JoinPath(options_.dir, CheckpointName(id));
}

bool CheckpointWriter::NextIsBase() const {
  return !has_last_ || shrunk_ || last_.depth + 1 >= options_.base_every;
}

Status CheckpointWriter::OnPush(const RowBlock& rows) {
  if (!shrink_.is_null()) OnShrink();     // rows after the shrink: the replay would misorder them
  if (NextIsBase()) return Status::OK();  // a base reads the table instead
  Stopwatch clock;
  if (!delta_) {
    RETURN_IF_ERROR(env_->CreateDirs(Path(next_id_)));
    ASSIGN_OR_RETURN(delta_,
                     SparseFileWriter::Create(env_, JoinPath(Path(next_id_), kSparse), layout_));
  }
  RETURN_IF_ERROR(delta_->Add(rows));
  push_seconds_ += clock.Seconds();
  return Status::OK();
}

void CheckpointWriter::OnShrink(const AccessorOptions* replay) {
  if (replay != nullptr && !NextIsBase() && shrink_.is_null()) {
    shrink_ = ShrinkToJson(*replay);
    return;
  }
  shrink_ = nullptr;
  shrunk_ = true;
  delta_.reset();  // the base rewrites sparse.bin
}

StatusOr<CheckpointManifest> CheckpointWriter::Commit(SparseTable& table,
                                                      const std::string& dense_payload,
                                                      const TrainPosition& position,
                                                      const DigestFn& digest, ThreadPool* pool) {
  if (has_last_ && !shrunk_ && shrink_.is_null() && last_.position.passes == position.passes &&
      last_.stream == stream_ && last_.epochs == epochs_)
    return last_;
  Stopwatch clock;
  CheckpointManifest m;
  m.id = next_id_;
  m.base = NextIsBase();
  m.parent = has_last_ ? last_.id : 0;
  m.base_id = m.base ? m.id : last_.base_id;
  m.depth = m.base ? 0 : last_.depth + 1;
  m.spec = spec_;
  m.settings = settings_;
  m.position = position;
  m.stream = stream_;
  m.epochs = epochs_;
  if (!m.base) m.shrink = shrink_;
  const std::string path = Path(m.id);
  RETURN_IF_ERROR(env_->CreateDirs(path));
  // A commit that fails before its MANIFEST is written leaves nothing behind.
  Cleanup remove_partial([&] {
    delta_.reset();
    DeleteCheckpointDir(env_, path).IgnoreError();
  });

  SparseCounts counts;
  if (m.base) {
    delta_.reset();
    m.files.emplace_back();
    RETURN_IF_ERROR(WriteTableSparseFile(env_, path, kSparse, table, &m.files.back(), &counts));
    m.keys = counts.rows;
    m.digest = StateDigest(counts.sum, counts.rows, dense_payload);
  } else {
    if (!delta_) {  // nothing pushed since the last checkpoint: an empty delta
      ASSIGN_OR_RETURN(delta_, SparseFileWriter::Create(env_, JoinPath(path, kSparse), layout_));
    }
    RETURN_IF_ERROR(delta_->Finish());
    m.files.push_back(delta_->Info(kSparse));
    counts = delta_->counts();
    delta_.reset();
    m.keys = table.Stats().keys;
    if (digest) {
      ASSIGN_OR_RETURN(m.digest, digest());
    }
  }
  m.rows = counts.rows;
  m.files.emplace_back();
  RETURN_IF_ERROR(WriteDenseFile(env_, JoinPath(path, kDense), dense_payload, &m.files.back()));
  m.write_seconds = clock.Seconds() + (m.base ? 0.0 : push_seconds_);
  RETURN_IF_ERROR(WriteFileAtomic(env_, JoinPath(path, kManifest), ManifestText(m.ToJson())));
  remove_partial.Cancel();
  RETURN_IF_ERROR(env_->SyncDir(options_.dir));  // the commit point

  const uint64_t bytes = m.files[0].bytes + m.files[1].bytes;
  if (m.base) {
    ++bases_;
    base_bytes_ += bytes;
    base_rows_ += m.rows;
    base_seconds_ += m.write_seconds;
  } else {
    ++deltas_;
    delta_bytes_ += bytes;
    delta_rows_ += m.rows;
    delta_seconds_ += m.write_seconds;
  }
  push_seconds_ = 0;
  has_last_ = true;
  last_ = m;
  next_id_ = m.id + 1;
  shrunk_ = false;
  shrink_ = nullptr;
  Status pruned = Prune();
  if (!pruned.ok()) {
    LOG_WARNING("could not prune old checkpoints in {} (retried after the next one): {}",
                options_.dir, pruned.ToString());
  }
  return m;
}

Status CheckpointWriter::Prune() {
  // Keep the newest `keep` checkpoints of this job's history, each with its chain.
  // A manifest that cannot be read stops the pruning: nothing is deleted on a guess.
  std::set<uint64_t> kept;
  uint64_t cur = last_.id;
  for (uint32_t n = 0; cur != 0 && n < options_.keep; ++n) {
    ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(env_, options_.dir, cur));
    kept.insert(cur);
    for (CheckpointManifest c = m; !c.base;) {
      kept.insert(c.parent);
      ASSIGN_OR_RETURN(c, ReadCheckpointManifest(env_, options_.dir, c.parent));
    }
    cur = m.parent;
  }
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, ListCheckpoints(env_, options_.dir));
  for (uint64_t id : ids) {
    if (kept.count(id) || id >= next_id_) continue;
    RETURN_IF_ERROR(DeleteCheckpointDir(env_, Path(id)));
  }
  return env_->SyncDir(options_.dir);
}

nlohmann::json CheckpointWriter::Report() const {
  auto mbps = [](uint64_t b, double s) { return s > 0 ? b / 1e6 / s : 0.0; };
  auto per_row = [](uint64_t b, uint64_t r) { return r ? double(b) / double(r) : 0.0; };
  return {{"dir", options_.dir},
          {"every_passes", options_.every_passes},
          {"last", has_last_ ? nlohmann::json(CheckpointName(last_.id)) : nlohmann::json()},
          {"bases", bases_},
          {"deltas", deltas_},
          {"base_bytes", base_bytes_},
          {"delta_bytes", delta_bytes_},
          {"base_rows", base_rows_},
          {"delta_rows", delta_rows_},
          {"base_seconds", base_seconds_},
          {"delta_seconds", delta_seconds_},
          {"base_mb_per_s", mbps(base_bytes_, base_seconds_)},
          {"delta_mb_per_s", mbps(delta_bytes_, delta_seconds_)},
          {"base_bytes_per_row", per_row(base_bytes_, base_rows_)},
          {"delta_bytes_per_row", per_row(delta_bytes_, delta_rows_)}};
}

}  // namespace ctrbox
