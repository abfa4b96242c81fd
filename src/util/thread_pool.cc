#include "util/thread_pool.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "util/sys.h"

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

ThreadPool::ThreadPool(int num_threads, std::function<void(int thread)> before_join)
    : ThreadPool(num_threads, std::move(before_join), std::string(), Wait::kSpinThenSleep,
                 Priority::kInherited) {}

ThreadPool::ThreadPool(int num_threads, std::string name, Wait wait, Priority priority)
    : ThreadPool(num_threads, {}, std::move(name), wait, priority) {}

ThreadPool::ThreadPool(int num_threads, std::function<void(int thread)> before_join,
                       std::string name, Wait wait, Priority priority)
    : before_join_(std::move(before_join)),
      name_(std::move(name)),
      spin_iterations_(wait == Wait::kSleep ? 0 : kSpinIterations),
      priority_(priority) {
  assert(num_threads >= 1 && static_cast<uint32_t>(num_threads) <= kJoinedMask);
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
  if (!name_.empty()) SetThreadName(name_);
  if (priority_ == Priority::kBackground) EnterBackground();
  uint32_t seen = 0;
  while (true) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < spin_iterations_ && g == seen; ++i) {
      CTRBOX_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    if (before_join_) before_join_(thread);
    // Join loop g, unless its caller has closed it (it ran the tasks itself meanwhile: this
    // worker was not scheduled in time) or has gone on to another loop.
    uint32_t s = state_.load(std::memory_order_acquire);
    bool joined = false;
    while (!joined && (s & ~(kClosed | kJoinedMask)) == StateGeneration(g) && (s & kClosed) == 0) {
      joined = state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                            std::memory_order_acquire);
    }
    if (!joined) continue;
    RunTasks(thread);
    const uint32_t left = state_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if ((left & kClosed) != 0 && (left & kJoinedMask) == 0) state_.notify_one();
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
  const uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  state_.store(StateGeneration(g), std::memory_order_release);  // open, nobody joined
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();
  RunTasks(0);
  // Close the loop: a worker that has not joined yet will not (so it never touches fn_ after
  // we return), and those that joined are waited for. Waiting for every worker to check in,
  // as before, held a loop up for a worker the OS had not scheduled (the tiers' threads share
  // the cores), after the caller had run all the tasks.
  uint32_t s = state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
  for (int i = 0; i < spin_iterations_ && (s & kJoinedMask) != 0; ++i) {
    CTRBOX_PAUSE();
    s = state_.load(std::memory_order_acquire);
  }
  while ((s & kJoinedMask) != 0) {
    state_.wait(s, std::memory_order_acquire);
    s = state_.load(std::memory_order_acquire);
  }
  fn_ = nullptr;
}

void ParallelCopy(ThreadPool* pool, void* dst, const void* src, size_t bytes) {
  constexpr size_t kChunk = size_t{1} << 20;
  if (pool == nullptr || pool->num_threads() == 1 || bytes <= 2 * kChunk) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  pool->ParallelFor((bytes + kChunk - 1) / kChunk, [&](size_t c, int) {
    const size_t at = c * kChunk;
    std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at,
                std::min(kChunk, bytes - at));
  });
}

}  // namespace ctrbox
