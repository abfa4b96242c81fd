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

class LocalGroup::Endpoint final : public Comm {
 public:
  Endpoint(LocalGroup* group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string_view transport() const override { return "local"; }

  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    assert(static_cast<int>(send.size()) == size());
    group_->outbox_[rank_] = send;
    RETURN_IF_ERROR(group_->Barrier());  // every outbox written
    recv->resize(send.size());
    for (int from = 0; from < size(); ++from) (*recv)[from] = group_->outbox_[from][rank_];
    return group_->Barrier();  // every inbox read: the outboxes may be written again
  }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    return AllToAll(std::vector<std::string>(size(), std::string(mine)), all);
  }

  void Abort(const Status& why) override { group_->Abort(why); }

 private:
  LocalGroup* const group_;
  const int rank_;
};

LocalGroup::LocalGroup(int n, double timeout_seconds)
    : timeout_seconds_(timeout_seconds), outbox_(n) {
  assert(n >= 1);
  for (int r = 0; r < n; ++r) endpoints_.push_back(std::make_unique<Endpoint>(this, r));
}

LocalGroup::~LocalGroup() = default;

Comm* LocalGroup::rank(int r) { return endpoints_[r].get(); }

Status LocalGroup::Barrier() {
  MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  const uint64_t gen = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    cv_.SignalAll();
    return Status::OK();
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_seconds_));
  while (generation_ == gen && aborted_.ok()) {
    if (!cv_.WaitUntil(&mu_, deadline) && generation_ == gen && aborted_.ok()) {
      aborted_ = NoAnswer(timeout_seconds_, size() - arrived_);
      cv_.SignalAll();
    }
  }
  return generation_ != gen ? Status::OK() : aborted_;
}

void LocalGroup::Abort(const Status& why) {
  MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = why.ok() ? InternalError("a rank aborted") : why;
  cv_.SignalAll();
}

}  // namespace ctrbox
