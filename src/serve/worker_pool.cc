#include "serve/worker_pool.h"

namespace ctrbox {

WorkerPool::WorkerPool(int workers) {
  for (int i = 0; i < workers; ++i) workers_.push_back(std::make_unique<Worker>(&mu_));
  for (auto& w : workers_) threads_.emplace_back([this, w = w.get()] { Loop(w); });
}

WorkerPool::~WorkerPool() { Join(); }

void WorkerPool::Post(std::function<void()> task) {
  Worker* w;
  {
    MutexLock l(&mu_);
    if (idle_.empty()) {
      queue_.push_back(std::move(task));
      return;
    }
    w = idle_.back();  // the one that went idle last: its caches are the warmest
    idle_.pop_back();
    w->task = std::move(task);
  }
  w->cv.Signal();
}

size_t WorkerPool::idle() const {
  MutexLock l(&mu_);
  return idle_.size();
}

void WorkerPool::Join() {
  {
    MutexLock l(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    for (Worker* w : idle_) w->cv.Signal();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void WorkerPool::Loop(Worker* self) {
  mu_.Lock();
  while (true) {
    std::function<void()> task;
    if (self->task) {
      task = std::move(self->task);
      self->task = nullptr;
    } else if (!queue_.empty()) {
      task = std::move(queue_.front());
      queue_.pop_front();
    } else if (stopping_) {
      mu_.Unlock();
      return;
    } else {
      idle_.push_back(self);
      while (self->task == nullptr && !stopping_) self->cv.Wait(&mu_);
      if (!self->task) {  // stopping: leave the idle list, then finish the queue
        std::erase(idle_, self);
      }
      continue;
    }
    mu_.Unlock();
    task();
    task = nullptr;  // (its captures released outside the lock)
    mu_.Lock();
  }
}

}  // namespace ctrbox
