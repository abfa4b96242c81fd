#include "jobs/follower.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "dist/collectives.h"
#include "util/logging.h"

namespace ctrbox::stream_parts {

bool Follower::Takeable(int64_t p, std::optional<int64_t> want) {
  std::string why;
  if (const std::optional<int64_t> begins = layout_.StartSeconds(p);
      begins && static_cast<double>(*begins) > env_->NowSeconds() + o_.max_ahead_seconds) {
    why = fmt::format(
        "it begins {:.0f} s after the clock, more than stream.max_ahead {} s: it is taken once "
        "the clock reaches it (a wrong name or a wrong clock?)",
        static_cast<double>(*begins) - env_->NowSeconds(), o_.max_ahead_seconds);
  } else if (want && o_.max_gap > 0 && p - *want > static_cast<int64_t>(o_.max_gap)) {
    why = fmt::format(
        "it lies {} partitions after {}, the next one, more than stream.max_gap {}: it is "
        "taken once the stream reaches it (to move on to it now, start the job with "
        "stream.start={})",
        p - *want, layout_.Name(*want), o_.max_gap, layout_.Name(p));
  }
  if (why.empty()) return true;
  if (named_.insert("ahead " + std::to_string(p)).second) {
    LOG_WARNING("partition {} ({}) is ready but not taken: {}", layout_.Name(p), Dir(p), why);
  }
  return false;
}

void Follower::Notice(const PartitionScan& scan, int64_t want) {
  for (const std::string& name : scan.unreadable) {
    if (named_.insert("unreadable " + name).second) {
      LOG_WARNING("{}: not a partition of stream.layout '{}' (left alone)", JoinPath(o_.root, name),
                  layout_.text());
    }
  }
  if (skipped_ == nullptr) return;
  for (int64_t p : scan.ready) {
    if (p >= want) break;
    for (const auto& [first, last] : *skipped_) {
      if (p >= first && p <= last && named_.insert("landed " + std::to_string(p)).second) {
        LOG_WARNING(
            "partition {} is ready now, after the stream skipped it: it is not trained "
            "(stream.on_late: skip; docs/routine.md)",
            layout_.Name(p));
      }
    }
  }
}

StatusOr<std::optional<int64_t>> Follower::FirstReady() {
  ASSIGN_OR_RETURN(PartitionScan scan, ScanPartitions(env_, o_.root, layout_, o_.done_file));
  Notice(scan, std::numeric_limits<int64_t>::min());
  for (int64_t p : scan.ready) {
    if (Takeable(p, std::nullopt)) return std::optional<int64_t>(p);
  }
  return std::optional<int64_t>();
}

StatusOr<Follower::Take> Follower::Poll(int64_t want) {
  if (stop_ != nullptr && stop_->load()) return Take::kStop;
  ASSIGN_OR_RETURN(PartitionScan scan, ScanPartitions(env_, o_.root, layout_, o_.done_file));
  Notice(scan, want);
  const auto at = std::lower_bound(scan.ready.begin(), scan.ready.end(), want);
  if (at != scan.ready.end() && *at == want && Takeable(want, want)) {
    late_since_.reset();
    said_waiting_ = false;
    return Take::kTrain;
  }
  std::optional<int64_t> later;  // the first partition after `want` that may come next
  for (auto it = std::upper_bound(scan.ready.begin(), scan.ready.end(), want);
       it != scan.ready.end() && !later; ++it) {
    if (Takeable(*it, want)) later = *it;
  }
  if (later) {
    const double now = env_->NowSeconds();
    if (!late_since_) {
      late_since_ = now;
      LOG_WARNING(
          "partition {} is not ready but {} is: waiting up to {} s for it (stream.max_wait), "
          "then {}",
          layout_.Name(want), layout_.Name(*later), o_.max_wait_seconds,
          o_.on_late == LateRule::kSkip   ? "skipping it (stream.on_late: skip)"
          : o_.on_late == LateRule::kFail ? "failing (stream.on_late: fail)"
                                          : "waiting on (stream.on_late: wait)");
    }
    if (o_.on_late != LateRule::kWait && now - *late_since_ >= o_.max_wait_seconds) {
      if (o_.on_late == LateRule::kFail) {
        return FailedPreconditionError(
            fmt::format("partition {} ({}) is missing while {} is ready, after waiting {} s "
                        "(stream.max_wait; stream.on_late: fail): nothing of it was trained",
                        layout_.Name(want), JoinPath(Dir(want), o_.done_file), layout_.Name(*later),
                        o_.max_wait_seconds));
      }
      // The wait is spent for the partitions up to the first ready one: all are skipped.
      late_since_.reset();
      said_waiting_ = false;
      skip_to_ = *later;
      return Take::kSkip;
    }
  } else if (!said_waiting_) {
    LOG_INFO("waiting for partition {} ({})", layout_.Name(want),
             JoinPath(Dir(want), o_.done_file));
    said_waiting_ = true;
  }
  return Take::kWait;
}

StatusOr<Follower::Take> Follower::Wait(int64_t want) {
  while (true) {
    ASSIGN_OR_RETURN(Take t, Poll(want));
    if (t != Take::kWait) return t;
    Sleep(o_.poll_seconds);
  }
}

StatusOr<Follower::Take> Follower::WaitOnRanks(Comm* comm, int64_t want) {
  if (comm == nullptr) return Wait(want);
  while (true) {
    // Rank 0's look ("T" train, "S" skip, "W" wait, or "E" and why it failed), then each
    // rank's stop ("1": stopped).
    std::string mine;
    if (comm->rank() == 0) {
      StatusOr<Take> t = Poll(want);
      mine = !t.ok()              ? "E" + t.status().ToString()
             : *t == Take::kTrain ? "T"
             : *t == Take::kSkip  ? "S" + std::to_string(skip_to_)
                                  : "W";  // (a stop is each rank's own, below)
    }
    const bool stopped = stop_ != nullptr && stop_->load();
    mine = (stopped ? "1" : "0") + mine;
    std::vector<std::string> all;
    RETURN_IF_ERROR(comm->AllGather(mine, &all));
    for (const std::string& s : all) {
      if (!s.empty() && s[0] == '1') return Take::kStop;
    }
    const std::string& zero = all.at(0);
    if (zero.size() < 2) return InternalError("stream: rank 0 sent no decision");
    switch (zero[1]) {
      case 'T':
        return Take::kTrain;
      case 'S':
        skip_to_ = std::stoll(zero.substr(2));
        return Take::kSkip;
      case 'E':
        return FailedPreconditionError("rank 0: " + zero.substr(2));
      default:
        break;
    }
    Sleep(o_.poll_seconds);
  }
}

void Follower::Sleep(double seconds) const {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (stop_ != nullptr && stop_->load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

StatusOr<Partition> TakePartition(Env* env, const PartitionLayout& layout, int64_t p,
                                  const std::string& dir, const std::string& done_file) {
  Partition part{p, layout.Name(p), {}, {}, std::nullopt};
  std::vector<std::string> ignored;
  ASSIGN_OR_RETURN(part.files, PartitionFiles(env, dir, done_file, &ignored));
  if (!ignored.empty()) {
    LOG_WARNING("partition {}: {} left out (not regular files: subdirectories, FIFOs, sockets)",
                part.name, fmt::join(ignored, ", "));
  }
  const std::string done = JoinPath(dir, done_file);
  ASSIGN_OR_RETURN(const FileStat marked, env->Stat(done));
  part.done_at = marked.modified_ns * 1e-9;
  for (const std::string& f : part.files) {
    ASSIGN_OR_RETURN(FileStat st, env->Stat(f));
    if (st.modified_ns > marked.modified_ns) {
      return FailedPreconditionError(fmt::format(
          "partition {}: {} changed after its done file {} was written ({} ns later): the "
          "partition is not the one marked done, so none of it is trained. Write the partition "
          "again and its done file last, then start the job again",
          part.name, f, done, st.modified_ns - marked.modified_ns));
    }
    part.stats.push_back(st);
  }
  return part;
}

Status CheckUnchanged(Env* env, const Partition& p) {
  for (size_t i = 0; i < p.files.size(); ++i) {
    StatusOr<FileStat> now = env->Stat(p.files[i]);
    const FileStat& then = p.stats.at(i);
    if (!now.ok() || now->size != then.size || now->modified_ns != then.modified_ns) {
      return FailedPreconditionError(fmt::format(
          "partition {}: {} changed while it was read ({} bytes when taken, {} now): nothing of "
          "the partition is committed; the next start takes it again",
          p.name, p.files[i], then.size,
          now.ok() ? std::to_string(now->size) : now.status().ToString()));
    }
  }
  return Status::OK();
}

StatusOr<std::optional<int64_t>> OrdinalOf(const PartitionLayout& layout, const std::string& name,
                                           const char* key) {
  if (name.empty()) return std::optional<int64_t>();
  std::optional<int64_t> o = layout.Ordinal(name);
  if (!o) {
    return InvalidArgumentError(
        fmt::format("{} '{}' is no partition of stream.layout '{}'", key, name, layout.text()));
  }
  return o;
}

}  // namespace ctrbox::stream_parts
