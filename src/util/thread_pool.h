// ThreadPool: a fixed set of threads for data-parallel loops inside one training step.
//
// ParallelFor(n, fn) runs fn(task, thread) for every task in [0, n); tasks are claimed
// dynamically by the calling thread and the workers. The result of a computation must not
// depend on which thread runs a task (ctrbox's determinism rests on fixed task boundaries),
// and `thread` is only for choosing per-thread scratch space. Workers spin briefly, then
// sleep on a futex, so back-to-back loops of a training step cost microseconds (a pool made
// with Wait::kSleep sleeps at once).
//
// Thread safety: ParallelFor may be called from any thread; concurrent callers take turns
// (caller_mu_). It is not reentrant: a task must not call ParallelFor on its own pool with
// more than one task (that would wait for itself).
#ifndef CTRBOX_UTIL_THREAD_POOL_H_
#define CTRBOX_UTIL_THREAD_POOL_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ctrbox {

class ThreadPool {
 public:
  // REQUIRES: num_threads >= 1. Starts num_threads - 1 workers; the caller is thread 0.
  // before_join (tests only) is called by a worker that has seen a new loop, before it tries
  // to join it: a test holds a worker there to play one the OS has not scheduled.
  explicit ThreadPool(int num_threads, std::function<void(int thread)> before_join = {});
  // How an idle worker (and a caller waiting for its loop's workers) waits: spinning briefly
  // before it sleeps suits back-to-back loops of a training step; a pool whose loops are far
  // apart (the tiers' reads: one loop a pull) spins for nothing, on cores the other stages
  // need (its spinning was ~1 CPU-s of the 12 M-key 10 % job), so it sleeps at once.
  enum class Wait { kSpinThenSleep, kSleep };
  // Whose priority the workers run at: the thread that made the pool's (the default: a
  // thread's nice value is inherited), or the job's background threads' (util/sys.h
  // EnterBackground), for a pool made by a thread of the train stage for other work (the SSD
  // tier's write-back and readers).
  enum class Priority { kInherited, kBackground };
  // The same, its workers named `name` (util/sys.h SetThreadName; the caller keeps its own).
  ThreadPool(int num_threads, std::string name, Wait wait = Wait::kSpinThenSleep,
             Priority priority = Priority::kInherited);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  using TaskFn = std::function<void(size_t task, int thread)>;
  // Runs fn for all tasks and returns when every task has finished.
  void ParallelFor(size_t num_tasks, const TaskFn& fn) EXCLUDES(caller_mu_);

 private:
  ThreadPool(int num_threads, std::function<void(int thread)> before_join, std::string name,
             Wait wait, Priority priority);
  void WorkerLoop(int thread);
  void RunTasks(int thread);

  const std::function<void(int thread)> before_join_;
  const std::string name_;            // the workers' (empty: unnamed)
  const int spin_iterations_;         // before sleeping (Wait)
  const Priority priority_;           // the workers' (kBackground: EnterBackground as they start)
  std::vector<std::thread> workers_;  // immutable after construction
  // Held by the caller of a loop with workers, for the whole loop: one loop at a time.
  Mutex caller_mu_;
  // The current loop: written by the caller (holding caller_mu_) before generation_ is bumped,
  // read by the workers that joined it (state_), until they leave it.
  const TaskFn* fn_ = nullptr;
  size_t num_tasks_ = 0;
  std::atomic<size_t> next_task_{0};
  // Both words that threads wait on are 32 bits: libstdc++ waits on a word of that size with a
  // futex on its own address, but on a 64-bit one through a pool of 16 shared waiter slots, so
  // a loop of any pool woke every sleeping worker whose pool hashed to the same slot (the
  // tiers' 16 idle device readers woke ~3 000 times a second with the train pool's loops).
  std::atomic<uint32_t> generation_{0};  // bumped to start a loop (and to stop): workers wait on it
  // The loop's state: its generation's low 15 bits (bits 17-31), kClosed once the caller has
  // run out of tasks, and the workers that joined it and have not left (kJoinedMask). A worker
  // joins only an open loop, so a generation mistaken 2^15 loops later would still be safe.
  static constexpr uint32_t kGenerationShift = 17;
  static constexpr uint32_t kClosed = uint32_t{1} << 16;
  static constexpr uint32_t kJoinedMask = kClosed - 1;
  static uint32_t StateGeneration(uint32_t generation) { return generation << kGenerationShift; }
  std::atomic<uint32_t> state_{0};
  std::atomic<bool> stop_{false};
};

// Runs fn for every task on `pool`, or on the calling thread (as thread 0) when pool is null.
inline void RunParallel(ThreadPool* pool, size_t num_tasks, const ThreadPool::TaskFn& fn) {
  if (pool != nullptr) {
    pool->ParallelFor(num_tasks, fn);
  } else {
    for (size_t t = 0; t < num_tasks; ++t) fn(t, 0);
  }
}

// Runs f(i) for every i in [0, n) on `pool` (null: the calling thread), in chunks of `chunk`
// indices: a loop over many small items. f must not depend on which thread runs it.
template <class F>
void RunParallelRange(ThreadPool* pool, size_t n, F&& f, size_t chunk = 4096) {
  if (pool == nullptr || pool->num_threads() == 1 || n <= chunk) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  pool->ParallelFor((n + chunk - 1) / chunk, [&](size_t c, int) {
    const size_t end = std::min(n, (c + 1) * chunk);
    for (size_t i = c * chunk; i < end; ++i) f(i);
  });
}

// memcpy of `bytes` on `pool` (null: the calling thread), in chunks of 1 MiB. Not inline: CUDA
// sources call it too (an inline function holding a lambda, emitted by nvcc and by the C++
// compiler, may be merged with the other compiler's closure layout).
void ParallelCopy(ThreadPool* pool, void* dst, const void* src, size_t bytes);

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_THREAD_POOL_H_
