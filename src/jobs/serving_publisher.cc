#include "jobs/serving_publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "ckpt/model_files.h"
#include "dist/collectives.h"
#include "util/logging.h"

namespace ctrbox {

ServingPublisher::ServingPublisher(Env* env, ServingOptions options, ModelSpec spec,
                                   const ValueLayout& table)
    : env_(env),
      options_(std::move(options)),
      spec_(std::move(spec)),
      table_layout_(table),
      layout_(ServingLayout(table, options_.quant_bits, options_.quant_range)),
      pending_(table) {}

Status ServingPublisher::Recover(const nlohmann::json& state, bool writes) {
  writes_ = writes;
  std::vector<ServingVersion> listed;
  if (writes_) {
    RETURN_IF_ERROR(env_->CreateDirs(options_.dir));
    ASSIGN_OR_RETURN(listed, ReadServingVersions(env_, options_.dir));
  }
  uint64_t committed = 0;
  if (!state.is_null()) {
    try {
      version_ = state.at("version").get<uint64_t>();
      base_ = state.at("base").get<uint64_t>();
      since_base_ = state.at("since_base").get<uint32_t>();
      partitions_since_ = state.at("partitions_since").get<uint32_t>();
      if (state.contains("line") && !state.at("line").is_null()) {
        ASSIGN_OR_RETURN(ServingVersion v, ServingVersion::FromJson(
                                               state.at("line"), "the checkpoint's stream state"));
        last_ = v;
        committed = v.version;
      }
    } catch (const std::exception& e) {
      return CorruptionError(std::string("the checkpoint's serving state: ") + e.what());
    }
  }
  // The rows of the partitions trained since the last version are in the table but not here.
  next_base_ = version_ == 0 || partitions_since_ > 0;
  if (!writes_) return Status::OK();  // a rank that sends its rows to rank 0
  const uint64_t newest = listed.empty() ? 0 : listed.back().version;
  // Versions listed after the checkpoint's: the resume fell back to an older checkpoint (a
  // newer one did not load). They were published: the partitions trained again must give
  // them again, byte for byte (Prepare checks), or the job stops.
  ahead_.clear();
  for (const ServingVersion& v : listed) {
    if (v.version > version_) ahead_[v.version] = v;
  }
  if (!ahead_.empty() && ahead_.begin()->first != version_ + 1) {
    return FailedPreconditionError(fmt::format(
        "{} lists versions from {}, but the job's checkpoint stands at version {}: the serving "
        "directory belongs to another job (or ckpt.dir was reset); give a new serving.dir",
        JoinPath(options_.dir, kServingDonefile), ahead_.begin()->first, version_));
  }
  if (!ahead_.empty()) {
    LOG_WARNING(
        "{} lists {} versions after the checkpoint resumed from ({}): the partitions trained "
        "again must give them again, byte for byte",
        JoinPath(options_.dir, kServingDonefile), ahead_.size(), ServingVersionName(version_));
  }
  if (last_ && newest < committed) {
    // Written and committed with its partition, not yet listed: publish it now.
    RETURN_IF_ERROR(VerifyServingVersion(env_, options_.dir, *last_));
    RETURN_IF_ERROR(AppendServingVersion(env_, options_.dir, *last_));
    LOG_INFO("published {} of partition {} (committed before the job stopped)",
             ServingVersionName(last_->version), last_->partition);
  }
  if (ahead_.empty()) RETURN_IF_ERROR(PruneServing(env_, options_.dir, options_.keep_bases));
  return Status::OK();
}

Status ServingPublisher::OnPush(const RowBlock& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint64_t key = rows.key(i);
    auto [it, added] = pending_index_.try_emplace(key, pending_.size());
    if (added) {
      pending_.AppendRow(rows, i);
    } else {
      pending_.CopyRow(rows, i, it->second);
    }
    deleted_.erase(key);
  }
  return Status::OK();
}

void ServingPublisher::OnDeleted(const std::vector<uint64_t>& keys) {
  for (uint64_t k : keys) {
    pending_index_.erase(k);  // its row stays in pending_, unreferenced
    deleted_.insert(k);
  }
}

Status ServingPublisher::ForEachBlock(SparseTable& table, bool base, uint64_t blocks,
                                      const BlockFn& fn) {
  RowBlock rows(table.layout()), sorted(table.layout());
  if (base) {
    // Each stripe's rows sorted by key: the same model gives the same bytes, however its
    // table came to hold them (a resumed job's checksums equal an uninterrupted one's).
    std::vector<std::pair<uint64_t, size_t>> order;
    for (uint64_t s = 0; s < blocks; ++s) {
      sorted.Resize(0);
      if (s < table.num_stripes()) {
        RETURN_IF_ERROR(table.ExportStripe(s, &rows));
        order.resize(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) order[i] = {rows.key(i), i};
        std::sort(order.begin(), order.end());
        for (const auto& [key, i] : order) sorted.AppendRow(rows, i);
      }
      RETURN_IF_ERROR(fn(sorted));
    }
    return Status::OK();
  }
  // Sorted by key: a delta's bytes do not depend on the order passes pushed them in.
  std::vector<std::pair<uint64_t, size_t>> order(pending_index_.begin(), pending_index_.end());
  std::sort(order.begin(), order.end());
  for (uint64_t c = 0; c < blocks; ++c) {
    const size_t b = std::min(order.size(), c * kChunk), e = std::min(order.size(), b + kChunk);
    sorted.Resize(0);
    for (size_t i = b; i < e; ++i) sorted.AppendRow(pending_, order[i].second);
    RETURN_IF_ERROR(fn(sorted));
  }
  return Status::OK();
}

Status ServingPublisher::WriteRows(ServingVersionWriter* w, SparseTable& table, bool base,
                                   Comm* comm) {
  // Blocks: a base's stripes, a delta's chunks of pending rows (the most of any rank's).
  uint64_t blocks = base ? table.num_stripes() : (pending_index_.size() + kChunk - 1) / kChunk;
  if (comm != nullptr) RETURN_IF_ERROR(AllReduceMax(comm, &blocks, 1));
  std::vector<uint64_t> deleted(deleted_.begin(), deleted_.end());
  std::sort(deleted.begin(), deleted.end());
  if (comm == nullptr) {
    RETURN_IF_ERROR(
        ForEachBlock(table, base, blocks, [&](const RowBlock& rows) { return w->AddRows(rows); }));
    return base ? Status::OK() : w->AddDeleted(deleted);
  }
  // On ranks: every rank's block goes to rank 0, which writes them in rank order.
  const int n = comm->size();
  std::vector<std::string> send(n), recv;
  RowBlock decoded(table.layout());
  RETURN_IF_ERROR(ForEachBlock(table, base, blocks, [&](const RowBlock& rows) -> Status {
    send.assign(n, std::string());
    for (size_t i = 0; i < rows.size(); ++i) rows.EncodeRow(i, &send[0]);
    RETURN_IF_ERROR(comm->AllToAll(send, &recv));
    if (w == nullptr) return Status::OK();
    for (const std::string& bytes : recv) {
      decoded.Resize(0);
      for (size_t at = 0; at < bytes.size();) {
        decoded.Resize(decoded.size() + 1);
        const size_t used =
            decoded.DecodeRow(bytes.data() + at, bytes.size() - at, decoded.size() - 1);
        if (used == 0) return InternalError("serving: a rank's rows did not decode");
        at += used;
      }
      RETURN_IF_ERROR(w->AddRows(decoded));
    }
    return Status::OK();
  }));
  if (base) return Status::OK();
  send.assign(n, std::string());
  send[0].assign(reinterpret_cast<const char*>(deleted.data()), deleted.size() * sizeof(uint64_t));
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  if (w == nullptr) return Status::OK();
  std::vector<uint64_t> all;
  for (const std::string& bytes : recv) {
    const size_t k = bytes.size() / sizeof(uint64_t);
    if (k == 0) continue;  // (memcpy into an empty vector's null data is undefined)
    all.resize(all.size() + k);
    std::memcpy(all.data() + all.size() - k, bytes.data(), k * sizeof(uint64_t));
  }
  std::sort(all.begin(), all.end());
  return w->AddDeleted(all);
}

StatusOr<std::optional<ServingVersion>> ServingPublisher::Prepare(SparseTable& table,
                                                                  const CtrModel& model,
                                                                  const std::string& partition,
                                                                  Comm* comm) {
  prepared_.reset();
  ++partitions_since_;
  if (partitions_since_ < options_.delta_every) return std::optional<ServingVersion>();
  ServingVersion v;
  v.version = version_ + 1;
  v.base = next_base_ || since_base_ + 1 >= options_.base_every;
  v.base_version = v.base ? v.version : base_;
  v.parent = v.base ? 0 : version_;
  v.partition = partition;
  // A version already published (after a fall back to an older checkpoint) is written aside
  // and compared, never over the published one.
  const auto published = ahead_.find(v.version);
  const std::string write_dir =
      published == ahead_.end() ? options_.dir : JoinPath(options_.dir, ".again");
  std::unique_ptr<ServingVersionWriter> w;
  if (writes_) {
    ASSIGN_OR_RETURN(
        w, ServingVersionWriter::Create(env_, write_dir, v, spec_, table_layout_, layout_));
    w->SetInput(input_);
  }
  RETURN_IF_ERROR(WriteRows(w.get(), table, v.base, comm));
  uint64_t keys = table.Stats().keys;
  if (comm != nullptr) RETURN_IF_ERROR(AllReduceSum(comm, &keys, 1));
  ServingVersion done;
  if (w) {
    ASSIGN_OR_RETURN(done, w->Finish(DenseParamsPayload(model), keys));
  }
  if (comm != nullptr) {  // every rank takes rank 0's line
    std::vector<std::string> lines;
    RETURN_IF_ERROR(comm->AllGather(writes_ ? done.ToJson().dump() : std::string(), &lines));
    const nlohmann::json j = nlohmann::json::parse(lines.at(0), nullptr, false);
    ASSIGN_OR_RETURN(done, ServingVersion::FromJson(j, "rank 0's serving version"));
  }
  if (published != ahead_.end()) {
    RETURN_IF_ERROR(DeleteDirOfFiles(env_, JoinPath(write_dir, ServingVersionName(v.version))));
    if (done.checksum != published->second.checksum || done.base != published->second.base) {
      return FailedPreconditionError(fmt::format(
          "{} of partition {} was published with checksum {}; training it again gave {}: a "
          "published version is never changed, so the job stops (was the data or the job "
          "changed since?)",
          ServingVersionName(v.version), published->second.partition, published->second.checksum,
          done.checksum));
    }
    done = published->second;  // the published line, time included
    ahead_.erase(published);
    republished_ = true;
  }
  // The change is in the version now.
  pending_index_.clear();
  pending_ = RowBlock(table_layout_);
  deleted_.clear();
  version_ = done.version;
  base_ = done.base_version;
  since_base_ = done.base ? 0 : since_base_ + 1;
  partitions_since_ = 0;
  next_base_ = false;
  prepared_ = done;
  last_ = done;
  return prepared_;
}

nlohmann::json ServingPublisher::State() const {
  return {{"version", version_},
          {"base", base_},
          {"since_base", since_base_},
          {"partitions_since", partitions_since_},
          {"line", last_ ? last_->ToJson() : nlohmann::json()}};
}

Status ServingPublisher::Publish() {
  if (!writes_) prepared_.reset();  // rank 0 publishes
  if (!prepared_) return Status::OK();
  if (std::exchange(republished_, false)) {  // listed already (Prepare compared it)
    prepared_.reset();
    return Status::OK();
  }
  RETURN_IF_ERROR(AppendServingVersion(env_, options_.dir, *prepared_));
  prepared_.reset();
  return PruneServing(env_, options_.dir, options_.keep_bases);
}

}  // namespace ctrbox
