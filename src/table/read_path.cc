#include "table/read_path.h"

#include <algorithm>

namespace ctrbox {

bool SlowReadWindow::Add(uint64_t nanos, double* share) {
  const uint64_t add = 1 + (nanos > slow_nanos_ ? uint64_t{1} << 32 : 0);
  const uint64_t now = count_.fetch_add(add, std::memory_order_relaxed) + add;
  if (static_cast<uint32_t>(now) != reads_) return false;  // the window's last read decides
  // Reads noted since are taken too: the window closes with all it holds.
  const uint64_t closed = count_.exchange(0, std::memory_order_relaxed);
  const double reads = static_cast<double>(static_cast<uint32_t>(closed));
  *share = reads > 0 ? static_cast<double>(closed >> 32) / reads : 0.0;
  return true;
}

ReadPathChooser::ReadPathChooser(Options o) : o_(o), window_(o.window, o.slow_nanos) {}

bool ReadPathChooser::Note(bool mapped, uint64_t nanos) {
  if (mapped != mapped_.load(std::memory_order_relaxed)) return false;
  double share = 0;
  return window_.Add(nanos, &share) && Decide(mapped, share);
}

bool ReadPathChooser::Decide(bool mapped, double share) {
  std::unique_lock<std::mutex> lock(decide_mu_, std::try_to_lock);
  if (!lock.owns_lock() || mapped != mapped_.load(std::memory_order_relaxed)) return false;
  ++windows_;
  if (mapped) {
    if (share <= o_.to_pread) return false;
    // Mappings that came back for one window only: wait twice as long before the next try.
    constexpr uint32_t kMaxHold = 1024;
    hold_ = switches_.load(std::memory_order_relaxed) > 0 && windows_ == 1
                ? std::min(hold_ * 2, kMaxHold)
                : 1;
  } else if (share >= o_.to_mapped || windows_ < hold_) {
    return false;
  }
  windows_ = 0;
  mapped_.store(!mapped, std::memory_order_relaxed);
  switches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool DeviceWatch::Note(uint64_t nanos) {
  double share = 0;
  if (!window_.Add(nanos, &share)) return false;
  bool device = device_.load(std::memory_order_relaxed);
  if (device ? share >= o_.to_memory : share <= o_.to_device) return false;
  // Windows a reader late in deciding lets overlap decide once.
  if (!device_.compare_exchange_strong(device, !device, std::memory_order_relaxed)) return false;
  switches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace ctrbox
