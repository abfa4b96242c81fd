#include "table/read_path.h"

#include <algorithm>

namespace ctrbox {

ReadPathChooser::ReadPathChooser(Options o) : o_(o) {}

bool ReadPathChooser::Note(bool mapped, uint64_t nanos) {
  if (mapped != mapped_.load(std::memory_order_relaxed)) return false;
  const uint64_t add = 1 + (nanos > o_.slow_nanos ? uint64_t{1} << 32 : 0);
  const uint64_t now = window_.fetch_add(add, std::memory_order_relaxed) + add;
  if (static_cast<uint32_t>(now) != o_.window) return false;  // the window's last read decides
  // Reads noted since are taken too: the window closes with all it holds.
  const uint64_t closed = window_.exchange(0, std::memory_order_relaxed);
  const double reads = static_cast<double>(static_cast<uint32_t>(closed));
  const double slow = static_cast<double>(closed >> 32);
  return Decide(mapped, reads > 0 ? slow / reads : 0.0);
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
  const uint64_t add = 1 + (nanos > o_.slow_nanos ? uint64_t{1} << 32 : 0);
  const uint64_t now = window_.fetch_add(add, std::memory_order_relaxed) + add;
  if (static_cast<uint32_t>(now) != o_.window) return false;  // the window's last read decides
  // Only the reader that took the window's last read gets here (the count passes the window
  // once); reads noted since are taken too.
  const uint64_t closed = window_.exchange(0, std::memory_order_relaxed);
  const double reads = static_cast<double>(static_cast<uint32_t>(closed));
  const double share = reads > 0 ? static_cast<double>(closed >> 32) / reads : 0.0;
  bool device = device_.load(std::memory_order_relaxed);
  if (device ? share >= o_.to_memory : share <= o_.to_device) return false;
  // Windows a reader late in deciding lets overlap decide once.
  if (!device_.compare_exchange_strong(device, !device, std::memory_order_relaxed)) return false;
  switches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace ctrbox
