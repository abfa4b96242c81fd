#include "jobs/file_shares.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ckpt/checkpoint.h"
#include "io/reader.h"
#include "jobs/data.h"
#include "util/json_text.h"
#include "util/logging.h"

namespace ctrbox {

std::vector<DataSegment> RankFileStream(const std::vector<std::string>& files, int ranks, int rank,
                                        uint32_t epochs) {
  std::vector<DataSegment> epoch;
  if (files.size() >= static_cast<size_t>(ranks)) {
    for (size_t i = rank; i < files.size(); i += ranks) epoch.push_back({files[i], {}, 0});
  } else {
    for (const std::string& f : files) {
      epoch.push_back({f, {static_cast<uint32_t>(rank), static_cast<uint32_t>(ranks)}, 0});
    }
  }
  std::vector<DataSegment> stream;
  for (uint32_t e = 0; e < epochs; ++e) stream.insert(stream.end(), epoch.begin(), epoch.end());
  return stream;
}

StatusOr<std::vector<SizedSegment>> StreamRemainder(Env* env, const DataOptions& data,
                                                    const std::vector<DataSegment>& stream,
                                                    uint64_t consumed) {
  std::vector<SizedSegment> rest;
  uint64_t left = consumed;  // rows still to pass over
  for (const DataSegment& s : stream) {
    ASSIGN_OR_RETURN(uint64_t size, env->GetFileSize(s.path));
    const auto [begin, end] = ByteRange(size, s.part);
    if (left == 0) {
      rest.push_back({s, end - begin});
      continue;
    }
    DataOptions one = data;
    one.segments = std::vector<DataSegment>{s};
    ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> reader, OpenReader(env, one));
    Batch batch;
    bool eof = false;
    uint64_t got = 0;
    while (got < left) {
      RETURN_IF_ERROR(reader->Next(&batch, &eof));
      if (eof) break;
      got += batch.rows();
    }
    // Read to its end with rows to spare, or ending exactly at the position: all passed over.
    if (got == left) RETURN_IF_ERROR(reader->Next(&batch, &eof));
    if (eof) {
      left -= got;
      continue;
    }
    DataSegment tail = s;
    tail.skip += left;
    const uint64_t done = std::min(end - begin, reader->progress().done);
    rest.push_back({std::move(tail), end - begin - done});
    left = 0;
  }
  if (left > 0) {
    return FailedPreconditionError(
        fmt::format("the input holds {} rows where {} were trained: the data changed since",
                    consumed - left, consumed));
  }
  return rest;
}

StatusOr<std::vector<SizedSegment>> SplitSegments(Env* env, const DataOptions& data,
                                                  std::vector<SizedSegment> rest, size_t target) {
  if (rest.empty() || rest.size() >= target) return rest;
  const auto s = static_cast<uint32_t>((target + rest.size() - 1) / rest.size());
  std::vector<SizedSegment> out;
  for (SizedSegment& r : rest) {
    const DataSegment& d = r.segment;
    ASSIGN_OR_RETURN(bool splits, SplitsByBytes(env, d.path, data.format));
    if (!splits || d.part.count > UINT32_MAX / s) {
      out.push_back(std::move(r));
      continue;
    }
    std::vector<DataSegment> parts;
    for (uint32_t j = 0; j < s; ++j)
      parts.push_back({d.path, {d.part.index * s + j, d.part.count * s}, 0});
    ASSIGN_OR_RETURN(std::vector<SizedSegment> left, StreamRemainder(env, data, parts, d.skip));
    out.insert(out.end(), left.begin(), left.end());
  }
  return out;
}

std::vector<std::vector<DataSegment>> ShareSegments(const std::vector<SizedSegment>& segments,
                                                    int ranks) {
  std::vector<std::vector<DataSegment>> shares(ranks);
  std::vector<uint64_t> bytes(ranks, 0);
  for (const SizedSegment& s : segments) {
    const auto r = std::min_element(bytes.begin(), bytes.end()) - bytes.begin();
    shares[r].push_back(s.segment);
    bytes[r] += s.bytes;
  }
  return shares;
}

namespace {

// An old rank's place: what it had left, and the position it stood at.
struct OldRank {
  uint64_t passes = 0, examples = 0;
  std::vector<SizedSegment> rest;
};

nlohmann::json OldRankJson(uint32_t m, const OldRank& o) {
  nlohmann::json rest = nlohmann::json::array();
  for (const SizedSegment& s : o.rest) {
    rest.push_back(
        {s.segment.path, s.segment.part.index, s.segment.part.count, s.segment.skip, s.bytes});
  }
  return {{"rank", m}, {"passes", o.passes}, {"examples", o.examples}, {"rest", rest}};
}

// The old ranks' rests as the ranks sent them (OldRankJson), into (*old)[m]. Throws
// nlohmann::json::exception on a malformed message.
Status DecodeOldRanks(const nlohmann::json& list, uint32_t ranks, std::vector<OldRank>* old,
                      std::vector<bool>* seen) {
  for (const nlohmann::json& j : list) {
    const auto m = j.at("rank").get<uint32_t>();
    if (m >= ranks || (*seen)[m]) return InternalError("resume: an old rank planned twice");
    (*seen)[m] = true;
    OldRank& o = (*old)[m];
    o.passes = j.at("passes").get<uint64_t>();
    o.examples = j.at("examples").get<uint64_t>();
    for (const nlohmann::json& s : j.at("rest")) {
      o.rest.push_back({{s.at(0).get<std::string>(),
                         {s.at(1).get<uint32_t>(), s.at(2).get<uint32_t>()},
                         s.at(3).get<uint64_t>()},
                        s.at(4).get<uint64_t>()});
    }
  }
  return Status::OK();
}

// Checks that what old rank `m` recorded of its input (its checkpoint's settings) is the input
// now: the same format and epochs, and each file it read of the same size and content.
Status CheckOldInput(Env* env, const JobConfig& job, const std::string& name,
                     const nlohmann::json& settings, std::map<std::string, nlohmann::json>* now) {
  const nlohmann::json& data = settings.contains("data") ? settings["data"] : nlohmann::json();
  if (!data.contains("files")) {
    return InvalidArgumentError(
        fmt::format("cannot resume: {} was not written by a job of files", name));
  }
  if (data.value("format", "") != DataFormatName(job.data.format)) {
    return InvalidArgumentError(
        fmt::format("cannot resume: {} was written with data.format = {}, "
                    "this job sets {}",
                    name, data.value("format", ""), DataFormatName(job.data.format)));
  }
  if (settings.value("train.epochs", uint32_t{0}) != job.train.epochs) {
    return InvalidArgumentError(
        fmt::format("cannot resume: {} was written with train.epochs = {}, this job sets {}", name,
                    settings.value("train.epochs", uint32_t{0}), job.train.epochs));
  }
  for (const nlohmann::json& then : data["files"]) {
    const std::string path = then.value("path", "");
    auto it = now->find(path);
    if (it == now->end()) {
      return InvalidArgumentError(fmt::format(
          "cannot resume: the input differs from {}'s: it read {}, which this job does not name",
          name, path));
    }
    if (it->second.is_null()) {
      ASSIGN_OR_RETURN(it->second, DataFileRecord(env, path));
    }
    nlohmann::json was = then;
    if (!was.contains("fingerprint")) was["fingerprint"] = it->second["fingerprint"];
    if (was != it->second) {
      return InvalidArgumentError(
          fmt::format("cannot resume: the input differs from {}'s: {} there, {} now (edited since)",
                      name, JsonText(then), JsonText(it->second)));
    }
  }
  return Status::OK();
}

// Old rank m's input as it read it, and how far into it it was.
// Its rest is split for the n new ranks: in at least 2n / M segments where the files allow.
StatusOr<OldRank> ReadOldRank(Env* env, const JobConfig& job, const std::vector<std::string>& files,
                              const std::string& ranks_dir, const RanksCheckpoint& c, uint32_t m,
                              int n, std::map<std::string, nlohmann::json>* now) {
  const std::string dir = RankCheckpointDir(ranks_dir, static_cast<int>(m), c.ranks);
  ASSIGN_OR_RETURN(CheckpointManifest mf, ReadCheckpointManifest(env, dir, c.id));
  const std::string name = fmt::format("{} of rank {} of {}", CheckpointName(c.id), m, c.ranks);
  RETURN_IF_ERROR(CheckOldInput(env, job, name, mf.settings, now));
  const nlohmann::json& data = mf.settings["data"];
  std::vector<DataSegment> stream;
  uint64_t consumed = mf.position.examples;
  if (data.contains("plan")) {  // a job resumed on other ranks before: its plan is its input
    ASSIGN_OR_RETURN(SegmentPlan plan, SegmentPlan::FromJson(data["plan"]));
    if (plan.examples > consumed) {
      return CorruptionError(fmt::format("{}: its plan starts at {} examples, its position is {}",
                                         name, plan.examples, consumed));
    }
    consumed -= plan.examples;
    stream = std::move(plan.segments);
  } else {
    stream = RankFileStream(files, static_cast<int>(c.ranks), static_cast<int>(m), 1);
    std::vector<std::string> read, derived;
    for (const nlohmann::json& f : data["files"]) read.push_back(f.value("path", ""));
    for (const DataSegment& s : stream) derived.push_back(s.path);
    if (read != derived) {
      return InvalidArgumentError(fmt::format(
          "cannot resume: the input differs from {}'s: that rank read {} file(s) starting with "
          "{}, this job's split gives it {} starting with {} (were files added or renamed?)",
          name, read.size(), read.empty() ? "none" : read[0], derived.size(),
          derived.empty() ? "none" : derived[0]));
    }
    stream =
        RankFileStream(files, static_cast<int>(c.ranks), static_cast<int>(m), job.train.epochs);
  }
  DataOptions options = job.data;
  options.paths = files;
  options.byte_share = {};
  auto rest = StreamRemainder(env, options, stream, consumed);
  if (rest.ok())
    rest = SplitSegments(env, options, std::move(*rest), (2 * n + c.ranks - 1) / c.ranks);
  if (!rest.ok()) {
    return Status(rest.status().code(),
                  fmt::format("cannot resume {}: {}", name, rest.status().message()));
  }
  return OldRank{mf.position.passes, mf.position.examples, std::move(*rest)};
}

}  // namespace

StatusOr<SegmentPlan> PlanFileShares(Env* env, Comm* comm, const JobConfig& job,
                                     const std::vector<std::string>& files,
                                     const std::string& ranks_dir, const RanksCheckpoint& c) {
  if (job.features != nullptr) {
    return InvalidArgumentError(fmt::format(
        "ckpt.dir {} holds the checkpoints of a job of {} ranks: a job with a feature graph "
        "resumes them on {} ranks only (its extract stage reads each rank's files as one "
        "stream), or continue its saved model (--model-dir) on any number of ranks",
        ranks_dir, c.ranks, c.ranks));
  }
  const int n = comm->size(), me = comm->rank();
  std::map<std::string, nlohmann::json> now;
  for (const std::string& f : files) now.emplace(f, nullptr);
  // The old ranks m with m mod n = me: what they had left.
  nlohmann::json mine = nlohmann::json::array();
  for (uint32_t m = me; m < c.ranks; m += n) {
    ASSIGN_OR_RETURN(OldRank o, ReadOldRank(env, job, files, ranks_dir, c, m, n, &now));
    mine.push_back(OldRankJson(m, o));
  }
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(JsonText(mine), &all));
  std::vector<OldRank> old(c.ranks);
  std::vector<bool> seen(c.ranks, false);
  for (const std::string& text : all) {
    const nlohmann::json list = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!list.is_array()) return InternalError("resume: a rank's plan did not parse");
    try {
      RETURN_IF_ERROR(DecodeOldRanks(list, c.ranks, &old, &seen));
    } catch (const nlohmann::json::exception& e) {
      return InternalError(fmt::format("resume: a rank's plan: {}", e.what()));
    }
  }
  SegmentPlan plan;
  plan.from_ranks = c.ranks;
  plan.passes = old[0].passes;
  std::vector<SizedSegment> left;
  uint64_t total = 0;
  for (uint32_t m = 0; m < c.ranks; ++m) {
    if (!seen[m]) return InternalError(fmt::format("resume: old rank {} was not planned", m));
    if (old[m].passes != plan.passes) {
      return CorruptionError(fmt::format("{}: the ranks' checkpoints {} hold {} and {} passes",
                                         ranks_dir, CheckpointName(c.id), plan.passes,
                                         old[m].passes));
    }
    if (m % n == static_cast<uint32_t>(me)) plan.examples += old[m].examples;
    total += old[m].examples;
    left.insert(left.end(), old[m].rest.begin(), old[m].rest.end());
  }
  plan.segments = ShareSegments(left, n)[me];
  LOG_INFO(
      "resuming {} of {} ranks of files with {}: {} passes, {} examples done; {} segments of "
      "input left, {} for this rank",
      CheckpointName(c.id), c.ranks, n, plan.passes, total, left.size(), plan.segments.size());
  return plan;
}

}  // namespace ctrbox
