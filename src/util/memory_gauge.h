// MemoryGauge: the bytes an owner holds now and at its peak, for the train report's peak
// memory by owner. Owners add what they allocate and subtract what they free.
//
// Thread safety: Add may run on any thread; the peak is exact (a compare-and-swap loop).
#ifndef CTRBOX_UTIL_MEMORY_GAUGE_H_
#define CTRBOX_UTIL_MEMORY_GAUGE_H_

#include <atomic>
#include <cstdint>

namespace ctrbox {

class MemoryGauge {
 public:
  void Add(int64_t bytes) {
    const int64_t now = now_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  int64_t now() const { return now_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_{0}, peak_{0};
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_MEMORY_GAUGE_H_
