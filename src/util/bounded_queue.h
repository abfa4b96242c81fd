// BoundedQueue: a blocking FIFO of fixed capacity between pipeline stages. Push blocks while
// the queue is full, Pop while it is empty; Close() wakes everyone: Push then fails and Pop
// drains what is left, then fails.
// Thread safety: all methods are safe to call concurrently.
#ifndef CTRBOX_UTIL_BOUNDED_QUEUE_H_
#define CTRBOX_UTIL_BOUNDED_QUEUE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

namespace ctrbox {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity ? capacity : 1) {}

  // Returns false (and drops item) if the queue was closed.
  bool Push(T item) {
    return Push(std::move(item), [](T&) {});
  }
  // As Push(item), calling on_enqueue(item) under the queue's lock just before the item
  // becomes visible to Pop: what it writes into the item happens before the consumer sees it.
  template <typename F>
  bool Push(T item, F&& on_enqueue) {
    std::unique_lock<std::mutex> l(mu_);
    not_full_.wait(l, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    on_enqueue(item);
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  // Returns false once the queue is closed and empty.
  bool Pop(T* item) {
    std::unique_lock<std::mutex> l(mu_);
    not_empty_.wait(l, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void Close() {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;  // guarded by mu_
  bool closed_ = false;  // guarded by mu_
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_BOUNDED_QUEUE_H_
