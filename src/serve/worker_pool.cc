#include "serve/worker_pool.h"

namespace ctrbox {

WorkerPool::WorkerPool(int workers) {
  for (int i = 0; i < workers; ++i) workers_.push_back(std::make_unique<Worker>());
  for (auto& w : workers_) threads_.emplace_back([this, w = w.get()] { Loop(w); });
}

WorkerPool::~WorkerPool() { Join(); }

void WorkerPool::Post(std::function<void()> task) {
  std::unique_lock<std::mutex> l(mu_);
  if (idle_.empty()) {
    queue_.push_back(std::move(task));
    return;
  }
  Worker* w = idle_.back();  // the one that went idle last: its caches are the warmest
  idle_.pop_back();
  w->task = std::move(task);
  l.unlock();
  w->cv.notify_one();
}

void WorkerPool::Join() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    for (Worker* w : idle_) w->cv.notify_one();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void WorkerPool::Loop(Worker* self) {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    std::function<void()> task;
    if (self->task) {
      task = std::move(self->task);
      self->task = nullptr;
    } else if (!queue_.empty()) {
      task = std::move(queue_.front());
      queue_.pop_front();
    } else if (stopping_) {
      return;
    } else {
      idle_.push_back(self);
      self->cv.wait(l, [&] { return self->task != nullptr || stopping_; });
      if (!self->task) {  // stopping: leave the idle list, then finish the queue
        std::erase(idle_, self);
      }
      continue;
    }
    l.unlock();
    task();
    task = nullptr;  // (its captures released outside the lock)
    l.lock();
  }
}

}  // namespace ctrbox
