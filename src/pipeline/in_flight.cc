#include "pipeline/in_flight.h"

namespace ctrbox {

InFlight::Tables InFlight::Snapshot() const {
  MutexLock l(&mu_);
  return {tables_.begin(), tables_.end()};
}

void InFlight::Add(uint64_t pass, std::shared_ptr<const WorkingTable> table) {
  MutexLock l(&mu_);
  tables_.emplace(pass, std::move(table));
}

void InFlight::Remove(uint64_t pass, bool pushed) {
  MutexLock l(&mu_);
  tables_.erase(pass);
  if (pushed) {
    pushed_ = pass + 1;
  } else {
    cancelled_ = true;
  }
  cv_.SignalAll();
}

bool InFlight::WaitPushed(uint64_t pass) {
  MutexLock l(&mu_);
  while (!cancelled_ && pushed_ < pass) cv_.Wait(&mu_);
  return !cancelled_;
}

void InFlight::Cancel() {
  MutexLock l(&mu_);
  cancelled_ = true;
  cv_.SignalAll();
}

}  // namespace ctrbox
