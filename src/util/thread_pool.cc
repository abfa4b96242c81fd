#include "util/thread_pool.h"

#include <cassert>

#if defined(__x86_64__)
#include <immintrin.h>
#define CTRBOX_PAUSE() _mm_pause()
#else
#define CTRBOX_PAUSE() std::this_thread::yield()
#endif

namespace ctrbox {
namespace {
constexpr int kSpinIterations = 4000;  // about 10-40 us of spinning before sleeping
}

ThreadPool::ThreadPool(int num_threads) {
  assert(num_threads >= 1);
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunTasks(int thread) {
  while (true) {
    size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    (*fn_)(task, thread);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  while (true) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinIterations && g == seen; ++i) {
      CTRBOX_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    RunTasks(thread);
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_workers_.notify_one();
  }
}

void ThreadPool::ParallelFor(size_t num_tasks, const TaskFn& fn) {
  if (num_tasks == 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (size_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  MutexLock caller(&caller_mu_);
  fn_ = &fn;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  RunTasks(0);
  // Every worker checks in, so none touches fn_ after we return.
  int busy = busy_workers_.load(std::memory_order_acquire);
  for (int i = 0; i < kSpinIterations && busy != 0; ++i) {
    CTRBOX_PAUSE();
    busy = busy_workers_.load(std::memory_order_acquire);
  }
  while (busy != 0) {
    busy_workers_.wait(busy, std::memory_order_acquire);
    busy = busy_workers_.load(std::memory_order_acquire);
  }
  fn_ = nullptr;
}

}  // namespace ctrbox
