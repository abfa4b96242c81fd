// BoundedQueue: a blocking FIFO of fixed capacity between pipeline stages. Push blocks while
// the queue is full, Pop while it is empty; Close() wakes everyone: Push then fails and Pop
// drains what is left, then fails. Capacity 0 is a handoff: Push returns once a Pop has taken
// its item (the producer holds it until then, so nothing waits between the two).
// Thread safety: all methods are safe to call concurrently.
#ifndef CTRBOX_UTIL_BOUNDED_QUEUE_H_
#define CTRBOX_UTIL_BOUNDED_QUEUE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "util/mutex.h"

namespace ctrbox {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  // Returns false (and drops item) if the queue was closed; with capacity 0, also if it was
  // closed before a Pop took the item (which Pop may still drain).
  bool Push(T item) {
    return Push(std::move(item), [](T&) {});
  }
  // As Push(item), calling on_enqueue(item) under the queue's lock just before the item
  // becomes visible to Pop: what it writes into the item happens before the consumer sees it.
  template <typename F>
  bool Push(T item, F&& on_enqueue) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    while (!closed_ && items_.size() >= std::max<size_t>(capacity_, 1)) not_full_.Wait(&mu_);
    if (closed_) return false;
    on_enqueue(item);
    items_.push_back(std::move(item));
    const uint64_t mine = ++pushed_;
    not_empty_.Signal();
    if (capacity_ > 0) return true;
    while (!closed_ && popped_ < mine) taken_.Wait(&mu_);
    return popped_ >= mine;
  }
  // Returns false once the queue is closed and empty.
  bool Pop(T* item) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    while (!closed_ && items_.empty()) not_empty_.Wait(&mu_);
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    ++popped_;
    not_full_.Signal();
    if (capacity_ == 0) taken_.SignalAll();
    return true;
  }
  void Close() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    closed_ = true;
    not_full_.SignalAll();
    not_empty_.SignalAll();
    taken_.SignalAll();
  }

 private:
  const size_t capacity_;
  Mutex mu_;
  CondVar not_full_{&mu_}, not_empty_{&mu_}, taken_{&mu_};
  std::deque<T> items_ GUARDED_BY(mu_);
  uint64_t pushed_ GUARDED_BY(mu_) = 0, popped_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_BOUNDED_QUEUE_H_
