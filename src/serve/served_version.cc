#include "serve/served_version.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <map>
#include <unordered_set>

#include "ckpt/model_dir.h"
#include "ckpt/model_files.h"
#include "table/sparse_table.h"
#include "util/logging.h"

namespace ctrbox {
namespace {

// A file of `rows_dir` for a version's rows ("" without one): unique to this process.
std::string RowsFile(const std::string& rows_dir, const std::string& name) {
  if (rows_dir.empty()) return "";
  static std::atomic<uint64_t> made{0};
  return JoinPath(rows_dir, fmt::format("rows-{}-{}-{}.bin", name, ::getpid(), made++));
}

// "2026-11-27T05:01:02Z" as unix seconds (0 when it is not one).
double ParseUtc(const std::string& t) {
  std::tm tm{};
  if (strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return 0;
  return static_cast<double>(timegm(&tm));
}

}  // namespace

bool ServedVersion::Lookup(uint64_t key, RowBlock* out, size_t i) const {
  if (overlay && overlay->Lookup(key, out, i)) return true;
  if (deleted && std::binary_search(deleted->begin(), deleted->end(), key)) return false;
  return base_rows && base_rows->Lookup(key, out, i);
}

size_t ServedVersion::RowBytes() const {
  return (base_rows ? base_rows->MemoryBytes() : 0) + (overlay ? overlay->MemoryBytes() : 0) +
         (deleted ? deleted->capacity() * sizeof(uint64_t) : 0);
}

size_t ServedVersion::MemoryBytes() const { return RowBytes() + dense_payload.size(); }

namespace {

class ServingDirSource final : public VersionSource {
 public:
  ServingDirSource(Env* env, std::string dir, std::string rows_dir)
      : env_(env), dir_(std::move(dir)), rows_dir_(std::move(rows_dir)) {}
  std::string Describe() const override { return "serving directory " + dir_; }

  StatusOr<std::shared_ptr<const ServedVersion>> Next(
      const std::shared_ptr<const ServedVersion>& current) override {
    ASSIGN_OR_RETURN(std::vector<ServingVersion> listed, ReadServingVersions(env_, dir_));
    if (listed.empty()) return std::shared_ptr<const ServedVersion>();
    const ServingVersion& newest = listed.back();
    if (current && current->version >= newest.version)
      return std::shared_ptr<const ServedVersion>();
    if (failed_ >= newest.version) return std::shared_ptr<const ServedVersion>();  // said once
    StatusOr<std::shared_ptr<const ServedVersion>> next = Reach(listed, current);
    if (!next.ok()) failed_ = newest.version;
    if (next.ok() || current) return next;
    // Starting: the newest listed version that loads, the ones after it refused (said once).
    for (size_t n = listed.size() - 1; n > 0; --n) {
      const std::vector<ServingVersion> upto(listed.begin(), listed.begin() + n);
      StatusOr<std::shared_ptr<const ServedVersion>> older = Reach(upto, nullptr);
      if (older.ok()) {
        LOG_WARNING("serve: {} did not load ({}); starting with {}, the newest that does",
                    ServingVersionName(newest.version), next.status().ToString(), (*older)->name);
        return older;
      }
    }
    return next;
  }

 private:
  // The newest listed version, from `current` by its deltas when it is in the newest's chain,
  // else from the chain's base.
  StatusOr<std::shared_ptr<const ServedVersion>> Reach(
      const std::vector<ServingVersion>& listed,
      const std::shared_ptr<const ServedVersion>& current) {
    std::map<uint64_t, const ServingVersion*> by;
    for (const ServingVersion& v : listed) by[v.version] = &v;
    std::vector<const ServingVersion*> chain;  // newest first
    for (uint64_t at = listed.back().version; at != 0;) {
      auto it = by.find(at);
      if (it == by.end()) {
        return NotFoundError(fmt::format(
            "{}: {} applies on {}, which is not listed (pruned?)", JoinPath(dir_, kServingDonefile),
            ServingVersionName(chain.back()->version), ServingVersionName(at)));
      }
      chain.push_back(it->second);
      if (current && at == current->version) break;
      at = it->second->base ? 0 : it->second->parent;
    }
    std::reverse(chain.begin(), chain.end());
    std::shared_ptr<const ServedVersion> v = current;
    size_t from = 0;
    if (!(current && chain.front()->version == current->version)) {
      ASSIGN_OR_RETURN(v, LoadBase(*chain.front()));
    }
    from = 1;
    for (size_t i = from; i < chain.size(); ++i) {
      ASSIGN_OR_RETURN(v, ApplyDelta(*v, *chain[i]));
    }
    return v;
  }

  void Describe(const ServingVersion& line, const ServingVersionData& d, ServedVersion* v) const {
    v->version = line.version;
    v->name = ServingVersionName(line.version);
    v->base = line.base;
    v->partition = line.partition;
    v->published_at = ParseUtc(line.time);
    v->loaded_at = env_->NowSeconds();
    v->spec = d.spec;
    v->layout = d.layout;
    v->input = d.input;
    v->keys = line.keys;
  }

  StatusOr<std::shared_ptr<const ServedVersion>> LoadBase(const ServingVersion& line) {
    if (!line.base) return InternalError("LoadBase of a delta");
    ASSIGN_OR_RETURN(ServingVersionData m, ReadServingVersionManifest(env_, dir_, line));
    ServedRows::Builder rows(m.layout, m.spec.model.wide);
    ASSIGN_OR_RETURN(ServingVersionData d, ReadServingVersion(
                                               env_, dir_, line,
                                               [&](RowBlock& block) {
                                                 rows.Add(block);
                                                 return Status::OK();
                                               },
                                               /*dense=*/true));
    auto v = std::make_shared<ServedVersion>();
    Describe(line, d, v.get());
    v->dense_payload = std::move(d.dense_payload);
    ASSIGN_OR_RETURN(v->base_rows, rows.Finish(RowsFile(rows_dir_, v->name)));
    if (v->base_rows->size() != line.keys) {
      return CorruptionError(fmt::format("{}: {} rows, the donefile says {} keys",
                                         JoinPath(dir_, v->name), v->base_rows->size(), line.keys));
    }
    return std::shared_ptr<const ServedVersion>(std::move(v));
  }

  StatusOr<std::shared_ptr<const ServedVersion>> ApplyDelta(const ServedVersion& from,
                                                            const ServingVersion& line) {
    if (line.base || line.parent != from.version) {
      return InternalError(
          fmt::format("{} does not apply on {}", ServingVersionName(line.version), from.name));
    }
    ServedRows::Builder overlay(from.layout, from.spec.model.wide);
    std::unordered_set<uint64_t> changed;
    std::vector<RowBlock> blocks;
    ASSIGN_OR_RETURN(ServingVersionData d, ReadServingVersion(
                                               env_, dir_, line,
                                               [&](RowBlock& block) {
                                                 for (size_t i = 0; i < block.size(); ++i)
                                                   changed.insert(block.key(i));
                                                 blocks.push_back(block);
                                                 return Status::OK();
                                               },
                                               /*dense=*/true));
    std::sort(d.deleted.begin(), d.deleted.end());
    auto is_deleted = [&](uint64_t k) {
      return std::binary_search(d.deleted.begin(), d.deleted.end(), k);
    };
    // The rows the deltas before changed, less those this one changes or deletes.
    if (from.overlay) {
      RETURN_IF_ERROR(from.overlay->ForEach([&](const RowBlock& rows) {
        for (size_t i = 0; i < rows.size(); ++i) {
          if (!changed.contains(rows.key(i)) && !is_deleted(rows.key(i))) overlay.Add(rows, i);
        }
        return Status::OK();
      }));
    }
    for (const RowBlock& b : blocks) overlay.Add(b);
    // The keys deleted since the base, less those changed since.
    auto deleted = std::make_shared<std::vector<uint64_t>>();
    if (from.deleted) {
      for (uint64_t k : *from.deleted) {
        if (!changed.contains(k)) deleted->push_back(k);
      }
    }
    for (uint64_t k : d.deleted) deleted->push_back(k);
    std::sort(deleted->begin(), deleted->end());
    deleted->erase(std::unique(deleted->begin(), deleted->end()), deleted->end());

    auto v = std::make_shared<ServedVersion>();
    Describe(line, d, v.get());
    v->dense_payload = std::move(d.dense_payload);
    v->base_rows = from.base_rows;
    v->overlay = overlay.Finish();
    v->deleted = std::move(deleted);
    return std::shared_ptr<const ServedVersion>(std::move(v));
  }

  Env* const env_;
  const std::string dir_, rows_dir_;
  uint64_t failed_ = 0;  // the newest version that failed to load (not tried again)
};

class ModelDirSource final : public VersionSource {
 public:
  ModelDirSource(Env* env, std::string dir, std::string rows_dir)
      : env_(env), dir_(std::move(dir)), rows_dir_(std::move(rows_dir)) {}
  std::string Describe() const override { return "model directory " + dir_; }

  StatusOr<std::shared_ptr<const ServedVersion>> Next(
      const std::shared_ptr<const ServedVersion>& current) override {
    ASSIGN_OR_RETURN(ModelManifest m, ReadManifest(env_, dir_));
    if (current && current->version == m.generation) return std::shared_ptr<const ServedVersion>();
    if (failed_ == m.generation) return std::shared_ptr<const ServedVersion>();
    StatusOr<std::shared_ptr<const ServedVersion>> v = Load(m);
    if (!v.ok()) failed_ = m.generation;
    return v;
  }

 private:
  // The model's rows streamed from its files into the served rows (no training table: the
  // server holds the rows at the served precision, without optimizer state), its dense
  // parameters through a model of its spec.
  StatusOr<std::shared_ptr<const ServedVersion>> Load(const ModelManifest& m) {
    const ModelSpec& s = m.spec;
    CtrModel model(s.schema, s.model, s.sparse_optimizer, s.dense_optimizer, s.table.seed);
    auto v = std::make_shared<ServedVersion>();
    v->version = m.generation;
    v->name = fmt::format("generation {}", m.generation);
    v->loaded_at = env_->NowSeconds();
    v->spec = s;
    v->layout = ServingLayout(model.value_layout(), 0, 1.0f);  // less the optimizer state
    v->input = m.input;
    ServedRows::Builder rows(v->layout, s.model.wide);
    RETURN_IF_ERROR(StreamModel(env_, dir_, m, model.value_layout(), &model, [&](RowBlock& block) {
      rows.Add(block);
      return Status::OK();
    }));
    v->dense_payload = DenseParamsPayload(model);
    ASSIGN_OR_RETURN(v->base_rows,
                     rows.Finish(RowsFile(rows_dir_, fmt::format("g{}", v->version))));
    v->keys = v->base_rows->size();
    return std::shared_ptr<const ServedVersion>(std::move(v));
  }

  Env* const env_;
  const std::string dir_, rows_dir_;
  uint64_t failed_ = 0;
};

}  // namespace

std::unique_ptr<VersionSource> VersionSource::ServingDir(Env* env, std::string dir,
                                                         std::string rows_dir) {
  return std::make_unique<ServingDirSource>(env, std::move(dir), std::move(rows_dir));
}
std::unique_ptr<VersionSource> VersionSource::ModelDir(Env* env, std::string dir,
                                                       std::string rows_dir) {
  return std::make_unique<ModelDirSource>(env, std::move(dir), std::move(rows_dir));
}

}  // namespace ctrbox
