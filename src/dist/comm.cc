#include "dist/comm.h"

#include <fmt/format.h>

#include <cassert>
#include <chrono>

namespace ctrbox {

Status NoAnswer(double timeout_seconds, int missing) {
  return ResourceExhaustedError(fmt::format(
      "no answer from {} of the other ranks in an exchange for {:.0f} s (dist.timeout_seconds): "
      "a rank hangs or its machine stopped answering",
      missing < 0 ? std::string("some") : std::to_string(missing), timeout_seconds));
}

Status OnRank(const Comm& comm, const Status& s) {
  if (s.ok() || comm.size() == 1 || s.message().rfind("rank ", 0) == 0) return s;
  return Status(s.code(), fmt::format("rank {} of {}: {}", comm.rank(), comm.size(), s.message()));
}

class LocalGroup::Endpoint final : public Comm {
 public:
  Endpoint(LocalGroup* group, int rank, int channel)
      : group_(group), rank_(rank), channel_(channel) {}

  Comm* channel(int c) override { return group_->ends_[c][rank_].get(); }
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string_view transport() const override { return "local"; }

  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    assert(static_cast<int>(send.size()) == size());
    Hub* hub = group_->hubs_[channel_].get();
    hub->outbox[rank_] = send;
    RETURN_IF_ERROR(group_->Barrier(hub));  // every outbox written
    recv->resize(send.size());
    for (int from = 0; from < size(); ++from) (*recv)[from] = hub->outbox[from][rank_];
    return group_->Barrier(hub);  // every inbox read: the outboxes may be written again
  }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    return AllToAll(std::vector<std::string>(size(), std::string(mine)), all);
  }

  void Abort(const Status& why) override { group_->Abort(why); }

 private:
  LocalGroup* const group_;
  const int rank_, channel_;
};

LocalGroup::LocalGroup(int n, double timeout_seconds) : n_(n), timeout_seconds_(timeout_seconds) {
  assert(n >= 1);
  for (int c = 0; c < Comm::kChannels; ++c) {
    hubs_.push_back(std::make_unique<Hub>(n));
    ends_.emplace_back();
    for (int r = 0; r < n; ++r) ends_[c].push_back(std::make_unique<Endpoint>(this, r, c));
  }
}

LocalGroup::~LocalGroup() = default;

Comm* LocalGroup::rank(int r) { return ends_[0][r].get(); }

Status LocalGroup::Barrier(Hub* hub) {
  bool timed_out = false;
  Status result;
  {
    MutexLock lock(&hub->mu);
    if (!hub->aborted.ok()) return hub->aborted;
    const uint64_t gen = hub->generation;
    if (++hub->arrived == n_) {
      hub->arrived = 0;
      ++hub->generation;
      hub->cv.SignalAll();
      return Status::OK();
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_seconds_));
    while (hub->generation == gen && hub->aborted.ok()) {
      if (!hub->cv.WaitUntil(&hub->mu, deadline) && hub->generation == gen && hub->aborted.ok()) {
        timed_out = true;
        result = NoAnswer(timeout_seconds_, n_ - hub->arrived);
        break;
      }
    }
    if (!timed_out) return hub->generation != gen ? Status::OK() : hub->aborted;
  }
  Abort(result);  // every channel of every rank stops
  return result;
}

Status LocalGroup::aborted() const {
  MutexLock lock(&hubs_[0]->mu);  // Abort sets every hub, the first one first
  return hubs_[0]->aborted;
}

void LocalGroup::Abort(const Status& why) {
  const Status s = why.ok() ? InternalError("a rank aborted") : why;
  for (auto& hub : hubs_) {
    MutexLock lock(&hub->mu);
    if (hub->aborted.ok()) hub->aborted = s;
    hub->cv.SignalAll();
  }
}

}  // namespace ctrbox
